//! `echo`: returns its inputs unchanged, in order, with the same names, datatypes and
//! shapes.
//!
//! It still touches the host: every numeric input (FP32, FP16, BF16, INT32, INT64,
//! UINT8) is uploaded as a device tensor and read back, so a test of `echo` exercises
//! upload, dtype/shape bookkeeping and read-back of every dtype. BYTES inputs pass
//! straight through (they have no device form). An input whose element count does
//! not match its shape is an `invalid-input` error.

use sluice_guest::{Function, Inputs, IoData, IoTensor, Result};

/// The exported function.
struct Echo;

impl Function for Echo {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        inputs.into_iter().map(echo_one).collect()
    }
}

/// Round-trips one input through the device (BYTES: returned as is).
fn echo_one(input: IoTensor) -> Result<IoTensor> {
    if matches!(input.data, IoData::Bytes(_)) {
        input.check()?;
        return Ok(input);
    }
    let on_device = input.to_tensor()?;
    on_device.to_io(input.name)
}

sluice_guest::export!(Echo);
