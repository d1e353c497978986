//! all-MiniLM-L6-v2 over HTTP, for the tests of its Rust (`minilm-embed`) and Python
//! (`minilm-embed-py`) functions: deploying one with its artifacts, the request, and the
//! check against the reference embeddings of `tests/data/minilm_ref_visible.json`
//! (sentence-transformers): cosine ≥ 0.9999 and max abs diff ≤ 1e-4, token ids equal.

use serde_json::{Value, json};

use crate::fixtures::required_model_dir;
use crate::{Server, repo_root};

/// Deploys component `wasm` as `name` for `key`, with the model's weights, vocabulary
/// and config as the artifacts `model`, `vocab` and `config`.
pub fn deploy(server: &Server, key: &str, name: &str, wasm: &str) {
    deploy_with(server, key, name, wasm, "timeout_ms=60000");
}

/// [`deploy`] with the deploy's query string `query`.
pub fn deploy_with(server: &Server, key: &str, name: &str, wasm: &str, query: &str) {
    server.deploy(key, name, wasm, query);
    let dir = required_model_dir();
    for (artifact, file) in [("model", "model.safetensors"), ("vocab", "vocab.txt"), ("config", "config.json")] {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        server.put_bytes(&format!("/v1/functions/{name}/artifacts/{artifact}"), key, bytes).expect(201);
    }
}

/// An OIP request embedding `texts` and returning the token ids.
pub fn request(texts: &[&str]) -> Value {
    json!({ "inputs": [
        { "name": "text", "shape": [texts.len()], "datatype": "BYTES", "data": texts },
        { "name": "return_tokens", "shape": [1], "datatype": "UINT8", "data": [1] },
    ]})
}

/// The output `name` of an OIP response.
pub fn output<'a>(response: &'a Value, name: &str) -> &'a Value {
    response["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no output {name}"))
}

/// A JSON array of numbers.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// Asserts that embedding `got` of `text` matches `want`.
pub fn check(text: &str, got: &[f64], want: &[f64]) {
    let dot: f64 = got.iter().zip(want).map(|(a, b)| a * b).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let cosine = dot / (norm(got) * norm(want));
    let max_abs = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(cosine >= 0.9999 && max_abs <= 1e-4, "{text:?}: cosine {cosine}, max abs diff {max_abs}");
}

/// The 16 reference records (`text`, `input_ids`, `embedding`).
pub fn reference() -> Vec<Value> {
    let path = repo_root().join("tests/data/minilm_ref_visible.json");
    let reference: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let records = reference["records"].as_array().unwrap().clone();
    assert_eq!(records.len(), 16);
    records
}

/// Invokes `name` on every reference sentence, one request each and then all in one
/// batch, checking token ids and embeddings each time.
pub fn check_against_reference(server: &Server, key: &str, name: &str) {
    let records = reference();
    let infer = format!("/v2/models/{name}/infer");
    for r in &records {
        let text = r["text"].as_str().unwrap();
        let out = server.post_json(&infer, key, &request(&[text])).expect(200);
        assert_eq!(output(&out, "input_ids")["data"], r["input_ids"], "{text:?}: token ids");
        let e = output(&out, "embedding");
        assert_eq!(e["shape"], json!([1, 384]));
        check(text, &floats(&e["data"]), &floats(&r["embedding"]));
    }

    let texts: Vec<&str> = records.iter().map(|r| r["text"].as_str().unwrap()).collect();
    let out = server.post_json(&infer, key, &request(&texts)).expect(200);
    let ids = output(&out, "input_ids");
    let seq = ids["shape"][1].as_u64().unwrap() as usize;
    let all_ids = ids["data"].as_array().unwrap();
    let embeddings = floats(&output(&out, "embedding")["data"]);
    for (i, r) in records.iter().enumerate() {
        let want = r["input_ids"].as_array().unwrap();
        assert_eq!(&all_ids[i * seq..i * seq + want.len()], &want[..], "{:?}: batched ids", texts[i]);
        assert!(all_ids[i * seq + want.len()..(i + 1) * seq].iter().all(|x| x == 0), "padding is 0");
        check(texts[i], &embeddings[i * 384..(i + 1) * 384], &floats(&r["embedding"]));
    }
}
