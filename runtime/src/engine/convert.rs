//! Conversions between the WIT bindings' types and the host API's Rust types.

use sluice_host_api as api;
use sluice_host_api::{ApiError, DType, ErrorCode};

use super::bindings::sluice::gpu::fused as wit_fused;
use super::bindings::sluice::gpu::ops as wit;
use super::bindings::{WitDtype, WitError, WitErrorCode};

pub(crate) fn dtype_from_wit(d: WitDtype) -> DType {
    match d {
        WitDtype::F32 => DType::F32,
        WitDtype::F16 => DType::F16,
        WitDtype::Bf16 => DType::BF16,
        WitDtype::I32 => DType::I32,
        WitDtype::I64 => DType::I64,
        WitDtype::U8 => DType::U8,
    }
}

pub(crate) fn dtype_to_wit(d: DType) -> WitDtype {
    match d {
        DType::F32 => WitDtype::F32,
        DType::F16 => WitDtype::F16,
        DType::BF16 => WitDtype::Bf16,
        DType::I32 => WitDtype::I32,
        DType::I64 => WitDtype::I64,
        DType::U8 => WitDtype::U8,
    }
}

pub(crate) fn error_to_wit(e: ApiError) -> WitError {
    let code = match e.code {
        ErrorCode::ShapeMismatch => WitErrorCode::ShapeMismatch,
        ErrorCode::DtypeMismatch => WitErrorCode::DtypeMismatch,
        ErrorCode::InvalidArgument => WitErrorCode::InvalidArgument,
        ErrorCode::NotFound => WitErrorCode::NotFound,
        ErrorCode::QuotaExceeded => WitErrorCode::QuotaExceeded,
        ErrorCode::OutOfMemory => WitErrorCode::OutOfMemory,
        ErrorCode::TooLarge => WitErrorCode::TooLarge,
        ErrorCode::DeviceFailure => WitErrorCode::DeviceFailure,
    };
    WitError { code, message: e.message }
}

pub(crate) fn op_from_wit(op: wit::Op) -> api::Op {
    match op {
        wit::Op::Matmul(a) => {
            api::Op::Matmul(api::MatmulArgs { transpose_a: a.transpose_a, transpose_b: a.transpose_b })
        }
        wit::Op::Binary(b) => api::Op::Binary(match b {
            wit::BinaryOp::Add => api::BinaryOp::Add,
            wit::BinaryOp::Sub => api::BinaryOp::Sub,
            wit::BinaryOp::Mul => api::BinaryOp::Mul,
            wit::BinaryOp::Div => api::BinaryOp::Div,
            wit::BinaryOp::Maximum => api::BinaryOp::Maximum,
            wit::BinaryOp::Minimum => api::BinaryOp::Minimum,
        }),
        wit::Op::Unary(u) => api::Op::Unary(unary_from_wit(u)),
        wit::Op::Affine(a) => api::Op::Affine { scale: a.scale, bias: a.bias },
        wit::Op::Softmax(s) => api::Op::Softmax { scale: s.scale },
        wit::Op::LayerNorm(l) => api::Op::LayerNorm { eps: l.eps },
        wit::Op::Embedding => api::Op::Embedding,
        wit::Op::Reduce(r) => api::Op::Reduce(api::ReduceArgs {
            op: match r.op {
                wit::ReduceOp::Sum => api::ReduceOp::Sum,
                wit::ReduceOp::Mean => api::ReduceOp::Mean,
                wit::ReduceOp::Max => api::ReduceOp::Max,
                wit::ReduceOp::Min => api::ReduceOp::Min,
            },
            axis: r.axis,
            keep_dim: r.keep_dim,
        }),
        wit::Op::Reshape(s) => api::Op::Reshape(s),
        wit::Op::Permute(p) => api::Op::Permute(p),
        wit::Op::Slice(s) => api::Op::Slice(api::SliceArgs { axis: s.axis, start: s.start, end: s.end }),
        wit::Op::Concat(axis) => api::Op::Concat { axis },
        wit::Op::Cast(d) => api::Op::Cast(dtype_from_wit(d)),
        wit::Op::Conv2d(c) => api::Op::Conv2d(api::Conv2dArgs {
            stride: c.stride,
            padding: c.padding,
            dilation: c.dilation,
            groups: c.groups,
        }),
        wit::Op::Pool2d(p) => api::Op::Pool2d(api::Pool2dArgs {
            kind: match p.kind {
                wit::PoolKind::Max => api::PoolKind::Max,
                wit::PoolKind::Avg => api::PoolKind::Avg,
            },
            kernel: p.kernel,
            stride: p.stride,
            padding: p.padding,
        }),
    }
}

fn unary_from_wit(u: wit::UnaryOp) -> api::UnaryOp {
    match u {
        wit::UnaryOp::Relu => api::UnaryOp::Relu,
        wit::UnaryOp::Gelu => api::UnaryOp::Gelu,
        wit::UnaryOp::GeluTanh => api::UnaryOp::GeluTanh,
        wit::UnaryOp::Tanh => api::UnaryOp::Tanh,
        wit::UnaryOp::Sigmoid => api::UnaryOp::Sigmoid,
        wit::UnaryOp::Exp => api::UnaryOp::Exp,
        wit::UnaryOp::Log => api::UnaryOp::Log,
        wit::UnaryOp::Sqrt => api::UnaryOp::Sqrt,
        wit::UnaryOp::Rsqrt => api::UnaryOp::Rsqrt,
        wit::UnaryOp::Neg => api::UnaryOp::Neg,
        wit::UnaryOp::Abs => api::UnaryOp::Abs,
    }
}

/// The fused ops of the WIT `fused` interface are variants of the same [`api::Op`], so
/// inference, scheduling, the cost model and the backends treat them like any op.
pub(crate) fn fused_op_from_wit(op: wit_fused::FusedOp) -> api::Op {
    match op {
        wit_fused::FusedOp::Linear(l) => {
            api::Op::Linear { transpose_w: l.transpose_w, activation: l.activation.map(unary_from_wit) }
        }
        wit_fused::FusedOp::AddLayerNorm(l) => api::Op::AddLayerNorm { eps: l.eps },
        wit_fused::FusedOp::Attention(a) => api::Op::Attention { heads: a.heads, scale: a.scale },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_ops_keep_their_parameters() {
        let lin = wit_fused::FusedOp::Linear(wit_fused::LinearArgs {
            transpose_w: true,
            activation: Some(wit::UnaryOp::GeluTanh),
        });
        assert_eq!(
            fused_op_from_wit(lin),
            api::Op::Linear { transpose_w: true, activation: Some(api::UnaryOp::GeluTanh) }
        );
        let plain = wit_fused::FusedOp::Linear(wit_fused::LinearArgs { transpose_w: false, activation: None });
        assert_eq!(fused_op_from_wit(plain), api::Op::Linear { transpose_w: false, activation: None });
        let aln = wit_fused::FusedOp::AddLayerNorm(wit::LayerNormArgs { eps: 1e-12 });
        assert_eq!(fused_op_from_wit(aln), api::Op::AddLayerNorm { eps: 1e-12 });
        let att = wit_fused::FusedOp::Attention(wit_fused::AttentionArgs { heads: 12, scale: 0.125 });
        assert_eq!(fused_op_from_wit(att), api::Op::Attention { heads: 12, scale: 0.125 });
        // Every activation maps onto the op of the same name.
        assert_eq!(unary_from_wit(wit::UnaryOp::Rsqrt), api::UnaryOp::Rsqrt);
        assert_eq!(unary_from_wit(wit::UnaryOp::Relu), api::UnaryOp::Relu);
    }
}
