//! Work handed to an asynchronous device (a GPU stream) and not yet known finished.
//!
//! A kernel launched on an asynchronous device only starts when everything enqueued
//! before it has run, so whatever sits on the device is what latency work must wait
//! for. The scheduler keeps that bounded: it tracks the estimated cost of the kernels
//! in flight and, before enqueueing best-effort work past the bound, waits for the
//! device to drain (or, on a partitioned device, checks whether it has).
//!
//! Draining also measures. A kernel launched with a device clock (the long ones, timed
//! with GPU events) reports its own device time: the cost model learns it exactly and
//! its tenant's charge (the estimate, at launch) is corrected to it. The rest of the
//! window's wall time is spread over the untimed kernels in proportion to their
//! estimates.

use std::time::Duration;

use super::cost::{CostModel, KernelKey};
use crate::device::KernelClock;

/// One kernel (or slice of one) in flight.
struct Flight {
    /// What the cost model learns the kernel's time under.
    key: KernelKey,
    /// The part of the kernel this is: 1 for a whole kernel, the share of its rows for
    /// a slice (the cost model learns the slice's time divided by it).
    share: f64,
    estimate: Duration,
    /// The device's own measurement, when the kernel was timed.
    clock: Option<Box<dyn KernelClock>>,
    /// Whom the estimate was charged to (a tenant index of the queues).
    tenant: Option<usize>,
}

/// A correction of a tenant's charge: the measured device time minus the estimate
/// charged at launch, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Correction {
    pub tenant: usize,
    pub delta_ns: i64,
}

/// Kernels enqueued since the device (lane) was last known idle. Times are on the
/// scheduler's clock, given by the caller.
#[derive(Default)]
pub(super) struct InFlight {
    since: Option<Duration>,
    kernels: Vec<Flight>,
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

    /// Records a kernel enqueued at `now`, with the device's clock if it was timed and
    /// the tenant its estimate was charged to.
    pub fn add(
        &mut self,
        key: KernelKey,
        estimate: Duration,
        clock: Option<Box<dyn KernelClock>>,
        tenant: Option<usize>,
        now: Duration,
    ) {
        self.push(Flight { key, share: 1.0, estimate, clock, tenant }, now);
    }

    /// Records a slice of kernel `key` enqueued at `now`, `share` of its rows: it
    /// occupies the device like a kernel, and what it takes, scaled up by its share,
    /// is a measurement of the whole kernel. (A kernel that only ever runs in slices,
    /// best-effort work beside latency work, is learned so; else its estimate would
    /// stay its family's rate, which for a large GEMM was ~100× too long on the H200.)
    pub fn add_slice(&mut self, key: KernelKey, share: f64, estimate: Duration, now: Duration) {
        self.push(Flight { key, share, estimate, clock: None, tenant: None }, now);
    }

    fn push(&mut self, flight: Flight, now: Duration) {
        self.since.get_or_insert(now);
        self.estimated += flight.estimate;
        self.kernels.push(flight);
    }

    /// The device has drained by `now` (the caller synchronised it, or saw it idle):
    /// feeds what each kernel took to `cost` and forgets the kernels. Returns the
    /// charge corrections of the timed kernels.
    pub fn drained(&mut self, cost: &mut CostModel, now: Duration) -> Vec<Correction> {
        let Some(since) = self.since.take() else { return Vec::new() };
        let window = now.saturating_sub(since);
        let mut corrections = Vec::new();
        let (mut timed, mut untimed_estimate) = (Duration::ZERO, Duration::ZERO);
        let mut untimed = Vec::new();
        for f in self.kernels.drain(..) {
            let measured = match &f.clock {
                Some(clock) => clock.elapsed().unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "reading a kernel's device time failed");
                    None
                }),
                None => None,
            };
            match measured {
                Some(t) => {
                    cost.record(&f.key, t.div_f64(f.share));
                    timed += t;
                    if let Some(tenant) = f.tenant {
                        let delta_ns = t.as_nanos() as i64 - f.estimate.as_nanos() as i64;
                        corrections.push(Correction { tenant, delta_ns });
                    }
                }
                None => {
                    untimed_estimate += f.estimate;
                    untimed.push(f);
                }
            }
        }
        // What the timed kernels do not explain is spread over the others.
        let rest = window.saturating_sub(timed);
        let scale = rest.as_secs_f64() / untimed_estimate.as_secs_f64().max(1e-9);
        for f in untimed {
            cost.record(&f.key, f.estimate.mul_f64(scale / f.share));
        }
        self.estimated = Duration::ZERO;
        corrections
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceError;
    use sluice_host_api::{DType, Op, TensorMeta, UnaryOp};

    struct Fixed(Duration);

    impl KernelClock for Fixed {
        fn elapsed(&self) -> Result<Option<Duration>, DeviceError> {
            Ok(Some(self.0))
        }
    }

    fn key(n: u32) -> KernelKey {
        let m = TensorMeta::new(DType::F32, vec![n]).unwrap();
        KernelKey::new(&Op::Unary(UnaryOp::Exp), [&m].into_iter(), &m)
    }

    #[test]
    fn timed_kernels_are_learned_exactly_and_corrected() {
        let mut inflight = InFlight::default();
        let mut cost = CostModel::default();
        let start = Duration::from_millis(100);
        let fixed = Some(Box::new(Fixed(Duration::from_millis(3))) as Box<dyn KernelClock>);
        inflight.add(key(1), Duration::from_millis(1), fixed, Some(7), start);
        inflight.add(key(2), Duration::from_micros(10), None, Some(7), start);
        let corrections = inflight.drained(&mut cost, start + Duration::from_millis(4));
        assert_eq!(corrections, vec![Correction { tenant: 7, delta_ns: 2_000_000 }]);
        assert_eq!(cost.estimate(&key(1)), Duration::from_millis(3), "learned from the device's clock");
        let rest = cost.estimate(&key(2));
        assert!(rest.abs_diff(Duration::from_millis(1)) < Duration::from_micros(1), "the rest of the window: {rest:?}");
        assert!(inflight.is_empty());
        assert_eq!(inflight.drained(&mut cost, start), vec![], "nothing in flight, nothing to correct");
    }

    #[test]
    fn a_slice_teaches_the_whole_kernel_scaled_by_its_share() {
        let mut inflight = InFlight::default();
        let mut cost = CostModel::default();
        let start = Duration::from_millis(100);
        // A slice of a 32nd of the rows, estimated (far too long) at 10 ms, alone on
        // the device for 100 µs: the kernel takes 3.2 ms.
        inflight.add_slice(key(64), 1.0 / 32.0, Duration::from_millis(10), start);
        inflight.drained(&mut cost, start + Duration::from_micros(100));
        let learned = cost.estimate(&key(64));
        assert!(learned.abs_diff(Duration::from_micros(3200)) < Duration::from_micros(1), "{learned:?}");
    }
}
