//! The HTTP API: an axum router over a [`Platform`], and the socket around it.
//!
//! [`app`] builds the router without a socket (tests can drive it directly);
//! [`serve`] runs it on a listener and, on SIGTERM, drains (503 `shutting_down` to new
//! requests while the running ones finish). Endpoints (documented in
//! `docs/openapi.yaml`):
//!
//! - no key: the health endpoints `GET /v2/health/live`, `GET /v2/health/ready`, and
//!   the web console's files, `GET /` (a redirect) and `/console/...` (`console`);
//! - admin key: `/v1/tenants[/{id}[/keys[/{key_id}]]]` (`PATCH /v1/tenants/{id}` changes
//!   a tenant's policy; a tenant's key may `GET` its own entry), and `GET /metrics`
//!   (Prometheus, OpenMetrics text; admin only because it names every tenant and function);
//! - tenant key: `/v1/functions[/{name}[/invoke|/artifacts/{artifact}|/versions/{v}/publish|/versions/{v}/pin]]` and the
//!   Open Inference Protocol's `/v2`, `/v2/models/{name}[/versions/{v}][/ready|/infer|/config]`,
//!   `/v2/models[/{name}]/stats`; the generate extension,
//!   `/v2/models/{name}[/versions/{v}]/generate[_stream]` (`generate`, server-sent
//!   events for the streamed form); and the OpenAI-compatible `POST /v1/chat/completions`
//!   and `POST /v1/completions` (`openai`), both over `streamed`;
//! - any key: the model-repository extension, `POST /v2/repository/index` and
//!   `POST /v2/repository/models/{name}/load|unload` (`repository`; a tenant reaches
//!   only its own bundles, and with `keyless_local_repository` a local caller without a
//!   key acts as the admin);
//! - any key: `GET /v1/status` (the admin sees everything; a tenant its own usage only),
//!   and `GET /v1/devices/{index}/live`, the live console's feed of one device
//!   (server-sent events, `live`; others' work anonymised for a tenant).
//!
//! The gRPC service ([`grpc`]) is served on the same port as well (h2c, routed by its
//! path), and [`metrics_app`] is the keyless `/metrics` of `sluice serve --metrics-port`.
//!
//! Errors map to statuses in [`error`] only.

mod auth;
mod classes;
mod connections;
mod console;
pub mod error;
mod functions;
mod generate;
pub mod grpc;
mod held_body;
mod live;
mod openai;
mod repository;
mod streamed;
mod tenants;
mod uploads;
mod v2;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post, put};

use serde_json::Value;
use sluice_host_api::Code;
use sluice_registry::Principal;

use crate::platform::Platform;
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
    /// An artifact upload's body must bring `upload_min_bytes_per_s` over every window
    /// of this length (so also: some byte within it), else 408 `upload_stalled`.
    pub upload_read_timeout: Duration,
    /// The slowest average rate of an artifact upload's body, per window.
    pub upload_min_bytes_per_s: u64,
}

/// Default of [`BodyLimits::upload_read_timeout`].
pub const DEFAULT_UPLOAD_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Default of [`BodyLimits::upload_min_bytes_per_s`]: 16 KiB/s, far below any real
/// client, so only a deliberately trickling one is cut off.
pub const DEFAULT_UPLOAD_MIN_BYTES_PER_S: u64 = 16 << 10;

impl Default for BodyLimits {
    fn default() -> Self {
        BodyLimits {
            component_bytes: 64 << 20,
            artifact_bytes: 1 << 30,
            invoke_bytes: 16 << 20,
            json_bytes: 64 << 10,
            upload_read_timeout: DEFAULT_UPLOAD_READ_TIMEOUT,
            upload_min_bytes_per_s: DEFAULT_UPLOAD_MIN_BYTES_PER_S,
        }
    }
}

/// The router with every endpoint.
pub fn app(platform: Arc<Platform>, limits: BodyLimits) -> Router {
    let admin = Router::new()
        .route("/v1/tenants", get(tenants::list).post(tenants::create))
        .route("/v1/tenants/{id}", get(tenants::get).patch(tenants::change).delete(tenants::delete))
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
            put(uploads::put_artifact).layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/functions/{name}/versions/{version}/publish", post(functions::publish))
        .route("/v1/functions/{name}/versions/{version}/pin", post(functions::pin).delete(functions::unpin))
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
        .route("/v2/models/{name}/versions/{version}/infer", limited(post(v2::version_infer), limits.invoke_bytes))
        .route("/v2/models/{name}/generate", limited(post(generate::generate), limits.invoke_bytes))
        .route("/v2/models/{name}/generate_stream", limited(post(generate::generate_stream), limits.invoke_bytes))
        .route(
            "/v2/models/{name}/versions/{version}/generate",
            limited(post(generate::version_generate), limits.invoke_bytes),
        )
        .route(
            "/v2/models/{name}/versions/{version}/generate_stream",
            limited(post(generate::version_generate_stream), limits.invoke_bytes),
        );
    let repository = Router::new()
        .route("/v2/repository/index", post(repository::index))
        .route("/v2/repository/models/{name}/load", post(repository::load))
        .route("/v2/repository/models/{name}/unload", post(repository::unload))
        .layer(DefaultBodyLimit::max(limits.json_bytes));
    // gRPC (h2c) on the same port: one port serves both, as Knative's one `h2c` port needs.
    let grpc = tower::ServiceBuilder::new()
        .layer(tower::util::MapResponseLayer::new(grpc::oversize_as_resource_exhausted as fn(_) -> _))
        .service(grpc::service(platform.clone(), limits.invoke_bytes));
    let openai = Router::new()
        .route("/v1/chat/completions", limited(post(openai::chat_completions), limits.invoke_bytes))
        .route("/v1/completions", limited(post(openai::completions), limits.invoke_bytes));
    Router::new()
        .route("/v1/status", get(status))
        .route("/v1/devices/{index}/live", get(live::feed))
        .route("/", get(console::root))
        .route("/console", get(console::root))
        .route("/console/", get(console::index))
        .route("/console/{*path}", get(console::asset))
        .merge(admin)
        .merge(functions)
        .merge(oip)
        .merge(repository)
        .merge(openai)
        .route_service(grpc::ROUTE, grpc)
        .fallback(error::no_route)
        .method_not_allowed_fallback(error::wrong_method)
        .layer(middleware::from_fn_with_state(platform.clone(), classes::serve_in_callers_class))
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

/// The router of the metrics port (`sluice serve --metrics-port`): `GET /metrics`
/// without a key, for a scraper inside the cluster (the main port's needs the admin's).
pub fn metrics_app(platform: Arc<Platform>) -> Router {
    Router::new()
        .route("/metrics", get(open_metrics))
        .fallback(error::no_route)
        .method_not_allowed_fallback(error::wrong_method)
        .with_state(platform)
}

async fn open_metrics(State(platform): State<Arc<Platform>>) -> Response {
    ([(CONTENT_TYPE, METRICS_CONTENT_TYPE)], platform.render_metrics().await).into_response()
}

/// `GET /v1/status`: a tenant's calls under its rate limit (`watching`), answered from
/// the devices' shared snapshots.
async fn status(
    State(platform): State<Arc<Platform>>,
    Caller(principal): Caller,
) -> Result<Json<Value>, error::HttpError> {
    platform.admit_status_call(&principal)?;
    let view = match principal {
        Principal::Admin => serde_json::to_value(platform.status().await),
        Principal::Tenant(me) => serde_json::to_value(platform.own_status(&me).await),
    };
    Ok(Json(view.unwrap_or_default()))
}

/// The OpenMetrics text format, which Prometheus scrapes natively.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn metrics(State(platform): State<Arc<Platform>>, _: AdminCaller) -> Response {
    ([(CONTENT_TYPE, METRICS_CONTENT_TYPE)], platform.render_metrics().await).into_response()
}

/// Serves `app` on `listener` until SIGINT or SIGTERM, then drains (see
/// [`serve_with`]) with no drain delay.
pub async fn serve(
    listener: tokio::net::TcpListener,
    platform: Arc<Platform>,
    limits: BodyLimits,
    grace: Duration,
) -> std::io::Result<()> {
    serve_with(listener, platform, limits, Lifecycle { grace, drain_delay: Duration::ZERO }).await
}

/// How a server stops.
#[derive(Clone, Copy, Debug)]
pub struct Lifecycle {
    /// How long requests running when new ones are refused may take to finish.
    pub grace: Duration,
    /// How long new requests are still served after the signal, while readiness already
    /// says 503 (so a load balancer or Kubernetes' endpoints stop sending them).
    pub drain_delay: Duration,
}

/// Serves `app` on `listener` until SIGINT or SIGTERM, then drains: readiness
/// (`/v2/health/ready`) turns 503 at once while requests are still served for
/// `drain_delay`; then every new request gets `503 shutting_down` (JSON, with
/// `Retry-After`), and the requests already running (invocations, streams, deploys,
/// uploads) finish for up to `grace`; then the listener closes and this returns.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    platform: Arc<Platform>,
    limits: BodyLimits,
    lifecycle: Lifecycle,
) -> std::io::Result<()> {
    let Lifecycle { grace, drain_delay } = lifecycle;
    let drain = Arc::new(Drain::default());
    let router =
        app(platform.clone(), limits).layer(middleware::from_fn_with_state(drain.clone(), refuse_while_draining));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    let mut server = tokio::spawn(connections::serve(listener, router, stop_rx));
    tokio::select! {
        result = &mut server => return finished(result, &platform),
        () = shutdown_signal() => {}
    }
    platform.begin_drain();
    if !drain_delay.is_zero() {
        tracing::info!(drain_delay_s = drain_delay.as_secs_f64(), "draining: not ready; requests are still served");
        tokio::select! {
            result = &mut server => return finished(result, &platform),
            () = tokio::time::sleep(drain_delay) => {}
        }
    }
    platform.begin_shutdown();
    drain.draining.store(true, Ordering::Release);
    tracing::info!(
        in_flight = platform.in_flight(),
        requests = drain.active.load(Ordering::Acquire),
        grace_s = grace.as_secs_f64(),
        "shutting down: new requests get 503 shutting_down; in-flight work may finish"
    );
    let deadline = tokio::time::Instant::now() + grace;
    while drain.active.load(Ordering::Acquire) > 0 || platform.in_flight() > 0 || platform.serving_invocations() > 0 {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(in_flight = platform.in_flight(), "grace period over; abandoning in-flight requests");
            platform.registry().flush().map_err(std::io::Error::other)?;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop_tx.send(());
    // Idle keep-alive connections close at once; give stragglers a moment.
    if let Ok(result) = tokio::time::timeout(Duration::from_secs(1), &mut server).await {
        finished(result, &platform)?;
    }
    platform.registry().flush().map_err(std::io::Error::other)?;
    tracing::info!("stopped");
    Ok(())
}

fn finished(result: Result<std::io::Result<()>, tokio::task::JoinError>, platform: &Platform) -> std::io::Result<()> {
    result.map_err(std::io::Error::other)??;
    platform.registry().flush().map_err(std::io::Error::other)
}

/// The requests being handled, and whether the server is draining.
#[derive(Default)]
struct Drain {
    draining: AtomicBool,
    active: AtomicUsize,
}

/// Counts a request as active while alive (also when its handler is cancelled).
struct Active<'a>(&'a AtomicUsize);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn refuse_while_draining(State(drain): State<Arc<Drain>>, request: Request, next: Next) -> Response {
    drain.active.fetch_add(1, Ordering::AcqRel);
    let _active = Active(&drain.active);
    if drain.draining.load(Ordering::Acquire) {
        return error::HttpError::new(Code::ShuttingDown, "the server is shutting down; retry on another instance")
            .into_response();
    }
    next.run(request).await
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
