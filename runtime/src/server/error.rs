//! The one place where errors become HTTP responses.
//!
//! Every handler returns [`ApiError`]; every error body is
//! `{"error": "<human message>", "code": "<stable code>"}` (compatible with the Open
//! Inference Protocol's `{"error": ...}`). The status of each code:
//!
//! | status | codes |
//! |---|---|
//! | 400 | `invalid_request`, `invalid_input`, `invalid_name`, `invalid_component` |
//! | 401 | `unauthorized` |
//! | 403 | `forbidden` |
//! | 404 | `not_found` |
//! | 405 | `method_not_allowed` |
//! | 409 | `already_exists` |
//! | 413 | `payload_too_large` |
//! | 415 | `unsupported_media_type` |
//! | 429 | `tenant_concurrency_limit`, `concurrency_limit` (with `Retry-After`) |
//! | 500 | `function_failed`, `function_trapped`, `memory_limit_exceeded`, `internal`, `storage`, `corrupt` |
//! | 502 | `output_too_large` |
//! | 503 | `shutting_down`, `insufficient_device_memory` (no device can hold the weights) |
//! | 504 | `timeout` |

use axum::Json;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::platform::PlatformError;

/// Seconds a client is told to wait after a 429.
pub const RETRY_AFTER_S: u64 = 1;

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body is larger than this endpoint's limit of {limit} bytes"),
        )
    }

    /// The status of a stable code (the table in the module docs).
    fn status_of(code: &str) -> StatusCode {
        match code {
            "invalid_request" | "invalid_input" | "invalid_name" | "invalid_component" => StatusCode::BAD_REQUEST,
            "unauthorized" => StatusCode::UNAUTHORIZED,
            "forbidden" => StatusCode::FORBIDDEN,
            "not_found" => StatusCode::NOT_FOUND,
            "method_not_allowed" => StatusCode::METHOD_NOT_ALLOWED,
            "already_exists" => StatusCode::CONFLICT,
            "unsupported_media_type" => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "payload_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
            "tenant_concurrency_limit" | "concurrency_limit" => StatusCode::TOO_MANY_REQUESTS,
            "output_too_large" => StatusCode::BAD_GATEWAY,
            "shutting_down" | "insufficient_device_memory" => StatusCode::SERVICE_UNAVAILABLE,
            "timeout" => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<PlatformError> for ApiError {
    fn from(e: PlatformError) -> Self {
        let code = e.code();
        let status = ApiError::status_of(code);
        let hidden = match &e {
            PlatformError::Registry(r) => !r.is_client_error(),
            PlatformError::Internal(_) => true,
            _ => false,
        };
        if hidden {
            // Operator detail stays in the log; the client gets the code.
            tracing::error!(code, error = %e, "internal error");
            return ApiError::new(status, code, "internal error (details are in the server log)");
        }
        ApiError::new(status, code, e.to_string())
    }
}

macro_rules! from_rejection {
    ($($t:ty),*) => {$(
        impl From<$t> for ApiError {
            fn from(r: $t) -> Self {
                // Too large and wrong media type keep their status; every other
                // malformed request (bad JSON, wrong fields, bad query) is a 400.
                let (status, code) = match r.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
                    StatusCode::UNSUPPORTED_MEDIA_TYPE => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
                    _ => (StatusCode::BAD_REQUEST, "invalid_request"),
                };
                ApiError::new(status, code, r.body_text())
            }
        }
    )*};
}
from_rejection!(BytesRejection, JsonRejection, PathRejection, QueryRejection);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(json!({ "error": self.message, "code": self.code }))).into_response();
        let headers = response.headers_mut();
        match self.status {
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
pub async fn no_route() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

/// JSON 405 for known routes with the wrong method.
pub async fn wrong_method() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed on this endpoint")
}
