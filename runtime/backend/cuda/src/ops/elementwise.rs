//! Elementwise families: unary activations, affine, casts (contiguous, one thread per
//! element, grid-stride) and broadcasting binary ops (strides as kernel arguments).

use sluice_host_api::{BinaryOp, DType, TensorMeta, UnaryOp};

use super::launch_kernel;
use crate::fault::{Fault, FaultKind};
use crate::kernels::{self, Module, elementwise_config};
use crate::layout::{Layout, broadcast_strides};
use crate::{CudaBuffer, CudaDevice, CudaError};

pub(crate) fn unary(
    dev: &CudaDevice,
    op: UnaryOp,
    (x, xm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let n = xm.numel() as u64;
    if n > 0 {
        let (xp, yp) = (x.device_ptr(), y.device_ptr());
        let cfg = elementwise_config(n, dev.launch_sms());
        launch_kernel!(dev, Module::Unary, kernels::unary_symbol(op, xm.dtype), cfg, &xp, &yp, &n)?;
    }
    Ok(y)
}

pub(crate) fn affine(
    dev: &CudaDevice,
    scale: f32,
    bias: f32,
    (x, xm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let n = xm.numel() as u64;
    if n > 0 {
        let (xp, yp) = (x.device_ptr(), y.device_ptr());
        let cfg = elementwise_config(n, dev.launch_sms());
        launch_kernel!(dev, Module::Unary, kernels::affine_symbol(xm.dtype), cfg, &xp, &yp, &n, &scale, &bias)?;
    }
    Ok(y)
}

pub(crate) fn cast(
    dev: &CudaDevice,
    to: DType,
    (x, xm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let n = xm.numel() as u64;
    if n > 0 {
        let (xp, yp) = (x.device_ptr(), y.device_ptr());
        let cfg = elementwise_config(n, dev.launch_sms());
        // A block format's cast to f32 is `quant.cu`'s dequantization.
        let module = kernels::gather_module(xm.dtype, Module::Cast);
        launch_kernel!(dev, module, kernels::cast_symbol(xm.dtype, to), cfg, &xp, &yp, &n)?;
    }
    Ok(y)
}

/// The layout of a broadcasting binary op and whether both inputs are already dense in
/// the output's shape.
pub fn binary_layout(a: &[u32], b: &[u32], out: &[u32]) -> (Layout, bool) {
    let contiguous = a == out && b == out;
    (Layout::new(out, &broadcast_strides(a, out), &broadcast_strides(b, out)), contiguous)
}

pub(crate) fn binary(
    dev: &CudaDevice,
    op: BinaryOp,
    (a, am): (&CudaBuffer, &TensorMeta),
    (b, bm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let c = dev.alloc(out.byte_len())?;
    let n = out.numel() as u64;
    if n > 0 {
        let (layout, contiguous) = binary_layout(&am.shape, &bm.shape, &out.shape);
        let contiguous = contiguous as i32;
        // An integer division gets a fault record that a zero divisor sets; the download
        // of any result computed from `c` reports it, as the CPU backend's launch does
        // (issue 11, defect 7). Other ops pass a null record they never touch.
        let fault = if op == BinaryOp::Div && !am.dtype.is_float() {
            Some(Fault::new(dev, FaultKind::DivisionByZero { dtype: am.dtype })?)
        } else {
            None
        };
        let fp = fault.as_ref().map_or(0, |f| f.record.device_ptr());
        let (ap, bp, cp) = (a.device_ptr(), b.device_ptr(), c.device_ptr());
        let cfg = elementwise_config(n, dev.launch_sms());
        launch_kernel!(
            dev,
            Module::Binary,
            kernels::binary_symbol(op, am.dtype),
            cfg,
            &ap,
            &bp,
            &cp,
            &n,
            &layout,
            &contiguous,
            &fp
        )?;
        c.add_faults(&fault);
    }
    Ok(c)
}
