//! The op catalog: the Rust mirror of the WIT `op` variant and of the `fused-op` variant
//! (ops that do the work of several catalog ops in one launch).
//!
//! Backends implement every variant; [`crate::infer`] gives each its shape rules.

use crate::DType;

/// Elementwise binary ops (broadcasting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
}

/// Elementwise unary ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Relu,
    /// Exact GELU: `x * 0.5 * (1 + erf(x / sqrt(2)))`.
    Gelu,
    /// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`.
    GeluTanh,
    Tanh,
    Sigmoid,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Neg,
    Abs,
    /// SiLU (swish): `x * sigmoid(x)`; with a `mul` by the up projection, SwiGLU.
    Silu,
}

impl BinaryOp {
    /// Every binary op, in WIT order.
    pub const ALL: [BinaryOp; 6] =
        [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Minimum];
}

impl UnaryOp {
    /// Every unary op, in WIT order.
    pub const ALL: [UnaryOp; 12] = [
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Silu,
    ];

    /// Whether the op is defined on integer tensors too.
    pub const fn accepts_integers(self) -> bool {
        matches!(self, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu)
    }
}

/// Reductions over one axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
}

impl ReduceOp {
    /// Every reduction, in WIT order.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];
}

/// Kinds of 2-D pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Max,
    /// Padding counts as zero and is included in the divisor.
    Avg,
}

/// Parameters of [`Op::Matmul`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MatmulArgs {
    pub transpose_a: bool,
    pub transpose_b: bool,
}

/// Parameters of [`Op::Reduce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReduceArgs {
    pub op: ReduceOp,
    pub axis: u32,
    pub keep_dim: bool,
}

/// Parameters of [`Op::Sample`]: temperature (> 0), top-k (0: all), top-p (in
/// `(0, 1]`) and the seed of the draw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleArgs {
    pub temperature: f32,
    pub top_k: u32,
    pub top_p: f32,
    pub seed: u64,
}

/// Parameters of [`Op::Slice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SliceArgs {
    pub axis: u32,
    pub start: u32,
    pub end: u32,
}

/// One sequence's rows in an [`Op::KvAttention`]: `rows` consecutive rows, the first at
/// `position`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvSpan {
    pub rows: u32,
    pub position: u32,
}

/// Parameters of [`Op::KvAttention`]: the RoPE base, the scores' scale and the
/// sequences, in the order of the rows and the caches.
#[derive(Clone, Debug, PartialEq)]
pub struct KvAttentionArgs {
    pub rope_base: f32,
    pub scale: f32,
    pub spans: Vec<KvSpan>,
}

impl KvAttentionArgs {
    /// Query rows times the cache positions each attends to, over every span: a span's
    /// `rows` against its caches' first `position + rows` (the work of one
    /// `gqa-attention` per span, for the cost model and the CPU's threading).
    pub fn row_positions(&self) -> u64 {
        self.spans.iter().map(|s| u64::from(s.rows) * (u64::from(s.position) + u64::from(s.rows))).sum()
    }
}

/// Parameters of [`Op::Conv2d`]; pairs are (vertical, horizontal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv2dArgs {
    pub stride: (u32, u32),
    pub padding: (u32, u32),
    pub dilation: (u32, u32),
    pub groups: u32,
}

/// Parameters of [`Op::Pool2d`]; pairs are (vertical, horizontal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pool2dArgs {
    pub kind: PoolKind,
    pub kernel: (u32, u32),
    pub stride: (u32, u32),
    pub padding: (u32, u32),
}

/// One op of the catalog with its parameters. The inputs each op takes are
/// documented on the WIT `op` and `fused-op` variants and enforced by [`crate::infer`].
/// The fused ops (`Linear`, `AddLayerNorm`, `Attention`) compute what a chain of the
/// other ops computes, in one launch.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `[a, b]`: batched matrix product over the last two axes.
    Matmul(MatmulArgs),
    /// `[a, b]`: broadcasting elementwise op.
    Binary(BinaryOp),
    /// `[x]`: elementwise op.
    Unary(UnaryOp),
    /// `[x]`: `x * scale + bias`.
    Affine { scale: f32, bias: f32 },
    /// `[x]` or `[x, mask]`: softmax over the last axis of `x * scale + mask`.
    Softmax { scale: f32 },
    /// `[x, gamma, beta]`: layer norm over the last axis.
    LayerNorm { eps: f32 },
    /// `[table, ids]`: row gather.
    Embedding,
    /// `[x]`: reduction of one axis.
    Reduce(ReduceArgs),
    /// `[x]`: new shape, same elements.
    Reshape(Vec<u32>),
    /// `[x]`: output axis i is input axis `perm[i]`.
    Permute(Vec<u32>),
    /// `[x]`: a range of one axis.
    Slice(SliceArgs),
    /// `[a, b, ...]`: join along an axis.
    Concat { axis: u32 },
    /// `[x]`: convert elements to another dtype.
    Cast(DType),
    /// `[x]` of `[..., s, heads, d]`: rotary position embedding of adjacent pairs, the
    /// sequence index j at position `offset + j`.
    Rope { base: f32, offset: u32 },
    /// `[x]`: i32 index of the largest element of each row (last axis).
    Argmax,
    /// `[x]`: an i32 token drawn from each row of f32 logits (last axis) with
    /// temperature, top-k and top-p, the same on every backend (the WIT `sample-args`
    /// documents the algorithm).
    Sample(SampleArgs),
    /// `[x, w]` or `[x, w, bias]`: NCHW convolution.
    Conv2d(Conv2dArgs),
    /// `[x]`: NCHW pooling.
    Pool2d(Pool2dArgs),
    /// `[x, w]` or `[x, w, b]`: `activation(x · W + b)` over the last axis of `x` (the
    /// WIT `fused` interface). `W` is `w`, or `wᵀ` when `transpose_w` (PyTorch's
    /// `nn.Linear` layout `[out, in]`).
    Linear { transpose_w: bool, activation: Option<UnaryOp> },
    /// `[x, residual, gamma, beta]`: layer norm over the last axis of `x + residual`.
    AddLayerNorm { eps: f32 },
    /// `[q, k, v]` or `[q, k, v, mask]`: multi-head scaled dot-product attention on
    /// `[batch, seq, heads * head_dim]` tensors, heads interleaved along the last axis.
    Attention { heads: u32, scale: f32 },
    /// `[x, w]` or `[x, residual, w]`: RMS norm over the last axis of `x` (or of
    /// `x + residual`), times `w`.
    RmsNorm { eps: f32 },
    /// `[q, k, v]`: causal grouped-query attention of q `[s, heads, d]` over the first
    /// `kv_len` positions of the caches k, v `[ctx, kv_heads, d]`.
    GqaAttention { kv_len: u32, scale: f32 },
    /// `[dst, src]`: the in-place write `dst[offset .. offset + src.shape[0]] = src`
    /// along axis 0 (the WIT `tensor.write`); its output is an empty u8 `[0]` that only
    /// orders it among the invocation's work. Never reached through `ops.launch`: the
    /// host queues it only for a `dst` made by `tensor.zeros`.
    WriteRows { offset: u32 },
    /// `[q, k, v, k-cache 0, v-cache 0, k-cache 1, v-cache 1, …]`: per span (sequence)
    /// of rows, RoPE of its q and k rows at its position, its k and v rows written in
    /// place into its caches there, then causal GQA attention over them (the WIT
    /// `ops.kv-attention`). Its output is `[n, heads, d]`; the caches are changed in
    /// place, so the host queues it only for caches made by `tensor.zeros`.
    KvAttention(Box<KvAttentionArgs>),
}

impl Op {
    /// Short stable name of the op family, for metrics, cost models and messages.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Matmul(_) => "matmul",
            Op::Binary(_) => "binary",
            Op::Unary(_) => "unary",
            Op::Affine { .. } => "affine",
            Op::Softmax { .. } => "softmax",
            Op::LayerNorm { .. } => "layer-norm",
            Op::Embedding => "embedding",
            Op::Reduce(_) => "reduce",
            Op::Reshape(_) => "reshape",
            Op::Permute(_) => "permute",
            Op::Slice(_) => "slice",
            Op::Concat { .. } => "concat",
            Op::Cast(_) => "cast",
            Op::Rope { .. } => "rope",
            Op::Argmax => "argmax",
            Op::Sample(_) => "sample",
            Op::Conv2d(_) => "conv2d",
            Op::Pool2d(_) => "pool2d",
            Op::Linear { .. } => "linear",
            Op::AddLayerNorm { .. } => "add-layer-norm",
            Op::Attention { .. } => "attention",
            Op::RmsNorm { .. } => "rms-norm",
            Op::GqaAttention { .. } => "gqa-attention",
            Op::WriteRows { .. } => "write-rows",
            Op::KvAttention(_) => "kv-attention",
        }
    }

    /// The inputs (by position) this op writes in place: `write-rows`' destination and
    /// `kv-attention`'s caches; none for every other op, whose inputs are read only.
    pub fn written_inputs(&self, inputs: usize) -> std::ops::Range<usize> {
        match self {
            Op::WriteRows { .. } => 0..inputs.min(1),
            Op::KvAttention(_) => inputs.min(3)..inputs,
            _ => 0..0,
        }
    }
}
