//! The live feed of one device for the web console: `GET /v1/devices/{index}/live`,
//! server-sent events (any key; what it shows depends on the key, see
//! [`crate::platform::LiveStatus`]).
//!
//! Events: `status` at once and every [`STATUS_EVERY`] (a [`LiveStatus`] snapshot), and
//! `kernels` every [`KERNELS_EVERY`] while the device ran something (a [`LiveKernels`]
//! batch: the records since the last one). While a feed is open the device records
//! its kernels; the feed pulls them, so the scheduler never waits for a watcher. Each
//! feed buffers at most [`BUFFERED_EVENTS`] events for its client: a client that falls
//! that far behind is disconnected, and may reconnect. A feed whose key is revoked ends
//! with an `error` event (`{"code": "unauthorized", ...}`). A tenant may have
//! [`crate::platform::WatchLimits::live_feeds_per_tenant`] feeds open at once (429
//! `live_feed_limit` beyond); its feed counts until its pump ends.
//!
//! [`LiveStatus`]: crate::platform::LiveStatus
//! [`LiveKernels`]: crate::platform::LiveKernels

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use sluice_host_api::Code;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use super::auth::StreamCaller;
use super::error::HttpError;
use crate::platform::{KeyCheck, Platform};

/// How often new kernel records are sent.
pub const KERNELS_EVERY: Duration = Duration::from_millis(100);

/// How often a status snapshot is sent.
pub const STATUS_EVERY: Duration = Duration::from_secs(1);

/// Events a feed holds for a client that has not read them yet (about 3 s of
/// batches); a client further behind is dropped.
pub const BUFFERED_EVENTS: usize = 32;

/// `GET /v1/devices/{index}/live`.
pub async fn feed(
    State(platform): State<Arc<Platform>>,
    StreamCaller(key): StreamCaller,
    Path(index): Path<usize>,
) -> Result<Sse<impl tokio_stream::Stream<Item = Result<Event, Infallible>>>, HttpError> {
    let Some(queue) = platform.device_queue(index) else {
        let count = platform.devices_count();
        return Err(HttpError::new(Code::NotFound, format!("no device {index}: this server has {count} (from 0)")));
    };
    let permit = platform.open_live_feed(key.principal())?;
    let watch = queue.watch_kernels();
    let (tx, rx) = mpsc::channel(BUFFERED_EVENTS);
    tokio::spawn(async move {
        let (_watch, _permit) = (watch, permit);
        pump(&platform, key, index, &tx).await;
    });
    Ok(Sse::new(ReceiverStream::new(rx).map(Ok)).keep_alive(KeepAlive::default()))
}

/// Sends a feed's events until its client is gone or too far behind, or its key revoked.
async fn pump(platform: &Platform, mut key: KeyCheck, index: usize, tx: &mpsc::Sender<Event>) {
    let viewer = key.principal().clone();
    let mut tick = tokio::time::interval(KERNELS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let status_every = (STATUS_EVERY.as_millis() / KERNELS_EVERY.as_millis()).max(1) as u64;
    let (mut since, mut ticks) = (0, 0u64);
    loop {
        // A client gone ends the feed (and its count) at once, not at the next event.
        tokio::select! {
            _ = tick.tick() => {}
            () = tx.closed() => return,
        }
        if !platform.still_valid(&mut key) {
            let revoked =
                serde_json::json!({ "code": Code::Unauthorized.as_str(), "error": "the API key was revoked" });
            send(tx, event("error", &revoked));
            return;
        }
        if ticks.is_multiple_of(status_every) {
            let Some(status) = platform.live_status(&viewer, index).await else { return };
            if !send(tx, event("status", &status)) {
                return;
            }
        }
        ticks += 1;
        let Some((batch, next)) = platform.live_kernels(&viewer, index, since).await else { return };
        since = next;
        if (!batch.records.is_empty() || batch.missed > 0) && !send(tx, event("kernels", &batch)) {
            return;
        }
    }
}

fn event(name: &str, data: &impl serde::Serialize) -> Event {
    Event::default().event(name).json_data(data).unwrap_or_else(|e| Event::default().event("error").data(e.to_string()))
}

/// Queues an event for the client; false once the client is gone or too far behind.
fn send(tx: &mpsc::Sender<Event>, event: Event) -> bool {
    match tx.try_send(event) {
        Ok(()) => true,
        Err(TrySendError::Full(_)) => {
            tracing::info!(buffered = BUFFERED_EVENTS, "a live feed's client fell behind; disconnecting it");
            false
        }
        Err(TrySendError::Closed(_)) => false,
    }
}
