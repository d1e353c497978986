//! The scheduler on asynchronous devices, simulated: a GPU-like stream (best-effort work
//! in flight is bounded), a stream with an SM partition (latency work on the reserved
//! lane does not wait for best-effort work), and a stream that times its kernels (charges
//! are corrected to the device's clock).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_host_api::{Op, TensorMeta, UnaryOp};
use sluice_runtime::device::{Buffer, CpuDevice, Device, DeviceError, DeviceInfo, KernelClock, Lane, TimedLaunch};
use sluice_runtime::scheduler::{DeviceQueue, Policy, PriorityClass, SchedulerConfig};

use super::{overtaking_costs, read_f32, spin, stream, unary, upload};

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
