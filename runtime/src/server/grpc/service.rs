//! `inference.GRPCInferenceService` over a [`Platform`]: the same models, keys, limits
//! and errors as the HTTP Open Inference Protocol endpoints.
//!
//! Liveness and readiness need no key (like `/v2/health/*`), server metadata any key,
//! everything about models a tenant's key; a tenant's functions are its models.

use std::sync::Arc;

use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};

use super::proto::grpc_inference_service_server::GrpcInferenceService;
use super::proto::*;
use super::status::{bad_request, platform_status, status};
use super::{auth, tensors};
use crate::platform::{FunctionInfo, Invocation, Platform};
use crate::server::error::{HttpError, blocking};
use sluice_host_api::Code;

/// The service; cheap to clone.
#[derive(Clone)]
pub struct InferenceService {
    platform: Arc<Platform>,
}

impl InferenceService {
    pub fn new(platform: Arc<Platform>) -> Self {
        InferenceService { platform }
    }

    /// The record of the caller's model `name`, and, when `version` is not empty, a
    /// check that it is one of its versions.
    async fn model(&self, tenant: String, name: String, version: &str) -> Result<FunctionInfo, Status> {
        if name.is_empty() {
            return Err(bad_request("the request needs a model name"));
        }
        let platform = self.platform.clone();
        let info = blocking(move || platform.function_info(&tenant, &name)).await.map_err(platform_status)?;
        if !version.is_empty() && !info.record.versions.iter().any(|v| v.version.to_string() == version) {
            return Err(status(HttpError::new(
                Code::NotFound,
                format!("model {:?} has no version {version:?}", info.record.name),
            )));
        }
        Ok(info)
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for InferenceService {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(&self, _: Request<ServerReadyRequest>) -> Result<Response<ServerReadyResponse>, Status> {
        Ok(Response::new(ServerReadyResponse { ready: self.platform.is_ready() }))
    }

    async fn server_metadata(
        &self,
        request: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        auth::caller(&self.platform, request.metadata())?;
        Ok(Response::new(ServerMetadataResponse {
            name: "sluice".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: Vec::new(),
        }))
    }

    async fn model_ready(&self, request: Request<ModelReadyRequest>) -> Result<Response<ModelReadyResponse>, Status> {
        let tenant = auth::tenant(&self.platform, request.metadata())?;
        let ModelReadyRequest { name, version } = request.into_inner();
        let info = self.model(tenant, name, &version).await?;
        let serving = info.loaded.as_ref().map(|l| l.version.to_string());
        let ready = self.platform.is_ready() && serving.is_some_and(|s| version.is_empty() || s == version);
        Ok(Response::new(ModelReadyResponse { ready }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let tenant = auth::tenant(&self.platform, request.metadata())?;
        let ModelMetadataRequest { name, version } = request.into_inner();
        let info = self.model(tenant, name, &version).await?;
        Ok(Response::new(ModelMetadataResponse {
            name: info.record.name.clone(),
            versions: info.record.versions.iter().map(|v| v.version.to_string()).collect(),
            platform: "sluice_wasm_component".into(),
            ..Default::default()
        }))
    }

    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Result<Response<ModelInferResponse>, Status> {
        let tenant = auth::tenant(&self.platform, request.metadata())?;
        let request = request.into_inner();
        if request.model_name.is_empty() {
            return Err(bad_request("the request needs a model_name"));
        }
        let inputs = tensors::decode_inputs(&request).map_err(|e| bad_request(e.0))?;
        let Invocation { function, output, queue } =
            self.platform.invoke(&tenant, &request.model_name, inputs).await.map_err(platform_status)?;
        let (outputs, raw_output_contents) = tensors::encode_outputs(&output.outputs);
        let mut response = Response::new(ModelInferResponse {
            model_name: request.model_name,
            model_version: function.version.version.to_string(),
            id: request.id,
            outputs,
            raw_output_contents,
            ..Default::default()
        });
        let metadata = response.metadata_mut();
        let us = |d: std::time::Duration| MetadataValue::from(d.as_micros() as u64);
        metadata.insert("x-sluice-queue-us", us(queue));
        metadata.insert("x-sluice-instantiate-us", us(output.instantiate));
        metadata.insert("x-sluice-execute-us", us(output.execute));
        metadata.insert("x-sluice-instance", MetadataValue::from_static(if output.warm { "warm" } else { "fresh" }));
        Ok(response)
    }

    async fn model_config(
        &self,
        request: Request<ModelConfigRequest>,
    ) -> Result<Response<ModelConfigResponse>, Status> {
        auth::tenant(&self.platform, request.metadata())?;
        Err(Status::unimplemented("sluice does not serve model configuration over gRPC yet"))
    }

    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Result<Response<ModelStatisticsResponse>, Status> {
        auth::tenant(&self.platform, request.metadata())?;
        Err(Status::unimplemented("sluice does not serve model statistics over gRPC yet"))
    }
}
