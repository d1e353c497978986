//! A lost device (issue 11, defect 8), on the simulated device and clock: a launch
//! loses the device as a sticky GPU error would; the work in flight fails with
//! `device-failure` saying the device was reset, the device is reset, the status counts
//! the reset, and the next invocation runs. A device that cannot be reset is reported
//! failed and fails new work at once.
//!
//! Everything is decided by the order of commands and launches (the simulated
//! device's gate and planned loss), so the tests give the same answer on an idle and on
//! a saturated machine.

use std::sync::Arc;
use std::time::Duration;

use sluice_host_api::{ApiError, DType, ErrorCode, Op, TensorMeta, UnaryOp};
use sluice_runtime::device::sim::{Gate, Loss, SimBuilder, SimDevice};
use sluice_runtime::scheduler::{
    Clock, DeviceHealth, DeviceQueue, InvocationGuard, Policy, PriorityClass, SchedulerConfig, SchedulingInfo, TensorId,
};

type Tensor = (TensorId, TensorMeta);

struct Sim {
    queue: DeviceQueue,
    gate: Arc<Gate>,
    loss: Arc<Loss>,
}

fn sim(device: impl FnOnce(SimBuilder) -> SimBuilder) -> Sim {
    let clock = Clock::simulated();
    let device: SimDevice = device(SimDevice::builder(clock.clone()).cost(|_, _| Duration::from_micros(10))).build();
    let (gate, loss) = (device.gate(), device.loss());
    let config = SchedulerConfig { policy: Policy::Fifo, clock, ..Default::default() };
    Sim { queue: DeviceQueue::start_with(Box::new(device), config), gate, loss }
}

fn stream(queue: &DeviceQueue, tenant: &str) -> InvocationGuard {
    queue.begin(SchedulingInfo {
        tenant: tenant.into(),
        function: "f".into(),
        class: PriorityClass::Latency,
        weight: 1,
    })
}

fn upload(queue: &DeviceQueue, inv: &InvocationGuard, data: &[f32]) -> Tensor {
    let id = queue.new_tensor_id();
    let meta = TensorMeta::new(DType::F32, vec![data.len() as u32]).unwrap();
    queue.upload(inv.id(), id, meta.clone(), data.iter().flat_map(|v| v.to_le_bytes()).collect());
    (id, meta)
}

fn unary(queue: &DeviceQueue, inv: &InvocationGuard, op: UnaryOp, x: &Tensor) -> Tensor {
    let id = queue.new_tensor_id();
    queue.launch(inv.id(), id, Op::Unary(op), vec![x.clone()], x.1.clone());
    (id, x.1.clone())
}

fn read(queue: &DeviceQueue, t: &Tensor) -> Result<Vec<f32>, ApiError> {
    let bytes = queue.read_blocking(t.0, t.1.clone())?;
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
}

fn assert_reset_error(e: ApiError, what: &str) {
    assert_eq!(e.code, ErrorCode::DeviceFailure, "{what}: {e:?}");
    assert!(e.message.contains("reset"), "{what}: {}", e.message);
}

/// Tenant A's neg ran and its exp is about to run when the exp loses the device; A's
/// next op and tenant B's work are queued behind it.
fn work_in_flight_fails_and_the_device_serves_again(device: impl FnOnce(SimBuilder) -> SimBuilder) {
    let Sim { queue, gate, loss } = sim(device);
    gate.close();
    let a = stream(&queue, "tenant-a");
    let x = upload(&queue, &a, &[1.0, 2.0]);
    let y = unary(&queue, &a, UnaryOp::Neg, &x);
    // The neg is held at the gate, past the device's loss check: the next launch is lost.
    gate.wait_blocked();
    loss.at_launch(1);
    let z = unary(&queue, &a, UnaryOp::Exp, &y);
    let w = unary(&queue, &a, UnaryOp::Relu, &z);
    let b = stream(&queue, "tenant-b");
    let u = upload(&queue, &b, &[3.0]);
    let v = unary(&queue, &b, UnaryOp::Neg, &u);
    gate.open();

    let lost = read(&queue, &z).unwrap_err();
    assert_eq!(lost.code, ErrorCode::DeviceFailure);
    assert!(lost.message.contains("device lost") && lost.message.contains("illegal memory access"), "{lost:?}");
    assert_reset_error(read(&queue, &y).unwrap_err(), "a result already on the lost device");
    assert_reset_error(read(&queue, &w).unwrap_err(), "the invocation's queued op");
    assert_reset_error(read(&queue, &u).unwrap_err(), "another tenant's queued upload");
    assert_reset_error(read(&queue, &v).unwrap_err(), "another tenant's queued op");

    let status = queue.status_blocking();
    assert_eq!((status.resets, status.health.clone()), (1, DeviceHealth::Healthy));
    assert!(status.last_reset.as_deref().is_some_and(|r| r.contains("illegal memory access")), "{status:?}");
    assert_eq!(status.resident_bytes, 0, "the lost buffers are dropped");
    assert_eq!((loss.recoveries(), queue.resets()), (1, 1));

    // The device serves again: the open invocations and a new one.
    let again = unary(&queue, &a, UnaryOp::Neg, &upload(&queue, &a, &[4.0]));
    assert_eq!(read(&queue, &again).unwrap(), vec![-4.0]);
    drop((a, b));
    let c = stream(&queue, "tenant-c");
    let t = unary(&queue, &c, UnaryOp::Neg, &upload(&queue, &c, &[1.0, -2.0]));
    assert_eq!(read(&queue, &t).unwrap(), vec![-1.0, 2.0]);
    assert_eq!(queue.status_blocking().resets, 1, "one loss, one reset");
}

#[test]
fn a_lost_synchronous_device_fails_the_work_in_flight_and_serves_again() {
    work_in_flight_fails_and_the_device_serves_again(|d| d);
}

#[test]
fn a_lost_stream_device_fails_the_work_in_flight_and_serves_again() {
    // Asynchronous and timed, like a GPU: the loss comes back from a timed launch.
    work_in_flight_fails_and_the_device_serves_again(|d| d.streams().timed());
}

#[test]
fn a_device_that_cannot_be_reset_is_failed_and_refuses_work_at_once() {
    let Sim { queue, loss, .. } = sim(|d| d);
    loss.at_launch(1);
    loss.refuse_recovery();
    let a = stream(&queue, "tenant-a");
    let y = unary(&queue, &a, UnaryOp::Neg, &upload(&queue, &a, &[1.0]));
    assert!(read(&queue, &y).unwrap_err().message.contains("device lost"));
    let status = queue.status_blocking();
    let DeviceHealth::Failed(why) = &status.health else { panic!("still healthy: {status:?}") };
    assert!(why.contains("could not be reset"), "{why}");
    assert_eq!(status.resets, 1);
    drop(a);
    // New work fails at once with the reason (a read does not wait for a device that
    // will never run it).
    let b = stream(&queue, "tenant-b");
    let t = unary(&queue, &b, UnaryOp::Neg, &upload(&queue, &b, &[2.0]));
    let e = read(&queue, &t).unwrap_err();
    assert_eq!(e.code, ErrorCode::DeviceFailure);
    assert!(e.message.contains("could not be reset"), "{e:?}");
    assert_eq!(loss.recoveries(), 0);
}

#[test]
fn placement_passes_over_a_device_lost_for_good() {
    use sluice_runtime::scheduler::DevicePool;
    let (lost, other) = (sim(|d| d), sim(|d| d));
    let pool = DevicePool::new(vec![lost.queue.clone(), other.queue.clone()]);
    assert_eq!(pool.place(1 << 10).unwrap().index(), 0, "both idle: the first");
    lost.loss.at_launch(1);
    lost.loss.refuse_recovery();
    let a = stream(&lost.queue, "tenant-a");
    let y = unary(&lost.queue, &a, UnaryOp::Neg, &upload(&lost.queue, &a, &[1.0]));
    assert!(read(&lost.queue, &y).is_err());
    drop(a);
    lost.queue.status_blocking();
    assert!(!lost.queue.serves() && other.queue.serves());
    assert_eq!(pool.place(1 << 10).unwrap().index(), 1, "the lost device is passed over");
}
