//! Guest CPU time: the time an invocation spends computing in Wasm between host
//! calls, measured per invocation and charged to its tenant's fair share on the device
//! ([`crate::scheduler::DeviceQueue::charge_guest_cpu`]), so a tenant cannot use the
//! host's cores for free.
//!
//! The host imports that matter (uploads, launches, reads, artifact loads) mark their
//! entry ([`GuestCpu::enter_host`]) and their return ([`GuestCpu::leave_host`]); the
//! time from one return (or the start of `run`) to the next entry (or the end of
//! `run`) is the guest's. It is wall-clock time on the invocation's thread: a thread
//! descheduled meanwhile is charged for the wait too (an overcharge only on a host
//! that is overloaded anyway). An import that fails before it marks its return
//! charges its own host time to the guest, which made it fail.

use std::time::{Duration, Instant};

use crate::scheduler::{DeviceQueue, InvocationId};

/// Guest time is sent to the scheduler in pieces of at least this much (one message
/// per piece), and at the end of the invocation.
const CHARGE_EVERY: Duration = Duration::from_micros(200);

/// One invocation's guest CPU time.
#[derive(Debug, Default)]
pub(crate) struct GuestCpu {
    /// When the guest last got control; `None` while the host runs.
    since: Option<Instant>,
    /// When the last import was entered (the guest's time resumes from there if that
    /// import failed without marking its return).
    entered: Option<Instant>,
    /// Guest time not yet charged.
    unreported: Duration,
    /// Guest time of the invocation so far.
    total: Duration,
}

impl GuestCpu {
    /// The guest starts running (`run` is called).
    pub fn start(&mut self) {
        *self = GuestCpu { since: Some(Instant::now()), ..GuestCpu::default() };
    }

    /// A host import is entered: the guest's time since it got control is counted,
    /// and charged once enough has gathered.
    pub fn enter_host(&mut self, queue: &DeviceQueue, inv: InvocationId) {
        let now = Instant::now();
        self.count_until(now);
        self.entered = Some(now);
        if self.unreported >= CHARGE_EVERY {
            queue.charge_guest_cpu(inv, std::mem::take(&mut self.unreported));
        }
    }

    /// Counts the guest's time from when it got control (or from the last import's
    /// entry, if that import failed) until `now`.
    fn count_until(&mut self, now: Instant) {
        if let Some(from) = self.since.take().or(self.entered.take()) {
            let ran = now.saturating_duration_since(from);
            self.unreported += ran;
            self.total += ran;
        }
    }

    /// A host import returns to the guest.
    pub fn leave_host(&mut self) {
        self.since = Some(Instant::now());
    }

    /// `run` returned (or trapped): counts and charges the rest; returns the
    /// invocation's guest time.
    pub fn finish(&mut self, queue: &DeviceQueue, inv: InvocationId) -> Duration {
        self.count_until(Instant::now());
        self.entered = None;
        if !self.unreported.is_zero() {
            queue.charge_guest_cpu(inv, std::mem::take(&mut self.unreported));
        }
        self.total
    }
}
