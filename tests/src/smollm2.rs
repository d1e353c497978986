//! SmolLM2-135M-Instruct over HTTP, for the tests of the `smollm2-chat` function (and
//! its Python twin `smollm2-chat-py`): deploying it with the GGUF file as its artifact
//! `model`, its requests (OIP inputs by name), and reading its outputs.

use serde_json::{Value, json};

use crate::Server;
use crate::minilm::output;

/// Deploys `smollm2-chat` as `name` for `key`, with `gguf` as its artifact `model`.
pub fn deploy(server: &Server, key: &str, name: &str, gguf: &std::path::Path) {
    deploy_component(server, key, name, "smollm2_chat", gguf);
}

/// Deploys the component `wasm` (e.g. `smollm2_chat_py`) as `name` for `key`, with
/// `gguf` as its artifact `model`.
pub fn deploy_component(server: &Server, key: &str, name: &str, wasm: &str, gguf: &std::path::Path) {
    server.deploy(key, name, wasm, "timeout_ms=300000");
    let bytes = std::fs::read(gguf).unwrap();
    server.put_bytes(&format!("/v1/functions/{name}/artifacts/model"), key, bytes).expect(201);
}

/// A BYTES `[1]` input.
pub fn text_input(name: &str, text: &str) -> Value {
    json!({ "name": name, "shape": [1], "datatype": "BYTES", "data": [text] })
}

/// An INT32 `[1]` input.
pub fn int_input(name: &str, v: i32) -> Value {
    json!({ "name": name, "shape": [1], "datatype": "INT32", "data": [v] })
}

/// The one string of BYTES output `name`.
pub fn text_output(response: &Value, name: &str) -> String {
    output(response, name)["data"][0].as_str().unwrap_or_else(|| panic!("{name} is not one string")).to_owned()
}

/// The integers of output `name`.
pub fn ints(response: &Value, name: &str) -> Vec<i64> {
    output(response, name)["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
}

/// `POST /v2/models/{name}/infer` with `inputs`, expecting 200.
pub fn infer(server: &Server, key: &str, name: &str, inputs: Vec<Value>) -> Value {
    server.post_json(&format!("/v2/models/{name}/infer"), key, &json!({ "inputs": inputs })).expect(200)
}
