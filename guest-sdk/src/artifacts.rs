//! Artifacts uploaded with the function (weights, vocabularies, configs), by name.

use crate::bindings::sluice::gpu::artifacts as raw;
use crate::{DType, Result, Tensor};

/// The raw bytes of an artifact (e.g. a vocabulary or a JSON config).
/// A missing artifact is a `not-found` error.
pub fn read(artifact: &str) -> Result<Vec<u8>> {
    Ok(raw::read(artifact)?)
}

/// One tensor `name` of the safetensors artifact `artifact`, optionally converted to
/// `as_dtype` at load time. The host loads it once per function version and device
/// and shares it read-only between invocations, so this is cheap after the first call.
pub fn load_tensor(artifact: &str, name: &str, as_dtype: Option<DType>) -> Result<Tensor> {
    Ok(Tensor::from_raw(raw::load_tensor(artifact, name, as_dtype.map(Into::into))?))
}
