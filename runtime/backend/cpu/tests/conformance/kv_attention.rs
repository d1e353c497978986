//! `kv-attention` against the chain it replaces: per sequence, `rope` of its q and k
//! rows, `write-rows` of the turned k rows and the v rows into its caches, then
//! `gqa-attention`. The same bits in the output and in every cache, over decode steps of
//! several sequences at different positions and a prompt of several rows; refused
//! through `launch`, since it changes its inputs.

use super::*;
use sluice_backend_cpu::{kv_attention, write_rows};
use sluice_host_api::{KvAttentionArgs, KvSpan};

/// A sequence of the test: its two caches and how many positions they hold.
struct Sequence {
    k: Input,
    v: Input,
    pos: usize,
}

fn zeros(dtype: DType, shape: &[usize]) -> Input {
    input(dtype, shape, vec![0.0; r::numel(shape)])
}

/// The chain for one sequence's rows, on caches of its own: returns the attention rows.
fn chain(seq: &Sequence, base: f32, scale: f32, q: &Input, k: &Input, v: &Input) -> CpuBuffer {
    let rows = q.meta.shape[0] as usize;
    let rope = Op::Rope { base, offset: seq.pos as u32 };
    let (q_turned, q_meta) = try_run(&rope, &[q]).unwrap();
    let (k_turned, k_meta) = try_run(&rope, &[k]).unwrap();
    let out = meta(DType::U8, &[0]);
    // SAFETY: nothing else uses the caches meanwhile.
    unsafe {
        write_rows(seq.pos as u32, (&seq.k.buf, &seq.k.meta), (&k_turned, &k_meta), &out).unwrap();
        write_rows(seq.pos as u32, (&seq.v.buf, &seq.v.meta), (&v.buf, &v.meta), &out).unwrap();
    }
    let q_turned = Input { vals: values(&q_turned), buf: q_turned, meta: q_meta };
    let k_cache = Input { buf: seq.k.buf.clone(), meta: seq.k.meta.clone(), vals: vec![] };
    let v_cache = Input { buf: seq.v.buf.clone(), meta: seq.v.meta.clone(), vals: vec![] };
    let gqa = Op::GqaAttention { kv_len: (seq.pos + rows) as u32, scale };
    try_run(&gqa, &[&q_turned, &k_cache, &v_cache]).unwrap().0
}

/// Rows `at .. at + n` of a `[rows, heads, d]` input, as an input of their own.
fn rows_of(x: &Input, at: usize, n: usize) -> Input {
    let row = x.meta.numel() / x.meta.shape[0] as usize;
    let shape = [n, x.meta.shape[1] as usize, x.meta.shape[2] as usize];
    input(x.meta.dtype, &shape, x.vals[at * row..(at + n) * row].to_vec())
}

#[test]
fn kv_attention_is_the_chain_of_rope_write_rows_and_gqa_attention() {
    let mut rng = StdRng::seed_from_u64(31);
    let (heads, kv_heads, d, base) = (6usize, 2usize, 16usize, 10_000.0f32);
    let scale = 1.0 / (d as f32).sqrt();
    for dtype in FLOATS {
        // Three sequences with caches of different lengths; the third starts with a
        // prompt of 5 rows, the others join with prompts of 3 and 1.
        let ctx = [12usize, 9, 16];
        let mut fused: Vec<Sequence> = ctx
            .iter()
            .map(|&c| Sequence { k: zeros(dtype, &[c, kv_heads, d]), v: zeros(dtype, &[c, kv_heads, d]), pos: 0 })
            .collect();
        let mut alone: Vec<Sequence> = ctx
            .iter()
            .map(|&c| Sequence { k: zeros(dtype, &[c, kv_heads, d]), v: zeros(dtype, &[c, kv_heads, d]), pos: 0 })
            .collect();
        // Step 0: the prompts (3, 1 and 5 rows); then decode steps of one row each.
        let steps: Vec<Vec<usize>> =
            std::iter::once(vec![3, 1, 5]).chain(std::iter::repeat_n(vec![1, 1, 1], 6)).collect();
        for (step, rows) in steps.iter().enumerate() {
            let n: usize = rows.iter().sum();
            let q = random(&mut rng, dtype, &[n, heads, d], -2.0, 2.0);
            let k = random(&mut rng, dtype, &[n, kv_heads, d], -2.0, 2.0);
            let v = random(&mut rng, dtype, &[n, kv_heads, d], -2.0, 2.0);
            let spans: Vec<KvSpan> =
                fused.iter().zip(rows).map(|(s, &rows)| KvSpan { rows: rows as u32, position: s.pos as u32 }).collect();
            let op = Op::KvAttention(Box::new(KvAttentionArgs { rope_base: base, scale, spans }));
            let mut inputs = vec![(&q.buf, &q.meta), (&k.buf, &k.meta), (&v.buf, &v.meta)];
            for s in &fused {
                inputs.extend([(&s.k.buf, &s.k.meta), (&s.v.buf, &s.v.meta)]);
            }
            let metas: Vec<&TensorMeta> = inputs.iter().map(|(_, m)| *m).collect();
            let out = infer(&op, &metas).unwrap();
            // SAFETY: nothing else uses the caches meanwhile; each is given once.
            let got = unsafe { kv_attention(&inputs, &op, &out) }.unwrap();
            let mut want = Vec::new();
            let mut at = 0;
            for (seq, &r) in alone.iter_mut().zip(rows) {
                let part = chain(seq, base, scale, &rows_of(&q, at, r), &rows_of(&k, at, r), &rows_of(&v, at, r));
                want.extend(values(&part));
                seq.pos += r;
                at += r;
            }
            let ctx_ = format!("{dtype} step {step}");
            assert_eq!(values(&got), want, "{ctx_}: the output");
            assert!(want.iter().any(|&x| x != 0.0), "{ctx_}: a non-trivial output");
            for (i, (f, a)) in fused.iter_mut().zip(&alone).enumerate() {
                assert_eq!(values(&f.k.buf), values(&a.k.buf), "{ctx_}: sequence {i}'s k cache");
                assert_eq!(values(&f.v.buf), values(&a.v.buf), "{ctx_}: sequence {i}'s v cache");
                f.pos = a.pos;
            }
        }
    }
}

#[test]
fn kv_attention_is_refused_through_launch_and_checked_before_writing() {
    let dtype = DType::F32;
    let q = input(dtype, &[1, 2, 4], vec![1.0; 8]);
    let kv = input(dtype, &[1, 1, 4], vec![1.0; 4]);
    let (kc, vc) = (zeros(dtype, &[2, 1, 4]), zeros(dtype, &[2, 1, 4]));
    let op = Op::KvAttention(Box::new(KvAttentionArgs {
        rope_base: 1e4,
        scale: 0.5,
        spans: vec![KvSpan { rows: 1, position: 1 }],
    }));
    let inputs =
        [(&q.buf, &q.meta), (&kv.buf, &kv.meta), (&kv.buf, &kv.meta), (&kc.buf, &kc.meta), (&vc.buf, &vc.meta)];
    let out = meta(dtype, &[1, 2, 4]);
    assert!(launch(&op, &inputs, &out).is_err(), "launch would hide that the caches change");
    // Past the caches' end: refused by the check, before any row is written.
    let past = Op::KvAttention(Box::new(KvAttentionArgs {
        rope_base: 1e4,
        scale: 0.5,
        spans: vec![KvSpan { rows: 1, position: 2 }],
    }));
    // SAFETY: nothing else uses the caches meanwhile.
    assert!(unsafe { kv_attention(&inputs, &past, &out) }.is_err());
    assert!(values(&kc.buf).iter().chain(&values(&vc.buf)).all(|&x| x == 0.0), "nothing written");
    // SAFETY: as above.
    unsafe { kv_attention(&inputs, &op, &out) }.unwrap();
    assert_eq!(values(&vc.buf), [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], "row 1 of the v cache written");
}
