//! Convolution (im2col + cuBLAS GEMM, bias pre-filled so the GEMM adds into it and
//! rounds once) and direct 2-D pooling.
//!
//! For image `n` and group `g`, `out[n, g] (Og × L) = W[g] (Og × Kg) · col[n, g] (Kg × L)`
//! with `L = oh·ow` and `Kg = (c/groups)·kh·kw`. Without groups the images of a chunk are
//! one strided-batched GEMM with W shared (stride 0); with groups each image is one
//! strided-batched GEMM over its groups. im2col works on chunks of images so the column
//! buffer stays under [`COL_BUDGET`] bytes.

use cudarc::driver::DeviceRepr;
use sluice_host_api::{Conv2dArgs, Pool2dArgs, PoolKind, TensorMeta};

use super::launch_kernel;
use crate::gemm::{GemmCall, gemm};
use crate::kernels::{self, Module, elementwise_config};
use crate::{CudaBuffer, CudaDevice, CudaError};

/// Largest im2col buffer per chunk of images.
pub const COL_BUDGET: u64 = 256 << 20;

/// `struct ConvGeom` of conv.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConvGeom {
    pub c: u32,
    pub h: u32,
    pub w: u32,
    pub kh: u32,
    pub kw: u32,
    pub oh: u32,
    pub ow: u32,
    pub sh: u32,
    pub sw: u32,
    pub ph: u32,
    pub pw: u32,
    pub dh: u32,
    pub dw: u32,
    pub pad: u32,
}
// SAFETY: `#[repr(C)]` u32 fields, identical to the C struct.
unsafe impl DeviceRepr for ConvGeom {}

/// `struct PoolGeom` of pool.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolGeom {
    pub h: u32,
    pub w: u32,
    pub kh: u32,
    pub kw: u32,
    pub oh: u32,
    pub ow: u32,
    pub sh: u32,
    pub sw: u32,
    pub ph: u32,
    pub pw: u32,
}
// SAFETY: as above.
unsafe impl DeviceRepr for PoolGeom {}

/// Images per im2col chunk.
pub fn images_per_chunk(n: u64, col_bytes_per_image: u64) -> u64 {
    (COL_BUDGET / col_bytes_per_image.max(1)).clamp(1, n.max(1))
}

pub(crate) fn conv2d(
    dev: &CudaDevice,
    args: &Conv2dArgs,
    (x, xm): (&CudaBuffer, &TensorMeta),
    (w, wm): (&CudaBuffer, &TensorMeta),
    bias: Option<&CudaBuffer>,
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    if out.numel() == 0 {
        return Ok(y);
    }
    let dt = xm.dtype;
    let es = dt.size_of() as u64;
    let (n, c, h, wd) = (xm.shape[0] as u64, xm.shape[1], xm.shape[2], xm.shape[3]);
    let (o, cg, kh, kw) = (wm.shape[0] as u64, wm.shape[1] as u64, wm.shape[2], wm.shape[3]);
    let (oh, ow) = (out.shape[2], out.shape[3]);
    let g = args.groups as u64;
    let (og, l, kg) = (o / g, oh as u64 * ow as u64, cg * kh as u64 * kw as u64);
    let ck = g * kg;

    let beta = match bias {
        Some(b) => {
            let total = out.numel() as u64;
            let (bp, yp) = (b.device_ptr(), y.device_ptr());
            let cfg = elementwise_config(total, dev.launch_sms());
            launch_kernel!(dev, Module::Conv, kernels::bias_fill_symbol(dt), cfg, &bp, &yp, &total, &o, &l)?;
            1.0
        }
        None => 0.0,
    };
    if kg == 0 {
        if bias.is_none() {
            dev.memset_zero(&y)?;
        }
        return Ok(y);
    }

    let geom = ConvGeom {
        c,
        h,
        w: wd,
        kh,
        kw,
        oh,
        ow,
        sh: args.stride.0,
        sw: args.stride.1,
        ph: args.padding.0,
        pw: args.padding.1,
        dh: args.dilation.0,
        dw: args.dilation.1,
        pad: 0,
    };
    let per_image = ck * l;
    let chunk = images_per_chunk(n, per_image * es);
    let col = dev.alloc((chunk * per_image * es) as usize)?;
    let (xp, wp, yp, cp) = (x.device_ptr(), w.device_ptr(), y.device_ptr(), col.device_ptr());
    let image_in = c as u64 * h as u64 * wd as u64;
    let mut start = 0u64;
    while start < n {
        let count = chunk.min(n - start);
        let xs = xp + start * image_in * es;
        let cfg = elementwise_config(count * per_image, dev.launch_sms());
        launch_kernel!(dev, Module::Conv, kernels::im2col_symbol(dt), cfg, &xs, &cp, &count, &geom)?;
        let out_at = |img: u64| yp + (start + img) * o * l * es;
        if g == 1 {
            // Row-major out[img] (o × l) = W (o × kg) · col[img] (kg × l); cuBLAS A = col.
            let mut call = GemmCall::row_major(o, l, kg, false, false);
            call.stride_a = kg * l;
            call.stride_b = 0;
            call.stride_c = o * l;
            call.batch = count;
            gemm(dev, dt, &call, cp, wp, out_at(0), beta)?;
        } else {
            for img in 0..count {
                let mut call = GemmCall::row_major(og, l, kg, false, false);
                call.stride_a = kg * l;
                call.stride_b = og * kg;
                call.stride_c = og * l;
                call.batch = g;
                gemm(dev, dt, &call, cp + img * per_image * es, wp, out_at(img), beta)?;
            }
        }
        start += count;
    }
    Ok(y)
}

pub(crate) fn pool2d(
    dev: &CudaDevice,
    args: &Pool2dArgs,
    (x, xm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let total = out.numel() as u64;
    if total == 0 {
        return Ok(y);
    }
    let geom = PoolGeom {
        h: xm.shape[2],
        w: xm.shape[3],
        kh: args.kernel.0,
        kw: args.kernel.1,
        oh: out.shape[2],
        ow: out.shape[3],
        sh: args.stride.0,
        sw: args.stride.1,
        ph: args.padding.0,
        pw: args.padding.1,
    };
    let (xp, yp) = (x.device_ptr(), y.device_ptr());
    let cfg = elementwise_config(total, dev.launch_sms());
    let sym = kernels::pool_symbol(args.kind, xm.dtype);
    debug_assert!(matches!(args.kind, PoolKind::Max | PoolKind::Avg));
    launch_kernel!(dev, Module::Pool, sym, cfg, &xp, &yp, &total, &geom)?;
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_structs_match_c() {
        assert_eq!(std::mem::size_of::<ConvGeom>(), 14 * 4);
        assert_eq!(std::mem::size_of::<PoolGeom>(), 10 * 4);
    }

    #[test]
    fn chunking() {
        assert_eq!(images_per_chunk(64, 1 << 20), 64);
        assert_eq!(images_per_chunk(64, 100 << 20), 2);
        assert_eq!(images_per_chunk(64, 1 << 30), 1);
        assert_eq!(images_per_chunk(0, 0), 1);
    }
}
