//! The streams behind the lanes and the bookkeeping that keeps work on different
//! streams ordered (see [`crate::partition`] for the design): per-stream sequence
//! numbers, events (created in each stream's own context and recycled), and the
//! [`Tracker`] deciding what a consumer stream must wait on.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys::{self, CUevent_flags, CUevent_wait_flags};
use cudarc::driver::{CudaContext, CudaStream, result};

use crate::CudaError;
use crate::partition::{GreenLane, SLOTS, Split};

/// A raw event handle, created in the context of the stream slot it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Event(pub(crate) sys::CUevent);

// SAFETY: an opaque driver handle; the driver API is thread-safe.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

/// One stream work can be queued on, with its context.
pub(crate) struct Slot {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    /// SMs this stream's kernels can use.
    pub(crate) sms: u32,
    /// Units of work (uploads, launches, matmuls) queued so far.
    seq: AtomicU64,
    /// Idle events of this slot's context.
    free_events: Mutex<Vec<Event>>,
}

impl Slot {
    fn new(ctx: Arc<CudaContext>, stream: Arc<CudaStream>, sms: u32) -> Slot {
        Slot { ctx, stream, sms, seq: AtomicU64::new(0), free_events: Mutex::default() }
    }

    pub(crate) fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind_to_thread().map_err(|e| CudaError::driver("binding the context", e))
    }

    /// The number of the last unit of work queued.
    pub(crate) fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a consumer stream must do before reading a buffer of another stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need<E> {
    /// The producer's work is already ordered before the consumer (or complete).
    Nothing,
    /// Wait on this event, which covers the producer's work up to the given number.
    Wait(E, u64),
    /// Record a new checkpoint on the producer now and wait on it.
    Record,
}

/// Pure bookkeeping of cross-stream ordering, generic over the event type so that it
/// is testable without a GPU.
#[derive(Debug)]
pub(crate) struct Tracker<E> {
    /// `waited[c][p]`: stream `c` waited on an event covering `p`'s work up to this.
    waited: [[u64; SLOTS]; SLOTS],
    /// Stream `p`'s work up to this number is known to be complete.
    completed: [u64; SLOTS],
    /// Recorded checkpoints of each stream (number covered, event), oldest first.
    checkpoints: [VecDeque<(u64, E)>; SLOTS],
}

impl<E: Copy> Default for Tracker<E> {
    fn default() -> Self {
        Tracker { waited: [[0; SLOTS]; SLOTS], completed: [0; SLOTS], checkpoints: Default::default() }
    }
}

impl<E: Copy> Tracker<E> {
    /// What consumer `c` must do to read a buffer produced on `p` as unit `seq`; `own` is
    /// the buffer's own event (uploads), `done` asks whether an event completed, and
    /// `recycle` takes checkpoints found complete.
    pub(crate) fn need(
        &mut self,
        c: usize,
        p: usize,
        seq: u64,
        own: Option<E>,
        mut done: impl FnMut(E) -> bool,
        recycle: impl FnMut(E),
    ) -> Need<E> {
        if c == p || self.waited[c][p] >= seq || self.completed[p] >= seq {
            return Need::Nothing;
        }
        self.poll(p, &mut done, recycle);
        if self.completed[p] >= seq {
            return Need::Nothing;
        }
        if let Some(e) = own {
            if done(e) {
                self.complete(p, seq);
                return Need::Nothing;
            }
            return Need::Wait(e, seq);
        }
        match self.checkpoints[p].iter().find(|(covers, _)| *covers >= seq) {
            Some(&(covers, e)) => Need::Wait(e, covers),
            None => Need::Record,
        }
    }

    /// Consumer `c` now waits on `p`'s work up to `covers`.
    pub(crate) fn waited(&mut self, c: usize, p: usize, covers: u64) {
        let w = &mut self.waited[c][p];
        *w = (*w).max(covers);
    }

    /// A checkpoint recorded on `p` covering its work up to `covers`.
    pub(crate) fn push_checkpoint(&mut self, p: usize, covers: u64, e: E) {
        self.checkpoints[p].push_back((covers, e));
    }

    /// `p`'s work up to `upto` is complete.
    pub(crate) fn complete(&mut self, p: usize, upto: u64) {
        let c = &mut self.completed[p];
        *c = (*c).max(upto);
    }

    /// Drops the checkpoints of `p` that completed (oldest first, stopping at the first
    /// one still running), advancing `completed[p]`.
    fn poll(&mut self, p: usize, done: &mut impl FnMut(E) -> bool, mut recycle: impl FnMut(E)) {
        while let Some(&(covers, e)) = self.checkpoints[p].front() {
            if covers > self.completed[p] && !done(e) {
                break;
            }
            self.checkpoints[p].pop_front();
            self.complete(p, covers);
            recycle(e);
        }
    }

    /// After `p` was synchronized up to `upto`: every checkpoint covering no more is done.
    pub(crate) fn synchronized(&mut self, p: usize, upto: u64, recycle: impl FnMut(E)) {
        self.complete(p, upto);
        self.poll(p, &mut |_| false, recycle);
    }

    /// Every checkpoint event still held (for destruction).
    pub(crate) fn drain(&mut self) -> Vec<(usize, E)> {
        let mut v = Vec::new();
        for (p, q) in self.checkpoints.iter_mut().enumerate() {
            v.extend(q.drain(..).map(|(_, e)| (p, e)));
        }
        v
    }
}

/// The device's streams: one (no partition) or one per lane.
pub(crate) struct Lanes {
    slots: Vec<Slot>,
    tracker: Mutex<Tracker<Event>>,
    /// The green contexts behind slots 1 and 2; dropped after `slots` (field order) and
    /// after every event was destroyed (`Drop`). Only held, never read.
    #[allow(dead_code)]
    green: Vec<GreenLane>,
}

impl Lanes {
    /// One stream for every lane.
    pub(crate) fn single(ctx: Arc<CudaContext>, stream: Arc<CudaStream>, sms: u32) -> Lanes {
        Lanes { slots: vec![Slot::new(ctx, stream, sms)], tracker: Mutex::default(), green: Vec::new() }
    }

    /// The primary stream plus the two green lanes of `split`.
    pub(crate) fn partitioned(ctx: Arc<CudaContext>, stream: Arc<CudaStream>, sms: u32, split: Split) -> Lanes {
        let Split { reserved, remainder, .. } = split;
        let slots = vec![
            Slot::new(ctx, stream, sms),
            Slot::new(reserved.ctx.clone(), reserved.stream.clone(), reserved.sms),
            Slot::new(remainder.ctx.clone(), remainder.stream.clone(), remainder.sms),
        ];
        Lanes { slots, tracker: Mutex::default(), green: vec![reserved, remainder] }
    }

    pub(crate) fn partitioned_now(&self) -> bool {
        self.slots.len() > 1
    }

    pub(crate) fn slots(&self) -> &[Slot] {
        &self.slots
    }

    pub(crate) fn slot(&self, i: usize) -> &Slot {
        &self.slots[i]
    }

    /// Starts a unit of work on slot `i`; returns its number.
    pub(crate) fn begin(&self, i: usize) -> u64 {
        self.slots[i].seq.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// An idle event of slot `i`'s context.
    fn event(&self, i: usize) -> Result<Event, CudaError> {
        let slot = &self.slots[i];
        if let Some(e) = lock(&slot.free_events).pop() {
            return Ok(e);
        }
        slot.bind()?;
        result::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map(Event)
            .map_err(|e| CudaError::driver("creating an event", e))
    }

    /// Gives an event of slot `i` back for reuse (waits already queued on it are not
    /// affected by a later record).
    pub(crate) fn recycle(&self, i: usize, e: Event) {
        lock(&self.slots[i].free_events).push(e);
    }

    /// Records an event on slot `i`'s stream now.
    pub(crate) fn record(&self, i: usize) -> Result<Event, CudaError> {
        let e = self.event(i)?;
        let slot = &self.slots[i];
        let r = slot.bind().and_then(|_| {
            // SAFETY: `e` is a live event of the stream's context; the stream is alive.
            unsafe { result::event::record(e.0, slot.stream.cu_stream()) }
                .map_err(|err| CudaError::driver("recording an event", err))
        });
        match r {
            Ok(()) => Ok(e),
            Err(err) => {
                self.recycle(i, e);
                Err(err)
            }
        }
    }

    /// Whether everything `e` captured has run (an error counts as "not yet": the
    /// caller then waits on it, and the fault surfaces at the next synchronize).
    pub(crate) fn done(e: Event) -> bool {
        // SAFETY: `e` is a live event.
        unsafe { result::event::query(e.0) }.is_ok()
    }

    /// Orders the next work on slot `c` after the production of a buffer made on slot
    /// `p` as unit `seq` (with its own event `own`, for uploads). Queues at most one
    /// `cuStreamWaitEvent`; never blocks the host.
    pub(crate) fn order_after(&self, c: usize, p: usize, seq: u64, own: Option<Event>) -> Result<(), CudaError> {
        if c == p {
            return Ok(());
        }
        #[cfg(test)]
        if crate::mutants::planted(crate::mutants::Mutant::NoCrossLaneWait) {
            return Ok(());
        }
        let mut t = lock(&self.tracker);
        let need = t.need(c, p, seq, own, Self::done, |e| self.recycle(p, e));
        let (e, covers) = match need {
            Need::Nothing => return Ok(()),
            Need::Wait(e, covers) => (e, covers),
            Need::Record => {
                let covers = self.slots[p].seq();
                let e = self.record(p)?;
                t.push_checkpoint(p, covers, e);
                (e, covers)
            }
        };
        let slot = &self.slots[c];
        slot.bind()?;
        // SAFETY: live stream and event; events of another context are allowed.
        unsafe { result::stream::wait_event(slot.stream.cu_stream(), e.0, CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
            .map_err(|err| CudaError::driver("waiting for another lane", err))?;
        t.waited(c, p, covers);
        Ok(())
    }

    /// Waits until everything queued on slot `i` has run.
    /// Whether everything queued on slot `i` has run, without waiting
    /// (`cuStreamQuery`); when it has, the slot is marked synchronized up to there.
    pub(crate) fn is_idle(&self, i: usize) -> Result<bool, CudaError> {
        let slot = &self.slots[i];
        let upto = slot.seq();
        slot.bind()?;
        // SAFETY: a live stream of a live context (bound above).
        match unsafe { cudarc::driver::sys::cuStreamQuery(slot.stream.cu_stream()) } {
            cudarc::driver::sys::CUresult::CUDA_SUCCESS => {
                lock(&self.tracker).synchronized(i, upto, |e| self.recycle(i, e));
                Ok(true)
            }
            cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(CudaError::driver("querying the stream", cudarc::driver::DriverError(other))),
        }
    }

    pub(crate) fn synchronize(&self, i: usize) -> Result<(), CudaError> {
        let slot = &self.slots[i];
        let upto = slot.seq();
        slot.stream.synchronize().map_err(|e| CudaError::driver("synchronizing the stream", e))?;
        lock(&self.tracker).synchronized(i, upto, |e| self.recycle(i, e));
        Ok(())
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        let held = self.tracker.get_mut().unwrap_or_else(|p| p.into_inner()).drain();
        for (i, e) in held {
            self.recycle(i, e);
        }
        for slot in &self.slots {
            if let Err(e) = slot.stream.synchronize() {
                tracing::warn!(error = ?e, "cuda lanes: synchronize before teardown failed");
            }
            let events = std::mem::take(&mut *lock(&slot.free_events));
            if events.is_empty() {
                continue;
            }
            slot.ctx.record_err(slot.ctx.bind_to_thread());
            for e in events {
                // SAFETY: an idle event of this slot, destroyed once; the context lives.
                let _ = unsafe { result::event::destroy(e.0) };
            }
        }
        // Leave the primary context current rather than a green one about to go.
        if let Some(primary) = self.slots.first() {
            primary.ctx.record_err(primary.ctx.bind_to_thread());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fake events: an index into a table of "completed" flags.
    type Ev = usize;

    #[test]
    fn same_stream_needs_nothing() {
        let mut t = Tracker::<Ev>::default();
        assert_eq!(t.need(1, 1, 99, None, |_| false, |_| {}), Need::Nothing);
        assert_eq!(t.need(0, 0, 99, Some(3), |_| false, |_| {}), Need::Nothing);
    }

    #[test]
    fn uploads_wait_on_their_own_event_once() {
        let mut t = Tracker::<Ev>::default();
        // Reserved (1) reads an upload made on Whole (0) as unit 5, still running.
        assert_eq!(t.need(1, 0, 5, Some(7), |_| false, |_| {}), Need::Wait(7, 5));
        t.waited(1, 0, 5);
        // Anything up to 5 is covered now; later work of Whole is not.
        assert_eq!(t.need(1, 0, 4, None, |_| false, |_| {}), Need::Nothing);
        assert_eq!(t.need(1, 0, 6, Some(8), |_| false, |_| {}), Need::Wait(8, 6));
        // Another consumer has its own bookkeeping.
        assert_eq!(t.need(2, 0, 5, Some(7), |_| false, |_| {}), Need::Wait(7, 5));
        // A completed upload needs nothing and teaches the tracker that 0 reached 9.
        assert_eq!(t.need(2, 0, 9, Some(9), |_| true, |_| {}), Need::Nothing);
        assert_eq!(t.need(2, 0, 8, None, |_| false, |_| {}), Need::Nothing);
    }

    #[test]
    fn kernel_outputs_share_checkpoints() {
        let mut t = Tracker::<Ev>::default();
        // Remainder (2) reads output unit 3 of Whole: nothing recorded yet.
        assert_eq!(t.need(2, 0, 3, None, |_| false, |_| {}), Need::Record);
        t.push_checkpoint(0, 10, 100);
        t.waited(2, 0, 10);
        // Reserved reads unit 4 of Whole: the checkpoint covering 10 serves.
        assert_eq!(t.need(1, 0, 4, None, |_| false, |_| {}), Need::Wait(100, 10));
        // Unit 11 is past every checkpoint.
        assert_eq!(t.need(1, 0, 11, None, |_| false, |_| {}), Need::Record);
        t.push_checkpoint(0, 20, 101);
        // The oldest sufficient checkpoint is chosen (least over-waiting).
        assert_eq!(t.need(1, 0, 9, None, |_| false, |_| {}), Need::Wait(100, 10));
        assert_eq!(t.need(1, 0, 12, None, |_| false, |_| {}), Need::Wait(101, 20));
    }

    #[test]
    fn completed_checkpoints_are_recycled_and_end_waiting() {
        let mut t = Tracker::<Ev>::default();
        t.push_checkpoint(0, 10, 100);
        t.push_checkpoint(0, 20, 101);
        let mut recycled = Vec::new();
        // 100 has completed, 101 not: unit 8 needs nothing, 100 is given back.
        let done = |e: Ev| e == 100;
        assert_eq!(t.need(1, 0, 8, None, done, |e| recycled.push(e)), Need::Nothing);
        assert_eq!(recycled, vec![100]);
        assert_eq!(t.need(1, 0, 15, None, done, |e| recycled.push(e)), Need::Wait(101, 20));
        // A synchronize of stream 0 up to 25 completes everything.
        t.synchronized(0, 25, |e| recycled.push(e));
        assert_eq!(recycled, vec![100, 101]);
        assert_eq!(t.need(2, 0, 25, None, |_| false, |_| {}), Need::Nothing);
        assert_eq!(t.need(2, 0, 26, None, |_| false, |_| {}), Need::Record);
        assert!(t.drain().is_empty());
    }

    #[test]
    fn drain_returns_held_checkpoints_with_their_stream() {
        let mut t = Tracker::<Ev>::default();
        t.push_checkpoint(2, 1, 7);
        t.push_checkpoint(0, 1, 8);
        let mut held = t.drain();
        held.sort();
        assert_eq!(held, vec![(0, 8), (2, 7)]);
    }
}
