//! The HTTP API's stable error codes, each with its HTTP status.
//!
//! Every error body the server sends is `{"error": "<message>", "code": "<code>"}`, and
//! the code is one of [`Code`]'s variants written in snake_case ([`Code::as_str`]). The
//! registry, the engine and the platform each say which code their errors carry
//! (`code()` on their error types); the server turns a code into a status with
//! [`Code::status`] and nothing else. The enum lives here, in the crate every side of
//! the contract shares, so the registry and the runtime name the same codes without
//! depending on each other. `docs/openapi.yaml` documents every code with its status
//! (a test of the runtime walks [`Code::ALL`] against it).
//!
//! These are not the guest-visible [`crate::ErrorCode`]s of the WIT API: a host call
//! refused with `shape-mismatch` is the guest's business; what reaches HTTP is what the
//! function made of it (`function_failed`, …).

use std::fmt;

/// A stable machine-readable error code of the HTTP API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// Malformed request: bad JSON, wrong tensor shapes or datatypes, bad query parameters.
    InvalidRequest,
    /// The function refused its inputs, or an option is out of range.
    InvalidInput,
    /// A tenant, function or artifact name breaks the naming rules.
    InvalidName,
    /// The upload is not a usable component of the `inference` world.
    InvalidComponent,
    /// Missing, malformed, unknown or revoked API key.
    Unauthorized,
    /// The key is valid but not for this endpoint.
    Forbidden,
    /// Unknown function, tenant, key, version or route.
    NotFound,
    /// Wrong method on a known route.
    MethodNotAllowed,
    /// The name is taken.
    AlreadyExists,
    /// The body is above the endpoint's limit.
    PayloadTooLarge,
    /// The body's content type is not accepted.
    UnsupportedMediaType,
    /// The tenant's in-flight limit is reached; retry later.
    TenantConcurrencyLimit,
    /// The server's in-flight limit is reached; retry later.
    ConcurrencyLimit,
    /// The guest returned an error.
    FunctionFailed,
    /// The guest trapped.
    FunctionTrapped,
    /// The guest's linear memory hit the function's memory limit.
    MemoryLimitExceeded,
    /// A bug or an environment failure (details only in the server log).
    Internal,
    /// The disk or the database failed (details only in the server log).
    Storage,
    /// Stored data failed a consistency check (details only in the server log).
    Corrupt,
    /// Another process holds the data directory (a start-up failure).
    DataDirInUse,
    /// The function returned more output than allowed.
    OutputTooLarge,
    /// The function passed more bytes to the host in one call (its outputs, or one
    /// upload) than the function's output limit plus 1 MiB; it was stopped there.
    TransferTooLarge,
    /// The server is draining.
    ShuttingDown,
    /// The shared registry (PostgreSQL) cannot be reached: functions already loaded keep
    /// serving, but changes and loads wait for it to return (503, retry later).
    RegistryUnavailable,
    /// No device has room for the function's weights.
    InsufficientDeviceMemory,
    /// The invocation exceeded the function's time limit.
    Timeout,
    /// A device-memory quota (the tenant's, or the device's memory less its headroom)
    /// or the invocation's limit on live tensor handles is full. 429: the tenant's
    /// quota and the device's memory are shared with its and others' invocations in
    /// flight, so the same request can succeed once they finish (a request that alone
    /// needs more never will; the message names the limit).
    QuotaExceeded,
    /// The caller went away (closed its connection) before the invocation finished; the
    /// invocation was stopped. 499, nginx's "client closed request": nobody reads it but logs.
    Cancelled,
    /// The tenant called `GET /v1/status` faster than its rate limit allows; retry later.
    StatusRateLimit,
    /// The tenant has as many live feeds open as it may; close one or retry later.
    LiveFeedLimit,
    /// The tenant's host-memory budget for decoding requests and encoding responses is
    /// in use by its other requests; retry later.
    HostMemoryBudget,
    /// Decoding the request (or encoding its response) needs more host memory than the
    /// tenant's whole budget: it never fits (send binary tensor data, or less).
    DecodedTooLarge,
    /// The component needs more core instances, linear memories or tables than one
    /// component may have (`--max-core-instances-per-component`,
    /// `--max-memories-per-component`, `--max-tables-per-component`); the message
    /// names the limit. Refused at deploy, before it is compiled.
    ComponentLimitExceeded,
    /// No slot of the instance pool was free for a fresh instance (every slot is held
    /// by invocations in flight); retry later.
    InstancePoolExhausted,
    /// The tenant has as many artifact uploads in flight as its policy allows
    /// (`max_uploads`, `--tenant-max-uploads`); retry once one finishes.
    TooManyUploads,
    /// The request body stopped arriving, or came slower than the server's minimum rate
    /// (`--upload-read-timeout-ms`, `--upload-min-bytes-per-s`): the upload was cut off
    /// and nothing of it kept. 408 Request Timeout.
    UploadStalled,
    /// The tenant's stored blobs would exceed its disk quota (`disk_quota_bytes`,
    /// `--default-disk-quota-mib`); nothing was stored. 429, like the device-memory
    /// quota: deleting functions or versions (or pruning) makes room.
    DiskQuotaExceeded,
    /// The component was built against a version of the host API (`sluice:gpu@x.y.z`)
    /// this host does not offer, or uses something a newer version added; the message
    /// names the interface and version and what this host offers. Refused at deploy.
    HostApiUnsupported,
}

impl Code {
    /// Every code, in declaration order.
    pub const ALL: [Code; 38] = [
        Code::InvalidRequest,
        Code::InvalidInput,
        Code::InvalidName,
        Code::InvalidComponent,
        Code::Unauthorized,
        Code::Forbidden,
        Code::NotFound,
        Code::MethodNotAllowed,
        Code::AlreadyExists,
        Code::PayloadTooLarge,
        Code::UnsupportedMediaType,
        Code::TenantConcurrencyLimit,
        Code::ConcurrencyLimit,
        Code::FunctionFailed,
        Code::FunctionTrapped,
        Code::MemoryLimitExceeded,
        Code::Internal,
        Code::Storage,
        Code::Corrupt,
        Code::DataDirInUse,
        Code::OutputTooLarge,
        Code::TransferTooLarge,
        Code::ShuttingDown,
        Code::RegistryUnavailable,
        Code::InsufficientDeviceMemory,
        Code::Timeout,
        Code::QuotaExceeded,
        Code::Cancelled,
        Code::StatusRateLimit,
        Code::LiveFeedLimit,
        Code::HostMemoryBudget,
        Code::DecodedTooLarge,
        Code::ComponentLimitExceeded,
        Code::InstancePoolExhausted,
        Code::TooManyUploads,
        Code::UploadStalled,
        Code::DiskQuotaExceeded,
        Code::HostApiUnsupported,
    ];

    /// The code as it appears in error bodies and metric labels (snake_case).
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::InvalidRequest => "invalid_request",
            Code::InvalidInput => "invalid_input",
            Code::InvalidName => "invalid_name",
            Code::InvalidComponent => "invalid_component",
            Code::Unauthorized => "unauthorized",
            Code::Forbidden => "forbidden",
            Code::NotFound => "not_found",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::AlreadyExists => "already_exists",
            Code::PayloadTooLarge => "payload_too_large",
            Code::UnsupportedMediaType => "unsupported_media_type",
            Code::TenantConcurrencyLimit => "tenant_concurrency_limit",
            Code::ConcurrencyLimit => "concurrency_limit",
            Code::FunctionFailed => "function_failed",
            Code::FunctionTrapped => "function_trapped",
            Code::MemoryLimitExceeded => "memory_limit_exceeded",
            Code::Internal => "internal",
            Code::Storage => "storage",
            Code::Corrupt => "corrupt",
            Code::DataDirInUse => "data_dir_in_use",
            Code::OutputTooLarge => "output_too_large",
            Code::TransferTooLarge => "transfer_too_large",
            Code::ShuttingDown => "shutting_down",
            Code::RegistryUnavailable => "registry_unavailable",
            Code::InsufficientDeviceMemory => "insufficient_device_memory",
            Code::Timeout => "timeout",
            Code::QuotaExceeded => "quota_exceeded",
            Code::Cancelled => "cancelled",
            Code::StatusRateLimit => "status_rate_limit",
            Code::LiveFeedLimit => "live_feed_limit",
            Code::HostMemoryBudget => "host_memory_budget",
            Code::DecodedTooLarge => "decoded_too_large",
            Code::ComponentLimitExceeded => "component_limit_exceeded",
            Code::HostApiUnsupported => "host_api_unsupported",
            Code::InstancePoolExhausted => "instance_pool_exhausted",
            Code::TooManyUploads => "too_many_uploads",
            Code::UploadStalled => "upload_stalled",
            Code::DiskQuotaExceeded => "disk_quota_exceeded",
        }
    }

    /// The HTTP status a response with this code has.
    pub const fn status(self) -> u16 {
        match self {
            Code::InvalidRequest | Code::InvalidInput | Code::InvalidName | Code::InvalidComponent => 400,
            Code::ComponentLimitExceeded => 400,
            Code::HostApiUnsupported => 400,
            Code::Unauthorized => 401,
            Code::Forbidden => 403,
            Code::NotFound => 404,
            Code::MethodNotAllowed => 405,
            Code::AlreadyExists => 409,
            Code::PayloadTooLarge | Code::DecodedTooLarge => 413,
            Code::UnsupportedMediaType => 415,
            Code::TenantConcurrencyLimit | Code::ConcurrencyLimit | Code::QuotaExceeded => 429,
            Code::StatusRateLimit | Code::LiveFeedLimit | Code::HostMemoryBudget => 429,
            Code::FunctionFailed
            | Code::FunctionTrapped
            | Code::MemoryLimitExceeded
            | Code::Internal
            | Code::Storage
            | Code::Corrupt
            | Code::DataDirInUse => 500,
            Code::OutputTooLarge | Code::TransferTooLarge => 502,
            Code::ShuttingDown | Code::InsufficientDeviceMemory => 503,
            Code::InstancePoolExhausted | Code::RegistryUnavailable => 503,
            Code::Timeout => 504,
            Code::Cancelled => 499,
            Code::TooManyUploads | Code::DiskQuotaExceeded => 429,
            Code::UploadStalled => 408,
        }
    }

    /// The code written as `s` ([`Code::as_str`]), if there is one.
    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A code equals its wire name (`Code::Timeout == "timeout"`), for tests and clients
/// that hold the string.
impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_code_once_and_names_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for code in Code::ALL {
            assert!(seen.insert(code), "{code:?} twice in ALL");
            assert_eq!(Code::parse(code.as_str()), Some(code));
            let s = code.as_str();
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{s} is not snake_case");
        }
        assert_eq!(Code::parse("no_such_code"), None);
        assert_eq!(Code::OutputTooLarge, "output_too_large");
    }

    #[test]
    fn statuses_are_errors() {
        for code in Code::ALL {
            assert!((400..600).contains(&code.status()), "{code}");
        }
    }
}
