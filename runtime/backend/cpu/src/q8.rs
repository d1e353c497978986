//! The activations of the quantized linear, quantized to Q8 blocks, and the integer
//! dot products of a weight block with them.
//!
//! The quantized linear multiplies block-quantized weights with activations quantized
//! the same way, as ggml does: each block of 32 activations becomes 32 signed bytes
//! `q = round(x / d)` (ties to even) with `d = max|x| / 127`. A block's dot product is
//! then an exact integer sum (`Σ q_w q_x`), scaled once: `d_w d_x Σ q_w q_x` for Q8_0
//! and `d_w d_x Σ q_w q_x + m_w d_x Σ q_x` for Q4_1. A block holding a NaN or an
//! infinity gets `d = NaN`, so the outputs it feeds are NaN rather than silently finite.
//!
//! The sums run in [`SUM_LANES`] lanes, lane `l` taking elements `4l..4l + 4` of the
//! block (the shape of AVX2's byte multiply-add); each lane is scaled and accumulated
//! in f32 (one fused multiply-add per block) over the even blocks and over the odd ones
//! apart (two independent chains of adds), the two are added, and the lanes are added in
//! order at the end. The AVX2 kernel
//! and the portable one compute exactly this, so they give the same bits, and each x
//! row's result does not depend on how many rows are multiplied together.

use sluice_host_api::{DType, QUANT_BLOCK};

use crate::simd::multiversion;

/// Lanes of a block's integer sum (and of each output's f32 accumulation).
pub(crate) const SUM_LANES: usize = 8;
/// Elements of a block each lane sums.
const PER_LANE: usize = QUANT_BLOCK / SUM_LANES;
/// x rows the portable kernel applies one weight row to at once (more take another
/// pass).
pub(crate) const MAX_ROWS: usize = 8;

/// Rows of f32 activations as Q8 blocks: `q` (one byte per element), and per block its
/// scale `d` and `s = d · Σ q` (the Q4_1 minimum's factor).
pub(crate) struct Q8Rows {
    pub(crate) q: Vec<i8>,
    pub(crate) d: Vec<f32>,
    pub(crate) s: Vec<f32>,
}

const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer, ties to even

/// Quantizes `x` (whole blocks of 32) to Q8 blocks.
fn quantize_into(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if fast() {
        assert!(q.len() == x.len() && d.len() == x.len() / QUANT_BLOCK && s.len() == d.len());
        // SAFETY: the level says the CPU has AVX2; the lengths are checked above.
        unsafe { avx2::quantize_into(x, q, d, s) };
        return;
    }
    portable_quantize_into(x, q, d, s);
}

multiversion! {
    /// [`quantize_into`] in plain Rust, value for value the AVX2 kernel's arithmetic.
    fn portable_quantize_into(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32]) {
        for (((xb, qb), d), s) in x.chunks_exact(QUANT_BLOCK).zip(q.chunks_exact_mut(QUANT_BLOCK)).zip(d).zip(s) {
            (*d, *s) = quantize_block(xb, qb);
        }
    }
}

/// One block of 32: its quants into `qb`; returns its scale `d` and `d · Σ q`.
#[inline(always)]
fn quantize_block(xb: &[f32], qb: &mut [i8]) -> (f32, f32) {
    let amax = xb.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    // The sum is NaN exactly when a value is NaN or infinities meet; an infinite
    // max catches the rest.
    let finite = !xb.iter().sum::<f32>().is_nan() && amax.is_finite();
    let scale = if finite { amax / 127.0 } else { f32::NAN };
    let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    let mut total = 0i32;
    for (q, &v) in qb.iter_mut().zip(xb) {
        // |v · inverse| ≤ 127 (up to rounding), so the magic number rounds it
        // exactly; NaN becomes 0 (and the NaN scale carries it); with a subnormal
        // scale the inverse is infinite and the cast saturates.
        let r = ((v * inverse + MAGIC) - MAGIC) as i8;
        *q = r;
        total += i32::from(r);
    }
    (scale, scale * total as f32)
}

/// `x` (rows of `k`, `k` a multiple of 32) as Q8 blocks.
pub(crate) fn quantize_rows(x: &[f32]) -> Q8Rows {
    let blocks = x.len() / QUANT_BLOCK;
    let mut rows = Q8Rows { q: vec![0; blocks * QUANT_BLOCK], d: vec![0.0; blocks], s: vec![0.0; blocks] };
    quantize_into(x, &mut rows.q, &mut rows.d, &mut rows.s);
    rows
}

impl Q8Rows {
    /// The values the quantized activations stand for (`d · q`), for the gemm path.
    pub(crate) fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0f32; self.q.len()];
        for ((o, q), &d) in out.chunks_exact_mut(QUANT_BLOCK).zip(self.q.chunks_exact(QUANT_BLOCK)).zip(&self.d) {
            for (o, &q) in o.iter_mut().zip(q) {
                *o = d * f32::from(q);
            }
        }
        out
    }
}

/// The weight rows `w` (consecutive, `k / 32` blocks of `dtype` each) times every x row
/// of `x` (any number): `out[i · rows + r]` for x row `i` and weight row `r`.
pub(crate) fn dot_rows(dtype: DType, w: &[u8], x: &Q8Rows, k: usize, out: &mut [f32]) {
    let m = x.q.len() / k;
    debug_assert!(m >= 1 && out.len().is_multiple_of(m));
    #[cfg(target_arch = "x86_64")]
    if fast() {
        // SAFETY: the level says the CPU has AVX2, FMA and F16C, and `vnni` that it has
        // AVX-512 VNNI and VL; the kernel's loads stay inside the slices (checked by the
        // shapes above: whole blocks of `w` and of every x row).
        unsafe {
            if crate::simd::vnni() {
                avx2::dot_rows_vnni(dtype, w, x, k, out)
            } else {
                avx2::dot_rows(dtype, w, x, k, out)
            }
        };
        return;
    }
    portable_dot_rows(dtype, w, x, k, out);
}

/// Whether the vector kernel runs (AVX2), so that a prompt's rows go through
/// [`dot_rows`] rather than the gemm path (the portable kernel is too slow for them).
pub(crate) fn fast() -> bool {
    cfg!(target_arch = "x86_64") && crate::simd::level() != crate::simd::Level::Base
}

/// [`dot_rows`] in plain Rust, lane for lane the AVX2 kernel's arithmetic.
fn portable_dot_rows(dtype: DType, w: &[u8], x: &Q8Rows, k: usize, out: &mut [f32]) {
    let m = x.q.len() / k;
    let rows = out.len() / m;
    for first in (0..m).step_by(MAX_ROWS) {
        let group = (m - first).min(MAX_ROWS);
        portable_group(dtype, w, x, k, (first, group), rows, out);
    }
}

/// [`portable_dot_rows`] for x rows `first .. first + group` (at most [`MAX_ROWS`]).
fn portable_group(
    dtype: DType,
    w: &[u8],
    x: &Q8Rows,
    k: usize,
    (first, m): (usize, usize),
    rows: usize,
    out: &mut [f32],
) {
    let (bb, blocks) = (dtype.block_bytes(), k / QUANT_BLOCK);
    let q4 = dtype == DType::Q4_1;
    let mut wq = [0i8; QUANT_BLOCK];
    let mut wu = [0u8; QUANT_BLOCK];
    for (r, row) in w.chunks_exact(blocks * bb).enumerate().take(rows) {
        // [block parity][x row]: the even blocks and the odd ones accumulate apart.
        let mut acc = [[[0.0f32; SUM_LANES]; MAX_ROWS]; 2];
        let mut offsets = [[0.0f32; MAX_ROWS]; 2];
        for (b, block) in row.chunks_exact(bb).enumerate() {
            let (acc, offsets) = (&mut acc[b & 1], &mut offsets[b & 1]);
            let dw = crate::quant::f16_at(block, 0);
            let mw = if q4 { crate::quant::f16_at(block, 2) } else { 0.0 };
            if q4 {
                for j in 0..16 {
                    wu[j] = block[4 + j] & 15;
                    wu[j + 16] = block[4 + j] >> 4;
                }
            } else {
                for (q, &byte) in wq.iter_mut().zip(&block[2..34]) {
                    *q = byte as i8;
                }
            }
            for i in 0..m {
                let at = (first + i) * blocks + b;
                let xq = &x.q[at * QUANT_BLOCK..(at + 1) * QUANT_BLOCK];
                let dd = dw * x.d[at];
                for (l, acc) in acc[i].iter_mut().enumerate() {
                    let lane = (l * PER_LANE..(l + 1) * PER_LANE).fold(0i32, |sum, e| {
                        let wv = if q4 { i32::from(wu[e]) } else { i32::from(wq[e]) };
                        sum + wv * i32::from(xq[e])
                    });
                    *acc = (lane as f32).mul_add(dd, *acc);
                }
                if q4 {
                    offsets[i] += mw * x.s[at];
                }
            }
        }
        for i in 0..m {
            let lanes: [f32; SUM_LANES] = std::array::from_fn(|l| acc[0][i][l] + acc[1][i][l]);
            out[(first + i) * rows + r] = finish(&lanes, offsets[0][i] + offsets[1][i]);
        }
    }
}

/// An output from its lanes and its Q4_1 offsets: the lanes in order, then the offsets.
#[inline(always)]
fn finish(lanes: &[f32; SUM_LANES], offsets: f32) -> f32 {
    lanes.iter().sum::<f32>() + offsets
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The AVX2 kernel of [`super::dot_rows`]: a weight block's 32 quants in one
    //! register (Q4_1's nibbles unpacked, low nibbles first), multiplied with each x
    //! row's bytes by `vpmaddubsw` (unsigned × signed, pairs added into 16 bits: at most
    //! 2 · 15 · 127 for Q4_1, 2 · 128 · 127 for Q8_0 with its signs moved onto x, so
    //! nothing saturates) and `vpmaddwd` (pairs into 32 bits: lane `l` holds elements
    //! `4l..4l + 4`), then scaled and accumulated in f32 per lane.
    //!
    //! The format is a const parameter and the per-block step is inlined, so a row's
    //! accumulators stay in registers; up to four x rows share one pass over the weight
    //! rows (eight accumulators), more take a second pass over the same cached rows. On
    //! SmolLM2's `[1536, 576]` Q4_1 projection this took 8 rows from 362 to 167 µs and
    //! one row from 58 to 50 µs (`cargo bench -p sluice-backend-cpu --bench quant`).
    //!
    //! Where the CPU has AVX-512 VNNI (with VL), one `vpdpbusd` on 256-bit registers does
    //! the two multiply-adds' work: it sums the same four products per 32-bit lane
    //! exactly, so the bits are the same. There AVX-512's 32 vector registers also let
    //! eight x rows share a pass (5–15 % less time at 8 and 64 rows than four,
    //! alternating runs of the quant bench).

    use std::arch::x86_64::*;

    use sluice_host_api::{DType, QUANT_BLOCK};

    use super::{Q8Rows, SUM_LANES, finish};

    /// See [`super::quantize_into`]: per block the largest magnitude, whether every
    /// value is finite, and the rounding of `v · (1 / d)` by the magic number, as the
    /// portable code computes them (a maximum and the checks are exact in any order);
    /// a block whose inverse scale is not finite goes to the scalar code. 6× faster than
    /// the compiler's vectorization of the portable code (64 × 576 values: 81 → 13 µs).
    ///
    /// # Safety
    /// The CPU must have AVX2; `q` must have `x`'s length and `d` and `s` one element
    /// per block of 32.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize_into(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32]) {
        let magnitude = _mm256_set1_ps(f32::from_bits(0x7fff_ffff));
        let (infinity, magic) = (_mm256_set1_ps(f32::INFINITY), _mm256_set1_ps(super::MAGIC));
        for (b, xb) in x.chunks_exact(QUANT_BLOCK).enumerate() {
            // SAFETY: a block is 32 f32s, four registers' worth.
            let v: [__m256; 4] = std::array::from_fn(|j| unsafe { _mm256_loadu_ps(xb.as_ptr().add(8 * j)) });
            let abs = v.map(|v| _mm256_and_ps(v, magnitude));
            // Finite: every magnitude below infinity (false for a NaN).
            let below = abs.map(|a| _mm256_cmp_ps::<_CMP_LT_OQ>(a, infinity));
            let all_below = _mm256_and_ps(_mm256_and_ps(below[0], below[1]), _mm256_and_ps(below[2], below[3]));
            let finite = _mm256_movemask_ps(all_below) == 0xff;
            let qb = &mut q[b * QUANT_BLOCK..(b + 1) * QUANT_BLOCK];
            let scale = if finite {
                let m = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
                let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
                let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
                _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m))) / 127.0
            } else {
                f32::NAN
            };
            let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            if !inverse.is_finite() {
                // A NaN or infinite value, or a subnormal scale: the scalar code's casts
                // (NaN to 0, saturating) rather than the vector conversion's.
                (d[b], s[b]) = super::quantize_block(xb, qb);
                continue;
            }
            let inv = _mm256_set1_ps(inverse);
            // Integers in -127..=127, so the conversions and the packs are exact.
            let ints = v.map(|v| _mm256_cvtps_epi32(_mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(v, inv), magic), magic)));
            let total = _mm256_add_epi32(_mm256_add_epi32(ints[0], ints[1]), _mm256_add_epi32(ints[2], ints[3]));
            let total = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256::<1>(total));
            let total = _mm_add_epi32(total, _mm_shuffle_epi32::<0b01_00_11_10>(total));
            let total = _mm_cvtsi128_si32(_mm_add_epi32(total, _mm_shuffle_epi32::<0b10_11_00_01>(total)));
            // packs interleave 128-bit halves: words [0l 1l 0h 1h], bytes reordered back below.
            let words = [_mm256_packs_epi32(ints[0], ints[1]), _mm256_packs_epi32(ints[2], ints[3])];
            let bytes = _mm256_packs_epi16(words[0], words[1]);
            let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            // SAFETY: `qb` is 32 bytes.
            unsafe { _mm256_storeu_si256(qb.as_mut_ptr().cast(), ordered) };
            (d[b], s[b]) = (scale, scale * total as f32);
        }
    }

    /// See [`super::dot_rows`].
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C, `w` must hold whole rows of `k / 32` blocks and `x` whole
    /// rows of `k`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_rows(dtype: DType, w: &[u8], x: &Q8Rows, k: usize, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        unsafe { passes::<false>(dtype, w, x, k, out) }
    }

    /// [`dot_rows`] with `vpdpbusd`.
    ///
    /// # Safety
    /// As [`dot_rows`], and the CPU must have AVX-512 F, VL and VNNI
    /// ([`crate::simd::vnni`]).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    pub(super) unsafe fn dot_rows_vnni(dtype: DType, w: &[u8], x: &Q8Rows, k: usize, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        unsafe { passes::<true>(dtype, w, x, k, out) }
    }

    /// The passes over the weight rows, [`GROUP`] x rows at a time ([`VNNI_GROUP`] with
    /// `VNNI`).
    ///
    /// # Safety
    /// As [`dot_rows`] (and [`dot_rows_vnni`] with `VNNI`); inlined into them.
    #[inline(always)]
    unsafe fn passes<const VNNI: bool>(dtype: DType, w: &[u8], x: &Q8Rows, k: usize, out: &mut [f32]) {
        let m = x.q.len() / k;
        let n = out.len() / m;
        let mut first = 0;
        while first < m {
            let group = (m - first).min(if VNNI { VNNI_GROUP } else { GROUP });
            let rows = Rows { w, x, first, k, out: &mut *out, n };
            // SAFETY: forwarded (the caller's contract), with `first + group ≤ m`.
            unsafe {
                if dtype == DType::Q4_1 {
                    group_of::<true, VNNI>(rows, group)
                } else {
                    group_of::<false, VNNI>(rows, group)
                }
            }
            first += group;
        }
    }

    /// One pass of `group` x rows (1 to 8) in `rows_of`'s instance for that count.
    ///
    /// # Safety
    /// As [`rows_of`] with `M = group`.
    #[inline(always)]
    unsafe fn group_of<const Q4: bool, const VNNI: bool>(rows: Rows<'_>, group: usize) {
        // SAFETY: forwarded (the caller's contract).
        unsafe {
            match group {
                1 => rows_of::<1, Q4, VNNI>(rows),
                2 => rows_of::<2, Q4, VNNI>(rows),
                3 => rows_of::<3, Q4, VNNI>(rows),
                4 => rows_of::<4, Q4, VNNI>(rows),
                5 => rows_of::<5, Q4, VNNI>(rows),
                6 => rows_of::<6, Q4, VNNI>(rows),
                7 => rows_of::<7, Q4, VNNI>(rows),
                _ => rows_of::<8, Q4, VNNI>(rows),
            }
        }
    }

    /// x rows one pass over the weight rows serves: two accumulators per x row (the even
    /// blocks and the odd ones) and the offsets of four rows fit in the 16 vector
    /// registers; more x rows take another pass over the (cached) weight rows.
    const GROUP: usize = 4;
    /// x rows one pass serves where the CPU has AVX-512: its 32 vector registers hold
    /// the accumulators of eight.
    const VNNI_GROUP: usize = 8;

    const _: () = assert!(SUM_LANES == 8, "one __m256 of lanes per x row");

    /// One pass: every weight row of `w` times x rows `first .. first + M`, into `out`
    /// (`out[i · n + r]` for x row `i` and weight row `r`).
    struct Rows<'a> {
        w: &'a [u8],
        x: &'a Q8Rows,
        first: usize,
        k: usize,
        out: &'a mut [f32],
        n: usize,
    }

    /// The block's leading f16s (Q4_1's scale and minimum, Q8_0's scale and its first
    /// quants), widened exactly by F16C (the same values as `quant::f16_at`).
    ///
    /// # Safety
    /// `block` must point at 4 readable bytes.
    #[inline(always)]
    unsafe fn scale_and_min(block: *const u8) -> (f32, f32) {
        // SAFETY: the caller's contract; F16C is enabled in every caller.
        unsafe {
            let both = _mm_cvtph_ps(_mm_cvtsi32_si128(block.cast::<i32>().read_unaligned()));
            (_mm_cvtss_f32(both), _mm_cvtss_f32(_mm_movehdup_ps(both)))
        }
    }

    /// # Safety
    /// As [`passes`], and x rows `first .. first + M` exist.
    #[inline(always)]
    unsafe fn rows_of<const M: usize, const Q4: bool, const VNNI: bool>(p: Rows<'_>) {
        let dtype = if Q4 { DType::Q4_1 } else { DType::Q8_0 };
        let (bb, blocks) = (dtype.block_bytes(), p.k / QUANT_BLOCK);
        assert!(
            p.w.len() >= p.n * blocks * bb && p.x.q.len() >= (p.first + M) * p.k && p.out.len() >= p.n * (p.first + M)
        );
        // The rows' Q4_1 factors block by block (`s[b · 8 + i]`): one load per block.
        let mut s = vec![0.0f32; if Q4 { blocks * 8 } else { 0 }];
        for (b, s) in s.chunks_exact_mut(8).enumerate() {
            for (i, s) in s.iter_mut().enumerate().take(M) {
                *s = p.x.s[(p.first + i) * blocks + b];
            }
        }
        let xq = p.x.q[p.first * p.k..].as_ptr();
        let xd = p.x.d[p.first * blocks..].as_ptr();
        let x = Block { xq, xd, s: s.as_ptr(), blocks };
        for r in 0..p.n {
            // SAFETY: weight row `r` is inside `w` (asserted above).
            let row = unsafe { p.w.as_ptr().add(r * blocks * bb) };
            // SAFETY: the CPU has AVX (the caller's contract).
            let (mut even, mut odd) = unsafe { ([_mm256_setzero_ps(); M], [_mm256_setzero_ps(); M]) };
            // SAFETY: as above.
            let (mut even_offsets, mut odd_offsets) = unsafe { (_mm256_setzero_ps(), _mm256_setzero_ps()) };
            let mut b = 0;
            // The even blocks and the odd ones in two chains of adds, so that a block
            // does not wait for the previous one's.
            while b + 1 < blocks {
                // SAFETY: blocks `b` and `b + 1` of the row and of x's rows are in bounds.
                unsafe {
                    x.accumulate::<M, Q4, VNNI>(row.add(b * bb), b, &mut even, &mut even_offsets);
                    x.accumulate::<M, Q4, VNNI>(row.add((b + 1) * bb), b + 1, &mut odd, &mut odd_offsets);
                }
                b += 2;
            }
            if b < blocks {
                // SAFETY: as above.
                unsafe { x.accumulate::<M, Q4, VNNI>(row.add(b * bb), b, &mut even, &mut even_offsets) };
            }
            let mut offsets = [0.0f32; 8];
            // SAFETY: `offsets` is 8 f32s (and the CPU has AVX).
            unsafe { _mm256_storeu_ps(offsets.as_mut_ptr(), _mm256_add_ps(even_offsets, odd_offsets)) };
            for i in 0..M {
                let mut lanes = [0.0f32; SUM_LANES];
                // SAFETY: `lanes` is 8 f32s (and the CPU has AVX).
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_add_ps(even[i], odd[i])) };
                p.out[(p.first + i) * p.n + r] = finish(&lanes, offsets[i]);
            }
        }
    }

    /// The x rows of one pass, as raw pointers for the inner loop.
    struct Block {
        /// Their quants, row after row.
        xq: *const i8,
        /// Their block scales, row after row.
        xd: *const f32,
        /// Their Q4_1 factors, eight per block (see `rows_of`).
        s: *const f32,
        blocks: usize,
    }

    impl Block {
        /// Adds weight block `block` (block `b` of its row) times block `b` of each x
        /// row to `acc` (its lanes) and `offsets` (lane `i`: Q4_1's minimum times the
        /// factor of x row `i`; each lane's add rounds as the scalar one would).
        ///
        /// # Safety
        /// The CPU must have AVX2, FMA and F16C (and AVX-512 VNNI and VL with `VNNI`);
        /// `block` must point at a whole block of the format and `b` be a block of the
        /// `M` x rows.
        #[inline(always)]
        unsafe fn accumulate<const M: usize, const Q4: bool, const VNNI: bool>(
            &self,
            block: *const u8,
            b: usize,
            acc: &mut [__m256; M],
            offsets: &mut __m256,
        ) {
            // SAFETY: the caller's contract.
            unsafe {
                let (dw, mw) = scale_and_min(block);
                // The block's quants, unsigned for Q4_1; Q8_0's magnitudes, with the
                // signs applied to x below.
                let (wv, signs) = if Q4 {
                    let packed = _mm_loadu_si128(block.add(4).cast());
                    let nibbles = _mm_set1_epi8(15);
                    let lo = _mm_and_si128(packed, nibbles);
                    let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), nibbles);
                    (_mm256_set_m128i(hi, lo), _mm256_setzero_si256())
                } else {
                    let q = _mm256_loadu_si256(block.add(2).cast());
                    (_mm256_sign_epi8(q, q), q)
                };
                for (i, acc) in acc.iter_mut().enumerate() {
                    let at = i * self.blocks + b;
                    let xq = _mm256_loadu_si256(self.xq.add(at * QUANT_BLOCK).cast());
                    let xs = if Q4 { xq } else { _mm256_sign_epi8(xq, signs) };
                    let sums = if VNNI {
                        _mm256_dpbusd_epi32(_mm256_setzero_si256(), wv, xs)
                    } else {
                        _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xs), _mm256_set1_epi16(1))
                    };
                    let lanes = _mm256_cvtepi32_ps(sums);
                    *acc = _mm256_fmadd_ps(lanes, _mm256_set1_ps(dw * *self.xd.add(at)), *acc);
                }
                if Q4 {
                    let factors = _mm256_loadu_ps(self.s.add(b * 8));
                    *offsets = _mm256_add_ps(*offsets, _mm256_mul_ps(_mm256_set1_ps(mw), factors));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(dtype: DType, n: usize, k: usize) -> Vec<u8> {
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 997.0).collect();
        crate::quant::quantize(dtype, &w).to_vec()
    }

    #[test]
    fn the_avx2_kernel_and_the_portable_one_give_the_same_bits() {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::level() != crate::simd::Level::Base {
            // An even and an odd number of blocks per row.
            for (k, n, dtype) in [(64, 13), (96, 13)].into_iter().flat_map(|(k, n)| DType::QUANTIZED.map(|d| (k, n, d)))
            {
                let w = weights(dtype, n, k);
                // Up to a prompt's rows: several groups of the vector kernel's passes and of
                // the portable kernel's.
                for m in (1..=MAX_ROWS).chain([13, 21]) {
                    let x: Vec<f32> = (0..m * k).map(|i| ((i * 104_729 % 811) as f32 - 405.0) / 409.0).collect();
                    let xq = quantize_rows(&x);
                    let (mut fast, mut slow) = (vec![0.0; m * n], vec![0.0; m * n]);
                    // SAFETY: AVX2 checked above; whole blocks.
                    unsafe { avx2::dot_rows(dtype, &w, &xq, k, &mut fast) };
                    portable_dot_rows(dtype, &w, &xq, k, &mut slow);
                    assert!(fast.iter().zip(&slow).all(|(a, b)| a.to_bits() == b.to_bits()), "{dtype} k {k} m {m}");
                    if crate::simd::vnni() {
                        let mut vnni = vec![0.0; m * n];
                        // SAFETY: AVX-512 VNNI and VL checked; whole blocks.
                        unsafe { avx2::dot_rows_vnni(dtype, &w, &xq, k, &mut vnni) };
                        assert!(
                            vnni.iter().zip(&slow).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "VNNI {dtype} k {k} m {m}"
                        );
                    }
                    // Each row as it comes out alone.
                    for i in 0..m {
                        let one = Q8Rows {
                            q: xq.q[i * k..(i + 1) * k].to_vec(),
                            d: xq.d[i * k / 32..(i + 1) * k / 32].to_vec(),
                            s: xq.s[i * k / 32..(i + 1) * k / 32].to_vec(),
                        };
                        let mut alone = vec![0.0; n];
                        dot_rows(dtype, &w, &one, k, &mut alone);
                        assert!(alone.iter().zip(&slow[i * n..]).all(|(a, b)| a.to_bits() == b.to_bits()));
                    }
                }
            }
            return;
        }
        println!("skipping: no AVX2 here, the portable kernel is the only one");
    }

    #[test]
    fn the_avx2_quantization_and_the_portable_one_give_the_same_bits() {
        if !fast() {
            println!("skipping: no AVX2 here, the portable quantization is the only one");
            return;
        }
        let mut x: Vec<f32> = (0..32 * 40).map(|i| ((i * 104_729 % 811) as f32 - 405.0) / 409.0 * 1e3).collect();
        x[32..64].fill(0.0);
        x[70] = f32::NAN;
        x[100] = f32::INFINITY;
        x[130] = f32::NEG_INFINITY;
        x[131] = f32::INFINITY;
        x[160..192].iter_mut().enumerate().for_each(|(i, v)| *v = i as f32 * 0.5 - 7.5); // ties
        x[192] = f32::MIN_POSITIVE / 4.0; // a subnormal value
        x[224..256].iter_mut().enumerate().for_each(|(i, v)| *v = f32::MIN_POSITIVE * (i as f32 - 9.0) / 64.0); // a subnormal scale
        let blocks = x.len() / 32;
        let mut fast_out = (vec![0i8; x.len()], vec![0f32; blocks], vec![0f32; blocks]);
        let mut slow = fast_out.clone();
        quantize_into(&x, &mut fast_out.0, &mut fast_out.1, &mut fast_out.2);
        portable_quantize_into(&x, &mut slow.0, &mut slow.1, &mut slow.2);
        assert_eq!(fast_out.0, slow.0);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fast_out.1), bits(&slow.1));
        assert_eq!(bits(&fast_out.2), bits(&slow.2));
    }

    #[test]
    fn quantization_rounds_to_even_scales_by_the_largest_and_marks_non_finite_blocks() {
        let mut x = vec![0.0f32; 64];
        x[0] = 127.0;
        x[1] = 2.5; // a tie: rounds to 2
        x[2] = -3.5; // a tie: rounds to -4
        x[3] = -127.0;
        x[32] = f32::NAN;
        let q = quantize_rows(&x);
        assert_eq!((q.d[0], &q.q[..4]), (1.0, &[127i8, 2, -4, -127][..]));
        assert_eq!(q.s[0], -2.0);
        assert!(q.d[1].is_nan() && q.q[32..].iter().all(|&v| v == 0));
        // An all-zero block has scale 0 and zero quants.
        assert_eq!(quantize_rows(&[0.0; 32]).d[0], 0.0);
    }
}
