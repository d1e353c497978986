//! all-MiniLM-L6-v2 deployed with its weights and invoked over the Open Inference
//! Protocol: token ids and embeddings against `tests/data/minilm_ref_visible.json`
//! (sentence-transformers), one request per sentence and once as one batch; and two
//! concurrent invocations sharing one loaded copy of the weights.
//!
//! Needs the model (`cargo xtask fetch-model`, run by `cargo xtask test`); fails, and
//! says so, without it.

use serde_json::{Value, json};
use sluice_tests::fixtures::required_model_dir as model_dir;
use sluice_tests::{Server, repo_root};

fn deploy_minilm(server: &Server, key: &str) {
    server.deploy(key, "minilm-embed", "minilm_embed", "timeout_ms=60000");
    let dir = model_dir();
    for (artifact, file) in [("model", "model.safetensors"), ("vocab", "vocab.txt"), ("config", "config.json")] {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        server.put_bytes(&format!("/v1/functions/minilm-embed/artifacts/{artifact}"), key, bytes).expect(201);
    }
}

fn request(texts: &[&str]) -> Value {
    json!({ "inputs": [
        { "name": "text", "shape": [texts.len()], "datatype": "BYTES", "data": texts },
        { "name": "return_tokens", "shape": [1], "datatype": "UINT8", "data": [1] },
    ]})
}

fn output<'a>(response: &'a Value, name: &str) -> &'a Value {
    response["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no output {name}"))
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn check(text: &str, got: &[f64], want: &[f64]) {
    let dot: f64 = got.iter().zip(want).map(|(a, b)| a * b).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let cosine = dot / (norm(got) * norm(want));
    let max_abs = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(cosine >= 0.9999 && max_abs <= 1e-4, "{text:?}: cosine {cosine}, max abs diff {max_abs}");
}

#[test]
fn minilm_over_http_matches_the_reference() {
    let reference: Value =
        serde_json::from_slice(&std::fs::read(repo_root().join("tests/data/minilm_ref_visible.json")).unwrap())
            .unwrap();
    let records = reference["records"].as_array().unwrap();
    assert_eq!(records.len(), 16);
    let server = Server::start();
    let key = server.create_tenant("acme");
    deploy_minilm(&server, &key);

    for r in records {
        let text = r["text"].as_str().unwrap();
        let out = server.post_json("/v2/models/minilm-embed/infer", &key, &request(&[text])).expect(200);
        let ids = output(&out, "input_ids");
        assert_eq!(ids["data"], r["input_ids"], "{text:?}: token ids");
        let e = output(&out, "embedding");
        assert_eq!(e["shape"], json!([1, 384]));
        check(text, &floats(&e["data"]), &floats(&r["embedding"]));
    }

    let texts: Vec<&str> = records.iter().map(|r| r["text"].as_str().unwrap()).collect();
    let out = server.post_json("/v2/models/minilm-embed/infer", &key, &request(&texts)).expect(200);
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

#[test]
fn concurrent_invocations_share_one_copy_of_the_weights() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    deploy_minilm(&server, &key);
    let loaded = |server: &Server| server.get("/v1/functions/minilm-embed", &key).expect(200)["loaded"].clone();
    assert_eq!(loaded(&server)["weight_tensors_loaded"], 0, "nothing loaded before the first call");
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..2)
            .map(|i| {
                let (server, key) = (&server, &key);
                s.spawn(move || {
                    let text = format!("concurrent sentence number {i}");
                    server.post_json("/v2/models/minilm-embed/infer", key, &request(&[&text])).expect(200)
                })
            })
            .collect();
        for c in calls {
            assert_eq!(output(&c.join().unwrap(), "embedding")["shape"], json!([1, 384]));
        }
    });
    let stats = loaded(&server);
    // 101 tensors (embeddings, 6 layers × 16, final norms) uploaded once; the other
    // invocation's 101 requests were answered from the shared copy.
    assert_eq!(stats["weight_tensors_loaded"], 101, "{stats}");
    assert_eq!(stats["weight_cache_hits"], 101, "{stats}");
    let weights = stats["weight_bytes"].as_u64().unwrap();
    assert!((80 << 20..100 << 20).contains(&weights), "one fp32 copy: {weights} bytes");
    // The tenant's memory account holds the weights once.
    let status = server.status(&key);
    let used = status["tenants"][0]["memory_used_bytes"].as_u64().unwrap();
    assert_eq!(used, weights, "{status}");
}
