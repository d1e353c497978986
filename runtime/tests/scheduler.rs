//! The scheduler's policies on a device whose kernel durations the test controls.
//!
//! `TimedDevice` computes on the CPU reference backend but makes each kernel take a
//! fixed time chosen by the test (by busy-waiting) and logs the order kernels ran
//! in, so the tests can see who overtook whom and how device time was shared.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_host_api::{DType, MatmulArgs, Op, RowSplit, TensorMeta, UnaryOp};
use sluice_runtime::backend::{Buffer, CpuDevice, Device, DeviceError, DeviceInfo, KernelClock, Lane, TimedLaunch};
use sluice_runtime::scheduler::{
    DeviceQueue, InvocationGuard, Policy, PriorityClass, SchedulerConfig, SchedulingInfo, TensorId,
};

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

/// A device that behaves like a GPU stream: `launch` returns at once and the kernel
/// occupies a simulated device timeline after everything enqueued before it;
/// `synchronize` and `download` wait for the timeline. Results are computed on the
/// CPU. The log records each kernel's simulated end.
struct StreamDevice {
    cpu: CpuDevice,
    busy_until: Mutex<Instant>,
    ends: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl StreamDevice {
    fn wait_idle(&self) {
        let until = *self.busy_until.lock().unwrap();
        spin(until.saturating_duration_since(Instant::now()));
    }
}

impl Device for StreamDevice {
    fn info(&self) -> DeviceInfo {
        self.cpu.info()
    }
    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        self.cpu.upload(meta, bytes)
    }
    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        let mut busy = self.busy_until.lock().unwrap();
        let end = (*busy).max(Instant::now()) + overtaking_costs(op);
        *busy = end;
        self.ends.lock().unwrap().push((format!("{op:?}"), end));
        self.cpu.launch(op, inputs, out)
    }
    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        self.wait_idle();
        self.cpu.download(buffer, meta)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        self.wait_idle();
        Ok(())
    }
    fn is_async(&self) -> bool {
        true
    }
}

/// On a stream device with 40 × 2 ms of best-effort work queued, how long a latency
/// kernel submitted 5 ms later takes to finish.
fn stream_latency(policy: Policy) -> Duration {
    let ends = Arc::new(Mutex::new(Vec::new()));
    let device =
        StreamDevice { cpu: CpuDevice::with_threads(1), busy_until: Mutex::new(Instant::now()), ends: ends.clone() };
    let config = SchedulerConfig {
        policy,
        preemption_budget: Duration::from_micros(100),
        fill_depth: Duration::from_millis(5),
        ..Default::default()
    };
    let queue = DeviceQueue::start_with(Box::new(device), config);
    // Warm-up: the cost model learns what a best-effort kernel costs.
    let warm = stream(&queue, "batch-tenant", PriorityClass::Batch, 1);
    let x = upload(&queue, &warm, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let y = unary(&queue, &warm, UnaryOp::Neg, &x);
    read_f32(&queue, &y);
    drop(warm);

    let be = stream(&queue, "batch-tenant", PriorityClass::Batch, 1);
    let x = upload(&queue, &be, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let mut last = x.clone();
    for _ in 0..40 {
        last = unary(&queue, &be, UnaryOp::Neg, &last);
    }
    std::thread::sleep(Duration::from_millis(5));
    let ls = stream(&queue, "latency-tenant", PriorityClass::Latency, 1);
    let submitted = Instant::now();
    let y = upload(&queue, &ls, &[2], &[0.0, 1.0]);
    let z = unary(&queue, &ls, UnaryOp::Exp, &y);
    assert_eq!(read_f32(&queue, &z), vec![1.0, std::f32::consts::E]);
    assert_eq!(read_f32(&queue, &last), vec![1.0, 2.0, 3.0, 4.0]);
    let ends = ends.lock().unwrap();
    let (_, end) = ends.iter().find(|(k, _)| k.contains("Exp")).expect("the latency kernel ran");
    end.saturating_duration_since(submitted)
}

#[test]
fn on_an_asynchronous_device_best_effort_work_in_flight_is_bounded() {
    let bounded = stream_latency(Policy::Priority);
    let fifo = stream_latency(Policy::Fifo);
    eprintln!("latency kernel finished after {bounded:?} (priority) vs {fifo:?} (FIFO)");
    // FIFO hands all 80 ms of best-effort work to the stream at once: the latency
    // kernel finishes behind most of it. The priority scheduler keeps at most the fill
    // depth (5 ms) in flight, so the latency kernel waits for that and one kernel.
    assert!(fifo >= Duration::from_millis(50), "FIFO: {fifo:?}");
    assert!(bounded <= Duration::from_millis(12), "bounded: {bounded:?}");
}

/// A stream device with a reserved partition, like a GPU with green contexts: the
/// reserved lane has its own timeline; the whole device and the remainder share the
/// best-effort timeline, and kernels on the remainder take 25 % longer (fewer SMs).
/// The log records each kernel's lane and simulated end.
struct PartitionedDevice {
    cpu: CpuDevice,
    lane: Mutex<Lane>,
    reserved_until: Mutex<Instant>,
    shared_until: Mutex<Instant>,
    ends: Arc<Mutex<Vec<(String, Lane, Instant)>>>,
}

impl PartitionedDevice {
    fn timeline(&self, lane: Lane) -> &Mutex<Instant> {
        match lane {
            Lane::Reserved => &self.reserved_until,
            Lane::Whole | Lane::Remainder => &self.shared_until,
        }
    }

    fn wait_for(&self, lane: Lane) {
        let until = *self.timeline(lane).lock().unwrap();
        spin(until.saturating_duration_since(Instant::now()));
    }
}

impl Device for PartitionedDevice {
    fn info(&self) -> DeviceInfo {
        self.cpu.info()
    }
    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        self.cpu.upload(meta, bytes)
    }
    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        let lane = *self.lane.lock().unwrap();
        let cost = match lane {
            Lane::Remainder => overtaking_costs(op) * 5 / 4,
            _ => overtaking_costs(op),
        };
        let mut busy = self.timeline(lane).lock().unwrap();
        let end = (*busy).max(Instant::now()) + cost;
        *busy = end;
        self.ends.lock().unwrap().push((format!("{op:?}"), lane, end));
        self.cpu.launch(op, inputs, out)
    }
    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        self.wait_for(*self.lane.lock().unwrap());
        self.cpu.download(buffer, meta)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        self.wait_for(Lane::Reserved);
        self.wait_for(Lane::Whole);
        Ok(())
    }
    fn is_async(&self) -> bool {
        true
    }
    fn partition(&self) -> String {
        "test partition".into()
    }
    fn has_partition(&self) -> bool {
        true
    }
    fn set_lane(&self, lane: Lane) {
        *self.lane.lock().unwrap() = lane;
    }
    fn synchronize_lane(&self, lane: Lane) -> Result<(), DeviceError> {
        self.wait_for(lane);
        Ok(())
    }
    fn lane_idle(&self, lane: Lane) -> Result<bool, DeviceError> {
        Ok(*self.timeline(lane).lock().unwrap() <= Instant::now())
    }
}

#[test]
fn on_a_partitioned_device_latency_work_runs_beside_best_effort_work() {
    let ends = Arc::new(Mutex::new(Vec::new()));
    let now = Instant::now();
    let device = PartitionedDevice {
        cpu: CpuDevice::with_threads(1),
        lane: Mutex::new(Lane::Whole),
        reserved_until: Mutex::new(now),
        shared_until: Mutex::new(now),
        ends: ends.clone(),
    };
    // A deep fill (20 ms of best-effort work in flight) that latency work on one queue
    // would wait behind.
    let config = SchedulerConfig {
        policy: Policy::Priority,
        preemption_budget: Duration::from_micros(100),
        fill_depth: Duration::from_millis(20),
        ..Default::default()
    };
    let queue = DeviceQueue::start_with(Box::new(device), config);
    let be = stream(&queue, "batch-tenant", PriorityClass::Batch, 1);
    let x = upload(&queue, &be, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let mut last = unary(&queue, &be, UnaryOp::Neg, &x);
    read_f32(&queue, &last); // the cost model learns the best-effort kernel
    for _ in 0..39 {
        last = unary(&queue, &be, UnaryOp::Neg, &last);
    }
    std::thread::sleep(Duration::from_millis(5));
    let ls = stream(&queue, "latency-tenant", PriorityClass::Latency, 1);
    let submitted = Instant::now();
    let y = upload(&queue, &ls, &[2], &[0.0, 1.0]);
    let z = unary(&queue, &ls, UnaryOp::Exp, &y);
    assert_eq!(read_f32(&queue, &z), vec![1.0, std::f32::consts::E]);
    let answered = submitted.elapsed();
    // The latency tenant stays active a while: best-effort work moves to the remainder.
    std::thread::sleep(Duration::from_millis(12));
    drop(ls);
    assert_eq!(read_f32(&queue, &last), vec![1.0, 2.0, 3.0, 4.0]);
    let ends = ends.lock().unwrap();
    let (_, lane, end) = ends.iter().find(|(k, _, _)| k.contains("Exp")).expect("the latency kernel ran");
    let latency = end.saturating_duration_since(submitted);
    let on = |want: Lane| ends.iter().filter(|(k, l, _)| k.contains("Neg") && *l == want).count();
    let (whole, remainder) = (on(Lane::Whole), on(Lane::Remainder));
    eprintln!(
        "latency kernel done after {latency:?} (answered after {answered:?}); best-effort kernels: {whole} on the \
         whole device, {remainder} on the remainder"
    );
    assert_eq!(*lane, Lane::Reserved);
    assert!(ends.iter().all(|(k, l, _)| !k.contains("Neg") || *l != Lane::Reserved), "best-effort on the reservation");
    // On one queue the latency kernel would wait for the best-effort work in flight
    // (about 15 ms of the 20 ms fill when it arrives); on its own partition it waits for
    // nothing (the bound leaves room for a descheduled thread on a busy machine).
    assert!(latency <= Duration::from_millis(8), "partitioned: {latency:?}");
    // Best-effort work ran on the whole device before the latency tenant came, on the
    // remainder while it was active (and on the whole device again after, unless
    // everything was already enqueued).
    assert!(whole >= 1 && remainder >= 1, "whole {whole}, remainder {remainder}");
}

/// A stream device that times kernels like GPU events: each kernel's simulated device
/// time is known once the timeline passed its end. Abs takes 4 ms on inputs ≥ 100 and
/// 1 ms otherwise, so two tenants running the very same kernel shape cost different
/// amounts, which no cost model keyed by shape can tell apart.
struct ClockedDevice {
    cpu: CpuDevice,
    busy_until: Mutex<Instant>,
}

struct SimClock {
    end: Instant,
    took: Duration,
}

impl KernelClock for SimClock {
    fn elapsed(&self) -> Result<Option<Duration>, DeviceError> {
        Ok((Instant::now() >= self.end).then_some(self.took))
    }
}

impl ClockedDevice {
    fn enqueue(&self, inputs: &[(&Buffer, &TensorMeta)]) -> (Instant, Duration) {
        let first = match inputs[0].0 {
            Buffer::Cpu(b) => b.to_f32_vec()[0],
            _ => unreachable!("a CPU buffer"),
        };
        let took = if first.abs() >= 100.0 { Duration::from_millis(4) } else { Duration::from_millis(1) };
        let mut busy = self.busy_until.lock().unwrap();
        *busy = (*busy).max(Instant::now()) + took;
        (*busy, took)
    }

    fn wait_idle(&self) {
        let until = *self.busy_until.lock().unwrap();
        spin(until.saturating_duration_since(Instant::now()));
    }
}

impl Device for ClockedDevice {
    fn info(&self) -> DeviceInfo {
        self.cpu.info()
    }
    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        self.cpu.upload(meta, bytes)
    }
    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        self.enqueue(inputs);
        self.cpu.launch(op, inputs, out)
    }
    fn launch_timed(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
    ) -> Option<Result<TimedLaunch, DeviceError>> {
        let (end, took) = self.enqueue(inputs);
        Some(self.cpu.launch(op, inputs, out).map(|b| (b, Box::new(SimClock { end, took }) as Box<dyn KernelClock>)))
    }
    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        self.wait_idle();
        self.cpu.download(buffer, meta)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        self.wait_idle();
        Ok(())
    }
    fn is_async(&self) -> bool {
        true
    }
}

#[test]
fn device_timed_kernels_are_charged_what_they_took() {
    let device = ClockedDevice { cpu: CpuDevice::with_threads(1), busy_until: Mutex::new(Instant::now()) };
    let queue = DeviceQueue::start_with(Box::new(device), SchedulerConfig::default());
    let heavy = stream(&queue, "heavy", PriorityClass::Batch, 1);
    let light = stream(&queue, "light", PriorityClass::Batch, 1);
    let (mut h, mut l) = (upload(&queue, &heavy, &[4], &[500.0; 4]), upload(&queue, &light, &[4], &[1.0; 4]));
    for _ in 0..10 {
        h = unary(&queue, &heavy, UnaryOp::Abs, &h);
        l = unary(&queue, &light, UnaryOp::Abs, &l);
    }
    assert_eq!(read_f32(&queue, &h), vec![500.0; 4]);
    assert_eq!(read_f32(&queue, &l), vec![1.0; 4]);
    let status = queue.status_blocking();
    let time = |name: &str| {
        let t = status.tenants.iter().find(|t| t.tenant == name).expect("tenant in the status");
        Duration::from_micros(t.device_time_us)
    };
    let (heavy_time, light_time) = (time("heavy"), time("light"));
    eprintln!("charged: heavy {heavy_time:?} (took 40 ms), light {light_time:?} (took 10 ms)");
    // The same kernel shape, so estimates alone would charge both alike (25 ms each).
    assert!(heavy_time.abs_diff(Duration::from_millis(40)) <= Duration::from_millis(2), "heavy {heavy_time:?}");
    assert!(light_time.abs_diff(Duration::from_millis(10)) <= Duration::from_millis(2), "light {light_time:?}");
}
