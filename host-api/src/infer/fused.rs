//! Shape and dtype rules of the fused ops: the dense layer (`linear`, quantized weights
//! included), multi-head and grouped-query attention (over a KV cache, and with the
//! cache's writes: `kv-attention`), and the parameters the norms share.

use super::{arity, float, rank_at_least, same_dtype, wrong_arity};
use crate::{ApiError, KvAttentionArgs, Op, TensorMeta, broadcast_shapes};

/// The checks layer norm and add-layer-norm share: a floating `x` of rank ≥ 1, `gamma`
/// and `beta` of shape `[last]` and x's dtype, a finite `eps ≥ 0`.
pub(super) fn norm_params(
    op: &Op,
    eps: f32,
    x: &TensorMeta,
    gamma: &TensorMeta,
    beta: &TensorMeta,
) -> Result<(), ApiError> {
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
pub(super) fn linear(op: &Op, transpose_w: bool, inputs: &[&TensorMeta]) -> Result<TensorMeta, ApiError> {
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
pub(super) fn attention(op: &Op, heads: u32, scale: f32, inputs: &[&TensorMeta]) -> Result<TensorMeta, ApiError> {
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
pub(super) fn gqa_attention(op: &Op, kv_len: u32, scale: f32, inputs: &[&TensorMeta]) -> Result<TensorMeta, ApiError> {
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

/// `q [n, heads, d]`, `k`, `v [n, kv_heads, d]` and a pair of caches `[ctx, kv_heads, d]`
/// per span (see the WIT `kv-attention`): the spans cover the rows and fit their caches.
pub(super) fn kv_attention(op: &Op, args: &KvAttentionArgs, inputs: &[&TensorMeta]) -> Result<TensorMeta, ApiError> {
    let expected = 3 + 2 * args.spans.len();
    if args.spans.is_empty() || inputs.len() != expected {
        return Err(ApiError::arg(format!(
            "kv-attention takes q, k, v and a k and a v cache per span: {} span(s), {} tensor(s)",
            args.spans.len(),
            inputs.len()
        )));
    }
    let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
    float(op, q)?;
    same_dtype(op, q, k)?;
    same_dtype(op, q, v)?;
    if q.rank() != 3 || k.rank() != 3 || k.shape != v.shape || k.shape[0] != q.shape[0] {
        return Err(ApiError::shape(format!(
            "kv-attention needs q [n, heads, d] and k, v [n, kv-heads, d], got {:?}, {:?} and {:?}",
            q.shape, k.shape, v.shape
        )));
    }
    let ([n, heads, d], kv_heads) = ([q.shape[0], q.shape[1], q.shape[2]], k.shape[1]);
    if k.shape[2] != d || kv_heads == 0 || !heads.is_multiple_of(kv_heads) || !d.is_multiple_of(2) {
        return Err(ApiError::shape(format!(
            "kv-attention: q {:?} and k {:?} need one even head size and kv-heads dividing heads",
            q.shape, k.shape
        )));
    }
    if d > GQA_MAX_HEAD_DIM {
        return Err(ApiError::shape(format!("kv-attention head size {d} exceeds {GQA_MAX_HEAD_DIM}")));
    }
    let rows: u64 = args.spans.iter().map(|s| u64::from(s.rows)).sum();
    if rows != u64::from(n) {
        return Err(ApiError::arg(format!("kv-attention spans hold {rows} rows, q has {n}")));
    }
    for (i, (span, caches)) in args.spans.iter().zip(inputs[3..].chunks_exact(2)).enumerate() {
        let (kc, vc) = (caches[0], caches[1]);
        same_dtype(op, q, kc)?;
        same_dtype(op, q, vc)?;
        if kc.shape != vc.shape || kc.rank() != 3 || kc.shape[1..] != k.shape[1..] {
            return Err(ApiError::shape(format!(
                "kv-attention span {i}: the caches {:?} and {:?} must both be [ctx, {kv_heads}, {d}]",
                kc.shape, vc.shape
            )));
        }
        let end = u64::from(span.position) + u64::from(span.rows);
        if end > u64::from(kc.shape[0]) {
            return Err(ApiError::arg(format!(
                "kv-attention span {i}: {} rows at position {} end past its caches' {} positions",
                span.rows, span.position, kc.shape[0]
            )));
        }
    }
    if !(args.rope_base.is_finite() && args.rope_base > 0.0) {
        return Err(ApiError::arg(format!("kv-attention rope base must be finite and > 0, got {}", args.rope_base)));
    }
    if !args.scale.is_finite() {
        return Err(ApiError::arg(format!("kv-attention scale must be finite, got {}", args.scale)));
    }
    Ok(q.clone())
}
