//! The HTTP API: an axum router over a [`Platform`], and the socket around it.
//!
//! [`app`] builds the router without a socket (tests can drive it directly);
//! [`serve`] runs it on a listener with graceful shutdown. Endpoints (documented in
//! `docs/openapi.yaml`):
//!
//! - health, no key: `GET /v2/health/live`, `GET /v2/health/ready`;
//! - admin key: `/v1/tenants[/{id}[/keys[/{key_id}]]]`, and `GET /metrics` (Prometheus,
//!   OpenMetrics text; admin only because it names every tenant and function);
//! - tenant key: `/v1/functions[/{name}[/invoke|/artifacts/{artifact}]]` and the Open
//!   Inference Protocol's `/v2`, `/v2/models/{name}[/versions/{v}][/ready|/infer|/config]`, `/v2/models[/{name}]/stats`;
//! - any key: `GET /v1/status`.
//!
//! Errors map to statuses in [`error`] only.

mod auth;
pub mod error;
mod functions;
pub mod grpc;
mod tenants;
mod v2;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post, put};
use axum::{Json, serve::ListenerExt};

use crate::platform::{Platform, Status};
use auth::{AdminCaller, Caller};

/// Largest request bodies, per kind of endpoint.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    /// Component uploads (`PUT /v1/functions/{name}`).
    pub component_bytes: usize,
    /// Artifact uploads (streamed to disk).
    pub artifact_bytes: u64,
    /// Invocation requests (JSON tensors).
    pub invoke_bytes: usize,
    /// Small JSON bodies (admin).
    pub json_bytes: usize,
}

impl Default for BodyLimits {
    fn default() -> Self {
        BodyLimits { component_bytes: 64 << 20, artifact_bytes: 1 << 30, invoke_bytes: 16 << 20, json_bytes: 64 << 10 }
    }
}

/// The router with every endpoint.
pub fn app(platform: Arc<Platform>, limits: BodyLimits) -> Router {
    let admin = Router::new()
        .route("/v1/tenants", get(tenants::list).post(tenants::create))
        .route("/v1/tenants/{id}", get(tenants::get).delete(tenants::delete))
        .route("/v1/tenants/{id}/keys", get(tenants::list_keys).post(tenants::issue_key))
        .route("/v1/tenants/{id}/keys/{key_id}", axum::routing::delete(tenants::revoke_key))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(limits.json_bytes));
    let functions = Router::new()
        .route("/v1/functions", get(functions::list))
        .route(
            "/v1/functions/{name}",
            limited(put(functions::deploy), limits.component_bytes).get(functions::get).delete(functions::delete),
        )
        .route(
            "/v1/functions/{name}/artifacts/{artifact}",
            put(functions::put_artifact).layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/functions/{name}/invoke", limited(post(functions::invoke), limits.invoke_bytes));
    let oip = Router::new()
        .route("/v2/health/live", get(v2::live))
        .route("/v2/health/ready", get(v2::ready))
        .route("/v2", get(v2::server_metadata))
        .route("/v2/models/{name}", get(v2::model_metadata))
        .route("/v2/models/{name}/ready", get(v2::model_ready))
        .route("/v2/models/{name}/infer", limited(post(v2::infer), limits.invoke_bytes))
        .route("/v2/models/{name}/config", get(v2::model_config))
        .route("/v2/models/{name}/stats", get(v2::model_stats))
        .route("/v2/models/stats", get(v2::all_stats))
        .route("/v2/models/{name}/versions/{version}", get(v2::version_metadata))
        .route("/v2/models/{name}/versions/{version}/config", get(v2::version_config))
        .route("/v2/models/{name}/versions/{version}/ready", get(v2::version_ready))
        .route("/v2/models/{name}/versions/{version}/infer", limited(post(v2::version_infer), limits.invoke_bytes));
    Router::new()
        .route("/v1/status", get(status))
        .merge(admin)
        .merge(functions)
        .merge(oip)
        .fallback(error::no_route)
        .method_not_allowed_fallback(error::wrong_method)
        .layer(axum::Extension(limits))
        .with_state(platform)
}

/// Limits a route's body to `limit` bytes: a declared `Content-Length` above it is
/// refused before any of the body is read, a streamed body when it grows past it.
fn limited(route: MethodRouter<Arc<Platform>>, limit: usize) -> MethodRouter<Arc<Platform>> {
    route.layer(DefaultBodyLimit::max(limit)).layer(middleware::from_fn_with_state(limit, refuse_declared_oversize))
}

async fn refuse_declared_oversize(State(limit): State<usize>, request: Request, next: Next) -> Response {
    let declared = request.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return error::HttpError::too_large(limit).into_response();
    }
    next.run(request).await
}

async fn status(State(platform): State<Arc<Platform>>, Caller(principal): Caller) -> Json<Status> {
    Json(platform.status(&principal).await)
}

/// The OpenMetrics text format, which Prometheus scrapes natively.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn metrics(State(platform): State<Arc<Platform>>, _: AdminCaller) -> Response {
    ([(CONTENT_TYPE, METRICS_CONTENT_TYPE)], platform.render_metrics().await).into_response()
}

/// Serves `app` on `listener` until SIGINT or SIGTERM, then stops accepting, lets
/// in-flight requests finish for up to `grace`, and returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    platform: Arc<Platform>,
    limits: BodyLimits,
    grace: Duration,
) -> std::io::Result<()> {
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
    });
    let signalled = platform.clone();
    let server = axum::serve(listener, app(platform.clone(), limits)).with_graceful_shutdown(async move {
        shutdown_signal().await;
        signalled.begin_shutdown();
        tracing::info!(
            in_flight = signalled.in_flight(),
            grace_s = grace.as_secs_f64(),
            "shutting down: no new connections; in-flight invocations may finish"
        );
        let _ = stopping_tx.send(());
    });
    let grace_over = async {
        if stopping_rx.await.is_ok() {
            tokio::time::sleep(grace).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = server.into_future() => result?,
        () = grace_over => tracing::warn!(in_flight = platform.in_flight(), "grace period over; abandoning in-flight requests"),
    }
    platform.registry().flush().map_err(std::io::Error::other)?;
    tracing::info!("stopped");
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
