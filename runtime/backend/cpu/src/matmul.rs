//! Batched matrix product over the last two axes with optional transposes and
//! broadcast batch axes: f32 (and bf16, through f32) on the panel kernels of
//! `panel_gemm.rs` where the CPU has AVX2 + FMA, else on the `gemm` crate, which also
//! runs f16. Large products split across rayon threads, many medium ones run one per
//! rayon task, and small ones stay on the calling thread. [`matmul_rows`] computes a block of
//! output rows so that the scheduler can slice a big GEMM into short kernels, and
//! [`gemm_f32`] one product over arbitrary strides (for the fused attention).

use std::ops::Range;

use gemm::{Parallelism, gemm};
use half::{bf16, f16};
use rayon::prelude::*;
use sluice_host_api::{DType, MatmulArgs, TensorMeta};

use crate::KernelError;
use crate::broadcast::Plan;
use crate::buffer::{CpuBuffer, Element, new_with};
use crate::panel_gemm::{self, Epilogue, PackedB, StridedA};

/// Multiply-adds below which a product runs on the calling thread only.
const PAR_MIN_MACS: usize = 1 << 20;

/// Where each operand's matrices live and how they are strided (in elements).
struct Geometry {
    /// Element offsets of `a`'s and `b`'s matrix for each output batch, in order.
    batches: Vec<(usize, usize)>,
    /// Output rows computed (a sub-range of M).
    rows: Range<usize>,
    n: usize,
    k: usize,
    a_rs: isize,
    a_cs: isize,
    b_rs: isize,
    b_cs: isize,
}

impl Geometry {
    fn new(args: &MatmulArgs, am: &TensorMeta, bm: &TensorMeta, out: &TensorMeta, rows: Range<usize>) -> Self {
        let (ar, br, r) = (am.rank(), bm.rank(), out.rank());
        let (m, n) = (out.shape[r - 2] as usize, out.shape[r - 1] as usize);
        let k = if args.transpose_a { am.shape[ar - 2] } else { am.shape[ar - 1] } as usize;
        let (a_rs, a_cs) = if args.transpose_a { (1, m as isize) } else { (k as isize, 1) };
        let (b_rs, b_cs) = if args.transpose_b { (1, k as isize) } else { (n as isize, 1) };
        let plan = Plan::new(&am.shape[..ar - 2], &bm.shape[..br - 2], &out.shape[..r - 2]);
        let (sa, sb) = plan.inner_strides();
        let mut batches = Vec::with_capacity(plan.numel());
        plan.for_each_run(0, plan.numel(), |_, run, ao, bo| {
            for t in 0..run {
                batches.push(((ao + t * sa) * m * k, (bo + t * sb) * k * n));
            }
        });
        Geometry { batches, rows, n, k, a_rs, a_cs, b_rs, b_cs }
    }

    fn out_len(&self) -> usize {
        self.batches.len() * self.rows.len() * self.n
    }

    /// How to spread the batches over threads: `(in parallel, threads per product)`.
    fn parallelism(&self) -> (bool, usize) {
        let macs = self.batches.len() * self.rows.len() * self.n * self.k;
        let threads = rayon::current_num_threads();
        if macs < PAR_MIN_MACS || threads == 1 {
            (false, 1)
        } else if self.batches.len() >= threads && self.rows.len() * self.n * self.k < PAR_MIN_MACS * 4 {
            (true, 1)
        } else {
            (false, threads)
        }
    }

    /// [`Geometry::run`] in f32 on the panel kernels: each batch's `b` is packed (once
    /// for consecutive batches that share it), `a` is read in place.
    fn run_panels(&self, a: &[f32], b: &[f32], out: &mut [f32]) {
        let (mr, n, k) = (self.rows.len(), self.n, self.k);
        if mr == 0 || n == 0 {
            return;
        }
        let block = mr * n;
        let (a_rs, a_cs) = (self.a_rs as usize, self.a_cs as usize);
        let (b_rs, b_cs) = (self.b_rs as usize, self.b_cs as usize);
        let (parallel, threads) = self.parallelism();
        let one = |(&(ao, _), dst): (&(usize, usize), &mut [f32]), packed: &PackedB| {
            let lhs = StridedA { data: &a[ao + self.rows.start * a_rs..], rs: a_rs, cs: a_cs };
            panel_gemm::gemm(mr, lhs, packed, dst, Epilogue::default(), threads);
        };
        let pack = |bo: usize| PackedB::pack(&b[bo..], k, n, b_rs, b_cs);
        if parallel {
            self.batches.par_iter().zip(out.par_chunks_mut(block)).for_each(|x| {
                let packed = pack(x.0.1);
                one(x, &packed);
            });
        } else {
            let mut last: Option<(usize, PackedB)> = None;
            for x in self.batches.iter().zip(out.chunks_mut(block)) {
                let bo = x.0.1;
                if last.as_ref().is_none_or(|(o, _)| *o != bo) {
                    last = Some((bo, pack(bo)));
                }
                if let Some((_, packed)) = &last {
                    one(x, packed);
                }
            }
        }
    }

    /// Computes every batch into `out` (`batches × rows × n`, row-major).
    fn run<T: Element>(&self, a: &[T], b: &[T], out: &mut [T], zero: T, one: T) {
        let (mr, n, k) = (self.rows.len(), self.n, self.k);
        if mr == 0 || n == 0 || k == 0 {
            return; // empty, or a sum over nothing: `out` is already zero
        }
        let block = mr * n;
        let (parallel, threads) = self.parallelism();
        let one_gemm = |(&(ao, bo), dst): (&(usize, usize), &mut [T]), par: Parallelism| {
            let lhs = &a[ao + self.rows.start * self.a_rs as usize..];
            let rhs = &b[bo..];
            // SAFETY: `infer` checked the shapes and `launch` checked that each buffer holds
            // its shape's elements, so every (row, k) of `lhs`, (k, col) of `rhs` and
            // (row, col) of `dst` addressed by these strides lies inside its slice.
            unsafe {
                gemm(
                    mr,
                    n,
                    k,
                    dst.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    lhs.as_ptr(),
                    self.a_cs,
                    self.a_rs,
                    rhs.as_ptr(),
                    self.b_cs,
                    self.b_rs,
                    zero,
                    one,
                    false,
                    false,
                    false,
                    par,
                );
            }
        };
        if parallel {
            self.batches.par_iter().zip(out.par_chunks_mut(block)).for_each(|x| one_gemm(x, Parallelism::None));
        } else if threads == 1 {
            self.batches.iter().zip(out.chunks_mut(block)).for_each(|x| one_gemm(x, Parallelism::None));
        } else {
            self.batches.iter().zip(out.chunks_mut(block)).for_each(|x| one_gemm(x, Parallelism::Rayon(threads)));
        }
    }
}

/// A strided operand of [`gemm_f32`]: elements, row stride, column stride.
pub(crate) type Strided<'a> = (&'a [f32], usize, usize);

/// One f32 product `dst[i, j] = Σ_p lhs[i, p] · rhs[p, j]` (`m × k` times `k × n`) over
/// explicitly strided operands, on the calling thread, with the gemm kernels [`matmul`]
/// uses; `dst` rows are `dst_rs` elements apart. Used by the fused attention to read
/// heads in place. Panics if a stride would address past a slice.
pub(crate) fn gemm_f32(m: usize, n: usize, k: usize, dst: &mut [f32], dst_rs: usize, lhs: Strided, rhs: Strided) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(last(m, n, dst_rs, 1) < dst.len(), "gemm_f32: dst too small");
    if k == 0 {
        dst.chunks_mut(dst_rs).take(m).for_each(|row| row[..n].fill(0.0));
        return;
    }
    assert!(last(m, k, lhs.1, lhs.2) < lhs.0.len(), "gemm_f32: lhs too small");
    assert!(last(k, n, rhs.1, rhs.2) < rhs.0.len(), "gemm_f32: rhs too small");
    // SAFETY: the asserts above keep every (row, col) addressed by these strides inside
    // its slice, and `dst` is borrowed mutably, so nothing else reads or writes it.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            false,
            lhs.0.as_ptr(),
            lhs.2 as isize,
            lhs.1 as isize,
            rhs.0.as_ptr(),
            rhs.2 as isize,
            rhs.1 as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// The whole product; `out` is the result of `infer`.
pub(crate) fn matmul(
    args: &MatmulArgs,
    a: (&CpuBuffer, &TensorMeta),
    b: (&CpuBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CpuBuffer, KernelError> {
    let m = out.shape[out.rank() - 2] as usize;
    compute(args, a, b, out, 0..m)
}

/// Output rows `rows` of the M axis of `matmul(a, b)`, for every batch: the result has
/// `out`'s shape with M replaced by `rows.len()`. Concatenating the blocks of a
/// partition of `0..M` along axis `rank - 2` gives the whole product.
pub fn matmul_rows(
    args: &MatmulArgs,
    a: (&CpuBuffer, &TensorMeta),
    b: (&CpuBuffer, &TensorMeta),
    out: &TensorMeta,
    rows: Range<usize>,
) -> Result<CpuBuffer, KernelError> {
    let m = out.shape.get(out.rank().wrapping_sub(2)).copied().unwrap_or(0) as usize;
    if out.rank() < 2 || rows.start > rows.end || rows.end > m {
        return Err(KernelError(format!("rows {rows:?} are out of range for a matmul output {:?}", out.shape)));
    }
    crate::check_inputs(&[a, b])?;
    compute(args, a, b, out, rows)
}

fn compute(
    args: &MatmulArgs,
    (a, am): (&CpuBuffer, &TensorMeta),
    (b, bm): (&CpuBuffer, &TensorMeta),
    out: &TensorMeta,
    rows: Range<usize>,
) -> Result<CpuBuffer, KernelError> {
    let g = Geometry::new(args, am, bm, out, rows);
    let len = g.out_len();
    match am.dtype {
        DType::F32 if panel_gemm::available() => {
            let (a, b) = (a.typed::<f32>()?, b.typed::<f32>()?);
            Ok(CpuBuffer::F32(new_with(len, |o| g.run_panels(a, b, o))))
        }
        DType::F32 => {
            let (a, b) = (a.typed::<f32>()?, b.typed::<f32>()?);
            Ok(CpuBuffer::F32(new_with(len, |o| g.run(a, b, o, 0.0, 1.0))))
        }
        DType::F16 => {
            let (a, b) = (a.typed::<f16>()?, b.typed::<f16>()?);
            Ok(CpuBuffer::F16(new_with(len, |o| g.run(a, b, o, f16::ZERO, f16::ONE))))
        }
        DType::BF16 => {
            let (a, b) = (a.float_view()?, b.float_view()?);
            let mut o = vec![0.0f32; len];
            if panel_gemm::available() {
                g.run_panels(&a, &b, &mut o);
            } else {
                g.run(&a, &b, &mut o, 0.0, 1.0);
            }
            Ok(CpuBuffer::BF16(o.iter().map(|&x| bf16::from_f32(x)).collect()))
        }
        other => Err(KernelError(format!("matmul is not defined on {other}"))),
    }
}
