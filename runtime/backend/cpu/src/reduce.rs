//! Reductions of one axis: sum, mean, max and min, with or without keeping the axis.
//!
//! The input is viewed as `[outer, len, inner]` with `len` the reduced axis. Float sums
//! and means accumulate in `f64`; a mean over an empty axis is NaN and a sum over one is
//! 0 (max/min over an empty axis are refused by `infer`). Float max/min propagate NaN.
//! Integer sums wrap in the input dtype. Argmax picks each row's largest element, and
//! sample draws a token from each row of logits (the WIT `sample-args` algorithm).

use rayon::prelude::*;
use sluice_host_api::{DType, ReduceArgs, ReduceOp, SampleArgs, TensorMeta};

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

/// The order-preserving key of an f32 (NaN excluded): larger floats, larger keys.
fn order_key(f: f32) -> u32 {
    let b = f.to_bits();
    if b & 0x8000_0000 != 0 { !b } else { b | 0x8000_0000 }
}

/// The largest key `t` with `keep(t)` true, when `keep` is monotone (true up to some
/// key): a bisection over the 32 bits.
fn largest_key(keep: impl Fn(u32) -> bool) -> u32 {
    let (mut lo, mut hi) = (0u32, u32::MAX);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if keep(mid) { lo = mid } else { hi = mid - 1 }
    }
    lo
}

/// The token drawn from one row of logits, row `r` of its tensor: the algorithm of the
/// WIT `sample-args`, step for step as the CUDA kernel (`reduce.cu`) runs it.
pub(crate) fn sample_row(row: &[f32], r: u64, args: &SampleArgs) -> i32 {
    let l = |i: usize| if row[i].is_nan() { f32::NEG_INFINITY } else { row[i] };
    let n = row.len();
    let m = (0..n).map(l).fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        return 0;
    }
    let k = args.top_k as usize;
    let top_k = if k > 0 && k < n { largest_key(|t| (0..n).filter(|&i| order_key(l(i)) >= t).count() >= k) } else { 0 };
    let w = |i: usize| if order_key(l(i)) >= top_k { ((l(i) - m) / args.temperature).exp() } else { 0.0 };
    let weights: Vec<f32> = (0..n).map(w).collect();
    let total: f64 = weights.iter().map(|&x| f64::from(x)).sum();
    let top_p = if args.top_p < 1.0 {
        let need = f64::from(args.top_p) * total;
        largest_key(|t| weights.iter().filter(|&&x| order_key(x) >= t).map(|&x| f64::from(x)).sum::<f64>() >= need)
    } else {
        0
    };
    let kept = |x: f32| x > 0.0 && order_key(x) >= top_p;
    let mass: f64 = weights.iter().filter(|&&x| kept(x)).map(|&x| f64::from(x)).sum();
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut z = args.seed.wrapping_add(r.wrapping_add(1).wrapping_mul(GOLDEN)).wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let target = (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * mass;
    let (mut acc, mut last) = (0.0f64, 0usize);
    for (i, &x) in weights.iter().enumerate() {
        if kept(x) {
            acc += f64::from(x);
            last = i;
            if acc > target {
                return i as i32;
            }
        }
    }
    last as i32
}

/// [`sample_row`] over every row of f32 logits `[..., v]`.
pub(crate) fn sample(args: &SampleArgs, (x, xm): (&CpuBuffer, &TensorMeta)) -> Result<CpuBuffer, KernelError> {
    let len = xm.shape.last().copied().unwrap_or(0) as usize;
    let v = x.typed::<f32>()?;
    if len == 0 {
        return Err(KernelError("sample of an empty axis".into()));
    }
    let draw = |(r, row): (usize, &[f32])| sample_row(row, r as u64, args);
    let out: Vec<i32> = if v.len() >= PAR_MIN_ELEMS {
        v.par_chunks(len).enumerate().map(draw).collect()
    } else {
        v.chunks(len).enumerate().map(draw).collect()
    };
    Ok(out.into())
}
