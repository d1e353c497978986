//! Where work runs and how much of it may be queued on an asynchronous device: the lane
//! of each class on a partitioned device, the in-flight bound of each lane, and the
//! drains that wait for a lane (or see it idle), measure it and correct the charges of
//! device-timed kernels.

use std::time::Duration;

use super::Actor;
use crate::device::Lane;
use crate::scheduler::cost::KernelKey;
use crate::scheduler::inflight::{Correction, InFlight};
use crate::scheduler::queues::Pick;
use crate::scheduler::work::{Queued, Work};
use crate::scheduler::{Policy, PriorityClass};

impl Actor {
    /// Whether the head of `pick`'s queue may be enqueued on `lane` of an asynchronous
    /// device now. Work past the lane's in-flight bound waits for the lane to drain:
    /// on one queue the scheduler waits for it (latency work would wait for it
    /// anyway); on a partitioned device it only checks, so that latency work keeps
    /// flowing to its own partition meanwhile.
    pub(super) fn room_on(&mut self, lane: Lane, pick: Pick, class: PriorityClass) -> bool {
        let Some(Queued { work: Work::Launch { op, inputs, out, .. }, .. }) = self.queues.peek(pick) else {
            return true;
        };
        let key = KernelKey::new(op, inputs.iter().map(|(_, m)| m), out).on_lane(lane);
        let bound = self.inflight_bound(class);
        // A kernel past the bound is sliced (or runs alone on an empty device): what
        // it adds to the lane at once is at most the bound.
        let estimate = self.cost.estimate(&key).min(bound);
        if !self.inflight[lane.index()].would_exceed(estimate, bound) {
            return true;
        }
        if !self.partitioned {
            self.drain_lane(lane);
            return true;
        }
        let Some(lanes) = self.device.lanes() else {
            self.drain_lane(lane);
            return true;
        };
        match lanes.lane_idle(lane) {
            Ok(true) => {
                let now = self.now();
                let corrections = self.inflight[lane.index()].drained(&mut self.cost, now);
                self.correct(&corrections);
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::error!(error = %e, ?lane, "device query failed");
                self.drain_lane(lane);
                true
            }
        }
    }

    /// How much work may be in flight on an asynchronous device before more of
    /// `class` is enqueued: unbounded for latency work and under FIFO; the
    /// preemption budget for best-effort work while latency work is active (unless
    /// it runs on its own partition); the fill depth otherwise.
    pub(super) fn inflight_bound(&self, class: PriorityClass) -> Duration {
        match (self.config.policy, class) {
            (Policy::Fifo, _) | (_, PriorityClass::Latency) => Duration::MAX,
            (Policy::Priority, PriorityClass::Batch) if self.latency_expected() && !self.partitioned => {
                self.config.preemption_budget
            }
            (Policy::Priority, PriorityClass::Batch) => self.config.fill_depth,
        }
    }

    /// Where `pick`'s work runs: on a partitioned device latency work on the
    /// reserved partition, best-effort work on the remainder while latency work is
    /// active and on the whole device otherwise; the runtime's own uploads on the
    /// whole device. Everything on the whole device without a partition.
    pub(super) fn lane_for(&self, pick: Pick, class: PriorityClass) -> Lane {
        if !self.partitioned {
            return Lane::Whole;
        }
        match (pick, class) {
            (Pick::System, _) => Lane::Whole,
            (_, PriorityClass::Latency) => Lane::Reserved,
            (_, PriorityClass::Batch) if self.latency_expected() => Lane::Remainder,
            (_, PriorityClass::Batch) => Lane::Whole,
        }
    }

    /// Directs the device to `lane`.
    pub(super) fn enter(&mut self, lane: Lane) {
        if self.lane != lane {
            if let Some(lanes) = self.device.lanes() {
                lanes.set_lane(lane);
            }
            self.lane = lane;
        }
    }

    /// Waits for an asynchronous device to finish what it holds on every lane, and
    /// measures it.
    pub(super) fn drain(&mut self) {
        if self.inflight.iter().all(InFlight::is_empty) {
            return;
        }
        if let Err(e) = self.device.synchronize() {
            tracing::error!(error = %e, "device synchronize failed");
        }
        let now = self.now();
        for lane in Lane::ALL {
            let corrections = self.inflight[lane.index()].drained(&mut self.cost, now);
            self.correct(&corrections);
        }
    }

    /// Applies the charge corrections of timed kernels to their tenants and to the
    /// device's busy time.
    pub(super) fn correct(&mut self, corrections: &[Correction]) {
        for c in corrections {
            self.queues.correct(c.tenant, c.delta_ns);
            self.stats.correct_busy(c.delta_ns);
        }
    }

    /// Waits for what `lane` holds, and measures it.
    pub(super) fn drain_lane(&mut self, lane: Lane) {
        if self.inflight[lane.index()].is_empty() {
            return;
        }
        let synchronized = match self.device.lanes() {
            Some(lanes) => lanes.synchronize_lane(lane),
            None => self.device.synchronize(),
        };
        if let Err(e) = synchronized {
            tracing::error!(error = %e, ?lane, "device synchronize failed");
        }
        let now = self.now();
        let corrections = self.inflight[lane.index()].drained(&mut self.cost, now);
        self.correct(&corrections);
    }
}
