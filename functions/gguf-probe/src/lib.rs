//! `gguf-probe`: GGUF artifacts through the guest API, for the tests.
//!
//! The function has one artifact, `model`, a GGUF file.
//! - Input `tensor`: BYTES `[1]`, the name of a 2-D weight `[n, k]` of the file (any
//!   dtype `linear` takes with f32 activations: f32, or block-quantized Q4_1/Q8_0).
//! - Input `x`: FP32 `[m, k]`.
//! - Output `y`: FP32 `[m, n]`, `x · Wᵀ` (the weight stays quantized on the device and
//!   is dequantized on the fly).
//! - Output `dtype`: BYTES `[1]`, the weight's dtype as the host loaded it (`q4_1`, ...).
//! - Output `metadata`: BYTES `[1]`, the file's metadata as the host's JSON.

use sluice_guest::{Error, Function, Inputs, IoData, IoTensor, Result, artifacts};

struct GgufProbe;

impl Function for GgufProbe {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        let name = match &inputs.get("tensor")?.data {
            IoData::Bytes(v) if v.len() == 1 => {
                String::from_utf8(v[0].clone()).map_err(|_| Error::invalid_input("input `tensor` is not UTF-8"))?
            }
            _ => return Err(Error::invalid_input("input `tensor` must be BYTES [1]")),
        };
        let x = inputs.get("x")?.to_tensor()?;
        let w = artifacts::load_tensor("model", &name, None)?;
        let y = x.linear(&w, None, true, None)?;
        let metadata = artifacts::metadata("model")?;
        Ok(vec![
            y.to_io("y")?,
            IoTensor::bytes("dtype", &[1], vec![w.dtype().name().as_bytes().to_vec()]),
            IoTensor::bytes("metadata", &[1], vec![metadata.into_bytes()]),
        ])
    }
}

sluice_guest::export!(GgufProbe);
