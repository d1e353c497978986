//! The conversions between the WIT package's generated types and this crate's, written
//! once for both sides of the contract.
//!
//! The host (`wasmtime::component::bindgen!`) and the guest SDK (`wit_bindgen::generate!`)
//! each generate their own Rust types from the same WIT: the same names, the same
//! variants, but distinct types in distinct crates. [`wit_conversions!`] implements `From`
//! between those generated types and the host API's ([`crate::DType`], [`crate::Op`],
//! [`crate::ErrorCode`], [`crate::ApiError`], …) for whichever bindings module it is given;
//! each side invokes it once. Adding a variant to the WIT without adding it here fails to
//! compile on both sides (every `match` is exhaustive).

/// Implements `From` between the host API's types and the types generated from the WIT
/// package in the bindings module `$gpu` (the path of the generated `sluice::gpu` module,
/// e.g. `crate::bindings::sluice::gpu`).
///
/// Both directions for the enums (`dtype`, `error-code`, `unary-op`, `binary-op`,
/// `reduce-op`, `pool-kind`) and the `error` record; WIT → [`crate::Op`] for the op
/// catalog (`ops.op` and `fused.fused-op`), and WIT → [`crate::KvAttentionArgs`] for
/// the arguments of `ops.kv-attention`. Invoke it once per crate, at module level.
#[macro_export]
macro_rules! wit_conversions {
    ($($gpu:tt)+) => {
        const _: () = {
            use $($gpu)+ as __wit;
            use __wit::fused as wit_fused;
            use __wit::ops as wit_ops;
            use __wit::types as wit_types;
            use $crate as api;

            $crate::__wit_enum_both_ways!(api::DType, wit_types::Dtype;
                F32 = F32, F16 = F16, BF16 = Bf16, I32 = I32, I64 = I64, U8 = U8, Q4_1 = Q41, Q8_0 = Q80);
            $crate::__wit_enum_both_ways!(api::ErrorCode, wit_types::ErrorCode;
                ShapeMismatch = ShapeMismatch, DtypeMismatch = DtypeMismatch,
                InvalidArgument = InvalidArgument, NotFound = NotFound, QuotaExceeded = QuotaExceeded,
                OutOfMemory = OutOfMemory, TooLarge = TooLarge, DeviceFailure = DeviceFailure,
                Cancelled = Cancelled);
            $crate::__wit_enum_both_ways!(api::UnaryOp, wit_ops::UnaryOp;
                Relu = Relu, Gelu = Gelu, GeluTanh = GeluTanh, Tanh = Tanh, Sigmoid = Sigmoid,
                Exp = Exp, Log = Log, Sqrt = Sqrt, Rsqrt = Rsqrt, Neg = Neg, Abs = Abs, Silu = Silu);
            $crate::__wit_enum_both_ways!(api::BinaryOp, wit_ops::BinaryOp;
                Add = Add, Sub = Sub, Mul = Mul, Div = Div, Maximum = Maximum, Minimum = Minimum);
            $crate::__wit_enum_both_ways!(api::ReduceOp, wit_ops::ReduceOp;
                Sum = Sum, Mean = Mean, Max = Max, Min = Min);
            $crate::__wit_enum_both_ways!(api::PoolKind, wit_ops::PoolKind; Max = Max, Avg = Avg);

            impl ::core::convert::From<api::ApiError> for wit_types::Error {
                fn from(e: api::ApiError) -> Self {
                    wit_types::Error { code: e.code.into(), message: e.message }
                }
            }

            impl ::core::convert::From<wit_types::Error> for api::ApiError {
                fn from(e: wit_types::Error) -> Self {
                    api::ApiError { code: e.code.into(), message: e.message }
                }
            }

            impl ::core::convert::From<wit_ops::Op> for api::Op {
                fn from(op: wit_ops::Op) -> Self {
                    match op {
                        wit_ops::Op::Matmul(a) => api::Op::Matmul(api::MatmulArgs {
                            transpose_a: a.transpose_a,
                            transpose_b: a.transpose_b,
                        }),
                        wit_ops::Op::Binary(b) => api::Op::Binary(b.into()),
                        wit_ops::Op::Unary(u) => api::Op::Unary(u.into()),
                        wit_ops::Op::Affine(a) => api::Op::Affine { scale: a.scale, bias: a.bias },
                        wit_ops::Op::Softmax(s) => api::Op::Softmax { scale: s.scale },
                        wit_ops::Op::LayerNorm(l) => api::Op::LayerNorm { eps: l.eps },
                        wit_ops::Op::Embedding => api::Op::Embedding,
                        wit_ops::Op::Reduce(r) => api::Op::Reduce(api::ReduceArgs {
                            op: r.op.into(),
                            axis: r.axis,
                            keep_dim: r.keep_dim,
                        }),
                        wit_ops::Op::Reshape(s) => api::Op::Reshape(s),
                        wit_ops::Op::Permute(p) => api::Op::Permute(p),
                        wit_ops::Op::Slice(s) => {
                            api::Op::Slice(api::SliceArgs { axis: s.axis, start: s.start, end: s.end })
                        }
                        wit_ops::Op::Concat(axis) => api::Op::Concat { axis },
                        wit_ops::Op::Cast(d) => api::Op::Cast(d.into()),
                        wit_ops::Op::Conv2d(c) => api::Op::Conv2d(api::Conv2dArgs {
                            stride: c.stride,
                            padding: c.padding,
                            dilation: c.dilation,
                            groups: c.groups,
                        }),
                        wit_ops::Op::Pool2d(p) => api::Op::Pool2d(api::Pool2dArgs {
                            kind: p.kind.into(),
                            kernel: p.kernel,
                            stride: p.stride,
                            padding: p.padding,
                        }),
                        wit_ops::Op::Rope(r) => api::Op::Rope { base: r.base, offset: r.offset },
                        wit_ops::Op::Argmax => api::Op::Argmax,
                        wit_ops::Op::Sample(a) => api::Op::Sample(api::SampleArgs {
                            temperature: a.temperature,
                            top_k: a.top_k,
                            top_p: a.top_p,
                            seed: a.seed,
                        }),
                    }
                }
            }

            // `ops.kv-attention` (1.2.0), a function of its own, becomes `api::Op::KvAttention`.
            impl ::core::convert::From<wit_ops::KvAttentionArgs> for api::KvAttentionArgs {
                fn from(a: wit_ops::KvAttentionArgs) -> Self {
                    api::KvAttentionArgs {
                        rope_base: a.rope_base,
                        scale: a.scale,
                        spans: a
                            .spans
                            .into_iter()
                            .map(|s| api::KvSpan { rows: s.rows, position: s.position })
                            .collect(),
                    }
                }
            }

            // The fused ops are variants of the same `api::Op`, so inference,
            // scheduling, the cost model and the backends treat them like any op.
            impl ::core::convert::From<wit_fused::FusedOp> for api::Op {
                fn from(op: wit_fused::FusedOp) -> Self {
                    match op {
                        wit_fused::FusedOp::Linear(l) => api::Op::Linear {
                            transpose_w: l.transpose_w,
                            activation: l.activation.map(::core::convert::Into::into),
                        },
                        wit_fused::FusedOp::AddLayerNorm(l) => api::Op::AddLayerNorm { eps: l.eps },
                        wit_fused::FusedOp::RmsNorm(l) => api::Op::RmsNorm { eps: l.eps },
                        wit_fused::FusedOp::GqaAttention(a) => api::Op::GqaAttention { kv_len: a.kv_len, scale: a.scale },
                        wit_fused::FusedOp::Attention(a) => api::Op::Attention { heads: a.heads, scale: a.scale },
                    }
                }
            }
        };
    };
}

/// `From` both ways between two fieldless enums, variant by variant (exhaustive).
#[doc(hidden)]
#[macro_export]
macro_rules! __wit_enum_both_ways {
    ($api:ty, $wit:ty; $($a:ident = $w:ident),+ $(,)?) => {
        impl ::core::convert::From<$api> for $wit {
            fn from(v: $api) -> Self {
                type Api = $api;
                match v {
                    $(Api::$a => Self::$w,)+
                }
            }
        }

        impl ::core::convert::From<$wit> for $api {
            fn from(v: $wit) -> Self {
                type Wit = $wit;
                match v {
                    $(Wit::$w => Self::$a,)+
                }
            }
        }
    };
}
