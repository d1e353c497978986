//! The op catalog as [`Tensor`] methods, plus `+ - * /` and unary `-` on `&Tensor`.
//!
//! Every method launches one host op (the WIT `ops.launch`) and returns its output
//! handle at once; the host checks shapes and dtypes before queueing and a refused
//! launch is an [`Error`](crate::Error) with the host's [`ErrorCode`](crate::ErrorCode).

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::bindings::sluice::gpu::ops::{
    self as raw, AffineArgs, BinaryOp, Conv2dArgs, LayerNormArgs, MatmulArgs, Op, Pool2dArgs, PoolKind, ReduceArgs,
    ReduceOp, RopeArgs, SampleArgs, SliceArgs, SoftmaxArgs, UnaryOp,
};
use crate::{DType, Error, ErrorCode, Result, Tensor};

/// Launches a raw WIT op on `inputs`: the escape hatch under every [`Tensor`] method.
pub fn launch(op: &Op, inputs: &[&Tensor]) -> Result<Tensor> {
    let raws: Vec<_> = inputs.iter().map(|t| t.as_raw()).collect();
    Ok(Tensor::from_raw(raw::launch(op, &raws)?))
}

/// Parameters of [`Tensor::conv2d`]; `Conv2d::default()` is stride 1, no padding,
/// dilation 1, one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    /// Vertical and horizontal stride (≥ 1).
    pub stride: (u32, u32),
    /// Zero padding on each side, vertical and horizontal.
    pub padding: (u32, u32),
    /// Kernel dilation (≥ 1).
    pub dilation: (u32, u32),
    /// Channel groups; divides the input and output channels.
    pub groups: u32,
}

impl Default for Conv2d {
    fn default() -> Self {
        Conv2d { stride: (1, 1), padding: (0, 0), dilation: (1, 1), groups: 1 }
    }
}

/// Parameters of [`Tensor::max_pool2d`] and [`Tensor::avg_pool2d`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2d {
    /// Window height and width.
    pub kernel: (u32, u32),
    /// Vertical and horizontal stride (≥ 1).
    pub stride: (u32, u32),
    /// Padding on each side; smaller than the window.
    pub padding: (u32, u32),
}

impl Pool2d {
    /// A `k × k` window with stride `k` and no padding (non-overlapping pooling).
    pub fn square(k: u32) -> Self {
        Pool2d { kernel: (k, k), stride: (k, k), padding: (0, 0) }
    }
}

impl Tensor {
    fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        launch(&Op::Unary(op), &[self])
    }

    fn binary(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        launch(&Op::Binary(op), &[self, other])
    }

    fn reduce(&self, op: ReduceOp, axis: u32, keep_dim: bool) -> Result<Tensor> {
        launch(&Op::Reduce(ReduceArgs { op, axis, keep_dim }), &[self])
    }

    /// Matrix product of the last two axes, batched over broadcasting leading axes.
    pub fn matmul(&self, b: &Tensor) -> Result<Tensor> {
        self.matmul_t(b, false, false)
    }

    /// Matrix product with optional transposes of either operand's last two axes
    /// (`matmul_t(&w, false, true)` is `x @ wᵀ`).
    pub fn matmul_t(&self, b: &Tensor, transpose_a: bool, transpose_b: bool) -> Result<Tensor> {
        launch(&Op::Matmul(MatmulArgs { transpose_a, transpose_b }), &[self, b])
    }

    /// `self + b`, broadcasting.
    pub fn add(&self, b: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Add, b)
    }

    /// `self - b`, broadcasting.
    pub fn sub(&self, b: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Sub, b)
    }

    /// `self * b` elementwise, broadcasting.
    pub fn mul(&self, b: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Mul, b)
    }

    /// `self / b` elementwise, broadcasting.
    pub fn div(&self, b: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Div, b)
    }

    /// Elementwise `max(self, b)`, broadcasting.
    pub fn maximum(&self, b: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Maximum, b)
    }

    /// Elementwise `min(self, b)`, broadcasting.
    pub fn minimum(&self, b: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Minimum, b)
    }

    /// `max(x, 0)`.
    pub fn relu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Relu)
    }

    /// Exact GELU, `x * Φ(x)` with the error function.
    pub fn gelu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Gelu)
    }

    /// The tanh approximation of GELU.
    pub fn gelu_tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::GeluTanh)
    }

    /// SiLU (swish), `x * sigmoid(x)`.
    pub fn silu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Silu)
    }

    /// Hyperbolic tangent.
    pub fn tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Tanh)
    }

    /// `1 / (1 + e^-x)`.
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sigmoid)
    }

    /// `e^x`.
    pub fn exp(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Exp)
    }

    /// Natural logarithm.
    pub fn log(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Log)
    }

    /// Square root.
    pub fn sqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sqrt)
    }

    /// `1 / sqrt(x)`.
    pub fn rsqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Rsqrt)
    }

    /// `-x` (also on integers).
    pub fn neg(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg)
    }

    /// `|x|` (also on integers).
    pub fn abs(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Abs)
    }

    /// `x * scale + bias` elementwise.
    pub fn affine(&self, scale: f32, bias: f32) -> Result<Tensor> {
        launch(&Op::Affine(AffineArgs { scale, bias }), &[self])
    }

    /// `x * s` elementwise.
    pub fn scale(&self, s: f32) -> Result<Tensor> {
        self.affine(s, 0.0)
    }

    /// The i32 index of the largest element of each row (the last axis): greedy
    /// decoding. Ties give the lowest index.
    pub fn argmax(&self) -> Result<Tensor> {
        launch(&Op::Argmax, &[self])
    }

    /// A token drawn from each row of f32 logits `[..., v]` (i32 of shape `[...]`) with
    /// `temperature` (> 0), `top_k` (0: all) and `top_p` (in `(0, 1]`), from `seed` (give
    /// each decode step its own): the same tokens on every backend (the WIT
    /// `sample-args` documents the algorithm).
    pub fn sample(&self, temperature: f32, top_k: u32, top_p: f32, seed: u64) -> Result<Tensor> {
        launch(&Op::Sample(SampleArgs { temperature, top_k, top_p, seed }), &[self])
    }

    /// Rotary position embedding of `self` `[..., s, heads, d]` (llama.cpp's normal
    /// RoPE: adjacent pairs), sequence index j at position `offset + j`.
    pub fn rope(&self, base: f32, offset: u32) -> Result<Tensor> {
        launch(&Op::Rope(RopeArgs { base, offset }), &[self])
    }

    /// Softmax over the last axis of `x * scale + mask`; `mask` broadcasts to `x`
    /// and shares its dtype (e.g. 0 for kept and -1e9 for masked positions).
    pub fn softmax(&self, scale: f32, mask: Option<&Tensor>) -> Result<Tensor> {
        let op = Op::Softmax(SoftmaxArgs { scale });
        match mask {
            Some(m) => launch(&op, &[self, m]),
            None => launch(&op, &[self]),
        }
    }

    /// Layer normalisation over the last axis with 1-D `gamma` and `beta`.
    pub fn layer_norm(&self, gamma: &Tensor, beta: &Tensor, eps: f32) -> Result<Tensor> {
        launch(&Op::LayerNorm(LayerNormArgs { eps }), &[self, gamma, beta])
    }

    /// Row gather: `table [v, d]` floating, `ids` i32/i64 of any shape in `0..v`;
    /// the output has shape `ids.shape ++ [d]`.
    pub fn embedding(table: &Tensor, ids: &Tensor) -> Result<Tensor> {
        launch(&Op::Embedding, &[table, ids])
    }

    /// `Tensor::embedding(self, ids)`: gathers rows of this `[v, d]` table.
    pub fn gather(&self, ids: &Tensor) -> Result<Tensor> {
        Tensor::embedding(self, ids)
    }

    /// Sum over `axis`.
    pub fn sum(&self, axis: u32, keep_dim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, axis, keep_dim)
    }

    /// Mean over `axis`.
    pub fn mean(&self, axis: u32, keep_dim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, axis, keep_dim)
    }

    /// Largest element over `axis`.
    pub fn max(&self, axis: u32, keep_dim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, axis, keep_dim)
    }

    /// Smallest element over `axis`.
    pub fn min(&self, axis: u32, keep_dim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, axis, keep_dim)
    }

    /// Same elements in a new shape of the same element count.
    pub fn reshape(&self, shape: &[u32]) -> Result<Tensor> {
        launch(&Op::Reshape(shape.to_vec()), &[self])
    }

    /// Reorders axes: output axis `i` is input axis `perm[i]`.
    pub fn permute(&self, perm: &[u32]) -> Result<Tensor> {
        launch(&Op::Permute(perm.to_vec()), &[self])
    }

    /// Swaps axes `a` and `b` (a [`Tensor::permute`]); an axis out of range is an
    /// `invalid-argument` error.
    pub fn transpose(&self, a: u32, b: u32) -> Result<Tensor> {
        let rank = self.rank();
        if a as usize >= rank || b as usize >= rank {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("transpose({a}, {b}) on a tensor of rank {rank}"),
            ));
        }
        let mut perm: Vec<u32> = (0..rank as u32).collect();
        perm.swap(a as usize, b as usize);
        self.permute(&perm)
    }

    /// Elements `start..end` of `axis`.
    pub fn slice(&self, axis: u32, start: u32, end: u32) -> Result<Tensor> {
        launch(&Op::Slice(SliceArgs { axis, start, end }), &[self])
    }

    /// Joins `tensors` along `axis`; the other axes and the dtype must agree.
    pub fn concat(tensors: &[&Tensor], axis: u32) -> Result<Tensor> {
        launch(&Op::Concat(axis), tensors)
    }

    /// Converts the elements to `dtype`.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        launch(&Op::Cast(dtype.into()), &[self])
    }

    /// 2-D convolution (cross-correlation), NCHW: `self [n, c, h, w]`,
    /// `w [o, c / groups, kh, kw]`, optional `bias [o]`.
    pub fn conv2d(&self, w: &Tensor, bias: Option<&Tensor>, p: Conv2d) -> Result<Tensor> {
        let op =
            Op::Conv2d(Conv2dArgs { stride: p.stride, padding: p.padding, dilation: p.dilation, groups: p.groups });
        match bias {
            Some(b) => launch(&op, &[self, w, b]),
            None => launch(&op, &[self, w]),
        }
    }

    /// 2-D max pooling, NCHW.
    pub fn max_pool2d(&self, p: Pool2d) -> Result<Tensor> {
        self.pool2d(PoolKind::Max, p)
    }

    /// 2-D average pooling, NCHW (padding counts as zero, included in the divisor).
    pub fn avg_pool2d(&self, p: Pool2d) -> Result<Tensor> {
        self.pool2d(PoolKind::Avg, p)
    }

    fn pool2d(&self, kind: PoolKind, p: Pool2d) -> Result<Tensor> {
        let args = Pool2dArgs { kind, kernel: p.kernel, stride: p.stride, padding: p.padding };
        launch(&Op::Pool2d(args), &[self])
    }
}

macro_rules! binary_operator {
    ($trait:ident, $method:ident) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;

            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }
    };
}

binary_operator!(Add, add);
binary_operator!(Sub, sub);
binary_operator!(Mul, mul);
binary_operator!(Div, div);

impl Neg for &Tensor {
    type Output = Result<Tensor>;

    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}
