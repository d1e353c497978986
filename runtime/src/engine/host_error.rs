//! [`HostError`]: the error every host import returns.
//!
//! An import fails in one of two ways: the guest asked for something the API refuses
//! (a bad shape, an unknown artifact, a quota) — the guest gets the WIT `error` record
//! and carries on — or the guest broke the sandbox's rules (a handle that is not its own)
//! or the host itself failed — the instance traps. [`HostError`] holds either, so the
//! imports can use `?` on both; `HostError::into_wit` (in `convert`) decides which the
//! guest sees.

use sluice_host_api::ApiError;

/// Why a host import failed: a refusal the guest sees, or a trap.
#[derive(Debug)]
pub(crate) enum HostError {
    /// The API refused the call; the guest receives the WIT `error`.
    Guest(ApiError),
    /// A sandbox violation or a host failure; the instance traps.
    Trap(wasmtime::Error),
}

impl From<ApiError> for HostError {
    fn from(e: ApiError) -> Self {
        HostError::Guest(e)
    }
}

impl From<wasmtime::Error> for HostError {
    fn from(e: wasmtime::Error) -> Self {
        HostError::Trap(e)
    }
}

impl From<wasmtime::component::ResourceTableError> for HostError {
    fn from(e: wasmtime::component::ResourceTableError) -> Self {
        HostError::Trap(e.into())
    }
}
