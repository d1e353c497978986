//! Layout kernels, defined on every dtype: reshape (shares the input's storage),
//! permute (a strided copy), slice and concat along one axis (block copies). A slice of
//! a whole axis and a concat of one input also share storage.

use rayon::prelude::*;
use sluice_host_api::{MAX_RANK, SliceArgs, TensorMeta};

use crate::KernelError;
use crate::broadcast::{PAR_MIN_ELEMS, Plan};
use crate::buffer::{CpuBuffer, Element, new_with, with_dtype};

const PAR_CHUNK: usize = 1 << 14;

/// Product of `shape[range]` as `usize`.
fn prod(shape: &[u32]) -> usize {
    shape.iter().map(|&d| d as usize).product()
}

pub(crate) fn permute((x, xm): (&CpuBuffer, &TensorMeta), perm: &[u32]) -> Result<CpuBuffer, KernelError> {
    let r = xm.rank();
    let mut in_strides = [0usize; MAX_RANK];
    let mut acc = 1;
    for i in (0..r).rev() {
        in_strides[i] = acc;
        acc *= xm.shape[i] as usize;
    }
    let (mut dims, mut strides) = ([1usize; MAX_RANK], [0usize; MAX_RANK]);
    for (i, &p) in perm.iter().enumerate().take(r) {
        dims[i] = xm.shape[p as usize] as usize;
        strides[i] = in_strides[p as usize];
    }
    let plan = Plan::strided(&dims[..r], &strides[..r], &[0; MAX_RANK][..r]);
    with_dtype!(xm.dtype, T => permute_t::<T>(x.typed()?, &plan))
}

fn permute_t<T: Element>(x: &[T], plan: &Plan) -> Result<CpuBuffer, KernelError> {
    let (stride, _) = plan.inner_strides();
    let copy = |start: usize, out: &mut [T]| {
        plan.for_each_run(start, out.len(), |pos, run, off, _| {
            let o = &mut out[pos..pos + run];
            if stride == 1 {
                o.copy_from_slice(&x[off..off + run]);
            } else {
                for (k, o) in o.iter_mut().enumerate() {
                    *o = x[off + k * stride];
                }
            }
        })
    };
    Ok(T::wrap(new_with(plan.numel(), |out| {
        if out.len() >= PAR_MIN_ELEMS {
            out.par_chunks_mut(PAR_CHUNK).enumerate().for_each(|(c, o)| copy(c * PAR_CHUNK, o));
        } else {
            copy(0, out);
        }
    })))
}

pub(crate) fn slice((x, xm): (&CpuBuffer, &TensorMeta), args: &SliceArgs) -> Result<CpuBuffer, KernelError> {
    let axis = args.axis as usize;
    let dim = xm.shape[axis] as usize;
    let (start, end) = (args.start as usize, args.end as usize);
    if start == 0 && end == dim {
        return Ok(x.clone());
    }
    let (outer, inner) = (prod(&xm.shape[..axis]), prod(&xm.shape[axis + 1..]));
    with_dtype!(xm.dtype, T => {
        let x = x.typed::<T>()?;
        let block = (end - start) * inner;
        Ok(T::wrap(new_with(outer * block, |out| {
            if block == 0 {
                return;
            }
            for (o, dst) in out.chunks_mut(block).enumerate() {
                let src = (o * dim + start) * inner;
                dst.copy_from_slice(&x[src..src + block]);
            }
        })))
    })
}

pub(crate) fn concat(
    inputs: &[(&CpuBuffer, &TensorMeta)],
    axis: u32,
    out: &TensorMeta,
) -> Result<CpuBuffer, KernelError> {
    if let [(x, _)] = inputs {
        return Ok((*x).clone());
    }
    let axis = axis as usize;
    let (outer, inner) = (prod(&out.shape[..axis]), prod(&out.shape[axis + 1..]));
    with_dtype!(out.dtype, T => {
        let parts = inputs
            .iter()
            .map(|(b, m)| Ok((b.typed::<T>()?, m.shape[axis] as usize * inner)))
            .collect::<Result<Vec<_>, KernelError>>()?;
        let row = out.shape[axis] as usize * inner;
        Ok(T::wrap(new_with(outer * row, |dst| {
            if row == 0 {
                return;
            }
            for (o, dst) in dst.chunks_mut(row).enumerate() {
                let mut at = 0;
                for &(src, block) in &parts {
                    dst[at..at + block].copy_from_slice(&src[o * block..(o + 1) * block]);
                    at += block;
                }
            }
        })))
    })
}
