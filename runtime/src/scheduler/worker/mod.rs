//! The device actor: takes commands in order, keeps the [`TensorTable`], and runs the
//! work the [`Queues`] pick, one kernel (or kernel slice) at a time.
//!
//! A failed kernel poisons its output so every later op on it fails the same way and
//! a read reports the first cause. When an invocation ends, its queued work is
//! cancelled. Freed tensors are released a few at a time between steps ([`frees`]),
//! so a burst of them (an invocation ending with thousands of handles) does not hold
//! up another tenant's next command. Every duration the actor measures is read from
//! the configured [`Clock`](super::Clock).
//!
//! [`lanes`] decides where work runs and how much may be in flight on an asynchronous
//! device; [`slicing`] cuts long best-effort kernels into row blocks; [`recover`]
//! resets a lost device.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use sluice_host_api::{ApiError, ErrorCode, RowSplit, TensorMeta};

use super::cost::{CostModel, KernelKey};
use super::inflight::InFlight;
use super::kernels::{KernelLog, Ran};
use super::queues::{Pick, Queues};
use super::status::{DeviceStatus, Stats};
use super::tensors::{ReadOutcome, TensorState, TensorTable, Waiting};
use super::work::{Queued, Work};
use super::{Command, Policy, PriorityClass, Published, SchedulerConfig, TensorId};
use crate::device::{Buffer, Device, Lane};

mod contain;
mod frees;
mod lanes;
mod recover;
mod slicing;

use contain::contain;
pub(super) use contain::panic_message;

struct Actor {
    device: Box<dyn Device>,
    config: SchedulerConfig,
    queues: Queues,
    tensors: TensorTable,
    cost: CostModel,
    stats: Stats,
    /// Whether launches return before the kernel ran (a GPU stream).
    asynchronous: bool,
    /// Work in flight per [`Lane`].
    inflight: [InFlight; 3],
    /// Whether classes run on separate lanes of a partitioned device.
    partitioned: bool,
    /// The lane the device is directed to.
    lane: Lane,
    /// Backend panics contained ([`contain`]), each failing one command.
    faults: Cell<u64>,
    /// Losses of the device and its resets ([`recover`]).
    recovery: recover::Recovery,
    /// What ran, for live watchers.
    kernel_log: KernelLog,
    /// Tensors whose last handle is gone, not yet released.
    frees: frees::PendingFrees,
}

pub(super) fn run(device: Box<dyn Device>, config: SchedulerConfig, rx: Receiver<Command>, published: Arc<Published>) {
    device.adopt_scheduler_thread();
    let asynchronous = device.is_async();
    let partitioned = device.lanes().is_some() && config.policy == Policy::Priority;
    if partitioned {
        tracing::info!(partition = %device.partition(), "latency work runs on the reserved partition");
    }
    let recovery = recover::Recovery::new(published.clone());
    let kernel_log = KernelLog::new(config.kernel_log, published.kernel_watchers.clone());
    let mut actor = Actor {
        device: recovery.watch(device),
        config,
        queues: Queues::default(),
        tensors: TensorTable::default(),
        cost: CostModel::default(),
        stats: Stats::default(),
        asynchronous,
        inflight: Default::default(),
        partitioned,
        lane: Lane::Whole,
        faults: Cell::new(0),
        recovery,
        kernel_log,
        frees: frees::PendingFrees::default(),
    };
    // A panic outside the backend's boundary is a bug of the scheduler itself: its
    // state can no longer be trusted, so the device stops, saying why (status then
    // reports it as failed, and every waiting read gets an error).
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| serve(&mut actor, &rx, &published))) {
        let why = panic_message(payload.as_ref());
        tracing::error!(why, "the device scheduler panicked; the device stops");
        *published.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }
}

/// The actor's loop: until every handle is gone.
fn serve(actor: &mut Actor, rx: &Receiver<Command>, published: &Published) {
    loop {
        if actor.queues.is_idle() {
            // Nothing to run: let the device finish, so the window is measured, and
            // give back what a burst grew the tables to.
            actor.release_all_freed();
            actor.drain();
            actor.recover_if_lost();
            actor.tensors.shrink_after_burst();
            match wait(rx) {
                Some(c) => actor.accept(c),
                None => return,
            }
            actor.recover_if_lost();
        }
        // Take what arrived before choosing, so the choice sees it.
        take_arrived(rx, |c| {
            actor.accept(c);
            actor.recover_if_lost();
        });
        actor.release_some_freed();
        let step = actor.step();
        actor.recover_if_lost();
        if step == Step::NotYet {
            // The picked work waits (for room on its lane, or for its input's copy);
            // meanwhile take commands, so latency work arriving now is not held up.
            if let Some(c) = actor.config.clock.recv_timeout(rx, LANE_POLL) {
                actor.accept(c);
                actor.recover_if_lost();
            }
        }
        let load = actor.queues.queued() + actor.queues.open_invocations();
        published.load.store(load as u64, Ordering::Relaxed);
        published.resident_bytes.store(actor.tensors.resident_bytes(), Ordering::Relaxed);
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
    /// The picked work cannot be enqueued yet: best-effort work that does not fit on
    /// its lane until the lane drains, or work reading an upload the device is still
    /// copying ([`Device::ready`]).
    NotYet,
}

/// How long an idle device thread polls for work before it parks. A parked thread
/// costs every sender a wake-up system call; a guest launching ops back to back keeps
/// it from parking at all. (Host time: nothing is measured with it.)
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

/// Accepts the commands that had arrived when called, and no more: guests submitting
/// faster than the actor accepts cannot keep it from running work (before, it drained
/// the channel until empty, and two flooding guests kept it accepting for seconds
/// while everyone's queued work waited).
fn take_arrived(rx: &Receiver<Command>, mut accept: impl FnMut(Command)) {
    for _ in 0..rx.len() {
        match rx.try_recv() {
            Ok(c) => accept(c),
            Err(_) => break,
        }
    }
}

impl Actor {
    fn now(&self) -> Duration {
        self.config.clock.now()
    }

    fn accept(&mut self, command: Command) {
        match command {
            Command::Begin { inv, info, room } => self.queues.begin(inv, info, Some(room)),
            Command::End { inv } => {
                for q in self.queues.end(inv, self.now()) {
                    self.cancel(q.work);
                }
            }
            Command::Work { inv, work, at } => {
                self.tensors.queued(&work);
                let Some(work) = self.refuse_if_failed(work) else { return };
                if let Err(work) = self.queues.push(inv, work, at) {
                    self.cancel(work);
                }
            }
            Command::Read { id, meta, reply } => match self.tensors.read(id, meta.clone(), reply) {
                ReadOutcome::Waiting => {}
                ReadOutcome::Ready { buffer, lane, reply } => {
                    // A download waits for its lane anyway; account for it first.
                    self.drain_lane(lane);
                    self.enter(lane);
                    let downloaded = contain(&self.faults, "a download", || self.device.download(&buffer, &meta));
                    let _ = reply.send(downloaded.map_err(ApiError::from));
                }
                ReadOutcome::Failed(reply, e) => {
                    let _ = reply.send(Err(e));
                }
            },
            Command::Free { id } => self.frees.push(id),
            Command::FreeMany { ids } => self.frees.extend(ids),
            Command::ChargeGuestCpu { inv, elapsed } => self.queues.charge_guest_cpu(inv, elapsed),
            Command::Status { reply } => {
                // The status counts what was freed before it was asked.
                self.release_all_freed();
                self.stats.status_computations += 1;
                let _ = reply.send(self.status());
            }
            Command::Kernels { since, limit, reply } => {
                let _ = reply.send(self.kernel_log.since(since, limit));
            }
        }
    }

    /// Sets a tensor's contents, produced on `lane`, and answers its waiting reads.
    fn complete(&mut self, id: TensorId, result: Result<(Buffer, u64), ApiError>, lane: Lane) {
        let readers = self.tensors.complete(id, result, lane);
        if !readers.is_empty() {
            self.drain_lane(lane);
            self.enter(lane);
        }
        self.answer(readers);
        self.tensors.collect(id);
    }

    fn answer(&self, readers: Vec<Waiting>) {
        for (id, meta, reply) in readers {
            let answer = match self.tensors.state(id) {
                Some(TensorState::Ready(b)) => {
                    contain(&self.faults, "a download", || self.device.download(b, &meta)).map_err(ApiError::from)
                }
                Some(TensorState::Failed(e)) => Err(e.clone()),
                Some(TensorState::Pending) | None => unreachable!("just produced"),
            };
            let _ = reply.send(answer);
        }
    }

    fn cancel(&mut self, work: Work) {
        self.tensors.release_inputs(&work);
        let e = ApiError::new(ErrorCode::DeviceFailure, "cancelled: the invocation ended before this op ran");
        self.complete(work.output(), Err(e), self.lane);
    }

    /// Runs the next work item, or one slice of it.
    fn step(&mut self) -> Step {
        let Some(pick) = self.queues.pick(self.config.policy) else { return Step::Ran };
        let class = self.queues.class_of(pick);
        let preempting =
            self.config.policy == Policy::Priority && class == PriorityClass::Latency && self.queues.batch_waiting();
        if preempting {
            self.stats.preemptions += 1;
        }
        // On a partitioned device best-effort work has its own SMs while latency work
        // is active, so it runs whole there instead of in slices.
        let slice_now = self.config.policy == Policy::Priority
            && class == PriorityClass::Batch
            && self.latency_expected()
            && !self.partitioned;
        let lane = self.lane_for(pick, class);
        if self.asynchronous && (!self.inputs_ready(pick) || !self.room_on(lane, pick, class)) {
            return Step::NotYet;
        }
        let Some(mut taken) = self.queues.take(pick) else { return Step::Ran };
        if taken.starts_latency_invocation {
            let waited = self.now().saturating_sub(taken.item.at);
            self.stats.record_latency(waited);
        }
        let is_kernel = matches!(taken.item.work, Work::Launch { .. });
        self.enter(lane);
        let (started, was_sliced) = (self.now(), taken.item.slices.is_some());
        let op = match &taken.item.work {
            Work::Launch { op, .. } => op.name(),
            Work::Upload { .. } => "upload",
        };
        let (queued, watched) = (taken.item.at, self.kernel_log.watched());
        let (elapsed, done) = self.execute(&mut taken.item, slice_now, taken.tenant);
        if watched {
            let queues = &self.queues;
            let names = self.kernel_log.names(taken.inv.0, || queues.names(taken.inv));
            let sliced = was_sliced || !done;
            let ran = Ran {
                names,
                invocation: taken.inv.0,
                op,
                lane,
                class,
                queued,
                start: started,
                elapsed,
                sliced,
                preempting,
            };
            self.kernel_log.push(ran);
        }
        if !done && let Err(work) = self.queues.put_back(taken.inv, taken.item) {
            self.cancel(work);
        }
        self.stats.busy += elapsed;
        self.queues.charge(taken.inv, elapsed, done && is_kernel);
        Step::Ran
    }

    /// Whether the device can queue the head of `pick`'s queue without waiting on this
    /// thread: an input still being copied to the device ([`Device::ready`]) would hold
    /// the scheduler, and every tenant's work, for the whole copy.
    fn inputs_ready(&self, pick: Pick) -> bool {
        let Some(Queued { work: Work::Launch { inputs, .. }, .. }) = self.queues.peek(pick) else {
            return true;
        };
        inputs.iter().all(|(id, _)| match self.tensors.state(*id) {
            Some(TensorState::Ready(buffer)) => self.device.ready(buffer),
            _ => true,
        })
    }

    /// Whether latency work is active, or ended within the latency hold.
    fn latency_expected(&self) -> bool {
        self.queues.latency_expected(self.config.latency_hold, self.now())
    }

    /// Executes `q` (or one slice of it); returns the device time and whether it is done.
    fn execute(&mut self, q: &mut Queued, slice_now: bool, tenant: Option<usize>) -> (Duration, bool) {
        // An upload's bytes go to the device, which may copy them off this thread.
        let owned = if let Work::Upload { bytes, .. } = &mut q.work { std::mem::take(bytes) } else { Vec::new() };
        match &q.work {
            Work::Upload { id, meta, .. } => {
                let started = self.now();
                let result = contain(&self.faults, "an upload", || self.device.upload_owned(meta, owned))
                    .map(|b| (b, meta.byte_len() as u64))
                    .map_err(ApiError::from);
                let elapsed = self.now().saturating_sub(started);
                self.stats.uploads += 1;
                self.complete(*id, result, self.lane);
                (elapsed, true)
            }
            Work::Launch { id, op, inputs, out, .. } => {
                let id = *id;
                let out_bytes = out.byte_len() as u64;
                let args = match self.tensors.gather(inputs) {
                    Ok(a) => a,
                    Err(e) => {
                        self.tensors.release_inputs(&q.work);
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
                let started = self.now();
                let mut clock = None;
                let sliced = split.is_some();
                let outcome = if let Some(split) = split {
                    self.slice_rows(op, &split, &args, out, (key, estimate), slice_now, &mut q.slices)
                } else if self.asynchronous
                    && (estimate >= TIMED_KERNEL_MIN || !self.cost.knows(&key))
                    && let Some(timing) = self.device.timing()
                {
                    // Long kernels (and each shape's first) are timed by the device.
                    match contain(&self.faults, "a launch", || timing.launch_timed(op, &args, out)) {
                        Ok((buffer, c)) => {
                            clock = Some(c);
                            Some(Ok(buffer))
                        }
                        Err(e) => Some(Err(e.into())),
                    }
                } else {
                    Some(
                        contain(&self.faults, "a launch", || self.device.launch(op, &args, out))
                            .map_err(ApiError::from),
                    )
                };
                let mut elapsed = self.now().saturating_sub(started);
                let Some(result) = outcome else { return (elapsed, false) };
                let total = q.slices.take().map(|p| p.elapsed + elapsed).unwrap_or(elapsed);
                if self.asynchronous && sliced {
                    // Its slices are already in flight (`slice_rows`); charge the estimate.
                    elapsed = estimate;
                } else if self.asynchronous {
                    // The launch only enqueued it: charge the estimate; the drain
                    // that follows measures the truth for the cost model (and
                    // corrects the charge of a timed kernel).
                    let now = self.now();
                    self.inflight[lane.index()].add(key, estimate, clock, tenant, now);
                    elapsed = estimate;
                } else {
                    self.cost.record(&key, total);
                }
                self.stats.kernels += 1;
                self.tensors.release_inputs(&q.work);
                self.complete(id, result.map(|b| (b, out_bytes)), lane);
                (elapsed, true)
            }
        }
    }

    fn status(&self) -> DeviceStatus {
        DeviceStatus {
            device: self.device.info(),
            policy: self.config.policy,
            preemption_budget_us: self.config.preemption_budget.as_micros() as u64,
            partition: self.device.partition(),
            queued: self.queues.queued(),
            active_invocations: self.queues.open_invocations(),
            resident_tensors: self.tensors.len(),
            resident_bytes: self.tensors.resident_bytes(),
            kernels: self.stats.kernels,
            uploads: self.stats.uploads,
            sliced_kernels: self.stats.sliced_kernels,
            preemptions: self.stats.preemptions,
            busy_us: self.stats.busy.as_micros() as u64,
            preemption_latency: self.stats.preemption_latency(),
            tenants: self.queues.tenant_statuses(),
            health: self.recovery.health(),
            contained_faults: self.faults.get(),
            resets: self.recovery.resets().0,
            last_reset: self.recovery.resets().1,
            status_computations: self.stats.status_computations,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::TensorId;

    #[test]
    fn intake_stops_at_what_had_arrived() {
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..10 {
            tx.send(Command::Free { id: TensorId(i) }).unwrap();
        }
        // A submitter faster than the actor: each accepted command brings another.
        let mut accepted = 0;
        take_arrived(&rx, |_| {
            accepted += 1;
            if accepted < 1000 {
                tx.send(Command::Free { id: TensorId(accepted) }).unwrap();
            }
        });
        assert_eq!(accepted, 10, "only the commands there when the intake began");
        assert_eq!(rx.len(), 10, "the rest waits for the next intake");
    }
}
