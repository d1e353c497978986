//! What the live console's feed costs the scheduler: throughput of small kernels (a
//! chain of 16-element negations, the cheapest kernel there is, so the per-kernel
//! cost of recording weighs the most) through one invocation on the CPU device, with
//! the kernel log off (`kernel_log: 0`), on without a watcher (the default: nothing
//! is recorded), and with one watcher pulling the records every 100 ms and encoding
//! them as JSON, as `GET /v1/devices/{index}/live` does. The three modes alternate,
//! round by round, in one process; it prints the median ops/s of each and its ratio
//! to the log being off. Asserts nothing about time.
//!
//! `cargo bench -p sluice-runtime --bench kernel_log [-- --ops N --rounds R]`

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_host_api::{DType, Op, TensorMeta, UnaryOp};
use sluice_runtime::device::CpuDevice;
use sluice_runtime::scheduler::{DeviceQueue, PriorityClass, SchedulerConfig, SchedulingInfo};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

/// Runs `ops` negations as one invocation's chain; returns ops per second.
fn chain(queue: &DeviceQueue, ops: usize) -> f64 {
    let meta = TensorMeta::new(DType::F32, vec![16]).unwrap();
    let inv = queue.begin(SchedulingInfo {
        tenant: "bench".into(),
        function: "chain".into(),
        class: PriorityClass::Latency,
        weight: 1,
    });
    let x = queue.new_tensor_id();
    queue.upload(inv.id(), x, meta.clone(), vec![0; meta.byte_len()]);
    queue.read_blocking(x, meta.clone()).unwrap();
    let started = Instant::now();
    let mut cur = x;
    for _ in 0..ops {
        let id = queue.new_tensor_id();
        queue.launch(inv.id(), id, Op::Unary(UnaryOp::Neg), vec![(cur, meta.clone())], meta.clone());
        queue.free(cur);
        cur = id;
    }
    queue.read_blocking(cur, meta).unwrap();
    ops as f64 / started.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let ops = arg("--ops", 200_000);
    let rounds = arg("--rounds", 7);
    let start = |kernel_log| {
        DeviceQueue::start_with(Box::new(CpuDevice::new()), SchedulerConfig { kernel_log, ..Default::default() })
    };
    let off = start(0);
    let unwatched = start(sluice_runtime::scheduler::DEFAULT_KERNEL_LOG);
    let watched = start(sluice_runtime::scheduler::DEFAULT_KERNEL_LOG);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let (mut seen, mut missed, mut bytes) = (0u64, 0u64, 0usize);
    let done = AtomicBool::new(false);
    // Warm-up: the allocator and the cost model.
    for q in [&off, &unwatched, &watched] {
        chain(q, ops / 10);
    }
    for _ in 0..rounds {
        a.push(chain(&off, ops));
        b.push(chain(&unwatched, ops));
        done.store(false, Ordering::Relaxed);
        let (rate, (s, m, n)) = std::thread::scope(|scope| {
            let watcher = scope.spawn(|| {
                let _watch = watched.watch_kernels();
                let (mut since, mut s, mut m, mut n) = (watched.kernels_blocking(0).next, 0u64, 0u64, 0usize);
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    let batch = watched.kernels_blocking(since);
                    since = batch.next;
                    s += batch.records.len() as u64;
                    m += batch.missed;
                    n += serde_json::to_vec(&batch).unwrap().len();
                }
                (s, m, n)
            });
            // Let the watcher register before the chain starts.
            std::thread::sleep(Duration::from_millis(20));
            let rate = chain(&watched, ops);
            done.store(true, Ordering::Relaxed);
            (rate, watcher.join().unwrap())
        });
        c.push(rate);
        (seen, missed, bytes) = (seen + s, missed + m, bytes + n);
    }
    let base = median(a.clone());
    println!("scheduler throughput, {ops} chained 16-element kernels per round, {rounds} rounds per mode (CPU device)");
    println!("{:<44} {:>14} {:>10}", "mode", "median ops/s", "vs off");
    for (name, v) in [
        ("kernel log off (kernel_log 0)", a),
        ("kernel log on, no watcher (default)", b),
        ("one watcher, pulled every 100 ms + JSON", c),
    ] {
        let m = median(v);
        println!("{name:<44} {m:>14.0} {:>9.3}x", m / base);
    }
    println!(
        "watcher: {seen} records read, {missed} missed (ring of {}), {:.1} MiB of JSON",
        sluice_runtime::scheduler::DEFAULT_KERNEL_LOG,
        bytes as f64 / (1 << 20) as f64
    );
}
