//! The f32 GEMM of the CPU backend: `dst = epilogue(A · B)` with `B` packed into
//! column panels ([`PackedB`], built once per weight by `packed.rs`, or per call for a
//! plain matmul) and `A` read in place through its strides.
//!
//! Layout: panel `q` holds columns `32q..32q + 32` of `B` as `k` rows of 32 floats,
//! 64-byte aligned, the last panel padded with zeros. A micro-kernel keeps a tile of
//! `MR` rows × 32 columns of `dst` in vector registers over the whole `k`: AVX-512
//! (8 rows, two `zmm` per row) or AVX2 + FMA (6 rows, 16 columns at a time); the widest
//! the CPU has is chosen at run time. The tile then gets the epilogue (bias, GELU) while
//! it is in L1 and is stored. Rows are taken in blocks that keep their part of `A` in
//! L2; threads split the column panels (and the row blocks when there are fewer panels
//! than threads).
//!
//! Determinism: every element of `dst` is one chain of fused multiply-adds over
//! `p = 0..k` in order, started from zero, whatever the vector width, tile, block,
//! thread count or the rows asked for; so a block of rows equals those rows of the
//! whole product, bit for bit, and AVX-512 and AVX2 agree. CPUs without AVX2 + FMA (and
//! other architectures) do not run this kernel ([`available`]): the callers keep the
//! `gemm` crate there.

use rayon::prelude::*;

use crate::simd::{self, Level};

/// Columns per packed panel.
pub(crate) const NR: usize = 32;

/// Floats of `A` a row block keeps in L2 (512 KiB).
const BLOCK_FLOATS: usize = 1 << 17;

/// Multiply-adds below which a product runs on the calling thread only.
const PAR_MIN_MACS: usize = 1 << 20;

/// One packed row of a panel: 32 floats, 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct PanelRow([f32; NR]);

/// A `k × n` matrix `B` as column panels (see the module header).
pub(crate) struct PackedB {
    k: usize,
    n: usize,
    rows: Vec<PanelRow>,
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedB({} × {})", self.k, self.n)
    }
}

impl PackedB {
    /// Packs `B[p, j] = b[p * rs + j * cs]` for `p < k`, `j < n`. Panics if a stride
    /// addresses past `b`.
    pub(crate) fn pack(b: &[f32], k: usize, n: usize, rs: usize, cs: usize) -> Self {
        let panels = n.div_ceil(NR);
        let mut rows = vec![PanelRow([0.0; NR]); panels * k];
        if k > 0 && n > 0 {
            assert!((k - 1) * rs + (n - 1) * cs < b.len(), "PackedB::pack: b too small");
        }
        for (q, panel) in rows.chunks_mut(k.max(1)).enumerate().take(panels) {
            let cols = (n - q * NR).min(NR);
            for (p, row) in panel.iter_mut().enumerate() {
                for (jj, v) in row.0[..cols].iter_mut().enumerate() {
                    *v = b[p * rs + (q * NR + jj) * cs];
                }
            }
        }
        PackedB { k, n, rows }
    }

    /// Bytes of the packed panels.
    pub(crate) fn byte_len(&self) -> usize {
        self.rows.len() * size_of::<PanelRow>()
    }

    fn panels(&self) -> usize {
        self.n.div_ceil(NR)
    }

    /// The first float of panel `q`.
    fn panel_ptr(&self, q: usize) -> *const f32 {
        self.rows[q * self.k..].as_ptr().cast()
    }
}

/// What happens to each element of the product before it is stored: the bias of its
/// column is added, then GELU ([`simd::gelu`]) is applied, each when present. These are
/// the same f32 operations as the `add` and `gelu` ops, so the result is theirs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Epilogue<'a> {
    pub bias: Option<&'a [f32]>,
    pub gelu: bool,
}

/// Whether this CPU runs the panel kernels (AVX2 + FMA or AVX-512).
pub(crate) fn available() -> bool {
    simd::level() != Level::Base
}

/// `A` read in place: element `(i, p)` is `data[i * rs + p * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct StridedA<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

/// `dst[i * n + j] = epilogue(Σ_p A[i, p] · B[p, j])` for the `m` rows of `a` and the `n`
/// columns of `b` (`dst` is `m × n`, row-major). Uses up to `threads` rayon threads when
/// the product is large. Panics if [`available`] is false, if `dst` is not `m × n`, if
/// `a` is too small for `m × k`, or if the bias is shorter than `n`.
pub(crate) fn gemm(m: usize, a: StridedA, b: &PackedB, dst: &mut [f32], epi: Epilogue, threads: usize) {
    let (k, n) = (b.k, b.n);
    assert!(available(), "panel_gemm::gemm on a CPU without AVX2 + FMA");
    assert_eq!(dst.len(), m * n, "panel_gemm::gemm: dst is not m × n");
    if m == 0 || n == 0 {
        return;
    }
    if k > 0 {
        assert!((m - 1) * a.rs + (k - 1) * a.cs < a.data.len(), "panel_gemm::gemm: a too small");
    }
    if let Some(bias) = epi.bias {
        assert!(bias.len() >= n, "panel_gemm::gemm: bias shorter than n");
    }
    let panels = b.panels();
    let mc = row_block(k);
    let groups = if m * n * k < PAR_MIN_MACS { 1 } else { threads.max(1) };
    let col_groups = groups.min(panels);
    let row_groups = (groups / col_groups).clamp(1, m.div_ceil(MR_ALIGN));
    let out = SharedOut { ptr: dst.as_mut_ptr(), len: dst.len() };
    let task = |t: usize| {
        let (rg, cg) = (t / col_groups, t % col_groups);
        let rows = split(m.div_ceil(MR_ALIGN), row_groups, rg);
        let rows = (rows.start * MR_ALIGN).min(m)..(rows.end * MR_ALIGN).min(m);
        let cols = split(panels, col_groups, cg);
        run_block(rows, cols, mc, a, b, &out, epi);
    };
    let tasks = row_groups * col_groups;
    if tasks == 1 {
        task(0);
    } else {
        (0..tasks).into_par_iter().for_each(task);
    }
}

/// Row granularity of the split across threads (a multiple of both tile heights).
const MR_ALIGN: usize = 24;

/// Part `i` of `0..len` cut into `parts` near-equal contiguous ranges.
fn split(len: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    let (base, extra) = (len / parts, len % parts);
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

/// Rows per block: as many as keep `rows × k` floats of `A` within [`BLOCK_FLOATS`].
fn row_block(k: usize) -> usize {
    (BLOCK_FLOATS / k.max(1)).clamp(MR_ALIGN, 4 * 1024) / MR_ALIGN * MR_ALIGN
}

/// The output, written by several threads at disjoint (row, column) positions.
struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: threads write disjoint elements (each task owns a rectangle of rows × panels),
// and `gemm` holds the `&mut` borrow of the output until every task has finished.
unsafe impl Sync for SharedOut {}

/// Computes rows `rows` × panels `cols` of the product into `out`.
fn run_block(
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    mc: usize,
    a: StridedA,
    b: &PackedB,
    out: &SharedOut,
    epi: Epilogue,
) {
    match simd::level() {
        // SAFETY: `level` reported AVX-512 F (with AVX2 and FMA); the bounds were checked
        // by `gemm` and every task writes its own rectangle of `out`.
        #[cfg(target_arch = "x86_64")]
        Level::V4 => unsafe { x86::block_v4(rows, cols, mc, a, b, out, epi) },
        // SAFETY: as above, with AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Level::V3 => unsafe { x86::block_v3(rows, cols, mc, a, b, out, epi) },
        _ => unreachable!("panel_gemm runs only where `available` holds"),
    }
}

/// Stores `rows` rows of a tile (row stride [`NR`]) at row `i0`, columns `j0..j0 + cols`
/// of the `n`-wide output, through the epilogue. Plain loops: inlined into each level's
/// block, the compiler vectorises them at that width with the same results.
#[inline(always)]
fn store_tile(
    tile: &[f32],
    rows: usize,
    out: &SharedOut,
    n: usize,
    (i0, j0, cols): (usize, usize, usize),
    epi: Epilogue,
) {
    for r in 0..rows {
        let at = (i0 + r) * n + j0;
        debug_assert!(at + cols <= out.len);
        // SAFETY: `at + cols ≤ m · n` (the caller's rows and panels lie inside the
        // output), and this task is the only one writing these elements.
        let dst = unsafe { std::slice::from_raw_parts_mut(out.ptr.add(at), cols) };
        let src = &tile[r * NR..r * NR + cols];
        match (epi.bias, epi.gelu) {
            (Some(bias), true) => {
                for ((d, &s), &bv) in dst.iter_mut().zip(src).zip(&bias[j0..j0 + cols]) {
                    *d = simd::gelu(s + bv);
                }
            }
            (Some(bias), false) => {
                for ((d, &s), &bv) in dst.iter_mut().zip(src).zip(&bias[j0..j0 + cols]) {
                    *d = s + bv;
                }
            }
            (None, true) => {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = simd::gelu(s);
                }
            }
            (None, false) => dst.copy_from_slice(src),
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The AVX-512 and AVX2 + FMA blocks and their micro-kernels.

    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{Epilogue, NR, PackedB, SharedOut, StridedA, store_tile};

    /// Rows of an AVX-512 tile.
    const MR_V4: usize = 8;
    /// Rows of an AVX2 tile.
    const MR_V3: usize = 6;

    /// The block of rows × panels on AVX-512.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn block_v4(
        rows: Range<usize>,
        cols: Range<usize>,
        mc: usize,
        a: StridedA,
        b: &PackedB,
        out: &SharedOut,
        epi: Epilogue,
    ) {
        let (k, n) = (b.k, b.n);
        let mut tile = [0.0f32; MR_V4 * NR];
        let mut i0 = rows.start;
        while i0 < rows.end {
            let i1 = (i0 + mc).min(rows.end);
            for q in cols.clone() {
                let bp = b.panel_ptr(q);
                let (j0, width) = (q * NR, (n - q * NR).min(NR));
                let mut i = i0;
                while i < i1 {
                    let h = (i1 - i).min(MR_V4);
                    // SAFETY: rows i..i + h of `a` and the k rows of panel q are in bounds.
                    let ap = unsafe { a.data.as_ptr().add(i * a.rs) };
                    // SAFETY: as above; the features were checked by the caller.
                    unsafe {
                        match h {
                            8 => tile_v4::<8>(k, ap, a.rs, a.cs, bp, &mut tile),
                            7 => tile_v4::<7>(k, ap, a.rs, a.cs, bp, &mut tile),
                            6 => tile_v4::<6>(k, ap, a.rs, a.cs, bp, &mut tile),
                            5 => tile_v4::<5>(k, ap, a.rs, a.cs, bp, &mut tile),
                            4 => tile_v4::<4>(k, ap, a.rs, a.cs, bp, &mut tile),
                            3 => tile_v4::<3>(k, ap, a.rs, a.cs, bp, &mut tile),
                            2 => tile_v4::<2>(k, ap, a.rs, a.cs, bp, &mut tile),
                            _ => tile_v4::<1>(k, ap, a.rs, a.cs, bp, &mut tile),
                        }
                    }
                    store_tile(&tile, h, out, n, (i, j0, width), epi);
                    i += h;
                }
            }
            i0 = i1;
        }
    }

    /// `MR` rows × 32 columns of the product over all of `k`, into `tile` (row stride 32).
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline]
    unsafe fn tile_v4<const MR: usize>(
        k: usize,
        a: *const f32,
        rs: usize,
        cs: usize,
        b: *const f32,
        tile: &mut [f32; MR_V4 * NR],
    ) {
        let mut lo = [_mm512_setzero_ps(); MR];
        let mut hi = [_mm512_setzero_ps(); MR];
        for p in 0..k {
            // SAFETY: the caller guarantees k rows of 32 floats at `b`, 64-byte aligned.
            let (b0, b1) = unsafe { (_mm512_load_ps(b.add(p * NR)), _mm512_load_ps(b.add(p * NR + 16))) };
            for i in 0..MR {
                // SAFETY: the caller guarantees MR rows of k elements of `a`.
                let x = _mm512_set1_ps(unsafe { *a.add(i * rs + p * cs) });
                lo[i] = _mm512_fmadd_ps(x, b0, lo[i]);
                hi[i] = _mm512_fmadd_ps(x, b1, hi[i]);
            }
        }
        for i in 0..MR {
            // SAFETY: `tile` holds MR_V4 ≥ MR rows of 32 floats.
            unsafe {
                _mm512_storeu_ps(tile.as_mut_ptr().add(i * NR), lo[i]);
                _mm512_storeu_ps(tile.as_mut_ptr().add(i * NR + 16), hi[i]);
            }
        }
    }

    /// The block of rows × panels on AVX2 + FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn block_v3(
        rows: Range<usize>,
        cols: Range<usize>,
        mc: usize,
        a: StridedA,
        b: &PackedB,
        out: &SharedOut,
        epi: Epilogue,
    ) {
        let (k, n) = (b.k, b.n);
        let mut tile = [0.0f32; MR_V3 * NR];
        let mut i0 = rows.start;
        while i0 < rows.end {
            let i1 = (i0 + mc).min(rows.end);
            for q in cols.clone() {
                let (j0, width) = (q * NR, (n - q * NR).min(NR));
                let mut i = i0;
                while i < i1 {
                    let h = (i1 - i).min(MR_V3);
                    // SAFETY: rows i..i + h of `a` are in bounds.
                    let ap = unsafe { a.data.as_ptr().add(i * a.rs) };
                    for half in 0..2 {
                        if half * 16 >= width {
                            break;
                        }
                        // SAFETY: column offset 16 stays inside each 32-float panel row.
                        let bp = unsafe { b.panel_ptr(q).add(half * 16) };
                        // SAFETY: as above; the features were checked by the caller.
                        unsafe {
                            let t = &mut tile;
                            match h {
                                6 => tile_v3::<6>(k, ap, a.rs, a.cs, bp, t, half),
                                5 => tile_v3::<5>(k, ap, a.rs, a.cs, bp, t, half),
                                4 => tile_v3::<4>(k, ap, a.rs, a.cs, bp, t, half),
                                3 => tile_v3::<3>(k, ap, a.rs, a.cs, bp, t, half),
                                2 => tile_v3::<2>(k, ap, a.rs, a.cs, bp, t, half),
                                _ => tile_v3::<1>(k, ap, a.rs, a.cs, bp, t, half),
                            }
                        }
                    }
                    store_tile(&tile, h, out, n, (i, j0, width), epi);
                    i += h;
                }
            }
            i0 = i1;
        }
    }

    /// `MR` rows × 16 columns (half `half` of a panel) over all of `k`, into `tile`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn tile_v3<const MR: usize>(
        k: usize,
        a: *const f32,
        rs: usize,
        cs: usize,
        b: *const f32,
        tile: &mut [f32; MR_V3 * NR],
        half: usize,
    ) {
        let mut lo = [_mm256_setzero_ps(); MR];
        let mut hi = [_mm256_setzero_ps(); MR];
        for p in 0..k {
            // SAFETY: the caller guarantees k rows of 32 floats from the panel start.
            let (b0, b1) = unsafe { (_mm256_loadu_ps(b.add(p * NR)), _mm256_loadu_ps(b.add(p * NR + 8))) };
            for i in 0..MR {
                // SAFETY: the caller guarantees MR rows of k elements of `a`.
                let x = _mm256_set1_ps(unsafe { *a.add(i * rs + p * cs) });
                lo[i] = _mm256_fmadd_ps(x, b0, lo[i]);
                hi[i] = _mm256_fmadd_ps(x, b1, hi[i]);
            }
        }
        for i in 0..MR {
            // SAFETY: `tile` holds MR_V3 ≥ MR rows of 32 floats; half · 16 + 16 ≤ 32.
            unsafe {
                _mm256_storeu_ps(tile.as_mut_ptr().add(i * NR + half * 16), lo[i]);
                _mm256_storeu_ps(tile.as_mut_ptr().add(i * NR + half * 16 + 8), hi[i]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize, seed: usize) -> Vec<f32> {
        (0..len).map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0).collect()
    }

    /// The product with one f32 FMA chain per element, in order of `p`: what the kernel
    /// must equal bit for bit.
    fn fma_chain(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], epi: Epilogue) -> Vec<f32> {
        let mut out = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0f32;
                for p in 0..k {
                    acc = a[i * k + p].mul_add(b[p * n + j], acc);
                }
                let v = epi.bias.map_or(acc, |bias| acc + bias[j]);
                out[i * n + j] = if epi.gelu { simd::gelu(v) } else { v };
            }
        }
        out
    }

    #[test]
    fn every_shape_equals_the_fma_chain_bit_for_bit() {
        if !available() {
            return;
        }
        let bias = data(400, 9);
        for &(m, k, n) in &[(1, 1, 1), (1, 384, 384), (7, 5, 33), (9, 17, 31), (13, 0, 40), (25, 64, 97), (50, 3, 1)] {
            let (a, b) = (data(m * k, 1), data(k * n, 2));
            let packed = PackedB::pack(&b, k, n, n, 1);
            for epi in [
                Epilogue::default(),
                Epilogue { bias: Some(&bias[..n.max(1)]), gelu: false },
                Epilogue { bias: Some(&bias[..n.max(1)]), gelu: true },
                Epilogue { bias: None, gelu: true },
            ] {
                let want = fma_chain(m, k, n, &a, &b, epi);
                for threads in [1, 2, 3] {
                    let mut got = vec![f32::NAN; m * n];
                    gemm(m, StridedA { data: &a, rs: k, cs: 1 }, &packed, &mut got, epi, threads);
                    let same = got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
                    assert!(same, "{m}×{k}×{n} {epi:?} threads {threads}");
                }
            }
        }
    }

    #[test]
    fn transposed_operands_and_row_blocks_agree() {
        if !available() {
            return;
        }
        let (m, k, n) = (70, 45, 50);
        let (a, b) = (data(m * k, 3), data(k * n, 4));
        // aᵀ stored as [k, m], bᵀ as [n, k].
        let at: Vec<f32> = (0..k * m).map(|x| a[(x % m) * k + x / m]).collect();
        let bt: Vec<f32> = (0..n * k).map(|x| b[(x % k) * n + x / k]).collect();
        let whole = fma_chain(m, k, n, &a, &b, Epilogue::default());
        let packed = PackedB::pack(&bt, k, n, 1, k);
        let mut got = vec![0.0; m * n];
        gemm(m, StridedA { data: &at, rs: 1, cs: m }, &packed, &mut got, Epilogue::default(), 2);
        assert!(got.iter().zip(&whole).all(|(g, w)| g.to_bits() == w.to_bits()));
        for rows in [0..1, 5..29, 31..70] {
            let mut block = vec![0.0; rows.len() * n];
            let a_rows = &a[rows.start * k..];
            gemm(rows.len(), StridedA { data: a_rows, rs: k, cs: 1 }, &packed, &mut block, Epilogue::default(), 2);
            assert!(block.iter().zip(&whole[rows.start * n..rows.end * n]).all(|(g, w)| g.to_bits() == w.to_bits()));
        }
    }

    /// The AVX2 block, run directly where the CPU has it (the dispatch picks AVX-512 on
    /// CPUs that have both), equals the FMA chain too.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_block_equals_the_fma_chain() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        let bias = data(100, 5);
        for &(m, k, n) in &[(1, 1, 1), (7, 5, 33), (13, 64, 70), (20, 384, 40), (6, 2, 16)] {
            let (a, b) = (data(m * k, 6), data(k * n, 7));
            let packed = PackedB::pack(&b, k, n, n, 1);
            let epi = Epilogue { bias: Some(&bias[..n]), gelu: true };
            let want = fma_chain(m, k, n, &a, &b, epi);
            let mut got = vec![f32::NAN; m * n];
            let out = SharedOut { ptr: got.as_mut_ptr(), len: got.len() };
            let lhs = StridedA { data: &a, rs: k, cs: 1 };
            // SAFETY: the CPU has AVX2 and FMA; `got` is m × n, `a` m × k, the bias n long.
            unsafe { x86::block_v3(0..m, 0..packed.panels(), row_block(k), lhs, &packed, &out, epi) };
            assert!(got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits()), "{m}×{k}×{n}");
        }
    }

    #[test]
    fn split_covers_every_index_once() {
        for len in [0, 1, 5, 12, 48] {
            for parts in 1..5 {
                let all: Vec<usize> = (0..parts).flat_map(|i| split(len, parts, i)).collect();
                assert_eq!(all, (0..len).collect::<Vec<_>>());
            }
        }
    }
}
