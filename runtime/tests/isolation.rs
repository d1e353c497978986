//! One tenant cannot hurt another through the scheduler (issue 12): a flooding
//! invocation's backlog is bounded, so another tenant's work waits for a bounded
//! number of kernels whatever the flood; a kernel that panics or fails fails its
//! invocation alone and the device keeps serving.
//!
//! On the simulated device and clock (`device::sim`): the tests assert on the order
//! kernels ran in, on counts and on simulated time, so they give the same answer on an
//! idle and on a saturated machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sluice_host_api::{DType, Op, TensorMeta, UnaryOp};
use sluice_runtime::device::sim::{Gate, SimBuilder, SimDevice, SimLog};
use sluice_runtime::scheduler::{
    Clock, DeviceQueue, InvocationGuard, Policy, PriorityClass, SchedulerConfig, SchedulingInfo, TensorId,
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
    queue.begin(SchedulingInfo { tenant: tenant.into(), class, weight: 1 })
}

fn meta(n: u32) -> TensorMeta {
    TensorMeta::new(DType::F32, vec![n]).unwrap()
}

fn upload(queue: &DeviceQueue, inv: &InvocationGuard, data: &[f32]) -> (TensorId, TensorMeta) {
    let id = queue.new_tensor_id();
    let m = meta(data.len() as u32);
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

/// Tenant A's invocation uploads a tensor and launches `flood` relus on it without
/// reading anything (misbehave's `leak`), waiting for room before each submission as
/// the engine does; the device is held at A's first kernel until A has queued all it
/// may. Then tenant B submits one upload and one exp, and the device runs. Under FIFO,
/// the worst case for B.
fn victim_next_to_flood(max_queued: usize, flood: usize) -> Victim {
    let config = SchedulerConfig { policy: Policy::Fifo, max_queued_per_invocation: max_queued, ..Default::default() };
    let sim = sim(config, |d| d.cost(|_, _| KERNEL));
    sim.gate.close();
    let a = stream(&sim.queue, "tenant-a", PriorityClass::Latency);
    let room = a.room().clone();
    let done = Arc::new(AtomicBool::new(false));
    let producer = {
        let (queue, done) = (sim.queue.clone(), done.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(a.room().wait());
            let x = upload(&queue, &a, &[1.0; 16]);
            for _ in 0..flood {
                rt.block_on(a.room().wait());
                unary(&queue, &a, UnaryOp::Relu, &x);
            }
            done.store(true, Ordering::Release);
            a
        })
    };
    sim.gate.wait_blocked();
    // A has queued everything it may: all of it, or a full room (it waits for room).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(done.load(Ordering::Acquire) || room.queued() == room.limit()) {
        assert!(std::time::Instant::now() < deadline, "the flooding invocation never filled its room");
        std::thread::sleep(Duration::from_millis(1));
    }
    let b = stream(&sim.queue, "tenant-b", PriorityClass::Latency);
    let submitted = sim.clock.now();
    let y = upload(&sim.queue, &b, &[0.0, 1.0]);
    let z = unary(&sim.queue, &b, UnaryOp::Exp, &y);
    sim.gate.open();
    assert_eq!(read_f32(&sim.queue, &z).unwrap(), vec![1.0, std::f32::consts::E]);
    let a = producer.join().unwrap();
    drop(a);
    let log = sim.log.entries();
    let at = log.iter().position(|r| r.op == Op::Unary(UnaryOp::Exp)).expect("B's kernel ran");
    let flood_kernels_before = log[..at].iter().filter(|r| r.op == Op::Unary(UnaryOp::Relu)).count();
    Victim { flood_kernels_before, waited: log[at].start.saturating_sub(submitted) }
}

#[test]
fn a_flooding_invocation_delays_another_tenant_by_a_bounded_backlog() {
    let limit = 64;
    for flood in [500, 2000] {
        let v = victim_next_to_flood(limit, flood);
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
    let unbounded = victim_next_to_flood(usize::MAX, 2000);
    assert_eq!(unbounded.flood_kernels_before, 2000);
    assert!(unbounded.waited >= KERNEL * 2000, "{:?}", unbounded.waited);
}
