//! Host bindings generated from the WIT package in `host-api/wit`.
//!
//! Every import may trap (resource-table faults are sandbox violations); only
//! `tensor.read` is async, because it waits for the device. Guest-visible errors
//! travel inside the `Ok` side as the WIT `error` record.

wasmtime::component::bindgen!({
    path: "../host-api/wit",
    world: "inference",
    imports: {
        "sluice:gpu/tensors.[method]tensor.read": async | trappable,
        default: trappable,
    },
    exports: { default: async },
    additional_derives: [PartialEq],
    with: {
        "sluice:gpu/tensors.tensor": super::state::TensorHandle,
    },
});

pub use sluice::gpu::io::IoData;
pub use sluice::gpu::types::{Dtype as WitDtype, Error as WitError, ErrorCode as WitErrorCode};
