//! `/v1/functions`: deploy, artifacts, list, get, delete and invoke, for the calling tenant.
//!
//! Every path is scoped to the tenant of the key, so a tenant can neither see nor name
//! another tenant's functions (they answer 404). Deploys and artifact uploads are durable
//! (fsync + sled flush) before the 201 is sent.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_registry::{Batching, FunctionOptions, FunctionVersion, PriorityClass};

use super::auth::TenantCaller;
use super::error::{HttpError, blocking};
use crate::oip;
use crate::platform::{Platform, PlatformError};

/// Deploy options, as query parameters. The body is the component (`application/wasm`;
/// the content type is not enforced, the bytes are checked). `staged=true` makes a
/// version that does not serve until `POST /v1/functions/{name}/versions/{v}/publish`;
/// artifacts uploaded meanwhile join it in place (one version for a component and its
/// artifacts).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployQuery {
    #[serde(default)]
    staged: bool,
    priority: Option<PriorityClass>,
    weight: Option<u32>,
    timeout_ms: Option<u64>,
    memory_limit_bytes: Option<u64>,
    /// Dynamic batching: the most rows in one batched invocation.
    max_batch_size: Option<u32>,
    /// Dynamic batching: how long a request may wait for its batch to fill (µs).
    max_queue_delay_us: Option<u64>,
}

/// The JSON view of one version.
pub fn version_json(v: &FunctionVersion) -> Value {
    json!({
        "name": v.function,
        "version": v.version,
        "digest": v.component.digest,
        "size_bytes": v.component.size,
        "options": v.options,
        "artifacts": v.artifacts,
        "origin": v.origin,
        "created_ms": v.created_ms,
        "staged": v.staged,
        "pinned": v.pinned,
        "host_api": v.host_api,
    })
}

/// A 201 with the version and its function's `Location`.
pub fn created(v: &FunctionVersion) -> Response {
    let mut r = (StatusCode::CREATED, Json(version_json(v))).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/v1/functions/{}", v.function)) {
        r.headers_mut().insert(header::LOCATION, loc);
    }
    r
}

pub async fn deploy(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
    query: Result<Query<DeployQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    let Query(q) = query?;
    let wasm = body?;
    let batching = Batching::given(q.max_batch_size, q.max_queue_delay_us).map_err(PlatformError::from)?;
    let options =
        FunctionOptions::given(q.priority, q.weight, q.timeout_ms, q.memory_limit_bytes).with_batching(batching);
    if q.staged {
        let v = blocking(move || platform.stage(&tenant, &name, &wasm, options)).await?;
        return Ok(created(&v));
    }
    let loaded = blocking(move || platform.deploy(&tenant, &name, &wasm, options)).await?;
    Ok(created(&loaded.version))
}

/// `POST /v1/functions/{name}/versions/{version}/publish`: the staged version serves.
pub async fn publish(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path((name, version)): Path<(String, u32)>,
) -> Result<Json<Value>, HttpError> {
    let loaded = blocking(move || platform.publish(&tenant, &name, version)).await?;
    Ok(Json(version_json(&loaded.version)))
}

pub async fn list(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
) -> Result<Json<Value>, HttpError> {
    let functions = blocking(move || platform.list_functions(&tenant)).await?;
    let items: Vec<Value> = functions
        .iter()
        .map(|f| {
            let mut v = version_json(&f.latest);
            v["created_ms"] = json!(f.created_ms);
            v["updated_ms"] = json!(f.latest.created_ms);
            v
        })
        .collect();
    Ok(Json(json!({ "functions": items })))
}

pub async fn get(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> Result<Json<Value>, HttpError> {
    let info = blocking(move || platform.function_info(&tenant, &name)).await?;
    let latest = info.record.latest();
    Ok(Json(json!({
        "name": info.record.name,
        "created_ms": info.record.created_ms,
        "latest_version": latest.version,
        "serving_version": info.record.serving().map(|v| v.version),
        "digest": latest.component.digest,
        "host_api": latest.host_api,
        "options": latest.options,
        "artifacts": latest.artifacts,
        "versions": info.record.versions.iter().map(version_json).collect::<Vec<_>>(),
        "loaded": info.loaded,
    })))
}

pub async fn delete(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> Result<StatusCode, HttpError> {
    blocking(move || platform.delete_function(&tenant, &name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/functions/{name}/versions/{version}/pin`: the version is never pruned by
/// the tenant's retention policy.
pub async fn pin(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path((name, version)): Path<(String, u32)>,
) -> Result<Json<Value>, HttpError> {
    let v = blocking(move || platform.set_pinned(&tenant, &name, version, true)).await?;
    Ok(Json(version_json(&v)))
}

/// `DELETE /v1/functions/{name}/versions/{version}/pin`: the version is pruned like any other.
pub async fn unpin(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path((name, version)): Path<(String, u32)>,
) -> Result<Json<Value>, HttpError> {
    let v = blocking(move || platform.set_pinned(&tenant, &name, version, false)).await?;
    Ok(Json(version_json(&v)))
}

pub async fn invoke(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    run(&platform, &tenant, &name, None, &headers, &body?).await
}

/// The binary tensor data extension's header: the length of the JSON that starts the body.
pub const JSON_LENGTH_HEADER: &str = "inference-header-content-length";

/// Where the JSON ends in a body of `body_len` bytes, if binary data follows it.
fn json_length(headers: &HeaderMap, body_len: usize) -> Result<Option<usize>, HttpError> {
    let Some(value) = headers.get(JSON_LENGTH_HEADER) else { return Ok(None) };
    let n: usize = value.to_str().ok().and_then(|s| s.trim().parse().ok()).ok_or_else(|| {
        HttpError::bad_request("the Inference-Header-Content-Length header must be a non-negative integer")
    })?;
    if n == 0 {
        return Err(HttpError::bad_request(
            "raw binary requests (Inference-Header-Content-Length: 0) are not supported: send the JSON header first",
        ));
    }
    if n > body_len {
        return Err(HttpError::bad_request(format!(
            "Inference-Header-Content-Length is {n}, more than the body's {body_len} bytes"
        )));
    }
    Ok(Some(n))
}

/// Parses an Open Inference Protocol request (JSON, or JSON followed by binary tensor
/// data), runs it on `version` (the serving one if `None`), and renders the response
/// (binary outputs where asked) with timing headers. Shared by
/// `/v1/functions/{name}/invoke` and `/v2/models/{name}[/versions/{v}]/infer`.
///
/// The body and its decoded inputs are charged to the tenant's host-memory budget
/// before they are decoded (the scan says what decoding takes), and the encoded
/// response from before it is encoded until the connection has taken it; what does not
/// fit is refused (`decoded_too_large`, `host_memory_budget`) before it is spent.
pub async fn run(
    platform: &Arc<Platform>,
    tenant: &str,
    name: &str,
    version: Option<u32>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, HttpError> {
    let scanned = match json_length(headers, body.len())? {
        Some(n) => oip::json_request::scan(&body[..n], Some(&body[n..])),
        None => oip::json_request::scan(body, None),
    }
    .map_err(|e| HttpError::bad_request(e.0))?;
    let decoding = body.len() as u64 + scanned.decoded_bytes();
    let held = platform.reserve_host_memory(tenant, decoding, "decoding the request")?;
    let request = scanned.decode().map_err(|e| HttpError::bad_request(e.0))?;
    let parameters = request.parameters.clone();
    let result = oip::infer(platform, tenant, name, version, request).await?;
    drop(held);
    let bound = oip::json::encoded_bytes_bound(&result, &parameters);
    let mut held = platform.reserve_host_memory(tenant, bound, "encoding the response")?;
    let encoded = oip::json::encode_http_response(&result, &parameters);
    held.shrink_to(encoded.body.len() as u64);
    let mut response = Response::new(super::held_body::held(encoded.body, held));
    let h = response.headers_mut();
    match encoded.json_len {
        Some(n) => {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
            h.insert(JSON_LENGTH_HEADER, HeaderValue::from(n));
        }
        None => {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
    }
    let us = |d: std::time::Duration| HeaderValue::from(d.as_micros() as u64);
    h.insert("x-sluice-queue-us", us(result.timing.queue));
    h.insert("x-sluice-instantiate-us", us(result.timing.instantiate));
    h.insert("x-sluice-instance", HeaderValue::from_static(if result.timing.warm { "warm" } else { "fresh" }));
    h.insert("x-sluice-execute-us", us(result.timing.execute));
    h.insert("x-sluice-batch-size", HeaderValue::from(result.timing.batch.max(1)));
    if let Some(v) = result.model_version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
        h.insert("x-sluice-function-version", v);
    }
    Ok(response)
}
