//! Artifacts uploaded with the function (weights, vocabularies, configs), by name.

use crate::bindings::sluice::gpu::artifacts as raw;
use crate::{DType, Result, Tensor};

/// The raw bytes of an artifact (e.g. a vocabulary or a JSON config).
/// A missing artifact is a `not-found` error.
pub fn read(artifact: &str) -> Result<Vec<u8>> {
    Ok(raw::read(artifact)?)
}

/// One tensor `name` of the safetensors or GGUF artifact `artifact`, optionally
/// converted to `as_dtype` at load time (a GGUF tensor's fastest-first dims
/// `[ne0, ne1]` load as the row-major shape `[ne1, ne0]`). The host loads it once per function version and device
/// and shares it read-only between invocations, so this is cheap after the first call.
pub fn load_tensor(artifact: &str, name: &str, as_dtype: Option<DType>) -> Result<Tensor> {
    Ok(Tensor::from_raw(raw::load_tensor(artifact, name, as_dtype.map(Into::into))?))
}

/// The metadata of the GGUF artifact `artifact` as one JSON object, key → value
/// (arrays as JSON arrays, e.g. `tokenizer.ggml.tokens`; a non-finite float as `null`).
/// An artifact that is not GGUF is an `invalid-argument` error.
pub fn metadata(artifact: &str) -> Result<String> {
    Ok(raw::metadata(artifact)?)
}

/// The names of the artifacts this function version sees, in byte order: how a function
/// that ships optional files finds which ones were uploaded. Host API 1.1.0 and later
/// (a component that calls it does not deploy on a 1.0 host).
pub fn names() -> Vec<String> {
    raw::names()
}
