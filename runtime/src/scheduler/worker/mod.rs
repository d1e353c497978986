//! The device actor: takes commands in order, keeps the tensor table, and runs the
//! work the [`Queues`] pick, one kernel (or kernel slice) at a time.
//!
//! Every tensor has a slot: pending until its producer ran, then ready or failed. A
//! read of a pending tensor waits in the slot; a free of a tensor that queued
//! kernels still read is deferred until they ran. A failed kernel poisons its output
//! so every later op on it fails the same way and a read reports the first cause.
//! When an invocation ends, its queued work is cancelled.
//!
//! [`lanes`] decides where work runs and how much may be in flight on an asynchronous
//! device; [`slicing`] cuts long best-effort kernels into row blocks.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use sluice_host_api::{ApiError, ErrorCode, RowSplit, TensorMeta};
use tokio::sync::oneshot;

use super::cost::{CostModel, KernelKey};
use super::inflight::InFlight;
use super::queues::{Pick, Queued, Queues};
use super::status::{DeviceStatus, LatencySummary, TenantStatus};
use super::{Command, InvocationId, Policy, PriorityClass, Published, SchedulerConfig, TensorId, Work};
use crate::device::{Buffer, Device, Lane};

mod lanes;
mod slicing;

pub(super) use slicing::SliceProgress;

type Reply = oneshot::Sender<Result<Vec<u8>, ApiError>>;

enum State {
    Pending,
    Ready(Buffer),
    Failed(ApiError),
}

struct Slot {
    state: State,
    bytes: u64,
    /// Queued kernels that read this tensor.
    uses: u32,
    /// The last handle is gone; remove once `uses` is zero and it is produced.
    freed: bool,
    /// Where it was produced (a read waits for that lane).
    lane: Lane,
    readers: Vec<(TensorMeta, Reply)>,
}

impl Slot {
    fn pending() -> Slot {
        Slot { state: State::Pending, bytes: 0, uses: 0, freed: false, lane: Lane::Whole, readers: Vec::new() }
    }
}

const LATENCY_SAMPLES: usize = 4096;

struct Actor {
    device: Box<dyn Device>,
    config: SchedulerConfig,
    queues: Queues,
    slots: HashMap<TensorId, Slot>,
    cost: CostModel,
    resident_bytes: u64,
    kernels: u64,
    uploads: u64,
    sliced_kernels: u64,
    preemptions: u64,
    busy: Duration,
    latency_ns: VecDeque<u64>,
    /// Whether launches return before the kernel ran (a GPU stream).
    asynchronous: bool,
    /// Work in flight per [`Lane`].
    inflight: [InFlight; 3],
    /// Whether classes run on separate lanes of a partitioned device.
    partitioned: bool,
    /// The lane the device is directed to.
    lane: Lane,
}

pub(super) fn run(device: Box<dyn Device>, config: SchedulerConfig, rx: Receiver<Command>, published: Arc<Published>) {
    let mut actor = Actor {
        device,
        config,
        queues: Queues::default(),
        slots: HashMap::new(),
        cost: CostModel::default(),
        resident_bytes: 0,
        kernels: 0,
        uploads: 0,
        sliced_kernels: 0,
        preemptions: 0,
        busy: Duration::ZERO,
        latency_ns: VecDeque::new(),
        asynchronous: false,
        inflight: Default::default(),
        partitioned: false,
        lane: Lane::Whole,
    };
    actor.asynchronous = actor.device.is_async();
    actor.partitioned = actor.device.has_partition() && actor.config.policy == Policy::Priority;
    if actor.partitioned {
        tracing::info!(partition = %actor.device.partition(), "latency work runs on the reserved partition");
    }
    loop {
        if actor.queues.is_idle() {
            // Nothing to run: let the device finish, so the window is measured.
            actor.drain();
            match wait(&rx) {
                Some(c) => actor.accept(c),
                None => return,
            }
        }
        // Take everything that arrived before choosing, so the choice sees it.
        while let Ok(c) = rx.try_recv() {
            actor.accept(c);
        }
        if actor.step() == Step::LaneBusy {
            // Best-effort work waits for room on its lane; meanwhile take commands, so
            // latency work arriving now is not held up by it.
            if let Ok(c) = rx.recv_timeout(LANE_POLL) {
                actor.accept(c);
            }
        }
        let load = actor.queues.queued() + actor.queues.invocations.len();
        published.load.store(load as u64, Ordering::Relaxed);
        published.resident_bytes.store(actor.resident_bytes, Ordering::Relaxed);
    }
}

/// Kernels on an asynchronous device estimated at least this long are timed by the
/// device (GPU events): a few microseconds of host time each, negligible next to them.
const TIMED_KERNEL_MIN: Duration = Duration::from_micros(20);

/// How often a scheduler whose best-effort work waits for a busy lane of a
/// partitioned device checks that lane again.
const LANE_POLL: Duration = Duration::from_micros(20);

/// What one scheduling step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Ran a work item (or a slice of one), or found nothing to run.
    Ran,
    /// The picked best-effort work does not fit on its lane until the lane drains.
    LaneBusy,
}

/// How long an idle device thread polls for work before it parks. A parked thread
/// costs every sender a wake-up system call; a guest launching ops back to back keeps
/// it from parking at all.
const IDLE_SPIN: Duration = Duration::from_micros(50);

/// The next command, polling for [`IDLE_SPIN`] before blocking; `None` once every
/// handle is gone.
fn wait(rx: &Receiver<Command>) -> Option<Command> {
    let until = Instant::now() + IDLE_SPIN;
    loop {
        match rx.try_recv() {
            Ok(c) => return Some(c),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if Instant::now() < until => std::thread::yield_now(),
            Err(TryRecvError::Empty) => return rx.recv().ok(),
        }
    }
}

impl Actor {
    fn accept(&mut self, command: Command) {
        match command {
            Command::Begin { inv, info } => self.queues.begin(inv, info),
            Command::End { inv } => {
                for q in self.queues.end(inv) {
                    self.cancel(q.work);
                }
            }
            Command::Work { inv, work, at } => {
                let (out, inputs): (TensorId, &[(TensorId, TensorMeta)]) = match &work {
                    Work::Upload { id, .. } => (*id, &[]),
                    Work::Launch { id, inputs, .. } => (*id, inputs),
                };
                for (input, _) in inputs {
                    if let Some(s) = self.slots.get_mut(input) {
                        s.uses += 1;
                    }
                }
                self.slots.insert(out, Slot::pending());
                if let Err(work) = self.queues.push(inv, work, at) {
                    self.cancel(work);
                }
            }
            Command::Adopt { id, buffer } => {
                let bytes = buffer.byte_len() as u64;
                self.slots.insert(id, Slot::pending());
                self.complete(id, Ok((buffer, bytes)), Lane::Whole);
            }
            Command::Read { id, meta, reply } => match self.slots.get_mut(&id) {
                Some(Slot { state: State::Pending, readers, .. }) => readers.push((meta, reply)),
                Some(Slot { state: State::Ready(_), lane, .. }) => {
                    // A download waits for its lane anyway; account for it first.
                    let lane = *lane;
                    self.drain_lane(lane);
                    self.enter(lane);
                    let Some(Slot { state: State::Ready(b), .. }) = self.slots.get(&id) else { unreachable!() };
                    let _ = reply.send(self.device.download(b, &meta).map_err(ApiError::from));
                }
                Some(Slot { state: State::Failed(e), .. }) => {
                    let _ = reply.send(Err(e.clone()));
                }
                None => {
                    let _ = reply.send(Err(missing(id)));
                }
            },
            Command::Free { id } => {
                if let Some(s) = self.slots.get_mut(&id) {
                    s.freed = true;
                    self.collect(id);
                }
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
        }
    }

    /// Removes a freed slot once nothing needs it any more.
    fn collect(&mut self, id: TensorId) {
        let removable =
            matches!(self.slots.get(&id), Some(s) if s.freed && s.uses == 0 && !matches!(s.state, State::Pending));
        if removable && let Some(s) = self.slots.remove(&id) {
            self.resident_bytes -= s.bytes;
        }
    }

    /// Sets a tensor's slot, produced on `lane`, and wakes its readers.
    fn complete(&mut self, id: TensorId, result: Result<(Buffer, u64), ApiError>, lane: Lane) {
        let Some(slot) = self.slots.get_mut(&id) else { return };
        slot.lane = lane;
        slot.state = match result {
            Ok((b, bytes)) => {
                slot.bytes = bytes;
                self.resident_bytes += bytes;
                State::Ready(b)
            }
            Err(e) => State::Failed(e),
        };
        let readers = std::mem::take(&mut slot.readers);
        if !readers.is_empty() {
            self.drain_lane(lane);
            self.enter(lane);
        }
        let Some(slot) = self.slots.get(&id) else { return };
        for (meta, reply) in readers {
            let answer = match &slot.state {
                State::Ready(b) => self.device.download(b, &meta).map_err(ApiError::from),
                State::Failed(e) => Err(e.clone()),
                State::Pending => unreachable!("just produced"),
            };
            let _ = reply.send(answer);
        }
        self.collect(id);
    }

    /// Releases the inputs a finished (or cancelled) work item held.
    fn release_inputs(&mut self, work: &Work) {
        if let Work::Launch { inputs, .. } = work {
            for (input, _) in inputs {
                if let Some(s) = self.slots.get_mut(input) {
                    s.uses = s.uses.saturating_sub(1);
                }
                self.collect(*input);
            }
        }
    }

    fn cancel(&mut self, work: Work) {
        let id = match &work {
            Work::Upload { id, .. } | Work::Launch { id, .. } => *id,
        };
        self.release_inputs(&work);
        let e = ApiError::new(ErrorCode::DeviceFailure, "cancelled: the invocation ended before this op ran");
        self.complete(id, Err(e), self.lane);
    }

    /// Runs the next work item, or one slice of it.
    fn step(&mut self) -> Step {
        let Some(pick) = self.queues.pick(self.config.policy) else { return Step::Ran };
        let (inv, class) = match pick {
            Pick::System => (InvocationId::SYSTEM, PriorityClass::Latency),
            Pick::Invocation(id) => {
                let i = &self.queues.invocations[&id];
                (id, i.class)
            }
        };
        if self.config.policy == Policy::Priority && class == PriorityClass::Latency && self.queues.batch_waiting() {
            self.preemptions += 1;
        }
        // On a partitioned device best-effort work has its own SMs while latency work
        // is active, so it runs whole there instead of in slices.
        let slice_now = self.config.policy == Policy::Priority
            && class == PriorityClass::Batch
            && self.queues.latency_expected(self.config.latency_hold)
            && !self.partitioned;
        let lane = self.lane_for(pick, class);
        if self.asynchronous && !self.room_on(lane, pick, class) {
            return Step::LaneBusy;
        }
        let queue = match pick {
            Pick::System => &mut self.queues.system,
            Pick::Invocation(id) => {
                let i = self.queues.invocations.get_mut(&id).expect("picked");
                if !i.started {
                    i.started = true;
                    if i.class == PriorityClass::Latency {
                        let waited = i.items.front().map(|q| q.at.elapsed()).unwrap_or_default();
                        if self.latency_ns.len() == LATENCY_SAMPLES {
                            self.latency_ns.pop_front();
                        }
                        self.latency_ns.push_back(waited.as_nanos() as u64);
                    }
                }
                &mut i.items
            }
        };
        let mut head = queue.pop_front().expect("picked a non-empty queue");
        let is_kernel = matches!(head.work, Work::Launch { .. });
        self.enter(lane);
        let tenant = match pick {
            Pick::System => None,
            Pick::Invocation(id) => Some(self.queues.invocations[&id].tenant),
        };
        let (elapsed, done) = self.execute(&mut head, slice_now, tenant);
        if !done {
            // Put the partly sliced kernel back at the head of its queue.
            match pick {
                Pick::System => self.queues.system.push_front(head),
                Pick::Invocation(id) => self.queues.invocations.get_mut(&id).expect("picked").items.push_front(head),
            }
        }
        self.busy += elapsed;
        self.queues.charge(inv, elapsed, done && is_kernel);
        Step::Ran
    }

    /// Executes `q` (or one slice of it); returns the device time and whether it is done.
    fn execute(&mut self, q: &mut Queued, slice_now: bool, tenant: Option<usize>) -> (Duration, bool) {
        match &q.work {
            Work::Upload { id, meta, bytes } => {
                let started = Instant::now();
                let result =
                    self.device.upload(meta, bytes).map(|b| (b, meta.byte_len() as u64)).map_err(ApiError::from);
                let elapsed = started.elapsed();
                self.uploads += 1;
                self.complete(*id, result, self.lane);
                (elapsed, true)
            }
            Work::Launch { id, op, inputs, out } => {
                let id = *id;
                let out_bytes = out.byte_len() as u64;
                let args = match self.gather(inputs) {
                    Ok(a) => a,
                    Err(e) => {
                        self.release_inputs(&q.work);
                        self.complete(id, Err(e), self.lane);
                        return (Duration::ZERO, true);
                    }
                };
                let lane = self.lane;
                let key = KernelKey::new(op, inputs.iter().map(|(_, m)| m), out).on_lane(lane);
                let args: Vec<(&Buffer, &TensorMeta)> = args.iter().zip(inputs).map(|(b, (_, m))| (b, m)).collect();
                let estimate = self.cost.estimate(&key);
                // The row geometry only for a kernel that may be sliced (it allocates).
                let wants_slices = q.slices.is_some() || (slice_now && estimate > self.config.preemption_budget);
                let split = if wants_slices { RowSplit::of(op, out) } else { None };
                let started = Instant::now();
                let mut clock = None;
                let outcome = if let Some(split) = split {
                    self.slice_rows(op, &split, &args, out, estimate, slice_now, &mut q.slices)
                } else if self.asynchronous && (estimate >= TIMED_KERNEL_MIN || !self.cost.knows(&key)) {
                    // Long kernels (and each shape's first) are timed by the device.
                    match self.device.launch_timed(op, &args, out) {
                        Some(Ok((buffer, c))) => {
                            clock = Some(c);
                            Some(Ok(buffer))
                        }
                        Some(Err(e)) => Some(Err(e.into())),
                        None => Some(self.device.launch(op, &args, out).map_err(ApiError::from)),
                    }
                } else {
                    Some(self.device.launch(op, &args, out).map_err(ApiError::from))
                };
                let mut elapsed = started.elapsed();
                let Some(result) = outcome else { return (elapsed, false) };
                let total = q.slices.take().map(|p| p.elapsed + elapsed).unwrap_or(elapsed);
                if self.asynchronous {
                    // The launch only enqueued it: charge the estimate; the drain
                    // that follows measures the truth for the cost model (and
                    // corrects the charge of a timed kernel).
                    self.inflight[lane.index()].add(key, estimate, clock, tenant);
                    elapsed = estimate;
                } else {
                    self.cost.record(&key, total);
                }
                self.kernels += 1;
                self.release_inputs(&q.work);
                self.complete(id, result.map(|b| (b, out_bytes)), lane);
                (elapsed, true)
            }
        }
    }

    /// The inputs' buffers (cheap clones of shared handles), or the error that
    /// poisons them.
    fn gather(&self, inputs: &[(TensorId, TensorMeta)]) -> Result<Vec<Buffer>, ApiError> {
        inputs
            .iter()
            .map(|(id, _)| match self.slots.get(id).map(|s| &s.state) {
                Some(State::Ready(b)) => Ok(b.clone()),
                Some(State::Failed(e)) => Err(e.clone()),
                Some(State::Pending) => Err(ApiError::new(
                    ErrorCode::DeviceFailure,
                    format!("tensor {} was used before it was produced", id.0),
                )),
                None => Err(missing(*id)),
            })
            .collect()
    }

    fn status(&self) -> DeviceStatus {
        let mut tenants: Vec<TenantStatus> = self
            .queues
            .tenants
            .iter()
            .enumerate()
            .map(|(index, t)| {
                let invs = self.queues.invocations.values().filter(|i| i.tenant == index);
                let (active, queued) = invs.fold((0, 0), |(a, q), i| (a + 1, q + i.items.len()));
                TenantStatus {
                    tenant: t.name.to_string(),
                    class: t.class,
                    weight: t.weight,
                    queued,
                    active_invocations: active,
                    kernels: t.kernels,
                    device_time_us: t.device_ns / 1000,
                }
            })
            .collect();
        tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        let samples: Vec<u64> = self.latency_ns.iter().copied().collect();
        DeviceStatus {
            device: self.device.info(),
            policy: self.config.policy,
            preemption_budget_us: self.config.preemption_budget.as_micros() as u64,
            partition: self.device.partition(),
            queued: self.queues.queued(),
            active_invocations: self.queues.invocations.len(),
            resident_tensors: self.slots.len(),
            resident_bytes: self.resident_bytes,
            kernels: self.kernels,
            uploads: self.uploads,
            sliced_kernels: self.sliced_kernels,
            preemptions: self.preemptions,
            busy_us: self.busy.as_micros() as u64,
            preemption_latency: LatencySummary::from_ns(&samples),
            tenants,
        }
    }
}

fn missing(id: TensorId) -> ApiError {
    ApiError::new(ErrorCode::DeviceFailure, format!("tensor {} is not resident on the device", id.0))
}
