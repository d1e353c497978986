//! The fused ops of the WIT `fused` interface as [`Tensor`] methods: a dense layer with
//! bias and activation, a residual add with layer norm, and multi-head attention, each
//! one host launch instead of a chain of them; and `ops.kv-attention` (host API 1.2.0),
//! a llama's RoPE, KV-cache writes and attention for many sequences in one launch. Each computes what its chain of ops
//! computes (see the WIT comments), so they can replace the chains in a model with the
//! same results and fewer kernel launches.

use crate::bindings::sluice::gpu::fused::{self as raw, AttentionArgs, FusedOp, GqaAttentionArgs, LinearArgs};
use crate::bindings::sluice::gpu::ops::{self as raw_ops, KvAttentionArgs, KvSpan, LayerNormArgs};
use crate::{Result, Tensor, UnaryOp};

/// Launches a raw WIT fused op on `inputs` (the escape hatch under the methods below).
pub fn launch_fused(op: FusedOp, inputs: &[&Tensor]) -> Result<Tensor> {
    let raws: Vec<_> = inputs.iter().map(|t| t.as_raw()).collect();
    Ok(Tensor::from_raw(raw::launch(op, &raws)?))
}

impl Tensor {
    /// A dense layer, `activation(self · W + bias)`, in one launch: `self [..., k]` (every
    /// leading axis a row), `w [k, n]`, or `[n, k]` (PyTorch's `nn.Linear` layout) with
    /// `transpose_w`; optional `bias [n]`; the output is `[..., n]`. The same as
    /// `matmul` + `add` + the activation's method, with the same rounding. With a
    /// block-quantized `w` (`Q4_1`/`Q8_0`, transposed) `self` is first rounded to Q8
    /// blocks, as llama.cpp does (the host API's `linear-args` says exactly how).
    pub fn linear(
        &self,
        w: &Tensor,
        bias: Option<&Tensor>,
        transpose_w: bool,
        activation: Option<UnaryOp>,
    ) -> Result<Tensor> {
        let op = FusedOp::Linear(LinearArgs { transpose_w, activation: activation.map(Into::into) });
        match bias {
            Some(b) => launch_fused(op, &[self, w, b]),
            None => launch_fused(op, &[self, w]),
        }
    }

    /// RMS normalisation over the last axis, `x / sqrt(mean(x²) + eps) * w` with 1-D
    /// `w`, in one launch (llama's norm).
    pub fn rms_norm(&self, w: &Tensor, eps: f32) -> Result<Tensor> {
        launch_fused(FusedOp::RmsNorm(LayerNormArgs { eps }), &[self, w])
    }

    /// RMS norm of the residual sum `self + residual` (rounded to the dtype first)
    /// over the last axis, times `w`, in one launch (a llama block's pre-norm).
    pub fn add_rms_norm(&self, residual: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
        launch_fused(FusedOp::RmsNorm(LayerNormArgs { eps }), &[self, residual, w])
    }

    /// Layer normalisation over the last axis of `self + residual` (same shape, no
    /// broadcasting) with 1-D `gamma` and `beta`, in one launch: the post-norm residual
    /// block of a transformer. The same as `add` then [`Tensor::layer_norm`].
    pub fn add_layer_norm(&self, residual: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f32) -> Result<Tensor> {
        launch_fused(FusedOp::AddLayerNorm(LayerNormArgs { eps }), &[self, residual, gamma, beta])
    }

    /// Causal grouped-query attention of `q` `[s, heads, d]` over the first `kv_len`
    /// positions of the caches `k`, `v` `[ctx, kv_heads, d]` (see the WIT
    /// `gqa-attention-args`): query i sits at position `kv_len - s + i`.
    pub fn gqa_attention(q: &Tensor, k: &Tensor, v: &Tensor, kv_len: u32, scale: f32) -> Result<Tensor> {
        launch_fused(FusedOp::GqaAttention(GqaAttentionArgs { kv_len, scale }), &[q, k, v])
    }

    /// A llama's attention of new positions for one or more sequences at once, each
    /// with its own KV caches (the WIT `ops.kv-attention`, host API 1.2.0): `q [n, heads,
    /// d]`, `k` and `v [n, kv_heads, d]`, the rows split in order among `sequences`. For
    /// each sequence it computes what this chain does, in one launch for all of them:
    /// `rope(rope_base, position)` of its q and k rows, [`Tensor::write_rows`] of the
    /// turned k rows and the v rows into its caches at `position`, then
    /// [`Tensor::gqa_attention`] over the first `position + rows` positions. Returns
    /// `[n, heads, d]`; the caches (made by [`Tensor::zeros`], each given once) hold the
    /// new rows afterwards. A decode step of many sequences is one row each; a prompt is
    /// one sequence of many rows.
    pub fn kv_attention(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        sequences: &[KvSequence<'_>],
        rope_base: f32,
        scale: f32,
    ) -> Result<Tensor> {
        let spans = sequences.iter().map(|s| KvSpan { rows: s.rows, position: s.position }).collect();
        let k_caches: Vec<_> = sequences.iter().map(|s| s.k_cache.as_raw()).collect();
        let v_caches: Vec<_> = sequences.iter().map(|s| s.v_cache.as_raw()).collect();
        let args = KvAttentionArgs { rope_base, scale, spans };
        Ok(Tensor::from_raw(raw_ops::kv_attention(q.as_raw(), k.as_raw(), v.as_raw(), &k_caches, &v_caches, &args)?))
    }

    /// Multi-head scaled dot-product attention in one launch, on the layout a
    /// [`Tensor::linear`] produces: `q [b, sq, heads * d]`, `k` and `v [b, sk, heads * d]`,
    /// head `h` being columns `h*d .. (h+1)*d`. Per batch element and head:
    /// `softmax(q_h · k_hᵀ * scale + mask) · v_h`, written back interleaved as
    /// `[b, sq, heads * d]`. The optional additive `mask` broadcasts to the scores
    /// `[b, heads, sq, sk]` (e.g. `[b, 1, 1, sk]` with 0 for tokens and -10000 for
    /// padding) and shares q's dtype.
    pub fn attention(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        heads: u32,
        scale: f32,
    ) -> Result<Tensor> {
        let op = FusedOp::Attention(AttentionArgs { heads, scale });
        match mask {
            Some(m) => launch_fused(op, &[q, k, v, m]),
            None => launch_fused(op, &[q, k, v]),
        }
    }
}

/// One sequence of a [`Tensor::kv_attention`]: its KV caches `[ctx, kv_heads, d]` and
/// its `rows` new positions, the first at `position` (the positions its caches hold).
#[derive(Clone, Copy, Debug)]
pub struct KvSequence<'a> {
    /// The keys cache, written in place.
    pub k_cache: &'a Tensor,
    /// The values cache, written in place.
    pub v_cache: &'a Tensor,
    /// How many consecutive rows of q, k and v are this sequence's.
    pub rows: u32,
    /// The position of the first of them.
    pub position: u32,
}
