//! Work handed to an asynchronous device (a GPU stream) and not yet known finished.
//!
//! A kernel launched on an asynchronous device only starts when everything enqueued
//! before it has run, so whatever sits on the device is what latency work must wait
//! for. The scheduler keeps that bounded: it tracks the estimated cost of the kernels
//! in flight and, before enqueueing best-effort work past the bound, waits for the
//! device to drain. Draining also measures: the wall time of the window, spread over
//! its kernels in proportion to their estimates, feeds the cost model (per-kernel
//! timestamps would need device events).

use std::time::{Duration, Instant};

use super::cost::{CostModel, KernelKey};

/// Kernels enqueued since the device was last known idle.
#[derive(Default)]
pub(super) struct InFlight {
    since: Option<Instant>,
    kernels: Vec<(KernelKey, Duration)>,
    estimated: Duration,
}

impl InFlight {
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    /// Whether enqueueing `estimate` more would pass `bound` (never for an empty device).
    pub fn would_exceed(&self, estimate: Duration, bound: Duration) -> bool {
        !self.kernels.is_empty() && self.estimated.saturating_add(estimate) > bound
    }

    /// Records a kernel just enqueued.
    pub fn add(&mut self, key: KernelKey, estimate: Duration) {
        self.since.get_or_insert_with(Instant::now);
        self.kernels.push((key, estimate));
        self.estimated += estimate;
    }

    /// The device has drained (the caller synchronised it): feeds the window's
    /// measured time to `cost` and forgets the kernels. Returns the window's length.
    pub fn drained(&mut self, cost: &mut CostModel) -> Duration {
        let Some(since) = self.since.take() else { return Duration::ZERO };
        let measured = since.elapsed();
        let scale = measured.as_secs_f64() / self.estimated.as_secs_f64().max(1e-9);
        for (key, estimate) in self.kernels.drain(..) {
            cost.record(&key, estimate.mul_f64(scale));
        }
        self.estimated = Duration::ZERO;
        measured
    }
}
