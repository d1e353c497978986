//! Bearer-key authentication as axum extractors.
//!
//! [`Caller`] accepts any valid key, [`TenantCaller`] only a tenant's key (the admin key
//! gets 403: it manages tenants and owns no functions), [`AdminCaller`] only the admin
//! key (a tenant key gets 403). A missing or unknown key is 401. Keys are looked up by
//! their sha256 in the registry; plaintext keys are never stored. [`StreamCaller`] is
//! [`Caller`] for a response that stays open (a live feed): it keeps a [`KeyCheck`] to
//! end the stream once the key is revoked.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sluice_registry::Principal;

use super::error::HttpError;
use crate::platform::{KeyCheck, Platform};

/// Any authenticated caller.
pub struct Caller(pub Principal);

/// Any authenticated caller of a stream, with its key to check again while it is open.
pub struct StreamCaller(pub KeyCheck);

/// A tenant, by id.
pub struct TenantCaller(pub String);

/// The operator.
pub struct AdminCaller;

/// A caller of the repository extension: any key, or, with
/// `PlatformConfig::keyless_local_repository`, no key from a local process (KServe's
/// model agent in the same pod), which acts as the admin. A request that a proxy
/// forwarded (`Forwarded`, `X-Forwarded-For`: Knative's queue-proxy, for one) is never
/// local, whatever its peer address.
pub struct RepositoryCaller(pub Principal);

impl FromRequestParts<Arc<Platform>> for Caller {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, platform: &Arc<Platform>) -> Result<Self, HttpError> {
        match platform.authenticate(key_of(&parts.headers)?)? {
            Some(principal) => Ok(Caller(principal)),
            None => Err(HttpError::unauthorized(UNKNOWN_KEY)),
        }
    }
}

impl FromRequestParts<Arc<Platform>> for StreamCaller {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, platform: &Arc<Platform>) -> Result<Self, HttpError> {
        match platform.authenticate_stream(key_of(&parts.headers)?)? {
            Some(check) => Ok(StreamCaller(check)),
            None => Err(HttpError::unauthorized(UNKNOWN_KEY)),
        }
    }
}

const UNKNOWN_KEY: &str = "unknown or revoked API key";

/// The key of the request's `Authorization: Bearer <key>` header.
pub(super) fn key_of(headers: &HeaderMap) -> Result<&str, HttpError> {
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Err(HttpError::unauthorized("missing API key: send `Authorization: Bearer <key>`"));
    };
    value
        .to_str()
        .ok()
        .and_then(bearer_token)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| HttpError::unauthorized("malformed Authorization header: expected `Bearer <key>`"))
}

/// The token of an `Authorization: Bearer <token>` value; the scheme is
/// case-insensitive (RFC 9110 §11.1), so `bearer` and `BEARER` work too.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl FromRequestParts<Arc<Platform>> for RepositoryCaller {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, platform: &Arc<Platform>) -> Result<Self, HttpError> {
        if platform.config().keyless_local_repository && !parts.headers.contains_key(AUTHORIZATION) && is_local(parts) {
            return Ok(RepositoryCaller(Principal::Admin));
        }
        Ok(RepositoryCaller(Caller::from_request_parts(parts, platform).await?.0))
    }
}

/// Whether the request came from this host's loopback interface, not through a proxy.
fn is_local(parts: &Parts) -> bool {
    let forwarded = ["forwarded", "x-forwarded-for", "x-real-ip"].iter().any(|h| parts.headers.contains_key(*h));
    let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip());
    !forwarded && peer.is_some_and(|ip| ip.is_loopback())
}

impl FromRequestParts<Arc<Platform>> for TenantCaller {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, platform: &Arc<Platform>) -> Result<Self, HttpError> {
        match Caller::from_request_parts(parts, platform).await?.0 {
            Principal::Tenant(id) => Ok(TenantCaller(id)),
            Principal::Admin => {
                Err(HttpError::forbidden("the admin key manages tenants and has no functions; use a tenant's API key"))
            }
        }
    }
}

impl FromRequestParts<Arc<Platform>> for AdminCaller {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, platform: &Arc<Platform>) -> Result<Self, HttpError> {
        match Caller::from_request_parts(parts, platform).await?.0 {
            Principal::Admin => Ok(AdminCaller),
            Principal::Tenant(_) => Err(HttpError::forbidden("this endpoint needs the admin key")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_scheme_is_case_insensitive() {
        for v in ["Bearer k1", "bearer k1", "BEARER k1", "BeArEr   k1 "] {
            assert_eq!(bearer_token(v), Some("k1"), "{v:?}");
        }
        for v in ["Basic k1", "Bearerk1", "k1", "Bear k1"] {
            assert_eq!(bearer_token(v), None, "{v:?}");
        }
    }
}
