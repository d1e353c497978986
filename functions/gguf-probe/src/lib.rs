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
//! - Output `cache`: FP32 `[6, 3, 64]`, a KV cache made by `zeros` after `write-rows`
//!   of x's rows `[m, 192]` (as `[m, 3, 64]`) at position 2 and of x's first row at 5,
//!   read through a reshape of it after the cache's own handle is dropped.
//! - Output `refusals`: BYTES `[4]`, the error codes (Debug) of a write into the loaded
//!   weight and into an op's output (a reshape of the cache), and of a `kv-attention`
//!   writing into the weight and one given the cache as both its k and v cache, all
//!   refused.
//!
//! It launches five kernels (the linear, two slices, two writes): its reshapes are
//! views and the refused writes queue nothing.

use sluice_guest::{DType, Error, Function, Inputs, IoData, IoTensor, KvSequence, Result, Tensor, artifacts};

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
        let cache = Tensor::zeros(DType::F32, &[6, 3, 64])?;
        let m = x.shape()[0];
        let rows = x.slice(1, 0, 192)?.reshape(&[m, 3, 64])?;
        cache.write_rows(2, &rows)?;
        cache.write_rows(5, &rows.slice(0, 0, 1)?)?;
        let refusal = |e: Result<()>| format!("{:?}", e.err().and_then(|e| e.code())).into_bytes();
        let view = cache.reshape(&[6, 192])?;
        let attend = |k_cache: &Tensor, v_cache: &Tensor| {
            let sequence = KvSequence { k_cache, v_cache, rows: m, position: 0 };
            Tensor::kv_attention(&rows, &rows, &rows, &[sequence], 10_000.0, 0.125).map(drop)
        };
        let refusals = vec![
            refusal(w.write_rows(0, &w)),
            refusal(view.write_rows(0, &view)),
            refusal(attend(&w, &cache)),
            refusal(attend(&cache, &cache)),
        ];
        // The view holds the cache's memory on its own.
        drop(cache);
        let cache = view.reshape(&[6, 3, 64])?;
        Ok(vec![
            y.to_io("y")?,
            IoTensor::bytes("dtype", &[1], vec![w.dtype().name().as_bytes().to_vec()]),
            IoTensor::bytes("metadata", &[1], vec![metadata.into_bytes()]),
            cache.to_io("cache")?,
            IoTensor::bytes("refusals", &[4], refusals),
        ])
    }
}

sluice_guest::export!(GgufProbe);
