//! Elementwise kernels: broadcasting binary ops, unary activations and `affine`.
//!
//! Floats are computed in `f32` (f16 and bf16 are widened and rounded back once);
//! `maximum`/`minimum` propagate NaN. Integer arithmetic wraps in two's complement
//! (`i32::MIN / -1` is `i32::MIN`, `neg`/`abs` of the minimum are the minimum, `u8`
//! `neg` is `256 - x`); integer division truncates toward zero and a zero divisor is
//! an error, not a panic.

use std::f64::consts::FRAC_2_PI;

use rayon::prelude::*;

use sluice_host_api::{BinaryOp, DType, TensorMeta, UnaryOp};

use crate::KernelError;
use crate::broadcast::{PAR_CHUNK, PAR_MIN_ELEMS, Plan, map, zip};
use crate::buffer::{CpuBuffer, Int, new_with};
use crate::simd;

/// NaN-propagating maximum.
fn fmax(x: f32, y: f32) -> f32 {
    if x.is_nan() || x > y { x } else { y }
}

/// NaN-propagating minimum.
fn fmin(x: f32, y: f32) -> f32 {
    if x.is_nan() || x < y { x } else { y }
}

pub(crate) fn binary(
    op: BinaryOp,
    (a, am): (&CpuBuffer, &TensorMeta),
    (b, bm): (&CpuBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CpuBuffer, KernelError> {
    let plan = Plan::new(&am.shape, &bm.shape, &out.shape);
    match am.dtype {
        DType::F32 => Ok(CpuBuffer::F32(float_binary(op, &plan, a.typed()?, b.typed()?))),
        DType::F16 | DType::BF16 => {
            let r = float_binary(op, &plan, &a.float_view()?, &b.float_view()?);
            Ok(CpuBuffer::from_f32_as(am.dtype, &r))
        }
        DType::I32 => int_binary::<i32>(op, &plan, a, b),
        DType::I64 => int_binary::<i64>(op, &plan, a, b),
        DType::U8 => int_binary::<u8>(op, &plan, a, b),
        DType::Q4_1 | DType::Q8_0 => Err(KernelError(format!("binary ops do not take {}", am.dtype))),
    }
}

fn float_binary(op: BinaryOp, plan: &Plan, a: &[f32], b: &[f32]) -> std::sync::Arc<[f32]> {
    match op {
        BinaryOp::Add => zip(plan, a, b, |x, y| x + y),
        BinaryOp::Sub => zip(plan, a, b, |x, y| x - y),
        BinaryOp::Mul => zip(plan, a, b, |x, y| x * y),
        BinaryOp::Div => zip(plan, a, b, |x, y| x / y),
        BinaryOp::Maximum => zip(plan, a, b, fmax),
        BinaryOp::Minimum => zip(plan, a, b, fmin),
    }
}

fn int_binary<T: Int>(op: BinaryOp, plan: &Plan, a: &CpuBuffer, b: &CpuBuffer) -> Result<CpuBuffer, KernelError> {
    let (a, b) = (a.typed::<T>()?, b.typed::<T>()?);
    let data = match op {
        BinaryOp::Add => zip(plan, a, b, T::wrapping_add),
        BinaryOp::Sub => zip(plan, a, b, T::wrapping_sub),
        BinaryOp::Mul => zip(plan, a, b, T::wrapping_mul),
        BinaryOp::Div => {
            // With a non-empty output every element of `b` is used.
            if plan.numel() > 0 && b.contains(&T::ZERO) {
                return Err(KernelError(format!("integer division by zero ({} divisor contains 0)", T::DTYPE)));
            }
            zip(plan, a, b, T::wrapping_div)
        }
        BinaryOp::Maximum => zip(plan, a, b, Ord::max),
        BinaryOp::Minimum => zip(plan, a, b, Ord::min),
    };
    Ok(T::wrap(data))
}

pub(crate) fn unary(op: UnaryOp, x: &CpuBuffer) -> Result<CpuBuffer, KernelError> {
    match x.dtype() {
        DType::F32 => Ok(CpuBuffer::F32(float_unary(op, x.typed()?))),
        DType::F16 | DType::BF16 => Ok(CpuBuffer::from_f32_as(x.dtype(), &float_unary(op, &x.float_view()?))),
        DType::I32 => int_unary::<i32>(op, x),
        DType::I64 => int_unary::<i64>(op, x),
        DType::U8 => int_unary::<u8>(op, x),
        DType::Q4_1 | DType::Q8_0 => Err(KernelError(format!("unary ops do not take {}", x.dtype()))),
    }
}

/// GELU as this backend computes it: `x Φ(x)` with the exact normal CDF, in f32 through
/// a rational-exponential `erfc` that stays accurate for negative `x` (error against the
/// f64 erf form ≤ 2e-7 · max(|x|, 1); see `simd.rs`).
pub fn gelu(x: f32) -> f32 {
    simd::gelu(x)
}

/// The tanh approximation of GELU, written as `x σ(2u)` (= `x (1 + tanh u) / 2`)
/// to avoid cancellation for negative `x`.
pub fn gelu_tanh(x: f32) -> f32 {
    if x == f32::NEG_INFINITY {
        return -0.0;
    }
    let x = x as f64;
    let u = FRAC_2_PI.sqrt() * (x + 0.044715 * x * x * x);
    (x / (1.0 + (-2.0 * u).exp())) as f32
}

/// SiLU, `x σ(x)` as `x / (1 + e^-x)`; `-inf` gives `-0` (the limit) rather than NaN.
pub fn silu(x: f32) -> f32 {
    if x == f32::NEG_INFINITY { -0.0 } else { x / (1.0 + (-x).exp()) }
}

pub(crate) fn float_unary(op: UnaryOp, x: &[f32]) -> std::sync::Arc<[f32]> {
    match scalar_unary(op) {
        Some(f) => map(x, f),
        None => new_with(x.len(), |o| {
            o.copy_from_slice(x);
            float_unary_in_place(UnaryOp::Gelu, o);
        }),
    }
}

/// The f32 function of `op`, element by element; `None` for GELU, whose vector kernel
/// works on slices.
fn scalar_unary(op: UnaryOp) -> Option<fn(f32) -> f32> {
    Some(match op {
        UnaryOp::Gelu => return None,
        UnaryOp::Relu => |v: f32| if v < 0.0 { 0.0 } else { v },
        UnaryOp::GeluTanh => gelu_tanh,
        UnaryOp::Tanh => f32::tanh,
        UnaryOp::Sigmoid => |v: f32| 1.0 / (1.0 + (-v).exp()),
        UnaryOp::Exp => f32::exp,
        UnaryOp::Log => f32::ln,
        UnaryOp::Sqrt => f32::sqrt,
        UnaryOp::Rsqrt => |v: f32| 1.0 / v.sqrt(),
        UnaryOp::Neg => |v: f32| -v,
        UnaryOp::Abs => f32::abs,
        UnaryOp::Silu => silu,
    })
}

/// `op` of every element of `x`, in place, without an allocation (GELU through the
/// vector kernel; blocks in parallel when large). The same values as [`float_unary`].
pub(crate) fn float_unary_in_place(op: UnaryOp, x: &mut [f32]) {
    let large = x.len() >= PAR_MIN_ELEMS;
    match scalar_unary(op) {
        None if large => x.par_chunks_mut(PAR_CHUNK).for_each(simd::gelu_in_place),
        None => simd::gelu_in_place(x),
        Some(f) if large => x.par_chunks_mut(PAR_CHUNK).for_each(|c| c.iter_mut().for_each(|v| *v = f(*v))),
        Some(f) => x.iter_mut().for_each(|v| *v = f(*v)),
    }
}

fn int_unary<T: Int>(op: UnaryOp, x: &CpuBuffer) -> Result<CpuBuffer, KernelError> {
    let x = x.typed::<T>()?;
    let data = match op {
        UnaryOp::Relu => map(x, |v: T| v.max(T::ZERO)),
        UnaryOp::Neg => map(x, T::wrapping_neg),
        UnaryOp::Abs => map(x, T::wrapping_abs),
        other => {
            return Err(KernelError(format!("unary {other:?} is not defined on {}", T::DTYPE)));
        }
    };
    Ok(T::wrap(data))
}

/// `x * scale + bias`, with the product exact and one rounding to `f32`.
pub(crate) fn affine(x: &CpuBuffer, scale: f32, bias: f32) -> Result<CpuBuffer, KernelError> {
    let (s, b) = (scale as f64, bias as f64);
    let f = move |v: f32| (v as f64 * s + b) as f32;
    match x {
        CpuBuffer::F32(v) => Ok(CpuBuffer::F32(map(v, f))),
        other => {
            let v = other.float_view()?;
            Ok(CpuBuffer::from_f32_as(other.dtype(), &map(&v, f)))
        }
    }
}
