//! A gate the test holds: launches of the simulated device pass it one by one, as the
//! test allows, so "latency work arrives while the device runs best-effort kernel N"
//! happens at exactly that kernel, on any machine.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Open (every launch passes), or closed with a number of launches still allowed.
#[derive(Default)]
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    /// Launches that may still pass; `None`: the gate is open.
    allowed: Option<u64>,
    /// Launches waiting at the gate now.
    waiting: usize,
    /// Launches that passed so far.
    passed: u64,
}

/// How long [`Gate::wait_blocked`] waits before it declares the test stuck.
const STUCK: Duration = Duration::from_secs(60);

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets every launch through from now on.
    pub fn open(&self) {
        self.lock().allowed = None;
        self.changed.notify_all();
    }

    /// Holds every launch from now on (until [`Gate::allow`] or [`Gate::open`]).
    pub fn close(&self) {
        self.lock().allowed = Some(0);
        self.changed.notify_all();
    }

    /// Lets `n` more launches through a closed gate.
    pub fn allow(&self, n: u64) {
        let mut s = self.lock();
        if let Some(allowed) = &mut s.allowed {
            *allowed += n;
        }
        drop(s);
        self.changed.notify_all();
    }

    /// Launches that passed the gate so far.
    pub fn passed(&self) -> u64 {
        self.lock().passed
    }

    /// Waits until a launch is held at the gate (the device thread is inside it, with
    /// every launch allowed before it done). Panics after a minute: the test is stuck.
    pub fn wait_blocked(&self) {
        let s = self.lock();
        let (_s, timeout) = self
            .changed
            .wait_timeout_while(s, STUCK, |s| !(s.waiting > 0 && s.allowed == Some(0)))
            .unwrap_or_else(|e| e.into_inner());
        assert!(!timeout.timed_out(), "no launch reached the gate within {STUCK:?}");
    }

    /// Called by the device before each launch: waits until the gate lets it through.
    pub(super) fn pass(&self) {
        let mut s = self.lock();
        s.waiting += 1;
        self.changed.notify_all();
        while s.allowed == Some(0) {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.waiting -= 1;
        s.passed += 1;
        if let Some(allowed) = &mut s.allowed {
            *allowed -= 1;
        }
        drop(s);
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_closed_gate_lets_through_what_it_allows() {
        let gate = Arc::new(Gate::default());
        gate.close();
        gate.allow(2);
        let device = {
            let gate = gate.clone();
            std::thread::spawn(move || (0..3).for_each(|_| gate.pass()))
        };
        gate.wait_blocked();
        assert_eq!(gate.passed(), 2, "two allowed, the third held");
        gate.open();
        device.join().unwrap();
        assert_eq!(gate.passed(), 3);
    }
}
