//! The Open Inference Protocol over gRPC (`inference.GRPCInferenceService`, KServe v2),
//! on its own port beside the HTTP API: the same platform, API keys (`authorization`
//! metadata), request-size limit and error codes.
//!
//! [`proto`] holds the generated messages, [`service`] the handlers, [`tensors`] the
//! conversion of tensors (raw contents as the standard clients send them), [`status`]
//! the mapping of errors to gRPC statuses and [`auth`] the key check.

mod auth;
pub mod proto;
mod service;
pub mod status;
pub mod tensors;

use std::sync::Arc;

use tonic::transport::server::TcpIncoming;

use proto::grpc_inference_service_server::GrpcInferenceServiceServer;
pub use service::InferenceService;

use crate::platform::Platform;

/// The service, with requests limited to `max_request_bytes` (decoded messages above
/// it are refused before they are read whole).
pub fn service(platform: Arc<Platform>, max_request_bytes: usize) -> GrpcInferenceServiceServer<InferenceService> {
    GrpcInferenceServiceServer::new(InferenceService::new(platform))
        .max_decoding_message_size(max_request_bytes)
        .max_encoding_message_size(usize::MAX)
}

/// Serves on `listener` until SIGINT or SIGTERM (as [`crate::server::serve`] does),
/// logging a failure: `sluice serve` runs this beside the HTTP server.
pub async fn run(listener: tokio::net::TcpListener, platform: Arc<Platform>, max_request_bytes: usize) {
    if let Err(e) = serve(listener, platform, max_request_bytes, super::shutdown_signal()).await {
        tracing::error!(error = %e, "the gRPC server failed");
    }
}

/// Serves the service on `listener` until `shutdown` completes; then stops accepting
/// and lets in-flight calls finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    platform: Arc<Platform>,
    max_request_bytes: usize,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .serve_with_incoming_shutdown(service(platform, max_request_bytes), incoming, shutdown)
        .await
}
