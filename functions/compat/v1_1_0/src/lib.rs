//! A component built against the frozen host API 1.1.0 (`host-api/wit-released/1.1.0`),
//! with the raw bindings of that version only. Its body is `../guest.rs`, the same for
//! every version, plus what 1.1.0 added: `artifacts.names`.

#![allow(missing_docs, clippy::all)]

wit_bindgen::generate!({
    path: "../../../host-api/wit-released/1.1.0",
    world: "inference",
});

include!("../../guest.rs");

/// `artifacts`: the names `artifacts.names` (1.1.0) returns, as BYTES `[n]`.
fn extra_outputs() -> Result<Vec<IoTensor>, Error> {
    let names = sluice::gpu::artifacts::names();
    Ok(vec![IoTensor {
        name: "artifacts".into(),
        shape: vec![names.len() as u64],
        data: IoData::Bytes(names.into_iter().map(String::into_bytes).collect()),
    }])
}
