//! Freed tensors, released a few at a time.
//!
//! An invocation that ends holding thousands of tensors (a guest that never drops its
//! handles, or one that builds a large graph) frees them all at once: thousands of
//! `Free` commands arrive together. Released in the intake, in arrival order, they held
//! up every command behind them; on two cores, beside a tenant flooding the device so,
//! another tenant's read waited 0.5–1.5 ms behind each such burst. So the intake only
//! notes them, and the actor releases at most [`FREES_PER_STEP`] before each step, all
//! of them when it goes idle, and all of them before it reports its status (which then
//! counts what was freed before it was asked).
//!
//! Between steps, an upload still being copied to the device is held back until its
//! copy is queued (dropping its buffer would wait for the copy); going idle and
//! reporting status release everything.
//!
//! Releasing later changes no account: a tenant's quota and the device's memory
//! account were given back when the handle was dropped ([`crate::scheduler::TensorLease`]);
//! only the buffer lives a few steps longer, and no command can name a freed tensor.

use std::collections::VecDeque;

use super::Actor;
use crate::scheduler::TensorId;
use crate::scheduler::tensors::TensorState;

/// Freed tensors released before each step, at most: a fraction of a millisecond of
/// work on a busy core, while a burst of thousands still clears in a few dozen steps.
pub(super) const FREES_PER_STEP: usize = 128;

/// Pending frees kept room for after a burst (512 KiB of ids).
const KEEP_CAPACITY: usize = 1 << 16;

/// Tensors whose last handle is gone, in the order they were freed.
#[derive(Debug, Default)]
pub(super) struct PendingFrees(VecDeque<TensorId>);

impl PendingFrees {
    pub fn push(&mut self, id: TensorId) {
        self.0.push_back(id);
    }

    pub fn extend(&mut self, ids: Vec<TensorId>) {
        self.0.extend(ids);
    }

    /// How many wait to be released.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Gives back the memory of an exceptional burst (the usual ones stay allocated:
    /// a few hundred KiB that would only be allocated again).
    fn shrink_after_burst(&mut self) {
        if self.0.is_empty() && self.0.capacity() > KEEP_CAPACITY {
            self.0.shrink_to(KEEP_CAPACITY);
        }
    }

    /// Takes up to `n`, oldest first.
    fn take(&mut self, n: usize) -> impl Iterator<Item = TensorId> + '_ {
        let n = n.min(self.0.len());
        self.0.drain(..n)
    }
}

impl Actor {
    /// Releases up to [`FREES_PER_STEP`] freed tensors (those no queued kernel still
    /// reads; the rest go when their last reader has run).
    ///
    /// An upload the device is still copying
    /// ([`Device::ready`](crate::device::Device::ready)) is put back: dropping its
    /// buffer now would wait for the copy on this thread.
    pub(super) fn release_some_freed(&mut self) {
        let mut copying = Vec::new();
        for id in self.frees.take(FREES_PER_STEP) {
            match self.tensors.state(id) {
                Some(TensorState::Ready(buffer)) if !self.device.ready(buffer) => copying.push(id),
                _ => self.tensors.free(id),
            }
        }
        self.frees.extend(copying);
    }

    /// Releases every freed tensor.
    pub(super) fn release_all_freed(&mut self) {
        let n = self.frees.len();
        for id in self.frees.take(n) {
            self.tensors.free(id);
        }
        self.frees.shrink_after_burst();
    }
}
