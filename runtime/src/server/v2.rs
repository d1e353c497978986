//! The Open Inference Protocol (KServe v2) endpoints over HTTP.
//!
//! Health needs no key; everything else takes a tenant key and sees that tenant's
//! functions as models, each version of a function as a model version. Metadata,
//! readiness and inference exist with and without `/versions/{v}`; a version that does
//! not exist is a 404. `infer` shares its implementation with `/v1/functions/{name}/invoke`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sluice_host_api::Code;

use super::auth::{Caller, TenantCaller};
use super::error::{HttpError, blocking};
use super::functions::run;
use crate::engine::TensorSpec;
use crate::oip;
use crate::platform::{FunctionStats, Platform};

/// The protocol extensions sluice implements, as server metadata lists them.
pub const EXTENSIONS: [&str; 1] = [oip::binary::EXTENSION];

pub async fn live() -> Json<Value> {
    Json(json!({ "live": true }))
}

pub async fn ready(State(platform): State<Arc<Platform>>) -> Response {
    let ready = platform.is_ready();
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(json!({ "ready": ready }))).into_response()
}

pub async fn server_metadata(_caller: Caller) -> Json<Value> {
    Json(json!({ "name": "sluice", "version": env!("CARGO_PKG_VERSION"), "extensions": EXTENSIONS }))
}

/// A version as the path names it; one that is not a version number does not exist.
pub(super) fn version(name: &str, v: &str) -> Result<u32, HttpError> {
    v.parse().map_err(|_| HttpError::new(Code::NotFound, format!("function {name:?} has no version {v:?}")))
}

/// The protocol's `metadata_tensor`s of declared inputs or outputs.
fn tensors_json(specs: &[TensorSpec]) -> Vec<Value> {
    specs.iter().map(|s| json!({ "name": s.name, "datatype": s.datatype, "shape": s.shape })).collect()
}

async fn metadata(
    platform: Arc<Platform>,
    tenant: String,
    name: String,
    v: Option<u32>,
) -> Result<Json<Value>, HttpError> {
    let info = oip::model(&platform, &tenant, &name, v).await?;
    let signature = info.signature.unwrap_or_default();
    let versions: Vec<String> = match v {
        Some(v) => vec![v.to_string()],
        None => info.versions.iter().map(u32::to_string).collect(),
    };
    let mut body = json!({
        "name": name,
        "versions": versions,
        "platform": "sluice_wasm_component",
        "inputs": tensors_json(&signature.inputs),
        "outputs": tensors_json(&signature.outputs),
    });
    // sluice's own member (the protocol's clients keep what they do not know): the host
    // API version the component was built against, when known.
    if let Some(host_api) = &info.version.host_api {
        body["host_api"] = json!(host_api);
    }
    Ok(Json(body))
}

pub async fn model_metadata(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> Result<Json<Value>, HttpError> {
    metadata(platform, tenant, name, None).await
}

pub async fn version_metadata(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path((name, v)): Path<(String, String)>,
) -> Result<Json<Value>, HttpError> {
    let v = version(&name, &v)?;
    metadata(platform, tenant, name, Some(v)).await
}

/// Triton's model configuration, as far as sluice can answer it truthfully: the
/// version's dynamic batching (`max_batch_size` and `dynamic_batching`, dims without the
/// batch axis; `max_batch_size` 0 when it runs each request alone), and the inputs and
/// outputs of the function's signature (none when it declares none).
async fn config(
    platform: Arc<Platform>,
    tenant: String,
    name: String,
    v: Option<u32>,
) -> Result<Json<Value>, HttpError> {
    let info = oip::model(&platform, &tenant, &name, v).await?;
    let signature = info.signature.unwrap_or_default();
    let max_batch_size = oip::triton_max_batch_size(&info.version);
    let tensors = |specs: &[TensorSpec], inputs: bool| -> Vec<Value> {
        specs
            .iter()
            .map(|s| {
                let dims = oip::triton_dims(&s.shape, max_batch_size);
                let mut t = json!({ "name": s.name, "data_type": oip::triton_data_type(&s.datatype), "dims": dims });
                if inputs {
                    t["optional"] = json!(s.optional);
                }
                t
            })
            .collect()
    };
    let mut config = json!({
        "name": name,
        "platform": "sluice_wasm_component",
        "backend": "sluice",
        "version_policy": { "specific": { "versions": [info.version.version] } },
        "max_batch_size": max_batch_size,
        "input": tensors(&signature.inputs, true),
        "output": tensors(&signature.outputs, false),
    });
    if let Some(b) = info.version.options.batching {
        config["dynamic_batching"] = json!({ "max_queue_delay_microseconds": b.max_queue_delay_us });
    }
    Ok(Json(config))
}

pub async fn model_config(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> Result<Json<Value>, HttpError> {
    config(platform, tenant, name, None).await
}

pub async fn version_config(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path((name, v)): Path<(String, String)>,
) -> Result<Json<Value>, HttpError> {
    let v = version(&name, &v)?;
    config(platform, tenant, name, Some(v)).await
}

/// Triton's statistics of `stats` entries (each function over all its versions: `version` is "").
fn stats_json(stats: Vec<(String, FunctionStats)>) -> Json<Value> {
    let model_stats: Vec<Value> = stats
        .into_iter()
        .map(|(name, s)| {
            json!({
                "name": name,
                "version": "",
                "last_inference": s.last_inference_ms,
                "inference_count": s.success.count,
                "execution_count": s.success.count,
                "inference_stats": {
                    "success": s.success,
                    "fail": s.fail,
                    "queue": s.queue,
                    "compute_infer": s.compute,
                },
                "batch_stats": [],
            })
        })
        .collect();
    Json(json!({ "model_stats": model_stats }))
}

pub async fn model_stats(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> Result<Json<Value>, HttpError> {
    let (p, t, n) = (platform.clone(), tenant.clone(), name.clone());
    blocking(move || p.function_info(&t, &n)).await?;
    let mut stats = platform.function_stats(&tenant, Some(&name));
    if stats.is_empty() {
        stats.push((name, FunctionStats::default()));
    }
    Ok(stats_json(stats))
}

pub async fn all_stats(State(platform): State<Arc<Platform>>, TenantCaller(tenant): TenantCaller) -> Json<Value> {
    stats_json(platform.function_stats(&tenant, None))
}

async fn readiness(
    platform: Arc<Platform>,
    tenant: String,
    name: String,
    v: Option<u32>,
) -> Result<Response, HttpError> {
    let info = oip::model(&platform, &tenant, &name, v).await?;
    let status = if info.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let mut body = json!({ "name": name, "ready": info.ready });
    if v.is_some() {
        body["version"] = json!(info.version.version.to_string());
    }
    Ok((status, Json(body)).into_response())
}

pub async fn model_ready(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> Result<Response, HttpError> {
    readiness(platform, tenant, name, None).await
}

pub async fn version_ready(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path((name, v)): Path<(String, String)>,
) -> Result<Response, HttpError> {
    let v = version(&name, &v)?;
    readiness(platform, tenant, name, Some(v)).await
}

pub async fn infer(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    run(&platform, &tenant, &name, None, &headers, &body?).await
}

pub async fn version_infer(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path((name, v)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    let v = version(&name, &v)?;
    run(&platform, &tenant, &name, Some(v), &headers, &body?).await
}
