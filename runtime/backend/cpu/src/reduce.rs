//! Reductions of one axis: sum, mean, max and min, with or without keeping the axis.
//!
//! The input is viewed as `[outer, len, inner]` with `len` the reduced axis. Float sums
//! and means accumulate in `f64`; a mean over an empty axis is NaN and a sum over one is
//! 0 (max/min over an empty axis are refused by `infer`). Float max/min propagate NaN.
//! Integer sums wrap in the input dtype.

use rayon::prelude::*;
use sluice_host_api::{DType, ReduceArgs, ReduceOp, TensorMeta};

use crate::KernelError;
use crate::broadcast::PAR_MIN_ELEMS;
use crate::buffer::{CpuBuffer, Int};

/// `[outer, len, inner]` view of a reduction.
#[derive(Clone, Copy)]
struct Split {
    outer: usize,
    len: usize,
    inner: usize,
}

pub(crate) fn reduce(args: &ReduceArgs, (x, xm): (&CpuBuffer, &TensorMeta)) -> Result<CpuBuffer, KernelError> {
    let axis = args.axis as usize;
    let dims = |r: std::ops::Range<usize>| xm.shape[r].iter().map(|&d| d as usize).product::<usize>();
    let s = Split { outer: dims(0..axis), len: xm.shape[axis] as usize, inner: dims(axis + 1..xm.rank()) };
    match xm.dtype {
        DType::F32 | DType::F16 | DType::BF16 => {
            let v = x.float_view()?;
            let r: Vec<f32> = match args.op {
                ReduceOp::Sum => fold(&v, s, 0.0f64, |a, x| a + x as f64).into_iter().map(|a| a as f32).collect(),
                ReduceOp::Mean => {
                    let n = s.len as f64;
                    fold(&v, s, 0.0f64, |a, x| a + x as f64).into_iter().map(|a| (a / n) as f32).collect()
                }
                ReduceOp::Max => fold(&v, s, f32::NEG_INFINITY, |a, x| if x > a || x.is_nan() { x } else { a }),
                ReduceOp::Min => fold(&v, s, f32::INFINITY, |a, x| if x < a || x.is_nan() { x } else { a }),
            };
            Ok(CpuBuffer::from_f32_as(xm.dtype, &r))
        }
        DType::I32 => int_reduce::<i32>(args.op, x, s, i32::MIN, i32::MAX),
        DType::I64 => int_reduce::<i64>(args.op, x, s, i64::MIN, i64::MAX),
        DType::U8 => int_reduce::<u8>(args.op, x, s, u8::MIN, u8::MAX),
        DType::Q4_1 | DType::Q8_0 => Err(KernelError(format!("reductions do not take {}", xm.dtype))),
    }
}

fn int_reduce<T: Int>(op: ReduceOp, x: &CpuBuffer, s: Split, min: T, max: T) -> Result<CpuBuffer, KernelError> {
    let v = x.typed::<T>()?;
    let r = match op {
        ReduceOp::Sum => fold(v, s, T::ZERO, T::wrapping_add),
        ReduceOp::Max => fold(v, s, min, Ord::max),
        ReduceOp::Min => fold(v, s, max, Ord::min),
        ReduceOp::Mean => return Err(KernelError(format!("mean is not defined on {}", T::DTYPE))),
    };
    Ok(T::wrap(r.into()))
}

/// Folds the `len` axis of `x` with `step`, starting each output from `init`.
fn fold<T, A>(x: &[T], s: Split, init: A, step: impl Fn(A, T) -> A + Sync) -> Vec<A>
where
    T: Copy + Sync,
    A: Copy + Send + Sync + Default,
{
    let mut out = vec![init; s.outer * s.inner];
    if s.inner == 0 {
        return out;
    }
    let one = |(o, acc): (usize, &mut [A])| {
        let block = &x[o * s.len * s.inner..(o + 1) * s.len * s.inner];
        if s.inner == 1 {
            acc[0] = block.iter().fold(init, |a, &v| step(a, v));
        } else {
            for src in block.chunks_exact(s.inner) {
                for (a, &v) in acc.iter_mut().zip(src) {
                    *a = step(*a, v);
                }
            }
        }
    };
    if x.len() >= PAR_MIN_ELEMS && s.outer > 1 {
        out.par_chunks_mut(s.inner).enumerate().for_each(one);
    } else {
        out.chunks_mut(s.inner).enumerate().for_each(one);
    }
    out
}

/// The index of the largest element of each row (last axis) as i32: the first NaN if
/// there is one, else the first of the largest.
pub(crate) fn argmax((x, xm): (&CpuBuffer, &TensorMeta)) -> Result<CpuBuffer, KernelError> {
    let len = xm.shape.last().copied().unwrap_or(0) as usize;
    let v = x.float_view()?;
    if len == 0 {
        return Err(KernelError("argmax of an empty axis".into()));
    }
    let best = |row: &[f32]| {
        let mut b = 0usize;
        for (i, &e) in row.iter().enumerate().skip(1) {
            if row[b].is_nan() {
                break;
            }
            if e.is_nan() || e > row[b] {
                b = i;
            }
        }
        b as i32
    };
    let out: Vec<i32> = if v.len() >= PAR_MIN_ELEMS {
        v.par_chunks(len).map(best).collect()
    } else {
        v.chunks(len).map(best).collect()
    };
    Ok(out.into())
}
