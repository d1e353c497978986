//! all-MiniLM-L6-v2 through sluice. On the CPU device (default, fp32): side by side
//! with a NumPy implementation of the same model, in one run on one machine. On CUDA
//! (`SLUICE_BENCH_DEVICE=cuda`): f32 and f16 at batch 1, 8 and 32 × 128 tokens, p50/p99
//! per invocation and kernel launches per invocation; PyTorch is the baseline there
//! (`bench/gpu/minilm_torch.py`, run by `bench/gpu/run.sh`), not NumPy.
//!
//! CPU cases (the reference sentences of `tests/data/minilm_ref_visible.json`):
//! - `seq128`: batch 1, 128 tokens: the first record longer than 128 tokens, cut at the
//!   longest word prefix that tokenizes to ≤ 128 tokens; its token ids must equal the
//!   record's `input_ids_max_len_128` (what NumPy runs and is checked against);
//! - `seq256`: batch 1, the longest record (256 tokens after truncation);
//! - `batch16`: the 16 records in one invocation (padded to the longest), as throughput.
//!
//! Each CPU case is checked against the reference embeddings (cosine ≥ 0.9999) before it
//! is timed, then timed as whole invocations (p50) after warm-up. The NumPy side is
//! `bench/minilm_numpy.py`, run in a virtual environment at `target/bench-venv`
//! (created with numpy from PyPI when missing; `SLUICE_BENCH_PYTHON` names another
//! interpreter with numpy); it checks its own embeddings and prints JSON timings.
//!
//! The CPU device is wrapped to time every kernel it runs, which gives a per-op
//! breakdown of each case and the time spent outside kernels (guest code, host calls,
//! instantiation). Then the CPU backend's GEMM GFLOP/s at MiniLM's shapes next to the
//! machine's measured FMA peak, and the peers (PyTorch eager through sentence-transformers,
//! ONNX Runtime's BERT-optimised graph; `common/minilm_cpu.rs`, `bench/peers/`), run case
//! by case beside sluice with the same threads and token ids. Needs `cargo xtask build-functions` and `cargo xtask fetch-model`;
//! `cargo xtask bench` runs it with everything set up. Asserts nothing about time.
//!
//! CUDA cases (`common/minilm_cuda.rs`): the `seq128` text repeated `batch` times. The weights may be random
//! (`bench/gpu/make_weights.py`), so each case is checked against the CPU device's f32
//! embedding of the same text and weights (cosine ≥ 0.9999 for f32, ≥ 0.995 for f16),
//! and every row of a batch against the first. Prints a table, one JSON line per case
//! (`{"bench":"sluice-minilm",…}`), and writes `$SLUICE_BENCH_DUMP` (token ids and
//! batch-1 embeddings, for the PyTorch side's cross-check) when set. `SLUICE_BENCH_RUNS`
//! and `SLUICE_BENCH_WARMUP` set the timed and warm-up runs per case (default 100, 10).
//! Then batch 1 of each precision over HTTP (`common/minilm_http.rs`): a server in this
//! process on a fresh device, the function deployed through the API, one keep-alive
//! client; client p50/p99 and the server's own time (timing headers).
//! Exit status 1 if a case failed. `SLUICE_BENCH_GPU_PATH=1` runs this path on the CPU
//! device (a dry run without a GPU).

mod common;
#[path = "common/minilm_cpu.rs"]
mod cpu;
#[path = "common/minilm_cuda.rs"]
mod cuda;
#[path = "common/minilm_http.rs"]
mod http;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{machine, ms, print_rows};
use serde_json::Value;
use sluice_runtime::device::sim::profiling::{KernelTimes, ProfilingDevice};
use sluice_runtime::device::{Device, DeviceChoice};
use sluice_runtime::engine::{
    ArtifactSet, Engine, EngineConfig, FunctionImage, FunctionLimits, InvocationOutput, IoData, IoTensor,
};
use sluice_runtime::scheduler::{DeviceQueue, MemoryAccount, PriorityClass};
use tokio::runtime::Runtime;

/// Timed invocations of each batch-1 case, and of the batch-16 case.
const RUNS: usize = 10;
const BATCH_RUNS: usize = 5;
/// Untimed invocations before each series (after the checking one).
const WARMUP: usize = 1;
/// Embedding width of MiniLM-L6.
const HIDDEN: usize = 384;
const MIN_COSINE: f64 = 0.9999;

fn main() {
    let root = common::repo_root();
    let reference_path = root.join("tests/data/minilm_ref_visible.json");
    let reference: Value =
        serde_json::from_slice(&std::fs::read(&reference_path).expect("reference data")).expect("reference JSON");
    let choice = common::device_choice();
    if common::gpu_path(choice) {
        std::process::exit(cuda::cuda_main(&reference, choice));
    }
    let model_dir = common::model_dir();

    let kernels = KernelTimes::default();
    let device =
        ProfilingDevice { inner: common::open("minilm bench", DeviceChoice::Cpu, None), times: kernels.clone() };
    let bench = Bench::new(Box::new(device));
    let image = bench.prepare();

    let cases = bench.cases(&image, &reference);
    let fixed = bench.fixed_cost(&bench.engine, &image);
    let fresh_image = bench.prepare_on(&bench.fresh);
    let fixed_fresh = bench.fixed_cost(&bench.fresh, &fresh_image);
    // Case by case, sluice then NumPy, so that a change in the (shared) machine's load
    // hits both sides of a row alike.
    let python = numpy_python(&root);
    let mut results = Vec::new();
    let mut numpy = Value::Null;
    let mut peers = Value::Null;
    for case in &cases {
        eprintln!("minilm bench: sluice {} ({} runs) …", case.name, case.runs);
        results.push(bench.time_case(&image, case, &kernels));
        let report = run_numpy(&python, &root, &model_dir, &reference_path, case.name);
        if numpy.is_null() {
            numpy = report;
        } else {
            numpy["cases"][case.name] = report["cases"][case.name].clone();
        }
        match cpu::run_peers(&root, case.name, RUNS, BATCH_RUNS, WARMUP) {
            Some(report) if peers.is_null() => peers = report,
            Some(report) => peers["cases"][case.name] = report["cases"][case.name].clone(),
            None => {}
        }
    }

    println!();
    println!("MiniLM-L6 (all-MiniLM-L6-v2, fp32) on the CPU: sluice vs NumPy, same run — {}", machine());
    println!(
        "sluice: CPU device ({}), whole invocations in-process; NumPy {} ({}, {} threads), Python {}",
        bench.queue.info().name,
        numpy["numpy"].as_str().unwrap_or("?"),
        numpy["blas"].as_str().unwrap_or("?"),
        numpy["blas_threads"].as_u64().map_or("?".to_owned(), |t| t.to_string()),
        numpy["python"].as_str().unwrap_or("?"),
    );
    println!(
        "p50 over {RUNS} runs (batch 16: {BATCH_RUNS}) after warm-up; both sides checked against the reference \
         (min cosine: sluice / NumPy shown)"
    );
    println!();
    print_comparison(&cases, &results, &numpy);
    println!();
    println!(
        "fixed cost of a sluice invocation (empty batch): p50 {:.2} ms in a warm instance, {:.2} ms in a fresh one \
         (instantiation, config and vocab parsing in the guest, first touch of its memory)",
        ms(fixed),
        ms(fixed_fresh)
    );
    println!();
    print_breakdown(&cases, &results);
    if !peers.is_null() {
        println!();
        let rows: Vec<_> =
            cases.iter().zip(&results).map(|(c, r)| (c.name, c.label.clone(), c.texts.len(), ms(r.p50))).collect();
        cpu::print_peers(&peers, &rows);
    }
    println!();
    cpu::print_gemm_throughput();
}

/// One benchmark case.
struct Case {
    name: &'static str,
    label: String,
    texts: Vec<String>,
    /// Reference embedding of each text.
    want: Vec<Vec<f64>>,
    /// Token count of each text (checked against sluice's tokenizer).
    tokens: Vec<usize>,
    runs: usize,
}

/// What sluice did in one case.
struct CaseResult {
    p50: Duration,
    mean: Duration,
    instantiate_mean: Duration,
    min_cosine: f64,
    /// Kernel time and launches per invocation, by op.
    kernels: BTreeMap<String, (f64, Duration)>,
}

struct Bench {
    /// Keeps warm instances (the default).
    engine: Engine,
    /// A fresh instance for every invocation.
    fresh: Engine,
    queue: DeviceQueue,
    rt: Runtime,
}

impl Bench {
    fn new(device: Box<dyn Device>) -> Bench {
        Bench {
            engine: Engine::new(EngineConfig::default()).expect("engine"),
            fresh: Engine::new(EngineConfig { warm_instances_per_function: 0, ..EngineConfig::default() })
                .expect("engine"),
            queue: DeviceQueue::start(device),
            rt: tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime"),
        }
    }

    fn prepare(&self) -> FunctionImage {
        self.prepare_on(&self.engine)
    }

    fn prepare_on(&self, engine: &Engine) -> FunctionImage {
        let component = engine.compile(&common::component("minilm_embed")).expect("compile minilm_embed");
        let artifacts = ArtifactSet::new(common::minilm_files(), MemoryAccount::new("minilm weights", None, None));
        engine.prepare("minilm-embed", &component, artifacts, FunctionLimits::default()).expect("prepare")
    }

    fn try_invoke(
        &self,
        image: &FunctionImage,
        texts: &[String],
        precision: Option<&str>,
        return_tokens: bool,
    ) -> Result<InvocationOutput, String> {
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut inputs = vec![common::bytes_input("text", &texts)];
        if let Some(p) = precision {
            inputs.push(common::bytes_input("precision", &[p]));
        }
        if return_tokens {
            inputs.push(IoTensor { name: "return_tokens".into(), shape: vec![1], data: IoData::U8(vec![1]) });
        }
        let ctx = common::ctx(&self.queue, "bench", PriorityClass::Latency);
        self.rt.block_on(self.engine.invoke(image, ctx, &inputs)).map_err(|e| format!("minilm-embed: {e}"))
    }

    fn invoke(&self, image: &FunctionImage, texts: &[String], return_tokens: bool) -> InvocationOutput {
        self.try_invoke(image, texts, None, return_tokens).unwrap_or_else(|e| panic!("{e}"))
    }

    /// sluice's token ids of `text` (one row, without padding).
    fn token_ids(&self, image: &FunctionImage, text: &str) -> Vec<i64> {
        let out = self.invoke(image, &[text.to_owned()], true);
        match &output(&out, "input_ids").data {
            IoData::I64(ids) => ids.clone(),
            other => panic!("input_ids is not INT64: {other:?}"),
        }
    }

    /// The longest word prefix of `full` that tokenizes to at most `max` tokens.
    fn fit_prefix(&self, image: &FunctionImage, full: &str, max: usize) -> String {
        let ends: Vec<usize> = full
            .char_indices()
            .filter(|&(i, c)| {
                !c.is_whitespace() && full[i + c.len_utf8()..].chars().next().is_none_or(char::is_whitespace)
            })
            .map(|(i, c)| i + c.len_utf8())
            .collect();
        let (mut lo, mut hi) = (0, ends.len() - 1); // invariant: prefix `ends[lo]` fits
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if self.token_ids(image, &full[..ends[mid]]).len() <= max {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        full[..ends[lo]].to_owned()
    }

    /// The three cases, chosen from the reference data by the rules in the file header.
    fn cases(&self, image: &FunctionImage, reference: &Value) -> Vec<Case> {
        let records = reference["records"].as_array().expect("records");
        let ids = |v: &Value| -> Vec<i64> { v.as_array().expect("ids").iter().map(|x| x.as_i64().unwrap()).collect() };
        let floats =
            |v: &Value| -> Vec<f64> { v.as_array().expect("floats").iter().map(|x| x.as_f64().unwrap()).collect() };
        let text = |r: &Value| r["text"].as_str().expect("text").to_owned();

        // seq128: the longest word prefix of a long record that fits in 128 tokens.
        let long = records
            .iter()
            .find(|r| r["input_ids_max_len_128"].as_array().is_some_and(|a| a.len() == 128))
            .expect("a record with input_ids_max_len_128");
        let want_ids = ids(&long["input_ids_max_len_128"]);
        let prefix = self.fit_prefix(image, &text(long), 128);
        let got = self.token_ids(image, &prefix);
        assert_eq!(got, want_ids, "the 128-token prefix {prefix:?} does not tokenize to input_ids_max_len_128");

        let longest = records.iter().max_by_key(|r| r["input_ids"].as_array().map_or(0, Vec::len)).expect("records");
        vec![
            Case {
                name: "seq128",
                label: "batch 1, 128 tokens".into(),
                texts: vec![prefix],
                want: vec![floats(&long["embedding_max_len_128"])],
                tokens: vec![128],
                runs: RUNS,
            },
            Case {
                name: "seq256",
                label: format!("batch 1, {} tokens", ids(&longest["input_ids"]).len()),
                texts: vec![text(longest)],
                want: vec![floats(&longest["embedding"])],
                tokens: vec![ids(&longest["input_ids"]).len()],
                runs: RUNS,
            },
            Case {
                name: "batch16",
                label: format!("batch {} (throughput)", records.len()),
                texts: records.iter().map(text).collect(),
                want: records.iter().map(|r| floats(&r["embedding"])).collect(),
                tokens: records.iter().map(|r| ids(&r["input_ids"]).len()).collect(),
                runs: BATCH_RUNS,
            },
        ]
    }

    /// p50 of an invocation with no texts: the part of every invocation that does not
    /// depend on the input.
    /// p50 of an invocation on an empty batch, on `engine`.
    fn fixed_cost(&self, engine: &Engine, image: &FunctionImage) -> Duration {
        let inputs = [common::bytes_input("text", &[])];
        let mut times: Vec<Duration> = (0..WARMUP + RUNS)
            .map(|_| {
                let t0 = Instant::now();
                let ctx = common::ctx(&self.queue, "bench", PriorityClass::Latency);
                self.rt.block_on(engine.invoke(image, ctx, &inputs)).expect("minilm-embed on an empty batch");
                t0.elapsed()
            })
            .skip(WARMUP)
            .collect();
        times.sort();
        times[times.len() / 2]
    }

    fn time_case(&self, image: &FunctionImage, case: &Case, kernels: &KernelTimes) -> CaseResult {
        // Check first (this also loads the weights once), then warm up and time.
        let out = self.invoke(image, &case.texts, true);
        let ids = output(&out, "input_ids");
        let seq = ids.shape[1] as usize;
        let IoData::I64(id_data) = &ids.data else { panic!("input_ids is not INT64") };
        for (i, &n) in case.tokens.iter().enumerate() {
            let real = id_data[i * seq..(i + 1) * seq].iter().take_while(|&&t| t != 0).count();
            assert_eq!(real, n, "{}: text {i} has {real} tokens in sluice, {n} in the reference", case.name);
        }
        let IoData::F32(embedding) = &output(&out, "embedding").data else { panic!("embedding is not FP32") };
        let min_cosine = case
            .want
            .iter()
            .enumerate()
            .map(|(i, want)| cosine(&embedding[i * HIDDEN..(i + 1) * HIDDEN], want))
            .fold(f64::INFINITY, f64::min);
        assert!(min_cosine >= MIN_COSINE, "{}: sluice's embedding has cosine {min_cosine} to the reference", case.name);

        for _ in 0..WARMUP {
            self.invoke(image, &case.texts, false);
        }
        kernels.reset();
        let mut walls = Vec::new();
        let mut instantiate = Duration::ZERO;
        for _ in 0..case.runs {
            let t0 = Instant::now();
            let out = self.invoke(image, &case.texts, false);
            walls.push(t0.elapsed());
            instantiate += out.instantiate;
        }
        let runs = case.runs as u32;
        let mean = walls.iter().sum::<Duration>() / runs;
        walls.sort();
        let per_invocation =
            kernels.take().into_iter().map(|(op, (n, t))| (op, (n as f64 / runs as f64, t / runs))).collect();
        CaseResult {
            p50: walls[walls.len() / 2],
            mean,
            instantiate_mean: instantiate / runs,
            min_cosine,
            kernels: per_invocation,
        }
    }
}

fn output<'a>(out: &'a InvocationOutput, name: &str) -> &'a IoTensor {
    out.outputs.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no output {name}"))
}

fn cosine(got: &[f32], want: &[f64]) -> f64 {
    let dot: f64 = got.iter().zip(want).map(|(g, w)| f64::from(*g) * w).sum();
    let ng = got.iter().map(|g| f64::from(*g).powi(2)).sum::<f64>().sqrt();
    let nw = want.iter().map(|w| w * w).sum::<f64>().sqrt();
    dot / (ng * nw)
}

/// Runs case `case` of `bench/minilm_numpy.py` and returns its JSON report.
fn run_numpy(python: &Path, root: &Path, model_dir: &Path, reference: &Path, case: &str) -> Value {
    let script = root.join("bench/minilm_numpy.py");
    eprintln!("minilm bench: NumPy {case} ({}) …", python.display());
    let out = Command::new(python)
        .arg(&script)
        .arg("--model-dir")
        .arg(model_dir)
        .arg("--reference")
        .arg(reference)
        .args(["--runs", &RUNS.to_string(), "--batch-runs", &BATCH_RUNS.to_string()])
        .args(["--warmup", &WARMUP.to_string(), "--cases", case])
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("could not start {}: {e}", python.display()));
    assert!(out.status.success(), "{} failed with {}", script.display(), out.status);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{} printed no JSON ({e}): {}", script.display(), String::from_utf8_lossy(&out.stdout))
    })
}

/// A Python interpreter with NumPy: `$SLUICE_BENCH_PYTHON`, or the virtual environment
/// `target/bench-venv`, created (with numpy from PyPI) when it is missing; panics with
/// the reason when neither can be had.
fn numpy_python(root: &Path) -> PathBuf {
    let has_numpy = |python: &Path| {
        Command::new(python).args(["-c", "import numpy"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    if let Some(python) = std::env::var_os("SLUICE_BENCH_PYTHON").map(PathBuf::from) {
        assert!(has_numpy(&python), "SLUICE_BENCH_PYTHON={} cannot import numpy", python.display());
        return python;
    }
    let venv = root.join("target/bench-venv");
    let python = venv.join("bin/python");
    if has_numpy(&python) {
        return python;
    }
    eprintln!("minilm bench: creating {} with numpy from PyPI …", venv.display());
    let run = |cmd: &mut Command| {
        let status = cmd.status().unwrap_or_else(|e| panic!("could not start {cmd:?}: {e}"));
        assert!(status.success(), "{cmd:?} failed with {status}: the NumPy comparison needs python3 with venv and pip");
    };
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    run(Command::new(&python).args(["-m", "pip", "install", "--quiet", "numpy"]));
    assert!(has_numpy(&python), "{} still cannot import numpy", python.display());
    python
}

fn print_comparison(cases: &[Case], results: &[CaseResult], numpy: &Value) {
    let mut rows = vec![[
        "case".to_owned(),
        "sluice CPU".to_owned(),
        "NumPy".to_owned(),
        "ratio (sluice/NumPy time)".to_owned(),
        "min cosine".to_owned(),
    ]];
    for (case, r) in cases.iter().zip(results) {
        let np = &numpy["cases"][case.name];
        let np_ms = np["p50_ms"].as_f64().unwrap_or_else(|| panic!("NumPy printed no p50 for {}", case.name));
        let np_tokens: Vec<usize> = np["tokens"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t.as_u64()).map(|t| t as usize).collect())
            .unwrap_or_default();
        assert_eq!(np_tokens, case.tokens, "{}: NumPy ran other token counts than sluice", case.name);
        let batch = case.texts.len() as f64;
        let (ours, theirs) = if case.texts.len() == 1 {
            (format!("{:.2} ms", ms(r.p50)), format!("{np_ms:.2} ms"))
        } else {
            (
                format!("{:.1} sent/s ({:.0} ms)", batch / r.p50.as_secs_f64(), ms(r.p50)),
                format!("{:.1} sent/s ({np_ms:.0} ms)", batch * 1e3 / np_ms),
            )
        };
        rows.push([
            case.label.clone(),
            ours,
            theirs,
            format!("{:.2}×", ms(r.p50) / np_ms),
            format!("{:.6} / {:.6}", r.min_cosine, np["min_cosine"].as_f64().unwrap_or(f64::NAN)),
        ]);
    }
    print_rows(&rows);
}

/// Per-op kernel time per invocation, each case a column, sorted by the longest case.
fn print_breakdown(cases: &[Case], results: &[CaseResult]) {
    let mut ops: Vec<&String> = results.iter().flat_map(|r| r.kernels.keys()).collect();
    ops.sort();
    ops.dedup();
    let key = cases.iter().position(|c| c.name == "seq256").unwrap_or(0);
    ops.sort_by(|a, b| {
        let t = |op: &String| results[key].kernels.get(op).map_or(Duration::ZERO, |k| k.1);
        t(b).cmp(&t(a))
    });
    let cell = |t: Duration, total: Duration| {
        format!("{:.2} ms {:>3.0}%", ms(t), 100.0 * t.as_secs_f64() / total.as_secs_f64())
    };
    let mut header = vec!["device time by op, mean per invocation (× launches)".to_owned()];
    header.extend(cases.iter().map(|c| c.name.to_owned()));
    let mut rows = vec![header];
    for op in ops {
        let mut row = vec![op.clone()];
        for r in results {
            row.push(match r.kernels.get(op) {
                Some((n, t)) => format!("{} ×{n:<3.0}", cell(*t, r.mean)),
                None => "—".to_owned(),
            });
        }
        rows.push(row);
    }
    let kernel_total = |r: &CaseResult| r.kernels.values().map(|k| k.1).sum::<Duration>();
    let padded = |s: String| format!("{s}     ");
    let mut totals = vec!["all kernels, uploads and downloads".to_owned()];
    totals.extend(results.iter().map(|r| padded(cell(kernel_total(r), r.mean))));
    let mut outside = vec!["outside the device (guest, host calls, waits)".to_owned()];
    outside.extend(results.iter().map(|r| padded(cell(r.mean.saturating_sub(kernel_total(r)), r.mean))));
    let mut inst = vec!["  of which instantiation".to_owned()];
    inst.extend(results.iter().map(|r| padded(cell(r.instantiate_mean, r.mean))));
    let mut whole = vec!["invocation (mean wall clock)".to_owned()];
    whole.extend(results.iter().map(|r| padded(cell(r.mean, r.mean))));
    rows.extend([totals, outside, inst, whole]);
    print_rows(&rows);
}
