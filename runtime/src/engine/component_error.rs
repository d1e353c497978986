//! Why a binary cannot become a function: [`ComponentError`], each variant with its
//! stable code.

use sluice_host_api::Code;

/// Why a binary cannot become a function. Every variant is the uploader's fault.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    #[error(
        "the file is a core WebAssembly module, not a component: build the function for wasm32-wasip2 (cargo build --target wasm32-wasip2) or wrap it with `wasm-tools component new`"
    )]
    CoreModule,
    #[error("the file is not a WebAssembly component (it does not start with the component header)")]
    NotWasm,
    #[error("the component is invalid: {0}")]
    Invalid(String),
    #[error("the component does not implement the sluice:gpu/inference world: {0}")]
    WrongWorld(String),
    /// Built against a host API version this host does not offer (see
    /// `docs/host-api.md`); the message names the import and what the host offers.
    #[error("{0}")]
    HostApi(String),
    #[error("the component has {count} {what}, more than the {limit} one component may have on this server ({flag})")]
    OverLimit { what: &'static str, count: u64, limit: u32, flag: &'static str },
}

impl ComponentError {
    /// Stable machine-readable code: [`Code::ComponentLimitExceeded`] for a component
    /// over a per-component limit, [`Code::HostApiUnsupported`] for a host API version
    /// this host does not offer, [`Code::InvalidComponent`] for every other.
    pub fn code(&self) -> Code {
        match self {
            ComponentError::CoreModule
            | ComponentError::NotWasm
            | ComponentError::Invalid(_)
            | ComponentError::WrongWorld(_) => Code::InvalidComponent,
            ComponentError::OverLimit { .. } => Code::ComponentLimitExceeded,
            ComponentError::HostApi(_) => Code::HostApiUnsupported,
        }
    }
}
