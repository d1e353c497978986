//! One tenant cannot hurt another through the scheduler (issue 12): a flooding
//! invocation's backlog is bounded (a batch one's more tightly), so another tenant's
//! work waits for a bounded number of kernels whatever the flood; a kernel that panics
//! or fails fails its invocation alone and the device keeps serving.
//!
//! On the simulated device and clock (`device::sim`): the tests assert on the order
//! kernels ran in, on counts and on simulated time, so they give the same answer on an
//! idle and on a saturated machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sluice_host_api::{DType, Op, TensorMeta, UnaryOp};
use sluice_runtime::device::sim::{Gate, SimBuilder, SimDevice, SimLog};
use sluice_runtime::device::{Buffer, CpuDevice, Device, DeviceError, DeviceInfo, PartitionState};
use sluice_runtime::scheduler::{
    Clock, DeviceHealth, DeviceQueue, InvocationGuard, Policy, PriorityClass, QueueRoom, SchedulerConfig,
    SchedulingInfo, TensorId,
};

/// A scheduler on a simulated device, with the device's log and gate and the clock.
struct Sim {
    queue: DeviceQueue,
    log: SimLog,
    gate: Arc<Gate>,
    clock: Clock,
}

fn sim(config: SchedulerConfig, device: impl FnOnce(SimBuilder) -> SimBuilder) -> Sim {
    let clock = Clock::simulated();
    let device: SimDevice = device(SimDevice::builder(clock.clone())).build();
    let (log, gate) = (device.log(), device.gate());
    let queue = DeviceQueue::start_with(Box::new(device), SchedulerConfig { clock: clock.clone(), ..config });
    Sim { queue, log, gate, clock }
}

fn stream(queue: &DeviceQueue, tenant: &str, class: PriorityClass) -> InvocationGuard {
    queue.begin(SchedulingInfo { tenant: tenant.into(), function: "f".into(), class, weight: 1 })
}

fn upload(queue: &DeviceQueue, inv: &InvocationGuard, data: &[f32]) -> (TensorId, TensorMeta) {
    upload_shaped(queue, inv, &[data.len() as u32], data)
}

fn upload_shaped(queue: &DeviceQueue, inv: &InvocationGuard, shape: &[u32], data: &[f32]) -> (TensorId, TensorMeta) {
    let id = queue.new_tensor_id();
    let m = TensorMeta::new(DType::F32, shape.to_vec()).unwrap();
    queue.upload(inv.id(), id, m.clone(), data.iter().flat_map(|v| v.to_le_bytes()).collect());
    (id, m)
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

fn read_f32(queue: &DeviceQueue, t: &(TensorId, TensorMeta)) -> Result<Vec<f32>, sluice_host_api::ApiError> {
    let bytes = queue.read_blocking(t.0, t.1.clone())?;
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
}

/// Every kernel costs 10 µs of simulated time.
const KERNEL: Duration = Duration::from_micros(10);

/// What tenant B saw next to tenant A's flood.
struct Victim {
    /// A's kernels that ran before B's.
    flood_kernels_before: usize,
    /// B's simulated wait: from its submission to its kernel's start.
    waited: Duration,
}

/// Tenant A's invocation of class `class` on its own thread: one upload, then `n` relus
/// on it without reading anything (misbehave's `leak`), waiting for room before each
/// submission as the engine does.
struct Flood {
    producer: std::thread::JoinHandle<InvocationGuard>,
}

impl Flood {
    /// Starts the flood on a device held at its gate, and returns once A has queued
    /// everything it may: all of it, or a full room (it waits for room).
    fn start(sim: &Sim, class: PriorityClass, n: usize) -> (Flood, Arc<QueueRoom>) {
        let a = stream(&sim.queue, "tenant-a", class);
        let room = a.room().clone();
        let done = Arc::new(AtomicBool::new(false));
        let producer = {
            let (queue, done) = (sim.queue.clone(), done.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
                rt.block_on(a.room().wait());
                let x = upload(&queue, &a, &[1.0; 16]);
                for _ in 0..n {
                    rt.block_on(a.room().wait());
                    unary(&queue, &a, UnaryOp::Relu, &x);
                }
                done.store(true, Ordering::Release);
                a
            })
        };
        sim.gate.wait_blocked();
        // The producer queues until its room is full, or until it is done (or panicked:
        // `finish` then reports it).
        while !(done.load(Ordering::Acquire) || room.queued() == room.limit() || producer.is_finished()) {
            std::thread::sleep(Duration::from_millis(1));
        }
        (Flood { producer }, room)
    }

    /// Waits for the rest of the flood (the gate must be open) and ends A's invocation.
    fn finish(self) {
        drop(self.producer.join().unwrap());
    }
}

/// Tenant A's invocation uploads a tensor and launches `flood` relus on it without
/// reading anything (misbehave's `leak`), waiting for room before each submission as
/// the engine does; the device is held at A's first kernel until A has queued all it
/// may. Then tenant B submits one upload and one exp, and the device runs. Both are
/// latency class (the default); FIFO is the worst case for B.
fn victim_next_to_flood(policy: Policy, max_queued: usize, flood: usize) -> Victim {
    let config = SchedulerConfig { policy, max_queued_per_invocation: max_queued, ..Default::default() };
    let sim = sim(config, |d| d.cost(|_, _| KERNEL));
    sim.gate.close();
    let (producer, _) = Flood::start(&sim, PriorityClass::Latency, flood);
    let b = stream(&sim.queue, "tenant-b", PriorityClass::Latency);
    let submitted = sim.clock.now();
    let y = upload(&sim.queue, &b, &[0.0, 1.0]);
    let z = unary(&sim.queue, &b, UnaryOp::Exp, &y);
    sim.gate.open();
    assert_eq!(read_f32(&sim.queue, &z).unwrap(), vec![1.0, std::f32::consts::E]);
    producer.finish();
    let log = sim.log.entries();
    let at = log.iter().position(|r| r.op == Op::Unary(UnaryOp::Exp)).expect("B's kernel ran");
    let flood_kernels_before = log[..at].iter().filter(|r| r.op == Op::Unary(UnaryOp::Relu)).count();
    Victim { flood_kernels_before, waited: log[at].start.saturating_sub(submitted) }
}

#[test]
fn a_flooding_invocation_delays_another_tenant_by_a_bounded_backlog() {
    let limit = 64;
    for flood in [500, 2000] {
        let v = victim_next_to_flood(Policy::Fifo, limit, flood);
        // The kernel held at the gate, then at most the room's worth of A's work.
        assert!(
            v.flood_kernels_before <= limit + 1,
            "flood {flood}: B ran after {} of A's kernels",
            v.flood_kernels_before
        );
        assert!(v.waited <= KERNEL * (limit as u32 + 2), "flood {flood}: B waited {:?}", v.waited);
    }
    // Without the bound (as before): B waits behind A's whole backlog, which grows
    // with the flood.
    let unbounded = victim_next_to_flood(Policy::Fifo, usize::MAX, 2000);
    assert_eq!(unbounded.flood_kernels_before, 2000);
    assert!(unbounded.waited >= KERNEL * 2000, "{:?}", unbounded.waited);
}

#[test]
fn a_flooding_batch_invocation_queues_less_than_a_latency_one() {
    // Each item a batch invocation has queued is also a command that a latency
    // invocation's next one may wait behind in the device's intake, so batch work gets
    // the shallower room; the producer waits for room, alone.
    let config = SchedulerConfig::default();
    assert!(config.max_queued_per_batch_invocation < config.max_queued_per_invocation);
    for (class, limit) in [
        (PriorityClass::Batch, config.max_queued_per_batch_invocation),
        (PriorityClass::Latency, config.max_queued_per_invocation),
    ] {
        let sim = sim(config.clone(), |d| d.cost(|_, _| KERNEL));
        sim.gate.close();
        let (producer, room) = Flood::start(&sim, class, 1000);
        assert_eq!(room.limit(), limit, "{class:?}");
        assert_eq!(room.queued(), limit, "{class:?}: the producer waits at its room's bound");
        sim.gate.open();
        producer.finish();
    }
}

#[test]
fn under_fair_share_another_tenant_overtakes_a_flood() {
    // The default policy, the default room: B's work runs ahead of A's backlog, after
    // the kernel held at the gate and at most one more (the tie at B's start).
    for flood in [500, 2000] {
        let v = victim_next_to_flood(Policy::Priority, SchedulerConfig::default().max_queued_per_invocation, flood);
        assert!(v.flood_kernels_before <= 2, "flood {flood}: B ran after {} of A's kernels", v.flood_kernels_before);
        assert!(v.waited <= KERNEL * 3, "flood {flood}: B waited {:?}", v.waited);
    }
}

#[test]
fn a_burst_of_frees_does_not_hold_up_another_tenants_read() {
    // An invocation that ends holding thousands of tensors frees them all at once. The
    // device releases them a few at a time between steps, so another tenant's upload and
    // read, arriving right behind the burst, are served before most of it is released
    // (before, the whole burst was released first, in arrival order).
    const HELD: usize = 2000;
    const BYTES: u64 = 16 * 4;
    let sim = sim(SchedulerConfig::default(), |d| d.cost(|_, _| KERNEL));
    let queue = &sim.queue;
    let a = stream(queue, "tenant-a", PriorityClass::Batch);
    let held: Vec<_> = (0..HELD).map(|i| upload(queue, &a, &[i as f32; 16])).collect();
    assert_eq!(queue.status_blocking().resident_tensors, HELD, "A's tensors are on the device");
    // The device stops at A's next kernel; A has one more queued behind it.
    sim.gate.close();
    let x = upload(queue, &a, &[1.0; 16]);
    let first = unary(queue, &a, UnaryOp::Relu, &x);
    let second = unary(queue, &a, UnaryOp::Relu, &x);
    sim.gate.wait_blocked();
    // Meanwhile A frees everything it held, and B uploads a tensor and reads it back.
    for (id, _) in &held {
        queue.free(*id);
    }
    let b = stream(queue, "tenant-b", PriorityClass::Latency);
    let v = upload(queue, &b, &[1.0, 2.0]);
    // B's read is sent now (its future polled once), so it is queued before A's first
    // kernel finishes whatever the threads' timing (a reader thread could send it late,
    // after the device had stopped at A's second kernel, and wait forever).
    let mut read = Box::pin(queue.read(v.0, v.1.clone()));
    let polled = read.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
    assert!(polled.is_pending(), "B's read waits for the device");
    // A's first kernel finishes; the device stops again at its second.
    sim.gate.allow(1);
    let bytes = tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(read).unwrap();
    let floats: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(floats, vec![1.0, 2.0]);
    sim.gate.wait_blocked();
    let resident = queue.resident_bytes();
    assert!(
        resident >= BYTES * HELD as u64 / 2,
        "{resident} bytes resident when B was served: most of A's {HELD} freed tensors ({} bytes) were released first",
        BYTES * HELD as u64
    );
    // All of them go once the device is idle, and the status counts what was freed
    // before it was asked.
    sim.gate.open();
    for (id, _) in [x, first, second, v] {
        queue.free(id);
    }
    drop((a, b));
    let status = queue.status_blocking();
    assert_eq!((status.resident_tensors, status.resident_bytes), (0, 0));
}

#[test]
fn a_panicking_kernel_fails_its_invocation_alone() {
    // Sqrt panics in the backend (as an out-of-bounds index would); the rest costs 10 µs.
    let sim = sim(SchedulerConfig::default(), |d| {
        d.cost(|op, _| match op {
            Op::Unary(UnaryOp::Sqrt) => panic!("injected backend fault"),
            _ => KERNEL,
        })
    });
    let queue = &sim.queue;
    let b = stream(queue, "tenant-b", PriorityClass::Latency);
    let a = stream(queue, "tenant-a", PriorityClass::Latency);
    let x = upload(queue, &a, &[4.0]);
    let bad = unary(queue, &a, UnaryOp::Sqrt, &x);
    let after = unary(queue, &a, UnaryOp::Neg, &bad);
    let y = upload(queue, &b, &[0.0]);
    let z = unary(queue, &b, UnaryOp::Exp, &y);
    let e = read_f32(queue, &bad).unwrap_err();
    assert_eq!(e.code, sluice_host_api::ErrorCode::DeviceFailure);
    assert!(e.message.contains("panicked") && e.message.contains("injected backend fault"), "{}", e.message);
    assert_eq!(read_f32(queue, &after).unwrap_err(), e, "later ops on the failed tensor fail the same way");
    assert_eq!(read_f32(queue, &z).unwrap(), vec![1.0], "the other tenant is served");
    drop(a);
    let a = stream(queue, "tenant-a", PriorityClass::Latency);
    let w = unary(queue, &a, UnaryOp::Neg, &upload(queue, &a, &[2.0]));
    assert_eq!(read_f32(queue, &w).unwrap(), vec![-2.0], "the device keeps serving the tenant too");
    let status = queue.status_blocking();
    assert_eq!(status.health, DeviceHealth::Healthy);
    assert_eq!(status.contained_faults, 1);
}

/// The CPU device, whose status query panics once told to: a fault outside the
/// backend's launch path, which stops the scheduler itself.
struct FragileStatus {
    inner: CpuDevice,
    panic_in_status: Arc<AtomicBool>,
}

impl Device for FragileStatus {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        self.inner.upload(meta, bytes)
    }
    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        self.inner.launch(op, inputs, out)
    }
    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        self.inner.download(buffer, meta)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn partition(&self) -> PartitionState {
        assert!(!self.panic_in_status.load(Ordering::Acquire), "injected scheduler fault");
        self.inner.partition()
    }
}

#[test]
fn status_reports_a_stopped_device_instead_of_panicking() {
    let panic_in_status = Arc::new(AtomicBool::new(false));
    let device = FragileStatus { inner: CpuDevice::with_threads(1), panic_in_status: panic_in_status.clone() };
    let queue = DeviceQueue::start(Box::new(device));
    assert_eq!(queue.status_blocking().health, DeviceHealth::Healthy);
    panic_in_status.store(true, Ordering::Release);
    assert!(matches!(queue.status_blocking().health, DeviceHealth::Failed(_)), "the status answers");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while queue.failure().is_none() {
        assert!(std::time::Instant::now() < deadline, "the failure was never recorded");
        std::thread::sleep(Duration::from_millis(1));
    }
    let status = queue.status_blocking();
    let DeviceHealth::Failed(why) = &status.health else { panic!("{:?}", status.health) };
    assert!(why.contains("injected scheduler fault"), "{why}");
    assert_eq!(status.device.kind, queue.info().kind);
    // Work on a stopped device fails at once instead of waiting forever.
    let inv = stream(&queue, "tenant-a", PriorityClass::Latency);
    let x = upload(&queue, &inv, &[1.0]);
    assert_eq!(read_f32(&queue, &x).unwrap_err().code, sluice_host_api::ErrorCode::DeviceFailure);
}

#[test]
fn a_kernels_scratch_is_charged_to_its_invocation_until_it_ran() {
    use sluice_host_api::{Conv2dArgs, ErrorCode, infer};
    use sluice_runtime::scheduler::{MemoryAccount, Reservation};
    let queue = DeviceQueue::start(Box::new(CpuDevice::with_threads(1)));
    let inv = stream(&queue, "tenant-a", PriorityClass::Latency);
    let x = upload_shaped(&queue, &inv, &[1, 2, 8, 8], &[1.0; 2 * 8 * 8]);
    let w = upload_shaped(&queue, &inv, &[4, 2, 3, 3], &[0.5; 4 * 2 * 3 * 3]);
    let op = Op::Conv2d(Conv2dArgs { stride: (1, 1), padding: (0, 0), dilation: (1, 1), groups: 1 });
    let out = infer(&op, &[&x.1, &w.1]).unwrap();
    // im2col on one thread: k = 2·3·3 rows by p = 6·6 columns of f32.
    let bytes = queue.scratch_bytes(&op, &[&x.1, &w.1], &out);
    assert_eq!(bytes, 18 * 36 * 4);
    // An invocation whose account cannot hold the scratch is refused before queueing.
    let small = MemoryAccount::new("small invocation", Some(bytes - 1), None);
    let refused = Reservation::new(&small, queue.memory(), bytes).unwrap_err();
    assert_eq!(refused.code, ErrorCode::QuotaExceeded);
    assert_eq!((small.used(), queue.memory().used()), (0, 0), "a refusal holds nothing");
    // Held from the launch until the kernel ran, then returned.
    let account = MemoryAccount::new("invocation", None, None);
    let scratch = Reservation::new(&account, queue.memory(), bytes).unwrap();
    let id = queue.new_tensor_id();
    queue.launch_charged(inv.id(), id, op, vec![x, w], out.clone(), Some(scratch));
    assert_eq!(read_f32(&queue, &(id, out)).unwrap()[0], 9.0, "0.5 × 18 ones");
    queue.status_blocking();
    assert_eq!((account.used(), account.peak(), queue.memory().used()), (0, bytes, 0));
}
