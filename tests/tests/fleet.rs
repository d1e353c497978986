//! Three `sluice serve` nodes behind Debian's haproxy running `deploy/fleet/haproxy.cfg`,
//! on loopback. Every node serves the same model repository (the `echo` and `mlp`
//! bundles of the tenant `acme`, its key from a keys directory, as replicas of one
//! KServe predictor would), each with its own data directory.
//!
//! - Routing: all of a function's requests through the proxy reach one node (consistent
//!   hashing on the function name), as each node's Triton statistics show.
//! - kill -9 of the node serving `echo` while clients invoke it through the proxy: the
//!   proxy ejects the node and `echo` moves to another; at most one request per client
//!   (the one in flight at the kill) may fail, and the run states how many did.
//! - A rolling restart (SIGTERM one node at a time, wait for its exit, start it again on
//!   the same address and data directory, wait until the proxy sees it up) under the
//!   same load loses no request: a draining node says 503 on readiness at once, serves
//!   for its drain delay, and the proxy retries what a stopping node refuses.
//!
//! Skips (class "haproxy") without haproxy; see `sluice_tests::fleet`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_tests::fleet::{Haproxy, haproxy_binary};
use sluice_tests::{Server, ServerOptions, free_port, repo_root, sluice_bin};

const TENANT: &str = "acme";
const KEY: &str = "acme-fleet-test-key-0123456789abcdef";
/// Clients invoking through the proxy at once.
const CLIENTS: usize = 2;

/// The model repository and keys directory every node is started with.
struct Shared {
    _dir: tempfile::TempDir,
    repo: PathBuf,
    keys: PathBuf,
    data: PathBuf,
}

impl Shared {
    fn new() -> Shared {
        let dir = tempfile::tempdir().expect("temp dir");
        let (repo, keys, data) = (dir.path().join("repo"), dir.path().join("keys"), dir.path().join("nodes"));
        std::fs::create_dir_all(&keys).unwrap();
        std::fs::write(keys.join(TENANT), KEY).unwrap();
        for (name, function) in [("echo", "echo"), ("mlp", "mlp")] {
            bundle(&repo, name, function);
        }
        Shared { _dir: dir, repo, keys, data }
    }

    /// Starts node `i` on `addr` (its data directory kept across restarts).
    fn node(&self, i: usize, addr: &str) -> Server {
        Server::start_with(ServerOptions {
            data_dir: Some(self.data.join(format!("node{i}"))),
            addr: Some(addr.to_owned()),
            args: [
                "--model-dir",
                &self.repo.display().to_string(),
                "--tenant-keys-dir",
                &self.keys.display().to_string(),
                "--drain-delay-s",
                "2",
                "--grace-period-s",
                "30",
            ]
            .map(String::from)
            .to_vec(),
            ..ServerOptions::default()
        })
    }
}

/// `sluice bundle --out <repo>/<name> --name <name> --tenant acme <function>.wasm`.
fn bundle(repo: &Path, name: &str, function: &str) {
    let wasm = repo_root().join("functions/target/wasm32-wasip2/release").join(format!("{function}.wasm"));
    assert!(wasm.is_file(), "{}: run `cargo xtask build-functions` first", wasm.display());
    let out = Command::new(sluice_bin())
        .arg("bundle")
        .arg("--out")
        .arg(repo.join(name))
        .args(["--name", name, "--tenant", TENANT])
        .arg(&wasm)
        .output()
        .expect("running sluice bundle");
    assert!(out.status.success(), "sluice bundle: {}", String::from_utf8_lossy(&out.stderr));
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// The request each function takes.
fn request(function: &str) -> Value {
    match function {
        "mlp" => {
            json!({ "inputs": [{ "name": "input", "shape": [1, 16], "datatype": "FP32", "data": vec![0.5; 16] }] })
        }
        _ => json!({ "inputs": [{ "name": "x", "shape": [2], "datatype": "FP32", "data": [1.5, -2.0] }] }),
    }
}

/// One invocation of `function` at `base`; `Err` with what went wrong.
fn invoke(agent: &ureq::Agent, base: &str, function: &str) -> Result<(), String> {
    let url = format!("{base}/v2/models/{function}/infer");
    let mut r = agent
        .post(&url)
        .header("authorization", &format!("Bearer {KEY}"))
        .header("content-type", "application/json")
        .send(request(function).to_string())
        .map_err(|e| format!("transport: {e}"))?;
    let status = r.status().as_u16();
    let body = r.body_mut().read_to_string().unwrap_or_default();
    if status != 200 {
        return Err(format!("{status}: {body}"));
    }
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    match v["outputs"].as_array() {
        Some(o) if !o.is_empty() => Ok(()),
        _ => Err(format!("no outputs: {body}")),
    }
}

/// Successful invocations of `function` a node has counted (Triton's statistics).
fn successes(node: &Server, function: &str) -> u64 {
    let v = node.get(&format!("/v2/models/{function}/stats"), KEY).expect(200);
    v["model_stats"][0]["inference_count"].as_u64().unwrap_or(0)
}

/// Clients invoking through the proxy until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    clients: Vec<JoinHandle<Vec<String>>>,
}

impl Load {
    fn start(proxy: &str, functions: &[&'static str]) -> Load {
        let (stop, ok) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let clients = (0..CLIENTS)
            .map(|c| {
                let (stop, ok, proxy) = (stop.clone(), ok.clone(), proxy.to_owned());
                let functions = functions.to_vec();
                std::thread::spawn(move || {
                    let agent = agent();
                    let mut failures = Vec::new();
                    let mut i = c;
                    while !stop.load(Ordering::Relaxed) {
                        match invoke(&agent, &proxy, functions[i % functions.len()]) {
                            Ok(()) => drop(ok.fetch_add(1, Ordering::Relaxed)),
                            Err(e) => failures.push(e),
                        }
                        i += 1;
                    }
                    failures
                })
            })
            .collect();
        Load { stop, ok, clients }
    }

    /// Waits until `more` further invocations have succeeded.
    fn wait_for(&self, more: u64) {
        let target = self.ok.load(Ordering::Relaxed) + more;
        while self.ok.load(Ordering::Relaxed) < target {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the clients; their failures and the successes.
    fn finish(self) -> (Vec<String>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let failures = self.clients.into_iter().flat_map(|c| c.join().expect("client")).collect();
        (failures, self.ok.load(Ordering::Relaxed))
    }
}

#[test]
fn a_fleet_behind_haproxy_routes_by_function_survives_a_kill_and_restarts_without_loss() {
    let Some(haproxy) = haproxy_binary() else { return };
    let shared = Shared::new();
    let addrs: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let mut nodes: Vec<Server> = addrs.iter().enumerate().map(|(i, a)| shared.node(i, a)).collect();
    let proxy = Haproxy::start(&haproxy, [&addrs[0], &addrs[1], &addrs[2]]);
    proxy.wait_all("nodes", "UP");

    // Routing: each function's requests all reach one node.
    let agent = agent();
    for function in ["echo", "mlp"] {
        for _ in 0..20 {
            invoke(&agent, &proxy.url, function).unwrap_or_else(|e| panic!("{function}: {e}\n{}", proxy.log()));
        }
        let counts: Vec<u64> = nodes.iter().map(|n| successes(n, function)).collect();
        assert_eq!(counts.iter().sum::<u64>(), 20, "{function}: {counts:?}");
        assert_eq!(counts.iter().filter(|c| **c == 20).count(), 1, "{function} spread over nodes: {counts:?}");
    }

    // kill -9 of echo's node under load: echo moves; at most one failure per client.
    let owner = nodes.iter().position(|n| successes(n, "echo") > 0).expect("echo's node");
    let before: Vec<u64> = nodes.iter().map(|n| successes(n, "echo")).collect();
    let load = Load::start(&proxy.url, &["echo"]);
    load.wait_for(20);
    nodes[owner].kill9();
    load.wait_for(50);
    let (failures, ok) = load.finish();
    println!(
        "kill -9 of node {owner} under {CLIENTS} clients: {ok} requests succeeded, {} failed: {failures:?}",
        failures.len()
    );
    assert!(failures.len() <= CLIENTS, "more failures than requests in flight at the kill: {failures:?}");
    let moved: u64 = (0..3).filter(|i| *i != owner).map(|i| successes(&nodes[i], "echo") - before[i]).sum();
    assert!(moved >= 50, "echo did not move to another node: {moved} there");

    // Back on its address and data directory; then a rolling restart loses nothing.
    nodes[owner] = shared.node(owner, &addrs[owner]);
    proxy.wait_all("nodes", "UP");
    let load = Load::start(&proxy.url, &["echo", "mlp"]);
    load.wait_for(20);
    for i in 0..3 {
        nodes[i].terminate();
        let code = nodes[i].wait_exit(Duration::from_secs(120));
        assert_eq!(code, Some(0), "node {i} did not drain and exit cleanly; log:\n{}", nodes[i].log());
        nodes[i] = shared.node(i, &addrs[i]);
        proxy.wait_all("nodes", "UP");
        load.wait_for(20);
    }
    let (failures, ok) = load.finish();
    println!("rolling restart of 3 nodes under {CLIENTS} clients: {ok} requests succeeded, {} failed", failures.len());
    assert_eq!(failures, Vec::<String>::new(), "a rolling restart lost requests; haproxy:\n{}", proxy.log());
}
