//! NCHW convolution and pooling. Conv2d lowers each (image, group) pair to one GEMM over
//! an im2col matrix (a 1×1, stride-1, unpadded kernel reads the input directly), with
//! stride, zero padding, dilation, groups and an optional bias; f16/bf16 are computed in
//! f32. Pool2d is a direct window loop: max ignores padding, avg counts padding as zeros
//! and always divides by the window size (as the WIT documents).

use gemm::{Parallelism, gemm};
use rayon::prelude::*;
use sluice_host_api::{Conv2dArgs, Pool2dArgs, PoolKind, TensorMeta};

use crate::KernelError;
use crate::broadcast::PAR_MIN_ELEMS;
use crate::buffer::{CpuBuffer, float_with};

const PAR_MIN_MACS: usize = 1 << 20;

/// Sizes of one convolution, all as `usize`.
#[derive(Clone, Copy)]
struct Conv {
    c: usize,
    h: usize,
    w: usize,
    groups: usize,
    cg: usize,
    og: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    stride: (usize, usize),
    pad: (usize, usize),
    dil: (usize, usize),
}

impl Conv {
    /// Rows of the im2col matrix (the GEMM's k).
    fn k(&self) -> usize {
        self.cg * self.kh * self.kw
    }

    /// Output pixels per channel (the GEMM's n).
    fn p(&self) -> usize {
        self.oh * self.ow
    }

    fn direct(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.stride == (1, 1) && self.pad == (0, 0)
    }

    /// Fills `col` (`k × p`) from the group's channels `img` (`cg × h × w`).
    fn im2col(&self, img: &[f32], col: &mut [f32]) {
        let p = self.p();
        for c in 0..self.cg {
            for i in 0..self.kh {
                for j in 0..self.kw {
                    let row = &mut col[((c * self.kh + i) * self.kw + j) * p..][..p];
                    for oy in 0..self.oh {
                        let y = (oy * self.stride.0 + i * self.dil.0).wrapping_sub(self.pad.0);
                        let dst = &mut row[oy * self.ow..(oy + 1) * self.ow];
                        if y >= self.h {
                            dst.fill(0.0);
                            continue;
                        }
                        let src = &img[(c * self.h + y) * self.w..][..self.w];
                        for (ox, d) in dst.iter_mut().enumerate() {
                            let x = (ox * self.stride.1 + j * self.dil.1).wrapping_sub(self.pad.1);
                            *d = if x < self.w { src[x] } else { 0.0 };
                        }
                    }
                }
            }
        }
    }
}

pub(crate) fn conv2d(
    args: &Conv2dArgs,
    (x, xm): (&CpuBuffer, &TensorMeta),
    (w, wm): (&CpuBuffer, &TensorMeta),
    bias: Option<&CpuBuffer>,
    out: &TensorMeta,
) -> Result<CpuBuffer, KernelError> {
    let s = |t: &TensorMeta, i: usize| t.shape[i] as usize;
    let groups = args.groups as usize;
    let cv = Conv {
        c: s(xm, 1),
        h: s(xm, 2),
        w: s(xm, 3),
        groups,
        cg: s(wm, 1),
        og: s(wm, 0) / groups,
        kh: s(wm, 2),
        kw: s(wm, 3),
        oh: s(out, 2),
        ow: s(out, 3),
        stride: (args.stride.0 as usize, args.stride.1 as usize),
        pad: (args.padding.0 as usize, args.padding.1 as usize),
        dil: (args.dilation.0 as usize, args.dilation.1 as usize),
    };
    let (xv, wv) = (x.float_view()?, w.float_view()?);
    let bv = bias.map(CpuBuffer::float_view).transpose()?;
    let (k, p) = (cv.k(), cv.p());
    let block = cv.og * p;
    Ok(float_with(out.dtype, out.numel(), |dst| {
        if block == 0 {
            return;
        }
        let pairs = dst.len() / block;
        let threads = rayon::current_num_threads();
        let one = |(idx, dst): (usize, &mut [f32]), par: Parallelism| {
            let (n, g) = (idx / cv.groups, idx % cv.groups);
            let img = &xv[(n * cv.c + g * cv.cg) * cv.h * cv.w..][..cv.cg * cv.h * cv.w];
            let wg = &wv[g * cv.og * k..][..cv.og * k];
            if k > 0 {
                let owned;
                let col: &[f32] = if cv.direct() {
                    img
                } else {
                    let mut c = vec![0.0; k * p];
                    cv.im2col(img, &mut c);
                    owned = c;
                    &owned
                };
                // SAFETY: `wg` is og × k, `col` is k × p and `dst` is og × p, all
                // row-major, so every element addressed by these strides is in bounds.
                unsafe {
                    gemm(
                        cv.og,
                        p,
                        k,
                        dst.as_mut_ptr(),
                        1,
                        p as isize,
                        false,
                        wg.as_ptr(),
                        1,
                        k as isize,
                        col.as_ptr(),
                        1,
                        p as isize,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        par,
                    );
                }
            }
            if let Some(b) = &bv {
                for (o, plane) in dst.chunks_mut(p).enumerate() {
                    let bias = b[g * cv.og + o];
                    plane.iter_mut().for_each(|v| *v += bias);
                }
            }
        };
        let macs = dst.len() * k;
        if macs < PAR_MIN_MACS || threads == 1 {
            dst.chunks_mut(block).enumerate().for_each(|x| one(x, Parallelism::None));
        } else if pairs >= threads {
            dst.par_chunks_mut(block).enumerate().for_each(|x| one(x, Parallelism::None));
        } else {
            dst.chunks_mut(block).enumerate().for_each(|x| one(x, Parallelism::Rayon(threads)));
        }
    }))
}

pub(crate) fn pool2d(
    args: &Pool2dArgs,
    (x, xm): (&CpuBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CpuBuffer, KernelError> {
    let (h, w) = (xm.shape[2] as usize, xm.shape[3] as usize);
    let (oh, ow) = (out.shape[2] as usize, out.shape[3] as usize);
    let (kh, kw) = (args.kernel.0 as usize, args.kernel.1 as usize);
    let (sh, sw) = (args.stride.0 as usize, args.stride.1 as usize);
    let (ph, pw) = (args.padding.0 as usize, args.padding.1 as usize);
    let xv = x.float_view()?;
    let area = (kh * kw) as f32;
    let planes = out.shape[0] as usize * out.shape[1] as usize;
    Ok(float_with(out.dtype, out.numel(), |dst| {
        let one = |(plane, dst): (usize, &mut [f32])| {
            let src = &xv[plane * h * w..(plane + 1) * h * w];
            for oy in 0..oh {
                for ox in 0..ow {
                    let (y0, x0) = (oy * sh, ox * sw);
                    let ys = y0.saturating_sub(ph)..(y0 + kh).saturating_sub(ph).min(h);
                    let xs = x0.saturating_sub(pw)..(x0 + kw).saturating_sub(pw).min(w);
                    let window = ys.flat_map(|y| src[y * w..][xs.clone()].iter().copied());
                    dst[oy * ow + ox] = match args.kind {
                        PoolKind::Max => window.fold(f32::NEG_INFINITY, |m, v| if v > m || v.is_nan() { v } else { m }),
                        PoolKind::Avg => window.sum::<f32>() / area,
                    };
                }
            }
        };
        let width = oh * ow;
        if width == 0 || planes == 0 {
            return;
        }
        if dst.len() * kh * kw >= PAR_MIN_ELEMS && planes > 1 {
            dst.par_chunks_mut(width).enumerate().for_each(one);
        } else {
            dst.chunks_mut(width).enumerate().for_each(one);
        }
    }))
}
