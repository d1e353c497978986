//! The model-repository extension of KServe v2 / Triton over HTTP, as KServe's model
//! agent (TrainedModel) and Triton-style tooling drive it:
//!
//! - `POST /v2/repository/index` (body optional, `{"ready": true}` for serving models
//!   only): `[{"name", "version", "state", "reason"}]`;
//! - `POST /v2/repository/models/{name}/load` (body optional): deploys the bundle
//!   `<model dir>/{name}/` (`crate::platform::bundle`) as the function `{name}`;
//! - `POST /v2/repository/models/{name}/unload`: undeploys it.
//!
//! Any key: a tenant's sees and loads only bundles its manifest gives to it, the admin's
//! every bundle (loaded for the tenant the manifest names). With `sluice serve
//! --keyless-local-repository`, a call without a key from a local process that no proxy
//! forwarded acts as the admin (KServe's model agent sends no key; `auth`). A body is JSON; of the
//! protocol's parameters sluice takes none that change a load (a bundle says all), so
//! a `parameters` object must be empty, except Triton's `unload_dependents` on unload.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::auth::RepositoryCaller;
use super::error::{HttpError, blocking};
use crate::platform::{IndexEntry, LOAD_PARAMETERS, Platform, UNLOAD_PARAMETERS, check_parameters};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct IndexRequest {
    #[serde(default)]
    ready: bool,
    /// Triton's repository name; sluice has one repository.
    #[serde(default)]
    #[allow(dead_code)]
    repository_name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ModelRequest {
    #[serde(default)]
    parameters: Map<String, Value>,
}

/// The JSON body, or the default for an empty one.
fn body_or_default<T: for<'de> Deserialize<'de> + Default>(body: &[u8]) -> Result<T, HttpError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| HttpError::bad_request(format!("the request body is not valid: {e}")))
}

pub async fn index(
    State(platform): State<Arc<Platform>>,
    RepositoryCaller(who): RepositoryCaller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Vec<IndexEntry>>, HttpError> {
    let request: IndexRequest = body_or_default(&body?)?;
    Ok(Json(blocking(move || platform.repository_index(&who, request.ready)).await?))
}

pub async fn load(
    State(platform): State<Arc<Platform>>,
    RepositoryCaller(who): RepositoryCaller,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, HttpError> {
    let request: ModelRequest = body_or_default(&body?)?;
    check_parameters(request.parameters.keys(), LOAD_PARAMETERS)?;
    let loaded = blocking(move || {
        let bundle = platform.repository_bundle(&who, &name)?;
        platform.load_bundle(&bundle)
    })
    .await?;
    tracing::debug!(?loaded, "repository load");
    Ok(Json(json!({})))
}

pub async fn unload(
    State(platform): State<Arc<Platform>>,
    RepositoryCaller(who): RepositoryCaller,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, HttpError> {
    let request: ModelRequest = body_or_default(&body?)?;
    check_parameters(request.parameters.keys(), UNLOAD_PARAMETERS)?;
    blocking(move || platform.unload(&who, &name)).await?;
    Ok(Json(json!({})))
}
