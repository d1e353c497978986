//! The model-repository extension over gRPC (`RepositoryIndex`, `RepositoryModelLoad`,
//! `RepositoryModelUnload`), as the HTTP side serves it (`crate::server` docs): the same
//! platform calls, keys and errors. Of the requests' parameters only Triton's
//! `unload_dependents` (on unload) is taken, and changes nothing.

use std::sync::Arc;

use tonic::metadata::MetadataMap;
use tonic::{Response, Status};

use super::auth;
use super::proto::repository_index_response::ModelIndex;
use super::proto::*;
use super::status::platform_status;
use crate::platform::{LOAD_PARAMETERS, Platform, UNLOAD_PARAMETERS, check_parameters};
use crate::server::error::blocking;

pub async fn index(
    platform: &Arc<Platform>,
    metadata: &MetadataMap,
    request: RepositoryIndexRequest,
) -> Result<Response<RepositoryIndexResponse>, Status> {
    let who = auth::caller(platform, metadata)?;
    let p = platform.clone();
    let entries = blocking(move || p.repository_index(&who, request.ready)).await.map_err(platform_status)?;
    let models = entries
        .into_iter()
        .map(|e| ModelIndex { name: e.name, version: e.version, state: e.state.into(), reason: e.reason })
        .collect();
    Ok(Response::new(RepositoryIndexResponse { models }))
}

pub async fn load(
    platform: &Arc<Platform>,
    metadata: &MetadataMap,
    request: RepositoryModelLoadRequest,
) -> Result<Response<RepositoryModelLoadResponse>, Status> {
    let who = auth::caller(platform, metadata)?;
    check_parameters(request.parameters.keys(), LOAD_PARAMETERS).map_err(platform_status)?;
    let p = platform.clone();
    blocking(move || {
        let bundle = p.repository_bundle(&who, &request.model_name)?;
        p.load_bundle(&bundle)
    })
    .await
    .map_err(platform_status)?;
    Ok(Response::new(RepositoryModelLoadResponse {}))
}

pub async fn unload(
    platform: &Arc<Platform>,
    metadata: &MetadataMap,
    request: RepositoryModelUnloadRequest,
) -> Result<Response<RepositoryModelUnloadResponse>, Status> {
    let who = auth::caller(platform, metadata)?;
    check_parameters(request.parameters.keys(), UNLOAD_PARAMETERS).map_err(platform_status)?;
    let p = platform.clone();
    blocking(move || p.unload(&who, &request.model_name)).await.map_err(platform_status)?;
    Ok(Response::new(RepositoryModelUnloadResponse {}))
}
