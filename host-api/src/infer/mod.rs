//! Shape and dtype inference: the host's check of every launch before it is queued.
//! The rules of the fused ops (linear, attention, norms) are in `fused`.

mod fused;
pub use fused::GQA_MAX_HEAD_DIM;
use fused::{attention, gqa_attention, kv_attention, linear, norm_params};

use crate::{
    ApiError, Conv2dArgs, DType, MatmulArgs, Op, Pool2dArgs, ReduceArgs, SliceArgs, TensorMeta, broadcast_shapes,
};

/// Checks `op` against the metadata of its inputs and returns the output's metadata.
///
/// This is the whole validation of a launch: a backend may assume that every op it
/// receives passed `infer` with the same inputs.
///
/// Block-quantized tensors ([`DType::is_quantized`]) are weights: only three places
/// take one, each with f32 on the other side: the weight of a transposed `linear`, the
/// table of an `embedding` and the input of a `cast` to f32.
pub fn infer(op: &Op, inputs: &[&TensorMeta]) -> Result<TensorMeta, ApiError> {
    quantized_inputs(op, inputs)?;
    match op {
        Op::Matmul(args) => {
            let [a, b] = arity::<2>(op, inputs)?;
            matmul(args, a, b)
        }
        Op::Binary(_) => {
            let [a, b] = arity::<2>(op, inputs)?;
            same_dtype(op, a, b)?;
            TensorMeta::new(a.dtype, broadcast_shapes(&a.shape, &b.shape)?)
        }
        Op::Unary(u) => {
            let [x] = arity::<1>(op, inputs)?;
            if !x.dtype.is_float() && !u.accepts_integers() {
                return Err(ApiError::dtype(format!("unary {u:?} needs a floating tensor, got {}", x.dtype)));
            }
            Ok(x.clone())
        }
        Op::Affine { .. } => {
            let [x] = arity::<1>(op, inputs)?;
            float(op, x)?;
            Ok(x.clone())
        }
        Op::Softmax { .. } => {
            let x = match inputs {
                [x] => x,
                [x, mask] => {
                    same_dtype(op, x, mask)?;
                    let b = broadcast_shapes(&x.shape, &mask.shape)?;
                    if b != x.shape {
                        return Err(ApiError::shape(format!(
                            "softmax mask {:?} does not broadcast to the input {:?}",
                            mask.shape, x.shape
                        )));
                    }
                    x
                }
                _ => return Err(wrong_arity(op, "1 or 2", inputs.len())),
            };
            float(op, x)?;
            rank_at_least(op, x, 1)?;
            Ok((*x).clone())
        }
        Op::LayerNorm { eps } => {
            let [x, gamma, beta] = arity::<3>(op, inputs)?;
            norm_params(op, *eps, x, gamma, beta)?;
            Ok(x.clone())
        }
        Op::Embedding => {
            let [table, ids] = arity::<2>(op, inputs)?;
            if !table.dtype.is_quantized() {
                float(op, table)?;
            }
            if table.rank() != 2 {
                return Err(ApiError::shape(format!(
                    "embedding table must be 2-D [vocab, dim], got {:?}",
                    table.shape
                )));
            }
            if !matches!(ids.dtype, DType::I32 | DType::I64) {
                return Err(ApiError::dtype(format!("embedding ids must be i32 or i64, got {}", ids.dtype)));
            }
            let mut shape = ids.shape.clone();
            shape.push(table.shape[1]);
            TensorMeta::new(dequantized(table.dtype), shape)
        }
        Op::Reduce(args) => {
            let [x] = arity::<1>(op, inputs)?;
            reduce(args, x)
        }
        Op::Reshape(shape) => {
            let [x] = arity::<1>(op, inputs)?;
            let out = TensorMeta::new(x.dtype, shape.clone())?;
            if out.numel() != x.numel() {
                return Err(ApiError::shape(format!(
                    "cannot reshape {:?} ({} elements) to {:?} ({} elements)",
                    x.shape,
                    x.numel(),
                    shape,
                    out.numel()
                )));
            }
            Ok(out)
        }
        Op::Permute(perm) => {
            let [x] = arity::<1>(op, inputs)?;
            let mut seen = vec![false; x.rank()];
            if perm.len() != x.rank() {
                return Err(ApiError::arg(format!(
                    "permutation {perm:?} has {} axes, the input has {}",
                    perm.len(),
                    x.rank()
                )));
            }
            for &p in perm {
                match seen.get_mut(p as usize) {
                    Some(s) if !*s => *s = true,
                    _ => return Err(ApiError::arg(format!("{perm:?} is not a permutation of 0..{}", x.rank()))),
                }
            }
            let shape = perm.iter().map(|&p| x.shape[p as usize]).collect();
            TensorMeta::new(x.dtype, shape)
        }
        Op::Slice(args) => {
            let [x] = arity::<1>(op, inputs)?;
            slice(args, x)
        }
        Op::Concat { axis } => {
            let Some(first) = inputs.first() else {
                return Err(wrong_arity(op, "at least 1", 0));
            };
            let axis_us = axis_of(*axis, first)?;
            let mut shape = first.shape.clone();
            shape[axis_us] = 0;
            for t in inputs {
                same_dtype(op, first, t)?;
                let same_rest = t.rank() == first.rank()
                    && t.shape.iter().zip(&first.shape).enumerate().all(|(i, (a, b))| i == axis_us || a == b);
                if !same_rest {
                    return Err(ApiError::shape(format!(
                        "concat along axis {axis}: {:?} does not match {:?} off that axis",
                        t.shape, first.shape
                    )));
                }
                shape[axis_us] = shape[axis_us]
                    .checked_add(t.shape[axis_us])
                    .ok_or_else(|| ApiError::shape("concat result too large"))?;
            }
            TensorMeta::new(first.dtype, shape)
        }
        Op::Cast(to) => {
            let [x] = arity::<1>(op, inputs)?;
            TensorMeta::new(*to, x.shape.clone())
        }
        Op::Argmax => {
            let [x] = arity::<1>(op, inputs)?;
            float(op, x)?;
            if x.shape.last().is_none_or(|&d| d == 0) {
                return Err(ApiError::shape(format!("argmax needs a non-empty last axis, got {:?}", x.shape)));
            }
            TensorMeta::new(DType::I32, x.shape[..x.rank() - 1].to_vec())
        }
        Op::Sample(args) => {
            let [x] = arity::<1>(op, inputs)?;
            if x.dtype != DType::F32 {
                return Err(ApiError::dtype(format!("sample needs f32 logits, got {}", x.dtype)));
            }
            if x.shape.last().is_none_or(|&d| d == 0) {
                return Err(ApiError::shape(format!("sample needs a non-empty last axis, got {:?}", x.shape)));
            }
            if !(args.temperature.is_finite() && args.temperature > 0.0) {
                return Err(ApiError::arg(format!(
                    "sample temperature must be finite and > 0, got {}",
                    args.temperature
                )));
            }
            if !(args.top_p > 0.0 && args.top_p <= 1.0) {
                return Err(ApiError::arg(format!("sample top-p must be in (0, 1], got {}", args.top_p)));
            }
            TensorMeta::new(DType::I32, x.shape[..x.rank() - 1].to_vec())
        }
        Op::Rope { base, .. } => {
            let [x] = arity::<1>(op, inputs)?;
            float(op, x)?;
            rank_at_least(op, x, 3)?;
            let d = x.shape[x.rank() - 1];
            if !d.is_multiple_of(2) {
                return Err(ApiError::shape(format!("rope needs an even head size (last axis), got {:?}", x.shape)));
            }
            if !(base.is_finite() && *base > 0.0) {
                return Err(ApiError::arg(format!("rope base must be finite and > 0, got {base}")));
            }
            Ok(x.clone())
        }
        Op::Conv2d(args) => conv2d(op, args, inputs),
        Op::Pool2d(args) => {
            let [x] = arity::<1>(op, inputs)?;
            pool2d(op, args, x)
        }
        Op::Linear { transpose_w, .. } => linear(op, *transpose_w, inputs),
        Op::AddLayerNorm { eps } => {
            let [x, residual, gamma, beta] = arity::<4>(op, inputs)?;
            if residual.shape != x.shape {
                return Err(ApiError::shape(format!(
                    "add-layer-norm residual {:?} must have the input's shape {:?}",
                    residual.shape, x.shape
                )));
            }
            same_dtype(op, x, residual)?;
            norm_params(op, *eps, x, gamma, beta)?;
            Ok(x.clone())
        }
        Op::Attention { heads, scale } => attention(op, *heads, *scale, inputs),
        Op::GqaAttention { kv_len, scale } => gqa_attention(op, *kv_len, *scale, inputs),
        Op::WriteRows { offset } => {
            let [dst, src] = arity::<2>(op, inputs)?;
            write_rows(*offset, dst, src)
        }
        Op::KvAttention(args) => kv_attention(op, args, inputs),
        Op::RmsNorm { eps } => {
            let (x, w) = match inputs {
                [x, w] => (*x, *w),
                [x, residual, w] => {
                    same_dtype(op, x, residual)?;
                    if residual.shape != x.shape {
                        return Err(ApiError::shape(format!(
                            "rms-norm residual {:?} must have the input's shape {:?}",
                            residual.shape, x.shape
                        )));
                    }
                    (*x, *w)
                }
                _ => return Err(wrong_arity(op, "2 or 3", inputs.len())),
            };
            // The checks of layer norm, with w as gamma and no beta.
            norm_params(op, *eps, x, w, w)?;
            Ok(x.clone())
        }
    }
}

fn matmul(args: &MatmulArgs, a: &TensorMeta, b: &TensorMeta) -> Result<TensorMeta, ApiError> {
    let op = Op::Matmul(*args);
    same_dtype(&op, a, b)?;
    float(&op, a)?;
    if a.rank() < 2 || b.rank() < 2 {
        return Err(ApiError::shape(format!("matmul needs inputs of rank ≥ 2, got {:?} and {:?}", a.shape, b.shape)));
    }
    let (ar, br) = (a.rank(), b.rank());
    let (m, ka) =
        if args.transpose_a { (a.shape[ar - 1], a.shape[ar - 2]) } else { (a.shape[ar - 2], a.shape[ar - 1]) };
    let (kb, n) =
        if args.transpose_b { (b.shape[br - 1], b.shape[br - 2]) } else { (b.shape[br - 2], b.shape[br - 1]) };
    if ka != kb {
        return Err(ApiError::shape(format!(
            "matmul inner dimensions differ: {:?}{} × {:?}{} gives k = {ka} vs {kb}",
            a.shape,
            if args.transpose_a { "ᵀ" } else { "" },
            b.shape,
            if args.transpose_b { "ᵀ" } else { "" },
        )));
    }
    let mut shape = broadcast_shapes(&a.shape[..ar - 2], &b.shape[..br - 2])?;
    shape.extend([m, n]);
    TensorMeta::new(a.dtype, shape)
}

fn reduce(args: &ReduceArgs, x: &TensorMeta) -> Result<TensorMeta, ApiError> {
    let axis = axis_of(args.axis, x)?;
    if !x.dtype.is_float() && matches!(args.op, crate::ReduceOp::Mean) {
        return Err(ApiError::dtype(format!("mean needs a floating tensor, got {}", x.dtype)));
    }
    if x.shape[axis] == 0 && matches!(args.op, crate::ReduceOp::Max | crate::ReduceOp::Min) {
        return Err(ApiError::shape(format!("{:?} over axis {axis} of size 0 has no identity", args.op)));
    }
    let mut shape = x.shape.clone();
    if args.keep_dim {
        shape[axis] = 1;
    } else {
        shape.remove(axis);
    }
    TensorMeta::new(x.dtype, shape)
}

fn slice(args: &SliceArgs, x: &TensorMeta) -> Result<TensorMeta, ApiError> {
    let axis = axis_of(args.axis, x)?;
    if args.start > args.end || args.end > x.shape[axis] {
        return Err(ApiError::arg(format!(
            "slice {}..{} is out of bounds for axis {axis} of size {}",
            args.start, args.end, x.shape[axis]
        )));
    }
    let mut shape = x.shape.clone();
    shape[axis] = args.end - args.start;
    TensorMeta::new(x.dtype, shape)
}

fn conv2d(op: &Op, args: &Conv2dArgs, inputs: &[&TensorMeta]) -> Result<TensorMeta, ApiError> {
    let (x, w, bias) = match inputs {
        [x, w] => (*x, *w, None),
        [x, w, b] => (*x, *w, Some(*b)),
        _ => return Err(wrong_arity(op, "2 or 3", inputs.len())),
    };
    float(op, x)?;
    same_dtype(op, x, w)?;
    if x.rank() != 4 || w.rank() != 4 {
        return Err(ApiError::shape(format!(
            "conv2d needs x [n, c, h, w] and weight [o, c/groups, kh, kw], got {:?} and {:?}",
            x.shape, w.shape
        )));
    }
    let g = args.groups;
    if g == 0 || args.stride.0 == 0 || args.stride.1 == 0 || args.dilation.0 == 0 || args.dilation.1 == 0 {
        return Err(ApiError::arg("conv2d groups, strides and dilations must be ≥ 1"));
    }
    let (n, c, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (o, cg, kh, kw) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
    if c % g != 0 || o % g != 0 || cg != c / g {
        return Err(ApiError::shape(format!(
            "conv2d with {g} groups: input channels {c} and weight {:?} do not fit",
            w.shape
        )));
    }
    if let Some(b) = bias {
        same_dtype(op, x, b)?;
        if b.shape != [o] {
            return Err(ApiError::shape(format!("conv2d bias must have shape [{o}], got {:?}", b.shape)));
        }
    }
    let oh = window_out(h, kh, args.stride.0, args.padding.0, args.dilation.0)?;
    let ow = window_out(wd, kw, args.stride.1, args.padding.1, args.dilation.1)?;
    TensorMeta::new(x.dtype, vec![n, o, oh, ow])
}

fn pool2d(op: &Op, args: &Pool2dArgs, x: &TensorMeta) -> Result<TensorMeta, ApiError> {
    float(op, x)?;
    if x.rank() != 4 {
        return Err(ApiError::shape(format!("pool2d needs x [n, c, h, w], got {:?}", x.shape)));
    }
    let (kh, kw) = args.kernel;
    if kh == 0 || kw == 0 || args.stride.0 == 0 || args.stride.1 == 0 {
        return Err(ApiError::arg("pool2d window and strides must be ≥ 1"));
    }
    if args.padding.0 >= kh || args.padding.1 >= kw {
        return Err(ApiError::arg("pool2d padding must be smaller than the window"));
    }
    let oh = window_out(x.shape[2], kh, args.stride.0, args.padding.0, 1)?;
    let ow = window_out(x.shape[3], kw, args.stride.1, args.padding.1, 1)?;
    TensorMeta::new(x.dtype, vec![x.shape[0], x.shape[1], oh, ow])
}

/// Output size of a sliding window; errors when the window does not fit.
fn window_out(size: u32, kernel: u32, stride: u32, pad: u32, dilation: u32) -> Result<u32, ApiError> {
    let padded = size as u64 + 2 * pad as u64;
    let span = dilation as u64 * (kernel as u64 - 1) + 1;
    if kernel == 0 || span > padded {
        return Err(ApiError::shape(format!(
            "window of {kernel} (dilation {dilation}) does not fit an axis of {size} with padding {pad}"
        )));
    }
    Ok(((padded - span) / stride as u64 + 1) as u32)
}

fn arity<'a, const N: usize>(op: &Op, inputs: &[&'a TensorMeta]) -> Result<[&'a TensorMeta; N], ApiError> {
    inputs.try_into().map_err(|_| wrong_arity(op, &N.to_string(), inputs.len()))
}

/// Where a block-quantized input may appear: the weight of a `linear` with
/// `transpose-w` (`[n, k]`, blocks along k) beside f32 activations, the table of an
/// `embedding` (rows come out dequantized, f32), and the input of a `cast` to f32
/// (dequantization). Nothing is cast *to* a block format on the device.
fn quantized_inputs(op: &Op, inputs: &[&TensorMeta]) -> Result<(), ApiError> {
    if let Op::Cast(to) = op
        && to.is_quantized()
    {
        return Err(ApiError::dtype(format!(
            "cast cannot produce the block format {to}; upload quantized data instead"
        )));
    }
    for (i, t) in inputs.iter().enumerate().filter(|(_, t)| t.dtype.is_quantized()) {
        let allowed = match op {
            Op::Linear { transpose_w: true, .. } => i == 1 && inputs[0].dtype == DType::F32,
            Op::Embedding => i == 0,
            Op::Cast(DType::F32) => true,
            _ => false,
        };
        if !allowed {
            return Err(ApiError::dtype(format!(
                "{} cannot take the block-quantized {} as input {i}: only a transposed linear weight \
                 (with f32 activations), an embedding table and a cast to f32 can",
                op.name(),
                t.dtype
            )));
        }
    }
    Ok(())
}

/// `dst[offset .. offset + src.shape[0]] = src`: one dtype, the same trailing axes, the
/// rows inside `dst`. The output is the empty u8 `[0]` that orders the write.
fn write_rows(offset: u32, dst: &TensorMeta, src: &TensorMeta) -> Result<TensorMeta, ApiError> {
    if dst.dtype != src.dtype {
        return Err(ApiError::dtype(format!("write of a {} tensor into a {} tensor", src.dtype, dst.dtype)));
    }
    if dst.rank() == 0 || src.rank() != dst.rank() || src.shape[1..] != dst.shape[1..] {
        return Err(ApiError::shape(format!(
            "write of {:?} into {:?}: both need rank >= 1 and the same axes after the first",
            src.shape, dst.shape
        )));
    }
    let end = u64::from(offset) + u64::from(src.shape[0]);
    if end > u64::from(dst.shape[0]) {
        return Err(ApiError::arg(format!(
            "write of {} rows at offset {offset} ends past the {} rows of the destination",
            src.shape[0], dst.shape[0]
        )));
    }
    TensorMeta::new(DType::U8, vec![0])
}

/// The dtype an op reading `dtype` computes in: f32 for a block format.
fn dequantized(dtype: DType) -> DType {
    if dtype.is_quantized() { DType::F32 } else { dtype }
}

fn wrong_arity(op: &Op, expected: &str, got: usize) -> ApiError {
    ApiError::arg(format!("{} takes {expected} input(s), got {got}", op.name()))
}

fn same_dtype(op: &Op, a: &TensorMeta, b: &TensorMeta) -> Result<(), ApiError> {
    if a.dtype != b.dtype {
        return Err(ApiError::dtype(format!(
            "{} inputs must share a dtype, got {} and {}",
            op.name(),
            a.dtype,
            b.dtype
        )));
    }
    Ok(())
}

fn float(op: &Op, x: &TensorMeta) -> Result<(), ApiError> {
    if !x.dtype.is_float() {
        return Err(ApiError::dtype(format!("{} needs a floating tensor, got {}", op.name(), x.dtype)));
    }
    Ok(())
}

fn rank_at_least(op: &Op, x: &TensorMeta, rank: usize) -> Result<(), ApiError> {
    if x.rank() < rank {
        return Err(ApiError::shape(format!("{} needs rank ≥ {rank}, got {:?}", op.name(), x.shape)));
    }
    Ok(())
}

fn axis_of(axis: u32, x: &TensorMeta) -> Result<usize, ApiError> {
    let a = axis as usize;
    if a >= x.rank() {
        return Err(ApiError::arg(format!("axis {axis} is out of range for shape {:?}", x.shape)));
    }
    Ok(a)
}

#[cfg(test)]
mod tests;
