//! The one place where errors become HTTP responses.
//!
//! Every handler returns [`HttpError`]: a stable [`Code`] and a message. Its status is
//! [`Code::status`] and nothing else; every error body is
//! `{"error": "<human message>", "code": "<stable code>"}` (compatible with the Open
//! Inference Protocol's `{"error": ...}`). 429 and 503 carry `Retry-After`, 401 carries
//! `WWW-Authenticate: Bearer`. `docs/openapi.yaml` documents every code with its status
//! (the test below walks [`Code::ALL`] against it). The status of each code:
//!
//! | status | codes |
//! |---|---|
//! | 400 | `invalid_request`, `invalid_input`, `invalid_name`, `invalid_component`, `component_limit_exceeded`, `host_api_unsupported` |
//! | 401 | `unauthorized` |
//! | 403 | `forbidden` |
//! | 404 | `not_found` |
//! | 405 | `method_not_allowed` |
//! | 409 | `already_exists` |
//! | 413 | `payload_too_large` |
//! | 415 | `unsupported_media_type` |
//! | 429 | `tenant_concurrency_limit`, `concurrency_limit`, `quota_exceeded` (with `Retry-After`) |
//! | 500 | `function_failed`, `function_trapped`, `memory_limit_exceeded`, `internal`, `storage`, `corrupt`, `data_dir_in_use` |
//! | 502 | `output_too_large`, `transfer_too_large` |
//! | 503 | `shutting_down`, `insufficient_device_memory` (no device can hold the weights), `instance_pool_exhausted`, `registry_unavailable` (the shared registry cannot be reached) |
//! | 504 | `timeout` |

use axum::Json;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sluice_host_api::Code;

use crate::platform::PlatformError;

/// Seconds a client is told to wait after a 429.
pub const RETRY_AFTER_S: u64 = 1;

/// An error response: a stable code and a message for the client.
#[derive(Debug)]
pub struct HttpError {
    pub code: Code,
    pub message: String,
}

impl HttpError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        HttpError { code, message: message.into() }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(Code::Unauthorized, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(Code::Forbidden, message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidRequest, message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(Code::PayloadTooLarge, format!("request body is larger than this endpoint's limit of {limit} bytes"))
    }

    /// The response's status: the code's.
    pub fn status(&self) -> StatusCode {
        status_of(self.code)
    }
}

/// The HTTP status of a code.
pub fn status_of(code: Code) -> StatusCode {
    StatusCode::from_u16(code.status()).expect("every code's status is a valid HTTP status")
}

impl From<crate::platform::HostMemoryRefusal> for HttpError {
    fn from(e: crate::platform::HostMemoryRefusal) -> Self {
        PlatformError::from(e).into()
    }
}

impl From<PlatformError> for HttpError {
    fn from(e: PlatformError) -> Self {
        let code = e.code();
        if code == Code::RegistryUnavailable {
            // Not the client's doing and not a bug: the operator sees why once in a while,
            // the client what to do.
            tracing::warn!(error = %e, "the registry cannot be reached");
            return HttpError::new(
                code,
                "the platform's registry cannot be reached: functions already loaded still serve, \
                 changes and first loads wait for it; retry later",
            );
        }
        if e.is_internal() {
            // Operator detail stays in the log; the client gets the code.
            tracing::error!(code = code.as_str(), error = %e, "internal error");
            return HttpError::new(code, "internal error (details are in the server log)");
        }
        // A client's mistake (or a guest's failure) is the client's business, not an
        // operator's alarm: any tenant could bury real errors under them.
        tracing::debug!(code = code.as_str(), error = %e, "request refused");
        HttpError::new(code, e.to_string())
    }
}

macro_rules! from_rejection {
    ($($t:ty),*) => {$(
        impl From<$t> for HttpError {
            fn from(r: $t) -> Self {
                // Too large and wrong media type keep their status; every other
                // malformed request (bad JSON, wrong fields, bad query) is a 400.
                let code = match r.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => Code::PayloadTooLarge,
                    StatusCode::UNSUPPORTED_MEDIA_TYPE => Code::UnsupportedMediaType,
                    _ => Code::InvalidRequest,
                };
                HttpError::new(code, r.body_text())
            }
        }
    )*};
}
from_rejection!(BytesRejection, JsonRejection, PathRejection, QueryRejection);

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (status, Json(json!({ "error": self.message, "code": self.code.as_str() }))).into_response();
        let headers = response.headers_mut();
        match status {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
            }
            StatusCode::UNAUTHORIZED => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

/// JSON 404 for unknown routes.
pub async fn no_route() -> HttpError {
    HttpError::new(Code::NotFound, "no such endpoint")
}

/// JSON 405 for known routes with the wrong method.
pub async fn wrong_method() -> HttpError {
    HttpError::new(Code::MethodNotAllowed, "method not allowed on this endpoint")
}

/// Runs a tenant's blocking control-plane work (disk, registry, compilation: deploys,
/// uploads, listings) on the background pool, in the idle scheduling class, so no
/// tenant's control plane takes a core from anyone's invocations
/// (`background::spawn_blocking`); a failure of the task itself (a panic)
/// becomes an internal error. Handlers `.await?` it, which maps the error here, like
/// every other.
///
/// The work starts at once, not when the future is first polled, so a handler can feed
/// it (a streamed body) before awaiting its result.
pub fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, PlatformError> + Send + 'static,
) -> impl Future<Output = Result<T, PlatformError>> {
    joined(crate::background::spawn_blocking(f))
}

/// Like [`blocking`], at the process's own priority, for the admin's management of
/// tenants and keys: the operator can always act (revoke a key, delete a tenant), however
/// busy the cores are with invocations.
pub fn blocking_for_admin<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, PlatformError> + Send + 'static,
) -> impl Future<Output = Result<T, PlatformError>> {
    joined(tokio::task::spawn_blocking(f))
}

async fn joined<T>(task: tokio::task::JoinHandle<Result<T, PlatformError>>) -> Result<T, PlatformError> {
    task.await.map_err(|e| PlatformError::internal("a blocking task failed", e))?
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// `docs/openapi.yaml`'s error table: code → status, from its
    /// `| status | `code`[, `code`…] | when |` rows.
    fn documented_codes() -> BTreeMap<String, u16> {
        let spec = include_str!("../../../docs/openapi.yaml");
        let mut codes = BTreeMap::new();
        for line in spec.lines() {
            let cells: Vec<&str> = line.trim().split('|').map(str::trim).collect();
            let [_, status, names, _when, _] = cells.as_slice() else { continue };
            let Ok(status) = status.parse::<u16>() else { continue };
            for name in names.split(',') {
                let name = name.trim().trim_matches('`');
                let previous = codes.insert(name.to_owned(), status);
                assert!(previous.is_none(), "{name} documented twice");
            }
        }
        codes
    }

    #[test]
    fn every_code_is_documented_with_its_status() {
        let documented = documented_codes();
        for code in Code::ALL {
            assert_eq!(
                documented.get(code.as_str()),
                Some(&code.status()),
                "docs/openapi.yaml must document `{code}` with status {}",
                code.status()
            );
        }
        for name in documented.keys() {
            assert!(Code::parse(name).is_some(), "docs/openapi.yaml documents `{name}`, which is no code");
        }
    }

    #[test]
    fn the_error_schema_lists_every_code() {
        let spec = include_str!("../../../docs/openapi.yaml");
        let line = spec.lines().find(|l| l.contains("code: { type: string, enum: [")).expect("Error.code enum");
        let listed = line.split("enum: [").nth(1).and_then(|r| r.split(']').next()).expect("enum list");
        let listed: Vec<&str> = listed.split(',').map(str::trim).collect();
        let all: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(listed, all);
    }

    #[test]
    fn statuses_and_headers_follow_the_code() {
        let r = HttpError::new(Code::TenantConcurrencyLimit, "busy").into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        let r = HttpError::unauthorized("no key").into_response();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let r = HttpError::new(Code::Timeout, "slow").into_response();
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
    }
}
