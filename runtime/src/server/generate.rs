//! The Open Inference Protocol's generate extension (Triton's): `POST
//! /v2/models/{name}[/versions/{v}]/generate` and `.../generate_stream`.
//!
//! The request is one JSON object: each key an input, its value a string, a number or an
//! array of them (typed as [`oip::generate::json_input`] says), and `parameters`, the
//! request's parameters (`priority`, `timeout`, as for `/infer`). A parameter named like
//! an optional input of the generation contract (`max_tokens`, `temperature`, `top_p`,
//! `seed`, `stop`) becomes that input unless the body gives it as an input, and unless
//! the function declares a signature without it.
//!
//! `generate` answers one JSON object: `model_name`, `model_version` and every output by
//! name (one element as a scalar, more as an array). `generate_stream` answers
//! server-sent events, one `data: {json}` per chunk the function emits (the chunk's
//! outputs, by name), then a last one with the function's final outputs other than
//! `text_output` (so that the `text_output`s of the events, concatenated, are the text).
//! An error before the first event is an ordinary JSON error response; one after it is a
//! last event `data: {"error": ..., "code": ...}`. A client that closes the connection
//! cancels the invocation ([`super::streamed`]).

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::auth::TenantCaller;
use super::error::HttpError;
use super::streamed::{self, StreamEvent};
use super::v2::version;
use crate::oip::generate::{OPTIONS, TEXT_OUTPUT, json_input, outputs_object};
use crate::oip::{self, InferRequest};
use crate::platform::Platform;

/// A generate request decoded for `tenant/name`, with the version that will serve it.
struct Decoded {
    request: InferRequest,
    version: String,
}

async fn decode(
    platform: &Arc<Platform>,
    tenant: &str,
    name: &str,
    version: Option<u32>,
    body: &[u8],
) -> Result<Decoded, HttpError> {
    // Parsed into a `Value` (its inputs are few and small): its bound is charged first.
    let bound = body.len() as u64 + oip::json_request::value_tree_bound(body);
    let _held = platform.reserve_host_memory(tenant, bound, "decoding the request")?;
    let value: Value =
        serde_json::from_slice(body).map_err(|e| HttpError::bad_request(format!("the body is not JSON: {e}")))?;
    let Value::Object(body) = value else {
        return Err(HttpError::bad_request("the body must be a JSON object: input names → values, and `parameters`"));
    };
    let info = oip::model(platform, tenant, name, version).await?;
    let declared = |input: &str| {
        let spec = info.signature.as_ref().map(|s| s.inputs.iter().find(|i| i.name == input));
        match spec {
            None => Some(None),                                    // no signature: any input
            Some(Some(spec)) => Some(Some(spec.datatype.clone())), // declared
            Some(None) => None,                                    // not in the signature
        }
    };
    let mut parameters = match body.get("parameters") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p.clone(),
        Some(_) => return Err(HttpError::bad_request("\"parameters\" must be an object")),
    };
    let mut inputs = Vec::new();
    for (key, value) in &body {
        if key == "parameters" {
            continue;
        }
        let datatype = declared(key).flatten();
        inputs.push(json_input(key, value, datatype.as_deref()).map_err(|e| HttpError::bad_request(e.0))?);
    }
    for (option, _) in OPTIONS {
        let Some(value) = parameters.remove(option) else { continue };
        if body.contains_key(option) {
            continue;
        }
        if let Some(datatype) = declared(option) {
            inputs.push(json_input(option, &value, datatype.as_deref()).map_err(|e| HttpError::bad_request(e.0))?);
        }
    }
    let parameters = oip::json::parse_parameters(Some(&Value::Object(parameters)), "the request")
        .map_err(|e| HttpError::bad_request(e.0))?;
    Ok(Decoded {
        request: InferRequest { id: None, inputs, outputs: Vec::new(), parameters },
        version: info.version.version.to_string(),
    })
}

async fn generate_once(
    platform: Arc<Platform>,
    tenant: String,
    name: String,
    version: Option<u32>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, HttpError> {
    let decoded = decode(&platform, &tenant, &name, version, &body?).await?;
    let response = oip::infer(&platform, &tenant, &name, version, decoded.request).await?;
    let outputs = response.outputs.iter().map(|(t, _)| t);
    Ok(Json(outputs_object(&name, response.model_version.as_deref(), outputs)))
}

async fn generate_stream_of(
    platform: Arc<Platform>,
    tenant: String,
    name: String,
    version: Option<u32>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    let decoded = decode(&platform, &tenant, &name, version, &body?).await?;
    let (first, rest) = streamed::start(&platform, &tenant, &name, version, decoded.request).await;
    let first = match first {
        StreamEvent::Done(result, held) => StreamEvent::Done(Box::new(Ok((*result)?)), held),
        chunk => chunk,
    };
    let model_version = decoded.version;
    let events = tokio_stream::once(first).chain(UnboundedReceiverStream::new(rest)).map(move |event| {
        let data = match event {
            // The event's bytes are given back as it goes to the connection.
            StreamEvent::Chunk(chunk) => outputs_object(&name, Some(&model_version), chunk.iter()),
            StreamEvent::Done(result, _held) => match *result {
                Ok(response) => {
                    let outputs = response.outputs.iter().map(|(t, _)| t).filter(|t| t.name != TEXT_OUTPUT);
                    outputs_object(&name, response.model_version.as_deref(), outputs)
                }
                Err(e) => {
                    let e = HttpError::from(e);
                    json!({ "error": e.message, "code": e.code.as_str() })
                }
            },
        };
        Ok::<_, Infallible>(Event::default().data(data.to_string()))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// `POST /v2/models/{name}/generate`.
pub async fn generate(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, HttpError> {
    generate_once(platform, tenant, name, None, body).await
}

/// `POST /v2/models/{name}/versions/{v}/generate`.
pub async fn version_generate(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path((name, v)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, HttpError> {
    let v = version(&name, &v)?;
    generate_once(platform, tenant, name, Some(v), body).await
}

/// `POST /v2/models/{name}/generate_stream`.
pub async fn generate_stream(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    generate_stream_of(platform, tenant, name, None, body).await
}

/// `POST /v2/models/{name}/versions/{v}/generate_stream`.
pub async fn version_generate_stream(
    State(platform): State<Arc<Platform>>,
    TenantCaller(tenant): TenantCaller,
    Path((name, v)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    let v = version(&name, &v)?;
    generate_stream_of(platform, tenant, name, Some(v), body).await
}
