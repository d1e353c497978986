//! `launch-bench`: the guest half of the op-launch benchmark.
//!
//! Input `n` (INT64 `[1]`): launches `n` tiny ops (`affine` on a one-element f32
//! tensor), dropping each output at once, and reads nothing back until the end. The
//! host times invocations with different `n` and divides the difference by the
//! launches, which isolates the host-side cost of one launch (guest→host call,
//! shape inference, quota reservation, the send to the device queue and the drop).
//! Output `launched` (INT64 `[1]`) and `last` (FP32 `[1]`, the read-back of the
//! final op, so the device work is not skipped).

use sluice_guest::{Function, Inputs, IoTensor, Result, Tensor};

/// The exported function.
struct LaunchBench;

impl Function for LaunchBench {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        let n = inputs.get("n")?.as_i64()?.first().copied().unwrap_or(0).max(0);
        let x = Tensor::from_f32(&[1], &[1.0])?;
        let mut last = x.affine(1.0, 1.0)?;
        for _ in 1..n {
            last = x.affine(1.0, 1.0)?;
        }
        let value = last.to_vec_f32()?;
        Ok(vec![IoTensor::i64("launched", &[1], vec![n]), IoTensor::f32("last", &[1], value)])
    }
}

sluice_guest::export!(LaunchBench);
