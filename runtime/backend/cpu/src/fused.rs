//! Fused kernels: `linear` (matmul, bias add, activation), `add_layer_norm` (residual add
//! and layer norm) and multi-head `attention` (per head q·kᵀ, the scaled and masked
//! softmax, ·v; heads read and written in place in the interleaved `[b, s, heads * d]`
//! layout).
//!
//! Each is built from the code paths of the ops it replaces and rounds to the dtype
//! wherever the chain of ops would (after the product, the bias add, the residual add,
//! the scores and the probabilities), so on this backend a fused op equals its unfused
//! composition: bit for bit for linear and add-layer-norm, and for attention up to the
//! blocking of the products (its gemm calls read strided heads instead of permuted
//! copies).

use rayon::prelude::*;
use sluice_host_api::{DType, MatmulArgs, TensorMeta, UnaryOp};

use crate::KernelError;
use crate::broadcast::{Plan, broadcast_strides, for_rows, zip_into};
use crate::buffer::{CpuBuffer, float_with, round_to};
use crate::elementwise::float_unary;
use crate::matmul::{gemm_f32, matmul};
use crate::nn::{normalize_rows, softmax_row};

/// Multiply-adds of an attention below which its heads run on the calling thread.
const PAR_MIN_MACS: usize = 1 << 16;

/// An `f32` result as a buffer of the floating `dtype` (no copy for f32).
fn from_f32(dtype: DType, v: Vec<f32>) -> CpuBuffer {
    if dtype == DType::F32 { v.into() } else { CpuBuffer::from_f32_as(dtype, &v) }
}

/// `activation(x · W + b)`: the matmul of `x` as a `[m, k]` matrix, then the bias add
/// and the activation, each rounded to the dtype like the `binary` and `unary` ops.
pub(crate) fn linear(
    transpose_w: bool,
    activation: Option<UnaryOp>,
    (x, xm): (&CpuBuffer, &TensorMeta),
    w: (&CpuBuffer, &TensorMeta),
    bias: Option<&CpuBuffer>,
    out: &TensorMeta,
) -> Result<CpuBuffer, KernelError> {
    let dtype = out.dtype;
    let n = out.shape.last().copied().unwrap_or(0);
    if out.numel() == 0 {
        return Ok(from_f32(dtype, Vec::new()));
    }
    let k = xm.shape.last().copied().unwrap_or(0);
    let m = u32::try_from(out.numel() / n as usize)
        .map_err(|_| KernelError(format!("{} rows do not fit one matrix", out.numel() / n as usize)))?;
    let matrix = |shape| TensorMeta::new(dtype, shape).map_err(|e| KernelError(e.message));
    let (x2, y2) = (matrix(vec![m, k])?, matrix(vec![m, n])?);
    let y = matmul(&MatmulArgs { transpose_a: false, transpose_b: transpose_w }, (x, &x2), w, &y2)?;
    if bias.is_none() && activation.is_none() {
        return Ok(y);
    }
    let mut v = y.to_f32_vec();
    if let Some(b) = bias {
        let b = b.float_view()?;
        for_rows(&mut v, n as usize, |row| {
            for (o, &bv) in row.iter_mut().zip(b.iter()) {
                *o = round_to(dtype, *o + bv);
            }
        });
    }
    Ok(match activation {
        Some(a) if dtype == DType::F32 => CpuBuffer::F32(float_unary(a, &v)),
        Some(a) => CpuBuffer::from_f32_as(dtype, &float_unary(a, &v)),
        None => from_f32(dtype, v),
    })
}

/// Layer norm of `x + residual` over the last axis; the sum is rounded to the dtype
/// first, as the `add` op would.
pub(crate) fn add_layer_norm(
    eps: f32,
    (x, xm): (&CpuBuffer, &TensorMeta),
    residual: &CpuBuffer,
    gamma: &CpuBuffer,
    beta: &CpuBuffer,
) -> Result<CpuBuffer, KernelError> {
    let width = xm.shape.last().copied().unwrap_or(1) as usize;
    let (xv, rv) = (x.float_view()?, residual.float_view()?);
    let (g, b) = (gamma.float_view()?, beta.float_view()?);
    let dtype = xm.dtype;
    Ok(float_with(dtype, xv.len(), |out| {
        let plan = Plan::new(&xm.shape, &xm.shape, &xm.shape);
        zip_into(&plan, &xv, &rv, out, |a, r| round_to(dtype, a + r));
        normalize_rows(out, width, &g, &b, eps as f64);
    }))
}

/// Multi-head attention: q `[b, sq, e]`, k and v `[b, sk, e]`, head `h` being columns
/// `h*d..(h+1)*d`; mask broadcasting to `[b, heads, sq, sk]`. Computed in `f32` per
/// (batch element, head), rounding the scores and the probabilities to the dtype as
/// the matmul and softmax ops would; the heads run in parallel when large.
pub(crate) fn attention(
    heads: u32,
    scale: f32,
    (q, qm): (&CpuBuffer, &TensorMeta),
    (k, km): (&CpuBuffer, &TensorMeta),
    v: &CpuBuffer,
    mask: Option<(&CpuBuffer, &TensorMeta)>,
    out: &TensorMeta,
) -> Result<CpuBuffer, KernelError> {
    let dtype = qm.dtype;
    let (b, sq, e) = (qm.shape[0] as usize, qm.shape[1] as usize, qm.shape[2] as usize);
    let (sk, h) = (km.shape[1] as usize, heads.max(1) as usize);
    let d = e / h;
    if out.numel() == 0 || sk == 0 {
        // Nothing to compute, or softmax over no keys: the product with no values is 0.
        return Ok(from_f32(dtype, vec![0.0; out.numel()]));
    }
    let (qv, kv, vv) = (q.float_view()?, k.float_view()?, v.float_view()?);
    let mv = mask.map(|(m, _)| m.float_view()).transpose()?;
    // Mask strides over the scores' axes [b, heads, sq, sk]; 0 where it broadcasts.
    let ms = mask.map(|(_, mm)| broadcast_strides(&mm.shape, 4));
    let head = |bh: usize| -> Vec<f32> {
        let (bi, hi) = (bh / h, bh % h);
        let (q0, kv0) = (bi * sq * e + hi * d, bi * sk * e + hi * d);
        let mut s = vec![0.0f32; sq * sk];
        // scores = q_h · k_hᵀ: k_hᵀ[p, j] = k[j, p] is row stride 1, column stride e.
        gemm_f32(sq, sk, d, &mut s, sk, (&qv[q0..], e, 1), (&kv[kv0..], 1, e));
        for (i, row) in s.chunks_mut(sk).enumerate() {
            for (j, x) in row.iter_mut().enumerate() {
                let logit = round_to(dtype, *x) * scale;
                *x = match (&mv, &ms) {
                    (Some(m), Some(st)) => logit + m[bi * st[0] + hi * st[1] + i * st[2] + j * st[3]],
                    _ => logit,
                };
            }
            softmax_row(row);
            row.iter_mut().for_each(|p| *p = round_to(dtype, *p));
        }
        let mut o = vec![0.0f32; sq * d];
        gemm_f32(sq, d, sk, &mut o, d, (&s, sk, 1), (&vv[kv0..], e, 1));
        o
    };
    let macs = b * h * sq * sk * d * 2;
    let per_head: Vec<Vec<f32>> = if macs >= PAR_MIN_MACS && b * h > 1 {
        (0..b * h).into_par_iter().map(head).collect()
    } else {
        (0..b * h).map(head).collect()
    };
    Ok(float_with(dtype, out.numel(), |o| {
        for (bh, ctx) in per_head.iter().enumerate() {
            let (bi, hi) = (bh / h, bh % h);
            for (i, src) in ctx.chunks(d).enumerate() {
                let at = (bi * sq + i) * e + hi * d;
                o[at..at + d].copy_from_slice(src);
            }
        }
    }))
}
