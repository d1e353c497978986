//! A streamed invocation over HTTP (and gRPC): the invocation runs in a task of its own,
//! and its chunks, then its result, come out of one channel of [`StreamEvent`]s in the
//! order they happened.
//!
//! [`start`] waits for the first event before the handler answers, so a request that
//! fails before any output (an unknown function, bad inputs, a function that does not
//! follow the contract) still gets its 4xx JSON error instead of an event stream.
//! What is queued for the client is bounded in bytes by the stream's room
//! ([`crate::engine::StreamRoom`], the tenant's
//! [`crate::platform::HostMemoryLimits::stream_buffer_bytes`]): every event holds its
//! bytes until the transport takes it, so backpressure runs from the client to the
//! guest, whose `emit` waits (its own host thread, never the device's actor); a client
//! that takes nothing for the stall time while the guest waits cancels the invocation,
//! and a final response that finds no room in that time is dropped (the stream ends).
//! When the client goes, the response body and its receiver are dropped; the
//! forwarding task notices (a failed send, or `closed` while it waits for a chunk),
//! drops the chunk receiver, and the invocation sees its caller gone
//! ([`crate::engine::CallerLink::gone`]) and ends, freeing its device memory.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::engine::{Held, QueuedChunk, StreamRoom, chunk_channel, tensors_bytes};
use crate::oip::{self, InferRequest, InferResponse};
use crate::platform::{Platform, PlatformError};

/// What a streamed invocation produced, in order: chunks, then one result.
#[derive(Debug)]
pub enum StreamEvent {
    /// A chunk the function emitted, holding its bytes until dropped.
    Chunk(QueuedChunk),
    /// The invocation's result; the last event, holding its bytes until dropped (`None`
    /// only for a result that never went through the room).
    Done(Box<Result<InferResponse, PlatformError>>, Option<Held>),
}

/// Starts `request` on `tenant/name` with its chunks streamed; returns the first event
/// (once it happened) and the receiver of the rest.
pub async fn start(
    platform: &Arc<Platform>,
    tenant: &str,
    name: &str,
    version: Option<u32>,
    request: InferRequest,
) -> (StreamEvent, mpsc::UnboundedReceiver<StreamEvent>) {
    let (events, mut rx) = mpsc::unbounded_channel();
    let room = platform.stream_room(tenant);
    let (platform, tenant, name) = (platform.clone(), tenant.to_owned(), name.to_owned());
    tokio::spawn(async move {
        let (sink, chunks) = chunk_channel(room.clone());
        let invocation = oip::infer_streaming(&platform, &tenant, &name, version, request, Some(&sink));
        forward(invocation, chunks, events, room).await;
    });
    let first = rx.recv().await.unwrap_or_else(|| {
        let e = PlatformError::Internal("a streamed invocation ended without a result".into());
        StreamEvent::Done(Box::new(Err(e)), None)
    });
    (first, rx)
}

/// The next chunk; never, once the receiver is dropped.
async fn next_chunk(chunks: &mut Option<mpsc::UnboundedReceiver<QueuedChunk>>) -> Option<QueuedChunk> {
    match chunks.as_mut() {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Drives `invocation` to its end while forwarding its chunks to `events`, then sends
/// its result (once it has room). Stops forwarding (and drops `chunks`, which cancels
/// the invocation) when the receiver of `events` is gone.
async fn forward(
    invocation: impl Future<Output = Result<InferResponse, PlatformError>>,
    chunks: mpsc::UnboundedReceiver<QueuedChunk>,
    events: mpsc::UnboundedSender<StreamEvent>,
    room: Arc<StreamRoom>,
) {
    let mut invocation = std::pin::pin!(invocation);
    let mut chunks = Some(chunks);
    loop {
        tokio::select! {
            biased;
            Some(chunk) = next_chunk(&mut chunks) => {
                if events.send(StreamEvent::Chunk(chunk)).is_err() {
                    chunks = None;
                }
            }
            () = events.closed(), if chunks.is_some() => chunks = None,
            result = &mut invocation => {
                // Every chunk was sent before the function returned: pass them on first.
                while let Some(chunk) = chunks.as_mut().and_then(|rx| rx.try_recv().ok()) {
                    if events.send(StreamEvent::Chunk(chunk)).is_err() {
                        return;
                    }
                }
                let bytes = result.as_ref().map_or(0, |r| tensors_bytes(r.outputs.iter().map(|(t, _)| t)));
                let held = tokio::select! {
                    held = room.hold(bytes) => match held {
                        Ok(held) => held,
                        Err(_) => return,
                    },
                    () = events.closed() => return,
                };
                let _ = events.send(StreamEvent::Done(Box::new(result), Some(held)));
                return;
            }
        }
    }
}
