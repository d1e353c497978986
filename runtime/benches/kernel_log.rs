//! What the live console's feed costs the scheduler: throughput of small kernels (a
//! chain of 16-element negations, the cheapest kernel there is, so the per-kernel
//! cost of recording weighs the most) through one invocation on the CPU device, with
//! the kernel log off (`kernel_log: 0`), on without a watcher (the default: nothing
//! is recorded), and with one watcher pulling the records every 100 ms and encoding
//! the newest [`FEED_BATCH`] of them as JSON, as `GET /v1/devices/{index}/live` does. The three modes alternate,
//! round by round, in one process; it prints the median ops/s of each and its ratio
//! to the log being off. Asserts nothing about time.
//!
//! `cargo bench -p sluice-runtime --bench kernel_log [-- --ops N --rounds R --ring RECORDS]`

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_host_api::{DType, Op, TensorMeta, UnaryOp};
use sluice_runtime::device::CpuDevice;
use sluice_runtime::scheduler::{DeviceQueue, FEED_BATCH, PriorityClass, SchedulerConfig, SchedulingInfo};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

/// CPU time of the whole process so far (every thread: submitter, device, watcher).
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A round's throughput (ops per second of wall time) and CPU cost (process CPU
/// nanoseconds per op, which other processes on a shared machine disturb far less).
#[derive(Clone, Copy)]
struct Round {
    ops_per_s: f64,
    cpu_ns_per_op: f64,
}

/// Runs `ops` negations as one invocation's chain.
fn chain(queue: &DeviceQueue, ops: usize) -> Round {
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
    let (started, cpu) = (Instant::now(), cpu_time());
    let mut cur = x;
    for _ in 0..ops {
        let id = queue.new_tensor_id();
        queue.launch(inv.id(), id, Op::Unary(UnaryOp::Neg), vec![(cur, meta.clone())], meta.clone());
        queue.free(cur);
        cur = id;
    }
    queue.read_blocking(cur, meta).unwrap();
    Round {
        ops_per_s: ops as f64 / started.elapsed().as_secs_f64(),
        cpu_ns_per_op: (cpu_time() - cpu).as_nanos() as f64 / ops as f64,
    }
}

/// [`chain`] with a watcher pulling the records every 100 ms and encoding them as JSON,
/// as the live feed does; also returns the records it read, missed and the JSON bytes.
fn watched_chain(queue: &DeviceQueue, ops: usize) -> (Round, (u64, u64, usize)) {
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let watch = queue.watch_kernels();
        let watcher = scope.spawn(|| {
            let _watch = watch;
            let (mut since, mut s, mut m, mut n) = (queue.kernels_blocking(0, 0).next, 0u64, 0u64, 0usize);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let batch = queue.kernels_blocking(since, FEED_BATCH);
                since = batch.next;
                s += batch.records.len() as u64;
                m += batch.missed;
                n += serde_json::to_vec(&batch).unwrap().len();
            }
            (s, m, n)
        });
        let rate = chain(queue, ops);
        done.store(true, Ordering::Relaxed);
        (rate, watcher.join().unwrap())
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let ops = arg("--ops", 200_000);
    let rounds = arg("--rounds", 7);
    let ring = arg("--ring", sluice_runtime::scheduler::DEFAULT_KERNEL_LOG);
    let start = |kernel_log| {
        DeviceQueue::start_with(Box::new(CpuDevice::new()), SchedulerConfig { kernel_log, ..Default::default() })
    };
    let off = start(0);
    let unwatched = start(ring);
    let watched = start(ring);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let (mut seen, mut missed, mut bytes) = (0u64, 0u64, 0usize);
    // Warm-up: the allocator and the cost model.
    for q in [&off, &unwatched, &watched] {
        chain(q, ops / 10);
    }
    // The modes take turns first, so a drift in the machine's load favours none.
    for round in 0..rounds {
        for k in 0..3 {
            match (round + k) % 3 {
                0 => a.push(chain(&off, ops)),
                1 => b.push(chain(&unwatched, ops)),
                _ => {
                    let (rate, (s, m, n)) = watched_chain(&watched, ops);
                    c.push(rate);
                    (seen, missed, bytes) = (seen + s, missed + m, bytes + n);
                }
            }
        }
    }
    let base = a.clone();
    let (wall, cpu) = (
        |v: &[Round]| median(v.iter().map(|r| r.ops_per_s).collect()),
        |v: &[Round]| median(v.iter().map(|r| r.cpu_ns_per_op).collect()),
    );
    println!("scheduler throughput, {ops} chained 16-element kernels per round, {rounds} rounds per mode (CPU device)");
    println!("{:<42} {:>13} {:>8} {:>16} {:>8}", "mode", "median ops/s", "vs off", "CPU ns per op", "vs off");
    for (name, v) in [
        ("kernel log off (kernel_log 0)", a),
        ("kernel log on, no watcher (default)", b),
        ("one watcher, pulled every 100 ms + JSON", c),
    ] {
        let (w, c) = (wall(&v), cpu(&v));
        println!("{name:<42} {w:>13.0} {:>7.3}x {c:>16.0} {:>7.3}x", w / wall(&base), c / cpu(&base));
    }
    println!(
        "watcher: {seen} records read, {missed} missed (ring of {ring}), {:.1} MiB of JSON",
        bytes as f64 / (1 << 20) as f64
    );
}
