//! The scheduler's policies on the simulated device (`device::sim`), whose kernels
//! take test-chosen times on a simulated clock shared with the scheduler.
//!
//! The device computes on the CPU and logs each kernel with its simulated start and
//! end; its gate lets the test hold the device at a chosen kernel while it submits
//! more work. So the tests assert on the order kernels ran in and on the simulated
//! times the scheduler measured, which are the same on an idle and on a saturated
//! machine. The asynchronous (stream-like, partitioned, device-timed) cases are in
//! `scheduler/streams.rs`.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use sluice_host_api::{DType, MatmulArgs, Op, TensorMeta, UnaryOp};
use sluice_runtime::device::sim::{Gate, SimBuilder, SimDevice, SimLog, Staging};
use sluice_runtime::scheduler::{
    Clock, DeviceQueue, DeviceStatus, InvocationGuard, Policy, PriorityClass, SchedulerConfig, SchedulingInfo, TensorId,
};

#[path = "scheduler/kernel_log.rs"]
mod kernel_log;
#[path = "scheduler/snapshots.rs"]
mod snapshots;
#[path = "scheduler/streams.rs"]
mod streams;

/// A scheduler on a simulated device, with the device's log and gate and the clock
/// both share.
struct Sim {
    queue: DeviceQueue,
    log: SimLog,
    gate: Arc<Gate>,
    staging: Arc<Staging>,
    clock: Clock,
}

/// Starts a scheduler with `config` (its clock replaced by a fresh simulated one) on
/// the simulated device `device` describes.
fn sim(config: SchedulerConfig, device: impl FnOnce(SimBuilder) -> SimBuilder) -> Sim {
    let clock = Clock::simulated();
    let device: SimDevice = device(SimDevice::builder(clock.clone())).build();
    let (log, gate, staging) = (device.log(), device.gate(), device.staging());
    let queue = DeviceQueue::start_with(Box::new(device), SchedulerConfig { clock: clock.clone(), ..config });
    Sim { queue, log, gate, staging, clock }
}

fn config(policy: Policy, budget: Duration) -> SchedulerConfig {
    SchedulerConfig { policy, preemption_budget: budget, ..Default::default() }
}

/// The status, taken right after the kernel held at the gate: the request is sent
/// while the device thread is held, and one more kernel is let through.
fn status_after_held_kernel(sim: &Sim) -> DeviceStatus {
    let mut request = Box::pin(sim.queue.status());
    let sent = request.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(sent.is_pending(), "the device thread is held: the status cannot be answered yet");
    sim.gate.allow(1);
    tokio::runtime::Builder::new_current_thread().build().expect("a runtime").block_on(request)
}

fn stream(queue: &DeviceQueue, tenant: &str, class: PriorityClass, weight: u32) -> InvocationGuard {
    queue.begin(SchedulingInfo { tenant: tenant.into(), function: "f".into(), class, weight })
}

fn f32_meta(shape: &[u32]) -> TensorMeta {
    TensorMeta::new(DType::F32, shape.to_vec()).unwrap()
}

fn upload(queue: &DeviceQueue, inv: &InvocationGuard, shape: &[u32], data: &[f32]) -> (TensorId, TensorMeta) {
    let id = queue.new_tensor_id();
    let meta = f32_meta(shape);
    queue.upload(inv.id(), id, meta.clone(), bytemuck_bytes(data));
    (id, meta)
}

fn bytemuck_bytes(data: &[f32]) -> Vec<u8> {
    data.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn unary(
    queue: &DeviceQueue,
    inv: &InvocationGuard,
    op: UnaryOp,
    x: &(TensorId, TensorMeta),
) -> (TensorId, TensorMeta) {
    let id = queue.new_tensor_id();
    queue.launch(inv.id(), id, Op::Unary(op), vec![x.clone()], x.1.clone());
    (id, x.1.clone())
}

fn read_f32(queue: &DeviceQueue, t: &(TensorId, TensorMeta)) -> Vec<f32> {
    let bytes = queue.read_blocking(t.0, t.1.clone()).expect("read");
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Neg is the best-effort tenant's kernel (2 ms), Exp the latency tenant's (50 µs).
fn overtaking_costs(op: &Op) -> Duration {
    match op {
        Op::Unary(UnaryOp::Neg) => Duration::from_millis(2),
        _ => Duration::from_micros(50),
    }
}

/// Queues 40 best-effort kernels, holds the device at the second, submits one latency
/// kernel; returns the latency kernel's position in the order kernels ran.
fn latency_position(policy: Policy) -> usize {
    let sim = sim(config(policy, Duration::from_micros(100)), |d| d.cost(|op, _| overtaking_costs(op)));
    let queue = &sim.queue;
    sim.gate.close();
    let be = stream(queue, "batch-tenant", PriorityClass::Batch, 1);
    let x = upload(queue, &be, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let mut last = x.clone();
    for _ in 0..40 {
        last = unary(queue, &be, UnaryOp::Neg, &last);
    }
    // The first best-effort kernel ran; the second is running when latency work comes.
    sim.gate.allow(1);
    sim.gate.wait_blocked();
    let ls = stream(queue, "latency-tenant", PriorityClass::Latency, 1);
    let y = upload(queue, &ls, &[2], &[0.0, 1.0]);
    let z = unary(queue, &ls, UnaryOp::Exp, &y);
    sim.gate.open();
    assert_eq!(read_f32(queue, &z), vec![1.0, std::f32::consts::E]);
    // The best-effort chain still computes the right thing afterwards.
    assert_eq!(read_f32(queue, &last), vec![1.0, 2.0, 3.0, 4.0]);
    let log = sim.log.entries();
    assert_eq!(log.len(), 41);
    log.iter().position(|k| k.op == Op::Unary(UnaryOp::Exp)).expect("the latency kernel ran")
}

#[test]
fn latency_work_overtakes_queued_best_effort_work() {
    let with_priority = latency_position(Policy::Priority);
    let fifo = latency_position(Policy::Fifo);
    // Under FIFO it waits for all 40 queued kernels; with priorities only for the one
    // running when it arrived.
    assert_eq!(fifo, 40, "FIFO runs the latency kernel last");
    assert_eq!(with_priority, 2, "right after the kernel that was running");
}

/// Two backlogged best-effort tenants with weights `wa:wb`; returns A's share of
/// the device time the scheduler measured (simulated: every kernel takes 100 µs)
/// after 2000 kernels, while both still have work queued.
fn share_of_a(wa: u32, wb: u32) -> f64 {
    let sim = sim(config(Policy::Priority, Duration::from_micros(100)), |d| d.cost(|_, _| Duration::from_micros(100)));
    let queue = &sim.queue;
    sim.gate.close();
    let a = stream(queue, "a", PriorityClass::Batch, wa);
    let b = stream(queue, "b", PriorityClass::Batch, wb);
    for inv in [&a, &b] {
        let x = upload(queue, inv, &[1], &[1.0]);
        for _ in 0..4000 {
            unary(queue, inv, UnaryOp::Abs, &x);
        }
    }
    sim.gate.allow(2000);
    sim.gate.wait_blocked();
    let status = status_after_held_kernel(&sim);
    sim.gate.open();
    let time = |t: &str| status.tenants.iter().find(|s| s.tenant == t).expect("tenant").device_time_us as f64;
    let (ta, tb) = (time("a"), time("b"));
    assert_eq!(ta + tb, 200_100.0, "2001 kernels of 100 µs: {ta} + {tb} µs");
    assert!(status.queued > 0, "both tenants stayed backlogged during the run");
    ta / (ta + tb)
}

#[test]
fn weighted_fair_share_lands_within_five_percent() {
    let even = share_of_a(1, 1);
    assert!((even - 0.5).abs() <= 0.05 * 0.5, "1:1 gave A {even:.3}");
    let three = share_of_a(3, 1);
    assert!((three - 0.75).abs() <= 0.05 * 0.75, "3:1 gave A {three:.3}");
}

/// `x · y` launched for `inv`, read back.
fn matmul(
    queue: &DeviceQueue,
    inv: &InvocationGuard,
    x: (TensorId, TensorMeta),
    y: (TensorId, TensorMeta),
    out: TensorMeta,
) -> Vec<f32> {
    let id = queue.new_tensor_id();
    queue.launch(inv.id(), id, Op::Matmul(MatmulArgs::default()), vec![x, y], out.clone());
    read_f32(queue, &(id, out))
}

/// Runs a 1×1×1 matmul for `inv`, which takes 4 ms under [`gemm_cost`]: the matmul
/// family's rate is then 4 ms per multiply-add, and the first estimate of any GEMM
/// not seen before far too long (over 500 s for 256×32×16, which takes 4 ms).
fn mislead_the_matmul_rate(queue: &DeviceQueue, inv: &InvocationGuard) {
    let one = upload(queue, inv, &[1, 1], &[2.0]);
    assert_eq!(matmul(queue, inv, one.clone(), one, f32_meta(&[1, 1])), vec![4.0]);
}

fn gemm_cost(op: &Op) -> Duration {
    match op {
        Op::Matmul(_) | Op::Linear { .. } => Duration::from_millis(4),
        _ => Duration::from_micros(20),
    }
}

#[test]
fn sliced_kernels_give_the_same_result_and_bound_the_wait() {
    let (m, k, n) = (64u32, 32u32, 16u32);
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0).collect();
    let sim = sim(config(Policy::Priority, Duration::from_micros(500)), |d| d.cost(|op, _| gemm_cost(op)));
    let queue = &sim.queue;
    let gemm = |queue: &DeviceQueue| {
        let be = stream(queue, "be", PriorityClass::Batch, 1);
        let ta = upload(queue, &be, &[m, k], &a);
        let tb = upload(queue, &be, &[k, n], &b);
        let id = queue.new_tensor_id();
        let out = f32_meta(&[m, n]);
        queue.launch(be.id(), id, Op::Matmul(MatmulArgs::default()), vec![ta, tb], out.clone());
        read_f32(queue, &(id, out))
    };
    // Alone, the GEMM runs whole, and the cost model learns that it takes 4 ms.
    let whole = gemm(queue);
    assert_eq!(queue.status_blocking().sliced_kernels, 0, "no slicing without latency work");
    // With a latency stream open, the 4 ms GEMM no longer fits the 0.5 ms budget.
    let ls = stream(queue, "ls", PriorityClass::Latency, 1);
    let sliced = gemm(queue);
    assert_eq!(queue.status_blocking().sliced_kernels, 1);
    drop(ls);
    let slices: Vec<_> = sim.log.entries().into_iter().filter(|k| k.rows.is_some()).collect();
    // The estimate is the 4 ms the kernel took, so each slice has at most 8 of the 64
    // rows: at least 8 slices, never finer than one row, none longer than the budget.
    assert!((8..=64).contains(&slices.len()), "4 ms in slices of ≤ 0.5 ms: {} slices", slices.len());
    assert!(slices.iter().all(|k| matches!(k.op, Op::Matmul(_)) && k.end - k.start <= Duration::from_micros(500)));
    assert_eq!(sliced, whole, "slicing does not change the result");
    // And the reference: a plain triple loop.
    for (i, got) in whole.iter().enumerate() {
        let (r, c) = (i / n as usize, i % n as usize);
        let want: f32 = (0..k as usize).map(|j| a[r * k as usize + j] * b[j * n as usize + c]).sum();
        assert!((got - want).abs() < 1e-4, "[{r},{c}] {got} vs {want}");
    }
}

/// A kernel never run whole is estimated from its family's rate, which a small, slow
/// kernel may have set far too high; cut to the budget by that estimate, it would run
/// one row per slice. It is cut into at most 32 row blocks instead.
#[test]
fn a_kernel_estimated_far_too_long_is_cut_into_at_most_32_slices() {
    let (m, k, n) = (256u32, 32u32, 16u32);
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0).collect();
    let sim = sim(config(Policy::Priority, Duration::from_micros(500)), |d| d.cost(|op, _| gemm_cost(op)));
    let queue = &sim.queue;
    let _ls = stream(queue, "ls", PriorityClass::Latency, 1);
    let be = stream(queue, "be", PriorityClass::Batch, 1);
    mislead_the_matmul_rate(queue, &be);
    let (ta, tb) = (upload(queue, &be, &[m, k], &a), upload(queue, &be, &[k, n], &b));
    let got = matmul(queue, &be, ta, tb, f32_meta(&[m, n]));
    let slices: Vec<_> = sim.log.entries().into_iter().filter(|k| k.rows.is_some()).collect();
    assert_eq!(slices.len(), 32, "256 rows in blocks of 8, not of one");
    assert!(slices.iter().all(|k| k.rows.as_ref().is_some_and(|r| r.len() == 8)));
    for (i, got) in got.iter().enumerate() {
        let (r, c) = (i / n as usize, i % n as usize);
        let want: f32 = (0..k as usize).map(|j| a[r * k as usize + j] * b[j * n as usize + c]).sum();
        assert!((got - want).abs() < 1e-4, "[{r},{c}] {got} vs {want}");
    }
}

#[test]
fn best_effort_stays_sliced_for_the_hold_after_latency_work_ends() {
    let (m, k, n) = (64u32, 32u32, 16u32);
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32).collect();
    let config = SchedulerConfig {
        latency_hold: Duration::from_millis(300),
        ..config(Policy::Priority, Duration::from_micros(500))
    };
    let sim = sim(config, |d| d.cost(|op, _| gemm_cost(op)));
    let queue = &sim.queue;
    let gemm = |queue: &DeviceQueue| {
        let be = stream(queue, "be", PriorityClass::Batch, 1);
        let ta = upload(queue, &be, &[m, k], &a);
        let tb = upload(queue, &be, &[k, n], &b);
        let id = queue.new_tensor_id();
        let out = f32_meta(&[m, n]);
        queue.launch(be.id(), id, Op::Matmul(MatmulArgs::default()), vec![ta, tb], out.clone());
        read_f32(queue, &(id, out))
    };
    let whole = gemm(queue); // learns the 4 ms cost; no latency work yet: whole
    assert_eq!(queue.status_blocking().sliced_kernels, 0);
    drop(stream(queue, "ls", PriorityClass::Latency, 1)); // a latency request comes and goes
    let held = sim.clock.now();
    assert_eq!(gemm(queue), whole);
    let within = sim.clock.now() - held;
    assert!(within < Duration::from_millis(250), "the check ran within the hold: {within:?}");
    assert_eq!(queue.status_blocking().sliced_kernels, 1, "sliced within the hold");
    sim.clock.advance(Duration::from_millis(300));
    assert_eq!(gemm(queue), whole);
    assert_eq!(queue.status_blocking().sliced_kernels, 1, "whole again once the hold has passed");
}

#[test]
fn sliced_linears_give_the_same_result() {
    // x [2, 24, 32] (48 rows) · wᵀ (w [16, 32]) + b, then GELU.
    let (rows, k, n) = (48u32, 32u32, 16u32);
    let x: Vec<f32> = (0..rows * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0).collect();
    let bias: Vec<f32> = (0..n).map(|i| i as f32 / 4.0 - 2.0).collect();
    let sim = sim(config(Policy::Priority, Duration::from_micros(500)), |d| d.cost(|op, _| gemm_cost(op)));
    let queue = &sim.queue;
    let op = Op::Linear { transpose_w: true, activation: Some(UnaryOp::Gelu) };
    let linear = |queue: &DeviceQueue| {
        let be = stream(queue, "be", PriorityClass::Batch, 1);
        let tx = upload(queue, &be, &[2, rows / 2, k], &x);
        let tw = upload(queue, &be, &[n, k], &w);
        let tb = upload(queue, &be, &[n], &bias);
        let id = queue.new_tensor_id();
        let out = f32_meta(&[2, rows / 2, n]);
        queue.launch(be.id(), id, op.clone(), vec![tx, tw, tb], out.clone());
        read_f32(queue, &(id, out))
    };
    let whole = linear(queue);
    let ls = stream(queue, "ls", PriorityClass::Latency, 1);
    let sliced = linear(queue);
    assert_eq!(queue.status_blocking().sliced_kernels, 1);
    drop(ls);
    let slices = sim.log.entries().iter().filter(|k| k.rows.is_some() && k.op == op).count();
    assert!((8..=48).contains(&slices), "4 ms in slices of ≤ 0.5 ms: {slices} slices");
    // A GEMM of fewer rows may sum in another order (the gemm crate picks its kernels
    // by shape): equal to rounding.
    for (i, (s, w)) in sliced.iter().zip(&whole).enumerate() {
        assert!((s - w).abs() <= 1e-5 * w.abs().max(1.0), "element {i}: sliced {s} vs whole {w}");
    }
    for (i, got) in whole.iter().enumerate() {
        let (r, c) = (i / n as usize, i % n as usize);
        let z: f64 = bias[c] as f64
            + (0..k as usize).map(|j| x[r * k as usize + j] as f64 * w[c * k as usize + j] as f64).sum::<f64>();
        let want = sluice_backend_cpu::gelu(z as f32);
        assert!((got - want).abs() < 1e-4, "[{r},{c}] {got} vs {want}");
    }
}

#[test]
fn ended_invocations_lose_their_queued_work_and_free_their_tensors() {
    let sim = sim(config(Policy::Priority, Duration::from_micros(100)), |d| d.cost(|op, _| overtaking_costs(op)));
    let queue = &sim.queue;
    // The device runs nothing until the invocation has ended.
    sim.gate.close();
    let be = stream(queue, "t", PriorityClass::Batch, 1);
    let x = upload(queue, &be, &[1], &[1.0]);
    let mut last = x.clone();
    for _ in 0..50 {
        last = unary(queue, &be, UnaryOp::Neg, &last);
        queue.free(last.0);
    }
    drop(be);
    sim.gate.open();
    let err = queue.read_blocking(last.0, last.1.clone());
    assert!(err.is_err(), "a cancelled or freed tensor cannot be read");
    let status = queue.status_blocking();
    assert!(status.queued == 0 && status.active_invocations == 0, "{status:?}");
    let ran = sim.log.entries().len();
    assert!(ran <= 1, "only the kernel running when the invocation ended ran: {ran}");
}

#[test]
fn functions_are_placed_on_the_least_loaded_device_that_holds_their_weights() {
    use sluice_runtime::scheduler::DevicePool;
    let sized = |memory| {
        let clock = Clock::simulated();
        let device = SimDevice::builder(clock.clone()).cost(|_, _| Duration::from_millis(5)).memory(memory).build();
        let gate = device.gate();
        (DeviceQueue::start_with(Box::new(device), SchedulerConfig { clock, ..Default::default() }), gate)
    };
    let ((zero, gate), (one, _)) = (sized(1 << 30), sized(1 << 30));
    let pool = DevicePool::new(vec![zero, one]);
    // Placed bytes break ties: two functions spread over both devices.
    let first = pool.place(100 << 20).unwrap();
    let second = pool.place(100 << 20).unwrap();
    assert_ne!(first.index(), second.index());
    drop((first, second));

    // Device 0 is busy (held at its first kernel, 40 queued): a new function goes to
    // device 1.
    gate.close();
    let busy = &pool.queues()[0];
    let inv = stream(busy, "busy", PriorityClass::Batch, 1);
    let x = upload(busy, &inv, &[1], &[1.0]);
    for _ in 0..40 {
        unary(busy, &inv, UnaryOp::Neg, &x);
    }
    gate.wait_blocked();
    assert_eq!(pool.place(1 << 20).unwrap().index(), 1, "the idle device is chosen");
    gate.open();

    // Weights go where they fit, and weights that fit nowhere are refused with the sizes.
    let small_and_big = DevicePool::new(vec![sized(64 << 20).0, sized(512 << 20).0]);
    assert_eq!(small_and_big.place(256 << 20).unwrap().index(), 1);
    let err = small_and_big.place(1 << 30).err().expect("too big for both");
    assert!(err.to_string().contains("no device can hold 1073741824 bytes"), "{err}");
    drop(inv);
}
