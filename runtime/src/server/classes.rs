//! Each request is served on the threads of its tenant's priority class.
//!
//! A batch tenant's guests run in the idle class (`platform/guest_threads.rs`) and its
//! kernels after latency work (the device scheduler), but the host's work around them
//! (reading and parsing request bodies, admission and its refusals, loading old
//! versions, encoding responses) ran on the one tokio runtime that every tenant shares,
//! at normal priority. Under the hostile soak (`cargo xtask soak`) that work was where
//! the victim's slowest requests waited: a waking latency request found both cores busy
//! with other tenants' parsing and refusals, with no priority to tell them apart.
//!
//! So a request whose tenant may not run latency work (its `max_priority` is `batch`,
//! the server's default) is served whole on the background runtime's idle-class
//! workers, what it spawns included: an HTTP/1 request moves its connection there
//! (`connections.rs`), so reading its body and writing its response do too, and the
//! server's own threads only accepted the connection and read the first request's head
//! (the key is in it). Requests of the admin, of tenants granted `latency`, without a
//! key or with an unknown one (refused at once) run on the server's runtime. On an idle
//! host the idle class is no slower: it gets every core nothing else wants.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::Version;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::key_of;
use super::connections::ConnectionClass;
use super::error::HttpError;
use crate::background;
use crate::platform::{Platform, PlatformError};
use sluice_registry::PriorityClass;

/// Middleware: runs the rest of `request`'s handling in its caller's class
/// ([`serve_in_class`]).
pub(super) async fn serve_in_callers_class(
    State(platform): State<Arc<Platform>>,
    request: Request,
    next: Next,
) -> Response {
    let batch = key_of(request.headers()).is_ok_and(|key| platform.class_of_key(key) == PriorityClass::Batch);
    serve_in_class(batch, request, next).await
}

/// Runs `next` for `request` on the threads of its class (`batch`: the background
/// runtime's idle-class workers). An HTTP/1 request moves its whole connection
/// (`connections.rs`): the class is set, and the handler waits one turn so that the
/// connection's future moves before it runs. Anything else (HTTP/2's requests, each in
/// a task of its own; the router driven without `connections.rs`) moves its handler
/// alone.
pub(super) async fn serve_in_class(batch: bool, request: Request, next: Next) -> Response {
    let connection = request.extensions().get::<Arc<ConnectionClass>>().filter(|_| request.version() < Version::HTTP_2);
    if let Some(connection) = connection {
        if connection.set_batch(batch) {
            tokio::task::yield_now().await;
        }
        return next.run(request).await;
    }
    if !batch {
        return next.run(request).await;
    }
    match background::run(next.run(request)).await {
        Ok(response) => response,
        Err(e) => HttpError::from(PlatformError::internal("serving a batch tenant's request", e)).into_response(),
    }
}
