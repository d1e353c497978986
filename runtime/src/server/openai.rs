//! OpenAI-compatible text generation: `POST /v1/chat/completions` and `POST
//! /v1/completions`, over functions that follow the generation contract
//! (`docs/generation.md`, [`crate::oip::generate`]). `model` names one of the calling
//! tenant's functions (its serving version); the key is the tenant's, as a Bearer token
//! (what OpenAI clients send).
//!
//! Honoured fields: `model`, `messages` (chat: `{role, content}` with string content) or
//! `prompt` (a string, or an array of one), `stream`, `max_tokens` (or
//! `max_completion_tokens`), `temperature`, `top_p`, `seed`, `stop` (a string or up to 4),
//! and `n` only as 1. Other fields are ignored. They become the contract's inputs.
//!
//! Without `stream` the answer is one `chat.completion` (`text_completion`) object with
//! `usage`. With `stream: true` it is server-sent events: a first chunk with the
//! assistant's role (chat), one chunk per piece of text the function emits, a last
//! chunk with `finish_reason` and `usage`, then `data: [DONE]`. Errors have OpenAI's
//! shape, `{"error": {"message", "type", "param", "code"}}` (the code is sluice's), with
//! sluice's statuses: 4xx for a bad request, an unknown model or a function that does not
//! follow the contract. An error after the stream started is a last event `data:
//! {"error": …}`. A client that closes the connection cancels the generation.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::auth::TenantCaller;
use super::error::HttpError;
use super::streamed::{self, StreamEvent};
use crate::engine::{IoData, IoTensor};
use crate::oip::generate::{self as contract, Generation, chunk_text};
use crate::oip::{self, InferRequest, InferResponse};
use crate::platform::{Platform, PlatformError};

/// An error in OpenAI's shape, with sluice's code and status.
pub struct OpenAiError(HttpError);

macro_rules! into_openai_error {
    ($($t:ty),*) => {$(
        impl From<$t> for OpenAiError {
            fn from(e: $t) -> Self {
                OpenAiError(e.into())
            }
        }
    )*};
}
into_openai_error!(HttpError, PlatformError, BytesRejection);

/// OpenAI's `type` of an error with status `status`.
fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    }
}

fn error_json(e: &HttpError) -> Value {
    json!({ "error": {
        "message": e.message,
        "type": error_type(e.code.status()),
        "param": null,
        "code": e.code.as_str(),
    }})
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let body = error_json(&self.0);
        // The status and headers (Retry-After, WWW-Authenticate) of sluice's own error.
        let mut response = self.0.into_response();
        *response.body_mut() = axum::body::Body::from(body.to_string());
        response.headers_mut().remove(axum::http::header::CONTENT_LENGTH);
        response
    }
}

fn bad(message: impl Into<String>) -> OpenAiError {
    OpenAiError(HttpError::bad_request(message))
}

/// Which endpoint: the shapes of its request and responses differ.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

impl Kind {
    fn object(self, chunk: bool) -> &'static str {
        match (self, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    fn id_prefix(self) -> &'static str {
        match self {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        }
    }

    /// A choice holding `text` (the whole text, or a chunk's piece when `delta`).
    fn choice(self, text: Option<&str>, delta: bool, finish_reason: Option<&str>) -> Value {
        match (self, delta) {
            (Kind::Chat, false) => json!({
                "index": 0,
                "message": { "role": "assistant", "content": text.unwrap_or_default() },
                "logprobs": null,
                "finish_reason": finish_reason,
            }),
            (Kind::Chat, true) => {
                let delta = text.map_or_else(|| json!({}), |t| json!({ "content": t }));
                json!({ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason })
            }
            (Kind::Completion, _) => json!({
                "index": 0,
                "text": text.unwrap_or_default(),
                "logprobs": null,
                "finish_reason": finish_reason,
            }),
        }
    }
}

/// A decoded request: the function, whether to stream, the contract's inputs.
#[derive(Debug)]
struct Decoded {
    model: String,
    stream: bool,
    inputs: Vec<IoTensor>,
}

fn bytes(name: &str, values: Vec<String>) -> IoTensor {
    let shape = vec![values.len() as u64];
    IoTensor { name: name.into(), shape, data: IoData::Bytes(values.into_iter().map(String::into_bytes).collect()) }
}

fn number(body: &Map<String, Value>, field: &str) -> Result<Option<f64>, OpenAiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| bad(format!("`{field}` must be a number"))),
    }
}

fn decode(kind: Kind, body: &[u8]) -> Result<Decoded, OpenAiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| bad(format!("the body is not JSON: {e}")))?;
    let Value::Object(body) = value else { return Err(bad("the body must be a JSON object")) };
    let model = match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(bad("`model` (the function's name) is required and must be a string")),
    };
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("`stream` must be a boolean")),
    };
    if body.get("n").is_some_and(|n| !n.is_null() && n.as_u64() != Some(1)) {
        return Err(bad("only `n` = 1 is supported"));
    }
    let mut inputs = vec![match kind {
        Kind::Chat => bytes(contract::MESSAGES, vec![messages(&body)?]),
        Kind::Completion => bytes(contract::TEXT_INPUT, vec![prompt(&body)?]),
    }];
    let max_tokens = body.get("max_completion_tokens").filter(|v| !v.is_null()).or_else(|| body.get("max_tokens"));
    match max_tokens {
        None | Some(Value::Null) => {}
        Some(v) => {
            let n = v.as_i64().and_then(|n| i32::try_from(n).ok()).filter(|&n| n >= 1);
            let n = n.ok_or_else(|| bad("`max_tokens` must be a positive integer"))?;
            inputs.push(IoTensor { name: contract::MAX_TOKENS.into(), shape: vec![1], data: IoData::I32(vec![n]) });
        }
    }
    if let Some(t) = number(&body, "temperature")? {
        if !(0.0..=2.0).contains(&t) {
            return Err(bad("`temperature` must be between 0 and 2"));
        }
        inputs.push(IoTensor { name: contract::TEMPERATURE.into(), shape: vec![1], data: IoData::F32(vec![t as f32]) });
    }
    if let Some(p) = number(&body, "top_p")? {
        if !(p > 0.0 && p <= 1.0) {
            return Err(bad("`top_p` must be in (0, 1]"));
        }
        inputs.push(IoTensor { name: contract::TOP_P.into(), shape: vec![1], data: IoData::F32(vec![p as f32]) });
    }
    match body.get("seed") {
        None | Some(Value::Null) => {}
        Some(v) => {
            let seed = v.as_i64().ok_or_else(|| bad("`seed` must be an integer"))?;
            inputs.push(IoTensor { name: contract::SEED.into(), shape: vec![1], data: IoData::I64(vec![seed]) });
        }
    }
    let stop = match body.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.len() <= 4 => items
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("`stop` must be a string or an array of up to 4 strings"))?,
        Some(_) => return Err(bad("`stop` must be a string or an array of up to 4 strings")),
    };
    if !stop.is_empty() {
        inputs.push(bytes(contract::STOP, stop));
    }
    Ok(Decoded { model, stream, inputs })
}

/// The chat's messages as the contract's JSON array of `{role, content}`.
fn messages(body: &Map<String, Value>) -> Result<String, OpenAiError> {
    let shape = "`messages` must be a non-empty array of {\"role\": string, \"content\": string}";
    let Some(Value::Array(items)) = body.get("messages") else { return Err(bad(shape)) };
    if items.is_empty() {
        return Err(bad(shape));
    }
    let messages: Vec<Value> = items
        .iter()
        .map(|m| match (m.get("role"), m.get("content")) {
            (Some(Value::String(role)), Some(Value::String(content))) => {
                Ok(json!({ "role": role, "content": content }))
            }
            _ => Err(bad(shape)),
        })
        .collect::<Result<_, _>>()?;
    Ok(Value::Array(messages).to_string())
}

/// The completion's prompt: a string, or an array of one string.
fn prompt(body: &Map<String, Value>) -> Result<String, OpenAiError> {
    match body.get("prompt") {
        Some(Value::String(p)) => Ok(p.clone()),
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
            Ok(items[0].as_str().unwrap_or_default().to_owned())
        }
        _ => Err(bad("`prompt` is required: a string (or an array of one string)")),
    }
}

/// A response id: unique within this process, and across restarts by its clock part.
fn response_id(kind: Kind) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}-{:x}{:04x}", kind.id_prefix(), now.as_micros(), NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff)
}

fn usage(g: &Generation) -> Value {
    json!({
        "prompt_tokens": g.prompt_tokens,
        "completion_tokens": g.completion_tokens,
        "total_tokens": g.prompt_tokens + g.completion_tokens,
    })
}

/// The contract's view of a finished invocation; a function that does not follow the
/// contract is the request's error (it named the wrong function).
fn generation(model: &str, response: &InferResponse) -> Result<Generation, OpenAiError> {
    let outputs: Vec<IoTensor> = response.outputs.iter().map(|(t, _)| t.clone()).collect();
    Generation::from_outputs(model, &outputs).map_err(|e| bad(e.0))
}

/// The header of every response object.
struct Head {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
}

impl Head {
    fn new(kind: Kind, model: &str) -> Head {
        let created = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        Head { kind, id: response_id(kind), created, model: model.to_owned() }
    }

    fn object(&self, chunk: bool, choices: Vec<Value>) -> Map<String, Value> {
        let mut o = Map::new();
        o.insert("id".into(), json!(self.id));
        o.insert("object".into(), json!(self.kind.object(chunk)));
        o.insert("created".into(), json!(self.created));
        o.insert("model".into(), json!(self.model));
        o.insert("choices".into(), Value::Array(choices));
        o
    }
}

async fn complete(
    kind: Kind,
    platform: Arc<Platform>,
    caller: Result<TenantCaller, HttpError>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let TenantCaller(tenant) = caller?;
    let body = body?;
    // Parsed into a `Value`: its bound is charged to the tenant's host memory first.
    let bound = body.len() as u64 + oip::json_request::value_tree_bound(&body);
    let held = platform.reserve_host_memory(&tenant, bound, "decoding the request").map_err(HttpError::from)?;
    let Decoded { model, stream, inputs } = decode(kind, &body)?;
    drop(held);
    let request = InferRequest { id: None, inputs, outputs: Vec::new(), parameters: Default::default() };
    let head = Head::new(kind, &model);
    if !stream {
        let response = oip::infer(&platform, &tenant, &model, None, request).await?;
        let g = generation(&model, &response)?;
        let mut o = head.object(false, vec![kind.choice(Some(&g.text), false, Some(&g.finish_reason))]);
        o.insert("usage".into(), usage(&g));
        return Ok(Json(Value::Object(o)).into_response());
    }
    let (first, rest) = streamed::start(&platform, &tenant, &model, None, request).await;
    let first = match first {
        StreamEvent::Done(result, held) => {
            let response = (*result)?;
            generation(&model, &response)?;
            StreamEvent::Done(Box::new(Ok(response)), held)
        }
        chunk => chunk,
    };
    let opening = (kind == Kind::Chat).then(|| {
        let role = json!({ "index": 0, "delta": { "role": "assistant", "content": "" }, "logprobs": null, "finish_reason": null });
        Value::Object(head.object(true, vec![role]))
    });
    let events = tokio_stream::iter(opening.map(|o| Event::default().data(o.to_string())))
        .chain(
            tokio_stream::once(first)
                .chain(UnboundedReceiverStream::new(rest))
                .filter_map(move |event| render(&head, event)),
        )
        .chain(tokio_stream::once(Event::default().data("[DONE]")))
        .map(Ok::<_, Infallible>);
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// One streamed event as an OpenAI chunk (`None` for a chunk without text).
fn render(head: &Head, event: StreamEvent) -> Option<Event> {
    let data = match event {
        StreamEvent::Chunk(chunk) => {
            let text = chunk_text(&chunk)?;
            Value::Object(head.object(true, vec![head.kind.choice(Some(&text), true, None)]))
        }
        StreamEvent::Done(result, _held) => match finish(head, *result) {
            Ok(last) => last,
            Err(e) => error_json(&e),
        },
    };
    Some(Event::default().data(data.to_string()))
}

/// The last chunk: the finish reason and the usage.
fn finish(head: &Head, result: Result<InferResponse, PlatformError>) -> Result<Value, HttpError> {
    let response = result?;
    let outputs: Vec<IoTensor> = response.outputs.into_iter().map(|(t, _)| t).collect();
    let g = Generation::from_outputs(&head.model, &outputs).map_err(|e| HttpError::bad_request(e.0))?;
    let mut o = head.object(true, vec![head.kind.choice(None, true, Some(&g.finish_reason))]);
    o.insert("usage".into(), usage(&g));
    Ok(Value::Object(o))
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(platform): State<Arc<Platform>>,
    caller: Result<TenantCaller, HttpError>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    complete(Kind::Chat, platform, caller, body).await
}

/// `POST /v1/completions`.
pub async fn completions(
    State(platform): State<Arc<Platform>>,
    caller: Result<TenantCaller, HttpError>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    complete(Kind::Completion, platform, caller, body).await
}

#[cfg(test)]
mod tests {
    use sluice_host_api::Code;

    use super::*;

    fn decoded(kind: Kind, body: Value) -> Result<Decoded, String> {
        decode(kind, body.to_string().as_bytes()).map_err(|e| e.0.message)
    }

    #[test]
    fn requests_become_the_contracts_inputs() {
        let d = decoded(
            Kind::Chat,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true,
                   "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": "x", "user": "ignored"}),
        )
        .unwrap();
        assert_eq!((d.model.as_str(), d.stream), ("m", true));
        let names: Vec<&str> = d.inputs.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["messages", "max_tokens", "temperature", "top_p", "seed", "stop"]);
        assert_eq!(d.inputs[0].data, IoData::Bytes(vec![br#"[{"content":"hi","role":"user"}]"#.to_vec()]));
        let d = decoded(Kind::Completion, json!({"model": "m", "prompt": ["once"]})).unwrap();
        assert_eq!(d.inputs[0].data, IoData::Bytes(vec![b"once".to_vec()]));
        assert!(!d.stream);
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let cases = [
            (json!({"messages": []}), "`model`"),
            (json!({"model": "m"}), "`messages`"),
            (json!({"model": "m", "messages": [{"role": "user"}]}), "`messages`"),
            (json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}), "`max_tokens`"),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
                "`temperature`",
            ),
            (json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": [1]}), "`stop`"),
            (json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}), "`n`"),
            (json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}), "`stream`"),
        ];
        for (body, culprit) in cases {
            let e = decoded(Kind::Chat, body.clone()).err().unwrap_or_else(|| panic!("{body} was accepted"));
            assert!(e.contains(culprit), "{body}: {e}");
        }
        assert!(decoded(Kind::Completion, json!({"model": "m"})).unwrap_err().contains("`prompt`"));
        assert_eq!(error_type(Code::NotFound.status()), "not_found_error");
    }
}
