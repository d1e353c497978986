//! Python functions (`functions/*/app.py`, built by componentize-py with the Python guest
//! SDK in `guest-sdk/python`) deployed and invoked over real HTTP like any component:
//! each must answer exactly as its Rust twin does, and its errors must be the protocol's;
//! the Python MiniLM (its own pure-Python WordPiece) must match the reference embeddings;
//! `text-stream-py` streams (the SDK's `streaming.emit`) exactly the events of `text-stream`.

use serde_json::{Value, json};
use sluice_tests::Server;
use sluice_tests::sse::EventStream;

/// The outputs of `POST /v2/models/{name}/infer` with `request`.
fn outputs(server: &Server, key: &str, name: &str, request: &Value) -> Value {
    server.post_json(&format!("/v2/models/{name}/infer"), key, request).expect(200)["outputs"].clone()
}

#[test]
fn python_functions_answer_exactly_as_their_rust_twins() {
    let server = Server::start();
    let key = server.create_tenant("py");
    for (name, wasm) in [("echo-py", "echo_py"), ("mlp-py", "mlp_py"), ("echo", "echo"), ("mlp", "mlp")] {
        server.deploy(&key, name, wasm, "timeout_ms=60000");
    }

    // Every datatype through the device and back (BYTES straight through).
    let every = json!({ "inputs": [
        { "name": "f", "shape": [3], "datatype": "FP32", "data": [1.5, -2.0, 0.1] },
        { "name": "h", "shape": [2], "datatype": "FP16", "data": [0.5, -65504.0] },
        { "name": "b", "shape": [1], "datatype": "BF16", "data": [3.0] },
        { "name": "i", "shape": [2, 1], "datatype": "INT32", "data": [-7, 2147483647] },
        { "name": "l", "shape": [2], "datatype": "INT64", "data": [-9007199254740993i64, 5] },
        { "name": "u", "shape": [3], "datatype": "UINT8", "data": [0, 128, 255] },
        { "name": "s", "shape": [2], "datatype": "BYTES", "data": ["héllo", ""] },
    ] });
    let rust = outputs(&server, &key, "echo", &every);
    assert_eq!(rust.as_array().map(Vec::len), Some(7), "{rust}");
    assert_eq!(outputs(&server, &key, "echo-py", &every), rust);

    // The same ops with the same weights: the same bits, cold and warm.
    let rows: Vec<f32> = (0..48).map(|i| ((i * 37) % 19) as f32 / 9.0 - 1.0).collect();
    let input = json!({ "inputs": [{ "name": "input", "shape": [3, 16], "datatype": "FP32", "data": rows }] });
    let rust = outputs(&server, &key, "mlp", &input);
    assert_eq!(rust[0]["shape"], json!([3, 10]));
    assert_eq!(outputs(&server, &key, "mlp-py", &input), rust, "cold");
    assert_eq!(outputs(&server, &key, "mlp-py", &input), rust, "warm");
}

#[test]
fn a_python_functions_errors_are_the_protocols() {
    let server = Server::start();
    let key = server.create_tenant("py");
    server.deploy(&key, "mlp-py", "mlp_py", "timeout_ms=60000");
    let call = |input: Value| server.post_json("/v2/models/mlp-py/infer", &key, &json!({ "inputs": [input] }));

    let e = call(json!({ "name": "input", "shape": [1, 15], "datatype": "FP32", "data": vec![0.0; 15] }))
        .expect_error(400, "invalid_input");
    assert!(e.contains("expected shape [n, 16]"), "{e}");
    let e = call(json!({ "name": "input", "shape": [1, 16], "datatype": "INT32", "data": vec![0; 16] }))
        .expect_error(400, "invalid_input");
    assert!(e.contains("expected FP32, got INT32"), "{e}");
    let e = call(json!({ "name": "other", "shape": [1], "datatype": "FP32", "data": [0.0] }))
        .expect_error(400, "invalid_input");
    assert!(e.contains("missing input `input`"), "{e}");
    // The instance that refused still serves.
    let ok = call(json!({ "name": "input", "shape": [1, 16], "datatype": "FP32", "data": vec![0.25; 16] })).expect(200);
    assert_eq!(ok["outputs"][0]["shape"], json!([1, 10]));
}

#[test]
fn the_python_minilm_matches_the_reference_one_by_one_and_batched() {
    let server = Server::start();
    let key = server.create_tenant("py");
    sluice_tests::minilm::deploy(&server, &key, "minilm-embed-py", "minilm_embed_py");
    sluice_tests::minilm::check_against_reference(&server, &key, "minilm-embed-py");
}

#[test]
fn a_python_function_streams_like_its_rust_twin() {
    let server = Server::start();
    let key = server.create_tenant("py");
    server.deploy(&key, "text-stream-py", "text_stream_py", "timeout_ms=60000");
    server.deploy(&key, "text-stream", "text_stream", "");
    let body = json!({ "text_input": "one two three four five", "parameters": { "max_tokens": 4 } });
    let events = |name: &str| {
        let path = format!("/v2/models/{name}/generate_stream");
        let mut stream = EventStream::post(&server, &path, &key, &body).expect("a stream");
        let mut all: Vec<Value> = std::iter::from_fn(|| stream.next_event().map(|(_, data)| data)).collect();
        for event in &mut all {
            event["model_name"] = json!("-");
        }
        all
    };
    let rust = events("text-stream");
    assert_eq!(rust.len(), 5, "four chunks and the final event: {rust:?}");
    assert_eq!(rust[4]["finish_reason"], "length");
    assert_eq!(events("text-stream-py"), rust);
}
