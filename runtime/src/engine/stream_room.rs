//! A streamed invocation's room towards its client, in bytes: what it emitted and the
//! client has not taken yet (its chunks, then its final response) may not pass
//! [`StreamRoom`]'s bound. Each queued item holds its bytes ([`Held`]) until the
//! transport takes it for the connection; the guest's `emit` waits while the room is
//! full (backpressure on that guest alone, on its own host thread), and when the client
//! has taken nothing for the room's stall time while the guest waits, the wait fails
//! ([`Stalled`]) and the invocation is cancelled.
//!
//! Every item counts at least [`ITEM_OVERHEAD`] bytes, so the number of queued items is
//! bounded too. The bytes are also counted in the tenant's gauge of queued stream bytes
//! and in the server's largest queue ([`StreamCounters`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{IoData, IoTensor};

/// Bytes an item counts besides its tensors' elements (its names, shapes, framing).
pub const ITEM_OVERHEAD: u64 = 64;

/// Where a room's bytes are also counted.
#[derive(Clone, Debug, Default)]
pub struct StreamCounters {
    /// The tenant's bytes queued now, over all its streams.
    pub tenant_queued: Arc<AtomicU64>,
    /// The most bytes any one stream had queued at once.
    pub peak: Arc<AtomicU64>,
    /// Streams whose invocation was cancelled because the client stopped reading
    /// ([`StreamRoom::count_stall`]).
    pub stalls: Arc<AtomicU64>,
}

/// One stream's room (see the module's header).
#[derive(Debug)]
pub struct StreamRoom {
    permits: Arc<Semaphore>,
    /// The bound, in bytes (and permits).
    bound: u32,
    stall: Duration,
    queued: AtomicU64,
    /// When the client last took an item (or the stream began).
    last_taken: Mutex<Instant>,
    counters: StreamCounters,
}

/// The client took nothing for the room's stall time while the stream was full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stalled(pub Duration);

/// An item's bytes in its room, given back when it is dropped (the transport took it).
#[derive(Debug)]
pub struct Held {
    bytes: u64,
    _permit: OwnedSemaphorePermit,
    room: Arc<StreamRoom>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.room.queued.fetch_sub(self.bytes, Ordering::AcqRel);
        self.room.counters.tenant_queued.fetch_sub(self.bytes, Ordering::AcqRel);
        *self.room.last_taken.lock() = Instant::now();
    }
}

impl StreamRoom {
    /// A room of `bound_bytes` (at most 4 GiB) whose waits fail after the client took
    /// nothing for `stall`.
    pub fn new(bound_bytes: u64, stall: Duration, counters: StreamCounters) -> Arc<StreamRoom> {
        let bound = u32::try_from(bound_bytes.max(1)).unwrap_or(u32::MAX);
        Arc::new(StreamRoom {
            permits: Arc::new(Semaphore::new(bound as usize)),
            bound,
            stall,
            queued: AtomicU64::new(0),
            last_taken: Mutex::new(Instant::now()),
            counters,
        })
    }

    /// Counts a stream whose invocation was cancelled because its client stalled.
    pub fn count_stall(&self) {
        self.counters.stalls.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes queued now.
    pub fn queued(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// Waits for room for an item of `bytes` (one larger than the bound waits for an
    /// empty room), or fails once the client has taken nothing for the stall time
    /// during the wait.
    pub async fn hold(self: &Arc<Self>, bytes: u64) -> Result<Held, Stalled> {
        let bytes = bytes.saturating_add(ITEM_OVERHEAD);
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX).min(self.bound);
        let acquire = self.permits.clone().acquire_many_owned(permits);
        let mut acquire = std::pin::pin!(acquire);
        // The client is stalled when it took nothing for the stall time while this waits
        // (a guest that was slow to emit has not made it so).
        let started = Instant::now();
        let permit = loop {
            let deadline = (*self.last_taken.lock()).max(started) + self.stall;
            tokio::select! {
                biased;
                permit = &mut acquire => break permit.expect("the room's semaphore is never closed"),
                () = tokio::time::sleep_until(deadline) => {
                    if (*self.last_taken.lock()).max(started) + self.stall <= Instant::now() {
                        return Err(Stalled(self.stall));
                    }
                }
            }
        };
        let queued = self.queued.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.counters.tenant_queued.fetch_add(bytes, Ordering::AcqRel);
        self.counters.peak.fetch_max(queued, Ordering::AcqRel);
        Ok(Held { bytes, _permit: permit, room: self.clone() })
    }
}

/// Bytes of a chunk's (or a response's) tensors: their elements and names.
pub fn tensors_bytes<'a>(tensors: impl IntoIterator<Item = &'a IoTensor>) -> u64 {
    tensors
        .into_iter()
        .map(|t| {
            let elements = match &t.data {
                IoData::F32(v) => v.len() * 4,
                IoData::F16(v) | IoData::Bf16(v) => v.len() * 2,
                IoData::I32(v) => v.len() * 4,
                IoData::I64(v) => v.len() * 8,
                IoData::U8(v) => v.len(),
                IoData::Bytes(v) => v.iter().map(|b| b.len() + 24).sum(),
            };
            (elements + t.name.len() + 8 * t.shape.len()) as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_room_waits_for_the_client_and_fails_when_it_reads_nothing() {
        let counters = StreamCounters::default();
        let room = StreamRoom::new(3 * ITEM_OVERHEAD, Duration::from_secs(600), counters.clone());
        let (a, b, c) = (room.hold(0).await.unwrap(), room.hold(0).await.unwrap(), room.hold(0).await.unwrap());
        assert_eq!((room.queued(), counters.tenant_queued.load(Ordering::Acquire)), (192, 192));
        // Full: the next waits until the client takes one.
        let waiting = tokio::spawn({
            let room = room.clone();
            async move { room.hold(0).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the room is full");
        drop(a);
        let d = waiting.await.unwrap().expect("room after the client took one");
        assert_eq!(counters.peak.load(Ordering::Acquire), 192, "never more than the bound");
        drop((b, c, d));
        assert_eq!((room.queued(), counters.tenant_queued.load(Ordering::Acquire)), (0, 0));

        // A client that takes nothing: once full, the wait fails after the stall time.
        let stalled = StreamRoom::new(ITEM_OVERHEAD, Duration::from_millis(50), counters.clone());
        let _held = stalled.hold(0).await.unwrap();
        assert_eq!(stalled.hold(0).await.unwrap_err(), Stalled(Duration::from_millis(50)));
    }
}
