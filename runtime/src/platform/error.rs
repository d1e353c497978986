//! The platform's typed error: everything a deploy, an invocation or an admin call can
//! fail with, each with a stable machine-readable [`Code`] ([`PlatformError::code`]).
//!
//! The HTTP layer turns these into statuses in exactly one place
//! (`server::error`); this module only says *what* went wrong.

use sluice_host_api::Code;
use sluice_registry::RegistryError;

use super::OverQuota;
use crate::engine::{ComponentError, InvokeError};

/// Which concurrency limit refused an invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitScope {
    /// The tenant's own limit.
    Tenant,
    /// The server-wide limit.
    Global,
}

/// What can go wrong in the service layer.
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    /// The registry refused or failed (not found, invalid name, storage…).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The uploaded bytes are not a usable component.
    #[error(transparent)]
    Component(#[from] ComponentError),
    /// The invocation failed inside the sandbox.
    #[error(transparent)]
    Invoke(#[from] InvokeError),
    /// A malformed request (bad JSON, wrong tensor shapes, bad option values).
    #[error("{0}")]
    InvalidRequest(String),
    /// A concurrency limit is reached; retry later.
    #[error("{} concurrency limit of {limit} invocations reached; retry later", match scope { LimitScope::Tenant => "tenant", LimitScope::Global => "server" })]
    Overloaded {
        /// Which limit.
        scope: LimitScope,
        /// Its size.
        limit: u32,
    },
    /// The tenant has as many artifact uploads in flight as its policy allows.
    #[error("the tenant's limit of {limit} artifact uploads in flight is reached; retry once one finishes")]
    TooManyUploads {
        /// Its size.
        limit: u32,
    },
    /// The server is shutting down and takes no new work.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// No device has room for the function's weights.
    #[error("{0}")]
    NoDeviceCapacity(String),
    /// A version's weights do not fit in its tenant's device-memory quota (checked
    /// before they are placed): 413 when the version alone is larger than the quota,
    /// else 429 `quota_exceeded`.
    #[error("{0}")]
    WeightsOverQuota(OverQuota),
    /// A bug or an environment failure; the message is for the operator's log.
    #[error("internal error: {0}")]
    Internal(String),
    /// The tenant calls `GET /v1/status` faster than the admin's limit.
    #[error("status rate limit of {per_second} calls a second (bursts of {burst}) reached; retry later")]
    StatusRateLimit {
        /// Calls a second, sustained.
        per_second: f64,
        /// Calls at once.
        burst: u32,
    },
    /// The tenant has its limit of live feeds open.
    #[error("live feed limit of {limit} open at once reached; close one or retry later")]
    LiveFeedLimit {
        /// Feeds a tenant may have open.
        limit: u32,
    },
    /// The tenant's host-memory budget for request decoding and response encoding
    /// cannot hold what a request needs (see `platform/host_memory.rs`).
    #[error(transparent)]
    HostMemory(#[from] super::host_memory::HostMemoryRefusal),
}

impl PlatformError {
    /// A stable machine-readable code for API error bodies.
    pub fn code(&self) -> Code {
        match self {
            PlatformError::Registry(e) => e.code(),
            PlatformError::Component(e) => e.code(),
            PlatformError::Invoke(e) => e.code(),
            PlatformError::InvalidRequest(_) => Code::InvalidRequest,
            PlatformError::Overloaded { scope: LimitScope::Tenant, .. } => Code::TenantConcurrencyLimit,
            PlatformError::Overloaded { scope: LimitScope::Global, .. } => Code::ConcurrencyLimit,
            PlatformError::TooManyUploads { .. } => Code::TooManyUploads,
            PlatformError::ShuttingDown => Code::ShuttingDown,
            PlatformError::NoDeviceCapacity(_) => Code::InsufficientDeviceMemory,
            PlatformError::WeightsOverQuota(o) if o.never_fits() => Code::PayloadTooLarge,
            PlatformError::WeightsOverQuota(_) => Code::QuotaExceeded,
            PlatformError::Internal(_) => Code::Internal,
            PlatformError::StatusRateLimit { .. } => Code::StatusRateLimit,
            PlatformError::LiveFeedLimit { .. } => Code::LiveFeedLimit,
            PlatformError::HostMemory(e) => e.code(),
        }
    }

    /// Whether the message is for the operator's log only (a server-side failure): the
    /// client then gets the code and a generic message.
    pub fn is_internal(&self) -> bool {
        match self {
            PlatformError::Registry(e) => !e.is_client_error(),
            PlatformError::Internal(_) => true,
            PlatformError::Component(_)
            | PlatformError::Invoke(_)
            | PlatformError::InvalidRequest(_)
            | PlatformError::Overloaded { .. }
            | PlatformError::TooManyUploads { .. }
            | PlatformError::ShuttingDown
            | PlatformError::NoDeviceCapacity(_)
            | PlatformError::WeightsOverQuota(_)
            | PlatformError::StatusRateLimit { .. }
            | PlatformError::LiveFeedLimit { .. }
            | PlatformError::HostMemory(_) => false,
        }
    }

    /// The error of a batched invocation, once for each request that shared it (the
    /// runner fails with the engine's errors or an internal one).
    pub(crate) fn for_batch_member(&self) -> PlatformError {
        match self {
            PlatformError::Invoke(e) => PlatformError::Invoke(e.clone()),
            PlatformError::InvalidRequest(m) => PlatformError::InvalidRequest(m.clone()),
            PlatformError::Internal(m) => PlatformError::Internal(m.clone()),
            other => PlatformError::Internal(format!("batched invocation: {other}")),
        }
    }

    pub(crate) fn internal(context: &str, e: impl std::fmt::Display) -> Self {
        PlatformError::Internal(format!("{context}: {e}"))
    }
}

/// Result alias of the service layer.
pub type Result<T, E = PlatformError> = std::result::Result<T, E>;
