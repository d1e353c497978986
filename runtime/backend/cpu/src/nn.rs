//! Neural-network row kernels: softmax over the last axis (with scale and a broadcast
//! additive mask), layer norm over the last axis, rotary position embedding, and the
//! embedding row gather (from a
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

/// Tables [`rope_table`] keeps per thread: a decode step of several sequences ropes
/// each one's queries and keys at its position in every block.
const ROPE_TABLES: usize = 16;
/// Pairs above which a table is not kept.
const ROPE_TABLE_MAX_PAIRS: usize = 4096;

/// cos/sin of every (position, pair) of a RoPE of `s` positions from `offset`, shared by
/// the heads and leading axes: `(offset + j) · base^(-2i/d)` in f64, rounded to f32.
/// Small tables are kept (the [`ROPE_TABLES`] used last, on this thread): a decode step
/// asks for the same one in every block, and the f64 `sin`, `cos` and `powf` were 2 % of
/// the device thread's time at eight SmolLM2 sequences.
fn rope_table(base: f32, offset: u32, s: usize, d: usize) -> std::sync::Arc<[(f32, f32)]> {
    use std::cell::RefCell;
    use std::sync::Arc;
    /// (base's bits, offset, s, d) and the table.
    type Kept = ((u32, u32, usize, usize), Arc<[(f32, f32)]>);
    thread_local! {
        static KEPT: RefCell<Vec<Kept>> = const { RefCell::new(Vec::new()) };
    }
    let compute = || -> Arc<[(f32, f32)]> {
        (0..s)
            .flat_map(|j| {
                let p = f64::from(offset) + j as f64;
                (0..d / 2).map(move |i| {
                    let theta = p * f64::from(base).powf(-2.0 * i as f64 / d as f64);
                    (theta.cos() as f32, theta.sin() as f32)
                })
            })
            .collect()
    };
    if s * (d / 2) > ROPE_TABLE_MAX_PAIRS {
        return compute();
    }
    let key = (base.to_bits(), offset, s, d);
    KEPT.with_borrow_mut(|kept| {
        let table = match kept.iter().position(|(k, _)| *k == key) {
            Some(at) => kept.remove(at).1,
            None => compute(),
        };
        kept.insert(0, (key, table.clone()));
        kept.truncate(ROPE_TABLES);
        table
    })
}

/// Rotary position embedding of `x` `[..., s, heads, d]`, adjacent pairs (llama.cpp's
/// normal RoPE): the pair `(2i, 2i + 1)` of sequence index j turns by
/// `(offset + j) · base^(-2i/d)`, cos and sin taken in f64 and rounded to f32.
pub(crate) fn rope(base: f32, offset: u32, (x, xm): (&CpuBuffer, &TensorMeta)) -> Result<CpuBuffer, KernelError> {
    let r = xm.rank();
    let (s, heads, d) = (xm.shape[r - 3] as usize, xm.shape[r - 2] as usize, xm.shape[r - 1] as usize);
    let xv = x.float_view()?;
    let table = rope_table(base, offset, s, d);
    Ok(float_with(xm.dtype, xv.len(), |out| {
        if d == 0 {
            return;
        }
        for (row, (o, xr)) in out.chunks_exact_mut(d).zip(xv.chunks_exact(d)).enumerate() {
            let j = row / heads % s;
            let angles = &table[j * d / 2..(j + 1) * d / 2];
            for ((o, x), &(c, sn)) in o.chunks_exact_mut(2).zip(xr.chunks_exact(2)).zip(angles) {
                o[0] = x[0] * c - x[1] * sn;
                o[1] = x[0] * sn + x[1] * c;
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_rope_tables_are_the_tables_computed_afresh() {
        // More keys than are kept, in an order that makes hits, misses and evictions;
        // each answer is compared with the table a fresh thread (nothing kept) computes.
        let keys: Vec<(f32, u32, usize, usize)> = (0..40u32)
            .flat_map(|p| [(100_000.0, p % 23, 1, 64), (10_000.0, p % 5, 1, 64), (100_000.0, p % 3, 2, 8)])
            .chain([(10_000.0, 7, 3000, 64)])
            .collect();
        let fresh = |&(base, offset, s, d): &(f32, u32, usize, usize)| {
            std::thread::scope(|t| t.spawn(|| rope_table(base, offset, s, d).to_vec()).join().unwrap())
        };
        for key @ &(base, offset, s, d) in &keys {
            let got = rope_table(base, offset, s, d);
            assert_eq!(got.len(), s * d / 2);
            assert_eq!(got.to_vec(), fresh(key), "{key:?}");
        }
    }
}
