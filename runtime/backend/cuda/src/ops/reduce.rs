//! Reductions of one axis: the input viewed as `[outer, len, inner]`. A block per output
//! when the axis is innermost (`inner == 1`), else a thread per output walking the axis
//! (coalesced across `inner`). Argmax: a block per row of the last axis.

use sluice_host_api::{ReduceArgs, SampleArgs, TensorMeta};

use super::launch_kernel;
use crate::kernels::{self, Module, elementwise_config, rows_config};
use crate::{CudaBuffer, CudaDevice, CudaError};

/// `[outer, len, inner]` of reducing `axis` of `shape`.
pub fn split(shape: &[u32], axis: usize) -> (u64, u64, u64) {
    let prod = |s: &[u32]| s.iter().map(|&d| d as u64).product::<u64>();
    (prod(&shape[..axis]), shape[axis] as u64, prod(&shape[axis + 1..]))
}

pub(crate) fn reduce(
    dev: &CudaDevice,
    args: &ReduceArgs,
    (x, xm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let (outer, len, inner) = split(&xm.shape, args.axis as usize);
    if outer * inner == 0 {
        return Ok(y);
    }
    let (xp, yp) = (x.device_ptr(), y.device_ptr());
    if inner == 1 {
        let cfg = rows_config(outer, len);
        launch_kernel!(
            dev,
            Module::Reduce,
            kernels::reduce_symbol(args.op, xm.dtype, true),
            cfg,
            &xp,
            &yp,
            &outer,
            &len
        )?;
    } else {
        let cfg = elementwise_config(outer * inner, dev.launch_sms());
        launch_kernel!(
            dev,
            Module::Reduce,
            kernels::reduce_symbol(args.op, xm.dtype, false),
            cfg,
            &xp,
            &yp,
            &outer,
            &len,
            &inner
        )?;
    }
    Ok(y)
}

/// The index of each row's largest element (last axis) as i32: one block per row.
pub(crate) fn argmax(
    dev: &CudaDevice,
    (x, xm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let len = xm.shape.last().copied().unwrap_or(0) as u64;
    let rows = out.numel() as u64;
    if rows > 0 && len > 0 {
        let (xp, yp) = (x.device_ptr(), y.device_ptr());
        let cfg = rows_config(rows, len);
        launch_kernel!(dev, Module::Reduce, kernels::argmax_symbol(xm.dtype), cfg, &xp, &yp, &rows, &len)?;
    }
    Ok(y)
}

/// A token drawn from each row of f32 logits (`Op::Sample`): one thread per row, the
/// algorithm of the WIT `sample-args` as the CPU backend runs it.
pub(crate) fn sample(
    dev: &CudaDevice,
    args: &SampleArgs,
    (x, xm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let len = xm.shape.last().copied().unwrap_or(0) as u64;
    let rows = out.numel() as u64;
    if rows > 0 && len > 0 {
        let (xp, yp) = (x.device_ptr(), y.device_ptr());
        let cfg = elementwise_config(rows, dev.launch_sms());
        let (t, k, p, seed) = (args.temperature, args.top_k, args.top_p, args.seed);
        launch_kernel!(dev, Module::Reduce, kernels::SAMPLE_SYMBOL, cfg, &xp, &yp, &rows, &len, &t, &k, &p, &seed)?;
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    #[test]
    fn splits() {
        assert_eq!(super::split(&[2, 3, 4], 1), (2, 3, 4));
        assert_eq!(super::split(&[2, 3, 4], 2), (6, 4, 1));
        assert_eq!(super::split(&[5], 0), (1, 5, 1));
    }
}
