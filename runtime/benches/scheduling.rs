//! Scheduling benchmarks on the CPU device (default) or the GPU
//! (`SLUICE_BENCH_DEVICE=cuda`): co-location of a latency tenant with a best-effort
//! tenant under each policy, and the scheduler's own overhead.
//!
//! Co-location: the latency tenant invokes `minilm-embed` (batch 1, one short
//! sentence) with think time between requests, first alone, then next to `gemm-burn`
//! (batch class) saturating the device, under FIFO and under priority with
//! preemption, and priority with preemption plus an SM partition (a green context of
//! `SLUICE_BENCH_RESERVED_SMS` SMs, default 16, for the latency tenant; the CPU has
//! none); on the GPU, the last two again with a 50 ms latency hold (best-effort work
//! stays sliced, or on the remainder, between the latency tenant's requests). It prints
//! the latency tenant's p50/p99, preemption latency (arrival of its first kernel →
//! that kernel starting, from the scheduler), and the best-effort tenant's GEMM
//! throughput as a fraction of its solo throughput. All modes run in this one process,
//! side by side. On CUDA the latency tenant runs f16 (`precision` input), the
//! best-effort tenant 8192³ bf16 GEMMs (`size`, `dtype` inputs) from two concurrent
//! invocations, and each result also prints as a JSON line (`{"bench":"sluice-colocation",…}`).
//!
//! On the CPU device, when `cargo xtask fetch-llm`'s model and the built `smollm2-chat`
//! are there, one more row: the latency tenant beside a streaming generation as the
//! best-effort tenant (SmolLM2 generating to a streaming caller, batch class, priority
//! with preemption), its throughput in tokens per second against the generation alone.
//!
//! Overhead: the same kernel stream (MiniLM-layer-sized GEMMs, bias adds and GELUs)
//! dispatched directly on the device versus through the scheduler, one tenant, no
//! contention.
//!
//! Needs `cargo xtask build-functions` and `cargo xtask fetch-model`; `cargo xtask
//! bench` sets both up. Prints tables; asserts nothing about time.

mod common;
#[path = "scheduling/overhead.rs"]
mod overhead;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use sluice_runtime::device::{Device, DeviceChoice};
use sluice_runtime::engine::{
    ArtifactSet, CallerLink, Cancel, Engine, EngineConfig, FunctionImage, FunctionLimits, IoData, IoTensor,
    chunk_channel, default_room,
};
use sluice_runtime::scheduler::{DeviceQueue, MemoryAccount, Policy, PriorityClass, SchedulerConfig};

use common::{ctx, percentile};

const THINK_TIME: Duration = Duration::from_millis(15);

/// What the co-location runs on each device.
struct Setup {
    device: DeviceChoice,
    /// The GPU configuration (on CUDA, or dry-run on the CPU: `SLUICE_BENCH_GPU_PATH=1`).
    gpu: bool,
    /// Latency requests per mode.
    requests: usize,
    /// `precision` input of the latency tenant (`None`: the function's f32 default).
    precision: Option<&'static str>,
    gemm_size: i64,
    /// `dtype` input of the best-effort tenant (`None`: f32).
    gemm_dtype: Option<&'static str>,
    /// `duration_ms` of one gemm-burn invocation, and how many invoke concurrently (so
    /// one's set-up — generating and uploading its matrix — never leaves the device idle).
    burn_ms: i64,
    burners: usize,
    /// How long the best-effort tenant runs alone.
    solo_window: Duration,
    /// Linear memory of gemm-burn (an 8192² f32 matrix is 256 MiB).
    burn_memory: usize,
    /// Longest latency series of one mode (GPU: 30 s, so a pathological mode cannot eat
    /// the device check's time; fewer requests are then reported).
    mode_cap: Option<Duration>,
    /// SMs reserved for the latency tenant in the partition mode.
    reserved_sms: u32,
}

impl Setup {
    /// The configuration for `device`; `SLUICE_BENCH_REQUESTS` and
    /// `SLUICE_BENCH_GEMM_SIZE` override the request count and the GEMM size.
    fn new(device: DeviceChoice) -> Setup {
        let gpu = common::gpu_path(device);
        let requests = common::env_usize("SLUICE_BENCH_REQUESTS", if gpu { 400 } else { 200 }).max(1);
        let gemm_size = common::env_usize("SLUICE_BENCH_GEMM_SIZE", if gpu { 8192 } else { 384 }) as i64;
        let reserved_sms = common::env_usize("SLUICE_BENCH_RESERVED_SMS", 16) as u32;
        if gpu {
            Setup {
                device,
                gpu,
                requests,
                precision: Some("f16"),
                gemm_size,
                gemm_dtype: Some("bf16"),
                burn_ms: 1000,
                burners: 2,
                solo_window: THINK_TIME * requests as u32,
                burn_memory: 1 << 30,
                mode_cap: Some(Duration::from_secs(30)),
                reserved_sms,
            }
        } else {
            Setup {
                device,
                gpu,
                requests,
                precision: None,
                gemm_size,
                gemm_dtype: None,
                burn_ms: 200,
                burners: 1,
                solo_window: THINK_TIME * requests as u32 * 2,
                burn_memory: FunctionLimits::default().sandbox.memory_bytes,
                mode_cap: None,
                reserved_sms,
            }
        }
    }

    fn cuda(&self) -> bool {
        self.gpu
    }

    /// A fresh device; with `partition`, one with SMs reserved for latency work.
    fn open(&self, partition: bool) -> Box<dyn Device> {
        let reserved = if partition { self.reserved_sms } else { 0 };
        common::open_partitioned("scheduling bench", self.device, Some(device_threads()), reserved)
    }
}

struct Images {
    minilm: FunctionImage,
    burn: FunctionImage,
    /// `smollm2-chat` with its GGUF, on the CPU device when both are there.
    chat: Option<FunctionImage>,
}

/// What the best-effort tenant runs.
#[derive(Clone, Copy, PartialEq)]
enum Burner {
    /// `gemm-burn`: back-to-back GEMMs (throughput in GEMMs per second).
    Gemm,
    /// `smollm2-chat` generating 32 greedy tokens at a time to a streaming caller
    /// (throughput in tokens per second).
    Generation,
}

/// The GGUF of `cargo xtask fetch-llm` and the built `smollm2_chat`, if both are there.
fn chat_files() -> Option<(PathBuf, Vec<u8>)> {
    let dir = std::env::var_os("SLUICE_LLM_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/sluice/models/SmolLM2-135M-Instruct")
    });
    let gguf = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let wasm = common::repo_root().join("functions/target/wasm32-wasip2/release/smollm2_chat.wasm");
    match (gguf.is_file(), std::fs::read(&wasm)) {
        (true, Ok(bytes)) => Some((gguf, bytes)),
        _ => {
            eprintln!(
                "scheduling bench: no {} or {}: the streaming-generation row is skipped",
                gguf.display(),
                wasm.display()
            );
            None
        }
    }
}

fn images(engine: &Engine, setup: &Setup) -> Images {
    let minilm = engine.compile(&common::component("minilm_embed")).unwrap();
    let burn = engine.compile(&common::component("gemm_burn")).unwrap();
    let weights = MemoryAccount::new("weights", None, None);
    let mut burn_limits = FunctionLimits::default();
    burn_limits.sandbox.memory_bytes = setup.burn_memory;
    // The burner uploads its whole matrix in one host call (256 MiB: 8192² f32, cast
    // on the device): one guest→host transfer may be as large as its sandbox.
    burn_limits.max_output_bytes = setup.burn_memory;
    Images {
        minilm: engine
            .prepare(
                "minilm-embed",
                &minilm,
                ArtifactSet::new(common::minilm_files(), weights),
                FunctionLimits::default(),
            )
            .unwrap(),
        burn: engine.prepare("gemm-burn", &burn, ArtifactSet::empty(), burn_limits).unwrap(),
        chat: (!setup.gpu).then(chat_files).flatten().map(|(gguf, wasm)| {
            let compiled = engine.compile(&wasm).unwrap();
            let files = HashMap::from([("model".to_owned(), gguf)]);
            let account = MemoryAccount::new("weights", None, None);
            engine
                .prepare("smollm2-chat", &compiled, ArtifactSet::new(files, account), FunctionLimits::default())
                .unwrap()
        }),
    }
}

/// Sets the flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// `run_mode`, a panic (a failed invocation or device error) turned into a failed
/// result, so one failing mode does not cost the others.
fn try_mode(
    engine: &Arc<Engine>,
    setup: &Setup,
    mode: Mode,
    (latency, burn): (bool, Option<Burner>),
    rt: &tokio::runtime::Runtime,
) -> ModeResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_mode(engine, setup, mode, latency, burn, rt)))
        .unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panicked".to_owned());
            ModeResult {
                p50_ms: f64::NAN,
                p99_ms: f64::NAN,
                preempt_p99_us: f64::NAN,
                be_per_s: f64::NAN,
                partition: "?".into(),
                device: "?".into(),
                requests: 0,
                error: Some(message),
            }
        })
}

/// How the device is scheduled in one mode.
#[derive(Clone, Copy)]
struct Mode {
    policy: Policy,
    /// Reserve an SM partition for latency work.
    partition: bool,
    /// `SchedulerConfig::latency_hold`: how long after latency work ends best-effort
    /// work stays sliced (or on the remainder) as if it were still active.
    latency_hold: Duration,
}

const FIFO: Mode = Mode { policy: Policy::Fifo, partition: false, latency_hold: Duration::ZERO };
const PRIORITY: Mode = Mode { policy: Policy::Priority, partition: false, latency_hold: Duration::ZERO };
const PARTITIONED: Mode = Mode { policy: Policy::Priority, partition: true, latency_hold: Duration::ZERO };

/// The latency hold of the `+ hold` modes: longer than the latency tenant's think
/// time, so best-effort work never fills the device between its requests.
const HOLD: Duration = Duration::from_millis(50);

struct ModeResult {
    p50_ms: f64,
    p99_ms: f64,
    preempt_p99_us: f64,
    /// The best-effort tenant's throughput: GEMMs or generated tokens per second.
    be_per_s: f64,
    partition: String,
    device: String,
    /// Latency requests completed.
    requests: usize,
    /// Why the mode failed.
    error: Option<String>,
}

/// Runs the latency tenant (if `latency`) and the best-effort tenant (`burn`, if any) on a
/// fresh device scheduled by `mode`; the images' ArtifactSets are per device, so each
/// mode gets its own queue and engine images.
fn run_mode(
    engine: &Arc<Engine>,
    setup: &Setup,
    mode: Mode,
    latency: bool,
    burn: Option<Burner>,
    rt: &tokio::runtime::Runtime,
) -> ModeResult {
    let config = SchedulerConfig { policy: mode.policy, latency_hold: mode.latency_hold, ..SchedulerConfig::default() };
    let queue = DeviceQueue::start_with(setup.open(mode.partition), config);
    let images = Arc::new(images(engine, setup));
    let mut text = vec![common::bytes_input("text", &["The quick brown fox jumps over the lazy dog."])];
    text.extend(setup.precision.map(|p| common::bytes_input("precision", &[p])));
    // Warm the weights and the cost model.
    rt.block_on(engine.invoke(&images.minilm, ctx(&queue, "ls", PriorityClass::Latency), &text)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Stops the burners also when this mode panics (a failed invocation), so they do not
    // run on into the next mode.
    let _stop_guard = StopOnDrop(stop.clone());
    let mut burn_inputs =
        vec![common::i64_input("duration_ms", setup.burn_ms), common::i64_input("size", setup.gemm_size)];
    burn_inputs.extend(setup.gemm_dtype.map(|d| common::bytes_input("dtype", &[d])));
    let chat_inputs = vec![
        common::bytes_input(
            "text_input",
            &["<|im_start|>user\nWrite a short story about a lighthouse.<|im_end|>\n<|im_start|>assistant\n"],
        ),
        IoTensor { name: "max_tokens".into(), shape: vec![1], data: IoData::I32(vec![32]) },
    ];
    let burners: Vec<_> = (0..match burn {
        Some(Burner::Gemm) => setup.burners,
        Some(Burner::Generation) => 1,
        None => 0,
    })
        .map(|_| {
            let (engine, images, queue, stop) = (engine.clone(), images.clone(), queue.clone(), stop.clone());
            let (kind, inputs) = match burn {
                Some(Burner::Generation) => (Burner::Generation, chat_inputs.clone()),
                _ => (Burner::Gemm, burn_inputs.clone()),
            };
            rt.spawn(async move {
                let (mut units, started) = (0i64, Instant::now());
                while !stop.load(Ordering::Relaxed) {
                    units += match kind {
                        Burner::Gemm => {
                            let out = engine
                                .invoke(&images.burn, ctx(&queue, "be", PriorityClass::Batch), &inputs)
                                .await
                                .unwrap();
                            let IoData::I64(g) = &out.outputs[0].data else { unreachable!() };
                            g[0]
                        }
                        Burner::Generation => {
                            let chat = images.chat.as_ref().expect("smollm2-chat");
                            let (sink, mut chunks) = chunk_channel(default_room());
                            let mut context = ctx(&queue, "be", PriorityClass::Batch);
                            context.caller = CallerLink::streaming(sink, Cancel::default());
                            let reader = tokio::spawn(async move { while chunks.recv().await.is_some() {} });
                            let out = engine.invoke(chat, context, &inputs).await.unwrap();
                            reader.await.unwrap();
                            let tokens = out.outputs.iter().find(|t| t.name == "completion_tokens");
                            match tokens.map(|t| &t.data) {
                                Some(IoData::I32(n)) => i64::from(n[0]),
                                _ => panic!("smollm2-chat returned no completion_tokens"),
                            }
                        }
                    };
                }
                (units, started.elapsed())
            })
        })
        .collect();
    let mut latencies = Vec::new();
    if latency {
        rt.block_on(async {
            let series = Instant::now();
            for _ in 0..setup.requests {
                if setup.mode_cap.is_some_and(|cap| series.elapsed() > cap) {
                    eprintln!(
                        "scheduling bench: stopped after {} requests ({:?} cap)",
                        latencies.len(),
                        setup.mode_cap
                    );
                    break;
                }
                tokio::time::sleep(THINK_TIME).await;
                let started = Instant::now();
                engine.invoke(&images.minilm, ctx(&queue, "ls", PriorityClass::Latency), &text).await.unwrap();
                latencies.push(started.elapsed().as_secs_f64() * 1e3);
            }
        });
    } else {
        std::thread::sleep(setup.solo_window);
    }
    stop.store(true, Ordering::Relaxed);
    let (mut gemms, mut elapsed) = (0i64, Duration::ZERO);
    for h in burners {
        let (g, e) = rt.block_on(h).unwrap();
        gemms += g;
        elapsed = elapsed.max(e);
    }
    let be_per_s = if gemms > 0 { gemms as f64 / elapsed.as_secs_f64() } else { 0.0 };
    let status = queue.status_blocking();
    latencies.sort_by(f64::total_cmp);
    let (p50_ms, p99_ms) =
        if latencies.is_empty() { (0.0, 0.0) } else { (percentile(&latencies, 0.5), percentile(&latencies, 0.99)) };
    ModeResult {
        p50_ms,
        p99_ms,
        preempt_p99_us: status.preemption_latency.p99_us,
        be_per_s,
        partition: status.partition.to_string(),
        device: status.device.name,
        requests: latencies.len(),
        error: None,
    }
}

/// Cores the CPU device's kernels may use: all but one, which stays with the host
/// (guests' own code), as `sluice serve` does; `SLUICE_BENCH_DEVICE_THREADS` overrides.
fn device_threads() -> usize {
    std::env::var("SLUICE_BENCH_DEVICE_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1).max(1))
}

/// Runs and prints the co-location modes; returns whether one failed.
fn colocation(setup: &Setup, rt: &tokio::runtime::Runtime) -> bool {
    let engine = Arc::new(Engine::new(EngineConfig::default()).unwrap());
    eprintln!("scheduling bench: solo runs …");
    let solo_ls = try_mode(&engine, setup, PRIORITY, (true, None), rt);
    let solo_be = try_mode(&engine, setup, PRIORITY, (false, Some(Burner::Gemm)), rt);
    eprintln!("scheduling bench: co-located, FIFO …");
    let fifo = try_mode(&engine, setup, FIFO, (true, Some(Burner::Gemm)), rt);
    eprintln!("scheduling bench: co-located, priority + preemption …");
    let prio = try_mode(&engine, setup, PRIORITY, (true, Some(Burner::Gemm)), rt);
    // A streaming generation as the best-effort tenant (the CPU device, with the model).
    let generation = (!setup.cuda() && chat_files().is_some()).then(|| {
        eprintln!("scheduling bench: a streaming generation alone, then co-located (priority + preemption) …");
        let solo = try_mode(&engine, setup, PRIORITY, (false, Some(Burner::Generation)), rt);
        let colocated = try_mode(&engine, setup, PRIORITY, (true, Some(Burner::Generation)), rt);
        (solo, colocated)
    });
    // Only where the device can have a partition: the CPU device has none.
    let partitioned = setup.cuda().then(|| {
        eprintln!("scheduling bench: co-located, priority + preemption + {} reserved SMs …", setup.reserved_sms);
        try_mode(&engine, setup, PARTITIONED, (true, Some(Burner::Gemm)), rt)
    });
    // On the GPU, both again with a latency hold longer than the think time: what
    // filling the device between two latency requests costs the next one.
    let held = setup.cuda().then(|| {
        eprintln!("scheduling bench: co-located, priority + preemption, {} ms latency hold …", HOLD.as_millis());
        let prio = try_mode(&engine, setup, Mode { latency_hold: HOLD, ..PRIORITY }, (true, Some(Burner::Gemm)), rt);
        eprintln!("scheduling bench: co-located, + SM partition, {} ms latency hold …", HOLD.as_millis());
        let part = try_mode(&engine, setup, Mode { latency_hold: HOLD, ..PARTITIONED }, (true, Some(Burner::Gemm)), rt);
        (prio, part)
    });
    let failed = [&solo_ls, &solo_be, &fifo, &prio]
        .into_iter()
        .chain(&partitioned)
        .chain(held.iter().flat_map(|(p, q)| [p, q]))
        .chain(generation.iter().flat_map(|(s, c)| [s, c]))
        .any(|r| r.error.is_some());
    let size = setup.gemm_size;
    println!();
    if setup.cuda() {
        println!(
            "co-location on {}: latency tenant minilm-embed {} batch 1 ({} requests, {} ms think time), \
             best-effort tenant gemm-burn {size}³ {} ({} concurrent invocations of {} ms)",
            [&solo_ls, &solo_be, &fifo, &prio].iter().map(|r| r.device.as_str()).find(|d| *d != "?").unwrap_or("?"),
            setup.precision.unwrap_or("f32"),
            setup.requests,
            THINK_TIME.as_millis(),
            setup.gemm_dtype.unwrap_or("f32"),
            setup.burners,
            setup.burn_ms,
        );
    } else {
        println!(
            "co-location on the CPU device: latency tenant minilm-embed f32 batch 1 ({} requests, {} ms think time), \
             best-effort tenant gemm-burn {size}³ f32; device kernels on {} core(s)",
            setup.requests,
            THINK_TIME.as_millis(),
            device_threads()
        );
    }
    println!(
        "{:<34} {:>9} {:>9} {:>10} {:>14} {:>12}",
        "mode", "LS p50", "LS p99", "p99/solo", "preempt p99", "BE thruput"
    );
    let tflops = |r: &ModeResult| r.be_per_s * 2.0 * (size as f64).powi(3) / 1e12;
    let row = |name: &str, key: &str, r: &ModeResult, ls: bool, be: bool| {
        if let Some(error) = &r.error {
            println!("{name:<34} FAILED: {error}");
            if setup.cuda() {
                println!("{}", json!({ "bench": "sluice-colocation", "mode": key, "ok": false, "error": error }));
            }
            return;
        }
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
        let be_col =
            if be { format!("{:>11.0}%", 100.0 * r.be_per_s / solo_be.be_per_s) } else { format!("{:>12}", "—") };
        println!("{name:<34} {ls_cols} {be_col}");
        if setup.cuda() {
            let record = json!({
                "bench": "sluice-colocation", "mode": key, "ls_p50_ms": ls.then_some(r.p50_ms),
                "ls_p99_ms": ls.then_some(r.p99_ms), "p99_over_solo": ls.then(|| r.p99_ms / solo_ls.p99_ms),
                "preempt_p99_us": ls.then_some(r.preempt_p99_us), "ls_requests": ls.then_some(r.requests), "be_gemms_per_s": be.then_some(r.be_per_s),
                "be_tflops": be.then(|| tflops(r)), "be_fraction": be.then(|| r.be_per_s / solo_be.be_per_s),
            });
            println!("{record}");
        }
    };
    row("latency tenant alone", "ls-solo", &solo_ls, true, false);
    if solo_be.error.is_some() {
        row("best-effort alone", "be-solo", &solo_be, false, true);
    } else {
        println!(
            "{:<34} {:>9} {:>9} {:>10} {:>14} {:>9.1}/s",
            "best-effort alone", "—", "—", "—", "—", solo_be.be_per_s
        );
    }
    if setup.cuda() && solo_be.error.is_none() {
        println!(
            "{}",
            json!({ "bench": "sluice-colocation", "mode": "be-solo", "be_gemms_per_s": solo_be.be_per_s,
            "be_tflops": tflops(&solo_be), "be_fraction": 1.0 })
        );
        println!("  (best-effort alone: {:.1} TFLOP/s)", tflops(&solo_be));
    }
    row("co-located, FIFO (no policy)", "fifo", &fifo, true, true);
    row("co-located, priority + preemption", "priority", &prio, true, true);
    if let Some(partitioned) = &partitioned {
        row("co-located, + SM partition", "partition", partitioned, true, true);
        println!("  partition: {}", partitioned.partition);
        if setup.cuda() {
            println!(
                "{}",
                json!({ "bench": "sluice-colocation", "mode": "partition-info", "note": partitioned.partition })
            );
        }
    } else {
        println!("{:<34} n/a on the CPU device (no spatial partitions)", "co-located, + SM partition");
    }
    if let Some((prio, part)) = &held {
        let hold = HOLD.as_millis();
        row(&format!("priority, {hold} ms latency hold"), "priority-hold", prio, true, true);
        row(&format!("+ SM partition, {hold} ms hold"), "partition-hold", part, true, true);
    }
    if let Some((solo, colocated)) = &generation {
        match (&solo.error, &colocated.error) {
            (None, None) => println!(
                "{:<34} {:>7.2}ms {:>7.2}ms {:>9.2}× {:>12.0}µs {:>11.0}%",
                "co-located with a streaming LLM",
                colocated.p50_ms,
                colocated.p99_ms,
                colocated.p99_ms / solo_ls.p99_ms,
                colocated.preempt_p99_us,
                100.0 * colocated.be_per_s / solo.be_per_s
            ),
            (Some(e), _) | (_, Some(e)) => println!("{:<34} FAILED: {e}", "co-located with a streaming LLM"),
        }
        println!(
            "  (best-effort there: smollm2-chat streaming 32 greedy tokens per invocation, batch class; \
             alone {:.1} tokens/s; its column is tokens/s against that)",
            solo.be_per_s
        );
    }
    failed
}

fn main() {
    let setup = Setup::new(common::device_choice());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // A panic in the overhead part (a device error) is reported and the co-location runs anyway.
    let overhead_failed = std::panic::catch_unwind(|| overhead::overhead(&setup)).is_err();
    let colocation_failed = colocation(&setup, &rt);
    if overhead_failed || colocation_failed {
        std::process::exit(1);
    }
}
