//! A component built against the frozen host API 1.2.0 (`host-api/wit-released/1.2.0`),
//! with the raw bindings of that version only. Its body is `../guest.rs`, the same for
//! every version, plus what 1.1.0 added (`artifacts.names`) and what 1.2.0 added:
//! `ops.kv-attention`. It returns that function's result beside the one of the chain of
//! 1.0.0 calls the WIT defines it as (`rope`, `tensor.write-rows`, `gqa-attention`),
//! each with caches of its own, for the test to compare.

#![allow(missing_docs, clippy::all)]

wit_bindgen::generate!({
    path: "../../../host-api/wit-released/1.2.0",
    world: "inference",
});

include!("../../guest.rs");

use sluice::gpu::fused::{self, FusedOp, GqaAttentionArgs};
use sluice::gpu::ops::{KvAttentionArgs, KvSpan, RopeArgs, SliceArgs};

/// Query heads, key and value heads, and the head size.
const HEADS: u32 = 2;
const KV_HEADS: u32 = 1;
const D: u32 = 4;
/// The RoPE base and the scores' scale (1/sqrt(d)).
const ROPE_BASE: f32 = 10_000.0;
const SCALE: f32 = 0.5;
/// The positions each of the two sequences' caches holds.
const CTX: [u32; 2] = [4, 5];
/// Two steps of the two sequences, one `kv-attention` each, as `(rows, position)` per
/// sequence: prompts of 3 and 2 rows, then one new row each.
const STEPS: [[(u32, u32); 2]; 2] = [[(3, 0), (2, 0)], [(1, 3), (1, 2)]];

/// `artifacts`: the names `artifacts.names` (1.1.0) returns, as BYTES `[n]`; `kv`: the
/// two steps' `kv-attention` outputs joined, f32 `[7, 2, 4]`; `chain`: the same through
/// the chain of 1.0.0 calls.
fn extra_outputs() -> Result<Vec<IoTensor>, Error> {
    let names = sluice::gpu::artifacts::names();
    let artifacts = IoTensor {
        name: "artifacts".into(),
        shape: vec![names.len() as u64],
        data: IoData::Bytes(names.into_iter().map(String::into_bytes).collect()),
    };
    let (kv, chain) = kv_and_chain()?;
    Ok(vec![artifacts, f32_output("kv", &kv)?, f32_output("chain", &chain)?])
}

/// Element `i` of input `which` (0 q, 1 k, 2 v) of step `step`: a multiple of 1/4 in
/// [-2, 2], exact in f32 (`tests/tests/host_api_versions.rs` makes the same).
fn value(step: usize, which: usize, i: usize) -> f32 {
    ((i * 7 + step * 5 + which * 3) % 17) as f32 / 4.0 - 2.0
}

/// Input `which` of step `step`: f32 `[rows, heads, D]`.
fn input(step: usize, which: usize, rows: u32, heads: u32) -> Result<Tensor, Error> {
    let data: Vec<f32> = (0..(rows * heads * D) as usize).map(|i| value(step, which, i)).collect();
    Tensor::from_f32(&[rows, heads, D], &data)
}

/// Each sequence's KV caches, `[ctx, KV_HEADS, D]` of zeros.
fn caches() -> Result<Vec<(Tensor, Tensor)>, Error> {
    let zeros = |ctx| Tensor::zeros(Dtype::F32, &[ctx, KV_HEADS, D]);
    CTX.iter().map(|&ctx| Ok((zeros(ctx)?, zeros(ctx)?))).collect()
}

/// The steps through `kv-attention` and through the chain, each output `[7, HEADS, D]`.
fn kv_and_chain() -> Result<(Tensor, Tensor), Error> {
    let (kv_caches, chain_caches) = (caches()?, caches()?);
    let (mut kv, mut chain) = (Vec::new(), Vec::new());
    for (step, spans) in STEPS.iter().enumerate() {
        let n = spans.iter().map(|&(rows, _)| rows).sum();
        let (q, k, v) = (input(step, 0, n, HEADS)?, input(step, 1, n, KV_HEADS)?, input(step, 2, n, KV_HEADS)?);

        let args = KvAttentionArgs {
            rope_base: ROPE_BASE,
            scale: SCALE,
            spans: spans.iter().map(|&(rows, position)| KvSpan { rows, position }).collect(),
        };
        let k_caches: Vec<&Tensor> = kv_caches.iter().map(|(k, _)| k).collect();
        let v_caches: Vec<&Tensor> = kv_caches.iter().map(|(_, v)| v).collect();
        kv.push(ops::kv_attention(&q, &k, &v, &k_caches, &v_caches, &args)?);

        let mut start = 0;
        for (&(rows, position), (k_cache, v_cache)) in spans.iter().zip(&chain_caches) {
            let span_of = |t: &Tensor| ops::launch(&Op::Slice(SliceArgs { axis: 0, start, end: start + rows }), &[t]);
            let rope = Op::Rope(RopeArgs { base: ROPE_BASE, offset: position });
            let q_span = ops::launch(&rope, &[&span_of(&q)?])?;
            k_cache.write_rows(position, &ops::launch(&rope, &[&span_of(&k)?])?)?;
            v_cache.write_rows(position, &span_of(&v)?)?;
            let attend = FusedOp::GqaAttention(GqaAttentionArgs { kv_len: position + rows, scale: SCALE });
            chain.push(fused::launch(attend, &[&q_span, k_cache, v_cache])?);
            start += rows;
        }
    }
    let joined = |parts: &[Tensor]| ops::launch(&Op::Concat(0), &parts.iter().collect::<Vec<_>>());
    Ok((joined(&kv)?, joined(&chain)?))
}
