//! Backpressure on one invocation: [`QueueRoom`] bounds the work items an invocation
//! may have waiting on its device at once.
//!
//! The engine waits for room before it submits an upload or a launch, and the device
//! actor gives room back as it takes the invocation's items off its queue. So a guest
//! that launches faster than the device runs waits itself, alone, instead of growing
//! a queue (and an intake channel) that every other tenant's work then waits behind.
//!
//! Places come back in batches of [`QueueRoom::batch`] (or all at once when the
//! invocation's queue runs empty): a guest that keeps its queue full then wakes once
//! per batch instead of once per item. Waking it is a system call on the device's
//! thread; per item, it cost that thread 6 % of a SmolLM2 decode step's time.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;

/// Room for an invocation's queued work: at most `limit` items wait at once.
#[derive(Debug)]
pub struct QueueRoom {
    free: Semaphore,
    limit: usize,
    /// Places of items that left the queue, not yet given back (the actor's alone).
    held: AtomicUsize,
}

impl QueueRoom {
    /// Room for `limit` queued items (at least one).
    pub(crate) fn new(limit: usize) -> QueueRoom {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        QueueRoom { free: Semaphore::new(limit), limit, held: AtomicUsize::new(0) }
    }

    /// Places given back at once: an eighth of the room (at least one).
    pub fn batch(&self) -> usize {
        (self.limit / 8).max(1)
    }

    /// Waits until the invocation has fewer than `limit` items queued, and takes a
    /// place for one more.
    pub async fn wait(&self) {
        // The semaphore is never closed, so acquiring cannot fail.
        if let Ok(permit) = self.free.acquire().await {
            permit.forget();
        }
    }

    /// Gives back the place of an item that left the queue: with the places held
    /// before it, once they make a [`QueueRoom::batch`] or `queue_empty` (nothing of
    /// the invocation is left queued, so no later item would give them back).
    pub(crate) fn release(&self, queue_empty: bool) {
        if self.queued() == 0 {
            return;
        }
        let held = self.held.fetch_add(1, Ordering::Relaxed) + 1;
        if held >= self.batch() || queue_empty {
            let held = self.held.swap(0, Ordering::Relaxed);
            self.free.add_permits(held.min(self.queued()));
        }
    }

    /// Items queued now (places taken, held ones included).
    pub fn queued(&self) -> usize {
        self.limit - self.free.available_permits()
    }

    /// The most items that may be queued at once.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_room_waits_until_an_item_leaves() {
        let room = QueueRoom::new(2);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(room.wait());
        rt.block_on(room.wait());
        assert_eq!(room.queued(), 2);
        let mut third = Box::pin(room.wait());
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(third.as_mut().poll(&mut cx).is_pending(), "the room is full");
        room.release(true);
        assert!(third.as_mut().poll(&mut cx).is_ready(), "an item left");
        assert_eq!(room.queued(), 2);
        room.release(false);
        room.release(true);
        room.release(true);
        assert_eq!(room.queued(), 0, "releasing more than was taken gives nothing extra");
    }

    #[test]
    fn places_come_back_a_batch_at_a_time_or_when_the_queue_runs_empty() {
        let room = QueueRoom::new(32);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for _ in 0..32 {
            rt.block_on(room.wait());
        }
        assert_eq!(room.batch(), 4);
        let mut next = Box::pin(room.wait());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        for _ in 0..3 {
            room.release(false);
            assert!(next.as_mut().poll(&mut cx).is_pending(), "held until a batch left");
        }
        room.release(false);
        assert!(next.as_mut().poll(&mut cx).is_ready(), "a batch left");
        assert_eq!(room.queued(), 29);
        room.release(false);
        room.release(true);
        assert_eq!(room.queued(), 27, "an emptied queue gives back what was held");
    }
}
