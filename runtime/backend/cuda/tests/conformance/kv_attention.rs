//! `kv-attention` (`Op::KvAttention`) against the CPU backend's `kv_attention`: three
//! sequences with caches of different lengths, over several steps (prompts of several
//! rows, decode steps of one, a chunk of three rows at a later position, a span of no
//! rows, the spans in another order than their caches were made in, a step without one
//! of the sequences), in every float dtype and two head layouts (d 40, not a multiple of
//! a warp, and SmolLM2's 9 heads over 3 kv heads of 64). After each step the output and
//! every cache are compared: the turned k rows within the rope tolerance, the v rows bit
//! for bit, the rows not yet written still zero. On the fake the streams are lazy, so a
//! write ordered after the attention that reads it gives stale rows, never a lucky pass.
//! Last, the caches written on one lane of a partitioned device are seen by a kernel on
//! another and by a download on the lane that made them.

use sluice_backend_cpu::CpuBuffer;
use sluice_backend_cuda::{CudaBuffer, CudaDevice, CudaOptions, Lane};
use sluice_host_api::{DType, KvAttentionArgs, KvSpan, Op, TensorMeta, infer};

use super::{Gen, Rng, compare, device, values};

fn meta(d: DType, shape: &[u32]) -> TensorMeta {
    TensorMeta::new(d, shape.to_vec()).unwrap()
}

/// One sequence: its caches on both backends and the positions they hold.
struct Sequence {
    meta: TensorMeta,
    filled: u32,
    cpu: [CpuBuffer; 2],
    gpu: [CudaBuffer; 2],
}

impl Sequence {
    fn new(dev: &CudaDevice, dtype: DType, ctx: u32, kv_heads: u32, d: u32) -> Sequence {
        let meta = meta(dtype, &[ctx, kv_heads, d]);
        let zeros = || CpuBuffer::from_f32_as(dtype, &vec![0.0; meta.numel()]);
        let upload = |b: &CpuBuffer| dev.upload(&meta, &b.to_le_bytes()).unwrap();
        let cpu = [zeros(), zeros()];
        let gpu = [upload(&cpu[0]), upload(&cpu[1])];
        Sequence { meta, filled: 0, cpu, gpu }
    }
}

/// The steps: per step the spans in row order, each (sequence, rows); positions follow
/// from what each sequence's caches hold.
const STEPS: [&[(usize, u32)]; 5] = [
    &[(0, 5), (1, 2), (2, 1)],
    &[(0, 1), (1, 1), (2, 1)],
    &[(2, 3), (0, 1), (1, 0)],
    &[(1, 1), (0, 1)],
    &[(0, 1), (2, 1), (1, 1)],
];

/// Caches' lengths: sequence 1's is filled exactly by the last step.
const CTX: [u32; 3] = [11, 5, 8];

/// Runs [`STEPS`] in `dtype` with `heads` query heads over `kv_heads` of size `d`;
/// returns the failures.
fn steps(dev: &CudaDevice, dtype: DType, heads: u32, kv_heads: u32, d: u32, rng: &mut Rng) -> Vec<String> {
    let mut seqs: Vec<Sequence> = CTX.iter().map(|&ctx| Sequence::new(dev, dtype, ctx, kv_heads, d)).collect();
    let mut failures = Vec::new();
    for (step, plan) in STEPS.iter().enumerate() {
        let n: u32 = plan.iter().map(|&(_, rows)| rows).sum();
        let spans: Vec<KvSpan> = plan.iter().map(|&(s, rows)| KvSpan { rows, position: seqs[s].filled }).collect();
        let op = Op::KvAttention(Box::new(KvAttentionArgs { rope_base: 1e4, scale: 1.0 / (d as f32).sqrt(), spans }));
        let (qm, km) = (meta(dtype, &[n, heads, d]), meta(dtype, &[n, kv_heads, d]));
        let host = [&qm, &km, &km].map(|m| values(rng, m, Gen::Any));
        let mut metas = vec![&qm, &km, &km];
        for &(s, _) in *plan {
            metas.extend([&seqs[s].meta, &seqs[s].meta]);
        }
        let out = infer(&op, &metas).unwrap();
        let mut cpu_inputs: Vec<(&CpuBuffer, &TensorMeta)> = host.iter().zip([&qm, &km, &km]).collect();
        let uploaded: Vec<CudaBuffer> =
            host.iter().zip([&qm, &km, &km]).map(|(h, m)| dev.upload(m, &h.to_le_bytes()).unwrap()).collect();
        let mut gpu_inputs: Vec<(&CudaBuffer, &TensorMeta)> = uploaded.iter().zip([&qm, &km, &km]).collect();
        for &(s, _) in *plan {
            let seq = &seqs[s];
            cpu_inputs.extend([(&seq.cpu[0], &seq.meta), (&seq.cpu[1], &seq.meta)]);
            gpu_inputs.extend([(&seq.gpu[0], &seq.meta), (&seq.gpu[1], &seq.meta)]);
        }
        // SAFETY: nothing else uses the CPU caches meanwhile, and each is given once.
        let want = unsafe { sluice_backend_cpu::kv_attention(&cpu_inputs, &op, &out) }.unwrap();
        let got = dev.launch(&op, &gpu_inputs, &out).unwrap();
        drop(uploaded);
        let what = format!("{dtype} heads {heads}/{kv_heads} d {d} step {step} {plan:?}");
        let kv_len = plan.iter().map(|&(s, rows)| seqs[s].filled + rows).max().unwrap_or(1);
        let got = CpuBuffer::from_le_bytes(dtype, &dev.download(&got, &out).unwrap());
        if let Err(e) = compare(dtype, u64::from(kv_len.max(d)), &got, &want) {
            failures.push(format!("{what}: output {e}"));
        }
        for &(s, rows) in *plan {
            seqs[s].filled += rows;
        }
        for (s, seq) in seqs.iter().enumerate() {
            let [k, v] =
                [0, 1].map(|i| CpuBuffer::from_le_bytes(dtype, &dev.download(&seq.gpu[i], &seq.meta).unwrap()));
            if let Err(e) = compare(dtype, 1, &k, &seq.cpu[0]) {
                failures.push(format!("{what}: sequence {s}'s k cache {e}"));
            }
            if v.to_le_bytes() != seq.cpu[1].to_le_bytes() {
                failures.push(format!("{what}: sequence {s}'s v cache differs"));
            }
            let written = seq.filled as usize * (kv_heads * d) as usize;
            if k.to_f32_vec()[written..].iter().chain(&v.to_f32_vec()[written..]).any(|&x| x != 0.0) {
                failures.push(format!("{what}: sequence {s}'s caches changed past position {}", seq.filled));
            }
        }
    }
    failures
}

#[test]
fn kv_attention_matches_the_cpu_backend_step_by_step() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(0x6b76_a77e_0000_0001);
    let mut failures = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (heads, kv_heads, d) in [(4, 2, 40), (9, 3, 64)] {
            failures.extend(steps(dev, dtype, heads, kv_heads, d, &mut rng));
        }
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn caches_written_on_another_lane_are_seen_everywhere() {
    let Some(_) = device() else { return };
    let dev = CudaDevice::open(CudaOptions { reserved_sms: 16, ..Default::default() }).expect("a second handle");
    let f = DType::F32;
    let (cm, qm, km) = (meta(f, &[4, 1, 8]), meta(f, &[2, 2, 8]), meta(f, &[2, 1, 8]));
    let mut rng = Rng(0x6b76_1a4e);
    let host = [&qm, &km, &km].map(|m| values(&mut rng, m, Gen::Any));
    let zeros = || CpuBuffer::from_f32_as(f, &[0.0; 32]);
    let cpu_caches = [zeros(), zeros()];
    dev.set_lane(Lane::Whole);
    let caches = [0, 1].map(|i| dev.upload(&cm, &cpu_caches[i].to_le_bytes()).unwrap());
    dev.set_lane(Lane::Reserved);
    let up: Vec<CudaBuffer> =
        host.iter().zip([&qm, &km, &km]).map(|(h, m)| dev.upload(m, &h.to_le_bytes()).unwrap()).collect();
    let op = Op::KvAttention(Box::new(KvAttentionArgs {
        rope_base: 1e4,
        scale: 0.5,
        spans: vec![KvSpan { rows: 2, position: 1 }],
    }));
    let metas = [&qm, &km, &km, &cm, &cm];
    let out = infer(&op, &metas).unwrap();
    let gpu: Vec<(&CudaBuffer, &TensorMeta)> = up.iter().chain(&caches).zip(metas).collect();
    dev.launch(&op, &gpu, &out).unwrap();
    let cpu: Vec<(&CpuBuffer, &TensorMeta)> = host.iter().chain(&cpu_caches).zip(metas).collect();
    // SAFETY: nothing else uses the CPU caches meanwhile, and each is given once.
    unsafe { sluice_backend_cpu::kv_attention(&cpu, &op, &out) }.unwrap();
    dev.set_lane(Lane::Remainder);
    let neg = Op::Unary(sluice_host_api::UnaryOp::Neg);
    let negated = dev.launch(&neg, &[(&caches[1], &cm)], &cm).unwrap();
    let want: Vec<f32> = cpu_caches[1].to_f32_vec().iter().map(|x| -x).collect();
    let read = |b: &CudaBuffer| CpuBuffer::from_le_bytes(f, &dev.download(b, &cm).unwrap()).to_f32_vec();
    assert_eq!(read(&negated), want, "the v cache read by a kernel on a third lane");
    dev.set_lane(Lane::Whole);
    compare(f, 1, &CpuBuffer::from_f32_as(f, &read(&caches[0])), &cpu_caches[0])
        .expect("the k cache on its producer's lane");
    assert_ne!(read(&caches[0]), vec![0.0; 32], "rows were written");
}
