//! The Open Inference Protocol (KServe v2) endpoints.
//!
//! Health needs no key; everything else takes a tenant key and sees that tenant's
//! functions as models. `infer` shares its implementation with `/v1/functions/{name}/invoke`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::auth::{Caller, TenantCaller};
use super::error::{HttpError, blocking};
use super::functions::run;
use crate::platform::Platform;

pub async fn live() -> Json<Value> {
    Json(json!({ "live": true }))
}

pub async fn ready(State(platform): State<Arc<Platform>>) -> Response {
    let ready = platform.is_ready();
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(json!({ "ready": ready }))).into_response()
}

pub async fn server_metadata(_caller: Caller) -> Json<Value> {
    Json(json!({ "name": "sluice", "version": env!("CARGO_PKG_VERSION"), "extensions": [] }))
}

async fn record(
    platform: Arc<Platform>,
    tenant: String,
    name: String,
) -> Result<crate::platform::FunctionInfo, HttpError> {
    Ok(blocking(move || platform.function_info(&tenant, &name)).await?)
}

pub async fn model_metadata(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> Result<Json<Value>, HttpError> {
    let info = record(platform, tenant, name).await?;
    let versions: Vec<String> = info.record.versions.iter().map(|v| v.version.to_string()).collect();
    // Components do not declare their tensors, so inputs/outputs are unknown here.
    Ok(Json(json!({
        "name": info.record.name,
        "versions": versions,
        "platform": "sluice_wasm_component",
        "inputs": [],
        "outputs": [],
    })))
}

pub async fn model_ready(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> Result<Response, HttpError> {
    let info = record(platform.clone(), tenant, name).await?;
    let ready = info.loaded.is_some() && platform.is_ready();
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    Ok((status, Json(json!({ "name": info.record.name, "ready": ready }))).into_response())
}

pub async fn infer(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    run(&platform, &tenant, &name, &body?).await
}
