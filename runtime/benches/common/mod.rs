//! Helpers shared by the benchmarks: where the repository, the built functions and the
//! model are; which device to run on (`SLUICE_BENCH_DEVICE`); percentiles and table
//! printing. (The wrapper timing a device's calls by op is the runtime's
//! `device::sim::profiling::ProfilingDevice`.)
//!
//! The benchmark binaries also run on a machine without cargo or this checkout's paths
//! (the H200 of `bench/gpu/run.sh`), so every location can be overridden:
//! `SLUICE_REPO_ROOT` (the checkout, for `tests/data`), `SLUICE_FUNCTIONS_DIR` (the
//! `*.wasm` of `cargo xtask build-functions`), `SLUICE_MODEL_DIR` (model.safetensors,
//! vocab.txt, config.json), `SLUICE_KERNEL_CACHE_DIR` (compiled CUDA kernels).

// Each benchmark uses a different part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use sluice_runtime::device::{Device, DeviceChoice, DeviceSettings, open_device};
use sluice_runtime::engine::{InvocationContext, IoData, IoTensor};
use sluice_runtime::scheduler::{DeviceQueue, MemoryAccount, PriorityClass, SchedulingInfo};

/// The checkout: `$SLUICE_REPO_ROOT`, else the one this binary was built from if it is
/// still there, else the current directory.
pub fn repo_root() -> PathBuf {
    if let Some(root) = std::env::var_os("SLUICE_REPO_ROOT") {
        return PathBuf::from(root);
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    if built.join("tests/data").is_dir() { built } else { PathBuf::from(".") }
}

/// The bytes of function `name` (`minilm_embed`, `gemm_burn`, …), built by
/// `cargo xtask build-functions`.
pub fn component(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("SLUICE_FUNCTIONS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("functions/target/wasm32-wasip2/release"));
    let path = dir.join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!("{}: {e}; build the functions first with `cargo xtask build-functions`", path.display())
    })
}

/// The MiniLM model directory: `$SLUICE_MODEL_DIR`, else the cache of `cargo xtask
/// fetch-model`; panics when it holds no model.safetensors.
pub fn model_dir() -> PathBuf {
    let dir = std::env::var_os("SLUICE_MODEL_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/sluice/models/all-MiniLM-L6-v2")
    });
    assert!(
        dir.join("model.safetensors").is_file(),
        "the MiniLM model is not in {}: run `cargo xtask fetch-model` first (or set SLUICE_MODEL_DIR)",
        dir.display()
    );
    dir
}

/// The artifacts of `minilm-embed` in `model_dir()`: model, vocab, config.
pub fn minilm_files() -> HashMap<String, PathBuf> {
    let dir = model_dir();
    [("model", "model.safetensors"), ("vocab", "vocab.txt"), ("config", "config.json")]
        .into_iter()
        .map(|(name, file)| (name.to_owned(), dir.join(file)))
        .collect()
}

/// The device of `SLUICE_BENCH_DEVICE`: `cpu` (default) or `cuda`.
pub fn device_choice() -> DeviceChoice {
    match std::env::var("SLUICE_BENCH_DEVICE").as_deref() {
        Err(_) | Ok("") | Ok("cpu") => DeviceChoice::Cpu,
        Ok("cuda") => DeviceChoice::Cuda,
        Ok(other) => {
            eprintln!("SLUICE_BENCH_DEVICE={other:?}: expected `cpu` or `cuda`");
            std::process::exit(2);
        }
    }
}

/// Whether to run the GPU benchmark's code path: on CUDA, or on the CPU device when
/// `SLUICE_BENCH_GPU_PATH=1` (a dry run of that path on a machine without a GPU, with
/// the sizes cut down through the benchmarks' `SLUICE_BENCH_*` variables).
pub fn gpu_path(choice: DeviceChoice) -> bool {
    choice == DeviceChoice::Cuda || std::env::var("SLUICE_BENCH_GPU_PATH").is_ok_and(|v| v == "1")
}

/// `$name` as a number, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Opens `choice` through `open_device`; CUDA without a usable GPU ends the process
/// with the backend's reason (exit status 2), not a panic.
pub fn open(bench: &str, choice: DeviceChoice, cpu_threads: Option<usize>) -> Box<dyn Device> {
    open_partitioned(bench, choice, cpu_threads, 0)
}

/// [`open`] with `reserved_sms` SMs reserved for latency work (a GPU's green-context
/// partition; 0: none).
pub fn open_partitioned(
    bench: &str,
    choice: DeviceChoice,
    cpu_threads: Option<usize>,
    reserved_sms: u32,
) -> Box<dyn Device> {
    let settings = DeviceSettings {
        cpu_threads,
        kernel_cache_dir: std::env::var_os("SLUICE_KERNEL_CACHE_DIR").map(PathBuf::from),
        reserved_sms,
        ..DeviceSettings::default()
    };
    match open_device(choice, &settings) {
        Ok(opened) => {
            eprintln!("{bench}: {}", opened.reason);
            opened.device
        }
        Err(e) => {
            eprintln!("{bench}: SLUICE_BENCH_DEVICE=cuda: {e}");
            std::process::exit(2);
        }
    }
}

/// An invocation context on `queue` for `tenant` in `class`.
pub fn ctx(queue: &DeviceQueue, tenant: &str, class: PriorityClass) -> InvocationContext {
    InvocationContext {
        queue: queue.clone(),
        account: MemoryAccount::new("invocation", None, None),
        scheduling: SchedulingInfo { tenant: tenant.into(), function: "f".into(), class, weight: 1 },
        timeout: None,
        caller: Default::default(),
        serving: None,
    }
}

/// A BYTES input tensor of shape `[n]`.
pub fn bytes_input(name: &str, values: &[&str]) -> IoTensor {
    IoTensor {
        name: name.into(),
        shape: vec![values.len() as u64],
        data: IoData::Bytes(values.iter().map(|v| v.as_bytes().to_vec()).collect()),
    }
}

/// An INT64 input tensor of shape `[1]`.
pub fn i64_input(name: &str, value: i64) -> IoTensor {
    IoTensor { name: name.into(), shape: vec![1], data: IoData::I64(vec![value]) }
}

/// The `q` quantile (nearest rank) of sorted samples.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Prints rows as an aligned table: first column left-aligned, the others right-aligned,
/// a rule under the header.
pub fn print_rows<R: AsRef<[String]>>(rows: &[R]) {
    let columns = rows.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.as_ref().get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .as_ref()
            .iter()
            .enumerate()
            .map(|(c, s)| {
                let pad = " ".repeat(widths[c] - s.chars().count());
                if c == 0 { format!("{s}{pad}") } else { format!("{pad}{s}") }
            })
            .collect();
        println!("{}", cells.join("  ").trim_end());
        if i == 0 {
            println!("{}", "-".repeat(widths.iter().sum::<usize>() + 2 * (columns - 1)));
        }
    }
}

/// CPU count and model, and the 1-minute load average (the machine may be shared).
pub fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_owned()))
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("?").to_owned();
    format!("nproc {nproc}, {model}, load average {load} at the end")
}
