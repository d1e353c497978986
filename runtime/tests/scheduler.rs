//! The scheduler's policies on a device whose kernel durations the test controls.
//!
//! `TimedDevice` computes on the CPU reference backend but makes each kernel take a
//! fixed time chosen by the test (by busy-waiting) and logs the order kernels ran
//! in, so the tests can see who overtook whom and how device time was shared. The
//! asynchronous (stream-like, partitioned, clocked) devices are in `scheduler/streams.rs`.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_host_api::{DType, MatmulArgs, Op, RowSplit, TensorMeta, UnaryOp};
use sluice_runtime::device::{Buffer, CpuDevice, Device, DeviceError, DeviceInfo};
use sluice_runtime::scheduler::{
    DeviceQueue, InvocationGuard, Policy, PriorityClass, SchedulerConfig, SchedulingInfo, TensorId,
};

#[path = "scheduler/streams.rs"]
mod streams;

/// CPU results, test-chosen durations, and a log of what ran.
struct TimedDevice {
    cpu: CpuDevice,
    cost: fn(&Op) -> Duration,
    log: Arc<Mutex<Vec<String>>>,
}

fn spin(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

impl Device for TimedDevice {
    fn info(&self) -> DeviceInfo {
        self.cpu.info()
    }
    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        self.cpu.upload(meta, bytes)
    }
    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        spin((self.cost)(op));
        self.log.lock().unwrap().push(format!("{op:?}"));
        self.cpu.launch(op, inputs, out)
    }
    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        self.cpu.download(buffer, meta)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn launch_rows(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
        rows: Range<usize>,
    ) -> Option<Result<Buffer, DeviceError>> {
        let m = RowSplit::of(op, out)?.rows;
        spin((self.cost)(op) * rows.len() as u32 / m as u32);
        self.log.lock().unwrap().push(format!("{} rows {rows:?}", op.name()));
        self.cpu.launch_rows(op, inputs, out, rows)
    }
}

fn timed(policy: Policy, budget: Duration, cost: fn(&Op) -> Duration) -> (DeviceQueue, Arc<Mutex<Vec<String>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let device = TimedDevice { cpu: CpuDevice::new(), cost, log: log.clone() };
    (
        DeviceQueue::start_with(
            Box::new(device),
            SchedulerConfig { policy, preemption_budget: budget, ..Default::default() },
        ),
        log,
    )
}

fn stream(queue: &DeviceQueue, tenant: &str, class: PriorityClass, weight: u32) -> InvocationGuard {
    queue.begin(SchedulingInfo { tenant: tenant.into(), class, weight })
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

/// Queues 40 best-effort kernels, then one latency kernel; returns the latency
/// kernel's position in the order kernels ran.
fn latency_position(policy: Policy) -> usize {
    let (queue, log) = timed(policy, Duration::from_micros(100), overtaking_costs);
    let be = stream(&queue, "batch-tenant", PriorityClass::Batch, 1);
    let x = upload(&queue, &be, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let mut last = x.clone();
    for _ in 0..40 {
        last = unary(&queue, &be, UnaryOp::Neg, &last);
    }
    std::thread::sleep(Duration::from_millis(5));
    let ls = stream(&queue, "latency-tenant", PriorityClass::Latency, 1);
    let y = upload(&queue, &ls, &[2], &[0.0, 1.0]);
    let z = unary(&queue, &ls, UnaryOp::Exp, &y);
    assert_eq!(read_f32(&queue, &z), vec![1.0, std::f32::consts::E]);
    // The best-effort chain still computes the right thing afterwards.
    assert_eq!(read_f32(&queue, &last), vec![1.0, 2.0, 3.0, 4.0]);
    let log = log.lock().unwrap();
    log.iter().position(|k| k.contains("Exp")).expect("the latency kernel ran")
}

#[test]
fn latency_work_overtakes_queued_best_effort_work() {
    let with_priority = latency_position(Policy::Priority);
    let fifo = latency_position(Policy::Fifo);
    // Under FIFO it waits for all 40 queued kernels; with priorities for at most the
    // one or two running when it arrived.
    assert_eq!(fifo, 40, "FIFO runs the latency kernel last");
    assert!(with_priority <= 4, "latency kernel ran {with_priority}th");
}

fn uniform_cost(_: &Op) -> Duration {
    Duration::from_micros(100)
}

/// Two backlogged best-effort tenants with weights `wa:wb`; returns A's share of
/// the device time the scheduler measured.
fn share_of_a(wa: u32, wb: u32) -> f64 {
    let (queue, _) = timed(Policy::Priority, Duration::from_micros(100), uniform_cost);
    let a = stream(&queue, "a", PriorityClass::Batch, wa);
    let b = stream(&queue, "b", PriorityClass::Batch, wb);
    for inv in [&a, &b] {
        let x = upload(&queue, inv, &[1], &[1.0]);
        for _ in 0..4000 {
            unary(&queue, inv, UnaryOp::Abs, &x);
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let status = queue.status_blocking();
    let time = |t: &str| status.tenants.iter().find(|s| s.tenant == t).expect("tenant").device_time_us as f64;
    let (ta, tb) = (time("a"), time("b"));
    assert!(ta + tb > 150_000.0, "the run was long enough: {ta} + {tb} µs");
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
    let (queue, log) = timed(Policy::Priority, Duration::from_micros(500), gemm_cost);
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
    let whole = gemm(&queue);
    assert_eq!(queue.status_blocking().sliced_kernels, 0, "no slicing without latency work");
    // With a latency stream open, the 4 ms GEMM no longer fits the 0.5 ms budget.
    let ls = stream(&queue, "ls", PriorityClass::Latency, 1);
    let sliced = gemm(&queue);
    assert_eq!(queue.status_blocking().sliced_kernels, 1);
    drop(ls);
    let slices = log.lock().unwrap().iter().filter(|k| k.starts_with("matmul rows ")).count();
    // The estimate is at least the 4 ms the kernel spins (more on a loaded machine),
    // so each slice has at most 8 of the 64 rows: at least 8 slices, never finer than
    // one row.
    assert!((8..=64).contains(&slices), "4 ms in slices of ≤ 0.5 ms: {slices} slices");
    assert_eq!(sliced, whole, "slicing does not change the result");
    // And the reference: a plain triple loop.
    for (i, got) in whole.iter().enumerate() {
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
    let log = Arc::new(Mutex::new(Vec::new()));
    let device = TimedDevice { cpu: CpuDevice::new(), cost: gemm_cost, log: log.clone() };
    let config = SchedulerConfig {
        policy: Policy::Priority,
        preemption_budget: Duration::from_micros(500),
        latency_hold: Duration::from_millis(300),
        ..Default::default()
    };
    let queue = DeviceQueue::start_with(Box::new(device), config);
    let gemm = |queue: &DeviceQueue| {
        let be = stream(queue, "be", PriorityClass::Batch, 1);
        let ta = upload(queue, &be, &[m, k], &a);
        let tb = upload(queue, &be, &[k, n], &b);
        let id = queue.new_tensor_id();
        let out = f32_meta(&[m, n]);
        queue.launch(be.id(), id, Op::Matmul(MatmulArgs::default()), vec![ta, tb], out.clone());
        read_f32(queue, &(id, out))
    };
    let whole = gemm(&queue); // learns the 4 ms cost; no latency work yet: whole
    assert_eq!(queue.status_blocking().sliced_kernels, 0);
    drop(stream(&queue, "ls", PriorityClass::Latency, 1)); // a latency request comes and goes
    let held = Instant::now();
    assert_eq!(gemm(&queue), whole);
    assert!(held.elapsed() < Duration::from_millis(250), "the check ran within the hold");
    assert_eq!(queue.status_blocking().sliced_kernels, 1, "sliced within the hold");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(gemm(&queue), whole);
    assert_eq!(queue.status_blocking().sliced_kernels, 1, "whole again once the hold has passed");
}

#[test]
fn sliced_linears_give_the_same_result() {
    // x [2, 24, 32] (48 rows) · wᵀ (w [16, 32]) + b, then GELU.
    let (rows, k, n) = (48u32, 32u32, 16u32);
    let x: Vec<f32> = (0..rows * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0).collect();
    let bias: Vec<f32> = (0..n).map(|i| i as f32 / 4.0 - 2.0).collect();
    let (queue, log) = timed(Policy::Priority, Duration::from_micros(500), gemm_cost);
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
    let whole = linear(&queue);
    let ls = stream(&queue, "ls", PriorityClass::Latency, 1);
    let sliced = linear(&queue);
    assert_eq!(queue.status_blocking().sliced_kernels, 1);
    drop(ls);
    let slices = log.lock().unwrap().iter().filter(|k| k.starts_with("linear rows ")).count();
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
    let (queue, log) = timed(Policy::Priority, Duration::from_micros(100), overtaking_costs);
    let be = stream(&queue, "t", PriorityClass::Batch, 1);
    let x = upload(&queue, &be, &[1], &[1.0]);
    let mut last = x.clone();
    for _ in 0..50 {
        last = unary(&queue, &be, UnaryOp::Neg, &last);
        queue.free(last.0);
    }
    drop(be);
    let err = queue.read_blocking(last.0, last.1.clone());
    assert!(err.is_err(), "a cancelled or freed tensor cannot be read");
    let status = queue.status_blocking();
    assert!(status.queued == 0 && status.active_invocations == 0, "{status:?}");
    assert!(log.lock().unwrap().len() < 50, "cancelled kernels did not all run");
}

/// A CPU device that reports `memory` bytes of device memory.
struct SizedDevice {
    cpu: CpuDevice,
    memory: u64,
}

impl Device for SizedDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo { memory_bytes: self.memory, ..self.cpu.info() }
    }
    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        self.cpu.upload(meta, bytes)
    }
    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        spin(Duration::from_millis(5));
        self.cpu.launch(op, inputs, out)
    }
    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        self.cpu.download(buffer, meta)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        Ok(())
    }
}

#[test]
fn functions_are_placed_on_the_least_loaded_device_that_holds_their_weights() {
    use sluice_runtime::scheduler::DevicePool;
    let sized = |memory| DeviceQueue::start(Box::new(SizedDevice { cpu: CpuDevice::with_threads(1), memory }));
    let pool = DevicePool::new(vec![sized(1 << 30), sized(1 << 30)]);
    // Placed bytes break ties: two functions spread over both devices.
    let first = pool.place(100 << 20).unwrap();
    let second = pool.place(100 << 20).unwrap();
    assert_ne!(first.index(), second.index());
    drop((first, second));

    // Device 0 is busy: a new function goes to device 1.
    let busy = &pool.queues()[0];
    let inv = stream(busy, "busy", PriorityClass::Batch, 1);
    let x = upload(busy, &inv, &[1], &[1.0]);
    for _ in 0..40 {
        unary(busy, &inv, UnaryOp::Neg, &x);
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(pool.place(1 << 20).unwrap().index(), 1, "the idle device is chosen");

    // Weights go where they fit, and weights that fit nowhere are refused with the sizes.
    let small_and_big = DevicePool::new(vec![sized(64 << 20), sized(512 << 20)]);
    assert_eq!(small_and_big.place(256 << 20).unwrap().index(), 1);
    let err = small_and_big.place(1 << 30).err().expect("too big for both");
    assert!(err.to_string().contains("no device can hold 1073741824 bytes"), "{err}");
    drop(inv);
}
