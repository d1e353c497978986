//! Dynamic batching over real HTTP: a function deployed with `max_batch_size` answers
//! each request with its own rows, equal to what it answers unbatched (echo exactly,
//! MiniLM within float noise); batches never mix tenants; Triton's model config reports
//! the batch size; bad batching options and unbatchable requests get their 400s.
//!
//! The batch timing itself (a request waits at most the queue delay, a cancelled
//! request leaves its batch intact) is tested in simulated time by the batcher's unit
//! tests (`runtime/src/platform/batcher.rs`).

use serde_json::{Value, json};
use sluice_tests::minilm::{check, floats, output, reference};
use sluice_tests::{ADMIN_KEY, Resp, Server};

/// A delay long enough that concurrent requests fill their batch on any machine; a
/// full batch runs at once, so the tests do not wait for it.
const LONG_DELAY_US: u64 = 1_000_000;

/// Sends every request at once, each from its own thread; the responses in order.
fn concurrently(server: &Server, key: &str, path: &str, requests: &[Value]) -> Vec<Resp> {
    std::thread::scope(|s| {
        let calls: Vec<_> = requests.iter().map(|r| s.spawn(move || server.post_json(path, key, r))).collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    })
}

fn batch_size(r: &Resp) -> u32 {
    r.headers["x-sluice-batch-size"].parse().unwrap()
}

/// One row of `x`, two values that name the tenant and the request.
fn row(tenant: usize, i: usize) -> Value {
    json!({ "inputs": [{ "name": "x", "shape": [1, 2], "datatype": "FP32", "data": [tenant as f32, i as f32] }] })
}

#[test]
fn a_batched_echo_answers_each_request_with_its_own_rows_and_batches_never_mix_tenants() {
    let server = Server::start();
    let keys = [server.create_tenant("acme"), server.create_tenant("globex")];
    // Room for both tenants' requests in one batch: a batch that mixed them would
    // hold more than one tenant's four.
    for key in &keys {
        server.deploy(key, "echo", "echo", &format!("max_batch_size=8&max_queue_delay_us={LONG_DELAY_US}"));
    }
    // Both tenants at once: eight requests of one function name, four per tenant.
    let responses = std::thread::scope(|s| {
        let per_tenant: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(t, key)| {
                let server = &server;
                s.spawn(move || {
                    let requests: Vec<Value> = (0..4).map(|i| row(t, i)).collect();
                    concurrently(server, key, "/v2/models/echo/infer", &requests)
                })
            })
            .collect();
        per_tenant.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    let mut sizes = Vec::new();
    for (t, tenant_responses) in responses.iter().enumerate() {
        for (i, r) in tenant_responses.iter().enumerate() {
            let body = r.expect(200);
            assert_eq!(body["outputs"][0]["data"], json!([t as f32, i as f32]), "tenant {t} request {i}");
            assert_eq!(body["outputs"][0]["shape"], json!([1, 2]));
            sizes.push(batch_size(r));
        }
    }
    assert!(sizes.iter().all(|&n| (1..=4).contains(&n)), "batch sizes {sizes:?}");
    assert!(sizes.iter().any(|&n| n > 1), "concurrent requests within a 1 s delay batched: {sizes:?}");

    // Triton's config reports the batching, and the function lists its options.
    let config = server.get("/v2/models/echo/config", &keys[0]).expect(200);
    assert_eq!(config["max_batch_size"], 8, "{config}");
    assert_eq!(config["dynamic_batching"]["max_queue_delay_microseconds"], LONG_DELAY_US, "{config}");
    let info = server.get("/v1/functions/echo", &keys[0]).expect(200);
    // Every request observed the size of its batch.
    let metrics = String::from_utf8(server.get("/metrics", ADMIN_KEY).body).unwrap();
    let count = metrics
        .lines()
        .find(|l| l.starts_with("sluice_batch_size_count{tenant=\"acme\",function=\"echo\"}"))
        .unwrap_or_else(|| panic!("no batch size series for acme/echo in {metrics}"));
    assert!(count.ends_with(" 4"), "{count}");
    assert_eq!(info["options"]["batching"], json!({ "max_batch_size": 8, "max_queue_delay_us": LONG_DELAY_US }));
}

#[test]
fn batching_options_and_unbatchable_requests_are_refused_clearly() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    let wasm = sluice_tests::function_wasm("echo");
    for (query, needle) in [
        ("max_queue_delay_us=100", "needs max_batch_size"),
        ("max_batch_size=0", "max_batch_size must be between 1 and"),
        ("max_batch_size=5000", "max_batch_size must be between 1 and"),
        ("max_batch_size=4&max_queue_delay_us=2000000", "max_queue_delay_us must be at most"),
    ] {
        let r = server.put_bytes(&format!("/v1/functions/echo?{query}"), &key, wasm.clone());
        let message = r.expect_error(400, "invalid_input");
        assert!(message.contains(needle), "{query}: {message}");
    }
    assert_eq!(server.get("/v1/functions/echo", &key).status, 404, "a refused deploy changes nothing");

    server.deploy(&key, "echo", "echo", "max_batch_size=4&max_queue_delay_us=1000");
    // A scalar has no batch axis; inputs must agree on their rows.
    let scalar = json!({ "inputs": [{ "name": "x", "shape": [], "datatype": "FP32", "data": [1.0] }] });
    let m = server.post_json("/v2/models/echo/infer", &key, &scalar).expect_error(400, "invalid_input");
    assert!(m.contains("scalar"), "{m}");
    let ragged = json!({ "inputs": [
        { "name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0] },
        { "name": "y", "shape": [3], "datatype": "FP32", "data": [1.0, 2.0, 3.0] },
    ]});
    let m = server.post_json("/v2/models/echo/infer", &key, &ragged).expect_error(400, "invalid_input");
    assert!(m.contains("has 3 rows"), "{m}");
    // A request larger than the batch size runs alone, whole.
    let big = json!({ "inputs": [{ "name": "x", "shape": [6], "datatype": "FP32", "data": [0, 1, 2, 3, 4, 5] }] });
    let r = server.post_json("/v2/models/echo/infer", &key, &big);
    assert_eq!(r.expect(200)["outputs"][0]["data"], json!([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]));
    assert_eq!(batch_size(&r), 1);
}

#[test]
fn batched_minilm_matches_unbatched_minilm_request_by_request() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    sluice_tests::minilm::deploy(&server, &key, "minilm-embed", "minilm_embed");
    // The batched copy: the same component and weights, deployed with batching.
    let q = format!("timeout_ms=60000&max_batch_size=8&max_queue_delay_us={LONG_DELAY_US}");
    sluice_tests::minilm::deploy_with(&server, &key, "minilm-batched", "minilm_embed", &q);

    let records = reference();
    let texts: Vec<&str> = records.iter().take(8).map(|r| r["text"].as_str().unwrap()).collect();
    let requests: Vec<Value> = texts
        .iter()
        .map(|t| json!({ "inputs": [{ "name": "text", "shape": [1], "datatype": "BYTES", "data": [t] }] }))
        .collect();
    let batched = concurrently(&server, &key, "/v2/models/minilm-batched/infer", &requests);
    assert!(batched.iter().any(|r| batch_size(r) > 1), "eight concurrent requests within 1 s batched");
    for ((text, record), (request, b)) in texts.iter().zip(&records).zip(requests.iter().zip(&batched)) {
        let alone = server.post_json("/v2/models/minilm-embed/infer", &key, request).expect(200);
        let alone = floats(&output(&alone, "embedding")["data"]);
        let b = b.expect(200);
        assert_eq!(output(&b, "embedding")["shape"], json!([1, 384]), "{text:?}");
        let together = floats(&output(&b, "embedding")["data"]);
        let max_abs = alone.iter().zip(&together).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(max_abs <= 1e-5, "{text:?}: batched and unbatched differ by {max_abs}");
        check(text, &together, &floats(&record["embedding"]));
    }
}
