//! Simulated staged uploads: large uploads whose copy, as on the CUDA device's stager
//! thread, is made after the upload returns; here the test says when.
//!
//! An upload of at least [`SimBuilder::staged_uploads`](super::SimBuilder::staged_uploads)
//! bytes is held until [`Staging::release`]. Until then [`Device::ready`](crate::device::Device::ready)
//! says `false` for its buffer, and a launch reading it waits on the calling thread,
//! as the CUDA device's does. Every such question or wait is counted, so a test can
//! wait until the scheduler has met the held upload before it submits more work.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use sluice_host_api::TensorMeta;

use crate::device::{Buffer, CpuBuffer};

/// The held uploads of one simulated device, shared with the test.
pub struct Staging {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Uploads at least this large are held (0: none are).
    min_bytes: usize,
    /// Buffers whose copy is held.
    held: Vec<CpuBuffer>,
    /// Times the scheduler asked about, or waited for, a held buffer.
    met: u64,
}

/// How long [`Staging::wait_met`] waits before it declares the test stuck.
const STUCK: Duration = Duration::from_secs(60);

impl Staging {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds uploads of at least `min_bytes` (0: none).
    pub(super) fn new(min_bytes: usize) -> Staging {
        Staging { state: Mutex::new(State { min_bytes, ..State::default() }), changed: Condvar::new() }
    }

    /// Holds the copy of `buffer` if it is large enough.
    pub(super) fn uploaded(&self, buffer: &Buffer) {
        let mut s = self.lock();
        if let Buffer::Cpu(b) = buffer
            && s.min_bytes > 0
            && b.byte_len() >= s.min_bytes
        {
            s.held.push(b.clone());
        }
    }

    fn is_held(s: &State, buffer: &Buffer) -> bool {
        matches!(buffer, Buffer::Cpu(b) if s.held.iter().any(|h| h.same_storage(b)))
    }

    /// Whether `buffer`'s copy is made (counts the question when it is not).
    pub(super) fn ready(&self, buffer: &Buffer) -> bool {
        let mut s = self.lock();
        let held = Self::is_held(&s, buffer);
        if held {
            s.met += 1;
            self.changed.notify_all();
        }
        !held
    }

    /// Waits, on the launching thread, until none of a kernel's `inputs` is held
    /// (counts the wait when one is).
    pub(super) fn wait_for(&self, inputs: &[(&Buffer, &TensorMeta)]) {
        let mut s = self.lock();
        let any_held = |s: &State| inputs.iter().any(|(b, _)| Self::is_held(s, b));
        if any_held(&s) {
            s.met += 1;
            self.changed.notify_all();
        }
        while any_held(&s) {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Makes every held copy: work reading those buffers can run.
    pub fn release(&self) {
        self.lock().held.clear();
        self.changed.notify_all();
    }

    /// Uploads held now.
    pub fn held(&self) -> usize {
        self.lock().held.len()
    }

    /// Waits until the scheduler has asked about, or waited for, a held upload at
    /// least `n` times in all. Panics after a minute: the test is stuck.
    pub fn wait_met(&self, n: u64) {
        let s = self.lock();
        let (_s, timeout) = self.changed.wait_timeout_while(s, STUCK, |s| s.met < n).unwrap_or_else(|e| e.into_inner());
        assert!(!timeout.timed_out(), "the scheduler never met the held upload");
    }
}
