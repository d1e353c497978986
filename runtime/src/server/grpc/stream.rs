//! `ModelStreamInfer`, Triton's decoupled streaming over gRPC: the requests of one stream
//! run in turn, each as a streamed invocation ([`crate::server::streamed`]); every chunk
//! the function emits is sent at once as a `ModelInferResponse` with the parameter
//! `triton_final_response` false, then the final outputs with it true, or an
//! `error_message` (the stream goes on with the next request). When the client closes
//! the stream, the invocation running is cancelled. The key is checked again before
//! each request and each response: once it is revoked, the stream ends with
//! UNAUTHENTICATED and the invocation running is cancelled.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::auth::unknown_key;
use super::proto::{ModelInferRequest, ModelInferResponse, ModelStreamInferResponse, infer_parameter};
use super::status::{bad_request, platform_status};
use super::tensors::{self, model_ref};
use crate::engine::QueuedChunk;
use crate::oip::{InferResponse, InferTiming, Parameters};
use crate::platform::{KeyCheck, Platform};
use crate::server::streamed::{self, StreamEvent};

/// The parameter that tells a chunk (false) from the final response (true).
pub const FINAL_RESPONSE: &str = "triton_final_response";

/// Responses a client may leave unread in tonic's channel (the stream's room bounds the
/// bytes queued before it: an event gives its bytes back once it is in this channel).
const RESPONSES_BUFFERED: usize = 1;

/// The stream of responses to `requests` from `tenant`.
pub fn respond(
    platform: Arc<Platform>,
    tenant: String,
    mut key: KeyCheck,
    mut requests: Streaming<ModelInferRequest>,
) -> ReceiverStream<Result<ModelStreamInferResponse, Status>> {
    let (tx, rx) = mpsc::channel(RESPONSES_BUFFERED);
    tokio::spawn(async move {
        while let Ok(Some(request)) = requests.message().await {
            if !run_one(&platform, &tenant, &mut key, request, &tx).await {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// Ends the stream with UNAUTHENTICATED if its key was revoked; false then.
async fn key_valid(
    platform: &Platform,
    key: &mut KeyCheck,
    tx: &mpsc::Sender<Result<ModelStreamInferResponse, Status>>,
) -> bool {
    if platform.still_valid(key) {
        return true;
    }
    let _ = tx.send(Err(unknown_key())).await;
    false
}

fn error(message: String) -> ModelStreamInferResponse {
    ModelStreamInferResponse { error_message: message, infer_response: None }
}

/// Marks a response as a chunk or the final one.
fn flagged(mut response: ModelInferResponse, last: bool) -> ModelStreamInferResponse {
    let value = infer_parameter::ParameterChoice::BoolParam(last);
    response.parameters.insert(FINAL_RESPONSE.into(), super::proto::InferParameter { parameter_choice: Some(value) });
    ModelStreamInferResponse { error_message: String::new(), infer_response: Some(response) }
}

/// Runs one request, sending its responses; false once the client is gone or the key revoked.
async fn run_one(
    platform: &Arc<Platform>,
    tenant: &str,
    key: &mut KeyCheck,
    request: ModelInferRequest,
    tx: &mpsc::Sender<Result<ModelStreamInferResponse, Status>>,
) -> bool {
    if !key_valid(platform, key, tx).await {
        return false;
    }
    let (name, id) = (request.model_name.clone(), request.id.clone());
    let decoded = model_ref(&request.model_name, &request.model_version)
        .and_then(|v| Ok((v, tensors::decode_request(request).map_err(|e| bad_request(e.0))?)));
    let (version, request) = match decoded {
        Ok(decoded) => decoded,
        Err(status) => return tx.send(Ok(error(status.message().to_owned()))).await.is_ok(),
    };
    let (first, mut rest) = streamed::start(platform, tenant, &name, version, request).await;
    let mut event = Some(first);
    while let Some(e) = event.take() {
        // Each event holds its bytes in the stream's room until tonic has taken it.
        let (response, _held) = match e {
            StreamEvent::Chunk(QueuedChunk { chunk, held }) => {
                let response = InferResponse {
                    model_name: name.clone(),
                    model_version: None,
                    id: (!id.is_empty()).then(|| id.clone()),
                    outputs: chunk.into_iter().map(|t| (t, Parameters::new())).collect(),
                    timing: InferTiming::default(),
                };
                (flagged(tensors::encode_response(response), false), Some(held))
            }
            StreamEvent::Done(result, held) => match *result {
                Ok(response) => (flagged(tensors::encode_response(response), true), held),
                Err(e) => (error(platform_status(e).message().to_owned()), held),
            },
        };
        // Returning drops `rest`, which cancels the invocation.
        if !key_valid(platform, key, tx).await || tx.send(Ok(response)).await.is_err() {
            return false;
        }
        event = rest.recv().await;
    }
    true
}
