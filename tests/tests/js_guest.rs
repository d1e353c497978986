//! JavaScript functions (`functions/*/app.js`, built by componentize-js with the
//! JavaScript guest SDK in `guest-sdk/js`) deployed and invoked over real HTTP like any
//! component: `echo-js` must answer every datatype exactly as the Rust `echo` does (and
//! give back what it was sent), its errors must be the protocol's, an instance that left
//! no tensor behind must be kept warm, and the JavaScript MiniLM (its own WordPiece) must
//! match the reference embeddings.
//!
//! The MiniLM test needs the model (`cargo xtask fetch-model`, named by
//! `SLUICE_MODEL_DIR`); without it it skips, saying why (class "MiniLM model"), unless
//! `CI=true`, which makes that a failure.

use serde_json::{Value, json};
use sluice_tests::Server;
use sluice_tests::fixtures::model_dir;
use sluice_tests::minilm::{check_against_reference, floats, output, reference, request};
use sluice_tests::skip::skip;

/// The response of `POST /v2/models/{name}/infer` with `request`, expected to be 200.
fn infer(server: &Server, key: &str, name: &str, request: &Value) -> (Value, Option<String>) {
    let r = server.post_json(&format!("/v2/models/{name}/infer"), key, request);
    let instance = r.headers.get("x-sluice-instance").cloned();
    (r.expect(200), instance)
}

#[test]
fn echo_js_round_trips_every_datatype_like_the_rust_echo() {
    let server = Server::start();
    let key = server.create_tenant("js");
    server.deploy(&key, "echo-js", "echo_js", "timeout_ms=60000");
    server.deploy(&key, "echo", "echo", "");

    // Every datatype through the device and back (BYTES straight through); INT64 beyond
    // 2^53 must survive (the SDK keeps INT64 as bigints).
    let inputs = json!([
        { "name": "f", "shape": [3], "datatype": "FP32", "data": [1.5, -2.0, 0.1] },
        { "name": "h", "shape": [2], "datatype": "FP16", "data": [0.5, -65504.0] },
        { "name": "b", "shape": [1], "datatype": "BF16", "data": [3.0] },
        { "name": "i", "shape": [2, 1], "datatype": "INT32", "data": [-7, 2147483647] },
        { "name": "l", "shape": [2], "datatype": "INT64", "data": [-9007199254740993i64, 5] },
        { "name": "u", "shape": [3], "datatype": "UINT8", "data": [0, 128, 255] },
        { "name": "s", "shape": [2], "datatype": "BYTES", "data": ["héllo", ""] },
    ]);
    let every = json!({ "inputs": inputs });
    let (js, instance) = infer(&server, &key, "echo-js", &every);
    assert_eq!(instance.as_deref(), Some("fresh"), "the first invocation");
    let outputs = js["outputs"].as_array().expect("outputs");
    assert_eq!(outputs.len(), 7, "{js}");
    // What was sent, FP32 rounded to f32 (0.1 comes back as the f32 nearest to it).
    let mut sent = inputs.clone();
    sent[0]["data"] = json!([1.5, -2.0, f64::from(0.1f32)]);
    for (out, sent) in outputs.iter().zip(sent.as_array().unwrap()) {
        for field in ["name", "shape", "datatype", "data"] {
            assert_eq!(out[field], sent[field], "{field} of {}", sent["name"]);
        }
    }
    let (rust, _) = infer(&server, &key, "echo", &every);
    assert_eq!(js["outputs"], rust["outputs"]);

    // The SDK dropped every tensor the invocation made, so the instance was kept warm.
    let one = json!({ "inputs": [{ "name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0] }] });
    let (out, instance) = infer(&server, &key, "echo-js", &one);
    assert_eq!(instance.as_deref(), Some("warm"));
    assert_eq!(out["outputs"], one["inputs"]);
}

#[test]
fn a_js_functions_errors_are_the_protocols() {
    let server = Server::start();
    let key = server.create_tenant("js");
    server.deploy(&key, "echo-js", "echo_js", "timeout_ms=60000");
    server.deploy(&key, "launch-bench-js", "launch_bench_js", "timeout_ms=60000");
    let call = |name: &str, input: Value| {
        server.post_json(&format!("/v2/models/{name}/infer"), &key, &json!({ "inputs": [input] }))
    };

    let e = call("launch-bench-js", json!({ "name": "n", "shape": [1], "datatype": "FP32", "data": [3.0] }))
        .expect_error(400, "invalid_input");
    assert!(e.contains("expected INT64, got FP32"), "{e}");
    let e = call("launch-bench-js", json!({ "name": "m", "shape": [1], "datatype": "INT64", "data": [3] }))
        .expect_error(400, "invalid_input");
    assert!(e.contains("missing input `n`"), "{e}");
    // The instance that refused still serves: n launches, the last one read back.
    let ok =
        call("launch-bench-js", json!({ "name": "n", "shape": [1], "datatype": "INT64", "data": [1000] })).expect(200);
    let launched = ok["outputs"].as_array().unwrap().iter().find(|o| o["name"] == "launched").unwrap();
    let last = ok["outputs"].as_array().unwrap().iter().find(|o| o["name"] == "last").unwrap();
    assert_eq!(launched["data"], json!([1000]));
    assert_eq!(last["data"], json!([2.0]));

    // A host refusal the function does not catch (`HostError`) fails the invocation,
    // naming the WIT error code: MiniLM deployed without its artifacts.
    server.deploy(&key, "minilm-embed-js", "minilm_embed_js", "timeout_ms=60000");
    let text = json!({ "name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"] });
    let e = call("minilm-embed-js", text.clone()).expect_error(500, "function_failed");
    assert!(e.contains("HostError: not-found"), "{e}");
    let e = server
        .post_json(
            "/v2/models/minilm-embed-js/infer",
            &key,
            &json!({ "inputs": [text, { "name": "precision", "shape": [1], "datatype": "BYTES", "data": ["f64"] }] }),
        )
        .expect_error(400, "invalid_input");
    assert!(e.contains("tensor `precision`: one of"), "{e}");
}

#[test]
fn the_js_minilm_matches_the_reference_one_by_one_and_batched() {
    let dir = model_dir();
    if !dir.join("model.safetensors").is_file() {
        let reason = format!("no MiniLM model in {} (run `cargo xtask fetch-model`)", dir.display());
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
        skip("MiniLM model", &reason);
        return;
    }
    let server = Server::start();
    let key = server.create_tenant("js");
    sluice_tests::minilm::deploy(&server, &key, "minilm-embed-js", "minilm_embed_js");
    check_against_reference(&server, &key, "minilm-embed-js");

    // The figures of the batched run, for the log (`--nocapture`).
    let records = reference();
    let texts: Vec<&str> = records.iter().map(|r| r["text"].as_str().unwrap()).collect();
    let out = server.post_json("/v2/models/minilm-embed-js/infer", &key, &request(&texts)).expect(200);
    let got = floats(&output(&out, "embedding")["data"]);
    for (i, r) in records.iter().enumerate() {
        let (a, b) = (&got[i * 384..(i + 1) * 384], floats(&r["embedding"]));
        let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let cosine = dot / (norm(a) * norm(&b));
        let max_abs = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        eprintln!(
            "minilm-embed-js, sentence {i:2}: cosine {cosine:.9} (1 - cosine {:.1e}), max abs diff {max_abs:.1e}",
            1.0 - cosine
        );
    }
}
