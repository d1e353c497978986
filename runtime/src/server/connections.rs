//! The accept loop, and each connection driven on the threads of its request's class.
//!
//! hyper serves a connection as one future that reads requests, runs their handlers
//! and writes responses. Here that future is polled by a task on the server's runtime
//! while the connection serves a latency request (or none yet), and by a task on the
//! background runtime's idle-class workers (`background::handle`) while it serves a batch
//! tenant's request: [`ConnectionClass`] says which, and the middleware of
//! `classes.rs` sets it as each request arrives. Between two polls the future moves to
//! the other runtime's task ([`drive`]); its socket stays registered with the server's
//! runtime's reactor, which wakes whichever task polls it. So a batch tenant's request
//! costs the server's threads its accept and the first read of its head only: reading
//! its body, the handler, and writing the response all run in the idle class.
//!
//! HTTP/2 (gRPC on this port) multiplexes requests of any class on one connection, each
//! in a task of its own: its connection stays on the server's runtime and a batch
//! request's handler alone moves (`classes.rs`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt;

use crate::background;

/// Which runtime polls a connection: set by the request it serves.
#[derive(Debug, Default)]
pub(super) struct ConnectionClass {
    batch: AtomicBool,
}

impl ConnectionClass {
    /// Marks the connection batch (or not); whether that changed it.
    pub(super) fn set_batch(&self, batch: bool) -> bool {
        self.batch.swap(batch, Ordering::AcqRel) != batch
    }

    fn is_batch(&self) -> bool {
        self.batch.load(Ordering::Acquire)
    }
}

/// Accepts connections on `listener` and serves `router` on each until `stop` changes
/// (or its sender is dropped); then every connection shuts down gracefully (the request
/// in progress finishes, an idle keep-alive connection closes) and this returns once all
/// are closed.
pub(super) async fn serve(listener: TcpListener, router: Router, mut stop: watch::Receiver<()>) -> std::io::Result<()> {
    // Each connection holds a receiver; all are gone when every connection has closed.
    let (closed_tx, closed_rx) = watch::channel(());
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
        let connection = serving(stream, peer, router.clone(), stop.clone());
        let (class, closed) = (connection.class.clone(), closed_rx.clone());
        tokio::spawn(async move {
            drive(connection, class).await;
            drop(closed);
        });
    }
    drop(closed_rx);
    closed_tx.closed().await;
    Ok(())
}

/// After a failed `accept`: a connection's own failure (the peer went away) is
/// skipped; anything else (out of file descriptors) is logged and retried a second later,
/// as axum's own loop does.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if !matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        tracing::error!(error = %e, "accepting a connection failed; retrying in a second");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One connection's hyper future, with its graceful shutdown on `stop`.
struct Serving {
    connection: Pin<Box<dyn Future<Output = ()> + Send>>,
    class: Arc<ConnectionClass>,
}

/// hyper serving `router` on `stream`; each request carries the peer's address
/// (`ConnectInfo`) and the connection's [`ConnectionClass`].
fn serving(stream: TcpStream, peer: SocketAddr, router: Router, mut stop: watch::Receiver<()>) -> Serving {
    let class = Arc::new(ConnectionClass::default());
    let tagged = class.clone();
    let service = router.map_request(move |request: Request<_>| tag(request, peer, &tagged));
    let connection = async move {
        let mut builder = Builder::new(TokioExecutor::new());
        builder.http2().enable_connect_protocol();
        let connection =
            builder.serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service));
        let mut connection = std::pin::pin!(connection);
        let mut stopping = false;
        loop {
            tokio::select! {
                ended = connection.as_mut() => {
                    if let Err(e) = ended {
                        tracing::trace!(error = %e, "a connection ended with an error");
                    }
                    return;
                }
                _ = stop.changed(), if !stopping => {
                    stopping = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    };
    Serving { connection: Box::pin(connection), class }
}

fn tag<B>(request: Request<B>, peer: SocketAddr, class: &Arc<ConnectionClass>) -> Request<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let mut request = request.map(Body::new);
    request.extensions_mut().insert(ConnectInfo(peer));
    request.extensions_mut().insert(class.clone());
    request
}

/// Polls `serving` to its end, on the server's runtime while its class is latency and on
/// the background runtime while it is batch, moving it between polls when the class
/// changes.
async fn drive(mut serving: Serving, class: Arc<ConnectionClass>) {
    let here = tokio::runtime::Handle::current();
    loop {
        let batch = class.is_batch();
        let runtime = match batch.then(background::handle).flatten() {
            Some(background) => background,
            None => here.clone(),
        };
        match runtime.spawn(Stint { serving: Some(serving), batch }).await {
            Ok(Some(moving)) => serving = moving,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(error = %e, "a connection's task failed");
                return;
            }
        }
    }
}

/// Polls a connection while its class stays `batch`: `None` when it has ended, the
/// connection itself when its class changed (after a poll, so it can move).
struct Stint {
    serving: Option<Serving>,
    batch: bool,
}

impl Future for Stint {
    type Output = Option<Serving>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Serving>> {
        let Some(serving) = self.serving.as_mut() else { return Poll::Ready(None) };
        // On the background runtime's workers, their core goes to latency work when due.
        background::give_way_if_due();
        if serving.connection.as_mut().poll(cx).is_ready() {
            self.serving = None;
            return Poll::Ready(None);
        }
        if serving.class.is_batch() == self.batch { Poll::Pending } else { Poll::Ready(self.serving.take()) }
    }
}
