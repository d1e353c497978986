//! Errors as gRPC statuses: the one mapping from the project's error [`Code`]s to gRPC
//! status codes, the counterpart of the HTTP statuses in [`crate::server::error`].
//!
//! The message is the one the HTTP body would carry (internal details stay in the
//! server log, as over HTTP), and the stable code travels in the `x-sluice-code`
//! metadata of the status, as `code` does in the HTTP body.

use sluice_host_api::Code;
use tonic::Status;
use tonic::metadata::MetadataValue;

use crate::platform::PlatformError;
use crate::server::error::HttpError;

/// The metadata key of the project's error code on every error status.
pub const CODE_KEY: &str = "x-sluice-code";

/// The gRPC status code of an error code.
pub fn grpc_code(code: Code) -> tonic::Code {
    match code {
        Code::InvalidRequest
        | Code::InvalidInput
        | Code::InvalidName
        | Code::InvalidComponent
        | Code::UnsupportedMediaType => tonic::Code::InvalidArgument,
        Code::ComponentLimitExceeded => tonic::Code::InvalidArgument,
        Code::HostApiUnsupported => tonic::Code::InvalidArgument,
        Code::Unauthorized => tonic::Code::Unauthenticated,
        Code::Forbidden => tonic::Code::PermissionDenied,
        Code::NotFound => tonic::Code::NotFound,
        Code::MethodNotAllowed => tonic::Code::Unimplemented,
        Code::AlreadyExists => tonic::Code::AlreadyExists,
        // Over the size limit, over a concurrency limit, over a memory limit: the
        // request needs a resource that is used up (gRPC's own code for an oversize
        // message is the same).
        Code::PayloadTooLarge
        | Code::TenantConcurrencyLimit
        | Code::ConcurrencyLimit
        | Code::MemoryLimitExceeded
        | Code::InsufficientDeviceMemory
        | Code::QuotaExceeded => tonic::Code::ResourceExhausted,
        // Over a watching limit, over the tenant's host memory for requests.
        Code::StatusRateLimit | Code::LiveFeedLimit | Code::HostMemoryBudget | Code::DecodedTooLarge => {
            tonic::Code::ResourceExhausted
        }
        Code::ShuttingDown => tonic::Code::Unavailable,
        Code::InstancePoolExhausted | Code::RegistryUnavailable => tonic::Code::Unavailable,
        Code::Timeout => tonic::Code::DeadlineExceeded,
        Code::Cancelled => tonic::Code::Cancelled,
        // Uploads are HTTP-only; mapped for completeness.
        Code::TooManyUploads | Code::DiskQuotaExceeded => tonic::Code::ResourceExhausted,
        Code::UploadStalled => tonic::Code::DeadlineExceeded,
        Code::FunctionFailed
        | Code::FunctionTrapped
        | Code::Internal
        | Code::Storage
        | Code::Corrupt
        | Code::DataDirInUse
        | Code::OutputTooLarge
        | Code::TransferTooLarge => tonic::Code::Internal,
    }
}

/// The status of an error: its code's gRPC code, its message, and the code as metadata.
pub fn status(error: HttpError) -> Status {
    let mut status = Status::new(grpc_code(error.code), error.message);
    status.metadata_mut().insert(CODE_KEY, MetadataValue::from_static(error.code.as_str()));
    status
}

/// The status of a platform error (through [`HttpError`], which decides what of it a
/// client may see).
pub fn platform_status(error: PlatformError) -> Status {
    status(HttpError::from(error))
}

/// An `invalid_request` status.
pub fn bad_request(message: impl Into<String>) -> Status {
    status(HttpError::bad_request(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_maps_to_the_grpc_code_of_its_http_status_class() {
        for code in Code::ALL {
            let grpc = grpc_code(code);
            let expected: &[tonic::Code] = match code.status() {
                400 => &[tonic::Code::InvalidArgument],
                401 => &[tonic::Code::Unauthenticated],
                403 => &[tonic::Code::PermissionDenied],
                404 => &[tonic::Code::NotFound],
                405 => &[tonic::Code::Unimplemented],
                409 => &[tonic::Code::AlreadyExists],
                413 | 429 => &[tonic::Code::ResourceExhausted],
                415 => &[tonic::Code::InvalidArgument],
                408 => &[tonic::Code::DeadlineExceeded],
                499 => &[tonic::Code::Cancelled],
                500 | 502 => &[tonic::Code::Internal, tonic::Code::ResourceExhausted],
                503 => &[tonic::Code::Unavailable, tonic::Code::ResourceExhausted],
                504 => &[tonic::Code::DeadlineExceeded],
                other => panic!("{code}: status {other} has no gRPC class in this test"),
            };
            assert!(expected.contains(&grpc), "{code} (HTTP {}) maps to {grpc:?}", code.status());
        }
    }

    #[test]
    fn the_codes_clients_branch_on_are_the_conventional_ones() {
        assert_eq!(grpc_code(Code::Unauthorized), tonic::Code::Unauthenticated);
        assert_eq!(grpc_code(Code::Forbidden), tonic::Code::PermissionDenied);
        assert_eq!(grpc_code(Code::NotFound), tonic::Code::NotFound);
        assert_eq!(grpc_code(Code::TenantConcurrencyLimit), tonic::Code::ResourceExhausted);
        assert_eq!(grpc_code(Code::PayloadTooLarge), tonic::Code::ResourceExhausted);
        assert_eq!(grpc_code(Code::ShuttingDown), tonic::Code::Unavailable);
        assert_eq!(grpc_code(Code::Timeout), tonic::Code::DeadlineExceeded);
        assert_eq!(grpc_code(Code::FunctionTrapped), tonic::Code::Internal);
    }

    #[test]
    fn a_status_carries_the_message_and_the_stable_code() {
        let s = status(HttpError::new(Code::Timeout, "the function ran past 2000 ms"));
        assert_eq!(s.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(s.message(), "the function ran past 2000 ms");
        assert_eq!(s.metadata().get(CODE_KEY).unwrap(), "timeout");
    }

    #[test]
    fn internal_details_stay_out_of_the_status() {
        let e = PlatformError::internal("a secret path /var/x", std::io::Error::other("disk on fire"));
        let s = platform_status(e);
        assert_eq!(s.code(), tonic::Code::Internal);
        assert!(!s.message().contains("secret") && !s.message().contains("fire"), "{}", s.message());
    }
}
