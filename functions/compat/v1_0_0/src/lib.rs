//! A component built against the frozen host API 1.0.0 (`host-api/wit-released/1.0.0`), with
//! the raw bindings of that version only: what a tenant deployed when 1.0.0 was current.
//! Its body is `../guest.rs`, the same for every version.

#![allow(missing_docs, clippy::all)]

wit_bindgen::generate!({
    path: "../../../host-api/wit-released/1.0.0",
    world: "inference",
});

include!("../../guest.rs");

/// Nothing 1.0.0 lacks beside the common body.
fn extra_outputs() -> Result<Vec<IoTensor>, Error> {
    Ok(Vec::new())
}
