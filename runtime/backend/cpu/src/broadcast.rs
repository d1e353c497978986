//! NumPy broadcasting of two operands onto an output shape: a [`Plan`] drops size-1
//! output axes and merges axes that are contiguous in both operands, so that most
//! kernels end up in one tight inner loop with operand strides of 0 or 1; [`zip`]
//! applies a function elementwise over such a plan, in parallel for large outputs.

use std::sync::Arc;

use rayon::prelude::*;
use sluice_host_api::MAX_RANK;

use crate::buffer::new_with;

/// Outputs with at least this many elements are computed by rayon in chunks.
pub(crate) const PAR_MIN_ELEMS: usize = 1 << 16;
pub(crate) const PAR_CHUNK: usize = 1 << 14;

/// How two broadcast operands map onto a row-major output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    rank: usize,
    dims: [usize; MAX_RANK],
    sa: [usize; MAX_RANK],
    sb: [usize; MAX_RANK],
    numel: usize,
}

/// Element strides of a row-major `shape` aligned to the last axes of a `rank`-axis
/// output, 0 on broadcast (size-1 or missing) axes.
pub(crate) fn broadcast_strides(shape: &[u32], rank: usize) -> [usize; MAX_RANK] {
    let mut s = [0; MAX_RANK];
    let off = rank - shape.len();
    let mut acc = 1usize;
    for (i, &d) in shape.iter().enumerate().rev() {
        s[off + i] = if d == 1 { 0 } else { acc };
        acc *= d as usize;
    }
    s
}

impl Plan {
    /// Plans `a` and `b` broadcast to `out` (which `broadcast_shapes` produced).
    pub(crate) fn new(a: &[u32], b: &[u32], out: &[u32]) -> Plan {
        let r = out.len().min(MAX_RANK);
        let mut dims = [1; MAX_RANK];
        for (d, &o) in dims.iter_mut().zip(&out[..r]) {
            *d = o as usize;
        }
        Plan::strided(&dims[..r], &broadcast_strides(a, r), &broadcast_strides(b, r))
    }

    /// Plans operands with explicit element strides `sa` and `sb` over the axes `dims`.
    pub(crate) fn strided(dims: &[usize], sa: &[usize], sb: &[usize]) -> Plan {
        let mut p = Plan { rank: 0, dims: [1; MAX_RANK], sa: [0; MAX_RANK], sb: [0; MAX_RANK], numel: 1 };
        for (i, &d) in dims.iter().enumerate().take(MAX_RANK) {
            p.numel *= d;
            if d == 1 {
                continue;
            }
            if p.rank > 0 {
                let j = p.rank - 1;
                if p.sa[j] == sa[i] * d && p.sb[j] == sb[i] * d {
                    p.dims[j] *= d;
                    p.sa[j] = sa[i];
                    p.sb[j] = sb[i];
                    continue;
                }
            }
            p.dims[p.rank] = d;
            p.sa[p.rank] = sa[i];
            p.sb[p.rank] = sb[i];
            p.rank += 1;
        }
        if p.rank == 0 {
            p.rank = 1; // a scalar: one axis of size 1
        }
        p
    }

    pub(crate) fn numel(&self) -> usize {
        self.numel
    }

    /// Walks output elements `start..start + len` as runs along the innermost axis,
    /// calling `f(pos, run, a_off, b_off)` where `pos` is relative to `start` and the
    /// run's operand strides are [`Plan::inner_strides`].
    pub(crate) fn for_each_run(&self, start: usize, len: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
        if len == 0 {
            return;
        }
        let r = self.rank;
        let inner = self.dims[r - 1];
        let mut idx = [0usize; MAX_RANK];
        let (mut ao, mut bo, mut rem) = (0, 0, start);
        for i in (0..r).rev() {
            idx[i] = rem % self.dims[i];
            rem /= self.dims[i];
            ao += idx[i] * self.sa[i];
            bo += idx[i] * self.sb[i];
        }
        let mut done = 0;
        while done < len {
            let run = (inner - idx[r - 1]).min(len - done);
            f(done, run, ao, bo);
            done += run;
            idx[r - 1] += run;
            ao += run * self.sa[r - 1];
            bo += run * self.sb[r - 1];
            if idx[r - 1] < inner || done == len {
                continue;
            }
            // carry into the outer axes
            for i in (0..r).rev() {
                if i < r - 1 {
                    idx[i] += 1;
                    ao += self.sa[i];
                    bo += self.sb[i];
                }
                if idx[i] < self.dims[i] {
                    break;
                }
                idx[i] = 0;
                ao -= self.dims[i] * self.sa[i];
                bo -= self.dims[i] * self.sb[i];
            }
        }
    }

    /// Strides of `a` and `b` along the innermost axis (each 0 or 1 for broadcast plans).
    pub(crate) fn inner_strides(&self) -> (usize, usize) {
        (self.sa[self.rank - 1], self.sb[self.rank - 1])
    }
}

/// `f(a[i], b[j])` for every output element of `plan`.
pub(crate) fn zip<A, B, O, F>(plan: &Plan, a: &[A], b: &[B], f: F) -> Arc<[O]>
where
    A: Copy + Sync,
    B: Copy + Sync,
    O: Copy + Default + Send,
    F: Fn(A, B) -> O + Sync,
{
    new_with(plan.numel(), |out| zip_into(plan, a, b, out, f))
}

/// `out[i] = f(a[j], b[k])` for every output element of `plan` (`out.len() == plan.numel()`).
pub(crate) fn zip_into<A, B, O, F>(plan: &Plan, a: &[A], b: &[B], out: &mut [O], f: F)
where
    A: Copy + Sync,
    B: Copy + Sync,
    O: Send,
    F: Fn(A, B) -> O + Sync,
{
    if out.len() >= PAR_MIN_ELEMS {
        out.par_chunks_mut(PAR_CHUNK)
            .enumerate()
            .for_each(|(c, chunk)| zip_range(plan, a, b, &f, c * PAR_CHUNK, chunk));
    } else {
        zip_range(plan, a, b, &f, 0, out);
    }
}

fn zip_range<A: Copy, B: Copy, O>(plan: &Plan, a: &[A], b: &[B], f: &impl Fn(A, B) -> O, start: usize, out: &mut [O]) {
    let (sa, sb) = plan.inner_strides();
    plan.for_each_run(start, out.len(), |pos, run, ao, bo| {
        let o = &mut out[pos..pos + run];
        match (sa, sb) {
            (1, 1) => {
                for ((o, &x), &y) in o.iter_mut().zip(&a[ao..ao + run]).zip(&b[bo..bo + run]) {
                    *o = f(x, y);
                }
            }
            (0, 1) => {
                let x = a[ao];
                for (o, &y) in o.iter_mut().zip(&b[bo..bo + run]) {
                    *o = f(x, y);
                }
            }
            (1, 0) => {
                let y = b[bo];
                for (o, &x) in o.iter_mut().zip(&a[ao..ao + run]) {
                    *o = f(x, y);
                }
            }
            _ => {
                for o in o {
                    *o = f(a[ao], b[bo]);
                }
            }
        }
    });
}

/// `f(x)` for every element, in parallel for large inputs.
pub(crate) fn map<A, O, F>(x: &[A], f: F) -> Arc<[O]>
where
    A: Copy + Sync,
    O: Copy + Default + Send,
    F: Fn(A) -> O + Sync,
{
    new_with(x.len(), |out| map_into(x, out, f))
}

/// `out[i] = f(x[i])`, in parallel for large inputs.
pub(crate) fn map_into<A, O, F>(x: &[A], out: &mut [O], f: F)
where
    A: Copy + Sync,
    O: Send,
    F: Fn(A) -> O + Sync,
{
    if x.len() >= PAR_MIN_ELEMS {
        out.par_chunks_mut(PAR_CHUNK).zip(x.par_chunks(PAR_CHUNK)).for_each(|(o, x)| {
            for (o, &x) in o.iter_mut().zip(x) {
                *o = f(x);
            }
        });
    } else {
        for (o, &x) in out.iter_mut().zip(x) {
            *o = f(x);
        }
    }
}

/// Runs `f` on every `width`-element row of `data`, in parallel for large data.
pub(crate) fn for_rows<T: Send>(data: &mut [T], width: usize, f: impl Fn(&mut [T]) + Sync) {
    if width == 0 {
        return;
    }
    if data.len() >= PAR_MIN_ELEMS / 2 && data.len() / width > 1 {
        let per_task = (PAR_CHUNK / width).max(1) * width;
        data.par_chunks_mut(per_task).for_each(|c| c.chunks_mut(width).for_each(&f));
    } else {
        data.chunks_mut(width).for_each(f);
    }
}
