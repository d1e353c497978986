//! Scheduling benchmarks on the CPU device: co-location of a latency tenant with a
//! best-effort tenant under each policy, and the scheduler's own overhead.
//!
//! Co-location: the latency tenant invokes `minilm-embed` (batch 1, one short
//! sentence) with think time between requests, first alone, then next to `gemm-burn`
//! (batch class) saturating the device, under FIFO and under priority with
//! preemption (plus partition where the device has one: the CPU has none). It prints
//! the latency tenant's p50/p99, preemption latency (arrival of its first kernel →
//! that kernel starting, from the scheduler), and the best-effort tenant's GEMM
//! throughput as a fraction of its solo throughput. All modes run in this one process,
//! side by side.
//!
//! Overhead: the same kernel stream (MiniLM-layer-sized GEMMs, bias adds and GELUs)
//! dispatched directly on the device versus through the scheduler, one tenant, no
//! contention.
//!
//! Needs `cargo xtask build-functions` and `cargo xtask fetch-model`; `cargo xtask
//! bench` sets both up. Prints tables; asserts nothing about time.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_host_api::{DType, MatmulArgs, Op, TensorMeta, UnaryOp};
use sluice_runtime::backend::{CpuDevice, Device};
use sluice_runtime::engine::{
    ArtifactSet, Engine, EngineConfig, FunctionImage, FunctionLimits, InvocationContext, IoData, IoTensor,
};
use sluice_runtime::scheduler::{DeviceQueue, MemoryAccount, Policy, PriorityClass, SchedulerConfig, SchedulingInfo};

const LATENCY_REQUESTS: usize = 200;
const THINK_TIME: Duration = Duration::from_millis(15);
const GEMM_SIZE: i64 = 384;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn wasm(name: &str) -> Vec<u8> {
    let path = repo().join(format!("functions/target/wasm32-wasip2/release/{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask build-functions`", path.display()))
}

fn model_dir() -> PathBuf {
    std::env::var_os("SLUICE_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/sluice/models/all-MiniLM-L6-v2"))
}

struct Images {
    minilm: FunctionImage,
    burn: FunctionImage,
}

fn images(engine: &Engine) -> Images {
    let dir = model_dir();
    assert!(dir.join("model.safetensors").is_file(), "no model in {}: run `cargo xtask fetch-model`", dir.display());
    let files: HashMap<String, PathBuf> =
        [("model", "model.safetensors"), ("vocab", "vocab.txt"), ("config", "config.json")]
            .into_iter()
            .map(|(n, f)| (n.to_owned(), dir.join(f)))
            .collect();
    let minilm = engine.compile(&wasm("minilm_embed")).unwrap();
    let burn = engine.compile(&wasm("gemm_burn")).unwrap();
    let weights = MemoryAccount::new("weights", None, None);
    Images {
        minilm: engine
            .prepare("minilm-embed", &minilm, ArtifactSet::new(files, weights), FunctionLimits::default())
            .unwrap(),
        burn: engine.prepare("gemm-burn", &burn, ArtifactSet::empty(), FunctionLimits::default()).unwrap(),
    }
}

fn ctx(queue: &DeviceQueue, tenant: &str, class: PriorityClass) -> InvocationContext {
    InvocationContext {
        queue: queue.clone(),
        account: MemoryAccount::new("invocation", None, None),
        scheduling: SchedulingInfo { tenant: tenant.into(), class, weight: 1 },
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

struct ModeResult {
    p50_ms: f64,
    p99_ms: f64,
    preempt_p99_us: f64,
    gemms_per_s: f64,
}

/// Runs the latency tenant (if `latency`) and the best-effort tenant (if `burn`) on a
/// fresh device with `policy`; the images' ArtifactSets are per device, so each mode
/// gets its own queue and engine images.
fn run_mode(
    engine: &Arc<Engine>,
    policy: Policy,
    latency: bool,
    burn: bool,
    rt: &tokio::runtime::Runtime,
) -> ModeResult {
    let device = CpuDevice::with_threads(device_threads());
    let queue = DeviceQueue::start_with(Box::new(device), SchedulerConfig { policy, ..SchedulerConfig::default() });
    let images = Arc::new(images(engine));
    let text = [IoTensor {
        name: "text".into(),
        shape: vec![1],
        data: IoData::Bytes(vec![b"The quick brown fox jumps over the lazy dog.".to_vec()]),
    }];
    // Warm the weights and the cost model.
    rt.block_on(engine.invoke(&images.minilm, ctx(&queue, "ls", PriorityClass::Latency), &text)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let burner = burn.then(|| {
        let (engine, images, queue, stop) = (engine.clone(), images.clone(), queue.clone(), stop.clone());
        rt.spawn(async move {
            let inputs = [
                IoTensor { name: "duration_ms".into(), shape: vec![1], data: IoData::I64(vec![200]) },
                IoTensor { name: "size".into(), shape: vec![1], data: IoData::I64(vec![GEMM_SIZE]) },
            ];
            let (mut gemms, started) = (0i64, Instant::now());
            while !stop.load(Ordering::Relaxed) {
                let out = engine.invoke(&images.burn, ctx(&queue, "be", PriorityClass::Batch), &inputs).await.unwrap();
                let IoData::I64(g) = &out.outputs[0].data else { unreachable!() };
                gemms += g[0];
            }
            gemms as f64 / started.elapsed().as_secs_f64()
        })
    });
    let mut latencies = Vec::new();
    if latency {
        rt.block_on(async {
            for _ in 0..LATENCY_REQUESTS {
                tokio::time::sleep(THINK_TIME).await;
                let started = Instant::now();
                engine.invoke(&images.minilm, ctx(&queue, "ls", PriorityClass::Latency), &text).await.unwrap();
                latencies.push(started.elapsed().as_secs_f64() * 1e3);
            }
        });
    } else {
        std::thread::sleep(THINK_TIME * LATENCY_REQUESTS as u32 * 2);
    }
    stop.store(true, Ordering::Relaxed);
    let gemms_per_s = burner.map(|h| rt.block_on(h).unwrap()).unwrap_or(0.0);
    let status = queue.status_blocking();
    latencies.sort_by(f64::total_cmp);
    let (p50_ms, p99_ms) =
        if latencies.is_empty() { (0.0, 0.0) } else { (percentile(&latencies, 0.5), percentile(&latencies, 0.99)) };
    ModeResult { p50_ms, p99_ms, preempt_p99_us: status.preemption_latency.p99_us, gemms_per_s }
}

/// Cores the CPU device's kernels may use: all but one, which stays with the host
/// (guests' own code), as `sluice serve` does; `SLUICE_BENCH_DEVICE_THREADS` overrides.
fn device_threads() -> usize {
    std::env::var("SLUICE_BENCH_DEVICE_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1).max(1))
}

fn colocation(rt: &tokio::runtime::Runtime) {
    let engine = Arc::new(Engine::new(EngineConfig::default()).unwrap());
    eprintln!("scheduling bench: solo runs …");
    let solo_ls = run_mode(&engine, Policy::Priority, true, false, rt);
    let solo_be = run_mode(&engine, Policy::Priority, false, true, rt);
    eprintln!("scheduling bench: co-located, FIFO …");
    let fifo = run_mode(&engine, Policy::Fifo, true, true, rt);
    eprintln!("scheduling bench: co-located, priority + preemption …");
    let prio = run_mode(&engine, Policy::Priority, true, true, rt);
    println!();
    println!(
        "co-location on the CPU device: latency tenant minilm-embed f32 batch 1 ({LATENCY_REQUESTS} requests, {} ms think time), \
         best-effort tenant gemm-burn {GEMM_SIZE}³ f32; device kernels on {} core(s)",
        THINK_TIME.as_millis(),
        device_threads()
    );
    println!(
        "{:<34} {:>9} {:>9} {:>10} {:>14} {:>12}",
        "mode", "LS p50", "LS p99", "p99/solo", "preempt p99", "BE thruput"
    );
    let row = |name: &str, r: &ModeResult, ls: bool, be: bool| {
        let ls_cols = if ls {
            format!(
                "{:>7.2}ms {:>7.2}ms {:>9.2}× {:>12.0}µs",
                r.p50_ms,
                r.p99_ms,
                r.p99_ms / solo_ls.p99_ms,
                r.preempt_p99_us
            )
        } else {
            format!("{:>9} {:>9} {:>10} {:>14}", "—", "—", "—", "—")
        };
        let be_col = if be {
            format!("{:>11.0}%", 100.0 * r.gemms_per_s / solo_be.gemms_per_s)
        } else {
            format!("{:>12}", "—")
        };
        println!("{name:<34} {ls_cols} {be_col}");
    };
    row("latency tenant alone", &solo_ls, true, false);
    println!(
        "{:<34} {:>9} {:>9} {:>10} {:>14} {:>9.1}/s",
        "best-effort alone", "—", "—", "—", "—", solo_be.gemms_per_s
    );
    row("co-located, FIFO (no policy)", &fifo, true, true);
    row("co-located, priority + preemption", &prio, true, true);
    println!("{:<34} n/a on the CPU device (no spatial partitions)", "co-located, + SM partition");
}

/// The kernel stream of the overhead benchmark: (op, which inputs) per kernel.
struct Stream {
    x: TensorMeta,
    w: TensorMeta,
    b: TensorMeta,
    y: TensorMeta,
    ops: Vec<(Op, usize)>,
}

const ROUNDS: usize = 200;
const OVERHEAD_REPS: usize = 7;

fn stream() -> Stream {
    let meta = |s: &[u32]| TensorMeta::new(DType::F32, s.to_vec()).unwrap();
    Stream {
        x: meta(&[128, 384]),
        w: meta(&[384, 384]),
        b: meta(&[384]),
        y: meta(&[128, 384]),
        ops: vec![
            (Op::Matmul(MatmulArgs { transpose_a: false, transpose_b: true }), 2),
            (Op::Binary(sluice_host_api::BinaryOp::Add), 1),
            (Op::Unary(UnaryOp::Gelu), 0),
        ],
    }
}

fn bytes(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (((i % 13) as f32 - 6.0) / 50.0).to_le_bytes()).collect()
}

/// Direct dispatch: the device called in a loop on this thread.
fn direct(device: &CpuDevice, s: &Stream) -> Duration {
    let up = |m: &TensorMeta| device.upload(m, &bytes(m.numel())).unwrap();
    let (x, w, b) = (up(&s.x), up(&s.w), up(&s.b));
    let started = Instant::now();
    let mut cur = x;
    for _ in 0..ROUNDS {
        for (op, which) in &s.ops {
            cur = match which {
                2 => device.launch(op, &[(&cur, &s.x), (&w, &s.w)], &s.y).unwrap(),
                1 => device.launch(op, &[(&cur, &s.y), (&b, &s.b)], &s.y).unwrap(),
                _ => device.launch(op, &[(&cur, &s.y)], &s.y).unwrap(),
            };
        }
    }
    device.download(&cur, &s.y).unwrap();
    started.elapsed()
}

/// The same stream through one invocation's queue of the scheduler.
fn scheduled(queue: &DeviceQueue, s: &Stream) -> Duration {
    let inv = queue.begin(SchedulingInfo { tenant: "t".into(), class: PriorityClass::Latency, weight: 1 });
    let up = |m: &TensorMeta| {
        let id = queue.new_tensor_id();
        queue.upload(inv.id(), id, m.clone(), bytes(m.numel()));
        id
    };
    let (xi, wi, bi) = (up(&s.x), up(&s.w), up(&s.b));
    let _ = queue.read_blocking(bi, s.b.clone());
    let started = Instant::now();
    let mut cur = xi;
    for _ in 0..ROUNDS {
        for (op, which) in &s.ops {
            let id = queue.new_tensor_id();
            let inputs = match which {
                2 => vec![(cur, s.x.clone()), (wi, s.w.clone())],
                1 => vec![(cur, s.y.clone()), (bi, s.b.clone())],
                _ => vec![(cur, s.y.clone())],
            };
            queue.launch(inv.id(), id, op.clone(), inputs, s.y.clone());
            if cur != xi {
                queue.free(cur);
            }
            cur = id;
        }
    }
    queue.read_blocking(cur, s.y.clone()).unwrap();
    started.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Direct dispatch versus the scheduler, one tenant, no contention; repetitions
/// interleaved so both see the same machine.
fn overhead() {
    let s = stream();
    let threads = device_threads();
    let device = CpuDevice::with_threads(threads);
    let queue = DeviceQueue::start(Box::new(CpuDevice::with_threads(threads)));
    let (mut d, mut q) = (Vec::new(), Vec::new());
    for _ in 0..OVERHEAD_REPS {
        d.push(direct(&device, &s));
        q.push(scheduled(&queue, &s));
    }
    let (direct, scheduled) = (median(d), median(q));
    let kernels = (ROUNDS * s.ops.len()) as f64;
    println!();
    println!(
        "scheduler overhead, one tenant, no contention: {ROUNDS} × (GEMM 128×384×384 + bias add + GELU), \
         median of {OVERHEAD_REPS} interleaved runs, {threads} device core(s)"
    );
    println!("{:<28} {:>12} {:>14}", "dispatch", "total", "per kernel");
    println!(
        "{:<28} {:>10.1}ms {:>12.1}µs",
        "direct (device in a loop)",
        direct.as_secs_f64() * 1e3,
        direct.as_secs_f64() * 1e6 / kernels
    );
    println!(
        "{:<28} {:>10.1}ms {:>12.1}µs",
        "through the scheduler",
        scheduled.as_secs_f64() * 1e3,
        scheduled.as_secs_f64() * 1e6 / kernels
    );
    println!(
        "throughput overhead: {:+.2}% (target ≤ 2%)",
        100.0 * (scheduled.as_secs_f64() / direct.as_secs_f64() - 1.0)
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    overhead();
    colocation(&rt);
}
