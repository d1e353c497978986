//! Dtype conversion between every pair of dtypes, with Rust `as` semantics:
//!
//! - to a float: rounded to nearest (even); f16/bf16 overflow to ±inf;
//! - float to integer: truncated toward zero and saturated to the target's range, NaN
//!   becomes 0 (so `-1.5 → u8` is 0 and `300.0 → u8` is 255);
//! - integer to integer: two's-complement wrapping (`i64 → i32` keeps the low 32 bits,
//!   `-1 i32 → u8` is 255), as in NumPy and PyTorch.
//!
//! - from a block format: dequantized to f32 first; to a block format: quantized as
//!   ggml's reference quantizers do (the catalog offers only block → f32; `quant.rs`).
//!
//! A cast to the input's own dtype shares the input's storage.

use half::{bf16, f16};
use sluice_host_api::DType;

use crate::broadcast::map;
use crate::buffer::CpuBuffer;

pub(crate) fn cast(x: &CpuBuffer, to: DType) -> CpuBuffer {
    if x.dtype() == to {
        return x.clone();
    }
    match x {
        CpuBuffer::F32(v) => from_float(v, |x| x, to),
        CpuBuffer::F16(v) => from_float(v, f16::to_f32, to),
        CpuBuffer::BF16(v) => from_float(v, bf16::to_f32, to),
        CpuBuffer::I32(v) => from_int(v, |x| x as i64, to),
        CpuBuffer::I64(v) => from_int(v, |x| x, to),
        CpuBuffer::U8(v) => from_int(v, |x| x as i64, to),
        CpuBuffer::Blocks(d, v) => from_float(&crate::quant::dequantize(*d, v), |x| x, to),
    }
}

/// Converts elements whose values are exactly representable as `f32`.
fn from_float<S: Copy + Sync>(v: &[S], up: impl Fn(S) -> f32 + Sync, to: DType) -> CpuBuffer {
    match to {
        DType::F32 => CpuBuffer::F32(map(v, up)),
        DType::F16 => CpuBuffer::F16(map(v, |x| f16::from_f32(up(x)))),
        DType::BF16 => CpuBuffer::BF16(map(v, |x| bf16::from_f32(up(x)))),
        DType::I32 => CpuBuffer::I32(map(v, |x| up(x) as i32)),
        DType::I64 => CpuBuffer::I64(map(v, |x| up(x) as i64)),
        DType::U8 => CpuBuffer::U8(map(v, |x| up(x) as u8)),
        DType::Q4_1 | DType::Q8_0 => CpuBuffer::from_f32_as(to, &map(v, up)),
    }
}

/// Converts integer elements, widened losslessly to `i64`.
fn from_int<S: Copy + Sync>(v: &[S], up: impl Fn(S) -> i64 + Sync, to: DType) -> CpuBuffer {
    match to {
        DType::F32 => CpuBuffer::F32(map(v, |x| up(x) as f32)),
        DType::F16 => CpuBuffer::F16(map(v, |x| f16::from_f64(up(x) as f64))),
        DType::BF16 => CpuBuffer::BF16(map(v, |x| bf16::from_f64(up(x) as f64))),
        DType::I32 => CpuBuffer::I32(map(v, |x| up(x) as i32)),
        DType::I64 => CpuBuffer::I64(map(v, up)),
        DType::U8 => CpuBuffer::U8(map(v, |x| up(x) as u8)),
        DType::Q4_1 | DType::Q8_0 => CpuBuffer::from_f32_as(to, &map(v, |x| up(x) as f32)),
    }
}
