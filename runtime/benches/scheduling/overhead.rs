//! The scheduler's own overhead: the same kernel stream (MiniLM-layer-sized GEMMs, bias
//! adds and GELUs) dispatched directly on the device versus through the scheduler, one
//! tenant, no contention; part of `scheduling.rs`.

use std::time::{Duration, Instant};

use serde_json::json;
use sluice_host_api::{DType, MatmulArgs, Op, TensorMeta, UnaryOp};
use sluice_runtime::device::Device;
use sluice_runtime::scheduler::{DeviceQueue, PriorityClass, SchedulingInfo};

use super::{Setup, device_threads};

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
fn direct(device: &dyn Device, s: &Stream) -> Duration {
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
    let inv = queue.begin(SchedulingInfo {
        tenant: "t".into(),
        function: "f".into(),
        class: PriorityClass::Latency,
        weight: 1,
    });
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
pub(super) fn overhead(setup: &Setup) {
    let s = stream();
    let threads = device_threads();
    let device = setup.open(false);
    let queue = DeviceQueue::start(setup.open(false));
    let (mut d, mut q) = (Vec::new(), Vec::new());
    for _ in 0..OVERHEAD_REPS {
        d.push(direct(device.as_ref(), &s));
        q.push(scheduled(&queue, &s));
    }
    let (direct, scheduled) = (median(d), median(q));
    let kernels = (ROUNDS * s.ops.len()) as f64;
    println!();
    let on = if setup.cuda() { queue.info().name.clone() } else { format!("{threads} device core(s)") };
    println!(
        "scheduler overhead, one tenant, no contention: {ROUNDS} × (GEMM 128×384×384 + bias add + GELU), \
         median of {OVERHEAD_REPS} interleaved runs, {on}"
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
    let overhead = 100.0 * (scheduled.as_secs_f64() / direct.as_secs_f64() - 1.0);
    println!("throughput overhead: {overhead:+.2}% (target ≤ 2%)");
    if setup.cuda() {
        let per_kernel_us = |d: Duration| d.as_secs_f64() * 1e6 / kernels;
        println!(
            "{}",
            json!({ "bench": "sluice-overhead", "direct_us_per_kernel": per_kernel_us(direct),
                    "scheduled_us_per_kernel": per_kernel_us(scheduled), "overhead_pct": overhead })
        );
    }
}
