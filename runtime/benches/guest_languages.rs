//! Guests in the three SDK languages side by side, in one run on the CPU device: what a
//! Python or JavaScript function costs the host beside a Rust one (issue: guests in three
//! languages).
//!
//! For each language (the functions `echo`, `minilm_embed`, `launch_bench` with the
//! language's suffix: none for Rust, `_py` for Python, `_js` for JavaScript):
//!
//! - Component size and compile time (`Engine::compile`) of `echo` and `minilm_embed`.
//! - Instantiation: `echo` on one FP32 element, on an engine that keeps no warm
//!   instances (cold: a fresh store and instance from the `InstancePre`; Python and
//!   JavaScript start from their pre-initialised snapshots) and on the default engine
//!   (warm); `InvocationOutput::instantiate` and the whole invocation, medians.
//! - Op launch: `launch_bench` with `n = 0` and `n = N`, interleaved; per launch =
//!   (median(t_N) − median(t_0)) / N, wall clock (the guest's loop, the guest→host call
//!   and the host side; the device runs concurrently).
//! - MiniLM, batch 1 × 128 tokens (`"hello " × 126`: 126 one-token words between
//!   `[CLS]` and `[SEP]`), warm instances, p50 of whole invocations, the languages
//!   interleaved; each embedding is checked against the Rust one (cosine ≥ 0.9999)
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

/// A guest language and the suffix of its functions' component names.
struct Language {
    name: &'static str,
    suffix: &'static str,
}

const LANGUAGES: [Language; 3] = [
    Language { name: "Rust", suffix: "" },
    Language { name: "Python", suffix: "_py" },
    Language { name: "JavaScript", suffix: "_js" },
];

/// One language's functions, prepared.
struct Guests {
    echo: FunctionImage,
    echo_cold: FunctionImage,
    minilm: FunctionImage,
    launch: FunctionImage,
    echo_size: usize,
    echo_compile: Duration,
    minilm_size: usize,
    minilm_compile: Duration,
}

/// One language's figures.
#[derive(Default)]
struct Figures {
    cold_inst: f64,
    cold_whole: f64,
    warm_inst: f64,
    warm_whole: f64,
    launch: f64,
    minilm_p50: f64,
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

    eprintln!("guest languages bench: compiling …");
    let guests: Vec<Guests> = LANGUAGES
        .iter()
        .map(|l| {
            let name = |f: &str| format!("{f}{}", l.suffix);
            let (echo, echo_compile, echo_size) = bench.prepare(&bench.warm, &name("echo"), ArtifactSet::empty());
            let (echo_cold, ..) = bench.prepare(&bench.cold, &name("echo"), ArtifactSet::empty());
            let (minilm, minilm_compile, minilm_size) =
                bench.prepare(&bench.warm, &name("minilm_embed"), minilm_artifacts());
            let (launch, ..) = bench.prepare(&bench.warm, &name("launch_bench"), ArtifactSet::empty());
            Guests { echo, echo_cold, minilm, launch, echo_size, echo_compile, minilm_size, minilm_compile }
        })
        .collect();
    let mut figures: Vec<Figures> = LANGUAGES.iter().map(|_| Figures::default()).collect();

    eprintln!("guest languages bench: instantiation and op launches …");
    for (g, f) in guests.iter().zip(&mut figures) {
        (f.cold_inst, f.cold_whole) = bench.instantiation(&bench.cold, &g.echo_cold, COLD_RUNS);
        (f.warm_inst, f.warm_whole) = bench.instantiation(&bench.warm, &g.echo, ECHO_RUNS);
        f.launch = bench.launch_cost(&g.launch);
    }

    eprintln!("guest languages bench: MiniLM 1 × 128 …");
    let text = "hello ".repeat(126);
    let inputs = [common::bytes_input("text", &[text.trim_end()])];
    let reference = embedding(&bench.invoke(&bench.warm, &guests[0].minilm, &inputs).1);
    let agreement: Vec<f64> = guests
        .iter()
        .map(|g| cosine(&reference, &embedding(&bench.invoke(&bench.warm, &g.minilm, &inputs).1)))
        .collect();
    for (l, cos) in LANGUAGES.iter().zip(&agreement) {
        assert!(*cos >= 0.9999, "the {} MiniLM disagrees with the Rust one: cosine {cos}", l.name);
    }
    let mut ms: Vec<Vec<f64>> = LANGUAGES.iter().map(|_| Vec::new()).collect();
    for i in 0..WARMUP + MINILM_RUNS {
        for (g, times) in guests.iter().zip(&mut ms) {
            let (t, _) = bench.invoke(&bench.warm, &g.minilm, &inputs);
            if i >= WARMUP {
                times.push(t.as_secs_f64() * 1e3);
            }
        }
    }
    for (f, times) in figures.iter_mut().zip(ms) {
        f.minilm_p50 = median(times);
    }

    let mib = |b: usize| format!("{:.2} MiB", b as f64 / (1 << 20) as f64);
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let us = |x: f64| format!("{x:.1} µs");
    let ms = |x: f64| format!("{x:.2} ms");
    // One row: the label, each language's value, then each other language over Rust.
    let row = |label: String, values: Vec<String>, ratios: Option<Vec<f64>>| {
        let mut r = vec![label];
        r.extend(values);
        match ratios {
            Some(v) => r.extend(v[1..].iter().map(|x| format!("{:.2}×", x / v[0]))),
            None => r.extend(LANGUAGES[1..].iter().map(|_| String::new())),
        }
        r
    };
    let mut header = vec![String::new()];
    header.extend(LANGUAGES.iter().map(|l| l.name.to_owned()));
    header.extend(LANGUAGES[1..].iter().map(|l| format!("{} / Rust", l.name)));
    let of = |pick: fn(&Figures) -> f64| figures.iter().map(pick).collect::<Vec<f64>>();
    println!("\nGuests in three languages ({})", machine());
    print_rows(&[
        header,
        row(
            "echo: component size".into(),
            guests.iter().map(|g| mib(g.echo_size)).collect(),
            Some(guests.iter().map(|g| g.echo_size as f64).collect()),
        ),
        row("echo: compile".into(), guests.iter().map(|g| secs(g.echo_compile)).collect(), None),
        row("minilm-embed: component size".into(), guests.iter().map(|g| mib(g.minilm_size)).collect(), None),
        row("minilm-embed: compile".into(), guests.iter().map(|g| secs(g.minilm_compile)).collect(), None),
        row(
            "echo: cold instantiation (median)".into(),
            of(|f| f.cold_inst).into_iter().map(us).collect(),
            Some(of(|f| f.cold_inst)),
        ),
        row(
            "echo: cold invocation (median)".into(),
            of(|f| f.cold_whole).into_iter().map(us).collect(),
            Some(of(|f| f.cold_whole)),
        ),
        row("echo: warm instantiation (median)".into(), of(|f| f.warm_inst).into_iter().map(us).collect(), None),
        row(
            "echo: warm invocation (median)".into(),
            of(|f| f.warm_whole).into_iter().map(us).collect(),
            Some(of(|f| f.warm_whole)),
        ),
        row(
            format!("op launch, wall per launch (n = {LAUNCHES})"),
            of(|f| f.launch).into_iter().map(us).collect(),
            Some(of(|f| f.launch)),
        ),
        row(
            format!("MiniLM 1 × 128, warm, p50 of {MINILM_RUNS}"),
            of(|f| f.minilm_p50).into_iter().map(ms).collect(),
            Some(of(|f| f.minilm_p50)),
        ),
    ]);
    for (l, cos) in LANGUAGES.iter().zip(&agreement).skip(1) {
        println!("MiniLM: the {} embedding against the Rust one: cosine {cos:.9}", l.name);
    }
}
