//! The scheduler's clock: every time the scheduler measures (device time charged to
//! tenants, the cost model's durations, the latency hold, preemption latency, the
//! windows of work in flight) is read from a [`Clock`].
//!
//! By default it is the monotonic clock. A simulated clock only moves when told
//! ([`Clock::advance`], [`Clock::advance_to`]): the simulated device
//! ([`crate::device::sim`]) moves it by the time its kernels take, so a test sees the
//! same times, and the same scheduling decisions, on an idle and on a saturated
//! machine (as `tokio::time::pause()` does for async tests).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};

/// A source of time, shared by the scheduler and whoever drives it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Clock(Arc<Source>);

#[derive(Debug)]
enum Source {
    /// Time since the clock was made.
    Monotonic(Instant),
    /// Nanoseconds since the clock was made, moved by hand.
    Simulated(AtomicU64),
}

impl Clock {
    /// The monotonic clock of the machine.
    pub fn monotonic() -> Clock {
        Clock(Arc::new(Source::Monotonic(Instant::now())))
    }

    /// A simulated clock at zero, which moves only when advanced.
    pub fn simulated() -> Clock {
        Clock(Arc::new(Source::Simulated(AtomicU64::new(0))))
    }

    /// Whether this is a simulated clock.
    pub fn is_simulated(&self) -> bool {
        matches!(*self.0, Source::Simulated(_))
    }

    /// The time since the clock's start.
    pub fn now(&self) -> Duration {
        match &*self.0 {
            Source::Monotonic(start) => start.elapsed(),
            Source::Simulated(ns) => Duration::from_nanos(ns.load(Ordering::Acquire)),
        }
    }

    /// Moves a simulated clock forward by `by`. A monotonic clock moves by itself:
    /// this does nothing to it.
    pub fn advance(&self, by: Duration) {
        if let Source::Simulated(ns) = &*self.0 {
            ns.fetch_add(by.as_nanos() as u64, Ordering::AcqRel);
        }
    }

    /// Moves a simulated clock forward to `to`, if it is not past it already.
    pub fn advance_to(&self, to: Duration) {
        if let Source::Simulated(ns) = &*self.0 {
            ns.fetch_max(to.as_nanos() as u64, Ordering::AcqRel);
        }
    }

    /// The next message of `rx`, waiting at most `timeout` of this clock's time. On a
    /// simulated clock the wait takes no real time: with nothing there, the clock
    /// moves `timeout` ahead and the answer is `None`.
    pub(crate) fn recv_timeout<T>(&self, rx: &Receiver<T>, timeout: Duration) -> Option<T> {
        match &*self.0 {
            Source::Monotonic(_) => rx.recv_timeout(timeout).ok(),
            Source::Simulated(_) => match rx.try_recv() {
                Ok(m) => Some(m),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                    self.advance(timeout);
                    std::thread::yield_now();
                    None
                }
            },
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::monotonic()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simulated_clock_moves_only_when_told() {
        let clock = Clock::simulated();
        assert_eq!(clock.now(), Duration::ZERO);
        clock.advance(Duration::from_millis(3));
        clock.advance_to(Duration::from_millis(2));
        assert_eq!(clock.now(), Duration::from_millis(3), "never backwards");
        let (_tx, rx) = crossbeam_channel::unbounded::<()>();
        assert!(clock.recv_timeout(&rx, Duration::from_micros(20)).is_none());
        assert_eq!(clock.now(), Duration::from_micros(3020), "waiting took simulated time");
        let shared = clock.clone();
        shared.advance(Duration::from_micros(980));
        assert_eq!(clock.now(), Duration::from_millis(4));
        assert!(!Clock::default().is_simulated());
    }
}
