//! `PUT /v1/functions/{name}/artifacts/{artifact}`: an artifact upload, streamed to disk.
//!
//! The body is read asynchronously; only complete pieces (up to [`FLUSH_BYTES`], or
//! the rest at the end) go to the background pool (the idle class) to be hashed and
//! written, so a client that trickles its bytes holds no blocking thread, and no lock
//! (see `platform::uploads`). Before a byte is read, the tenant's upload slots
//! (429 `too_many_uploads`), the declared size (413) and its disk quota
//! (429 `disk_quota_exceeded`) are checked. While it is read, the body must bring at
//! least `upload_min_bytes_per_s` over every `upload_read_timeout` window, else it is
//! cut off (408 `upload_stalled`); it is cut off too when it grows past the size limit
//! or the disk quota. A refused upload leaves nothing: its temporary file is removed.
//! A refusal before the end of the body (or before any of it: no upload slot, over the
//! disk quota) says `Connection: close`, since the rest of the body is never kept.
//! What the client has already sent is read and dropped first
//! (at most [`DISCARD_BYTES`], for at most [`DISCARD_TIME`]): a socket closed with
//! unread bytes is reset, and a client still writing its body could then lose the
//! refusal (a `disk.rs` test saw "broken pipe" instead of its 429, once in four runs
//! on two cores).

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use sluice_host_api::Code;
use tokio::time::Instant;

use super::BodyLimits;
use super::auth::TenantCaller;
use super::error::{HttpError, blocking};
use super::functions::created;
use crate::platform::{ArtifactUpload, Platform};

/// Bytes gathered on the async side before they are written on the background pool.
pub const FLUSH_BYTES: usize = 1 << 20;

/// After a refusal in the middle of a body, at most this much more of it is read and
/// dropped before the response.
pub const DISCARD_BYTES: u64 = 1 << 20;

/// ... and for at most this long.
pub const DISCARD_TIME: Duration = Duration::from_secs(1);

pub async fn put_artifact(
    State(platform): State<Arc<Platform>>,
    Extension(limits): Extension<BodyLimits>,
    TenantCaller(tenant): TenantCaller,
    Path((name, artifact)): Path<(String, String)>,
    headers: HeaderMap,
    mut body: Body,
) -> Response {
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.artifact_bytes) {
        return closing(HttpError::too_large(limits.artifact_bytes as usize));
    }
    let p = platform.clone();
    let upload = match blocking(move || p.begin_upload(&tenant, &name, &artifact, declared)).await {
        Ok(upload) => upload,
        // Refused before the body (no upload slot, over the disk quota, …).
        Err(e) => return refused(&mut body, e.into()).await,
    };
    let upload = match receive(upload, &mut body, declared, &limits).await {
        Ok(upload) => upload,
        Err(e) => return refused(&mut body, e).await,
    };
    match blocking(move || platform.finish_upload(upload)).await {
        Ok(version) => created(&version),
        Err(e) => HttpError::from(e).into_response(),
    }
}

/// Reads the whole body into `upload`, or refuses it (dropping `upload`, which removes
/// its file) when it stalls, trickles, or grows past the size limit or the disk quota.
async fn receive(
    mut upload: ArtifactUpload,
    body: &mut Body,
    declared: Option<u64>,
    limits: &BodyLimits,
) -> Result<ArtifactUpload, HttpError> {
    let window = limits.upload_read_timeout;
    // Never 0: a window without a single byte is a stall whatever the rate.
    let min_per_window = ((u128::from(limits.upload_min_bytes_per_s) * window.as_millis() / 1000) as u64).max(1);
    let mut window_end = Instant::now() + window;
    let mut window_bytes = 0u64;
    let mut total = 0u64;
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let frame = match tokio::time::timeout_at(window_end, body.frame()).await {
            Err(_) if window_bytes >= min_per_window => {
                (window_end, window_bytes) = (Instant::now() + window, 0);
                continue;
            }
            Err(_) => return Err(stalled(window_bytes, limits)),
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(HttpError::bad_request("the request body could not be read")),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(chunk) = frame.into_data() else { continue }; // trailers
        let n = chunk.len() as u64;
        total += n;
        window_bytes += n;
        if total > limits.artifact_bytes {
            return Err(HttpError::too_large(limits.artifact_bytes as usize));
        }
        // Counted against the disk quota as it arrives: refused before it is written.
        upload.accept(n)?;
        if pending.is_empty() {
            // One allocation per piece, not a doubling series of them (freed, with
            // the piece, on the background pool).
            let left = declared.map_or(FLUSH_BYTES as u64, |d| d.saturating_sub(total - n));
            pending.reserve(left.min(FLUSH_BYTES as u64).max(n) as usize);
        }
        pending.extend_from_slice(&chunk);
        if pending.len() >= FLUSH_BYTES {
            upload = write_off(upload, std::mem::take(&mut pending)).await?;
        }
        if Instant::now() >= window_end {
            if window_bytes < min_per_window {
                return Err(stalled(window_bytes, limits));
            }
            (window_end, window_bytes) = (Instant::now() + window, 0);
        }
    }
    if !pending.is_empty() {
        upload = write_off(upload, pending).await?;
    }
    Ok(upload)
}

/// The [`closing`] refusal of an upload whose body the client may still be sending:
/// what it has sent is read and dropped first ([`discard_sent`]), or a reset may take
/// the refusal with it.
async fn refused(body: &mut Body, error: HttpError) -> Response {
    discard_sent(body).await;
    closing(error)
}

/// Reads and drops what is left of a refused body, up to [`DISCARD_BYTES`] and for at
/// most [`DISCARD_TIME`], so the connection closes without unread bytes (which would
/// reset it under the response).
async fn discard_sent(body: &mut Body) {
    let deadline = Instant::now() + DISCARD_TIME;
    let mut dropped = 0u64;
    while dropped < DISCARD_BYTES {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => dropped += frame.data_ref().map_or(0, |d| d.len() as u64),
            _ => return,
        }
    }
}

/// Writes `bytes` into the upload on the background pool.
async fn write_off(mut upload: ArtifactUpload, bytes: Vec<u8>) -> Result<ArtifactUpload, HttpError> {
    Ok(blocking(move || upload.write(&bytes).map(|()| upload)).await?)
}

fn stalled(received: u64, limits: &BodyLimits) -> HttpError {
    HttpError::new(
        Code::UploadStalled,
        format!(
            "the upload's body brought {received} bytes in {} ms, slower than this server's minimum of {} bytes/s: \
             it was cut off and nothing of it kept",
            limits.upload_read_timeout.as_millis(),
            limits.upload_min_bytes_per_s
        ),
    )
}

/// The response to a refusal before the body was read to its end: the connection cannot
/// carry another request, so say so, or a keep-alive client sends its next one into a
/// closed socket.
fn closing(error: HttpError) -> Response {
    let mut response = error.into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
