//! Neural-network row kernels: softmax over the last axis (with scale and a broadcast
//! additive mask), layer norm over the last axis, and the embedding row gather (from a
//! block-quantized table, rows come out dequantized to f32).
//!
//! The row kernels themselves are the vector kernels of `simd.rs` (shared with the fused
//! ops, so both compute identically). Softmax subtracts the row maximum before `exp` and
//! sums in f32 lanes. A row whose every logit is `-inf` (fully masked) comes out as all
//! zeros rather than NaN; a row holding NaN or `+inf` comes out NaN. Layer norm computes
//! mean and variance (biased, two passes) in f32 lanes.

use rayon::prelude::*;
use sluice_host_api::{DType, TensorMeta};

use crate::KernelError;
use crate::broadcast::{PAR_MIN_ELEMS, Plan, for_rows, zip_into};
use crate::buffer::{CpuBuffer, Element, float_with, new_with};
use crate::simd::{normalize_rows, softmax_row};

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

pub(crate) fn layer_norm(
    eps: f32,
    (x, xm): (&CpuBuffer, &TensorMeta),
    gamma: &CpuBuffer,
    beta: &CpuBuffer,
) -> Result<CpuBuffer, KernelError> {
    let width = xm.shape.last().copied().unwrap_or(1) as usize;
    let (xv, g, b) = (x.float_view()?, gamma.float_view()?, beta.float_view()?);
    Ok(float_with(xm.dtype, xv.len(), |out| {
        out.copy_from_slice(&xv);
        for_rows(out, width, |row| normalize_rows(row, &g, &b, eps));
    }))
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
        CpuBuffer::Blocks(d, t) => Ok(crate::quant::gather_rows(*d, t, dim, &rows).into()),
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
