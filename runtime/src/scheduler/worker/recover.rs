//! A lost device (issue 11, defect 8): a sticky GPU error (an illegal address) poisons
//! the device's context for every tenant, so the actor resets it and keeps serving.
//!
//! [`Watched`] wraps the device and notes the first [`DeviceError::Lost`] any call
//! returns. After each command and each step the actor checks the note
//! ([`Actor::recover_if_lost`]) and, if the device was lost:
//! - counts the reset (published when the loss was noted, before the failed call's
//!   error reached anyone, so whoever sees a failure also sees the count: the engine
//!   then drops its cached weights, see `engine/artifacts.rs`);
//! - fails every queued work item, whoever's, with `device-failure` saying the device
//!   was reset (the invocations stay open: what they submit next runs on the new
//!   device; what reads the lost tensors fails the same way);
//! - drops every buffer of the tensor table (they belong to the lost context; a tensor
//!   not failed already fails with that error) and forgets the work in flight;
//! - calls [`Device::recover`]. If that fails the device is marked failed
//!   ([`DeviceHealth::Failed`]) and from then on every submitted work item fails at
//!   once with that reason, so no invocation waits on it; placement passes over it
//!   while another device serves.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use sluice_host_api::{ApiError, ErrorCode, Op, TensorMeta};

use super::Actor;
use crate::device::{
    Buffer, Device, DeviceError, DeviceInfo, KernelClock, KernelTiming, Lane, Lanes, PartitionState, RowSlicing,
    ScratchFn, TimedLaunch,
};
use crate::scheduler::Published;
use crate::scheduler::status::DeviceHealth;
use crate::scheduler::work::Work;

/// Why the device was lost, once a call said so; taken when the actor resets it.
#[derive(Clone, Default)]
struct LostNote {
    why: Arc<Mutex<Option<String>>>,
    /// Where the loss is counted the moment it is noted, before the failed call's
    /// error reaches anyone.
    published: Arc<Published>,
}

fn note<T>(lost: &LostNote, result: Result<T, DeviceError>) -> Result<T, DeviceError> {
    if let Err(DeviceError::Lost(why)) = &result {
        let mut noted = lost.why.lock();
        if noted.is_none() {
            *noted = Some(why.clone());
            lost.published.resets.fetch_add(1, Ordering::AcqRel);
        }
    }
    result
}

/// The actor's side of device loss: the note, the resets and a failed recovery.
#[derive(Default)]
pub(super) struct Recovery {
    lost: LostNote,
    resets: u64,
    last_reset: Option<String>,
    /// Why the device could not be reset: it serves no more.
    failed: Option<String>,
}

impl Recovery {
    /// Notes the losses of `device`, counting them in `published` at once.
    pub(super) fn new(published: Arc<Published>) -> Recovery {
        Recovery { lost: LostNote { why: Arc::default(), published }, ..Recovery::default() }
    }

    /// Wraps `device` so that its losses are noted here.
    pub(super) fn watch(&self, device: Box<dyn Device>) -> Box<dyn Device> {
        Box::new(Watched { inner: device, lost: self.lost.clone() })
    }

    /// Resets so far, and why the device was lost the last time.
    pub(super) fn resets(&self) -> (u64, Option<String>) {
        (self.resets, self.last_reset.clone())
    }

    /// Whether the device serves.
    pub(super) fn health(&self) -> DeviceHealth {
        match &self.failed {
            Some(why) => DeviceHealth::Failed(why.clone()),
            None => DeviceHealth::Healthy,
        }
    }

    /// The error every work item gets once the device could not be reset.
    fn refusal(&self) -> Option<ApiError> {
        self.failed.as_ref().map(|why| ApiError::new(ErrorCode::DeviceFailure, why.clone()))
    }
}

impl Actor {
    /// Resets the device if a call since the last check lost it (see the module).
    pub(super) fn recover_if_lost(&mut self) {
        let Some(why) = self.recovery.lost.why.lock().take() else { return };
        // Published when the loss was noted.
        self.recovery.resets += 1;
        self.recovery.last_reset = Some(why.clone());
        tracing::error!(why, resets = self.recovery.resets, "the device was lost; failing its work and resetting it");
        let e = ApiError::new(
            ErrorCode::DeviceFailure,
            format!("the device was reset after it was lost ({why}): the work and the tensors on it are gone"),
        );
        // Nothing in flight is waited for or measured any more.
        self.inflight = Default::default();
        for q in self.queues.take_all() {
            self.fail(q.work, e.clone());
        }
        for (meta, reply) in self.tensors.lose_all(&e) {
            let _ = (meta, reply.send(Err(e.clone())));
        }
        if let Err(failed) = self.device.recover() {
            let why = format!("the device was lost ({why}) and could not be reset: {failed}");
            tracing::error!(why, "the device serves no more");
            self.recovery.failed = Some(why);
            self.recovery.lost.published.unrecoverable.store(true, Ordering::Release);
        }
        // A loss the reset's own calls noted is the one being handled.
        if self.recovery.lost.why.lock().take().is_some() {
            self.recovery.lost.published.resets.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Fails `work` at once when the device could not be reset; gives it back otherwise.
    pub(super) fn refuse_if_failed(&mut self, work: Work) -> Option<Work> {
        match self.recovery.refusal() {
            Some(e) => {
                self.fail(work, e);
                None
            }
            None => Some(work),
        }
    }

    /// Fails a work item that will not run, with `e`.
    fn fail(&mut self, work: Work, e: ApiError) {
        self.tensors.release_inputs(&work);
        self.complete(work.output(), Err(e), self.lane);
    }
}

/// The actor's device, noting every [`DeviceError::Lost`] its calls return. Every
/// method of [`Device`] and of its capabilities is passed on to the device.
struct Watched {
    inner: Box<dyn Device>,
    lost: LostNote,
}

impl Device for Watched {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        note(&self.lost, self.inner.upload(meta, bytes))
    }

    fn upload_owned(&self, meta: &TensorMeta, bytes: Vec<u8>) -> Result<Buffer, DeviceError> {
        note(&self.lost, self.inner.upload_owned(meta, bytes))
    }

    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        note(&self.lost, self.inner.launch(op, inputs, out))
    }

    fn ready(&self, buffer: &Buffer) -> bool {
        self.inner.ready(buffer)
    }

    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        note(&self.lost, self.inner.download(buffer, meta))
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        note(&self.lost, self.inner.synchronize())
    }

    fn scratch_bytes(&self, op: &Op, inputs: &[&TensorMeta], out: &TensorMeta) -> u64 {
        self.inner.scratch_bytes(op, inputs, out)
    }

    fn recover(&self) -> Result<(), DeviceError> {
        self.inner.recover()
    }

    fn scratch(&self) -> Option<ScratchFn> {
        self.inner.scratch()
    }

    fn is_async(&self) -> bool {
        self.inner.is_async()
    }

    fn partition(&self) -> PartitionState {
        self.inner.partition()
    }

    fn rows(&self) -> Option<&dyn RowSlicing> {
        self.inner.rows().map(|_| self as &dyn RowSlicing)
    }

    fn timing(&self) -> Option<&dyn KernelTiming> {
        self.inner.timing().map(|_| self as &dyn KernelTiming)
    }

    fn lanes(&self) -> Option<&dyn Lanes> {
        self.inner.lanes().map(|_| self as &dyn Lanes)
    }
}

fn gone() -> DeviceError {
    DeviceError::Failure("the device no longer offers this capability".into())
}

impl RowSlicing for Watched {
    fn launch_rows(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
        rows: std::ops::Range<usize>,
    ) -> Result<Buffer, DeviceError> {
        let rows = self.inner.rows().ok_or_else(gone).and_then(|r| r.launch_rows(op, inputs, out, rows));
        note(&self.lost, rows)
    }
}

impl KernelTiming for Watched {
    fn launch_timed(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
    ) -> Result<TimedLaunch, DeviceError> {
        let timed = self.inner.timing().ok_or_else(gone).and_then(|t| t.launch_timed(op, inputs, out));
        let (buffer, clock) = note(&self.lost, timed)?;
        Ok((buffer, Box::new(WatchedClock { inner: clock, lost: self.lost.clone() })))
    }
}

impl Lanes for Watched {
    fn set_lane(&self, lane: Lane) {
        if let Some(lanes) = self.inner.lanes() {
            lanes.set_lane(lane);
        }
    }

    fn synchronize_lane(&self, lane: Lane) -> Result<(), DeviceError> {
        note(&self.lost, self.inner.lanes().ok_or_else(gone).and_then(|l| l.synchronize_lane(lane)))
    }

    fn lane_idle(&self, lane: Lane) -> Result<bool, DeviceError> {
        note(&self.lost, self.inner.lanes().ok_or_else(gone).and_then(|l| l.lane_idle(lane)))
    }
}

/// A kernel's device clock, noting a loss its reading reports.
struct WatchedClock {
    inner: Box<dyn KernelClock>,
    lost: LostNote,
}

impl KernelClock for WatchedClock {
    fn elapsed(&self) -> Result<Option<std::time::Duration>, DeviceError> {
        note(&self.lost, self.inner.elapsed())
    }
}
