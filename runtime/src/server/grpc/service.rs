//! `inference.GRPCInferenceService` over a [`Platform`]: the same models, versions,
//! keys, limits and errors as the HTTP Open Inference Protocol endpoints, through the
//! same entry points ([`oip::infer`], [`oip::model`]).
//!
//! Liveness and readiness need no key (like `/v2/health/*`), server metadata any key,
//! everything about models a tenant's key; a tenant's functions are its models, each
//! version a model version (an empty version: the serving one).

use std::sync::Arc;

use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};

use super::proto::grpc_inference_service_server::GrpcInferenceService;
use super::proto::model_metadata_response::TensorMetadata;
use super::proto::*;
use super::status::{bad_request, platform_status};
use super::tensors::model_ref;
use super::{auth, repository, tensors};
use crate::engine::TensorSpec;
use crate::oip::{self, ModelInfo};
use crate::platform::{FunctionStats, Platform, Timed};
use crate::server::v2::EXTENSIONS;

/// What `platform` says in model metadata and configuration.
const PLATFORM: &str = "sluice_wasm_component";

/// The service; cheap to clone.
#[derive(Clone)]
pub struct InferenceService {
    platform: Arc<Platform>,
}

impl InferenceService {
    pub fn new(platform: Arc<Platform>) -> Self {
        InferenceService { platform }
    }

    async fn model(&self, tenant: &str, name: &str, version: &str) -> Result<ModelInfo, Status> {
        let v = model_ref(name, version)?;
        oip::model(&self.platform, tenant, name, v).await.map_err(platform_status)
    }
}

fn tensor_metadata(specs: &[TensorSpec]) -> Vec<TensorMetadata> {
    specs
        .iter()
        .map(|s| TensorMetadata { name: s.name.clone(), datatype: s.datatype.clone(), shape: s.shape.clone() })
        .collect()
}

/// Triton's element type of a datatype name (the names [`oip::triton_data_type`] gives).
fn triton_type(datatype: &str) -> DataType {
    DataType::from_str_name(&oip::triton_data_type(datatype)).unwrap_or(DataType::TypeInvalid)
}

/// Triton's statistics of one function over all its versions (`version` is empty), as
/// `GET /v2/models/{name}/stats` reports them.
fn model_statistics(name: String, s: FunctionStats) -> ModelStatistics {
    let timed = |t: Timed| Some(StatisticDuration { count: t.count, ns: t.ns });
    ModelStatistics {
        name,
        version: String::new(),
        last_inference: s.last_inference_ms,
        inference_count: s.success.count,
        execution_count: s.success.count,
        inference_stats: Some(InferStatistics {
            success: timed(s.success),
            fail: timed(s.fail),
            queue: timed(s.queue),
            compute_infer: timed(s.compute),
            ..Default::default()
        }),
    }
}

/// The configuration Triton's tooling reads, as far as sluice knows it: the version's
/// dynamic batch size (0 when it runs each request alone, and then dims are full
/// shapes), and its inputs and outputs are its declared signature (none declared:
/// empty lists).
fn model_config(name: String, info: &ModelInfo) -> ModelConfig {
    let signature = info.signature.clone().unwrap_or_default();
    let max_batch_size = crate::oip::triton_max_batch_size(&info.version);
    ModelConfig {
        name,
        platform: PLATFORM.into(),
        backend: "sluice".into(),
        max_batch_size: max_batch_size as i32,
        input: signature
            .inputs
            .iter()
            .map(|s| ModelInput {
                name: s.name.clone(),
                data_type: triton_type(&s.datatype).into(),
                dims: crate::oip::triton_dims(&s.shape, max_batch_size),
                optional: s.optional,
            })
            .collect(),
        output: signature
            .outputs
            .iter()
            .map(|s| ModelOutput {
                name: s.name.clone(),
                data_type: triton_type(&s.datatype).into(),
                dims: crate::oip::triton_dims(&s.shape, max_batch_size),
            })
            .collect(),
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
            extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        }))
    }

    async fn model_ready(&self, request: Request<ModelReadyRequest>) -> Result<Response<ModelReadyResponse>, Status> {
        let tenant = auth::tenant(&self.platform, request.metadata())?;
        let ModelReadyRequest { name, version } = request.into_inner();
        let info = self.model(&tenant, &name, &version).await?;
        Ok(Response::new(ModelReadyResponse { ready: info.ready }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let tenant = auth::tenant(&self.platform, request.metadata())?;
        let ModelMetadataRequest { name, version } = request.into_inner();
        let info = self.model(&tenant, &name, &version).await?;
        let signature = info.signature.unwrap_or_default();
        let versions = match version.is_empty() {
            true => info.versions.iter().map(u32::to_string).collect(),
            false => vec![info.version.version.to_string()],
        };
        Ok(Response::new(ModelMetadataResponse {
            name,
            versions,
            platform: PLATFORM.into(),
            inputs: tensor_metadata(&signature.inputs),
            outputs: tensor_metadata(&signature.outputs),
            ..Default::default()
        }))
    }

    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Result<Response<ModelInferResponse>, Status> {
        let tenant = auth::tenant(&self.platform, request.metadata())?;
        let request = request.into_inner();
        let (name, version) = (request.model_name.clone(), model_ref(&request.model_name, &request.model_version)?);
        let request = tensors::decode_request(request).map_err(|e| bad_request(e.0))?;
        let response = oip::infer(&self.platform, &tenant, &name, version, request).await.map_err(platform_status)?;
        let timing = response.timing;
        let mut response = Response::new(tensors::encode_response(response));
        let metadata = response.metadata_mut();
        let us = |d: std::time::Duration| MetadataValue::from(d.as_micros() as u64);
        metadata.insert("x-sluice-queue-us", us(timing.queue));
        metadata.insert("x-sluice-instantiate-us", us(timing.instantiate));
        metadata.insert("x-sluice-execute-us", us(timing.execute));
        metadata.insert("x-sluice-instance", MetadataValue::from_static(if timing.warm { "warm" } else { "fresh" }));
        metadata.insert("x-sluice-batch-size", MetadataValue::from(timing.batch.max(1)));
        Ok(response)
    }

    type ModelStreamInferStream = tokio_stream::wrappers::ReceiverStream<Result<ModelStreamInferResponse, Status>>;

    async fn model_stream_infer(
        &self,
        request: Request<tonic::Streaming<ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        let (tenant, key) = auth::stream_tenant(&self.platform, request.metadata())?;
        Ok(Response::new(super::stream::respond(self.platform.clone(), tenant, key, request.into_inner())))
    }

    async fn model_config(
        &self,
        request: Request<ModelConfigRequest>,
    ) -> Result<Response<ModelConfigResponse>, Status> {
        let tenant = auth::tenant(&self.platform, request.metadata())?;
        let ModelConfigRequest { name, version } = request.into_inner();
        let info = self.model(&tenant, &name, &version).await?;
        Ok(Response::new(ModelConfigResponse { config: Some(model_config(name, &info)) }))
    }

    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Result<Response<ModelStatisticsResponse>, Status> {
        let tenant = auth::tenant(&self.platform, request.metadata())?;
        let ModelStatisticsRequest { name, version } = request.into_inner();
        let mut stats = if name.is_empty() {
            self.platform.function_stats(&tenant, None)
        } else {
            // A model that does not exist (or a version it does not have) is a 404.
            self.model(&tenant, &name, &version).await?;
            let stats = self.platform.function_stats(&tenant, Some(&name));
            if stats.is_empty() { vec![(name, FunctionStats::default())] } else { stats }
        };
        let model_stats = stats.drain(..).map(|(name, s)| model_statistics(name, s)).collect();
        Ok(Response::new(ModelStatisticsResponse { model_stats }))
    }

    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Result<Response<RepositoryIndexResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        repository::index(&self.platform, &metadata, request).await
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Result<Response<RepositoryModelLoadResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        repository::load(&self.platform, &metadata, request).await
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Result<Response<RepositoryModelUnloadResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        repository::unload(&self.platform, &metadata, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_numbers_or_do_not_exist() {
        assert_eq!(model_ref("m", "").unwrap(), None);
        assert_eq!(model_ref("m", "3").unwrap(), Some(3));
        assert_eq!(model_ref("m", "latest").unwrap_err().code(), tonic::Code::NotFound);
        assert_eq!(model_ref("", "").unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn every_datatype_has_its_triton_type() {
        for datatype in oip::DATATYPES {
            assert_ne!(triton_type(datatype), DataType::TypeInvalid, "{datatype}");
        }
        assert_eq!(triton_type("BYTES"), DataType::TypeString);
    }
}
