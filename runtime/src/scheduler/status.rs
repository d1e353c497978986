//! What a device's scheduler reports (queues, device time per tenant, preemptions),
//! and the counters ([`Stats`]) it keeps for that.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use super::{Policy, PriorityClass};
use crate::device::{DeviceInfo, PartitionState};

/// A snapshot of one device's scheduler, taken after the commands sent before it.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceStatus {
    pub device: DeviceInfo,
    pub policy: Policy,
    pub preemption_budget_us: u64,
    /// The spatial partition in force, or why there is none.
    pub partition: PartitionState,
    /// Kernels and uploads waiting in queues.
    pub queued: usize,
    /// Invocations with an open stream on this device.
    pub active_invocations: usize,
    pub resident_tensors: usize,
    pub resident_bytes: u64,
    /// Kernels run since start (a sliced kernel counts once).
    pub kernels: u64,
    pub uploads: u64,
    /// Best-effort kernels run in slices because latency work was active.
    pub sliced_kernels: u64,
    /// Times latency work was picked while best-effort work was waiting.
    pub preemptions: u64,
    /// Device time spent in kernels, in microseconds.
    pub busy_us: u64,
    /// Arrival of a latency invocation's first kernel → that kernel starting.
    pub preemption_latency: LatencySummary,
    pub tenants: Vec<TenantStatus>,
    /// Whether the device serves.
    pub health: DeviceHealth,
    /// Backend panics caught since start: each failed one command (its invocation)
    /// and the device kept serving.
    pub contained_faults: u64,
    /// Times the device was lost (a sticky GPU error) and reset since start.
    pub resets: u64,
    /// Why the device was lost the last time, if it ever was.
    pub last_reset: Option<String>,
    /// Status snapshots the device's actor computed since start, this one included
    /// (callers share them: [`super::DeviceQueue::shared_status`]).
    pub status_computations: u64,
}

/// Whether a device's scheduler serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "state", content = "reason")]
pub enum DeviceHealth {
    /// It runs work.
    Healthy,
    /// It stopped: why. Every invocation on it fails.
    Failed(String),
}

impl DeviceStatus {
    /// The status of a device whose scheduler stopped for `why`: what the handle
    /// knows without it, and no counters.
    pub(super) fn failed(device: DeviceInfo, policy: Policy, preemption_budget_us: u64, why: String) -> DeviceStatus {
        DeviceStatus {
            device,
            policy,
            preemption_budget_us,
            partition: PartitionState::Unavailable { reason: "the device stopped".into() },
            queued: 0,
            active_invocations: 0,
            resident_tensors: 0,
            resident_bytes: 0,
            kernels: 0,
            uploads: 0,
            sliced_kernels: 0,
            preemptions: 0,
            busy_us: 0,
            preemption_latency: LatencySummary::default(),
            tenants: Vec::new(),
            health: DeviceHealth::Failed(why),
            contained_faults: 0,
            resets: 0,
            last_reset: None,
            status_computations: 0,
        }
    }
}

/// Distribution of recent latencies, in microseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LatencySummary {
    pub count: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl LatencySummary {
    /// Summarises samples given in nanoseconds.
    pub fn from_ns(samples: &[u64]) -> Self {
        if samples.is_empty() {
            return LatencySummary::default();
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
        LatencySummary { count: s.len(), p50_us: at(0.5), p99_us: at(0.99), max_us: *s.last().unwrap() as f64 / 1e3 }
    }
}

/// One tenant's share of one device (per priority class).
#[derive(Clone, Debug, Serialize)]
pub struct TenantStatus {
    pub tenant: String,
    pub class: PriorityClass,
    pub weight: u32,
    pub queued: usize,
    pub active_invocations: usize,
    pub kernels: u64,
    /// Measured device time of its kernels, in microseconds.
    pub device_time_us: u64,
    /// Host CPU time its guests computed between host calls, in microseconds
    /// (charged to its fair share like device time).
    pub guest_cpu_us: u64,
}

/// How many preemption-latency samples a device keeps.
const LATENCY_SAMPLES: usize = 4096;

/// The device actor's counters.
#[derive(Default)]
pub(super) struct Stats {
    /// Kernels run (a sliced kernel counts once).
    pub kernels: u64,
    pub uploads: u64,
    /// Best-effort kernels run in slices.
    pub sliced_kernels: u64,
    /// Times latency work was picked while best-effort work was waiting.
    pub preemptions: u64,
    /// Device time spent in work.
    pub busy: Duration,
    /// Status snapshots computed.
    pub status_computations: u64,
    /// Recent preemption latencies, in nanoseconds.
    latency_ns: VecDeque<u64>,
}

impl Stats {
    /// Records one preemption latency (a latency invocation's wait for its first kernel).
    pub fn record_latency(&mut self, waited: Duration) {
        if self.latency_ns.len() == LATENCY_SAMPLES {
            self.latency_ns.pop_front();
        }
        self.latency_ns.push_back(waited.as_nanos() as u64);
    }

    /// Corrects the busy time by `delta_ns` (a kernel's measured time minus its estimate).
    pub fn correct_busy(&mut self, delta_ns: i64) {
        self.busy = Duration::from_nanos((self.busy.as_nanos() as i64 + delta_ns).max(0) as u64);
    }

    /// The distribution of the recent preemption latencies.
    pub fn preemption_latency(&self) -> LatencySummary {
        let samples: Vec<u64> = self.latency_ns.iter().copied().collect();
        LatencySummary::from_ns(&samples)
    }
}
