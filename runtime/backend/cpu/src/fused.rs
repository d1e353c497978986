//! Fused kernels: `linear` (matmul, bias add, activation), `add_layer_norm` (residual add
//! and layer norm), `rms_norm`, causal grouped-query `gqa_attention` over a KV cache
//! (scores and softmax in f32 per query and head) and multi-head `attention` (per head q·kᵀ, the scaled and masked
//! softmax, ·v; heads read and written in place in the interleaved `[b, s, heads * d]`
//! layout).
//!
//! Each is built from the code paths of the ops it replaces and rounds to the dtype
//! wherever the chain of ops would (after the product, the bias add, the residual add,
//! the scores and the probabilities), so on this backend a fused op equals its unfused
//! composition: bit for bit for linear and add-layer-norm, and for attention up to the
//! blocking of the products (its gemm calls read strided heads instead of permuted
//! copies).

use std::sync::Arc;

use rayon::prelude::*;
use sluice_host_api::{DType, MatmulArgs, TensorMeta, UnaryOp};

use crate::KernelError;
use crate::broadcast::{PAR_MIN_ELEMS, broadcast_strides, for_rows};
use crate::buffer::{CpuBuffer, float_with, new_with, round_to};
use crate::elementwise::float_unary_in_place;
use crate::matmul::{gemm_f32, matmul};
use crate::packed::packed_weight;
use crate::panel_gemm::{self, Epilogue, StridedA};
use crate::simd::{self, normalize_rows};

/// Multiply-adds of an attention below which its tiles run on the calling thread.
const PAR_MIN_MACS: usize = 1 << 16;
/// Multiply-adds of a cached attention below which its rows run on the calling
/// thread: lower, as a decode step's attention runs on the team, whose threads are
/// awake (a row of 64 positions is ~1 µs).
const GQA_PAR_MIN_MACS: usize = 1 << 14;
/// Elements per parallel block of a linear's epilogue.
const PAR_BLOCK: usize = 1 << 14;

/// An `f32` result as a buffer of the floating `dtype` (no copy for f32).
fn from_f32(dtype: DType, v: Vec<f32>) -> CpuBuffer {
    if dtype == DType::F32 { v.into() } else { CpuBuffer::from_f32_as(dtype, &v) }
}

/// `activation(x · W + b)`: the matmul of `x` as a `[m, k]` matrix (with a
/// block-quantized `W`, the on-the-fly dequantizing product of `quant.rs`), then the bias add
/// and the activation, each rounded to the dtype like the `binary` and `unary` ops. In
/// f32 the bias and activation are applied in place on the product (row blocks in
/// parallel when large), with the same vector kernels as the `add` and `unary` ops.
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
    if let (DType::F32, CpuBuffer::F32(xv), CpuBuffer::F32(wv)) = (dtype, x, w.0)
        && panel_gemm::available()
    {
        return linear_panels(transpose_w, activation, xv, wv, bias, (m as usize, k as usize, n as usize));
    }
    // The product, and the activation still to apply after the bias.
    let (y, activation) = if w.1.dtype.is_quantized() {
        let (wdt, wb) = w.0.blocks()?;
        // Without a bias, each task applies the activation to the outputs it made.
        let inside = activation.filter(|_| bias.is_none());
        let y = crate::quant::linear(wdt, x.typed::<f32>()?, wb, (m as usize, k as usize, n as usize), inside)?;
        (CpuBuffer::F32(y), activation.filter(|_| inside.is_none()))
    } else {
        let matrix = |shape| TensorMeta::new(dtype, shape).map_err(|e| KernelError(e.message));
        let (x2, y2) = (matrix(vec![m, k])?, matrix(vec![m, n])?);
        (matmul(&MatmulArgs { transpose_a: false, transpose_b: transpose_w }, (x, &x2), w, &y2)?, activation)
    };
    if bias.is_none() && activation.is_none() {
        return Ok(y);
    }
    let n = n as usize;
    let bias = bias.map(|b| b.float_view()).transpose()?;
    if let CpuBuffer::F32(mut data) = y {
        let out = Arc::get_mut(&mut data).ok_or_else(|| KernelError("the product is shared".into()))?;
        for_row_blocks(out, n, |rows| match (&bias, activation) {
            (Some(b), Some(UnaryOp::Gelu)) => simd::bias_gelu_rows(rows, b, true),
            (Some(b), act) => {
                simd::bias_gelu_rows(rows, b, false);
                act.into_iter().for_each(|a| float_unary_in_place(a, rows));
            }
            (None, act) => act.into_iter().for_each(|a| float_unary_in_place(a, rows)),
        });
        return Ok(CpuBuffer::F32(data));
    }
    let mut v = y.to_f32_vec();
    if let Some(b) = &bias {
        for_rows(&mut v, n, |row| {
            for (o, &bv) in row.iter_mut().zip(b.iter()) {
                *o = round_to(dtype, *o + bv);
            }
        });
    }
    if let Some(a) = activation {
        for_row_blocks(&mut v, n, |rows| float_unary_in_place(a, rows));
    }
    Ok(from_f32(dtype, v))
}

/// The f32 linear on the panel kernels: the weight packed once ([`packed_weight`]), the
/// bias and a GELU applied to each tile as it is stored, another activation afterwards
/// (row blocks in parallel when large), as the `unary` op computes it.
fn linear_panels(
    transpose_w: bool,
    activation: Option<UnaryOp>,
    x: &[f32],
    w: &Arc<[f32]>,
    bias: Option<&CpuBuffer>,
    (m, k, n): (usize, usize, usize),
) -> Result<CpuBuffer, KernelError> {
    let packed = packed_weight(w, k, n, transpose_w);
    let bias = bias.map(|b| b.typed::<f32>()).transpose()?;
    let gelu = activation == Some(UnaryOp::Gelu);
    let epilogue = Epilogue { bias, gelu };
    let threads = rayon::current_num_threads();
    let out = new_with(m * n, |out| {
        panel_gemm::gemm(m, StridedA { data: x, rs: k, cs: 1 }, &packed, out, epilogue, threads);
        if let Some(a) = activation.filter(|_| !gelu) {
            for_row_blocks(out, n, |rows| float_unary_in_place(a, rows));
        }
    });
    Ok(CpuBuffer::F32(out))
}

/// RMS norm over the last axis of `x` (or of `x + residual`, the sum rounded to the
/// dtype first, as the `add` op would): `s / sqrt(mean(s²) + eps) * w`, the mean of
/// the squares summed in f32 in order, the result rounded to the dtype once.
pub(crate) fn rms_norm(
    eps: f32,
    (x, xm): (&CpuBuffer, &TensorMeta),
    residual: Option<&CpuBuffer>,
    w: &CpuBuffer,
) -> Result<CpuBuffer, KernelError> {
    let width = xm.shape.last().copied().unwrap_or(1) as usize;
    let (xv, wv) = (x.float_view()?, w.float_view()?);
    let rv = residual.map(CpuBuffer::float_view).transpose()?;
    let dtype = xm.dtype;
    Ok(float_with(dtype, xv.len(), |out| {
        match &rv {
            Some(r) => {
                out.iter_mut().zip(xv.iter().zip(r.iter())).for_each(|(o, (&a, &b))| *o = round_to(dtype, a + b))
            }
            None => out.copy_from_slice(&xv),
        }
        if width == 0 {
            return;
        }
        for_rows(out, width, |row| {
            let mean = row.iter().map(|v| v * v).sum::<f32>() / width as f32;
            let scale = 1.0 / (mean + eps).sqrt();
            row.iter_mut().zip(wv.iter()).for_each(|(v, &g)| *v = *v * scale * g);
        });
    }))
}

/// Causal grouped-query attention of q `[s, heads, d]` over the first `kv_len` positions
/// of k, v `[ctx, kv_heads, d]`: query i (position `kv_len - s + i`) reads positions up
/// to its own; head h reads kv head `h / (heads / kv_heads)`. Per query and head the
/// scores (lane-parallel dot products), the softmax (max subtracted) and the weighted
/// sum of v are f32 (`simd::attend_row`); the result is rounded to the dtype once.
/// Queries × heads run in parallel on the device's team when large.
pub(crate) fn gqa_attention(
    kv_len: u32,
    scale: f32,
    (q, qm): (&CpuBuffer, &TensorMeta),
    (k, km): (&CpuBuffer, &TensorMeta),
    v: &CpuBuffer,
) -> Result<CpuBuffer, KernelError> {
    let (s, heads, d) = (qm.shape[0] as usize, qm.shape[1] as usize, qm.shape[2] as usize);
    let kv_heads = km.shape[1] as usize;
    let (qv, kv, vv) = (q.float_view()?, k.float_view()?, v.float_view()?);
    let (n, group) = (kv_len as usize, heads / kv_heads.max(1));
    let one = |row: usize, out: &mut [f32]| {
        let (i, h) = (row / heads, row % heads);
        let g = h / group;
        let positions = n - s + i + 1;
        let mut scores = vec![0.0f32; positions];
        let qr = &qv[row * d..(row + 1) * d];
        simd::attend_row(qr, &kv[g * d..], &vv[g * d..], kv_heads * d, scale, &mut scores, out);
    };
    Ok(float_with(qm.dtype, s * heads * d, |out| {
        if d == 0 {
            return;
        }
        if s * heads * n * d >= GQA_PAR_MIN_MACS {
            crate::team::for_each_chunk_mut(out, d, one);
        } else {
            out.chunks_mut(d).enumerate().for_each(|(row, out)| one(row, out));
        }
    }))
}

/// Runs `f` on blocks of whole `width`-element rows of `data`: one block on the calling
/// thread when small, otherwise blocks of about [`PAR_BLOCK`] elements on rayon.
fn for_row_blocks(data: &mut [f32], width: usize, f: impl Fn(&mut [f32]) + Sync) {
    if width == 0 || data.is_empty() {
        return;
    }
    if data.len() < PAR_MIN_ELEMS || data.len() / width < 2 {
        f(data);
    } else {
        let rows = (PAR_BLOCK / width).max(1);
        data.par_chunks_mut(rows * width).for_each(&f);
    }
}

/// Layer norm of `x + residual` over the last axis; the sum is rounded to the dtype
/// first, as the `add` op would. Blocks of rows are added and normalised together
/// (while in cache), in parallel when large.
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
        if width == 0 {
            return;
        }
        let block = |(i, rows): (usize, &mut [f32])| {
            let at = i * ROWS_PER_BLOCK * width;
            simd::add_into(&xv[at..at + rows.len()], &rv[at..at + rows.len()], rows);
            if dtype != DType::F32 {
                rows.iter_mut().for_each(|v| *v = round_to(dtype, *v));
            }
            normalize_rows(rows, &g, &b, eps);
        };
        if out.len() < PAR_MIN_ELEMS {
            out.chunks_mut(ROWS_PER_BLOCK * width).enumerate().for_each(block);
        } else {
            out.par_chunks_mut(ROWS_PER_BLOCK * width).enumerate().for_each(block);
        }
    }))
}

/// Rows of add-layer-norm per block.
const ROWS_PER_BLOCK: usize = 16;

/// Query rows of one attention tile at most.
const MAX_TILE: usize = 64;

/// Multi-head attention: q `[b, sq, e]`, k and v `[b, sk, e]`, head `h` being columns
/// `h*d..(h+1)*d`; mask broadcasting to `[b, heads, sq, sk]`.
///
/// One fused pass per tile of query rows of one batch element: for each head, the
/// scores of the tile (`tile × sk`, never the whole `sq × sk` matrix), scale and mask,
/// the softmax, and the product with `v_h` written straight into the output columns of
/// the head. Tiles run in parallel (by batch element and query rows); the tile height
/// depends only on the shape and the thread count, so results are deterministic for a
/// given thread count. Computed in `f32`, rounding the scores and the probabilities to
/// the dtype as the matmul and softmax ops would.
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
    if out.numel() == 0 || sk == 0 || d == 0 {
        // Nothing to compute, or softmax over no keys: the product with no values is 0.
        return Ok(from_f32(dtype, vec![0.0; out.numel()]));
    }
    let (qv, kv, vv) = (q.float_view()?, k.float_view()?, v.float_view()?);
    let mv = mask.map(|(m, _)| m.float_view()).transpose()?;
    // Mask strides over the scores' axes [b, heads, sq, sk]; 0 where it broadcasts.
    let ms = mask.map(|(_, mm)| broadcast_strides(&mm.shape, 4));
    let threads = rayon::current_num_threads();
    let tile = tile_rows(b, sq, threads);
    // Computes query rows `i0..i0 + rows` of batch element `bi` into `o` (rows × e).
    let run_tile = |bi: usize, i0: usize, o: &mut [f32]| {
        let rows = o.len() / e;
        let mut s = vec![0.0f32; rows * sk];
        for hi in 0..h {
            let (q0, kv0) = ((bi * sq + i0) * e + hi * d, bi * sk * e + hi * d);
            // scores = q_h · k_hᵀ: k_hᵀ[p, j] = k[j, p] is row stride 1, column stride e.
            gemm_f32(rows, sk, d, &mut s, sk, (&qv[q0..], e, 1), (&kv[kv0..], 1, e));
            for (r, row) in s.chunks_mut(sk).enumerate() {
                // The scores are rounded to the dtype as a GPU GEMM would store them;
                // in f16 the scale comes first (the CUDA backend passes it as the GEMM's
                // alpha), since raw scores can pass f16's range where scaled ones do not.
                let row_scale = match dtype {
                    DType::F16 => {
                        row.iter_mut().for_each(|x| *x = round_to(dtype, *x * scale));
                        1.0
                    }
                    DType::F32 => scale,
                    _ => {
                        row.iter_mut().for_each(|x| *x = round_to(dtype, *x));
                        scale
                    }
                };
                match (&mv, &ms) {
                    (Some(m), Some(st)) => {
                        let at = bi * st[0] + hi * st[1] + (i0 + r) * st[2];
                        if st[3] == 0 {
                            simd::scale_add_scalar(row, row_scale, m[at]);
                        } else {
                            simd::scale_add_row(row, row_scale, &m[at..at + sk]);
                        }
                    }
                    _ => simd::scale_add_scalar(row, row_scale, 0.0),
                }
                simd::softmax_row(row);
                if dtype != DType::F32 {
                    row.iter_mut().for_each(|p| *p = round_to(dtype, *p));
                }
            }
            gemm_f32(rows, d, sk, &mut o[hi * d..], e, (&s, sk, 1), (&vv[kv0..], e, 1));
        }
    };
    let macs = b * h * sq * sk * d * 2;
    Ok(float_with(dtype, out.numel(), |o| {
        if macs >= PAR_MIN_MACS && threads > 1 {
            o.par_chunks_mut(sq * e)
                .enumerate()
                .flat_map(|(bi, batch)| {
                    batch.par_chunks_mut(tile * e).enumerate().map(move |(t, rows)| (bi, t * tile, rows))
                })
                .for_each(|(bi, i0, rows)| run_tile(bi, i0, rows));
        } else {
            for (bi, batch) in o.chunks_mut(sq * e).enumerate() {
                for (t, rows) in batch.chunks_mut(tile * e).enumerate() {
                    run_tile(bi, t * tile, rows);
                }
            }
        }
    }))
}

/// Query rows per attention tile: at most [`MAX_TILE`], fewer when that leaves threads
/// idle (a multiple of 8 unless `sq` is smaller).
fn tile_rows(b: usize, sq: usize, threads: usize) -> usize {
    let per_batch = threads.div_ceil(b.max(1)).max(1);
    let rows = sq.div_ceil(per_batch).next_multiple_of(8);
    rows.clamp(1, MAX_TILE).min(sq.max(1))
}
