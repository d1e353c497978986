//! Host bindings generated from the WIT package in `host-api/wit` ([`sluice_host_api::WIT_DIR`]).
//!
//! Every import may trap (resource-table faults are sandbox violations). The imports
//! that wait are async: `tensor.read` waits for the device, and the ones that queue
//! work (uploads, `zeros`, `write-rows`, launches and `kv-attention`) wait for room in the invocation's queue
//! (backpressure), `streaming.emit` (and a served request's `emit`) waits for room in its
//! caller's chunk channel, and `requests.next` waits for a request. Imports
//! that return the WIT
//! `result<_, error>` return `Result<_, HostError>` instead (`trappable_error_type`):
//! [`super::host_error::HostError`] decides whether the guest gets the `error` or traps.

wasmtime::component::bindgen!({
    // `bindgen!` needs a literal; `wit_path_is_host_apis` checks it names `WIT_DIR`.
    path: "../host-api/wit",
    world: "inference",
    imports: {
        "sluice:gpu/tensors.[method]tensor.read": async | trappable,
        "sluice:gpu/tensors.[static]tensor.from-bytes": async | trappable,
        "sluice:gpu/tensors.[static]tensor.from-f32": async | trappable,
        "sluice:gpu/tensors.[static]tensor.from-i32": async | trappable,
        "sluice:gpu/tensors.[static]tensor.zeros": async | trappable,
        "sluice:gpu/tensors.[method]tensor.write-rows": async | trappable,
        "sluice:gpu/ops.launch": async | trappable,
        "sluice:gpu/ops.kv-attention": async | trappable,
        "sluice:gpu/fused.launch": async | trappable,
        "sluice:gpu/streaming.emit": async | trappable,
        "sluice:gpu/requests.next": async | trappable,
        "sluice:gpu/requests.[method]request.emit": async | trappable,
        default: trappable,
    },
    exports: { default: async },
    additional_derives: [PartialEq],
    trappable_error_type: {
        "sluice:gpu/types.error" => super::host_error::HostError,
    },
    with: {
        "sluice:gpu/tensors.tensor": super::handle::TensorHandle,
        "sluice:gpu/requests.request": super::request_handle::RequestHandle,
    },
});

pub use sluice::gpu::io::IoData;
pub use sluice::gpu::types::{Dtype as WitDtype, Error as WitError};

/// The elements of `data`, whatever their type.
pub fn element_count(data: &IoData) -> usize {
    match data {
        IoData::F32(v) => v.len(),
        IoData::F16(v) | IoData::Bf16(v) => v.len(),
        IoData::I32(v) => v.len(),
        IoData::I64(v) => v.len(),
        IoData::U8(v) => v.len(),
        IoData::Bytes(v) => v.len(),
    }
}

#[cfg(test)]
mod tests {
    /// The literal given to `bindgen!` above, relative to this crate.
    const BINDGEN_PATH: &str = "../host-api/wit";

    #[test]
    fn wit_path_is_host_apis() {
        let ours = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(BINDGEN_PATH);
        let theirs = std::path::Path::new(sluice_host_api::WIT_DIR);
        assert_eq!(ours.canonicalize().unwrap(), theirs.canonicalize().unwrap());
        let source = include_str!("bindings.rs");
        assert!(
            source.contains(&format!("path: {BINDGEN_PATH:?},")),
            "bindgen! reads another path than {BINDGEN_PATH}"
        );
    }
}
