//! The control plane's cost on the invocation path: one node on sled, one node on
//! PostgreSQL, and three nodes on PostgreSQL behind haproxy, in one run.
//!
//! `cargo run --release -p sluice-tests --bin fleet-bench [-- --clients 4 --seconds 5]`
//! (needs PostgreSQL's binaries, as the tests find them, and haproxy: `SLUICE_HAPROXY` or
//! `/usr/sbin/haproxy`). Each setup gets the same six copies of `echo` (`echo-0` …
//! `echo-5`, so that the proxy's consistent hashing spreads them over the nodes) and the
//! same clients, each on one keep-alive connection, invoking them in turn through the Open
//! Inference Protocol (`POST /v2/models/echo-<i>/infer`, a 4-element FP32 input) after a
//! warm-up; every answer is checked (200 and the input echoed). It prints p50 and p99
//! latency and the throughput, and for PostgreSQL the database's transactions during the
//! measured phase per invocation (`pg_stat_database.xact_commit`, counting the
//! benchmark's own statistics queries and the nodes' idle checks): near 0 is what "no
//! database round trip per request" means.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_tests::fleet::Haproxy;
use sluice_tests::{RawConn, Server, ServerOptions, fp32_request, free_port, function_wasm, postgres};

const FUNCTIONS: usize = 6;
const INPUT: [f32; 4] = [1.0, 2.0, 3.0, 4.0];

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// What one setup measured.
struct Figures {
    p50: Duration,
    p99: Duration,
    per_s: f64,
    invocations: usize,
}

/// `clients` threads invoking the copies of echo at `addr` for `seconds` after a warm-up.
fn measure(addr: &str, key: &str, clients: usize, seconds: u64) -> Figures {
    let body = serde_json::to_vec(&fp32_request(&INPUT)).unwrap();
    let warm_up_until = Instant::now() + Duration::from_secs(1);
    let started = warm_up_until;
    let until = started + Duration::from_secs(seconds);
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (addr, key, body) = (addr.to_owned(), key.to_owned(), body.clone());
            std::thread::spawn(move || {
                let mut conn = RawConn::connect(&addr).expect("connecting");
                let mut latencies = Vec::new();
                let mut i = c;
                loop {
                    let now = Instant::now();
                    if now >= until {
                        break;
                    }
                    let path = format!("/v2/models/echo-{}/infer", i % FUNCTIONS);
                    let r = conn.request("POST", &path, &key, &body).expect("invoking");
                    assert_eq!(r.status, 200, "{path}: {}", String::from_utf8_lossy(&r.body));
                    let v: Value = serde_json::from_slice(&r.body).unwrap();
                    assert_eq!(v["outputs"][0]["data"], serde_json::json!(INPUT), "{path} did not echo its input");
                    if now >= warm_up_until {
                        latencies.push(now.elapsed());
                    }
                    i += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = threads.into_iter().flat_map(|t| t.join().expect("client")).collect();
    latencies.sort();
    Figures {
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        per_s: latencies.len() as f64 / seconds as f64,
        invocations: latencies.len(),
    }
}

/// Creates the tenant through `node` and deploys the copies of echo; the tenant's key.
fn set_up(node: &Server) -> String {
    let key = node.create_tenant("bench");
    for i in 0..FUNCTIONS {
        node.put_bytes(&format!("/v1/functions/echo-{i}"), &key, function_wasm("echo")).expect(201);
    }
    key
}

fn node(data: PathBuf, args: &[String]) -> Server {
    Server::start_with(ServerOptions {
        data_dir: Some(data),
        addr: Some(format!("127.0.0.1:{}", free_port())),
        args: args.to_vec(),
        ..ServerOptions::default()
    })
}

/// Transactions committed in `db` so far (the statistics are flushed first).
fn transactions(url: &str) -> i64 {
    let mut client = postgres::connect(url).expect("connecting to PostgreSQL");
    std::thread::sleep(Duration::from_millis(1500));
    client.query_one("SELECT pg_stat_clear_snapshot()", &[]).ok();
    let row = client
        .query_one("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()", &[])
        .expect("reading pg_stat_database");
    row.get(0)
}

fn print(name: &str, f: &Figures, db: Option<(i64, usize)>) {
    let per = db.map_or_else(
        || "—".to_owned(),
        |(commits, n)| format!("{commits} ({:.4} per invocation)", commits as f64 / n as f64),
    );
    println!(
        "{name:<36} {:>9.0} µs {:>9.0} µs {:>10.0}/s {per}",
        f.p50.as_secs_f64() * 1e6,
        f.p99.as_secs_f64() * 1e6,
        f.per_s
    );
}

fn main() {
    let clients = arg("--clients", 4) as usize;
    let seconds = arg("--seconds", 5);
    let haproxy = std::env::var_os("SLUICE_HAPROXY").map_or_else(|| PathBuf::from("/usr/sbin/haproxy"), PathBuf::from);
    let pg = postgres::Server::start().unwrap_or_else(|e| panic!("PostgreSQL: {e}"));
    let dir = tempfile::tempdir().unwrap();
    println!(
        "fleet-bench: {clients} clients, {seconds} s each after 1 s of warm-up, {FUNCTIONS} copies of echo, OIP JSON; \
         load average {}",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    println!("{:<36} {:>12} {:>12} {:>12} database transactions during the run", "setup", "p50", "p99", "throughput");

    let sled = node(dir.path().join("sled"), &[]);
    let key = set_up(&sled);
    print("1 node, sled", &measure(sled.addr(), &key, clients, seconds), None);
    drop(sled);

    let one = pg.create_database("one").unwrap();
    let registry = |url: &str, blobs: &str| ["--registry", url, "--blob-dir", blobs].map(String::from).to_vec();
    let blobs = dir.path().join("blobs-one").display().to_string();
    let node1 = node(dir.path().join("pg1"), &registry(&one, &blobs));
    let key = set_up(&node1);
    let before = transactions(&one);
    let f = measure(node1.addr(), &key, clients, seconds);
    print("1 node, PostgreSQL", &f, Some((transactions(&one) - before, f.invocations)));
    drop(node1);

    let three = pg.create_database("three").unwrap();
    let blobs = dir.path().join("blobs-three").display().to_string();
    let nodes: Vec<Server> =
        (0..3).map(|i| node(dir.path().join(format!("fleet{i}")), &registry(&three, &blobs))).collect();
    let key = set_up(&nodes[0]);
    let proxy = Haproxy::start(&haproxy, [nodes[0].addr(), nodes[1].addr(), nodes[2].addr()]);
    proxy.wait_all("nodes", "UP");
    let before = transactions(&three);
    let addr = proxy.url.trim_start_matches("http://").to_owned();
    let f = measure(&addr, &key, clients, seconds);
    print("3 nodes, PostgreSQL, haproxy", &f, Some((transactions(&three) - before, f.invocations)));
}
