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
//! - On one PostgreSQL registry and one blob directory (`--registry`, `--blob-dir`): a
//!   key made through node A works on B and C; a function deployed through B is invoked
//!   through the proxy; a delete through C ends it on A and B, a new version through A
//!   replaces the one B had loaded, a key revoked through A is refused on C that had
//!   cached it, a tenant's new weight set through A is in force on B (each delay
//!   printed); kill -9 and a rolling restart under load as above; and PostgreSQL
//!   stopped and started again while A deploys in a loop and clients invoke: no
//!   invocation fails, every refused deploy is `503 registry_unavailable`, and every
//!   acknowledged version is stored afterwards.
//!
//! Skips (class "haproxy") without haproxy; see `sluice_tests::fleet`; the second test
//! skips (class "PostgreSQL") without PostgreSQL (`sluice_tests::postgres`).

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
fn invoke(agent: &ureq::Agent, base: &str, key: &str, function: &str) -> Result<(), String> {
    let url = format!("{base}/v2/models/{function}/infer");
    let mut r = agent
        .post(&url)
        .header("authorization", &format!("Bearer {key}"))
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
fn successes(node: &Server, key: &str, function: &str) -> u64 {
    let v = node.get(&format!("/v2/models/{function}/stats"), key).expect(200);
    v["model_stats"][0]["inference_count"].as_u64().unwrap_or(0)
}

/// Clients invoking through the proxy until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    clients: Vec<JoinHandle<Vec<String>>>,
}

impl Load {
    fn start(proxy: &str, key: &str, functions: &[&'static str]) -> Load {
        let (stop, ok) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let clients = (0..CLIENTS)
            .map(|c| {
                let (stop, ok, proxy, key) = (stop.clone(), ok.clone(), proxy.to_owned(), key.to_owned());
                let functions = functions.to_vec();
                std::thread::spawn(move || {
                    let agent = agent();
                    let mut failures = Vec::new();
                    let mut i = c;
                    while !stop.load(Ordering::Relaxed) {
                        match invoke(&agent, &proxy, &key, functions[i % functions.len()]) {
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
            invoke(&agent, &proxy.url, KEY, function).unwrap_or_else(|e| panic!("{function}: {e}\n{}", proxy.log()));
        }
        let counts: Vec<u64> = nodes.iter().map(|n| successes(n, KEY, function)).collect();
        assert_eq!(counts.iter().sum::<u64>(), 20, "{function}: {counts:?}");
        assert_eq!(counts.iter().filter(|c| **c == 20).count(), 1, "{function} spread over nodes: {counts:?}");
    }

    let start = |i: usize| shared.node(i, &addrs[i]);
    kill_under_load(&mut nodes, &start, &proxy, KEY, "model repository");
    rolling_restart(&mut nodes, &start, &proxy, KEY, &["echo", "mlp"], "model repository");
}

/// kill -9 of the node serving `echo` while clients invoke it through the proxy: at
/// most one failure per client (the request in flight at the kill), and `echo` moves to
/// another node; then the node is started again on its address and data directory.
fn kill_under_load(nodes: &mut [Server], start: &dyn Fn(usize) -> Server, proxy: &Haproxy, key: &str, what: &str) {
    let owner = nodes.iter().position(|n| successes(n, key, "echo") > 0).expect("echo's node");
    let before: Vec<u64> = nodes.iter().map(|n| successes(n, key, "echo")).collect();
    let load = Load::start(&proxy.url, key, &["echo"]);
    load.wait_for(20);
    nodes[owner].kill9();
    load.wait_for(50);
    let (failures, ok) = load.finish();
    println!(
        "{what}: kill -9 of node {owner} under {CLIENTS} clients: {ok} requests succeeded, {} failed: {failures:?}",
        failures.len()
    );
    assert!(failures.len() <= CLIENTS, "more failures than requests in flight at the kill: {failures:?}");
    let moved: u64 = (0..3).filter(|i| *i != owner).map(|i| successes(&nodes[i], key, "echo") - before[i]).sum();
    assert!(moved >= 50, "echo did not move to another node: {moved} there");
    nodes[owner] = start(owner);
    proxy.wait_all("nodes", "UP");
}

/// SIGTERM one node at a time (wait for its clean exit, start it again, wait until the
/// proxy sees it up) while clients invoke `functions`: no request may fail.
fn rolling_restart(
    nodes: &mut [Server],
    start: &dyn Fn(usize) -> Server,
    proxy: &Haproxy,
    key: &str,
    functions: &[&'static str],
    what: &str,
) {
    let load = Load::start(&proxy.url, key, functions);
    load.wait_for(20);
    for (i, node) in nodes.iter_mut().enumerate() {
        node.terminate();
        let code = node.wait_exit(Duration::from_secs(120));
        assert_eq!(code, Some(0), "node {i} did not drain and exit cleanly; log:\n{}", node.log());
        *node = start(i);
        proxy.wait_all("nodes", "UP");
        load.wait_for(20);
    }
    let (failures, ok) = load.finish();
    println!(
        "{what}: rolling restart of 3 nodes under {CLIENTS} clients: {ok} requests succeeded, {} failed",
        failures.len()
    );
    assert_eq!(failures, Vec::<String>::new(), "a rolling restart lost requests; haproxy:\n{}", proxy.log());
}

/// Three nodes sharing one PostgreSQL registry and one blob directory.
struct SharedRegistry {
    _dir: tempfile::TempDir,
    url: String,
    blobs: PathBuf,
    data: PathBuf,
}

impl SharedRegistry {
    fn node(&self, i: usize, addr: &str) -> Server {
        Server::start_with(ServerOptions {
            data_dir: Some(self.data.join(format!("node{i}"))),
            addr: Some(addr.to_owned()),
            args: [
                "--registry",
                &self.url,
                "--blob-dir",
                &self.blobs.display().to_string(),
                // Every acknowledged version of the deploy loop stays to be counted.
                "--keep-versions",
                "100000",
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

/// Polls `node` until `done` holds for its answer to `GET path` with `key`; how long it
/// took (printed by the caller: propagation is shown, not asserted against a clock).
fn until(node: &Server, path: &str, key: &str, what: &str, done: impl Fn(u16) -> bool) -> Duration {
    let started = std::time::Instant::now();
    loop {
        let status = node.get(path, key).status;
        if done(status) {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{what}: still {status} on {} after 60 s", node.url);
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn nodes_on_one_postgresql_registry_share_keys_and_functions_and_keep_what_was_acknowledged() {
    let Some(haproxy) = haproxy_binary() else { return };
    let pg = match sluice_tests::postgres::Server::start() {
        Ok(pg) => pg,
        Err(reason) => {
            let required = std::env::var("SLUICE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1")
                || std::env::var("CI").is_ok_and(|v| v == "true");
            assert!(!required, "PostgreSQL required: {reason}");
            sluice_tests::skip::skip("PostgreSQL", &reason);
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let shared = SharedRegistry {
        url: pg.create_database("sluice").unwrap(),
        blobs: dir.path().join("blobs"),
        data: dir.path().join("nodes"),
        _dir: dir,
    };
    let addrs: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let mut nodes: Vec<Server> = addrs.iter().enumerate().map(|(i, a)| shared.node(i, a)).collect();
    let proxy = Haproxy::start(&haproxy, [&addrs[0], &addrs[1], &addrs[2]]);
    proxy.wait_all("nodes", "UP");
    let agent = agent();

    // A key made through A works on B and C at once.
    let key = nodes[0].create_tenant("acme");
    for node in &nodes[1..] {
        node.get("/v1/functions", &key).expect(200);
    }

    // Deployed through B, invoked through the proxy, whichever node it lands on.
    nodes[1].deploy(&key, "echo", "echo", "");
    nodes[1].deploy(&key, "mlp", "mlp", "");
    for function in ["echo", "mlp"] {
        invoke(&agent, &proxy.url, &key, function).unwrap_or_else(|e| panic!("{function}: {e}\n{}", proxy.log()));
    }
    // Loaded on every node, then deleted through C: gone everywhere.
    for node in &nodes {
        invoke(&agent, &node.url, &key, "mlp").unwrap_or_else(|e| panic!("mlp on {}: {e}", node.url));
    }
    assert_eq!(nodes[2].delete("/v1/functions/mlp", &key).status, 204);
    for node in &nodes[..2] {
        let took = until(node, "/v2/models/mlp", &key, "the deleted mlp", |s| s == 404);
        println!("a delete through C ended mlp on {} after {:.0} ms", node.url, took.as_secs_f64() * 1e3);
    }
    // A new version deployed through A serves on B (which had the old one loaded).
    let v2 = nodes[0].deploy(&key, "echo", "echo", "");
    assert_eq!(v2["version"], 2);
    let started = std::time::Instant::now();
    loop {
        let answer = nodes[1].post_json("/v2/models/echo/infer", &key, &request("echo")).expect(200);
        if answer["model_version"] == "2" {
            break;
        }
        assert_eq!(answer["model_version"], "1", "{answer}");
        assert!(started.elapsed() < Duration::from_secs(60), "B still serves echo v1 after 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("echo v2 deployed through A served on B after {:.0} ms", started.elapsed().as_secs_f64() * 1e3);

    // A second key, used on C (and so cached there), revoked through A: refused on C.
    let issued = nodes[1].post_json("/v1/tenants/acme/keys", sluice_tests::ADMIN_KEY, &json!({})).expect(201);
    let (second, key_id) = (issued["key"].as_str().unwrap(), issued["key_id"].as_str().unwrap());
    nodes[2].get("/v1/functions", second).expect(200);
    assert_eq!(nodes[0].delete(&format!("/v1/tenants/acme/keys/{key_id}"), sluice_tests::ADMIN_KEY).status, 204);
    let took = until(&nodes[2], "/v1/functions", second, "the revoked key", |s| s == 401);
    println!("a key revoked through A was refused on C after {:.0} ms", took.as_secs_f64() * 1e3);

    // A policy change through A is in force on B, which held the tenant's old policy.
    let patch = json!({ "weight": 3 }).to_string().into_bytes();
    let patched =
        nodes[0].call("PATCH", "/v1/tenants/acme", Some(sluice_tests::ADMIN_KEY), Some(("application/json", patch)));
    assert_eq!(patched.expect(200)["settings"]["weight"], 3);
    let started = std::time::Instant::now();
    loop {
        nodes[1].post_json("/v2/models/echo/infer", &key, &request("echo")).expect(200);
        let status = nodes[1].status(sluice_tests::ADMIN_KEY);
        let tenant = status["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "acme").cloned();
        if tenant.as_ref().is_some_and(|t| t["weight"] == 3) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "B still has acme's old policy: {tenant:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("a policy change through A in force on B after {:.0} ms", started.elapsed().as_secs_f64() * 1e3);

    // kill -9 under load: echo moves to a node that loads it from the shared registry;
    // then a rolling restart loses no request.
    let start = |i: usize| shared.node(i, &addrs[i]);
    kill_under_load(&mut nodes, &start, &proxy, &key, "shared registry");
    rolling_restart(&mut nodes, &start, &proxy, &key, &["echo"], "shared registry");

    // PostgreSQL restarts while A deploys in a loop and clients invoke: every
    // acknowledged deploy is there afterwards, the refused ones were 503
    // registry_unavailable, and loaded functions served throughout.
    let load = Load::start(&proxy.url, &key, &["echo"]);
    let deploying = Arc::new(AtomicBool::new(true));
    let deployed = Arc::new(AtomicU64::new(0));
    let deployer = {
        let (url, key, deploying, deployed) = (nodes[0].url.clone(), key.clone(), deploying.clone(), deployed.clone());
        std::thread::spawn(move || {
            let client = self::agent();
            let (mut acknowledged, mut refused) = (Vec::new(), Vec::new());
            while deploying.load(Ordering::Relaxed) {
                let sent = client
                    .put(&format!("{url}/v1/functions/counter"))
                    .header("authorization", &format!("Bearer {key}"))
                    .header("content-type", "application/wasm")
                    .send(sluice_tests::function_wasm("echo"));
                match sent {
                    Ok(mut r) if r.status() == 201 => {
                        let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
                        acknowledged.push(v["version"].as_u64().unwrap());
                        deployed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Ok(mut r) => refused.push((r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default())),
                    Err(e) => refused.push((0, e.to_string())),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (acknowledged, refused)
        })
    };
    load.wait_for(20);
    while deployed.load(Ordering::Relaxed) < 10 {
        std::thread::sleep(Duration::from_millis(10));
    }
    pg.stop().unwrap();
    load.wait_for(20);
    std::thread::sleep(Duration::from_millis(500));
    pg.start_again().unwrap();
    load.wait_for(20);
    let before = deployed.load(Ordering::Relaxed);
    while deployed.load(Ordering::Relaxed) < before + 10 {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Deploys go through again once the database is back.
    let resumed = nodes[0].deploy(&key, "counter", "echo", "");
    deploying.store(false, Ordering::Relaxed);
    let (acknowledged, refused) = deployer.join().unwrap();
    let (failures, ok) = load.finish();
    println!(
        "PostgreSQL restarted under a deploy loop: {} deploys acknowledged, {} refused; {ok} invocations served, {} failed",
        acknowledged.len(),
        refused.len(),
        failures.len()
    );
    assert_eq!(failures, Vec::<String>::new(), "loaded functions must serve while the database is away");
    assert!(!refused.is_empty(), "no deploy met the restart");
    for (status, body) in &refused {
        assert!(
            *status == 503 && body.contains("registry_unavailable"),
            "a deploy during the restart: {status} {body}"
        );
    }
    let stored: Vec<u64> = nodes[1].get("/v1/functions/counter", &key).expect(200)["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    for version in acknowledged.iter().chain([&resumed["version"].as_u64().unwrap()]) {
        assert!(stored.contains(version), "acknowledged version {version} lost: stored {stored:?}");
    }
}
