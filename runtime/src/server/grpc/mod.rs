//! The Open Inference Protocol over gRPC (`inference.GRPCInferenceService`, KServe v2),
//! on its own port beside the HTTP API: the same platform, API keys (`authorization`
//! metadata), request-size limit and error codes.
//!
//! [`proto`] holds the generated messages, `service` the handlers, [`tensors`] the
//! conversion of tensors (raw contents as the standard clients send them), [`status`]
//! the mapping of errors to gRPC statuses, `auth` the key check and `stream` Triton's
//! decoupled `ModelStreamInfer` (a generation's chunks as responses), `repository` the
//! model-repository extension. The HTTP port serves the same service too ([`ROUTE`]).

mod auth;
pub mod proto;
mod repository;
mod service;
pub mod status;
mod stream;
pub mod tensors;

use std::sync::Arc;

use axum::http::{HeaderValue, Response};
use tonic::body::Body;
use tonic::transport::server::TcpIncoming;

use proto::grpc_inference_service_server::GrpcInferenceServiceServer;
pub use service::InferenceService;

use crate::platform::Platform;

/// The path prefix of the service's methods, under which the HTTP port serves it too.
pub const ROUTE: &str = "/inference.GRPCInferenceService/{*method}";

/// The service, with requests limited to `max_request_bytes` (decoded messages above
/// it are refused before they are read whole).
pub fn service(platform: Arc<Platform>, max_request_bytes: usize) -> GrpcInferenceServiceServer<InferenceService> {
    GrpcInferenceServiceServer::new(InferenceService::new(platform))
        .max_decoding_message_size(max_request_bytes)
        .max_encoding_message_size(usize::MAX)
}

/// Serves on `listener` until `drain_delay` after SIGINT or SIGTERM (as
/// [`crate::server::serve_with`] does), logging a failure: `sluice serve` runs this
/// beside the HTTP server.
pub async fn run(
    listener: tokio::net::TcpListener,
    platform: Arc<Platform>,
    max_request_bytes: usize,
    drain_delay: std::time::Duration,
) {
    let shutdown = async move {
        super::shutdown_signal().await;
        tokio::time::sleep(drain_delay).await;
    };
    if let Err(e) = serve(listener, platform, max_request_bytes, shutdown).await {
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
        .layer(tower::util::MapResponseLayer::new(oversize_as_resource_exhausted as fn(_) -> _))
        .serve_with_incoming_shutdown(service(platform, max_request_bytes), incoming, shutdown)
        .await
}

/// tonic refuses a request message above the decoding limit with OUT_OF_RANGE; gRPC's
/// convention (grpc-go, grpc-core) and the HTTP side's 413 say RESOURCE_EXHAUSTED, with
/// the `payload_too_large` code. sluice's own statuses never use OUT_OF_RANGE
/// ([`status::grpc_code`]), so the status in a trailers-only response (the form of an
/// error before any message) that has it is tonic's limit, and is rewritten here.
pub(crate) fn oversize_as_resource_exhausted(mut response: Response<Body>) -> Response<Body> {
    let headers = response.headers_mut();
    let out_of_range = (tonic::Code::OutOfRange as i32).to_string();
    if headers.get("grpc-status").is_some_and(|v| v.as_bytes() == out_of_range.as_bytes()) {
        let code = sluice_host_api::Code::PayloadTooLarge;
        headers.insert("grpc-status", HeaderValue::from(status::grpc_code(code) as i32));
        headers.insert(status::CODE_KEY, HeaderValue::from_static(code.as_str()));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decoding_limit_becomes_resource_exhausted_and_nothing_else_changes() {
        let status = tonic::Status::out_of_range("Error, decoded message length too large");
        let rewritten = oversize_as_resource_exhausted(status.into_http());
        let back = tonic::Status::from_header_map(rewritten.headers()).unwrap();
        assert_eq!(back.code(), tonic::Code::ResourceExhausted);
        assert_eq!(back.metadata().get(status::CODE_KEY).unwrap(), "payload_too_large");
        assert!(back.message().contains("too large"), "{}", back.message());

        let untouched = oversize_as_resource_exhausted(tonic::Status::not_found("x").into_http());
        assert_eq!(tonic::Status::from_header_map(untouched.headers()).unwrap().code(), tonic::Code::NotFound);
        for code in sluice_host_api::Code::ALL {
            assert_ne!(status::grpc_code(code), tonic::Code::OutOfRange, "{code}");
        }
    }
}
