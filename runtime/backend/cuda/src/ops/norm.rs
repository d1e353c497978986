//! Row kernels over the last axis: softmax (scale and broadcast additive mask) and layer
//! norm, one block per row; and rotary position embedding, one thread per pair.

use sluice_host_api::TensorMeta;

use super::launch_kernel;
use crate::kernels::{self, Module, elementwise_config, rows_config};
use crate::layout::{Layout, broadcast_strides, contiguous_strides};
use crate::{CudaBuffer, CudaDevice, CudaError};

/// (rows, row length) of a tensor normalised over its last axis.
fn rows_of(x: &TensorMeta) -> (u64, u64) {
    let len = *x.shape.last().unwrap_or(&1) as u64;
    let rows = (x.numel() as u64).checked_div(len).unwrap_or(0);
    (rows, len)
}

/// The mask arguments: a layout mapping flat x indices to mask offsets (`sa`) and the
/// mask's stride along the last axis.
pub fn mask_layout(x: &[u32], mask: &[u32]) -> (Layout, u64) {
    let sa = broadcast_strides(mask, x);
    let step = sa.last().copied().unwrap_or(0);
    (Layout::new(x, &sa, &contiguous_strides(x)), step)
}

pub(crate) fn softmax(
    dev: &CudaDevice,
    scale: f32,
    x: (&CudaBuffer, &TensorMeta),
    mask: Option<(&CudaBuffer, &TensorMeta)>,
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    softmax_into(dev, scale, x, mask, &y)?;
    Ok(y)
}

/// [`softmax`] into `y`, a buffer of x's size (the fused attention's probabilities).
pub(crate) fn softmax_into(
    dev: &CudaDevice,
    scale: f32,
    (x, xm): (&CudaBuffer, &TensorMeta),
    mask: Option<(&CudaBuffer, &TensorMeta)>,
    y: &CudaBuffer,
) -> Result<(), CudaError> {
    let (rows, len) = rows_of(xm);
    if rows == 0 {
        return Ok(());
    }
    let (layout, step, mp, has_mask) = match mask {
        Some((m, mm)) => {
            let (l, s) = mask_layout(&xm.shape, &mm.shape);
            (l, s, m.device_ptr(), 1i32)
        }
        None => (Layout::default(), 0u64, 0u64, 0i32),
    };
    let (xp, yp) = (x.device_ptr(), y.device_ptr());
    let cfg = rows_config(rows, len);
    launch_kernel!(
        dev,
        Module::Softmax,
        kernels::softmax_symbol(xm.dtype),
        cfg,
        &xp,
        &mp,
        &yp,
        &rows,
        &len,
        &scale,
        &layout,
        &step,
        &has_mask
    )
}

pub(crate) fn layer_norm(
    dev: &CudaDevice,
    eps: f32,
    (x, xm): (&CudaBuffer, &TensorMeta),
    gamma: &CudaBuffer,
    beta: &CudaBuffer,
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let (rows, len) = rows_of(xm);
    if rows == 0 {
        return Ok(y);
    }
    let (xp, gp, bp, yp) = (x.device_ptr(), gamma.device_ptr(), beta.device_ptr(), y.device_ptr());
    let cfg = rows_config(rows, len);
    launch_kernel!(
        dev,
        Module::LayerNorm,
        kernels::layernorm_symbol(xm.dtype),
        cfg,
        &xp,
        &gp,
        &bp,
        &yp,
        &rows,
        &len,
        &eps
    )?;
    Ok(y)
}

/// Rotary position embedding of `x` `[..., s, heads, d]` (adjacent pairs): one thread per
/// pair (`rope.cu`).
pub(crate) fn rope(
    dev: &CudaDevice,
    base: f32,
    offset: u32,
    (x, xm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let r = xm.rank();
    let (s, heads, d) = (xm.shape[r - 3] as u64, xm.shape[r - 2] as u64, xm.shape[r - 1] as u64);
    let pairs = xm.numel() as u64 / 2;
    if pairs > 0 {
        let (xp, yp) = (x.device_ptr(), y.device_ptr());
        let cfg = elementwise_config(pairs, dev.launch_sms());
        launch_kernel!(
            dev,
            Module::Rope,
            kernels::rope_symbol(xm.dtype),
            cfg,
            &xp,
            &yp,
            &pairs,
            &s,
            &heads,
            &d,
            &base,
            &offset
        )?;
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_offsets_of_row_starts() {
        // x [2, 3, 4], mask [2, 1, 4] (per batch, shared over rows).
        let (l, step) = mask_layout(&[2, 3, 4], &[2, 1, 4]);
        assert_eq!(step, 1);
        for row in 0..6u64 {
            assert_eq!(l.offsets(row * 4).0, (row / 3) * 4, "row {row}");
        }
        // mask [3, 1]: one value per row, broadcast along the last axis.
        let (l, step) = mask_layout(&[2, 3, 4], &[3, 1]);
        assert_eq!(step, 0);
        for row in 0..6u64 {
            assert_eq!(l.offsets(row * 4).0, row % 3);
        }
        assert_eq!(rows_of(&TensorMeta::new(sluice_host_api::DType::F32, vec![2, 3, 0]).unwrap()), (0, 0));
    }
}
