//! `gemm-burn`: the best-effort tenant of the scheduling benchmarks. Deploy it with
//! priority class `batch`.
//!
//! Inputs:
//! - `duration_ms` INT64 `[1]`: how long to keep the device busy;
//! - optional `size` INT64 `[1]`: the square matrix size (default 512; use 8192 with
//!   bf16 on a large GPU);
//! - optional `dtype` BYTES `[1]`: `"f32"` (default), `"f16"` or `"bf16"`;
//! - optional `depth` INT64 `[1]`: GEMMs kept queued between synchronisations
//!   (default 4), so the device never starves while the guest waits.
//!
//! It launches `size³` GEMMs back to back, reading one element back every `depth`
//! launches, until `duration_ms` of wall-clock time passed (the guest's clock is
//! WASI's monotonic clock). Outputs `gemms` INT64 `[1]` (how many completed) and
//! `elapsed_ms` FP32 `[1]`, so throughput can be compared across runs.

use std::time::Instant;

use sluice_guest::{DType, Error, Function, Inputs, IoTensor, Result, Tensor};

/// The exported function.
struct GemmBurn;

fn int_input(inputs: &Inputs, name: &str, default: i64) -> Result<i64> {
    match inputs.find(name) {
        None => Ok(default),
        Some(t) => {
            t.as_i64()?.first().copied().ok_or_else(|| Error::invalid_input(format!("`{name}` must have one element")))
        }
    }
}

impl Function for GemmBurn {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        let duration_ms = int_input(&inputs, "duration_ms", -1)?;
        if !(0..=600_000).contains(&duration_ms) {
            return Err(Error::invalid_input("`duration_ms` (INT64 [1]) must be in 0..=600000"));
        }
        let size = int_input(&inputs, "size", 512)?;
        if !(1..=16_384).contains(&size) {
            return Err(Error::invalid_input("`size` must be in 1..=16384"));
        }
        let depth = int_input(&inputs, "depth", 4)?.clamp(1, 64);
        let dtype = match inputs.find("dtype").map(|t| t.as_strings()).transpose()?.as_deref() {
            None | Some(["f32"]) => DType::F32,
            Some(["f16"]) => DType::F16,
            Some(["bf16"]) => DType::BF16,
            Some(other) => return Err(Error::invalid_input(format!("`dtype` {other:?} is not f32, f16 or bf16"))),
        };
        let n = size as u32;
        let values: Vec<f32> = (0..n * n).map(|i| ((i % 17) as f32 - 8.0) / 64.0).collect();
        let a = Tensor::from_f32(&[n, n], &values)?.cast(dtype)?;
        let b = a.transpose(0, 1)?;

        let started = Instant::now();
        let mut gemms = 0i64;
        while started.elapsed().as_millis() < duration_ms as u128 {
            let mut last = a.matmul(&b)?;
            for _ in 1..depth {
                last = a.matmul(&b)?;
            }
            // One element back: waits for the GEMMs queued so far.
            last.slice(0, 0, 1)?.slice(1, 0, 1)?.read_bytes()?;
            gemms += depth;
        }
        let elapsed = started.elapsed().as_secs_f32() * 1e3;
        Ok(vec![IoTensor::i64("gemms", &[1], vec![gemms]), IoTensor::f32("elapsed_ms", &[1], vec![elapsed])])
    }
}

sluice_guest::export!(GemmBurn);
