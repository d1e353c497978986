//! Shape and dtype inference: the host's check of every launch before it is queued.

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

/// The checks layer norm and add-layer-norm share: a floating `x` of rank ≥ 1, `gamma`
/// and `beta` of shape `[last]` and x's dtype, a finite `eps ≥ 0`.
fn norm_params(op: &Op, eps: f32, x: &TensorMeta, gamma: &TensorMeta, beta: &TensorMeta) -> Result<(), ApiError> {
    float(op, x)?;
    rank_at_least(op, x, 1)?;
    same_dtype(op, x, gamma)?;
    same_dtype(op, x, beta)?;
    let last = *x.shape.last().unwrap_or(&0);
    for (name, p) in [("gamma", gamma), ("beta", beta)] {
        if p.shape != [last] {
            return Err(ApiError::shape(format!("{} {name} must have shape [{last}], got {:?}", op.name(), p.shape)));
        }
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(ApiError::arg(format!("{} eps must be finite and ≥ 0, got {eps}", op.name())));
    }
    Ok(())
}

/// `x [..., k]`, `w [k, n]` (`[n, k]` when transposed), optional `b [n]`: `[..., n]`.
fn linear(op: &Op, transpose_w: bool, inputs: &[&TensorMeta]) -> Result<TensorMeta, ApiError> {
    let (x, w, bias) = match inputs {
        [x, w] => (*x, *w, None),
        [x, w, b] => (*x, *w, Some(*b)),
        _ => return Err(wrong_arity(op, "2 or 3", inputs.len())),
    };
    if !w.dtype.is_quantized() {
        same_dtype(op, x, w)?;
    }
    float(op, x)?;
    rank_at_least(op, x, 1)?;
    if w.rank() != 2 {
        let layout = if transpose_w { "[n, k]" } else { "[k, n]" };
        return Err(ApiError::shape(format!("linear weight must be 2-D {layout}, got {:?}", w.shape)));
    }
    let k = x.shape[x.rank() - 1];
    let (wk, n) = if transpose_w { (w.shape[1], w.shape[0]) } else { (w.shape[0], w.shape[1]) };
    if wk != k {
        return Err(ApiError::shape(format!(
            "linear input {:?} has {k} features but the weight {:?}{} takes {wk}",
            x.shape,
            w.shape,
            if transpose_w { "ᵀ" } else { "" }
        )));
    }
    if let Some(b) = bias {
        same_dtype(op, x, b)?;
        if b.shape != [n] {
            return Err(ApiError::shape(format!("linear bias must have shape [{n}], got {:?}", b.shape)));
        }
    }
    let mut shape = x.shape.clone();
    *shape.last_mut().expect("rank ≥ 1") = n;
    TensorMeta::new(x.dtype, shape)
}

/// `q [b, sq, e]`, `k` and `v [b, sk, e]`, `heads` dividing `e`, an optional additive
/// mask broadcasting to the scores `[b, heads, sq, sk]`: `[b, sq, e]`.
fn attention(op: &Op, heads: u32, scale: f32, inputs: &[&TensorMeta]) -> Result<TensorMeta, ApiError> {
    let (q, k, v, mask) = match inputs {
        [q, k, v] => (*q, *k, *v, None),
        [q, k, v, m] => (*q, *k, *v, Some(*m)),
        _ => return Err(wrong_arity(op, "3 or 4", inputs.len())),
    };
    for t in [k, v].into_iter().chain(mask) {
        same_dtype(op, q, t)?;
    }
    float(op, q)?;
    if q.rank() != 3 || k.rank() != 3 || v.rank() != 3 {
        return Err(ApiError::shape(format!(
            "attention needs q [batch, sq, heads*d] and k, v [batch, sk, heads*d], got {:?}, {:?} and {:?}",
            q.shape, k.shape, v.shape
        )));
    }
    let (b, sq, e) = (q.shape[0], q.shape[1], q.shape[2]);
    if k.shape != v.shape || k.shape[0] != b || k.shape[2] != e {
        return Err(ApiError::shape(format!(
            "attention k and v must both be [{b}, sk, {e}] for q {:?}, got {:?} and {:?}",
            q.shape, k.shape, v.shape
        )));
    }
    if heads == 0 || e % heads != 0 {
        return Err(ApiError::arg(format!("attention heads must be ≥ 1 and divide the last axis {e}, got {heads}")));
    }
    if !scale.is_finite() {
        return Err(ApiError::arg(format!("attention scale must be finite, got {scale}")));
    }
    let scores = [b, heads, sq, k.shape[1]];
    let numel = scores.iter().map(|&d| d as u64).product::<u64>();
    if numel > crate::MAX_ELEMENTS {
        return Err(ApiError::new(
            crate::ErrorCode::TooLarge,
            format!("attention scores {scores:?} would have more than {} elements", crate::MAX_ELEMENTS),
        ));
    }
    if let Some(m) = mask
        && (m.rank() > 4 || broadcast_shapes(&scores, &m.shape).ok().as_deref() != Some(&scores[..]))
    {
        return Err(ApiError::shape(format!(
            "attention mask {:?} does not broadcast to the scores [batch, heads, sq, sk] = {scores:?}",
            m.shape
        )));
    }
    TensorMeta::new(q.dtype, q.shape.clone())
}

/// Head sizes of a GQA attention (see the WIT `gqa-attention-args`) can take, at most.
pub const GQA_MAX_HEAD_DIM: u32 = 256;

/// `q [s, heads, d]` over the first `kv_len` positions of `k`, `v [ctx, kv_heads, d]`.
fn gqa_attention(op: &Op, kv_len: u32, scale: f32, inputs: &[&TensorMeta]) -> Result<TensorMeta, ApiError> {
    let [q, k, v] = arity::<3>(op, inputs)?;
    same_dtype(op, q, k)?;
    same_dtype(op, q, v)?;
    float(op, q)?;
    if q.rank() != 3 || k.rank() != 3 || k.shape != v.shape {
        return Err(ApiError::shape(format!(
            "gqa-attention needs q [s, heads, d] and k, v [ctx, kv-heads, d] of one shape, got {:?}, {:?} and {:?}",
            q.shape, k.shape, v.shape
        )));
    }
    let ([s, heads, d], [ctx, kv_heads, kd]) =
        ([q.shape[0], q.shape[1], q.shape[2]], [k.shape[0], k.shape[1], k.shape[2]]);
    if kd != d || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(ApiError::shape(format!(
            "gqa-attention: q {:?} and the cache {:?} need one head size and kv-heads dividing heads",
            q.shape, k.shape
        )));
    }
    if d > GQA_MAX_HEAD_DIM {
        return Err(ApiError::shape(format!("gqa-attention head size {d} exceeds {GQA_MAX_HEAD_DIM}")));
    }
    if !(s <= kv_len && kv_len <= ctx) {
        return Err(ApiError::arg(format!(
            "gqa-attention needs s <= kv-len <= ctx, got s = {s}, kv-len = {kv_len}, ctx = {ctx}"
        )));
    }
    if !scale.is_finite() {
        return Err(ApiError::arg(format!("gqa-attention scale must be finite, got {scale}")));
    }
    Ok(q.clone())
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
mod tests {
    use super::*;
    use crate::{BinaryOp, ErrorCode, ReduceOp};

    fn t(dtype: DType, shape: &[u32]) -> TensorMeta {
        TensorMeta::new(dtype, shape.to_vec()).unwrap()
    }

    #[test]
    fn matmul_shapes() {
        let a = t(DType::F32, &[2, 1, 3, 4]);
        let b = t(DType::F32, &[5, 4, 6]);
        let out = infer(&Op::Matmul(MatmulArgs::default()), &[&a, &b]).unwrap();
        assert_eq!(out.shape, vec![2, 5, 3, 6]);
        let bt = t(DType::F32, &[6, 4]);
        let args = MatmulArgs { transpose_a: false, transpose_b: true };
        assert_eq!(infer(&Op::Matmul(args), &[&a, &bt]).unwrap().shape, vec![2, 1, 3, 6]);
        let err = infer(&Op::Matmul(MatmulArgs::default()), &[&a, &bt]).unwrap_err();
        assert_eq!(err.code, ErrorCode::ShapeMismatch);
        let ai = t(DType::I32, &[2, 2]);
        assert_eq!(infer(&Op::Matmul(MatmulArgs::default()), &[&ai, &ai]).unwrap_err().code, ErrorCode::DtypeMismatch);
    }

    #[test]
    fn binary_needs_same_dtype_and_broadcast() {
        let a = t(DType::F32, &[2, 3]);
        let b = t(DType::F16, &[3]);
        assert_eq!(infer(&Op::Binary(BinaryOp::Add), &[&a, &b]).unwrap_err().code, ErrorCode::DtypeMismatch);
        assert_eq!(infer(&Op::Binary(BinaryOp::Add), &[&a]).unwrap_err().code, ErrorCode::InvalidArgument);
    }

    #[test]
    fn conv_and_pool_shapes() {
        let x = t(DType::F32, &[1, 4, 8, 8]);
        let w = t(DType::F32, &[6, 2, 3, 3]);
        let args = Conv2dArgs { stride: (2, 1), padding: (1, 0), dilation: (1, 2), groups: 2 };
        assert_eq!(infer(&Op::Conv2d(args), &[&x, &w]).unwrap().shape, vec![1, 6, 4, 4]);
        let p = Pool2dArgs { kind: crate::PoolKind::Max, kernel: (2, 2), stride: (2, 2), padding: (0, 0) };
        assert_eq!(infer(&Op::Pool2d(p), &[&x]).unwrap().shape, vec![1, 4, 4, 4]);
        let big = Pool2dArgs { kernel: (9, 9), ..p };
        assert_eq!(infer(&Op::Pool2d(big), &[&x]).unwrap_err().code, ErrorCode::ShapeMismatch);
    }

    #[test]
    fn reduce_slice_concat_permute() {
        let x = t(DType::F32, &[2, 3, 4]);
        let r = ReduceArgs { op: ReduceOp::Sum, axis: 1, keep_dim: false };
        assert_eq!(infer(&Op::Reduce(r), &[&x]).unwrap().shape, vec![2, 4]);
        let bad = ReduceArgs { axis: 3, ..r };
        assert_eq!(infer(&Op::Reduce(bad), &[&x]).unwrap_err().code, ErrorCode::InvalidArgument);
        let s = SliceArgs { axis: 2, start: 1, end: 3 };
        assert_eq!(infer(&Op::Slice(s), &[&x]).unwrap().shape, vec![2, 3, 2]);
        let y = t(DType::F32, &[2, 5, 4]);
        assert_eq!(infer(&Op::Concat { axis: 1 }, &[&x, &y]).unwrap().shape, vec![2, 8, 4]);
        assert!(infer(&Op::Concat { axis: 0 }, &[&x, &y]).is_err());
        assert_eq!(infer(&Op::Permute(vec![2, 0, 1]), &[&x]).unwrap().shape, vec![4, 2, 3]);
        assert!(infer(&Op::Permute(vec![0, 0, 1]), &[&x]).is_err());
        assert!(infer(&Op::Reshape(vec![4, 7]), &[&x]).is_err());
    }

    #[test]
    fn embedding_and_norms() {
        let table = t(DType::F32, &[10, 4]);
        let ids = t(DType::I64, &[2, 3]);
        assert_eq!(infer(&Op::Embedding, &[&table, &ids]).unwrap().shape, vec![2, 3, 4]);
        assert!(infer(&Op::Embedding, &[&table, &table]).is_err());
        let x = t(DType::F32, &[2, 4]);
        let g = t(DType::F32, &[4]);
        assert!(infer(&Op::LayerNorm { eps: 1e-12 }, &[&x, &g, &g]).is_ok());
        let g3 = t(DType::F32, &[3]);
        assert!(infer(&Op::LayerNorm { eps: 1e-12 }, &[&x, &g3, &g]).is_err());
        let mask = t(DType::F32, &[1, 4]);
        assert!(infer(&Op::Softmax { scale: 1.0 }, &[&x, &mask]).is_ok());
        let bigmask = t(DType::F32, &[3, 2, 4]);
        assert!(infer(&Op::Softmax { scale: 1.0 }, &[&x, &bigmask]).is_err());
    }

    #[test]
    fn block_formats_go_only_where_they_are_dequantized() {
        let lin = Op::Linear { transpose_w: true, activation: None };
        let (x, w, b) = (t(DType::F32, &[3, 64]), t(DType::Q4_1, &[5, 64]), t(DType::F32, &[5]));
        assert_eq!(infer(&lin, &[&x, &w, &b]).unwrap(), t(DType::F32, &[3, 5]));
        let w8 = t(DType::Q8_0, &[5, 64]);
        assert_eq!(infer(&lin, &[&x, &w8]).unwrap(), t(DType::F32, &[3, 5]));
        let code = |op: &Op, ins: &[&TensorMeta]| infer(op, ins).unwrap_err().code;
        assert_eq!(code(&lin, &[&t(DType::F16, &[3, 64]), &w]), ErrorCode::DtypeMismatch);
        assert_eq!(code(&Op::Linear { transpose_w: false, activation: None }, &[&x, &w]), ErrorCode::DtypeMismatch);
        assert_eq!(code(&lin, &[&t(DType::F32, &[3, 32]), &w]), ErrorCode::ShapeMismatch);
        let ids = t(DType::I32, &[7]);
        assert_eq!(infer(&Op::Embedding, &[&w8, &ids]).unwrap(), t(DType::F32, &[7, 64]));
        assert_eq!(infer(&Op::Cast(DType::F32), &[&w]).unwrap(), t(DType::F32, &[5, 64]));
        assert_eq!(code(&Op::Cast(DType::F16), &[&w]), ErrorCode::DtypeMismatch);
        assert_eq!(code(&Op::Cast(DType::Q8_0), &[&x]), ErrorCode::DtypeMismatch);
        assert_eq!(code(&Op::Reshape(vec![320]), &[&w]), ErrorCode::DtypeMismatch);
        assert_eq!(code(&Op::Binary(crate::BinaryOp::Add), &[&w, &w]), ErrorCode::DtypeMismatch);
        assert_eq!(
            code(&Op::Matmul(MatmulArgs { transpose_a: false, transpose_b: true }), &[&x, &w]),
            ErrorCode::DtypeMismatch
        );
    }

    #[test]
    fn gqa_attention_shapes_and_errors() {
        let (q, kv) = (t(DType::F32, &[2, 9, 64]), t(DType::F32, &[16, 3, 64]));
        let op = |kv_len| Op::GqaAttention { kv_len, scale: 0.125 };
        assert_eq!(infer(&op(5), &[&q, &kv, &kv]).unwrap(), q);
        assert_eq!(infer(&op(2), &[&q, &kv, &kv]).unwrap(), q);
        let code = |o: &Op, ins: &[&TensorMeta]| infer(o, ins).unwrap_err().code;
        assert_eq!(code(&op(1), &[&q, &kv, &kv]), ErrorCode::InvalidArgument);
        assert_eq!(code(&op(17), &[&q, &kv, &kv]), ErrorCode::InvalidArgument);
        assert_eq!(
            code(&op(5), &[&q, &t(DType::F32, &[16, 4, 64]), &t(DType::F32, &[16, 4, 64])]),
            ErrorCode::ShapeMismatch
        );
        assert_eq!(code(&op(5), &[&q, &kv, &t(DType::F32, &[15, 3, 64])]), ErrorCode::ShapeMismatch);
        assert_eq!(code(&op(5), &[&q, &kv, &t(DType::F16, &[16, 3, 64])]), ErrorCode::DtypeMismatch);
        let big = t(DType::F32, &[1, 1, 512]);
        assert_eq!(code(&op(1), &[&big, &big, &big]), ErrorCode::ShapeMismatch);
    }

    #[test]
    fn argmax_shapes_and_errors() {
        assert_eq!(infer(&Op::Argmax, &[&t(DType::F16, &[2, 3, 5])]).unwrap(), t(DType::I32, &[2, 3]));
        assert_eq!(infer(&Op::Argmax, &[&t(DType::F32, &[49152])]).unwrap(), t(DType::I32, &[]));
        assert_eq!(infer(&Op::Argmax, &[&t(DType::F32, &[2, 0])]).unwrap_err().code, ErrorCode::ShapeMismatch);
        assert_eq!(infer(&Op::Argmax, &[&t(DType::F32, &[])]).unwrap_err().code, ErrorCode::ShapeMismatch);
        assert_eq!(infer(&Op::Argmax, &[&t(DType::I32, &[4])]).unwrap_err().code, ErrorCode::DtypeMismatch);
    }

    #[test]
    fn sample_takes_f32_logits_and_checks_its_parameters() {
        let args = |temperature, top_p| Op::Sample(crate::SampleArgs { temperature, top_k: 0, top_p, seed: 1 });
        let x = t(DType::F32, &[2, 49152]);
        assert_eq!(infer(&args(0.7, 0.9), &[&x]).unwrap(), t(DType::I32, &[2]));
        let code = |op: &Op, x: &TensorMeta| infer(op, &[x]).unwrap_err().code;
        assert_eq!(code(&args(0.0, 0.9), &x), ErrorCode::InvalidArgument);
        assert_eq!(code(&args(f32::NAN, 0.9), &x), ErrorCode::InvalidArgument);
        assert_eq!(code(&args(1.0, 0.0), &x), ErrorCode::InvalidArgument);
        assert_eq!(code(&args(1.0, 1.5), &x), ErrorCode::InvalidArgument);
        assert_eq!(code(&args(1.0, 1.0), &t(DType::F16, &[4])), ErrorCode::DtypeMismatch);
        assert_eq!(code(&args(1.0, 1.0), &t(DType::F32, &[2, 0])), ErrorCode::ShapeMismatch);
    }

    #[test]
    fn write_rows_checks_dtype_axes_and_bounds() {
        let op = |offset| Op::WriteRows { offset };
        let cache = t(DType::F32, &[8, 3, 64]);
        assert_eq!(infer(&op(5), &[&cache, &t(DType::F32, &[3, 3, 64])]).unwrap(), t(DType::U8, &[0]));
        assert_eq!(infer(&op(0), &[&cache, &t(DType::F32, &[0, 3, 64])]).unwrap(), t(DType::U8, &[0]));
        let code = |o, dst: &TensorMeta, src: &TensorMeta| infer(&op(o), &[dst, src]).unwrap_err().code;
        assert_eq!(code(6, &cache, &t(DType::F32, &[3, 3, 64])), ErrorCode::InvalidArgument);
        assert_eq!(code(u32::MAX, &cache, &t(DType::F32, &[1, 3, 64])), ErrorCode::InvalidArgument);
        assert_eq!(code(0, &cache, &t(DType::F16, &[1, 3, 64])), ErrorCode::DtypeMismatch);
        assert_eq!(code(0, &cache, &t(DType::F32, &[1, 64, 3])), ErrorCode::ShapeMismatch);
        assert_eq!(code(0, &cache, &t(DType::F32, &[3, 64])), ErrorCode::ShapeMismatch);
        assert_eq!(code(0, &t(DType::F32, &[]), &t(DType::F32, &[])), ErrorCode::ShapeMismatch);
        let w = t(DType::Q4_1, &[4, 32]);
        assert_eq!(code(0, &w, &t(DType::Q4_1, &[1, 32])), ErrorCode::DtypeMismatch, "no block formats");
    }

    #[test]
    fn rope_shapes_and_errors() {
        let op = Op::Rope { base: 1e4, offset: 7 };
        let x = t(DType::F32, &[5, 9, 64]);
        assert_eq!(infer(&op, &[&x]).unwrap(), x);
        let code = |op: &Op, x: &TensorMeta| infer(op, &[x]).unwrap_err().code;
        assert_eq!(code(&op, &t(DType::F32, &[5, 64])), ErrorCode::ShapeMismatch);
        assert_eq!(code(&op, &t(DType::F32, &[5, 9, 63])), ErrorCode::ShapeMismatch);
        assert_eq!(code(&op, &t(DType::I32, &[5, 9, 64])), ErrorCode::DtypeMismatch);
        assert_eq!(code(&Op::Rope { base: 0.0, offset: 0 }, &x), ErrorCode::InvalidArgument);
    }

    #[test]
    fn rms_norm_shapes_and_errors() {
        let (x, w) = (t(DType::F32, &[2, 3, 8]), t(DType::F32, &[8]));
        let op = Op::RmsNorm { eps: 1e-5 };
        assert_eq!(infer(&op, &[&x, &w]).unwrap(), x);
        assert_eq!(infer(&op, &[&x, &x, &w]).unwrap(), x);
        let code = |ins: &[&TensorMeta]| infer(&op, ins).unwrap_err().code;
        assert_eq!(code(&[&x, &t(DType::F32, &[7])]), ErrorCode::ShapeMismatch);
        assert_eq!(code(&[&x, &t(DType::F32, &[2, 1, 8]), &w]), ErrorCode::ShapeMismatch);
        assert_eq!(code(&[&x, &t(DType::F16, &[8])]), ErrorCode::DtypeMismatch);
        assert_eq!(code(&[&t(DType::I32, &[8]), &t(DType::I32, &[8])]), ErrorCode::DtypeMismatch);
        assert_eq!(code(&[&x]), ErrorCode::InvalidArgument);
        assert_eq!(infer(&Op::RmsNorm { eps: f32::NAN }, &[&x, &w]).unwrap_err().code, ErrorCode::InvalidArgument);
    }

    #[test]
    fn linear_shapes_and_errors() {
        let lin = |transpose_w| Op::Linear { transpose_w, activation: Some(crate::UnaryOp::Gelu) };
        let x = t(DType::F32, &[2, 3, 4]);
        let w = t(DType::F32, &[4, 5]);
        let wt = t(DType::F32, &[5, 4]);
        let b = t(DType::F32, &[5]);
        assert_eq!(infer(&lin(false), &[&x, &w, &b]).unwrap().shape, vec![2, 3, 5]);
        assert_eq!(infer(&lin(true), &[&x, &wt]).unwrap().shape, vec![2, 3, 5]);
        // Rank 1 is one row.
        assert_eq!(infer(&lin(true), &[&t(DType::BF16, &[4]), &t(DType::BF16, &[5, 4])]).unwrap().shape, vec![5]);
        let code = |inputs: &[&TensorMeta], tw| infer(&lin(tw), inputs).unwrap_err().code;
        assert_eq!(code(&[&x, &w, &b], true), ErrorCode::ShapeMismatch, "[k, n] weight read as [n, k]");
        assert_eq!(code(&[&x, &wt], false), ErrorCode::ShapeMismatch);
        assert_eq!(code(&[&x, &w, &t(DType::F32, &[4])], false), ErrorCode::ShapeMismatch, "bias of k");
        assert_eq!(code(&[&x, &t(DType::F32, &[1, 4, 5])], false), ErrorCode::ShapeMismatch, "3-D weight");
        assert_eq!(code(&[&t(DType::F32, &[]), &w], false), ErrorCode::ShapeMismatch, "scalar input");
        assert_eq!(code(&[&x, &t(DType::F16, &[4, 5])], false), ErrorCode::DtypeMismatch);
        assert_eq!(code(&[&x, &w, &t(DType::F16, &[5])], false), ErrorCode::DtypeMismatch);
        assert_eq!(code(&[&t(DType::I32, &[2, 4]), &t(DType::I32, &[4, 5])], false), ErrorCode::DtypeMismatch);
        assert_eq!(code(&[&x], false), ErrorCode::InvalidArgument);
        assert_eq!(code(&[&x, &w, &b, &b], false), ErrorCode::InvalidArgument);
        let msg = infer(&lin(false), &[&x, &wt]).unwrap_err().message;
        assert!(msg.contains("4 features") && msg.contains("takes 5"), "{msg}");
    }

    #[test]
    fn add_layer_norm_shapes_and_errors() {
        let op = Op::AddLayerNorm { eps: 1e-12 };
        let x = t(DType::F16, &[2, 3, 8]);
        let g = t(DType::F16, &[8]);
        assert_eq!(infer(&op, &[&x, &x, &g, &g]).unwrap(), x);
        let code = |inputs: &[&TensorMeta]| infer(&op, inputs).unwrap_err().code;
        assert_eq!(code(&[&x, &t(DType::F16, &[3, 8]), &g, &g]), ErrorCode::ShapeMismatch, "no broadcasting");
        assert_eq!(code(&[&x, &x, &t(DType::F16, &[3]), &g]), ErrorCode::ShapeMismatch);
        assert_eq!(code(&[&x, &t(DType::F32, &[2, 3, 8]), &g, &g]), ErrorCode::DtypeMismatch);
        assert_eq!(code(&[&x, &x, &g, &t(DType::F32, &[8])]), ErrorCode::DtypeMismatch);
        let xi = t(DType::I32, &[2, 8]);
        let gi = t(DType::I32, &[8]);
        assert_eq!(code(&[&xi, &xi, &gi, &gi]), ErrorCode::DtypeMismatch);
        assert_eq!(code(&[&x, &x, &g]), ErrorCode::InvalidArgument);
        let neg = infer(&Op::AddLayerNorm { eps: -1.0 }, &[&x, &x, &g, &g]).unwrap_err();
        assert_eq!(neg.code, ErrorCode::InvalidArgument);
        assert!(neg.message.contains("add-layer-norm eps"), "{}", neg.message);
    }

    #[test]
    fn attention_shapes_and_errors() {
        let op = |heads| Op::Attention { heads, scale: 0.125 };
        let q = t(DType::F32, &[2, 5, 12]);
        let kv = t(DType::F32, &[2, 7, 12]);
        assert_eq!(infer(&op(3), &[&q, &kv, &kv]).unwrap(), q);
        for mask in [&[2, 1, 1, 7][..], &[7], &[5, 7], &[2, 3, 5, 7], &[1, 3, 1, 1], &[]] {
            let m = t(DType::F32, mask);
            assert_eq!(infer(&op(3), &[&q, &kv, &kv, &m]).unwrap(), q, "mask {mask:?}");
        }
        let code = |heads, inputs: &[&TensorMeta]| infer(&op(heads), inputs).unwrap_err().code;
        for mask in [&[2, 2, 5, 7][..], &[7, 5], &[3, 1, 1, 1], &[1, 2, 1, 5, 7]] {
            let m = t(DType::F32, mask);
            assert_eq!(code(3, &[&q, &kv, &kv, &m]), ErrorCode::ShapeMismatch, "mask {mask:?}");
        }
        assert_eq!(code(5, &[&q, &kv, &kv]), ErrorCode::InvalidArgument, "5 heads do not divide 12");
        assert_eq!(code(0, &[&q, &kv, &kv]), ErrorCode::InvalidArgument);
        let bad_scale = infer(&Op::Attention { heads: 3, scale: f32::NAN }, &[&q, &kv, &kv]).unwrap_err();
        assert_eq!(bad_scale.code, ErrorCode::InvalidArgument);
        assert_eq!(code(3, &[&q, &kv, &t(DType::F32, &[2, 6, 12])]), ErrorCode::ShapeMismatch, "k != v");
        assert_eq!(code(3, &[&q, &t(DType::F32, &[1, 7, 12]), &t(DType::F32, &[1, 7, 12])]), ErrorCode::ShapeMismatch);
        assert_eq!(code(3, &[&q, &t(DType::F32, &[2, 7, 6]), &t(DType::F32, &[2, 7, 6])]), ErrorCode::ShapeMismatch);
        assert_eq!(code(3, &[&t(DType::F32, &[10, 12]), &kv, &kv]), ErrorCode::ShapeMismatch, "rank 2 q");
        assert_eq!(code(3, &[&q, &kv, &t(DType::F16, &[2, 7, 12])]), ErrorCode::DtypeMismatch);
        assert_eq!(code(3, &[&q, &kv, &kv, &t(DType::F16, &[7])]), ErrorCode::DtypeMismatch);
        let qi = t(DType::I32, &[2, 5, 12]);
        assert_eq!(code(3, &[&qi, &qi, &qi]), ErrorCode::DtypeMismatch);
        assert_eq!(code(3, &[&q, &kv]), ErrorCode::InvalidArgument);
        // Scores of 2^16 · 2^16 · 2 elements exceed the element limit even though q, k and
        // v do not.
        let big = t(DType::F16, &[2, 1 << 16, 2]);
        assert_eq!(code(1, &[&big, &big, &big]), ErrorCode::TooLarge);
    }
}
