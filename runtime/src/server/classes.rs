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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};

    use axum::extract::Request;
    use axum::middleware::{self, Next};
    use axum::routing::post;

    use axum::Router;
    use axum::body::Bytes;
    use tokio::net::TcpListener;
    use tokio::sync::watch;

    use super::serve_in_class;
    use crate::server::connections::serve;

    /// The scheduling policy of the thread that runs the handler, and the body's length.
    async fn policy_and_length(body: Bytes) -> String {
        // SAFETY: a read of the calling thread's scheduling policy.
        let policy = unsafe { libc::sched_getscheduler(0) };
        format!("{policy} {}", body.len())
    }

    /// Classes a request by its `x-class` header, as the platform does by its key.
    async fn by_header(request: Request, next: Next) -> axum::response::Response {
        let batch = request.headers().get("x-class").is_some_and(|v| v == "batch");
        serve_in_class(batch, request, next).await
    }

    /// Sends one request on `conn` and reads its response's body.
    fn call(conn: &mut BufReader<std::net::TcpStream>, class: &str, body: &[u8]) -> String {
        let head = format!("POST / HTTP/1.1\r\nhost: t\r\nx-class: {class}\r\ncontent-length: {}\r\n\r\n", body.len());
        conn.get_mut().write_all(head.as_bytes()).unwrap();
        conn.get_mut().write_all(body).unwrap();
        let mut length = 0;
        loop {
            let mut line = String::new();
            conn.read_line(&mut line).unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        conn.read_exact(&mut body).unwrap();
        String::from_utf8(body).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_runs_in_the_class_of_the_request_it_serves() {
        let router = Router::new().route("/", post(policy_and_length)).layer(middleware::from_fn(by_header));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = watch::channel(());
        let server = tokio::spawn(serve(listener, router, stop_rx));
        let (other, idle) = (libc::SCHED_OTHER.to_string(), libc::SCHED_IDLE.to_string());
        let calls = tokio::task::spawn_blocking(move || {
            let mut conn = BufReader::new(std::net::TcpStream::connect(addr).unwrap());
            let big = vec![7u8; 1 << 20];
            // One keep-alive connection, its class changing from request to request; the
            // batch one's body (1 MiB) is read on the idle-class threads.
            [
                call(&mut conn, "latency", b"abc"),
                call(&mut conn, "batch", &big),
                call(&mut conn, "batch", b""),
                call(&mut conn, "latency", b"de"),
            ]
        })
        .await
        .unwrap();
        assert_eq!(
            calls,
            [format!("{other} 3"), format!("{idle} {}", 1 << 20), format!("{idle} 0"), format!("{other} 2")]
        );
        // Stopping: the idle keep-alive connection closes, and `serve` returns.
        stop_tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
