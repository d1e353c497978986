//! all-MiniLM-L6-v2 deployed with its weights and invoked over the Open Inference
//! Protocol: token ids and embeddings against `tests/data/minilm_ref_visible.json`
//! (sentence-transformers), one request per sentence and once as one batch; and two
//! concurrent invocations sharing one loaded copy of the weights.
//!
//! Needs the model (`cargo xtask fetch-model`, run by `cargo xtask test`); fails, and
//! says so, without it.

use serde_json::json;
use sluice_tests::Server;
use sluice_tests::minilm::{check_against_reference, output, request};

fn deploy_minilm(server: &Server, key: &str) {
    sluice_tests::minilm::deploy(server, key, "minilm-embed", "minilm_embed");
}

#[test]
fn minilm_over_http_matches_the_reference() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    deploy_minilm(&server, &key);
    check_against_reference(&server, &key, "minilm-embed");
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
