//! An invocation's link to its caller: the chunks a streaming function sends while it
//! runs (the WIT `streaming` interface) and whether the caller is still there.
//!
//! A streaming caller reads chunks from a channel bounded in bytes ([`chunk_channel`],
//! [`StreamRoom`]); the guest's `emit` waits while the room is full, so a slow reader
//! slows that one invocation (whose host thread waits), never the device's actor, and
//! a reader that takes nothing for the room's stall time cancels it. A one-shot caller
//! has no channel: its chunks are dropped, and the function's result from `run` is the
//! answer. The caller is gone when its channel's reader was dropped (the HTTP body of a
//! closed connection) or its [`Cancel`] flag was raised (a one-shot request whose
//! handler was dropped, or a stalled reader). From then on `caller-gone` is true, `emit`
//! and every host call that can fail return `cancelled`, and the epoch callback stops a
//! guest that computes without calling the host ([`CallerLink::gone`] is checked every
//! epoch tick).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_host_api::{ApiError, ErrorCode};
use tokio::sync::mpsc;

use super::IoTensor;
use super::stream_room::{Held, StreamCounters, StreamRoom, tensors_bytes};

/// One chunk of outputs, as the guest emitted it.
pub type Chunk = Vec<IoTensor>;

/// A chunk on its way to the client, holding its bytes in the stream's room until the
/// transport has taken it (dropped it).
#[derive(Debug)]
pub struct QueuedChunk {
    pub chunk: Chunk,
    /// Its bytes in the room; given back when dropped.
    pub held: Held,
}

impl std::ops::Deref for QueuedChunk {
    type Target = Chunk;
    fn deref(&self) -> &Chunk {
        &self.chunk
    }
}

/// The sending side of a streaming caller's channel.
#[derive(Clone, Debug)]
pub struct ChunkSink {
    tx: mpsc::UnboundedSender<QueuedChunk>,
    room: Arc<StreamRoom>,
}

impl ChunkSink {
    /// The stream's room (shared with whatever else it queues for the client).
    pub fn room(&self) -> &Arc<StreamRoom> {
        &self.room
    }
}

/// A channel for the chunks of one invocation, bounded in bytes by `room`: give the
/// sink to the invocation, read the receiver; dropping the receiver tells the
/// invocation its caller has gone.
pub fn chunk_channel(room: Arc<StreamRoom>) -> (ChunkSink, mpsc::UnboundedReceiver<QueuedChunk>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (ChunkSink { tx, room }, rx)
}

/// A room for tests and tools: 4 MiB, cancelled after 30 s without a read.
pub fn default_room() -> Arc<StreamRoom> {
    StreamRoom::new(4 << 20, Duration::from_secs(30), StreamCounters::default())
}

/// A flag raised when the caller of an invocation has gone (shared by its clones).
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// Marks the caller as gone.
    pub fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`Cancel::raise`] was called.
    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Raises a [`Cancel`] when dropped: held by whatever awaits an invocation, so that the
/// invocation learns when that future is dropped (its HTTP request went away).
pub struct CancelOnDrop(pub Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.raise();
    }
}

/// How an invocation reaches its caller: a chunk sink (streaming callers only) and a
/// cancel flag.
#[derive(Clone, Debug, Default)]
pub struct CallerLink {
    /// Where emitted chunks go; `None` for a one-shot caller.
    pub sink: Option<ChunkSink>,
    /// Raised when the caller has gone.
    pub cancel: Cancel,
}

impl CallerLink {
    /// A streaming caller's link: chunks go to `sink`.
    pub fn streaming(sink: ChunkSink, cancel: Cancel) -> Self {
        CallerLink { sink: Some(sink), cancel }
    }

    /// Whether the caller has gone: its flag is raised or its reader dropped.
    pub fn gone(&self) -> bool {
        self.cancel.is_raised() || self.sink.as_ref().is_some_and(|s| s.tx.is_closed())
    }
}

/// When an invocation emitted its chunks: enough for time to first token and time per
/// output token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkTimes {
    /// Chunks emitted.
    pub count: u64,
    /// When the first was emitted.
    pub first: Option<Instant>,
    /// When the last was emitted.
    pub last: Option<Instant>,
}

impl ChunkTimes {
    fn record(&mut self, at: Instant) {
        self.count += 1;
        self.first.get_or_insert(at);
        self.last = Some(at);
    }

    /// The mean gap between consecutive chunks after the first, if there were two or more.
    pub fn mean_gap(&self) -> Option<Duration> {
        let (first, last) = (self.first?, self.last?);
        let gaps = self.count.checked_sub(1).filter(|&n| n > 0)?;
        Some((last - first) / u32::try_from(gaps).unwrap_or(u32::MAX))
    }
}

/// The guest-side state of the link in one invocation: the link and its chunk times.
#[derive(Debug, Default)]
pub(crate) struct CallerState {
    pub(crate) link: CallerLink,
    pub(crate) chunks: ChunkTimes,
}

impl CallerState {
    pub(crate) fn new(link: CallerLink) -> Self {
        CallerState { link, chunks: ChunkTimes::default() }
    }

    /// `Err(cancelled)` once the caller has gone: the first check of every host call
    /// that can fail.
    pub(crate) fn check(&self) -> Result<(), ApiError> {
        if self.link.gone() {
            return Err(cancelled());
        }
        Ok(())
    }

    /// Sends `chunk` to a streaming caller (waiting while its room is full), or drops
    /// it for a one-shot caller. A caller that takes nothing for the room's stall time
    /// meanwhile is taken as gone: the invocation is cancelled.
    pub(crate) async fn emit(&mut self, chunk: Chunk) -> Result<(), ApiError> {
        self.check()?;
        let Some(sink) = &self.link.sink else {
            self.chunks.record(Instant::now());
            return Ok(());
        };
        let held = tokio::select! {
            held = sink.room.hold(tensors_bytes(&chunk)) => held,
            () = sink.tx.closed() => return Err(cancelled()),
        };
        let held = match held {
            Ok(held) => held,
            Err(stalled) => {
                sink.room.count_stall();
                self.link.cancel.raise();
                return Err(ApiError::new(
                    ErrorCode::Cancelled,
                    format!("the caller read nothing for {} ms: the invocation is cancelled", stalled.0.as_millis()),
                ));
            }
        };
        self.chunks.record(Instant::now());
        sink.tx.send(QueuedChunk { chunk, held }).map_err(|_| cancelled())
    }
}

fn cancelled() -> ApiError {
    ApiError::new(ErrorCode::Cancelled, "the caller has gone (closed its connection): return now")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(n: i32) -> Chunk {
        vec![IoTensor { name: "n".into(), shape: vec![1], data: crate::engine::IoData::I32(vec![n]) }]
    }

    #[tokio::test]
    async fn a_dropped_reader_cancels_the_emitter() {
        let (sink, mut rx) = chunk_channel(default_room());
        let mut state = CallerState::new(CallerLink::streaming(sink, Cancel::default()));
        state.emit(chunk(1)).await.unwrap();
        assert_eq!(rx.recv().await.map(|q| q.chunk), Some(chunk(1)));
        assert!(!state.link.gone());
        drop(rx);
        assert!(state.link.gone());
        assert_eq!(state.emit(chunk(2)).await.unwrap_err().code, ErrorCode::Cancelled);
        assert_eq!(state.check().unwrap_err().code, ErrorCode::Cancelled);
        assert_eq!(state.chunks.count, 1, "a refused chunk is not counted");
    }

    #[tokio::test]
    async fn a_one_shot_caller_drops_chunks_until_cancelled() {
        let cancel = Cancel::default();
        let mut state = CallerState::new(CallerLink { sink: None, cancel: cancel.clone() });
        state.emit(chunk(1)).await.unwrap();
        state.emit(chunk(2)).await.unwrap();
        assert_eq!(state.chunks.count, 2);
        assert!(state.chunks.mean_gap().is_some());
        drop(CancelOnDrop(cancel));
        assert!(state.link.gone());
        assert_eq!(state.emit(chunk(3)).await.unwrap_err().code, ErrorCode::Cancelled);
    }

    #[tokio::test]
    async fn a_reader_that_takes_nothing_cancels_the_emitter_once_its_room_is_full() {
        let counters = StreamCounters::default();
        let each = crate::engine::stream_room::ITEM_OVERHEAD + tensors_bytes(&chunk(1));
        let room = StreamRoom::new(2 * each, Duration::from_millis(50), counters.clone());
        let (sink, _rx) = chunk_channel(room.clone());
        let cancel = Cancel::default();
        let mut state = CallerState::new(CallerLink::streaming(sink, cancel.clone()));
        state.emit(chunk(1)).await.unwrap();
        state.emit(chunk(2)).await.unwrap();
        let e = state.emit(chunk(3)).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Cancelled);
        assert!(cancel.is_raised() && state.link.gone(), "the invocation is cancelled");
        assert_eq!(room.queued(), counters.peak.load(Ordering::Acquire), "no more than the two that fit");
        assert_eq!(counters.stalls.load(Ordering::Acquire), 1);
        assert_eq!(state.chunks.count, 2, "the refused chunk is not counted");
    }

    #[test]
    fn mean_gap_needs_two_chunks() {
        let t0 = Instant::now();
        let mut times = ChunkTimes::default();
        assert_eq!(times.mean_gap(), None);
        times.record(t0);
        assert_eq!(times.mean_gap(), None);
        times.record(t0 + Duration::from_millis(10));
        times.record(t0 + Duration::from_millis(30));
        assert_eq!(times.mean_gap(), Some(Duration::from_millis(15)));
    }
}
