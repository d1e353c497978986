//! Dynamic batching benchmark: all-MiniLM-L6-v2 through a real `sluice serve`, run alone
//! per request and with dynamic batching, at 1, 4 and 16 concurrent clients.
//!
//! `cargo run --release -p sluice-tests --bin batch-bench [-- --seconds S --max-batch N --delay-us D]`
//! deploys the same component and weights twice (`minilm-embed`, and `minilm-batched`
//! with `max_batch_size` N, default 16, and `max_queue_delay_us` D, default 2000), then
//! for each concurrency sends one-sentence requests (the 16 reference sentences in
//! turn, one keep-alive connection per client) for S seconds (default 10) to each and
//! prints requests/s, p50/p99 latency and the mean batch size the server reports
//! (`x-sluice-batch-size`). Every response's embedding is checked against the
//! reference (cosine ≥ 0.9999, max abs diff ≤ 1e-4) before anything is timed, and each
//! timed response's status and shape are checked.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_tests::minilm::{check, floats, output, reference};
use sluice_tests::{RawConn, Resp, Server, ServerOptions};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn request(text: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({ "inputs": [{ "name": "text", "shape": [1], "datatype": "BYTES", "data": [text] }] }))
        .unwrap()
}

fn answer(r: &Resp) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).unwrap()
}

/// One load: `clients` clients for `seconds`; (requests/s, sorted latencies, mean batch).
fn load(server: &Server, key: &str, function: &str, bodies: &[Vec<u8>], clients: usize, seconds: u64) -> Row {
    let path = format!("/v2/models/{function}/infer");
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let per_client: Vec<(Vec<Duration>, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let path = &path;
                s.spawn(move || {
                    let mut conn = RawConn::connect(server.addr()).unwrap();
                    let (mut lat, mut batched) = (Vec::new(), 0u64);
                    let mut i = c;
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let r = conn.request("POST", path, key, &bodies[i % bodies.len()]).unwrap();
                        lat.push(t.elapsed());
                        assert_eq!(output(&answer(&r), "embedding")["shape"], json!([1, 384]));
                        batched += r.headers.get("x-sluice-batch-size").and_then(|v| v.parse().ok()).unwrap_or(1);
                        i += clients;
                    }
                    (lat, batched)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = started.elapsed();
    let batched: u64 = per_client.iter().map(|(_, b)| b).sum();
    let mut lat: Vec<Duration> = per_client.into_iter().flat_map(|(l, _)| l).collect();
    lat.sort();
    Row { per_s: lat.len() as f64 / elapsed.as_secs_f64(), mean_batch: batched as f64 / lat.len() as f64, lat }
}

struct Row {
    per_s: f64,
    mean_batch: f64,
    lat: Vec<Duration>,
}

fn main() {
    let seconds = arg("--seconds", 10);
    let max_batch = arg("--max-batch", 16);
    let delay_us = arg("--delay-us", 2000);
    let server = Server::start_with(ServerOptions {
        args: vec!["--tenant-max-concurrency".into(), "64".into()],
        ..ServerOptions::default()
    });
    let key = server.create_tenant("bench");
    sluice_tests::minilm::deploy(&server, &key, "minilm-embed", "minilm_embed");
    let q = format!("timeout_ms=60000&max_batch_size={max_batch}&max_queue_delay_us={delay_us}");
    sluice_tests::minilm::deploy_with(&server, &key, "minilm-batched", "minilm_embed", &q);

    // Correctness first: every reference sentence through both, checked.
    let records = reference();
    let bodies: Vec<Vec<u8>> = records.iter().map(|r| request(r["text"].as_str().unwrap())).collect();
    let mut conn = RawConn::connect(server.addr()).unwrap();
    for function in ["minilm-embed", "minilm-batched"] {
        for (r, body) in records.iter().zip(&bodies) {
            let got = answer(&conn.request("POST", &format!("/v2/models/{function}/infer"), &key, body).unwrap());
            check(r["text"].as_str().unwrap(), &floats(&output(&got, "embedding")["data"]), &floats(&r["embedding"]));
        }
    }

    println!(
        "sluice dynamic batching: all-MiniLM-L6-v2, one sentence per request (the 16 reference sentences), \
         /v2 JSON over HTTP/1.1 keep-alive, {} CPUs, {seconds} s per row",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("batched: max_batch_size {max_batch}, max_queue_delay_us {delay_us}; each embedding checked first");
    println!(
        "{:<8} {:<15} {:>10} {:>10} {:>10} {:>11}",
        "clients", "function", "req/s", "p50 ms", "p99 ms", "mean batch"
    );
    for clients in [1, 4, 16] {
        for function in ["minilm-embed", "minilm-batched"] {
            let row = load(&server, &key, function, &bodies, clients, seconds);
            println!(
                "{clients:<8} {function:<15} {:>10.1} {:>10.2} {:>10.2} {:>11.2}",
                row.per_s,
                ms(percentile(&row.lat, 0.5)),
                ms(percentile(&row.lat, 0.99)),
                row.mean_batch
            );
        }
    }
}
