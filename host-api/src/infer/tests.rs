//! The inference rules, op by op: accepted shapes and every refusal's code.

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
fn kv_attention_checks_spans_caches_and_shapes() {
    use crate::{KvAttentionArgs, KvSpan};
    let op = |spans: &[(u32, u32)]| {
        Op::KvAttention(Box::new(KvAttentionArgs {
            rope_base: 1e4,
            scale: 0.125,
            spans: spans.iter().map(|&(rows, position)| KvSpan { rows, position }).collect(),
        }))
    };
    let (q, kv) = (t(DType::F32, &[3, 9, 64]), t(DType::F32, &[3, 3, 64]));
    let (c8, c4) = (t(DType::F32, &[8, 3, 64]), t(DType::F32, &[4, 3, 64]));
    // Two sequences: one decoding at position 7 of 8, one with a prompt of 2 at 2 of 4.
    let good = op(&[(1, 7), (2, 2)]);
    assert_eq!(infer(&good, &[&q, &kv, &kv, &c8, &c8, &c4, &c4]).unwrap(), q);
    let code = |o: &Op, ins: &[&TensorMeta]| infer(o, ins).unwrap_err().code;
    // The spans' rows must sum to q's rows, each span must fit its caches.
    assert_eq!(code(&op(&[(1, 7), (1, 2)]), &[&q, &kv, &kv, &c8, &c8, &c4, &c4]), ErrorCode::InvalidArgument);
    assert_eq!(code(&op(&[(1, 8), (2, 2)]), &[&q, &kv, &kv, &c8, &c8, &c4, &c4]), ErrorCode::InvalidArgument);
    assert_eq!(code(&op(&[(1, 7), (2, 3)]), &[&q, &kv, &kv, &c8, &c8, &c4, &c4]), ErrorCode::InvalidArgument);
    assert_eq!(code(&op(&[(2, u32::MAX), (1, 0)]), &[&q, &kv, &kv, &c8, &c8, &c4, &c4]), ErrorCode::InvalidArgument);
    // A pair of caches per span, no more, no less; no spans at all.
    assert_eq!(code(&good, &[&q, &kv, &kv, &c8, &c8]), ErrorCode::InvalidArgument);
    assert_eq!(code(&op(&[]), &[&q, &kv, &kv]), ErrorCode::InvalidArgument);
    // Caches of another shape or dtype, or k and v caches that differ.
    assert_eq!(code(&good, &[&q, &kv, &kv, &c8, &c8, &c4, &t(DType::F32, &[4, 3, 32])]), ErrorCode::ShapeMismatch);
    assert_eq!(code(&good, &[&q, &kv, &kv, &c8, &c8, &c4, &t(DType::F32, &[5, 3, 64])]), ErrorCode::ShapeMismatch);
    assert_eq!(code(&good, &[&q, &kv, &kv, &c8, &c8, &t(DType::F16, &[4, 3, 64]), &c4]), ErrorCode::DtypeMismatch);
    // q, k and v: kv-heads dividing heads, one head size, an even one, floating.
    let kv4 = t(DType::F32, &[3, 4, 64]);
    let c4h = t(DType::F32, &[8, 4, 64]);
    assert_eq!(code(&op(&[(3, 0)]), &[&q, &kv4, &kv4, &c4h, &c4h]), ErrorCode::ShapeMismatch);
    let (q_odd, kv_odd, c_odd) = (t(DType::F32, &[1, 3, 63]), t(DType::F32, &[1, 3, 63]), t(DType::F32, &[8, 3, 63]));
    assert_eq!(code(&op(&[(1, 0)]), &[&q_odd, &kv_odd, &kv_odd, &c_odd, &c_odd]), ErrorCode::ShapeMismatch);
    let qi = t(DType::I32, &[3, 9, 64]);
    let (kvi, ci) = (t(DType::I32, &[3, 3, 64]), t(DType::I32, &[8, 3, 64]));
    assert_eq!(code(&op(&[(3, 0)]), &[&qi, &kvi, &kvi, &ci, &ci]), ErrorCode::DtypeMismatch);
    assert_eq!(code(&op(&[(3, 0)]), &[&q, &t(DType::F32, &[2, 3, 64]), &kv, &c8, &c8]), ErrorCode::ShapeMismatch);
    // The parameters.
    let bad_base = Op::KvAttention(Box::new(KvAttentionArgs {
        rope_base: 0.0,
        scale: 0.1,
        spans: vec![KvSpan { rows: 3, position: 0 }],
    }));
    assert_eq!(code(&bad_base, &[&q, &kv, &kv, &c8, &c8]), ErrorCode::InvalidArgument);
    let bad_scale = Op::KvAttention(Box::new(KvAttentionArgs {
        rope_base: 1e4,
        scale: f32::NAN,
        spans: vec![KvSpan { rows: 3, position: 0 }],
    }));
    assert_eq!(code(&bad_scale, &[&q, &kv, &kv, &c8, &c8]), ErrorCode::InvalidArgument);
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
