//! A streamed invocation over HTTP: the invocation runs in a task of its own, and its
//! chunks, then its result, come out of one bounded channel of [`StreamEvent`]s in the
//! order they happened.
//!
//! [`start`] waits for the first event before the handler answers, so a request that
//! fails before any output (an unknown function, bad inputs, a function that does not
//! follow the contract) still gets its 4xx JSON error instead of an event stream.
//! Backpressure runs from the client to the guest: a client that reads slowly fills
//! this channel, then the invocation's chunk channel, and the guest's `emit` waits (its
//! own host thread, never the device's actor). When the client goes, the response body
//! and its receiver are dropped; the forwarding task notices (a failed send, or
//! `closed` while it waits for a chunk), drops the chunk receiver, and the invocation
//! sees its caller gone ([`crate::engine::CallerLink::gone`]) and ends, freeing its
//! device memory.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::engine::{Chunk, chunk_channel};
use crate::oip::{self, InferRequest, InferResponse};
use crate::platform::{Platform, PlatformError};

/// Events a client may leave unread before the invocation's chunks queue up behind them.
const EVENTS_BUFFERED: usize = 4;

/// What a streamed invocation produced, in order: chunks, then one result.
#[derive(Debug)]
pub enum StreamEvent {
    /// A chunk the function emitted.
    Chunk(Chunk),
    /// The invocation's result; the last event.
    Done(Box<Result<InferResponse, PlatformError>>),
}

/// Starts `request` on `tenant/name` with its chunks streamed; returns the first event
/// (once it happened) and the receiver of the rest.
pub async fn start(
    platform: &Arc<Platform>,
    tenant: &str,
    name: &str,
    version: Option<u32>,
    request: InferRequest,
) -> (StreamEvent, mpsc::Receiver<StreamEvent>) {
    let (events, mut rx) = mpsc::channel(EVENTS_BUFFERED);
    let (platform, tenant, name) = (platform.clone(), tenant.to_owned(), name.to_owned());
    tokio::spawn(async move {
        let (sink, chunks) = chunk_channel();
        let invocation = oip::infer_streaming(&platform, &tenant, &name, version, request, Some(&sink));
        forward(invocation, chunks, events).await;
    });
    let first = rx.recv().await.unwrap_or_else(|| {
        let e = PlatformError::Internal("a streamed invocation ended without a result".into());
        StreamEvent::Done(Box::new(Err(e)))
    });
    (first, rx)
}

/// The next chunk; never, once the receiver is dropped.
async fn next_chunk(chunks: &mut Option<mpsc::Receiver<Chunk>>) -> Option<Chunk> {
    match chunks.as_mut() {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Drives `invocation` to its end while forwarding its chunks to `events`, then sends
/// its result. Stops forwarding (and drops `chunks`, which cancels the invocation) when
/// the receiver of `events` is gone.
async fn forward(
    invocation: impl Future<Output = Result<InferResponse, PlatformError>>,
    chunks: mpsc::Receiver<Chunk>,
    events: mpsc::Sender<StreamEvent>,
) {
    let mut invocation = std::pin::pin!(invocation);
    let mut chunks = Some(chunks);
    loop {
        tokio::select! {
            biased;
            Some(chunk) = next_chunk(&mut chunks) => {
                if events.send(StreamEvent::Chunk(chunk)).await.is_err() {
                    chunks = None;
                }
            }
            () = events.closed(), if chunks.is_some() => chunks = None,
            result = &mut invocation => {
                // Every chunk was sent before the function returned: pass them on first.
                while let Some(chunk) = chunks.as_mut().and_then(|rx| rx.try_recv().ok()) {
                    if events.send(StreamEvent::Chunk(chunk)).await.is_err() {
                        return;
                    }
                }
                let _ = events.send(StreamEvent::Done(Box::new(result))).await;
                return;
            }
        }
    }
}
