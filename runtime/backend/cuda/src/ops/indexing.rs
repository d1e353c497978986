//! Data movement: embedding gather, the strided copies behind permute, slice, concat
//! and broadcast materialization (for batched matmul), and the in-place row write.

use sluice_host_api::{SliceArgs, TensorMeta};

use super::launch_kernel;
use crate::fault::{Fault, FaultKind};
use crate::kernels::{self, CopyKind, Module, elementwise_config};
use crate::layout::{Layout, broadcast_strides, contiguous_strides};
use crate::{CudaBuffer, CudaDevice, CudaError};

pub(crate) fn embedding(
    dev: &CudaDevice,
    (table, tm): (&CudaBuffer, &TensorMeta),
    (ids, im): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let (vocab, dim) = (tm.shape[0] as u64, tm.shape[1] as u64);
    let n_ids = im.numel() as u64;
    if n_ids * dim > 0 {
        // An id outside the table sets the record; the download of any result computed
        // from `y` reports it, as the CPU backend's launch does (issue 11, defect 7).
        let fault = Fault::new(dev, FaultKind::EmbeddingId { vocab, ids_shape: im.shape.clone() })?;
        let (tp, ip, yp, fp) = (table.device_ptr(), ids.device_ptr(), y.device_ptr(), fault.record.device_ptr());
        let cfg = elementwise_config(n_ids * dim, dev.launch_sms());
        let sym = kernels::embedding_symbol(tm.dtype, im.dtype);
        // A block-format table's rows are dequantized by `quant.cu`'s gather.
        let module = kernels::gather_module(tm.dtype, Module::Indexing);
        launch_kernel!(dev, module, sym, cfg, &tp, &ip, &yp, &n_ids, &dim, &vocab, &fp)?;
        y.add_faults([&fault]);
    }
    Ok(y)
}

/// Queues one strided copy (`layout` walks the elements; `sa` reads, `sb` writes).
#[allow(clippy::too_many_arguments)]
fn copy(
    dev: &CudaDevice,
    kind: CopyKind,
    meta: &TensorMeta,
    src: &CudaBuffer,
    dst: &CudaBuffer,
    layout: &Layout,
    src_off: u64,
    dst_off: u64,
) -> Result<(), CudaError> {
    let n = layout.numel();
    if n == 0 || meta.numel() == 0 {
        return Ok(());
    }
    let (sp, dp) = (src.device_ptr(), dst.device_ptr());
    let cfg = elementwise_config(n, dev.launch_sms());
    launch_kernel!(
        dev,
        Module::Indexing,
        kernels::copy_symbol(kind, meta.dtype),
        cfg,
        &sp,
        &dp,
        &n,
        layout,
        &src_off,
        &dst_off
    )
}

/// Layout of `permute(perm)` of a contiguous `shape`: walks the output, reads permuted.
pub fn permute_layout(shape: &[u32], perm: &[u32]) -> Layout {
    let xs = contiguous_strides(shape);
    let out: Vec<u32> = perm.iter().map(|&p| shape[p as usize]).collect();
    let sa: Vec<u64> = perm.iter().map(|&p| xs[p as usize]).collect();
    Layout::new(&out, &sa, &contiguous_strides(&out))
}

pub(crate) fn permute(
    dev: &CudaDevice,
    perm: &[u32],
    (x, xm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    copy(dev, CopyKind::Permute, xm, x, &y, &permute_layout(&xm.shape, perm), 0, 0)?;
    Ok(y)
}

/// Layout and source offset of a slice: walks the output, reads the input's strides.
pub fn slice_layout(shape: &[u32], args: &SliceArgs) -> (Layout, u64) {
    let xs = contiguous_strides(shape);
    let mut out = shape.to_vec();
    out[args.axis as usize] = args.end - args.start;
    let off = args.start as u64 * xs[args.axis as usize];
    (Layout::new(&out, &xs, &contiguous_strides(&out)), off)
}

pub(crate) fn slice(
    dev: &CudaDevice,
    args: &SliceArgs,
    (x, xm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let (layout, off) = slice_layout(&xm.shape, args);
    copy(dev, CopyKind::Slice, xm, x, &y, &layout, off, 0)?;
    Ok(y)
}

/// Layouts and destination offsets of a concat: each input walks itself and writes with
/// the output's strides, shifted along `axis`.
pub fn concat_layouts(shapes: &[&[u32]], axis: usize, out: &[u32]) -> Vec<(Layout, u64)> {
    let os = contiguous_strides(out);
    let mut at = 0u64;
    shapes
        .iter()
        .map(|s| {
            let l = (Layout::new(s, &contiguous_strides(s), &os), at * os[axis]);
            at += s[axis] as u64;
            l
        })
        .collect()
}

pub(crate) fn concat(
    dev: &CudaDevice,
    axis: u32,
    inputs: &[(&CudaBuffer, &TensorMeta)],
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let shapes: Vec<&[u32]> = inputs.iter().map(|(_, m)| m.shape.as_slice()).collect();
    for ((x, xm), (layout, off)) in inputs.iter().zip(concat_layouts(&shapes, axis as usize, &out.shape)) {
        copy(dev, CopyKind::Concat, xm, x, &y, &layout, 0, off)?;
    }
    Ok(y)
}

/// A contiguous copy of `x` broadcast to `shape` (for matmul operands whose batch axes
/// strides cannot express).
pub(crate) fn broadcast_to(
    dev: &CudaDevice,
    x: &CudaBuffer,
    xm: &TensorMeta,
    shape: &[u32],
) -> Result<CudaBuffer, CudaError> {
    let n: u64 = shape.iter().map(|&d| d as u64).product();
    let y = dev.alloc(n as usize * xm.dtype.size_of())?;
    let layout = Layout::new(shape, &broadcast_strides(&xm.shape, shape), &contiguous_strides(shape));
    copy(dev, CopyKind::Broadcast, xm, x, &y, &layout, 0, 0)?;
    Ok(y)
}

/// `dst[offset .. offset + src.shape[0]] = src` along axis 0, in place: rows are
/// contiguous, so one device-to-device copy. The output is the empty buffer that orders
/// the write.
pub(crate) fn write_rows(
    dev: &CudaDevice,
    offset: u32,
    (dst, dm): (&CudaBuffer, &TensorMeta),
    src: &CudaBuffer,
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let row_bytes = dm.byte_len() / dm.shape.first().map_or(1, |&r| r.max(1) as usize);
    dev.copy_into(dst, offset as usize * row_bytes, src)?;
    dev.alloc(out.byte_len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_and_concat_offsets() {
        // x [2, 5, 3], slice axis 1 2..4 -> [2, 2, 3].
        let (l, off) = slice_layout(&[2, 5, 3], &SliceArgs { axis: 1, start: 2, end: 4 });
        assert_eq!(off, 6);
        let got: Vec<u64> = (0..12).map(|i| off + l.offsets(i).0).collect();
        assert_eq!(got, vec![6, 7, 8, 9, 10, 11, 21, 22, 23, 24, 25, 26]);
        // concat [2, 1] and [2, 2] along axis 1 -> [2, 3].
        let ls = concat_layouts(&[&[2, 1], &[2, 2]], 1, &[2, 3]);
        let first: Vec<u64> = (0..2).map(|i| ls[0].1 + ls[0].0.offsets(i).1).collect();
        let second: Vec<u64> = (0..4).map(|i| ls[1].1 + ls[1].0.offsets(i).1).collect();
        assert_eq!((first, second), (vec![0, 3], vec![1, 2, 4, 5]));
    }

    #[test]
    fn permute_reads_transposed() {
        let l = permute_layout(&[2, 3], &[1, 0]);
        let got: Vec<u64> = (0..6).map(|i| l.offsets(i).0).collect();
        assert_eq!(got, vec![0, 3, 1, 4, 2, 5]);
    }
}
