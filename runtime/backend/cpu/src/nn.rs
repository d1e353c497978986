//! Neural-network row kernels: softmax over the last axis (with scale and a broadcast
//! additive mask), layer norm over the last axis, and the embedding row gather.
//!
//! Softmax subtracts the row maximum before `exp` and sums in `f64`. A row whose every
//! logit is `-inf` (fully masked) comes out as all zeros rather than NaN; a row holding
//! NaN or `+inf` comes out NaN. Layer norm computes mean and variance (biased, two
//! passes) in `f64`.

use rayon::prelude::*;
use sluice_host_api::{DType, TensorMeta};

use crate::KernelError;
use crate::broadcast::{PAR_MIN_ELEMS, Plan, for_rows, zip_into};
use crate::buffer::{CpuBuffer, Element, float_with, new_with};

pub(crate) fn softmax(
    scale: f32,
    (x, xm): (&CpuBuffer, &TensorMeta),
    mask: Option<(&CpuBuffer, &TensorMeta)>,
) -> Result<CpuBuffer, KernelError> {
    let width = xm.shape.last().copied().unwrap_or(1) as usize;
    let xv = x.float_view()?;
    let mv = mask.map(|(m, _)| m.float_view()).transpose()?;
    Ok(float_with(xm.dtype, xv.len(), |out| {
        match (&mv, mask) {
            (Some(mv), Some((_, mm))) => {
                let plan = Plan::new(&xm.shape, &mm.shape, &xm.shape);
                zip_into(&plan, &xv, mv, out, |x, m| x * scale + m);
            }
            _ if scale == 1.0 => out.copy_from_slice(&xv),
            _ => out.iter_mut().zip(xv.iter()).for_each(|(o, &x)| *o = x * scale),
        }
        for_rows(out, width, softmax_row);
    }))
}

pub(crate) fn softmax_row(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m || v.is_nan() { v } else { m });
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let mut sum = 0.0f64;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    row.iter_mut().for_each(|v| *v *= inv);
}

pub(crate) fn layer_norm(
    eps: f32,
    (x, xm): (&CpuBuffer, &TensorMeta),
    gamma: &CpuBuffer,
    beta: &CpuBuffer,
) -> Result<CpuBuffer, KernelError> {
    let width = xm.shape.last().copied().unwrap_or(1) as usize;
    let (xv, g, b) = (x.float_view()?, gamma.float_view()?, beta.float_view()?);
    let eps = eps as f64;
    Ok(float_with(xm.dtype, xv.len(), |out| {
        out.copy_from_slice(&xv);
        normalize_rows(out, width, &g, &b, eps);
    }))
}

/// Layer norm of every `width`-element row of `data`, in place (shared with the fused
/// add-layer-norm, so both normalise identically).
pub(crate) fn normalize_rows(data: &mut [f32], width: usize, g: &[f32], b: &[f32], eps: f64) {
    for_rows(data, width, |row| {
        let n = row.len() as f64;
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let rstd = 1.0 / (var + eps).sqrt();
        for ((v, &g), &b) in row.iter_mut().zip(g.iter()).zip(b.iter()) {
            *v = ((*v as f64 - mean) * rstd * g as f64 + b as f64) as f32;
        }
    });
}

/// Gathers rows of `table` (`[vocab, dim]`) by `ids` (i32 or i64, any shape).
pub(crate) fn embedding(
    (table, tm): (&CpuBuffer, &TensorMeta),
    (ids, im): (&CpuBuffer, &TensorMeta),
) -> Result<CpuBuffer, KernelError> {
    let (vocab, dim) = (tm.shape[0] as usize, tm.shape[1] as usize);
    let check = |pos: usize, id: i64| -> Result<usize, KernelError> {
        usize::try_from(id).ok().filter(|&i| i < vocab).ok_or_else(|| {
            KernelError(format!("embedding id {id} at position {pos} of ids {:?} is not in 0..{vocab}", im.shape))
        })
    };
    let rows: Vec<usize> = match (ids, im.dtype) {
        (CpuBuffer::I32(v), DType::I32) => v.iter().enumerate().map(|(p, &id)| check(p, id as i64)).collect(),
        (CpuBuffer::I64(v), DType::I64) => v.iter().enumerate().map(|(p, &id)| check(p, id)).collect(),
        _ => Err(KernelError(format!("embedding ids must be i32 or i64, got {}", ids.dtype()))),
    }?;
    match table {
        CpuBuffer::F32(t) => Ok(gather(t, dim, &rows)),
        CpuBuffer::F16(t) => Ok(gather(t, dim, &rows)),
        CpuBuffer::BF16(t) => Ok(gather(t, dim, &rows)),
        CpuBuffer::I32(t) => Ok(gather(t, dim, &rows)),
        CpuBuffer::I64(t) => Ok(gather(t, dim, &rows)),
        CpuBuffer::U8(t) => Ok(gather(t, dim, &rows)),
    }
}

fn gather<T: Element>(table: &[T], dim: usize, rows: &[usize]) -> CpuBuffer {
    T::wrap(new_with(rows.len() * dim, |out| {
        if dim == 0 {
            return;
        }
        let copy = |(o, &r): (&mut [T], &usize)| o.copy_from_slice(&table[r * dim..(r + 1) * dim]);
        if out.len() >= PAR_MIN_ELEMS {
            out.par_chunks_mut(dim).zip(rows.par_iter()).for_each(copy);
        } else {
            out.chunks_mut(dim).zip(rows).for_each(copy);
        }
    }))
}
