//! `misbehave`: one component that misbehaves on request, for the host's isolation
//! and clean-up tests.
//!
//! Input `mode`: BYTES, exactly one element (any shape with one element), one of:
//!
//! | mode | behaviour | what the host should see |
//! |---|---|---|
//! | `ok` | nothing special | ok: `status` BYTES `[1]` = `"ok"` |
//! | `trap` | panics (a wasm `unreachable` trap) | a trap |
//! | `loop` | spins forever without host calls | must be interrupted (epoch/fuel/deadline) |
//! | `oom` | allocates and touches 1 MiB chunks until memory runs out | a trap when linear memory can grow no more (or the host's memory cap) |
//! | `bad-shape` | launches `[2, 3] @ [4, 5]` (a matmul with mismatched inner dims) | run error `failed` whose message starts with `shape-mismatch:`; the host must not trap |
//! | `leak` | creates [`LEAK_COUNT`] tensors (uploads and op results), reads none, forgets every handle | ok: `status` = `"ok"`, `leaked` INT64 `[1]` = the count; the host must free them all when the invocation ends |
//! | `huge-output` | returns 256 MiB | `output` UINT8 `[268435456]` of zeros: the host should refuse it as too large |
//!
//! If `bad-shape`'s matmul is accepted, or refused with another code, the run error
//! is `failed` with a message starting `bad-shape: expected shape-mismatch`, so a test
//! can tell a wrong host answer from the expected one. A missing or non-BYTES `mode`,
//! or an unknown mode, is `invalid-input`.

use sluice_guest::{Error, ErrorCode, Function, Inputs, IoTensor, Result, Tensor};

/// Tensors created (half uploads, half op results) by `leak`.
pub const LEAK_COUNT: i64 = 2000;
/// Bytes returned by `huge-output`.
const HUGE_OUTPUT_BYTES: usize = 256 << 20;
/// Every mode, for the error message of an unknown one.
const MODES: [&str; 7] = ["ok", "trap", "loop", "oom", "bad-shape", "leak", "huge-output"];

/// The exported function.
struct Misbehave;

impl Function for Misbehave {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        let mode = inputs.get("mode")?.as_strings()?;
        let [mode] = mode.as_slice() else {
            return Err(Error::invalid_input(format!("tensor `mode`: expected one element, got {}", mode.len())));
        };
        match *mode {
            "ok" => Ok(vec![status()]),
            "trap" => panic!("misbehave: trap requested"),
            "loop" => spin(),
            "oom" => exhaust_memory(),
            "bad-shape" => bad_shape(),
            "leak" => leak(),
            "huge-output" => {
                Ok(vec![IoTensor::u8("output", &[HUGE_OUTPUT_BYTES as u64], vec![0u8; HUGE_OUTPUT_BYTES])])
            }
            other => Err(Error::invalid_input(format!("unknown mode {other:?}; modes: {MODES:?}"))),
        }
    }
}

/// The `status` output of the modes that succeed.
fn status() -> IoTensor {
    IoTensor::text("status", &["ok"])
}

/// Loops forever without calling the host.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// Grows linear memory 1 MiB at a time, touching every chunk, until allocation fails.
fn exhaust_memory() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        chunks.push(std::hint::black_box(vec![0xA5u8; 1 << 20]));
        std::hint::black_box(&chunks);
    }
}

/// A matmul with mismatched inner dimensions: the host must refuse it with
/// `shape-mismatch`, which is returned as the run error.
fn bad_shape() -> Result<Vec<IoTensor>> {
    let a = Tensor::from_f32(&[2, 3], &[1.0; 6])?;
    let b = Tensor::from_f32(&[4, 5], &[1.0; 20])?;
    match a.matmul(&b) {
        Err(e) if e.is(ErrorCode::ShapeMismatch) => Err(Error::failed(e.to_string())),
        Err(e) => Err(Error::failed(format!("bad-shape: expected shape-mismatch, got {e}"))),
        Ok(t) => Err(Error::failed(format!("bad-shape: expected shape-mismatch, the host accepted it as {t:?}"))),
    }
}

/// Creates [`LEAK_COUNT`] device tensors and forgets their handles.
fn leak() -> Result<Vec<IoTensor>> {
    let data = [1.0f32; 1024];
    for _ in 0..LEAK_COUNT / 2 {
        let x = Tensor::from_f32(&[1024], &data)?;
        let y = x.relu()?;
        std::mem::forget(x);
        std::mem::forget(y);
    }
    Ok(vec![status(), IoTensor::i64("leaked", &[1], vec![LEAK_COUNT])])
}

sluice_guest::export!(Misbehave);
