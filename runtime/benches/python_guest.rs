//! Python guests beside Rust guests, in one run on the CPU device: what a Python
//! function costs the host (issue: a Python guest SDK).
//!
//! - Component size and compile time (`Engine::compile`) of `echo` / `echo_py` and
//!   `minilm_embed` / `minilm_embed_py`.
//! - Instantiation: `echo` and `echo_py` on one FP32 element, on an engine that keeps no
//!   warm instances (cold: a fresh store and instance from the `InstancePre`, for Python
//!   from componentize-py's pre-initialised snapshot) and on the default engine (warm);
//!   `InvocationOutput::instantiate` and the whole invocation, medians.
//! - Op launch: `launch_bench` / `launch_bench_py` with `n = 0` and `n = N`, interleaved;
//!   per launch = (median(t_N) − median(t_0)) / N, wall clock (the guest's loop, the
//!   guest→host call and the host side; the device runs concurrently).
//! - MiniLM, batch 1 × 128 tokens (`"hello " × 126`: 126 one-token words between
//!   `[CLS]` and `[SEP]`), warm instances, p50 of whole invocations, Rust and Python
//!   interleaved; the Python embedding is checked against the Rust one (cosine ≥ 0.9999)
//!   before timing.
//!
//! Needs `cargo xtask build-functions` and `cargo xtask fetch-model`. Prints a table and
//! asserts nothing about time.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{component, machine, minilm_files, percentile, print_rows};
use sluice_runtime::device::CpuDevice;
use sluice_runtime::engine::{
    ArtifactSet, Engine, EngineConfig, FunctionImage, FunctionLimits, InvocationOutput, IoData, IoTensor,
};
use sluice_runtime::scheduler::{DeviceQueue, MemoryAccount, PriorityClass};
use tokio::runtime::Runtime;

const ECHO_RUNS: usize = 200;
const COLD_RUNS: usize = 30;
const LAUNCH_REPS: usize = 7;
const LAUNCHES: i64 = 5_000;
const MINILM_RUNS: usize = 30;
const WARMUP: usize = 3;

struct Bench {
    warm: Engine,
    cold: Engine,
    queue: DeviceQueue,
    rt: Runtime,
}

impl Bench {
    fn prepare(&self, engine: &Engine, name: &str, artifacts: Arc<ArtifactSet>) -> (FunctionImage, Duration, usize) {
        let bytes = component(name);
        let t0 = Instant::now();
        let compiled = engine.compile(&bytes).expect("compile");
        let compile = t0.elapsed();
        let limits = FunctionLimits { timeout: Duration::from_secs(120), ..FunctionLimits::default() };
        (engine.prepare(name, &compiled, artifacts, limits).expect("prepare"), compile, bytes.len())
    }

    fn invoke(&self, engine: &Engine, image: &FunctionImage, inputs: &[IoTensor]) -> (Duration, InvocationOutput) {
        let t0 = Instant::now();
        let ctx = common::ctx(&self.queue, "bench", PriorityClass::Latency);
        let out =
            self.rt.block_on(engine.invoke(image, ctx, inputs)).unwrap_or_else(|e| panic!("{}: {e}", image.name()));
        (t0.elapsed(), out)
    }

    /// Median instantiation and whole-invocation time of `runs` invocations after warm-up.
    fn instantiation(&self, engine: &Engine, image: &FunctionImage, runs: usize) -> (f64, f64) {
        let inputs = [IoTensor { name: "x".into(), shape: vec![1], data: IoData::F32(vec![1.5]) }];
        let (mut inst, mut whole) = (Vec::new(), Vec::new());
        for i in 0..WARMUP + runs {
            let (t, out) = self.invoke(engine, image, &inputs);
            assert_eq!(out.outputs, inputs, "echo must round-trip its input");
            if i >= WARMUP {
                inst.push(out.instantiate.as_secs_f64() * 1e6);
                whole.push(t.as_secs_f64() * 1e6);
            }
        }
        (median(inst), median(whole))
    }

    /// Wall-clock microseconds per launch of `image` (a launch bench).
    fn launch_cost(&self, image: &FunctionImage) -> f64 {
        let n = |n: i64| [IoTensor { name: "n".into(), shape: vec![1], data: IoData::I64(vec![n]) }];
        let (mut short, mut long) = (Vec::new(), Vec::new());
        let mut delta = 0;
        for rep in 0..WARMUP + LAUNCH_REPS {
            let (a, out_a) = self.invoke(&self.warm, image, &n(0));
            let (b, out_b) = self.invoke(&self.warm, image, &n(LAUNCHES));
            delta = out_b.launches - out_a.launches;
            if rep >= WARMUP {
                short.push(a.as_secs_f64() * 1e6);
                long.push(b.as_secs_f64() * 1e6);
            }
        }
        assert!(delta > 0, "{}: no launches", image.name());
        (median(long) - median(short)) / delta as f64
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}

fn embedding(out: &InvocationOutput) -> Vec<f32> {
    match &out.outputs.iter().find(|o| o.name == "embedding").expect("embedding").data {
        IoData::F32(v) => v.clone(),
        other => panic!("embedding is {other:?}"),
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn main() {
    let bench = Bench {
        warm: Engine::new(EngineConfig::default()).expect("engine"),
        cold: Engine::new(EngineConfig { warm_instances_per_function: 0, ..EngineConfig::default() }).expect("engine"),
        queue: DeviceQueue::start(Box::new(CpuDevice::new())),
        rt: tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime"),
    };
    let files = minilm_files();
    let minilm_artifacts = || ArtifactSet::new(files.clone(), MemoryAccount::new("bench-weights", None, None));

    eprintln!("python bench: compiling …");
    let (echo, echo_compile, echo_size) = bench.prepare(&bench.warm, "echo", ArtifactSet::empty());
    let (echo_py, echo_py_compile, echo_py_size) = bench.prepare(&bench.warm, "echo_py", ArtifactSet::empty());
    let (echo_cold, ..) = bench.prepare(&bench.cold, "echo", ArtifactSet::empty());
    let (echo_py_cold, ..) = bench.prepare(&bench.cold, "echo_py", ArtifactSet::empty());
    let (minilm, minilm_compile, minilm_size) = bench.prepare(&bench.warm, "minilm_embed", minilm_artifacts());
    let (minilm_py, minilm_py_compile, minilm_py_size) =
        bench.prepare(&bench.warm, "minilm_embed_py", minilm_artifacts());
    let (launch, ..) = bench.prepare(&bench.warm, "launch_bench", ArtifactSet::empty());
    let (launch_py, ..) = bench.prepare(&bench.warm, "launch_bench_py", ArtifactSet::empty());

    eprintln!("python bench: instantiation …");
    let (echo_cold_inst, echo_cold_whole) = bench.instantiation(&bench.cold, &echo_cold, COLD_RUNS);
    let (py_cold_inst, py_cold_whole) = bench.instantiation(&bench.cold, &echo_py_cold, COLD_RUNS);
    let (echo_warm_inst, echo_warm_whole) = bench.instantiation(&bench.warm, &echo, ECHO_RUNS);
    let (py_warm_inst, py_warm_whole) = bench.instantiation(&bench.warm, &echo_py, ECHO_RUNS);

    eprintln!("python bench: op launches …");
    let launch_rust = bench.launch_cost(&launch);
    let launch_python = bench.launch_cost(&launch_py);

    eprintln!("python bench: MiniLM 1 × 128 …");
    let text = "hello ".repeat(126);
    let inputs = [common::bytes_input("text", &[text.trim_end()])];
    let (_, rust_out) = bench.invoke(&bench.warm, &minilm, &inputs);
    let (_, py_out) = bench.invoke(&bench.warm, &minilm_py, &inputs);
    let agreement = cosine(&embedding(&rust_out), &embedding(&py_out));
    assert!(agreement >= 0.9999, "the Python MiniLM disagrees with the Rust one: cosine {agreement}");
    let (mut rust_ms, mut py_ms) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + MINILM_RUNS {
        let (a, _) = bench.invoke(&bench.warm, &minilm, &inputs);
        let (b, _) = bench.invoke(&bench.warm, &minilm_py, &inputs);
        if i >= WARMUP {
            rust_ms.push(a.as_secs_f64() * 1e3);
            py_ms.push(b.as_secs_f64() * 1e3);
        }
    }
    let (rust_p50, py_p50) = (median(rust_ms), median(py_ms));

    let mib = |b: usize| format!("{:.2} MiB", b as f64 / (1 << 20) as f64);
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let us = |x: f64| format!("{x:.1} µs");
    println!("\nPython guests beside Rust guests ({})", machine());
    print_rows(&[
        vec!["".into(), "Rust".into(), "Python".into(), "Python / Rust".into()],
        vec![
            "echo: component size".into(),
            mib(echo_size),
            mib(echo_py_size),
            format!("{:.0}×", echo_py_size as f64 / echo_size as f64),
        ],
        vec!["echo: compile".into(), secs(echo_compile), secs(echo_py_compile), String::new()],
        vec!["minilm-embed: component size".into(), mib(minilm_size), mib(minilm_py_size), String::new()],
        vec!["minilm-embed: compile".into(), secs(minilm_compile), secs(minilm_py_compile), String::new()],
        vec![
            "echo: cold instantiation (median)".into(),
            us(echo_cold_inst),
            us(py_cold_inst),
            format!("{:.1}×", py_cold_inst / echo_cold_inst),
        ],
        vec![
            "echo: cold invocation (median)".into(),
            us(echo_cold_whole),
            us(py_cold_whole),
            format!("{:.1}×", py_cold_whole / echo_cold_whole),
        ],
        vec!["echo: warm instantiation (median)".into(), us(echo_warm_inst), us(py_warm_inst), String::new()],
        vec![
            "echo: warm invocation (median)".into(),
            us(echo_warm_whole),
            us(py_warm_whole),
            format!("{:.1}×", py_warm_whole / echo_warm_whole),
        ],
        vec![
            format!("op launch, wall per launch (n = {LAUNCHES})"),
            us(launch_rust),
            us(launch_python),
            format!("{:.1}×", launch_python / launch_rust),
        ],
        vec![
            format!("MiniLM 1 × 128, warm, p50 of {MINILM_RUNS}"),
            format!("{rust_p50:.2} ms"),
            format!("{py_p50:.2} ms"),
            format!("{:.3}×", py_p50 / rust_p50),
        ],
    ]);
    println!("MiniLM: the Python embedding against the Rust one: cosine {agreement:.9}");
}
