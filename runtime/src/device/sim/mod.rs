//! A simulated device, for tests and benchmarks of the scheduler: one configurable
//! device instead of a hand-written fake per test.
//!
//! Results are computed by the CPU device, so every output is right; what is
//! simulated is time. Each kernel takes what a cost function of the op and its inputs
//! says, on a simulated [`Clock`] shared with the scheduler
//! ([`SchedulerConfig::clock`](crate::scheduler::SchedulerConfig::clock)):
//! - synchronous (the default): a launch runs the kernel and moves the clock by its
//!   cost, like the CPU device;
//! - [`SimBuilder::streams`]: a launch enqueues the kernel on a timeline (a GPU
//!   stream) and returns at once; synchronising or downloading moves the clock to
//!   the end of the timeline;
//! - [`SimBuilder::partition`]: the reserved lane gets its own timeline, and kernels
//!   on the remainder take longer (fewer compute units);
//! - [`SimBuilder::timed`]: kernels can be timed by the device (GPU events);
//! - [`SimDevice::loss`]: a chosen launch loses the device (a sticky GPU error) until
//!   it is reset ([`Loss`]);
//! - [`SimBuilder::staged_uploads`]: large uploads are copied later, when the test
//!   releases them ([`Staging`]), like the CUDA device's stager.
//!
//! Every kernel is logged ([`Ran`]: op, rows, lane, simulated submission, start and
//! end), and every launch passes a [`Gate`] the test holds, so a test can stop the
//! device at a given kernel and submit more work meanwhile. [`profiling`] has a
//! wrapper timing a real device's kernels by op, for the benchmarks' breakdowns.

mod gate;
mod loss;
pub mod profiling;
mod staging;

use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use sluice_host_api::{Op, RowSplit, TensorMeta};

use super::{
    Buffer, CpuDevice, Device, DeviceError, DeviceInfo, KernelClock, KernelTiming, Lane, Lanes, PartitionState,
    RowSlicing, ScratchFn, TimedLaunch,
};
use crate::clock::Clock;

pub use gate::Gate;
pub use loss::Loss;
pub use staging::Staging;

/// What a kernel costs on the simulated device: a function of the op and its inputs.
pub type CostFn = Arc<dyn Fn(&Op, &[(&Buffer, &TensorMeta)]) -> Duration + Send + Sync>;

/// One kernel the simulated device ran (or enqueued), in simulated time.
#[derive(Clone, Debug)]
pub struct Ran {
    pub op: Op,
    /// The output rows, for a slice of a matmul or linear.
    pub rows: Option<Range<usize>>,
    pub lane: Lane,
    /// When the scheduler launched it.
    pub submitted: Duration,
    /// When it started on its timeline.
    pub start: Duration,
    pub end: Duration,
}

/// The log of what ran, shared by the device and the test.
#[derive(Clone, Default)]
pub struct SimLog {
    entries: Arc<(Mutex<Vec<Ran>>, Condvar)>,
}

impl SimLog {
    fn lock(&self) -> MutexGuard<'_, Vec<Ran>> {
        self.entries.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, ran: Ran) {
        self.lock().push(ran);
        self.entries.1.notify_all();
    }

    /// Everything that ran so far, in launch order.
    pub fn entries(&self) -> Vec<Ran> {
        self.lock().clone()
    }

    /// Waits until `ready` holds of the log, and returns the log then. Panics after a
    /// minute: the test is stuck.
    pub fn wait_until(&self, ready: impl Fn(&[Ran]) -> bool) -> Vec<Ran> {
        let log = self.lock();
        let (log, timeout) = self
            .entries
            .1
            .wait_timeout_while(log, Duration::from_secs(60), |log| !ready(log))
            .unwrap_or_else(|e| e.into_inner());
        assert!(!timeout.timed_out(), "the simulated device never got there");
        log.clone()
    }
}

/// Settings of a [`SimDevice`]; start from [`SimDevice::builder`].
pub struct SimBuilder {
    clock: Clock,
    cost: CostFn,
    streams: bool,
    remainder_slowdown: Option<f64>,
    timed: bool,
    memory_bytes: Option<u64>,
    cpu_threads: usize,
    scratch: Option<ScratchFn>,
    staged_min_bytes: usize,
}

impl SimBuilder {
    /// Every kernel (a row block: its share of the rows) costs `cost(op, inputs)`.
    pub fn cost(mut self, cost: impl Fn(&Op, &[(&Buffer, &TensorMeta)]) -> Duration + Send + Sync + 'static) -> Self {
        self.cost = Arc::new(cost);
        self
    }

    /// Asynchronous, like a GPU stream: launches enqueue on a timeline.
    pub fn streams(mut self) -> Self {
        self.streams = true;
        self
    }

    /// A reserved partition (implies [`SimBuilder::streams`]): the reserved lane has its
    /// own timeline, the whole device and the remainder share the other, and kernels
    /// on the remainder take `remainder_slowdown` times their cost.
    pub fn partition(mut self, remainder_slowdown: f64) -> Self {
        self.streams = true;
        self.remainder_slowdown = Some(remainder_slowdown);
        self
    }

    /// Kernels can be timed by the device ([`KernelTiming`]).
    pub fn timed(mut self) -> Self {
        self.timed = true;
        self
    }

    /// The device memory it reports (default: the CPU's).
    pub fn memory(mut self, bytes: u64) -> Self {
        self.memory_bytes = Some(bytes);
        self
    }

    /// The scratch its ops report ([`Device::scratch`]; default: the CPU device's).
    pub fn scratch(mut self, scratch: ScratchFn) -> Self {
        self.scratch = Some(scratch);
        self
    }

    /// Uploads of at least `min_bytes` are copied only when the test releases them
    /// ([`SimDevice::staging`]); until then work reading them waits on the launching
    /// thread, as on the CUDA device.
    pub fn staged_uploads(mut self, min_bytes: usize) -> Self {
        self.staged_min_bytes = min_bytes;
        self
    }

    /// Threads of the CPU device that computes the results (default 1).
    pub fn cpu_threads(mut self, threads: usize) -> Self {
        self.cpu_threads = threads;
        self
    }

    pub fn build(self) -> SimDevice {
        SimDevice {
            cpu: CpuDevice::with_threads(self.cpu_threads),
            clock: self.clock,
            cost: self.cost,
            streams: self.streams,
            remainder_slowdown: self.remainder_slowdown,
            timed: self.timed,
            memory_bytes: self.memory_bytes,
            scratch: self.scratch,
            timelines: Mutex::new([Duration::ZERO; 2]),
            lane: Mutex::new(Lane::Whole),
            log: SimLog::default(),
            gate: Arc::new(Gate::default()),
            loss: Arc::new(Loss::default()),
            staging: Arc::new(Staging::new(self.staged_min_bytes)),
        }
    }
}

/// The simulated device. Keep a [`SimDevice::log`] and [`SimDevice::gate`] before
/// handing it to a scheduler.
pub struct SimDevice {
    cpu: CpuDevice,
    clock: Clock,
    cost: CostFn,
    streams: bool,
    remainder_slowdown: Option<f64>,
    timed: bool,
    memory_bytes: Option<u64>,
    scratch: Option<ScratchFn>,
    /// Where the timelines end: the reserved lane's, and the shared one (the whole
    /// device and the remainder; every lane without a partition).
    timelines: Mutex<[Duration; 2]>,
    lane: Mutex<Lane>,
    log: SimLog,
    gate: Arc<Gate>,
    loss: Arc<Loss>,
    staging: Arc<Staging>,
}

/// Which timeline `lane` runs on.
fn timeline(lane: Lane) -> usize {
    match lane {
        Lane::Reserved => 0,
        Lane::Whole | Lane::Remainder => 1,
    }
}

impl SimDevice {
    /// A synchronous device on `clock` (use [`Clock::simulated`]) whose kernels cost
    /// nothing until [`SimBuilder::cost`] says otherwise.
    pub fn builder(clock: Clock) -> SimBuilder {
        SimBuilder {
            clock,
            cost: Arc::new(|_, _| Duration::ZERO),
            streams: false,
            remainder_slowdown: None,
            timed: false,
            memory_bytes: None,
            cpu_threads: 1,
            scratch: None,
            staged_min_bytes: 0,
        }
    }

    /// The log of what ran.
    pub fn log(&self) -> SimLog {
        self.log.clone()
    }

    /// The gate launches pass (open until the test closes it).
    pub fn gate(&self) -> Arc<Gate> {
        self.gate.clone()
    }

    /// The device's held uploads ([`SimBuilder::staged_uploads`]).
    pub fn staging(&self) -> Arc<Staging> {
        self.staging.clone()
    }

    /// The device's planned loss (none until the test plans one).
    pub fn loss(&self) -> Arc<Loss> {
        self.loss.clone()
    }

    fn current_lane(&self) -> Lane {
        *self.lane.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs (synchronous) or enqueues (streams) a kernel of cost `cost` and logs it;
    /// returns when it starts and ends.
    fn run(&self, op: &Op, rows: Option<Range<usize>>, cost: Duration) -> (Duration, Duration) {
        self.gate.pass();
        let lane = self.current_lane();
        let cost = match (lane, self.remainder_slowdown) {
            (Lane::Remainder, Some(slowdown)) => {
                Duration::from_nanos((cost.as_nanos() as f64 * slowdown).round() as u64)
            }
            _ => cost,
        };
        let submitted = self.clock.now();
        let (start, end) = if self.streams {
            let mut timelines = self.timelines.lock().unwrap_or_else(|e| e.into_inner());
            let t = &mut timelines[if self.remainder_slowdown.is_some() { timeline(lane) } else { 1 }];
            let start = (*t).max(submitted);
            *t = start + cost;
            (start, *t)
        } else {
            self.clock.advance(cost);
            (submitted, submitted + cost)
        };
        self.log.push(Ran { op: op.clone(), rows, lane, submitted, start, end });
        (start, end)
    }

    /// Moves the clock to the end of `lane`'s timeline (all of them for `None`).
    fn wait_for(&self, lane: Option<Lane>) {
        let timelines = *self.timelines.lock().unwrap_or_else(|e| e.into_inner());
        let end = match lane {
            Some(lane) if self.remainder_slowdown.is_some() => timelines[timeline(lane)],
            _ => timelines[0].max(timelines[1]),
        };
        self.clock.advance_to(end);
    }

    /// Launches a whole kernel; returns its output and when it starts and ends.
    fn launch_whole(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
    ) -> Result<(Buffer, Duration, Duration), DeviceError> {
        self.loss.launch()?;
        self.staging.wait_for(inputs);
        let (start, end) = self.run(op, None, (self.cost)(op, inputs));
        Ok((self.cpu.launch(op, inputs, out)?, start, end))
    }
}

impl Device for SimDevice {
    fn info(&self) -> DeviceInfo {
        let cpu = self.cpu.info();
        DeviceInfo {
            name: format!("simulated device over {}", cpu.name),
            memory_bytes: self.memory_bytes.unwrap_or(cpu.memory_bytes),
            ..cpu
        }
    }

    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        self.loss.check()?;
        let buffer = self.cpu.upload(meta, bytes)?;
        self.staging.uploaded(&buffer);
        Ok(buffer)
    }

    fn ready(&self, buffer: &Buffer) -> bool {
        self.staging.ready(buffer)
    }

    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        self.launch_whole(op, inputs, out).map(|(buffer, _, _)| buffer)
    }

    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        self.loss.check()?;
        if self.streams {
            self.wait_for(Some(self.current_lane()));
        }
        self.cpu.download(buffer, meta)
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.wait_for(None);
        self.loss.check()
    }

    fn recover(&self) -> Result<(), DeviceError> {
        self.loss.recover()
    }

    fn scratch(&self) -> Option<ScratchFn> {
        self.scratch.or_else(|| self.cpu.scratch())
    }

    fn is_async(&self) -> bool {
        self.streams
    }

    fn partition(&self) -> PartitionState {
        match self.remainder_slowdown {
            Some(_) => PartitionState::Active { reserved_sms: 1, remainder_sms: 1, total_sms: 2 },
            None => PartitionState::None { reason: "the simulated device has no partition".into() },
        }
    }

    fn rows(&self) -> Option<&dyn RowSlicing> {
        Some(self)
    }

    fn timing(&self) -> Option<&dyn KernelTiming> {
        self.timed.then_some(self as &dyn KernelTiming)
    }

    fn lanes(&self) -> Option<&dyn Lanes> {
        self.remainder_slowdown.is_some().then_some(self as &dyn Lanes)
    }
}

impl RowSlicing for SimDevice {
    fn launch_rows(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
        rows: Range<usize>,
    ) -> Result<Buffer, DeviceError> {
        self.loss.launch()?;
        self.staging.wait_for(inputs);
        let total = RowSplit::of(op, out).map_or(1, |s| s.rows.max(1));
        let whole = (self.cost)(op, inputs).as_nanos();
        let cost = Duration::from_nanos((whole * rows.len() as u128 / total as u128) as u64);
        self.run(op, Some(rows.clone()), cost);
        self.cpu.rows().expect("the CPU device slices rows").launch_rows(op, inputs, out, rows)
    }
}

/// A simulated kernel's device time, known once the clock passed its end.
struct SimKernelClock {
    clock: Clock,
    end: Duration,
    took: Duration,
}

impl KernelClock for SimKernelClock {
    fn elapsed(&self) -> Result<Option<Duration>, DeviceError> {
        Ok((self.clock.now() >= self.end).then_some(self.took))
    }
}

impl KernelTiming for SimDevice {
    fn launch_timed(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
    ) -> Result<TimedLaunch, DeviceError> {
        let (buffer, start, end) = self.launch_whole(op, inputs, out)?;
        Ok((buffer, Box::new(SimKernelClock { clock: self.clock.clone(), end, took: end - start })))
    }
}

impl Lanes for SimDevice {
    fn set_lane(&self, lane: Lane) {
        *self.lane.lock().unwrap_or_else(|e| e.into_inner()) = lane;
    }

    fn synchronize_lane(&self, lane: Lane) -> Result<(), DeviceError> {
        self.wait_for(Some(lane));
        self.loss.check()
    }

    fn lane_idle(&self, lane: Lane) -> Result<bool, DeviceError> {
        self.loss.check()?;
        let timelines = *self.timelines.lock().unwrap_or_else(|e| e.into_inner());
        Ok(timelines[timeline(lane)] <= self.clock.now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_host_api::{DType, UnaryOp};

    fn run_neg(device: &SimDevice) -> Buffer {
        let meta = TensorMeta::new(DType::F32, vec![2]).unwrap();
        let x = device.upload(&meta, &[0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]).unwrap();
        device.launch(&Op::Unary(UnaryOp::Neg), &[(&x, &meta)], &meta).unwrap()
    }

    #[test]
    fn a_synchronous_device_moves_the_clock_by_each_kernel() {
        let clock = Clock::simulated();
        let device = SimDevice::builder(clock.clone()).cost(|_, _| Duration::from_millis(2)).build();
        let y = run_neg(&device);
        let meta = TensorMeta::new(DType::F32, vec![2]).unwrap();
        assert_eq!(device.download(&y, &meta).unwrap(), vec![0, 0, 0x80, 0xbf, 0, 0, 0, 0x40], "computed on the CPU");
        assert_eq!(clock.now(), Duration::from_millis(2));
        let log = device.log().entries();
        assert_eq!((log[0].start, log[0].end, log[0].lane), (Duration::ZERO, Duration::from_millis(2), Lane::Whole));
    }

    #[test]
    fn streams_queue_on_timelines_until_synchronised() {
        let clock = Clock::simulated();
        let device =
            SimDevice::builder(clock.clone()).cost(|_, _| Duration::from_millis(2)).partition(1.5).timed().build();
        run_neg(&device);
        device.set_lane(Lane::Remainder);
        run_neg(&device);
        assert_eq!(clock.now(), Duration::ZERO, "launches only enqueue");
        assert!(!device.lane_idle(Lane::Whole).unwrap() && device.lane_idle(Lane::Reserved).unwrap());
        device.set_lane(Lane::Reserved);
        let meta = TensorMeta::new(DType::F32, vec![2]).unwrap();
        let x = device.upload(&meta, &[0; 8]).unwrap();
        let (_, timer) = device.launch_timed(&Op::Unary(UnaryOp::Neg), &[(&x, &meta)], &meta).unwrap();
        assert_eq!(timer.elapsed().unwrap(), None, "not finished yet");
        device.synchronize_lane(Lane::Reserved).unwrap();
        assert_eq!(clock.now(), Duration::from_millis(2), "the reserved lane has its own timeline");
        assert_eq!(timer.elapsed().unwrap(), Some(Duration::from_millis(2)));
        device.synchronize().unwrap();
        assert_eq!(clock.now(), Duration::from_millis(5), "2 ms on the whole device, then 3 ms on the remainder");
    }
}
