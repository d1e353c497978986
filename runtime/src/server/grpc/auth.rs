//! API keys over gRPC: the `authorization` metadata, `Bearer <key>` (the scheme in any
//! case), checked like the HTTP `Authorization` header ([`crate::server`]'s extractors):
//! a missing, malformed, unknown or revoked key is UNAUTHENTICATED, the admin key on a
//! tenant's call PERMISSION_DENIED.

use sluice_registry::Principal;
use tonic::Status;
use tonic::metadata::MetadataMap;

use super::status::{platform_status, status};
use crate::platform::Platform;
use crate::server::error::HttpError;

/// The key in `Bearer <key>`, if the value has that form.
pub fn bearer_key(value: &str) -> Option<&str> {
    let (scheme, key) = value.trim().split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

/// Any valid key's principal.
pub fn caller(platform: &Platform, metadata: &MetadataMap) -> Result<Principal, Status> {
    let Some(value) = metadata.get("authorization") else {
        return Err(status(HttpError::unauthorized("missing API key: send `authorization: Bearer <key>` metadata")));
    };
    let key =
        value.to_str().ok().and_then(bearer_key).ok_or_else(|| {
            status(HttpError::unauthorized("malformed authorization metadata: expected `Bearer <key>`"))
        })?;
    match platform.authenticate(key).map_err(platform_status)? {
        Some(principal) => Ok(principal),
        None => Err(status(HttpError::unauthorized("unknown or revoked API key"))),
    }
}

/// The calling tenant (the admin key owns no models).
pub fn tenant(platform: &Platform, metadata: &MetadataMap) -> Result<String, Status> {
    match caller(platform, metadata)? {
        Principal::Tenant(id) => Ok(id),
        Principal::Admin => {
            Err(status(HttpError::forbidden("the admin key manages tenants and has no models; use a tenant's API key")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_is_case_insensitive_and_the_key_required() {
        assert_eq!(bearer_key("Bearer abc"), Some("abc"));
        assert_eq!(bearer_key("bearer abc"), Some("abc"));
        assert_eq!(bearer_key("BEARER  abc "), Some("abc"));
        assert_eq!(bearer_key("Basic abc"), None);
        assert_eq!(bearer_key("Bearer "), None);
        assert_eq!(bearer_key("abc"), None);
    }
}
