//! Every op of the catalog (the fused ones included), in every dtype combination `infer`
//! accepts, maps onto kernels that the kernel modules actually define.

use std::collections::{HashMap, HashSet};

use sluice_host_api::{
    BinaryOp, Conv2dArgs, DType, KvAttentionArgs, KvSpan, MatmulArgs, Op, Pool2dArgs, PoolKind, ReduceArgs, ReduceOp,
    SliceArgs, TensorMeta, UnaryOp, infer,
};

use super::{Step, plan};
use crate::kernels::{self, Module};

fn t(d: DType, shape: &[u32]) -> TensorMeta {
    TensorMeta::new(d, shape.to_vec()).unwrap()
}

/// A representative launch of every op variant (and every sub-op) for dtype `d`.
fn launches(d: DType) -> Vec<(Op, Vec<TensorMeta>)> {
    let mut v = vec![(Op::Matmul(MatmulArgs::default()), vec![t(d, &[2, 3]), t(d, &[3, 4])])];
    v.extend(BinaryOp::ALL.map(|b| (Op::Binary(b), vec![t(d, &[2, 3]), t(d, &[3])])));
    v.extend(UnaryOp::ALL.map(|u| (Op::Unary(u), vec![t(d, &[4])])));
    v.push((Op::Affine { scale: 2.0, bias: 1.0 }, vec![t(d, &[4])]));
    v.extend(DType::ALL.map(|to| (Op::Cast(to), vec![t(d, &[4])])));
    v.push((Op::Softmax { scale: 1.0 }, vec![t(d, &[2, 4])]));
    v.push((Op::Softmax { scale: 1.0 }, vec![t(d, &[2, 4]), t(d, &[1, 4])]));
    v.push((Op::LayerNorm { eps: 1e-5 }, vec![t(d, &[2, 4]), t(d, &[4]), t(d, &[4])]));
    for ids in [DType::I32, DType::I64] {
        v.push((Op::Embedding, vec![t(d, &[5, 4]), t(ids, &[3])]));
    }
    for op in ReduceOp::ALL {
        v.push((Op::Reduce(ReduceArgs { op, axis: 1, keep_dim: false }), vec![t(d, &[2, 3])]));
    }
    v.push((Op::Reshape(vec![6]), vec![t(d, &[2, 3])]));
    v.push((Op::Permute(vec![1, 0]), vec![t(d, &[2, 3])]));
    v.push((Op::Slice(SliceArgs { axis: 1, start: 1, end: 3 }), vec![t(d, &[2, 3])]));
    v.push((Op::Concat { axis: 0 }, vec![t(d, &[2, 3]), t(d, &[1, 3])]));
    let conv = Conv2dArgs { stride: (1, 1), padding: (1, 1), dilation: (1, 1), groups: 1 };
    v.push((Op::Conv2d(conv), vec![t(d, &[1, 2, 4, 4]), t(d, &[3, 2, 3, 3])]));
    v.push((Op::Conv2d(conv), vec![t(d, &[1, 2, 4, 4]), t(d, &[3, 2, 3, 3]), t(d, &[3])]));
    for kind in [PoolKind::Max, PoolKind::Avg] {
        let p = Pool2dArgs { kind, kernel: (2, 2), stride: (2, 2), padding: (0, 0) };
        v.push((Op::Pool2d(p), vec![t(d, &[1, 2, 4, 4])]));
    }
    for activation in std::iter::once(None).chain(UnaryOp::ALL.map(Some)) {
        for transpose_w in [false, true] {
            let op = Op::Linear { transpose_w, activation };
            let w = if transpose_w { t(d, &[5, 3]) } else { t(d, &[3, 5]) };
            v.push((op.clone(), vec![t(d, &[2, 3]), w.clone()]));
            v.push((op, vec![t(d, &[2, 3]), w, t(d, &[5])]));
        }
    }
    v.push((Op::AddLayerNorm { eps: 1e-12 }, vec![t(d, &[2, 4]), t(d, &[2, 4]), t(d, &[4]), t(d, &[4])]));
    v.push((Op::RmsNorm { eps: 1e-5 }, vec![t(d, &[2, 4]), t(d, &[4])]));
    v.push((Op::Rope { base: 1e4, offset: 3 }, vec![t(d, &[2, 3, 4])]));
    v.push((Op::Argmax, vec![t(d, &[2, 3, 4])]));
    let sample = sluice_host_api::SampleArgs { temperature: 0.8, top_k: 5, top_p: 0.9, seed: 7 };
    v.push((Op::Sample(sample), vec![t(d, &[2, 50])]));
    v.push((Op::GqaAttention { kv_len: 3, scale: 0.5 }, vec![t(d, &[2, 4, 8]), t(d, &[5, 2, 8]), t(d, &[5, 2, 8])]));
    v.push((Op::RmsNorm { eps: 1e-5 }, vec![t(d, &[2, 4]), t(d, &[2, 4]), t(d, &[4])]));
    let attention = Op::Attention { heads: 2, scale: 0.5 };
    v.push((attention.clone(), vec![t(d, &[2, 3, 4]), t(d, &[2, 5, 4]), t(d, &[2, 5, 4])]));
    v.push((attention, vec![t(d, &[2, 3, 4]), t(d, &[2, 5, 4]), t(d, &[2, 5, 4]), t(d, &[2, 1, 1, 5])]));
    v.push((Op::WriteRows { offset: 2 }, vec![t(d, &[5, 2, 8]), t(d, &[1, 2, 8])]));
    let spans = vec![KvSpan { rows: 1, position: 4 }, KvSpan { rows: 2, position: 0 }];
    let kv = Op::KvAttention(Box::new(KvAttentionArgs { rope_base: 1e4, scale: 0.5, spans }));
    let caches = [t(d, &[6, 2, 8]), t(d, &[6, 2, 8]), t(d, &[3, 2, 8]), t(d, &[3, 2, 8])];
    v.push((kv, [t(d, &[3, 4, 8]), t(d, &[3, 2, 8]), t(d, &[3, 2, 8])].into_iter().chain(caches).collect()));
    v
}

#[test]
fn every_accepted_op_maps_to_defined_kernels() {
    let defined: HashMap<Module, HashSet<String>> =
        Module::ALL.iter().map(|&m| (m, m.instances().into_iter().map(|(s, _)| s).collect())).collect();
    let mut covered = HashSet::new();
    let mut accepted = 0;
    for d in DType::ALL {
        for (op, metas) in launches(d) {
            let refs: Vec<&TensorMeta> = metas.iter().collect();
            if infer(&op, &refs).is_err() {
                continue;
            }
            accepted += 1;
            covered.insert(op.name());
            let dtypes: Vec<DType> = metas.iter().map(|m| m.dtype).collect();
            let steps = plan(&op, &dtypes);
            assert!(!steps.is_empty(), "{op:?} on {dtypes:?} has no plan");
            for step in steps {
                if let Step::Kernel(module, symbol) = step {
                    assert!(
                        defined[&module].contains(&symbol),
                        "{op:?} on {dtypes:?} needs {symbol}, which {}.cu does not define",
                        module.name()
                    );
                }
            }
        }
    }
    let all = [
        "matmul",
        "binary",
        "unary",
        "affine",
        "softmax",
        "layer-norm",
        "embedding",
        "reduce",
        "reshape",
        "permute",
        "slice",
        "concat",
        "cast",
        "conv2d",
        "pool2d",
        "linear",
        "add-layer-norm",
        "attention",
        "rms-norm",
        "rope",
        "argmax",
        "gqa-attention",
        "write-rows",
        "sample",
        "kv-attention",
    ];
    for name in all {
        assert!(covered.contains(name), "op {name} never accepted by infer in this test");
    }
    assert!(accepted > 150, "only {accepted} launches accepted");
    // A linear with neither bias nor activation is the GEMM alone; any other runs the
    // epilogue kernel.
    let lin = |activation| Op::Linear { transpose_w: false, activation };
    assert_eq!(plan(&lin(None), &[DType::F32, DType::F32]), vec![Step::Cublas]);
    assert_eq!(plan(&lin(None), &[DType::F32; 3]).len(), 2);
    assert_eq!(plan(&lin(Some(UnaryOp::Gelu)), &[DType::F16; 2]).len(), 2);
}

#[test]
fn integer_ops_only_where_infer_allows() {
    // Float-only ops are refused by infer before they could need a missing kernel.
    let x = t(DType::I32, &[4]);
    assert!(infer(&Op::Unary(sluice_host_api::UnaryOp::Exp), &[&x]).is_err());
    assert!(infer(&Op::Unary(sluice_host_api::UnaryOp::Abs), &[&x]).is_ok());
    assert!(Module::Unary.instances().iter().any(|(s, _)| s == "abs_i32"));
    assert!(!Module::Unary.instances().iter().any(|(s, _)| s == "exp_i32"));
}

#[test]
fn block_formats_map_to_the_quant_kernels() {
    let defined: HashSet<String> = Module::Quant.instances().into_iter().map(|(s, _)| s).collect();
    for q in DType::QUANTIZED {
        let mut launches = vec![(Op::Cast(DType::F32), vec![t(q, &[2, 64])])];
        for ids in [DType::I32, DType::I64] {
            launches.push((Op::Embedding, vec![t(q, &[5, 32]), t(ids, &[3])]));
        }
        for activation in [None, Some(UnaryOp::Relu)] {
            let op = Op::Linear { transpose_w: true, activation };
            launches.push((op.clone(), vec![t(DType::F32, &[2, 64]), t(q, &[5, 64])]));
            launches.push((op, vec![t(DType::F32, &[2, 64]), t(q, &[5, 64]), t(DType::F32, &[5])]));
        }
        for (op, metas) in launches {
            let refs: Vec<&TensorMeta> = metas.iter().collect();
            infer(&op, &refs).unwrap_or_else(|e| panic!("{op:?} on {metas:?}: {e}"));
            let dtypes: Vec<DType> = metas.iter().map(|m| m.dtype).collect();
            let steps = plan(&op, &dtypes);
            // A linear quantizes its activations first (`q8_activations`), then the
            // dequantizing product; gathers and casts are one kernel.
            let linear = op.name() == "linear";
            let quant = 1 + linear as usize;
            for step in &steps[..quant.min(steps.len())] {
                let Step::Kernel(Module::Quant, symbol) = step else {
                    panic!("{op:?} on {dtypes:?} does not start with {quant} quant kernels: {steps:?}")
                };
                assert!(defined.contains(symbol), "{symbol} is not defined by quant.cu");
            }
            if linear {
                assert_eq!(steps[0], Step::Kernel(Module::Quant, kernels::Q8_ACTIVATIONS_SYMBOL.to_owned()));
            }
            let epilogue = matches!(op, Op::Linear { activation: Some(_), .. }) || dtypes.len() > 2 && linear;
            assert_eq!(steps.len(), quant + epilogue as usize, "{op:?} on {dtypes:?}: {steps:?}");
        }
    }
}

#[test]
fn the_gqa_kernel_holds_the_largest_head_infer_allows() {
    let line = format!("#define GQA_MAX_D {}", sluice_host_api::GQA_MAX_HEAD_DIM);
    assert!(Module::Fused.source().contains(&line), "fused.cu must define {line}");
}
