//! The registry's typed error.
//!
//! Every fallible call returns [`RegistryError`]; [`RegistryError::code`] names its stable
//! [`Code`] of the HTTP API, and the HTTP layer maps codes to statuses in one place:
//! `NotFound` → 404, `AlreadyExists` → 409, `InvalidName` / `InvalidInput` → 400, `InUse`
//! / `SchemaTooNew` → a start-up failure, `Storage` / `Corrupt` → 500 (the message is
//! for the operator's log, not the tenant), and `Unavailable` (the database cannot be
//! reached) → 503 `registry_unavailable`.

use std::path::PathBuf;

use sluice_host_api::Code;

/// Result alias used throughout the crate.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;

/// What can go wrong in the registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The named thing does not exist (`what` is e.g. `tenant "acme"`).
    #[error("{what} not found")]
    NotFound {
        /// Human-readable description of the missing object.
        what: String,
    },
    /// Creating something whose name is taken.
    #[error("{what} already exists")]
    AlreadyExists {
        /// Human-readable description of the existing object.
        what: String,
    },
    /// A tenant, function or artifact name that breaks the naming rules.
    #[error("invalid {kind} name {name:?}: {rule}")]
    InvalidName {
        /// Which kind of name (`tenant`, `function`, `artifact`, `digest`).
        kind: &'static str,
        /// The offending name.
        name: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A setting or option out of range, or a malformed key.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Another process holds the data directory's lock.
    #[error("data directory {path:?} is in use by another sluice process")]
    InUse {
        /// The data directory.
        path: PathBuf,
    },
    /// Stored data failed a consistency check (bad JSON, blob hash mismatch).
    #[error("registry data corrupt: {0}")]
    Corrupt(String),
    /// A change would take the tenant's stored blobs above its disk quota.
    #[error(
        "tenant {tenant:?} would store {needed_bytes} bytes, above its disk quota of {quota_bytes} bytes \
         ({used_bytes} in use): delete functions or versions first"
    )]
    DiskQuotaExceeded {
        /// The tenant.
        tenant: String,
        /// Bytes its versions reference now.
        used_bytes: u64,
        /// Bytes they would reference after the change.
        needed_bytes: u64,
        /// Its quota.
        quota_bytes: u64,
    },
    /// The registry's database cannot be reached now (refused, timed out, lost, shutting
    /// down): the change was not made, or (if the connection was lost while committing)
    /// its outcome is unknown. The runtime answers 503 and the client retries.
    #[error("registry database unavailable: {context}: {source}")]
    Unavailable {
        /// What the registry was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The registry's schema was written by a newer build of sluice (a start-up failure:
    /// upgrade this node).
    #[error("registry schema {found} is newer than this build knows (schema {known}): upgrade sluice")]
    SchemaTooNew {
        /// The schema version found.
        found: String,
        /// The newest schema version this build knows.
        known: String,
    },
    /// The disk, sled or the database failed.
    #[error("storage error: {context}: {source}")]
    Storage {
        /// What the registry was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl RegistryError {
    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        RegistryError::NotFound { what: what.into() }
    }

    pub(crate) fn exists(what: impl Into<String>) -> Self {
        RegistryError::AlreadyExists { what: what.into() }
    }

    pub(crate) fn storage(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        RegistryError::Storage { context: context.into(), source: source.into() }
    }

    /// A stable machine-readable code for API error bodies.
    pub fn code(&self) -> Code {
        match self {
            RegistryError::NotFound { .. } => Code::NotFound,
            RegistryError::AlreadyExists { .. } => Code::AlreadyExists,
            RegistryError::InvalidName { .. } => Code::InvalidName,
            RegistryError::InvalidInput(_) => Code::InvalidInput,
            RegistryError::InUse { .. } => Code::DataDirInUse,
            RegistryError::Corrupt(_) => Code::Corrupt,
            RegistryError::Storage { .. } => Code::Storage,
            RegistryError::Unavailable { .. } => Code::RegistryUnavailable,
            RegistryError::SchemaTooNew { .. } => Code::Corrupt,
            RegistryError::DiskQuotaExceeded { .. } => Code::DiskQuotaExceeded,
        }
    }

    /// True when the registry's database cannot be reached now (HTTP 503: retry later).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, RegistryError::Unavailable { .. })
    }

    /// True for errors caused by the caller's input (the HTTP layer answers 4xx).
    pub fn is_client_error(&self) -> bool {
        matches!(
            self,
            RegistryError::NotFound { .. }
                | RegistryError::AlreadyExists { .. }
                | RegistryError::InvalidName { .. }
                | RegistryError::InvalidInput(_)
                | RegistryError::DiskQuotaExceeded { .. }
        )
    }
}

impl From<sled::Error> for RegistryError {
    fn from(e: sled::Error) -> Self {
        RegistryError::storage("sled", e)
    }
}
