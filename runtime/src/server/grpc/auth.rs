//! API keys over gRPC: the `authorization` metadata, `Bearer <key>` (the scheme in any
//! case), checked like the HTTP `Authorization` header ([`crate::server`]'s extractors):
//! a missing, malformed, unknown or revoked key is UNAUTHENTICATED, the admin key on a
//! tenant's call PERMISSION_DENIED. A stream keeps its key's [`KeyCheck`] ([`stream_tenant`])
//! to end with UNAUTHENTICATED once the key is revoked.

use sluice_registry::Principal;
use tonic::Status;
use tonic::metadata::MetadataMap;

use super::status::{platform_status, status};
use crate::platform::{KeyCheck, Platform};
use crate::server::error::HttpError;

/// The key in `Bearer <key>`, if the value has that form.
pub fn bearer_key(value: &str) -> Option<&str> {
    let (scheme, key) = value.trim().split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

/// The key of the `authorization` metadata.
fn key_of(metadata: &MetadataMap) -> Result<&str, Status> {
    let Some(value) = metadata.get("authorization") else {
        return Err(status(HttpError::unauthorized("missing API key: send `authorization: Bearer <key>` metadata")));
    };
    value
        .to_str()
        .ok()
        .and_then(bearer_key)
        .ok_or_else(|| status(HttpError::unauthorized("malformed authorization metadata: expected `Bearer <key>`")))
}

/// An unknown or revoked key's status.
pub fn unknown_key() -> Status {
    status(HttpError::unauthorized("unknown or revoked API key"))
}

/// Any valid key's principal.
pub fn caller(platform: &Platform, metadata: &MetadataMap) -> Result<Principal, Status> {
    platform.authenticate(key_of(metadata)?).map_err(platform_status)?.ok_or_else(unknown_key)
}

/// The tenant of `principal` (the admin key owns no models).
fn tenant_of(principal: &Principal) -> Result<String, Status> {
    match principal {
        Principal::Tenant(id) => Ok(id.clone()),
        Principal::Admin => {
            Err(status(HttpError::forbidden("the admin key manages tenants and has no models; use a tenant's API key")))
        }
    }
}

/// The calling tenant (the admin key owns no models).
pub fn tenant(platform: &Platform, metadata: &MetadataMap) -> Result<String, Status> {
    tenant_of(&caller(platform, metadata)?)
}

/// The calling tenant of a stream, with its key to check again while the stream is open.
pub fn stream_tenant(platform: &Platform, metadata: &MetadataMap) -> Result<(String, KeyCheck), Status> {
    let check = platform.authenticate_stream(key_of(metadata)?).map_err(platform_status)?.ok_or_else(unknown_key)?;
    Ok((tenant_of(check.principal())?, check))
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
