//! The platform's lifecycle as probes and the shutdown see it: ready once warm-up is
//! done and no start-up work holds readiness back ([`Platform::hold_readiness`], the
//! model directory's bundles); on SIGTERM first draining (not ready, requests still
//! admitted), then shutting down (new invocations refused, in-flight ones finish).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Platform;

/// Keeps the platform unready while alive ([`Platform::hold_readiness`]).
pub struct ReadinessHold(Arc<Platform>);

impl Drop for ReadinessHold {
    fn drop(&mut self) {
        self.0.readiness_holds.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Platform {
    /// True once warm-up is done and no start-up work holds readiness back, until the
    /// drain begins.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
            && self.readiness_holds.load(Ordering::Acquire) == 0
            && !self.is_shutting_down()
    }

    /// Holds readiness back until the returned guard is dropped (the start-up load of
    /// a model directory's bundles).
    pub fn hold_readiness(self: &Arc<Self>) -> ReadinessHold {
        self.readiness_holds.fetch_add(1, Ordering::AcqRel);
        ReadinessHold(self.clone())
    }

    /// Whether the drain or the shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.draining.load(Ordering::Acquire) || self.shutting_down.load(Ordering::Acquire)
    }

    /// Begins the drain (SIGTERM): readiness turns false at once; requests are still
    /// admitted until [`Platform::begin_shutdown`].
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Stops admitting new invocations (in-flight ones finish) and closes the serving
    /// functions' queues: a serving invocation finishes the requests it holds or that
    /// wait, then returns instead of idling for more.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.serving.close_all();
    }

    /// Serving invocations still running: the shutdown waits for them as for
    /// in-flight requests (an idle one returns at [`Platform::begin_shutdown`]), so none
    /// is cut off by the async runtime's end.
    pub fn serving_invocations(&self) -> usize {
        self.serving.running()
    }
}
