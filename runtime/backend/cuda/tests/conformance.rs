//! CUDA vs CPU conformance: every op of the catalog (the fused linear, add-layer-norm
//! and attention included), in every dtype `infer` accepts, on random inputs, run on the
//! GPU and on the CPU reference backend and compared.
//!
//! Tolerance: |cuda - cpu| / max(|cpu|, 1) ≤ max(1e-5, K·ε) for f32 (TF32 off), where K is
//! the number of terms an output element sums (a GEMM's inner dimension, a row's length;
//! [`summed_terms`]) and ε = 2^-23: the two backends sum in different orders, and the
//! rounding error of a K-term f32 sum grows with K. ≤ 1e-2 for f16/bf16 (f32 accumulation;
//! the output's rounding dominates). Integers must match exactly; no NaN may appear
//! (inputs are chosen so none should).
//!
//! Without a CUDA driver every test prints "skipping (CUDA): no CUDA driver found ...",
//! records the skip in the run's skip log (`tests/src/skip.rs`) and passes, unless `SLUICE_REQUIRE_CUDA=1`, which turns the skip into a failure (the H200
//! run sets it). `SLUICE_KERNEL_CACHE_DIR` sets the kernel cache directory.
//!
//! `conformance/rows_and_lanes.rs` covers row blocks (matmul and linear) and a device
//! partitioned with green contexts; `conformance/uploads.rs` large uploads through the
//! stager; `conformance/quant.rs` the block-quantized weights (Q4_1, Q8_0); `conformance/defects.rs` the GPU defects of issue 11; `conformance/write_rows.rs` the in-place row write of a KV cache; `conformance/kv_attention.rs` kv-attention
//! (RoPE, cache writes and attention of several sequences in one op) step by step.

use std::sync::OnceLock;

use sluice_backend_cpu::CpuBuffer;
use sluice_backend_cuda::{CudaBuffer, CudaDevice, CudaOptions};
use sluice_host_api::{
    BinaryOp, Conv2dArgs, DType, MatmulArgs, Op, Pool2dArgs, PoolKind, ReduceArgs, ReduceOp, SampleArgs, SliceArgs,
    TensorMeta, UnaryOp, infer,
};

#[path = "conformance/defects.rs"]
mod defects;
#[path = "conformance/kv_attention.rs"]
mod kv_attention;
#[path = "conformance/quant.rs"]
mod quant;
#[path = "conformance/rows_and_lanes.rs"]
mod rows_and_lanes;
#[path = "../../../../tests/src/skip.rs"]
mod skip;
#[path = "conformance/uploads.rs"]
mod uploads;
#[path = "conformance/write_rows.rs"]
mod write_rows;

/// The shared device, or `None` (after printing why) when the test should skip.
fn device() -> Option<&'static CudaDevice> {
    static DEV: OnceLock<Result<CudaDevice, String>> = OnceLock::new();
    let dev = DEV.get_or_init(|| {
        let opts = CudaOptions {
            ordinal: 0,
            kernel_cache_dir: std::env::var_os("SLUICE_KERNEL_CACHE_DIR").map(Into::into),
            allow_tf32: false,
            reserved_sms: 0,
        };
        CudaDevice::open(opts).map_err(|e| e.to_string())
    });
    match dev {
        Ok(d) => Some(d),
        Err(e) if std::env::var("SLUICE_REQUIRE_CUDA").as_deref() == Ok("1") => {
            panic!("SLUICE_REQUIRE_CUDA=1 but the CUDA device cannot be opened: {e}")
        }
        Err(e) => {
            skip::skip("CUDA", e);
            None
        }
    }
}

/// xorshift64*: deterministic inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// How an input's values are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Gen {
    /// Floats in [-2, 2), integers in their usual small range.
    Any,
    /// Floats in [0.1, 2.1) (log, sqrt, rsqrt).
    Positive,
    /// Magnitude ≥ 0.5, never 0 (divisors).
    NonZero,
    /// Integers in 0..n (embedding ids).
    Index(u32),
}

fn values(rng: &mut Rng, meta: &TensorMeta, g: Gen) -> CpuBuffer {
    let v: Vec<f32> = (0..meta.numel())
        .map(|_| {
            let u = rng.unit();
            match (g, meta.dtype) {
                (Gen::Index(n), _) => ((u * n as f32) as u32).min(n - 1) as f32,
                (Gen::Positive, _) => 0.1 + 2.0 * u,
                (Gen::NonZero, d) if d.is_float() => (0.5 + 1.5 * u) * if rng.next() & 1 == 0 { 1.0 } else { -1.0 },
                (Gen::NonZero, DType::U8) => (1.0 + u * 254.0).floor(),
                (Gen::NonZero, _) => (1.0 + u * 60.0).floor() * if rng.next() & 1 == 0 { 1.0 } else { -1.0 },
                (Gen::Any, d) if d.is_float() => 4.0 * u - 2.0,
                (Gen::Any, DType::U8) => (u * 256.0).floor().min(255.0),
                (Gen::Any, _) => (u * 201.0).floor() - 100.0,
            }
        })
        .collect();
    CpuBuffer::from_f32_as(meta.dtype, &v)
}

struct Case {
    op: Op,
    shapes: Vec<Vec<u32>>,
    gens: Vec<Gen>,
    /// dtypes of inputs after the first (None: same as the first).
    other_dtype: Option<DType>,
}

fn case(op: Op, shapes: &[&[u32]]) -> Case {
    Case {
        op,
        shapes: shapes.iter().map(|s| s.to_vec()).collect(),
        gens: vec![Gen::Any; shapes.len()],
        other_dtype: None,
    }
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let mm = |ta, tb| Op::Matmul(MatmulArgs { transpose_a: ta, transpose_b: tb });
    v.push(case(mm(false, false), &[&[3, 33], &[33, 4]]));
    v.push(case(mm(true, false), &[&[33, 3], &[33, 4]]));
    v.push(case(mm(false, true), &[&[3, 33], &[4, 33]]));
    v.push(case(mm(true, true), &[&[33, 3], &[4, 33]]));
    v.push(case(mm(false, false), &[&[2, 3, 17], &[17, 5]]));
    v.push(case(mm(false, true), &[&[2, 3, 17], &[2, 5, 17]]));
    v.push(case(mm(true, false), &[&[17, 3], &[4, 17, 5]]));
    v.push(case(mm(false, false), &[&[2, 1, 3, 17], &[3, 17, 5]]));
    v.push(case(mm(false, false), &[&[2, 3, 0], &[0, 5]]));
    for b in BinaryOp::ALL {
        for shapes in [&[&[3u32, 4][..], &[3, 4]][..], &[&[2, 3, 4], &[4]], &[&[2, 1, 4], &[3, 1]], &[&[1], &[3, 4]]] {
            let mut c = case(Op::Binary(b), shapes);
            if b == BinaryOp::Div {
                c.gens[1] = Gen::NonZero;
            }
            v.push(c);
        }
    }
    for u in UnaryOp::ALL {
        let mut c = case(Op::Unary(u), &[&[3, 37]]);
        if matches!(u, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt) {
            c.gens[0] = Gen::Positive;
        }
        v.push(c);
    }
    v.push(case(Op::Affine { scale: 0.5, bias: -1.25 }, &[&[3, 37]]));
    for to in DType::ALL {
        v.push(case(Op::Cast(to), &[&[50]]));
    }
    v.push(case(Op::Softmax { scale: 1.0 }, &[&[2, 3, 37]]));
    v.push(case(Op::Softmax { scale: 0.125 }, &[&[2, 3, 37], &[2, 1, 37]]));
    v.push(case(Op::Softmax { scale: 0.5 }, &[&[2, 3, 37], &[3, 1]]));
    v.push(case(Op::Softmax { scale: 0.3 }, &[&[4, 1500]]));
    v.push(case(Op::LayerNorm { eps: 1e-5 }, &[&[4, 37], &[37], &[37]]));
    v.push(case(Op::LayerNorm { eps: 1e-12 }, &[&[2, 3, 384], &[384], &[384]]));
    for ids in [DType::I32, DType::I64] {
        let mut c = case(Op::Embedding, &[&[11, 7], &[2, 3]]);
        c.gens[1] = Gen::Index(11);
        c.other_dtype = Some(ids);
        v.push(c);
    }
    for op in ReduceOp::ALL {
        for axis in 0..3 {
            for keep_dim in [false, true] {
                v.push(case(Op::Reduce(ReduceArgs { op, axis, keep_dim }), &[&[3, 5, 7]]));
            }
        }
        v.push(case(Op::Reduce(ReduceArgs { op, axis: 1, keep_dim: false }), &[&[2, 1500]]));
    }
    v.push(case(Op::Reshape(vec![12]), &[&[3, 4]]));
    v.push(case(Op::Permute(vec![2, 0, 1]), &[&[2, 3, 4]]));
    v.push(case(Op::Permute(vec![0, 2, 1]), &[&[2, 3, 4]]));
    v.push(case(Op::Slice(SliceArgs { axis: 1, start: 1, end: 3 }), &[&[2, 5, 3]]));
    v.push(case(Op::Slice(SliceArgs { axis: 0, start: 1, end: 2 }), &[&[2, 5, 3]]));
    v.push(case(Op::Concat { axis: 1 }, &[&[2, 3], &[2, 1], &[2, 4]]));
    v.push(case(Op::Concat { axis: 0 }, &[&[1, 3], &[2, 3]]));
    let conv = Conv2dArgs { stride: (2, 1), padding: (1, 0), dilation: (1, 2), groups: 2 };
    v.push(case(Op::Conv2d(conv), &[&[2, 4, 7, 6], &[6, 2, 3, 3], &[6]]));
    let plain = Conv2dArgs { stride: (1, 1), padding: (1, 1), dilation: (1, 1), groups: 1 };
    v.push(case(Op::Conv2d(plain), &[&[3, 3, 5, 5], &[4, 3, 3, 3]]));
    v.push(case(Op::Conv2d(Conv2dArgs { padding: (0, 0), ..plain }), &[&[2, 8, 4, 4], &[5, 8, 1, 1], &[5]]));
    for kind in [PoolKind::Max, PoolKind::Avg] {
        let p = Pool2dArgs { kind, kernel: (3, 2), stride: (2, 2), padding: (1, 1) };
        v.push(case(Op::Pool2d(p), &[&[2, 3, 7, 6]]));
    }
    v.extend(fused_cases());
    v
}

/// The fused ops: GEMM + epilogue linears (both weight layouts, every activation, with
/// and without bias, MiniLM's feed-forward shape), add-layer-norm, and attention (one
/// and 12 heads, batches, masks of several broadcast shapes, no keys).
fn fused_cases() -> Vec<Case> {
    let mut v = Vec::new();
    let lin = |transpose_w, activation| Op::Linear { transpose_w, activation };
    for tw in [false, true] {
        let w: &[u32] = if tw { &[20, 33] } else { &[33, 20] };
        v.push(case(lin(tw, None), &[&[2, 3, 33], w]));
        v.push(case(lin(tw, None), &[&[2, 3, 33], w, &[20]]));
        v.push(case(lin(tw, Some(UnaryOp::Gelu)), &[&[3, 33], w, &[20]]));
        v.push(case(lin(tw, Some(UnaryOp::Relu)), &[&[33], w]));
    }
    v.push(case(lin(true, Some(UnaryOp::Gelu)), &[&[1, 9, 384], &[1536, 384], &[1536]]));
    v.push(case(lin(false, None), &[&[4, 0], &[0, 6], &[6]]));
    // Every activation through the epilogue; k = 1 keeps the pre-activation exact in
    // every dtype, so only the activation itself may differ.
    for act in UnaryOp::ALL {
        let mut c = case(lin(true, Some(act)), &[&[3, 1], &[5, 1], &[5]]);
        if matches!(act, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt) {
            c.gens = vec![Gen::Positive; 3];
        }
        v.push(c);
    }
    v.push(case(Op::AddLayerNorm { eps: 1e-5 }, &[&[4, 37], &[4, 37], &[37], &[37]]));
    v.push(case(Op::AddLayerNorm { eps: 1e-12 }, &[&[2, 3, 384], &[2, 3, 384], &[384], &[384]]));
    v.push(case(Op::RmsNorm { eps: 1e-5 }, &[&[4, 37], &[37]]));
    v.push(case(Op::Rope { base: 1e5, offset: 0 }, &[&[5, 3, 64]]));
    v.push(case(Op::Argmax, &[&[3, 1037]]));
    // SmolLM2's shapes: a prompt of 7 into an empty cache, a decode step at position 40.
    v.push(case(Op::GqaAttention { kv_len: 7, scale: 0.125 }, &[&[7, 9, 64], &[48, 3, 64], &[48, 3, 64]]));
    v.push(case(Op::GqaAttention { kv_len: 41, scale: 0.125 }, &[&[1, 9, 64], &[48, 3, 64], &[48, 3, 64]]));
    v.push(case(Op::GqaAttention { kv_len: 5, scale: 0.3 }, &[&[2, 4, 40], &[6, 4, 40], &[6, 4, 40]]));
    v.push(case(Op::Argmax, &[&[49152]]));
    v.push(case(Op::Argmax, &[&[2, 2, 1]]));
    // Sampling: the same tokens as the CPU backend, bit for bit (top-k, top-p, both, none).
    let sample = |temperature, top_k, top_p, seed| Op::Sample(SampleArgs { temperature, top_k, top_p, seed });
    v.push(case(sample(1.0, 0, 1.0, 1), &[&[64, 1000]]));
    v.push(case(sample(0.7, 40, 1.0, 2), &[&[64, 1000]]));
    v.push(case(sample(1.3, 0, 0.9, 3), &[&[64, 1000]]));
    v.push(case(sample(0.8, 50, 0.95, u64::MAX), &[&[2, 49152]]));
    v.push(case(sample(1.0, 1, 1.0, 4), &[&[8, 33]]));
    v.push(case(Op::Rope { base: 1e4, offset: 8000 }, &[&[2, 1, 2, 6]]));
    v.push(case(Op::RmsNorm { eps: 1e-5 }, &[&[2, 3, 576], &[2, 3, 576], &[576]]));
    let att = |heads, scale| Op::Attention { heads, scale };
    v.push(case(att(1, 0.5), &[&[1, 1, 8], &[1, 1, 8], &[1, 1, 8]]));
    v.push(case(att(3, 0.5), &[&[2, 3, 12], &[2, 5, 12], &[2, 5, 12], &[2, 1, 1, 5]]));
    v.push(case(att(2, 0.4), &[&[2, 4, 6], &[2, 5, 6], &[2, 5, 6], &[4, 5]]));
    v.push(case(att(2, 0.4), &[&[2, 4, 6], &[2, 5, 6], &[2, 5, 6], &[2, 2, 4, 5]]));
    v.push(case(att(12, 0.176_776_7), &[&[1, 9, 384], &[1, 9, 384], &[1, 9, 384], &[1, 1, 1, 9]]));
    v.push(case(att(12, 0.176_776_7), &[&[3, 17, 384], &[3, 17, 384], &[3, 17, 384]]));
    v.push(case(att(2, 1.0), &[&[1, 2, 4], &[1, 0, 4], &[1, 0, 4]]));
    v
}

/// The largest relative error allowed for outputs of `d` that each sum `terms` products.
fn tolerance(d: DType, terms: u64) -> f32 {
    match d {
        DType::F32 => (terms as f32 * f32::EPSILON).max(1e-5),
        DType::F16 | DType::BF16 => 1e-2,
        _ => 0.0,
    }
}

/// How many terms one output element of `op` over inputs of `shapes` sums: a GEMM's
/// inner dimension (attention: the larger of its two GEMMs'), a row's length for the row
/// kernels, a window's size for pooling; 1 for elementwise ops.
fn summed_terms(op: &Op, shapes: &[Vec<u32>]) -> u64 {
    let last = |s: &Vec<u32>| s.last().copied().unwrap_or(1) as u64;
    let second_last = |s: &Vec<u32>| s.iter().rev().nth(1).copied().unwrap_or(1) as u64;
    match op {
        Op::Matmul(args) => {
            if args.transpose_a {
                second_last(&shapes[0])
            } else {
                last(&shapes[0])
            }
        }
        Op::Linear { .. }
        | Op::Softmax { .. }
        | Op::LayerNorm { .. }
        | Op::AddLayerNorm { .. }
        | Op::RmsNorm { .. } => last(&shapes[0]),
        Op::GqaAttention { kv_len, .. } => (*kv_len as u64).max(last(&shapes[0])),
        Op::Attention { heads, .. } => (last(&shapes[0]) / (*heads).max(1) as u64).max(second_last(&shapes[1])),
        Op::Conv2d(_) => shapes[1].iter().skip(1).map(|&d| d as u64).product(),
        Op::Reduce(args) => shapes[0].get(args.axis as usize).copied().unwrap_or(1) as u64,
        Op::Pool2d(args) => (args.kernel.0 * args.kernel.1) as u64,
        _ => 1,
    }
    .max(1)
}

/// Compares the two outputs, each element a sum of `terms` products ([`tolerance`]); the
/// error message names the worst element.
fn compare(dtype: DType, terms: u64, cuda: &CpuBuffer, cpu: &CpuBuffer) -> Result<f32, String> {
    if !dtype.is_float() {
        return if cuda.to_le_bytes() == cpu.to_le_bytes() {
            Ok(0.0)
        } else {
            Err(format!("integers differ: cuda {:?} vs cpu {:?}", cuda.to_f32_vec(), cpu.to_f32_vec()))
        };
    }
    let (g, w) = (cuda.to_f32_vec(), cpu.to_f32_vec());
    let mut worst = (0.0f32, 0usize);
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        if a.is_nan() {
            return Err(format!("NaN at element {i} (cpu {b})"));
        }
        let err = if a == b { 0.0 } else { (a - b).abs() / b.abs().max(1.0) };
        if err.is_nan() || err > worst.0 {
            worst = (if err.is_nan() { f32::INFINITY } else { err }, i);
        }
    }
    if worst.0 <= tolerance(dtype, terms) {
        Ok(worst.0)
    } else {
        let i = worst.1;
        Err(format!("element {i}: cuda {} vs cpu {} (rel err {:e})", g[i], w[i], worst.0))
    }
}

/// Runs one case in one dtype on both backends; `None` if `infer` refuses it.
fn run_case(dev: &CudaDevice, c: &Case, dtype: DType, rng: &mut Rng) -> Option<Result<f32, String>> {
    let metas: Vec<TensorMeta> = c
        .shapes
        .iter()
        .enumerate()
        .map(|(i, s)| TensorMeta::new(if i == 0 { dtype } else { c.other_dtype.unwrap_or(dtype) }, s.clone()).unwrap())
        .collect();
    let refs: Vec<&TensorMeta> = metas.iter().collect();
    let out = infer(&c.op, &refs).ok()?;
    let host: Vec<CpuBuffer> = metas.iter().zip(&c.gens).map(|(m, &g)| values(rng, m, g)).collect();
    let want = sluice_backend_cpu::launch(&c.op, &host.iter().zip(&metas).collect::<Vec<_>>(), &out);
    let want = match want {
        Ok(w) => w,
        Err(e) => return Some(Err(format!("cpu backend failed: {e}"))),
    };
    let run = || -> Result<CpuBuffer, String> {
        let bufs: Vec<CudaBuffer> = host
            .iter()
            .zip(&metas)
            .map(|(h, m)| dev.upload(m, &h.to_le_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let inputs: Vec<(&CudaBuffer, &TensorMeta)> = bufs.iter().zip(&metas).collect();
        let y = dev.launch(&c.op, &inputs, &out).map_err(|e| e.to_string())?;
        let bytes = dev.download(&y, &out).map_err(|e| e.to_string())?;
        Ok(CpuBuffer::from_le_bytes(out.dtype, &bytes))
    };
    Some(run().and_then(|got| compare(out.dtype, summed_terms(&c.op, &c.shapes), &got, &want)))
}

#[test]
fn every_op_matches_the_cpu_backend() {
    let Some(dev) = device() else { return };
    println!(
        "device: {} sm_{}{} ({} SMs), driver {}",
        dev.name(),
        dev.compute_capability().0,
        dev.compute_capability().1,
        dev.sm_count(),
        dev.driver_version()
    );
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let (mut passed, mut failures) = (0, Vec::new());
    let mut ops_seen = std::collections::BTreeSet::new();
    for c in cases() {
        for dtype in DType::ALL {
            let Some(r) = run_case(dev, &c, dtype, &mut rng) else {
                continue;
            };
            ops_seen.insert(c.op.name());
            let what = format!("{:?} {dtype} {:?}", c.op, c.shapes);
            match r {
                Ok(err) => {
                    passed += 1;
                    println!("ok   {what} max rel err {err:.2e}");
                }
                Err(e) => {
                    println!("FAIL {what}: {e}");
                    failures.push(format!("{what}: {e}"));
                }
            }
        }
    }
    println!("{passed} passed, {} failed, ops covered: {ops_seen:?}", failures.len());
    assert_eq!(ops_seen.len(), 23, "every op family must be exercised");
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn upload_download_round_trips_every_dtype() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(7);
    for d in DType::ALL {
        for shape in [vec![0], vec![1], vec![3, 1000]] {
            let meta = TensorMeta::new(d, shape).unwrap();
            let bytes = values(&mut rng, &meta, Gen::Any).to_le_bytes();
            let buf = dev.upload(&meta, &bytes).unwrap();
            assert_eq!(dev.download(&buf, &meta).unwrap(), bytes, "{d} {:?}", meta.shape);
        }
    }
}

#[test]
fn memory_returns_to_the_pool() {
    let Some(dev) = device() else { return };
    let meta = TensorMeta::new(DType::F32, vec![1000, 1000]).unwrap();
    let bytes = vec![0u8; meta.byte_len()];
    let op = Op::Unary(UnaryOp::Relu);
    for _ in 0..5 {
        let x = dev.upload(&meta, &bytes).unwrap();
        let y = dev.launch(&op, &[(&x, &meta)], &meta).unwrap();
        dev.download(&y, &meta).unwrap();
    }
    let s = dev.memory_stats();
    assert!(s.cache_hits >= 8, "repeated same-size allocations come from the cache: {s:?}");
    assert!(s.cached >= 2 * meta.byte_len() as u64, "{s:?}");
    println!("{s:?}");
}

#[test]
fn kernel_cache_survives_a_restart() {
    let Some(_) = device() else { return };
    let dir = std::env::temp_dir().join(format!("sluice-kcache-{}", std::process::id()));
    let open = || CudaDevice::open(CudaOptions { kernel_cache_dir: Some(dir.clone()), ..Default::default() }).unwrap();
    let t0 = std::time::Instant::now();
    let modules = sluice_backend_cuda::kernels::Module::ALL.len();
    assert_eq!(open().warm_up().unwrap(), modules);
    let cold = t0.elapsed();
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(files, modules, "one CUBIN per module");
    let t1 = std::time::Instant::now();
    open().warm_up().unwrap();
    let warm = t1.elapsed();
    println!("kernel modules: cold {cold:?} (NVRTC), warm {warm:?} (disk cache)");
    assert!(warm < cold, "loading from the disk cache must be faster than compiling");
    std::fs::remove_dir_all(&dir).unwrap();
}
