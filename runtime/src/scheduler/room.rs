//! Backpressure on one invocation: [`QueueRoom`] bounds the work items an invocation
//! may have waiting on its device at once.
//!
//! The engine waits for room before it submits an upload or a launch, and the device
//! actor gives room back as it takes the invocation's items off its queue. So a guest
//! that launches faster than the device runs waits itself, alone, instead of growing
//! a queue (and an intake channel) that every other tenant's work then waits behind.

use tokio::sync::Semaphore;

/// Room for an invocation's queued work: at most `limit` items wait at once.
#[derive(Debug)]
pub struct QueueRoom {
    free: Semaphore,
    limit: usize,
}

impl QueueRoom {
    /// Room for `limit` queued items (at least one).
    pub(crate) fn new(limit: usize) -> QueueRoom {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        QueueRoom { free: Semaphore::new(limit), limit }
    }

    /// Waits until the invocation has fewer than `limit` items queued, and takes a
    /// place for one more.
    pub async fn wait(&self) {
        // The semaphore is never closed, so acquiring cannot fail.
        if let Ok(permit) = self.free.acquire().await {
            permit.forget();
        }
    }

    /// Gives back the place of an item that left the queue.
    pub(crate) fn release(&self) {
        if self.queued() > 0 {
            self.free.add_permits(1);
        }
    }

    /// Items queued now (places taken).
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
        room.release();
        assert!(third.as_mut().poll(&mut cx).is_ready(), "an item left");
        assert_eq!(room.queued(), 2);
        room.release();
        room.release();
        room.release();
        assert_eq!(room.queued(), 0, "releasing more than was taken gives nothing extra");
    }
}
