//! `/v1/tenants`: the admin key creates, lists, changes and deletes tenants and issues
//! their keys; a tenant's key reads its own entry (`GET /v1/tenants/{its id}`).
//!
//! `PATCH /v1/tenants/{id}` (admin) changes a tenant's policy by a JSON merge patch of
//! its settings: `{"max_priority": "latency", "weight": 4, "memory_quota_bytes": null}`
//! sets the class ceiling and the weight and resets the quota to the server's default.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_registry::TenantSettings;

use sluice_registry::Principal;

use super::auth::{AdminCaller, Caller};
use super::error::{HttpError, blocking_for_admin};
use crate::platform::Platform;

/// Body of `POST /v1/tenants`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    id: String,
    #[serde(default)]
    settings: TenantSettings,
    /// Also issue a first API key (default true).
    #[serde(default = "yes")]
    issue_key: bool,
}

fn yes() -> bool {
    true
}

pub async fn create(
    State(platform): State<Arc<Platform>>,
    _admin: AdminCaller,
    body: Result<Json<CreateTenant>, JsonRejection>,
) -> Result<Response, HttpError> {
    let Json(req) = body?;
    let out = blocking_for_admin(move || {
        let tenant = platform.create_tenant(&req.id, req.settings)?;
        let key = if req.issue_key { Some(platform.issue_key(&req.id)?) } else { None };
        Ok((tenant, key))
    })
    .await?;
    let (tenant, key) = out;
    let mut body = json!({ "tenant": tenant });
    if let Some(k) = key {
        body["key_id"] = json!(k.key_id);
        body["key"] = json!(k.key);
    }
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

pub async fn list(State(platform): State<Arc<Platform>>, _admin: AdminCaller) -> Result<Json<Value>, HttpError> {
    let tenants = blocking_for_admin(move || platform.list_tenants()).await?;
    Ok(Json(json!({ "tenants": tenants })))
}

pub async fn get(
    State(platform): State<Arc<Platform>>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, HttpError> {
    // A tenant reads only itself; another id is "not found", as for functions.
    if matches!(&caller, Principal::Tenant(me) if *me != id) {
        return Err(HttpError::new(sluice_host_api::Code::NotFound, format!("tenant {id:?} not found")));
    }
    let view = blocking_for_admin(move || Ok(platform.tenant_view(platform.get_tenant(&id)?))).await?;
    Ok(Json(json!(view)))
}

pub async fn change(
    State(platform): State<Arc<Platform>>,
    _admin: AdminCaller,
    Path(id): Path<String>,
    body: Result<Json<serde_json::Map<String, Value>>, JsonRejection>,
) -> Result<Json<Value>, HttpError> {
    let Json(patch) = body?;
    let view = blocking_for_admin(move || Ok(platform.tenant_view(platform.change_tenant(&id, &patch)?))).await?;
    Ok(Json(json!(view)))
}

pub async fn delete(
    State(platform): State<Arc<Platform>>,
    _admin: AdminCaller,
    Path(id): Path<String>,
) -> Result<StatusCode, HttpError> {
    blocking_for_admin(move || platform.delete_tenant(&id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn issue_key(
    State(platform): State<Arc<Platform>>,
    _admin: AdminCaller,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    let key = blocking_for_admin(move || platform.issue_key(&id)).await?;
    Ok((StatusCode::CREATED, Json(json!(key))).into_response())
}

pub async fn list_keys(
    State(platform): State<Arc<Platform>>,
    _admin: AdminCaller,
    Path(id): Path<String>,
) -> Result<Json<Value>, HttpError> {
    let keys = blocking_for_admin(move || platform.list_keys(&id)).await?;
    Ok(Json(json!({ "keys": keys })))
}

pub async fn revoke_key(
    State(platform): State<Arc<Platform>>,
    _admin: AdminCaller,
    Path((id, key_id)): Path<(String, String)>,
) -> Result<StatusCode, HttpError> {
    blocking_for_admin(move || platform.revoke_key(&id, &key_id)).await?;
    Ok(StatusCode::NO_CONTENT)
}
