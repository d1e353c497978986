//! The device status shared by every caller: one computation by the actor serves all
//! the callers of a short interval ([`SchedulerConfig::status_interval`]), so the
//! actor's work for status does not grow with the number of callers (`/v1/status`,
//! `/metrics`, the live feeds, every tenant's).
//!
//! Concurrent requests are coalesced: a caller waits for the computation in progress,
//! and takes a snapshot whose computation began after it arrived as fresh, whatever its
//! age; otherwise one at most [`SchedulerConfig::status_interval`] old on the
//! scheduler's clock. So many concurrent callers cause at most two computations (the
//! one running when they arrived and one for all of them), and a steady stream of
//! callers at most one per interval. The exact status after the commands sent before
//! stays [`DeviceQueue::status`].
//!
//! [`SchedulerConfig::status_interval`]: super::SchedulerConfig::status_interval

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{DeviceQueue, DeviceStatus};

/// The latest snapshot of one device and the requests it answers.
#[derive(Default)]
pub(super) struct Snapshots {
    /// Requests so far: each caller takes a ticket on arrival.
    arrivals: AtomicU64,
    latest: tokio::sync::Mutex<Option<Snapshot>>,
}

struct Snapshot {
    /// The scheduler's clock when its computation was asked for.
    at: Duration,
    /// Every caller whose ticket is below this arrived before it was asked for.
    covers: u64,
    status: Arc<DeviceStatus>,
}

impl DeviceQueue {
    /// The device's status as every caller shares it (see the module's header): at
    /// most [`SchedulerConfig::status_interval`] old, or computed after this call
    /// began. Use it for anything many callers ask (status endpoints, metrics, feeds).
    ///
    /// [`SchedulerConfig::status_interval`]: super::SchedulerConfig::status_interval
    pub async fn shared_status(&self) -> Arc<DeviceStatus> {
        let snapshots = &self.shared.snapshots;
        let ticket = snapshots.arrivals.fetch_add(1, Ordering::AcqRel);
        let clock = &self.shared.config.clock;
        let mut latest = snapshots.latest.lock().await;
        let now = clock.now();
        if let Some(s) = latest.as_ref()
            && (s.covers > ticket || now.saturating_sub(s.at) < self.shared.config.status_interval)
        {
            return s.status.clone();
        }
        let covers = snapshots.arrivals.load(Ordering::Acquire);
        let status = Arc::new(self.status().await);
        *latest = Some(Snapshot { at: now, covers, status: status.clone() });
        status
    }

    /// Calls of [`DeviceQueue::shared_status`] so far (answered or waiting).
    pub fn status_requests(&self) -> u64 {
        self.shared.snapshots.arrivals.load(Ordering::Acquire)
    }
}
