//! Engine micro-benchmarks on the CPU device: the host-side cost of one op launch from
//! Wasm, and the cost of a fresh instance from the pre-instantiated form.
//!
//! - Op launch: `launch_bench` is invoked with `n = 0` and `n = 100_000` (interleaved,
//!   several repetitions each); per launch = (median(t_n) − median(t_0)) / Δlaunches.
//!   Three clocks are reported: the CPU time of the thread running the guest (guest
//!   loop, guest→host call, shape inference, quota reservation, the send to the device
//!   queue and the handle drop: the host-side cost the target is about), the wall clock,
//!   and the CPU time of the device's actor thread (`sluice-cpu`, which dispatches each
//!   op and runs it: small kernels whole, large ones with the device's other kernel
//!   threads). Launches are asynchronous, so the guest and the
//!   device work concurrently and the wall clock per launch is set by the slower side.
//! - Instantiation: `echo` on one FP32 element, ≥ 1000 times, on an engine that keeps no
//!   warm instances; `InvocationOutput::instantiate` (store + instance from the
//!   `InstancePre`) and the whole invocation, median and p99. Then the same on the default
//!   engine, where a warm instance serves each invocation.
//!
//! No guest exposes a no-op host call, so there is no separate guest→host baseline.
//!
//! Needs `cargo xtask build-functions`; `cargo xtask bench` runs it with everything set up.
//! It prints a table and asserts nothing about time.

mod common;

use std::time::{Duration, Instant};

use common::{component, machine};
use sluice_runtime::device::CpuDevice;
use sluice_runtime::engine::{
    ArtifactSet, Engine, EngineConfig, FunctionImage, FunctionLimits, InvocationContext, InvocationOutput, IoData,
    IoTensor,
};
use sluice_runtime::scheduler::{DeviceQueue, MemoryAccount, PriorityClass, SchedulingInfo};
use tokio::runtime::Runtime;

/// Launches per long invocation of `launch_bench`.
const LAUNCHES: i64 = 100_000;
/// Timed repetitions of each `launch_bench` size, after `LAUNCH_WARMUP`.
const LAUNCH_REPS: usize = 15;
const LAUNCH_WARMUP: usize = 2;
/// Timed `echo` invocations, after `ECHO_WARMUP`.
const ECHO_RUNS: usize = 2_000;
const ECHO_WARMUP: usize = 100;

/// Targets from DESIGN.md ("Goals that the benchmarks must show").
const TARGET_LAUNCH_NS: f64 = 1_000.0;
const TARGET_INSTANTIATE_NS: f64 = 20_000.0;

fn main() {
    // The guest runs on this thread (a current-thread runtime), so its CPU clock
    // measures the guest and host side of each launch and nothing else.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let bench = Bench {
        engine: Engine::new(EngineConfig::default()).expect("engine"),
        fresh: Engine::new(EngineConfig { warm_instances_per_function: 0, ..EngineConfig::default() }).expect("engine"),
        queue: DeviceQueue::start(Box::new(CpuDevice::new())),
        rt,
    };
    eprintln!("engine bench: {LAUNCH_REPS} × launch_bench n = 0 and n = {LAUNCHES} …");
    let launch = bench.launch_costs();
    eprintln!("engine bench: {ECHO_RUNS} × echo …");
    let echo = bench.echo_costs(&bench.fresh);
    let warm = bench.echo_costs(&bench.engine);

    println!();
    println!("sluice engine benchmark (CPU device) — {}", machine());
    println!(
        "launch_bench: n = 0 and n = {LAUNCHES}, {LAUNCH_REPS} repetitions each (+{LAUNCH_WARMUP} warm-up), \
         {} launches apart; echo: {ECHO_RUNS} invocations (+{ECHO_WARMUP} warm-up) of one FP32 element",
        launch.launches
    );
    println!();
    let rows = [
        Row::new("op launch, host CPU (guest thread)", launch.guest_cpu, Some(TARGET_LAUNCH_NS)),
        Row::new("op launch, wall clock", launch.wall, None),
        Row::new("op launch, device actor thread CPU", launch.device_cpu, None),
        Row::new("instantiation (InstancePre → instance)", echo.instantiate, Some(TARGET_INSTANTIATE_NS)),
        Row::new("echo invocation, whole (fresh instance)", echo.whole, None),
        Row::new("echo invocation, whole (warm instance)", warm.whole, None),
    ];
    print_table(&rows);
    println!();
    println!(
        "per-launch spread: min–max over the {LAUNCH_REPS} pairs of repetitions; instantiation spread: p99.\n\
         Launches are asynchronous: the device (actor thread + kernel pool) runs them concurrently with the guest, \
         so the wall clock per launch is set by the slower side."
    );
}

struct Bench {
    /// Keeps warm instances (the default).
    engine: Engine,
    /// A fresh instance for every invocation.
    fresh: Engine,
    queue: DeviceQueue,
    rt: Runtime,
}

/// A median and its spread, in nanoseconds.
struct Stat {
    median: f64,
    spread: String,
}

struct LaunchCosts {
    launches: u64,
    guest_cpu: Stat,
    wall: Stat,
    device_cpu: Stat,
}

struct EchoCosts {
    instantiate: Stat,
    whole: Stat,
}

/// One invocation's clocks.
#[derive(Clone, Copy)]
struct Sample {
    wall: Duration,
    guest_cpu: Duration,
    device_cpu: Duration,
}

impl Bench {
    fn prepare(&self, engine: &Engine, name: &str) -> FunctionImage {
        let component = engine.compile(&component(name)).expect("compile");
        engine.prepare(name, &component, ArtifactSet::empty(), FunctionLimits::default()).expect("prepare")
    }

    fn invoke(&self, engine: &Engine, image: &FunctionImage, inputs: &[IoTensor]) -> InvocationOutput {
        let ctx = InvocationContext {
            queue: self.queue.clone(),
            account: MemoryAccount::new("bench", None, None),
            scheduling: SchedulingInfo {
                tenant: "bench".into(),
                function: "bench".into(),
                class: PriorityClass::Latency,
                weight: 1,
            },
            timeout: None,
            caller: Default::default(),
            serving: None,
        };
        self.rt.block_on(engine.invoke(image, ctx, inputs)).unwrap_or_else(|e| panic!("{}: {e}", image.name()))
    }

    /// Runs one invocation and reads the three clocks around it.
    fn sample(&self, image: &FunctionImage, inputs: &[IoTensor]) -> (Sample, InvocationOutput) {
        let (cpu0, dev0, t0) = (thread_cpu_time(), device_thread_cpu_time(), Instant::now());
        let out = self.invoke(&self.engine, image, inputs);
        let wall = t0.elapsed();
        let (cpu1, dev1) = (thread_cpu_time(), device_thread_cpu_time());
        (Sample { wall, guest_cpu: cpu1 - cpu0, device_cpu: dev1.saturating_sub(dev0) }, out)
    }

    fn launch_costs(&self) -> LaunchCosts {
        let image = self.prepare(&self.engine, "launch_bench");
        let input = |n: i64| vec![IoTensor { name: "n".into(), shape: vec![1], data: IoData::I64(vec![n]) }];
        let (short, long) = (input(0), input(LAUNCHES));
        let (mut s, mut l) = (Vec::new(), Vec::new());
        let mut launches = (0, 0);
        // Interleaved, so that drift in the machine's load affects both sizes alike.
        for rep in 0..LAUNCH_WARMUP + LAUNCH_REPS {
            let (a, out_a) = self.sample(&image, &short);
            let (b, out_b) = self.sample(&image, &long);
            launches = (out_a.launches, out_b.launches);
            if rep >= LAUNCH_WARMUP {
                s.push(a);
                l.push(b);
            }
        }
        let delta = launches.1 - launches.0;
        assert!(delta > 0, "launch_bench reported {launches:?} launches");
        let per_launch = |clock: fn(&Sample) -> Duration| -> Stat {
            let ns = |v: &[Sample]| v.iter().map(|x| clock(x).as_nanos() as f64).collect::<Vec<_>>();
            let (short, long) = (ns(&s), ns(&l));
            let median = (percentile(&long, 50.0) - percentile(&short, 50.0)) / delta as f64;
            let pairs: Vec<f64> = short.iter().zip(&long).map(|(a, b)| (b - a) / delta as f64).collect();
            let (lo, hi) = (percentile(&pairs, 0.0), percentile(&pairs, 100.0));
            Stat { median, spread: format!("{} – {}", format_ns(lo), format_ns(hi)) }
        };
        LaunchCosts {
            launches: delta,
            guest_cpu: per_launch(|x| x.guest_cpu),
            wall: per_launch(|x| x.wall),
            device_cpu: per_launch(|x| x.device_cpu),
        }
    }

    fn echo_costs(&self, engine: &Engine) -> EchoCosts {
        let image = self.prepare(engine, "echo");
        let inputs = vec![IoTensor { name: "x".into(), shape: vec![1], data: IoData::F32(vec![1.5]) }];
        let (mut instantiate, mut whole) = (Vec::new(), Vec::new());
        for i in 0..ECHO_WARMUP + ECHO_RUNS {
            let t0 = Instant::now();
            let out = self.invoke(engine, &image, &inputs);
            let elapsed = t0.elapsed();
            assert_eq!(out.outputs, inputs, "echo must round-trip its input");
            if i >= ECHO_WARMUP {
                instantiate.push(out.instantiate.as_nanos() as f64);
                whole.push(elapsed.as_nanos() as f64);
            }
        }
        let stat =
            |v: &[f64]| Stat { median: percentile(v, 50.0), spread: format!("p99 {}", format_ns(percentile(v, 99.0))) };
        EchoCosts { instantiate: stat(&instantiate), whole: stat(&whole) }
    }
}

/// One line of the report.
struct Row {
    name: &'static str,
    median: String,
    spread: String,
    target: String,
    verdict: &'static str,
}

impl Row {
    fn new(name: &'static str, stat: Stat, target_ns: Option<f64>) -> Row {
        let (target, verdict) = match target_ns {
            Some(t) => (format!("≤ {}", format_ns(t)), if stat.median <= t { "met" } else { "MISSED" }),
            None => ("—".to_owned(), ""),
        };
        Row { name, median: format_ns(stat.median), spread: stat.spread, target, verdict }
    }
}

fn print_table(rows: &[Row]) {
    let header = Row {
        name: "measurement",
        median: "median".into(),
        spread: "spread".into(),
        target: "target".into(),
        verdict: "",
    };
    let w = |f: fn(&Row) -> usize| rows.iter().chain([&header]).map(f).max().unwrap_or(0);
    let widths = [
        w(|r| r.name.chars().count()),
        w(|r| r.median.chars().count()),
        w(|r| r.spread.chars().count()),
        w(|r| r.target.chars().count()),
    ];
    let line = |r: &Row| {
        let text = format!(
            "{}  {}  {}  {}  {}",
            pad_right(r.name, widths[0]),
            pad_left(&r.median, widths[1]),
            pad_left(&r.spread, widths[2]),
            pad_left(&r.target, widths[3]),
            r.verdict
        );
        println!("{}", text.trim_end());
    };
    line(&header);
    println!("{}", "-".repeat(widths.iter().sum::<usize>() + 2 * widths.len() + 6));
    rows.iter().for_each(line);
}

fn pad_right(s: &str, width: usize) -> String {
    format!("{s}{}", " ".repeat(width.saturating_sub(s.chars().count())))
}

fn pad_left(s: &str, width: usize) -> String {
    format!("{}{s}", " ".repeat(width.saturating_sub(s.chars().count())))
}

/// Nanoseconds in the unit that reads best.
fn format_ns(ns: f64) -> String {
    if ns.abs() < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns.abs() < 1_000_000.0 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

/// The `p`-th percentile (nearest rank) of `values`.
fn percentile(values: &[f64], p: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[rank.min(v.len() - 1)]
}

/// CPU time consumed so far by the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn thread_cpu_time() -> Duration {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable `struct timespec` (two 64-bit fields on 64-bit
    // Linux) and the clock id is a constant of the Linux ABI.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn thread_cpu_time() -> Duration {
    Duration::ZERO
}

/// CPU time consumed so far by the CPU device's actor thread (named `sluice-cpu`), from
/// `/proc/self/task/*/schedstat`; zero where that is not available.
fn device_thread_cpu_time() -> Duration {
    static TASK: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let task = TASK.get_or_init(|| {
        std::fs::read_dir("/proc/self/task").ok()?.flatten().map(|e| e.path()).find_map(|p| {
            let comm = std::fs::read_to_string(p.join("comm")).ok()?;
            (comm.trim() == "sluice-cpu").then_some(p)
        })
    });
    task.as_ref()
        .and_then(|p| std::fs::read_to_string(p.join("schedstat")).ok())
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}
