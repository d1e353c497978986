//! The block-quantized weight formats (ggml's Q4_1 and Q8_0, see [`DType::Q4_1`]):
//! dequantization, quantization (for casts and tests), and the quantized linear
//! `y = x · Wᵀ`.
//!
//! The linear multiplies the weights with the activations quantized to Q8 blocks, as
//! ggml does (`q8.rs`: 32 signed bytes and a scale per block of 32), on both of its
//! paths, so the values it multiplies depend on neither the path nor the number of rows.
//! Where the vector kernel runs (AVX2) every output is a dot product of an x row with a
//! weight row, summed exactly in integers block by block straight from the packed bytes
//! ([`q8::dot_rows`]); chunks of weight rows are split over the device's kernel team
//! (`team.rs`: its threads stay awake between a decode step's kernels), and each chunk
//! serves every x row while it is in cache. That holds for a prompt's rows too: on
//! SmolLM2's projections at 64 rows it took 0.85× to 0.5× of the time of the gemm path
//! below (AVX-512 VNNI, 2 threads), and each row's bits are those it gets alone, so a
//! prompt's result does not depend on what it is batched with. Without AVX2, a decode
//! step's few rows take the portable dot kernel, and more rows (a prompt) panels of weight
//! rows dequantized into f32 and multiplied with the gemm kernels of `matmul.rs` (with x
//! as its Q8 blocks stand for), one panel per task of the kernel team (at least two a
//! thread), so the dequantization is paid once per panel rather than once per x row. The
//! two paths sum in different orders, so they agree to f32 rounding (the conformance
//! tests bound the difference against a reference that quantizes x the same way), not
//! bit for bit.

use std::sync::Arc;

use half::f16;
use sluice_host_api::{DType, QUANT_BLOCK, UnaryOp};

use crate::KernelError;
use crate::broadcast::PAR_CHUNK;
use crate::buffer::new_with;
use crate::elementwise::float_unary_in_place;
use crate::matmul::gemm_f32;
use crate::q8;

/// Rows of `x` up to which the linear takes the dot-product path without AVX2 (a decode
/// step of up to this many sequences; a serving function's batch is at most 8).
const DOT_MAX_ROWS: usize = q8::MAX_ROWS;
/// Weight rows dequantized per panel of the gemm path.
const PANEL_ROWS: usize = 256;
/// Multiply-adds below which the work stays on the calling thread.
const PAR_MIN_MACS: usize = 1 << 16;

/// The little-endian f16 at `b[at..at + 2]`, widened exactly (bit arithmetic the
/// compiler inlines into the vector kernels; `half`'s conversion is an out-of-line call).
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

#[inline(always)]
fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let (exp, man) = (u32::from(h >> 10) & 0x1f, u32::from(h & 0x3ff));
    match exp {
        // Zero and subnormals: man · 2^-24, exact in f32.
        0 => f32::from_bits((man as f32 * (1.0 / 16_777_216.0)).to_bits() | sign),
        31 => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// Dequantizes whole blocks of `dtype` from `bytes` into `out` (32 values per block).
pub(crate) fn dequantize_into(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    let bb = dtype.block_bytes();
    for (block, o) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(QUANT_BLOCK)) {
        let d = f16_at(block, 0);
        match dtype {
            DType::Q4_1 => {
                let m = f16_at(block, 2);
                for (j, &q) in block[4..20].iter().enumerate() {
                    o[j] = d * f32::from(q & 15) + m;
                    o[j + 16] = d * f32::from(q >> 4) + m;
                }
            }
            _ => {
                for (o, &q) in o.iter_mut().zip(&block[2..34]) {
                    *o = d * f32::from(q as i8);
                }
            }
        }
    }
}

/// Every element of a block-format buffer as f32.
pub(crate) fn dequantize(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0; bytes.len() / dtype.block_bytes() * QUANT_BLOCK];
    dequantize_into(dtype, bytes, &mut out);
    out
}

/// Quantizes `v` to `dtype` the way ggml's reference quantizers do (Q8_0: `d =
/// max|x| / 127`, `q = round(x / d)`; Q4_1: `d = (max - min) / 15`, `m = min`,
/// `q = round((x - m) / d)` clamped to 0..15). A trailing partial block is dropped.
pub(crate) fn quantize(dtype: DType, v: &[f32]) -> Arc<[u8]> {
    let mut out = Vec::with_capacity(v.len() / QUANT_BLOCK * dtype.block_bytes());
    for block in v.chunks_exact(QUANT_BLOCK) {
        match dtype {
            DType::Q4_1 => {
                let min = block.iter().copied().fold(f32::INFINITY, f32::min);
                let max = block.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let d = (max - min) / 15.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend(f16::from_f32(d).to_le_bytes());
                out.extend(f16::from_f32(min).to_le_bytes());
                for j in 0..16 {
                    let q = |x: f32| ((x - min) * id + 0.5).clamp(0.0, 15.0) as u8;
                    out.push(q(block[j]) | (q(block[j + 16]) << 4));
                }
            }
            _ => {
                let amax = block.iter().fold(0.0f32, |a, &x| a.max(x.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend(f16::from_f32(d).to_le_bytes());
                out.extend(block.iter().map(|&x| (x * id).round() as i8 as u8));
            }
        }
    }
    out.into()
}

/// The bytes the quantized linear holds besides its output, at most: x as Q8 blocks
/// (a byte per element and two f32s per block), and on the gemm path also x's
/// dequantized copy, one dequantized panel per thread and the product's blocks (the dot
/// path: the product's chunks).
pub fn linear_scratch_bytes(m: usize, k: usize, n: usize, threads: usize) -> u64 {
    let q8 = (m * k + m * k.div_ceil(QUANT_BLOCK) * 8) as u64;
    if dot_path(m) {
        return q8 + (m * n) as u64 * 4;
    }
    let floats = m * k + threads.max(1) * PANEL_ROWS.min(n) * k + m * n;
    q8 + floats as u64 * 4
}

/// Whether `m` rows of x take the dot-product path: always where the vector kernel runs
/// (it is faster than dequantizing for the gemm even on a prompt's rows), else only for a
/// decode step's few rows.
fn dot_path(m: usize) -> bool {
    m <= DOT_MAX_ROWS || q8::fast()
}

/// `y = act(x · Wᵀ)` for `x` `[m, k]` f32 and the block-format weight `w` `[n, k]`
/// (packed bytes); `y` is `[m, n]` f32, made in the buffer it is returned in (no copy).
/// The activation, if any, is applied by each task to the outputs it computed, while
/// they are in cache.
pub(crate) fn linear(
    dtype: DType,
    x: &[f32],
    w: &[u8],
    (m, k, n): (usize, usize, usize),
    activation: Option<UnaryOp>,
) -> Result<Arc<[f32]>, KernelError> {
    let row_bytes = k / QUANT_BLOCK * dtype.block_bytes();
    if !k.is_multiple_of(QUANT_BLOCK) || x.len() != m * k || w.len() != n * row_bytes {
        return Err(KernelError(format!(
            "quantized linear: x of {} elements and {} weight bytes do not make [{m}, {k}] · [{n}, {k}]ᵀ in {dtype}",
            x.len(),
            w.len()
        )));
    }
    Ok(new_with(m * n, |y| linear_into(dtype, x, w, (m, k, n, row_bytes), activation, y)))
}

/// [`linear`] into `y` (zeros), its shapes checked.
fn linear_into(
    dtype: DType,
    x: &[f32],
    w: &[u8],
    (m, k, n, row_bytes): (usize, usize, usize, usize),
    activation: Option<UnaryOp>,
    y: &mut [f32],
) {
    // In pieces below the elementwise kernels' parallel threshold: a task of the team
    // does not fan out again.
    const _: () = assert!(PAR_CHUNK < crate::broadcast::PAR_MIN_ELEMS);
    let activate = |out: &mut [f32]| {
        if let Some(op) = activation {
            out.chunks_mut(PAR_CHUNK).for_each(|piece| float_unary_in_place(op, piece));
        }
    };
    if m == 0 || n == 0 || k == 0 {
        activate(y);
        return;
    }
    let parallel = m * n * k >= PAR_MIN_MACS;
    if dot_path(m) {
        // Chunks of weight rows, each read from memory once and applied to every x row
        // while it is in cache (decode of several sequences at once reads the weights
        // once, not once per sequence); each output element is the same dot product as
        // for that x row alone, so the bits do not depend on m.
        let chunk = if parallel { n.div_ceil(crate::team::threads() * 4).max(16) } else { n };
        let xq = q8::quantize_rows(x);
        if m == 1 {
            let one = |i: usize, out: &mut [f32]| {
                let w_rows = &w[i * chunk * row_bytes..(i * chunk + out.len()) * row_bytes];
                q8::dot_rows(dtype, w_rows, &xq, k, out);
                activate(out);
            };
            if parallel {
                crate::team::for_each_chunk_mut(y, chunk, one);
            } else {
                one(0, y);
            }
            return;
        }
        let work = |i: usize| {
            let (start, rows) = (i * chunk, chunk.min(n - i * chunk));
            let w_rows = &w[start * row_bytes..(start + rows) * row_bytes];
            let mut out = vec![0.0f32; m * rows];
            q8::dot_rows(dtype, w_rows, &xq, k, &mut out);
            activate(&mut out);
            out
        };
        let chunks = n.div_ceil(chunk);
        let parts: Vec<Vec<f32>> =
            if parallel { crate::team::map_tasks(chunks, work) } else { (0..chunks).map(work).collect() };
        for (i, part) in parts.iter().enumerate() {
            let (start, rows) = (i * chunk, chunk.min(n - i * chunk));
            for (yr, o) in y.chunks_exact_mut(n).zip(part.chunks_exact(rows)) {
                yr[start..start + rows].copy_from_slice(o);
            }
        }
        return;
    }
    // Panels of dequantized weight rows, each multiplied into its own [m, rows] block,
    // with x as its Q8 blocks stand for (the dot path's activations).
    let x = &q8::quantize_rows(x).dequantize();
    // At least two panels a thread where the weight allows (a `[192, 576]` projection
    // is four panels on two threads, not one).
    let rows = if parallel { n.div_ceil(crate::team::threads() * 2).next_multiple_of(16) } else { n };
    let rows = rows.clamp(16, PANEL_ROWS);
    let panels: Vec<(usize, usize)> = (0..n).step_by(rows).map(|s| (s, rows.min(n - s))).collect();
    let panel = |&(start, rows): &(usize, usize)| {
        let mut wf = vec![0.0f32; rows * k];
        dequantize_into(dtype, &w[start * row_bytes..(start + rows) * row_bytes], &mut wf);
        let mut block = vec![0.0f32; m * rows];
        // rhs[p, j] = W[start + j, p]: rows of wf are columns of the product.
        gemm_f32(m, rows, k, &mut block, rows, (x, k, 1), (&wf, 1, k));
        activate(&mut block);
        block
    };
    let blocks: Vec<Vec<f32>> = if parallel {
        crate::team::map_tasks(panels.len(), |i| panel(&panels[i]))
    } else {
        panels.iter().map(panel).collect()
    };
    for (&(start, rows), block) in panels.iter().zip(&blocks) {
        for (yr, br) in y.chunks_exact_mut(n).zip(block.chunks_exact(rows)) {
            yr[start..start + rows].copy_from_slice(br);
        }
    }
}

/// Rows `rows` of the `[vocab, dim]` block-format table, dequantized (`[rows.len(), dim]`).
pub(crate) fn gather_rows(dtype: DType, table: &[u8], dim: usize, rows: &[usize]) -> Vec<f32> {
    let row_bytes = dim / QUANT_BLOCK * dtype.block_bytes();
    let mut out = vec![0.0f32; rows.len() * dim];
    if dim == 0 {
        return out;
    }
    for (o, &r) in out.chunks_exact_mut(dim).zip(rows) {
        dequantize_into(dtype, &table[r * row_bytes..(r + 1) * row_bytes], o);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_of_a_several_row_linear_has_the_bits_of_that_row_alone() {
        // A decode step of several sequences gives each the bits it gets alone, on
        // both sides of the parallel threshold; with the vector kernel, so do a
        // prompt's rows.
        let prompt: &[usize] = if q8::fast() { &[13, 61] } else { &[] };
        for (k, n) in [(64, 48), (576, 1536)] {
            let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 997.0).collect();
            for dtype in [DType::Q4_1, DType::Q8_0] {
                let packed = quantize(dtype, &w);
                for m in (1..=DOT_MAX_ROWS).chain(prompt.iter().copied()) {
                    let x: Vec<f32> = (0..m * k).map(|i| ((i * 104_729 % 811) as f32 - 405.0) / 409.0).collect();
                    let all = linear(dtype, &x, &packed, (m, k, n), None).unwrap();
                    for (r, got) in all.chunks_exact(n).enumerate() {
                        let alone = linear(dtype, &x[r * k..(r + 1) * k], &packed, (1, k, n), None).unwrap();
                        assert!(
                            got.iter().zip(alone.iter()).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{dtype} m {m} row {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn quantize_then_dequantize_is_close_and_exact_on_the_grid() {
        let v: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 - 30.0) / 8.0).collect();
        for (dtype, tol) in [(DType::Q8_0, 0.03), (DType::Q4_1, 0.3)] {
            let q = quantize(dtype, &v);
            assert_eq!(q.len(), 2 * dtype.block_bytes());
            let back = dequantize(dtype, &q);
            let err = v.iter().zip(&back).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(err <= tol, "{dtype}: {err}");
            // Values on the grid survive a second round exactly.
            assert_eq!(dequantize(dtype, &quantize(dtype, &back)), back, "{dtype}");
        }
    }

    #[test]
    fn f16_widening_is_exact_for_every_bit_pattern() {
        for h in 0..=u16::MAX {
            let (got, want) = (f16_bits_to_f32(h), f16::from_bits(h).to_f32());
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{h:#06x}: {got} vs {want}");
        }
    }

    #[test]
    fn a_q4_1_block_is_read_low_nibbles_first() {
        let mut block = f16::from_f32(0.5).to_le_bytes().to_vec();
        block.extend(f16::from_f32(-1.0).to_le_bytes());
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let v = dequantize(DType::Q4_1, &block);
        assert_eq!((v[0], v[15], v[16], v[31]), (-1.0, 6.5, 6.5, -1.0));
    }
}
