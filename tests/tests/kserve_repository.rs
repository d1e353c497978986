//! The model-repository API as KServe's model agent drives it: `sluice serve --model-dir`
//! on an empty repository, a bundle (`sluice bundle`) laid out as `<repo>/<name>/`, then
//! `POST /v2/repository/models/<name>/load` (with and without a body), an invocation,
//! `POST /v2/repository/index` with each model's state, and `.../unload`: the model is
//! gone and its tenant's placed weights and device memory are back to their value before
//! the load (`/v1/status`): `echo` with a synthetic artifact (placed bytes), and `mnist`
//! with its weights (device memory its invocation loaded; skips, class "MNIST", without
//! `cargo xtask fetch-mnist`'s files). Bad names (`..`, `../x`, `a b`) and bad bundles (no
//! component, a component or an artifact file that is not there, bad TOML, no tenant)
//! get a 4xx with a JSON `{"error","code"}` body naming the file, and change nothing:
//! the tenant's functions, the index, its status and the repository's files. A call
//! without a key loads only with `--keyless-local-repository`, from a local caller that
//! no proxy forwarded (KServe's agent in the pod).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use sluice_tests::fixtures::mnist_dir;
use sluice_tests::{ADMIN_KEY, Resp, Server, ServerOptions, fp32_request, repo_root, sluice_bin};

/// The tenant every bundle here names.
const TENANT: &str = "acme";

/// A server on the empty repository `repo` and the key of [`TENANT`].
fn server(repo: &Path) -> (Server, String) {
    let server = Server::start_with(ServerOptions {
        args: vec!["--model-dir".into(), repo.display().to_string()],
        ..ServerOptions::default()
    });
    let key = server.create_tenant(TENANT);
    (server, key)
}

/// `sluice bundle --out <repo>/<name> --name <name> --tenant acme <function>.wasm
/// [--artifact a=path]...`.
fn bundle(repo: &Path, name: &str, function: &str, artifacts: &[(&str, &Path)]) -> PathBuf {
    let out = repo.join(name);
    let wasm = repo_root().join("functions/target/wasm32-wasip2/release").join(format!("{function}.wasm"));
    assert!(wasm.is_file(), "{}: run `cargo xtask build-functions` first", wasm.display());
    let mut cmd = Command::new(sluice_bin());
    cmd.arg("bundle").arg("--out").arg(&out).args(["--name", name, "--tenant", TENANT]).arg(&wasm);
    for (artifact, path) in artifacts {
        cmd.arg("--artifact").arg(format!("{artifact}={}", path.display()));
    }
    let result = cmd.output().expect("running sluice bundle");
    assert!(result.status.success(), "sluice bundle failed: {}", String::from_utf8_lossy(&result.stderr));
    assert!(out.join("sluice.toml").is_file(), "no sluice.toml in {}", out.display());
    out
}

fn load(server: &Server, key: &str, name: &str, body: Option<&Value>) -> Resp {
    let path = format!("/v2/repository/models/{name}/load");
    match body {
        Some(b) => server.post_json(&path, key, b),
        None => server.call("POST", &path, Some(key), None),
    }
}

fn unload(server: &Server, key: &str, name: &str) -> Resp {
    server.call("POST", &format!("/v2/repository/models/{name}/unload"), Some(key), None)
}

/// `POST /v2/repository/index` as a map name -> state.
fn index(server: &Server, key: &str) -> BTreeMap<String, String> {
    let v = server.call("POST", "/v2/repository/index", Some(key), None).expect(200);
    v.as_array()
        .unwrap_or_else(|| panic!("the index is not an array: {v}"))
        .iter()
        .map(|m| {
            let name = m["name"].as_str().unwrap_or_else(|| panic!("no name in {m}"));
            let state = m["state"].as_str().unwrap_or_else(|| panic!("no state in {m}"));
            (name.to_owned(), state.to_owned())
        })
        .collect()
}

/// The tenant's `(memory_used_bytes, weights_placed_bytes)` in its own `/v1/status`
/// (0 before it has a run-time state).
fn memory(server: &Server, key: &str) -> (u64, u64) {
    let status = server.status(key);
    let tenant = status["tenants"].as_array().and_then(|t| t.iter().find(|t| t["tenant"] == TENANT)).cloned();
    let get = |field: &str| tenant.as_ref().map_or(0, |t| t[field].as_u64().unwrap_or_else(|| panic!("{field}: {t}")));
    (get("memory_used_bytes"), get("weights_placed_bytes"))
}

/// Whether `/v2/models/<name>/ready` says ready (404 and `ready: false` are not).
fn model_ready(server: &Server, key: &str, name: &str) -> bool {
    let r = server.get(&format!("/v2/models/{name}/ready"), key);
    match r.status {
        200 => r.json()["ready"] == true,
        404 => false,
        s => panic!("/v2/models/{name}/ready: {s} {}", String::from_utf8_lossy(&r.body)),
    }
}

/// Every file under `dir` with its size and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::metadata(&path).expect("metadata");
            if meta.is_dir() {
                stack.push(path.clone());
            }
            out.insert(path, (meta.len(), meta.modified().expect("mtime")));
        }
    }
    out
}

/// Waits until the tenant's `(memory_used_bytes, weights_placed_bytes)` are `want`: an
/// unloaded version goes when the last invocation holding it has dropped it, which may be
/// just after its response was sent (the bound only keeps a hang from hanging).
fn wait_memory(server: &Server, key: &str, want: (u64, u64)) {
    server.wait_for_status(key, &format!("the tenant's memory and placed weights back to {want:?}"), |s| {
        let t = s["tenants"].as_array().and_then(|t| t.iter().find(|t| t["tenant"] == TENANT));
        let get = |f: &str| t.map_or(0, |t| t[f].as_u64().unwrap_or(u64::MAX));
        (get("memory_used_bytes"), get("weights_placed_bytes")) == want
    });
}

fn invoke_echo(server: &Server, key: &str, name: &str) -> Resp {
    server.post_json(&format!("/v2/models/{name}/infer"), key, &fp32_request(&[1.5, -2.0, 3.0]))
}

#[track_caller]
fn assert_echoed(r: &Resp) {
    let v = r.expect(200);
    assert_eq!(v["outputs"][0]["data"], json!([1.5, -2.0, 3.0]), "{v}");
}

#[test]
fn load_invoke_and_unload_give_the_memory_back() {
    let repo = tempfile::tempdir().expect("temp dir");
    let files = tempfile::tempdir().expect("temp dir");
    let (server, key) = server(repo.path());
    assert_eq!(index(&server, &key), BTreeMap::new(), "an empty repository");
    let before = memory(&server, &key);

    let weights = files.path().join("weights.bin");
    let weight_bytes: u64 = 256 << 10;
    std::fs::write(&weights, (0..weight_bytes).map(|i| i as u8).collect::<Vec<u8>>()).unwrap();
    bundle(repo.path(), "echo", "echo", &[("weights", &weights)]);
    let listed = index(&server, &key);
    assert_eq!(listed.get("echo").map(String::as_str), Some("UNAVAILABLE"), "a bundle not loaded: {listed:?}");
    assert!(!model_ready(&server, &key, "echo"));
    invoke_echo(&server, &key, "echo").expect_error(404, "not_found");
    let files_before = snapshot(repo.path());

    // Load without a body, as the model agent does.
    assert_eq!(load(&server, &key, "echo", None).expect(200), json!({}));
    assert!(model_ready(&server, &key, "echo"));
    assert_echoed(&invoke_echo(&server, &key, "echo"));
    assert_eq!(index(&server, &key).get("echo").map(String::as_str), Some("READY"));
    let loaded = memory(&server, &key);
    assert_eq!(loaded.1, before.1 + weight_bytes, "the artifact's bytes are placed: {loaded:?} (before {before:?})");

    assert_eq!(unload(&server, &key, "echo").expect(200), json!({}));
    assert!(!model_ready(&server, &key, "echo"), "unloaded, still ready");
    invoke_echo(&server, &key, "echo").expect_error(404, "not_found");
    assert_eq!(index(&server, &key).get("echo").map(String::as_str), Some("UNAVAILABLE"));
    wait_memory(&server, &key, before);

    // Load again, with the body KServe's clients send.
    assert_eq!(load(&server, &key, "echo", Some(&json!({ "parameters": {} }))).expect(200), json!({}));
    assert_echoed(&invoke_echo(&server, &key, "echo"));
    assert_eq!(memory(&server, &key).1, before.1 + weight_bytes);
    // A second model beside it, loaded with a body; the index lists both.
    bundle(repo.path(), "echo-two", "echo", &[]);
    load(&server, &key, "echo-two", Some(&json!({ "parameters": {} }))).expect(200);
    assert_echoed(&invoke_echo(&server, &key, "echo-two"));
    let listed = index(&server, &key);
    assert_eq!(listed.get("echo").map(String::as_str), Some("READY"), "{listed:?}");
    assert_eq!(listed.get("echo-two").map(String::as_str), Some("READY"), "{listed:?}");
    unload(&server, &key, "echo").expect(200);
    unload(&server, &key, "echo-two").expect(200);
    wait_memory(&server, &key, before);

    // The admin key loads a bundle for the tenant it names.
    load(&server, ADMIN_KEY, "echo-two", None).expect(200);
    assert_echoed(&invoke_echo(&server, &key, "echo-two"));
    // Another tenant sees none of it loaded; the repository was never written.
    let other = server.create_tenant("other");
    let theirs = server.call("POST", "/v2/repository/index", Some(&other), None).expect(200);
    assert!(theirs.as_array().unwrap().iter().all(|m| m["state"] != "READY"), "{theirs}");
    invoke_echo(&server, &other, "echo-two").expect_error(404, "not_found");
    let files_after = snapshot(repo.path());
    for (path, meta) in &files_before {
        assert_eq!(files_after.get(path), Some(meta), "{} changed", path.display());
    }
}

/// `mnist` loads its weights onto the device when it runs: the tenant's device memory
/// grows, and comes back to its value before the load once it is unloaded.
#[test]
fn unloading_mnist_frees_its_device_memory() {
    let Some(dir) = mnist_dir() else { return };
    let repo = tempfile::tempdir().expect("temp dir");
    let (server, key) = server(repo.path());
    let before = memory(&server, &key);
    bundle(repo.path(), "mnist", "mnist", &[("model", &dir.join("model.safetensors"))]);
    load(&server, &key, "mnist", None).expect(200);
    let image =
        json!({ "inputs": [{ "name": "image", "shape": [1, 28, 28], "datatype": "UINT8", "data": vec![0u8; 784] }] });
    let out = server.post_json("/v2/models/mnist/infer", &key, &image).expect(200);
    assert!(out["outputs"].as_array().is_some_and(|o| o.iter().any(|o| o["name"] == "digit")), "{out}");
    let loaded = memory(&server, &key);
    assert!(loaded.0 > before.0, "the weights are in the tenant's device memory: {loaded:?} (before {before:?})");
    assert!(loaded.1 > before.1, "and placed: {loaded:?}");
    unload(&server, &key, "mnist").expect(200);
    wait_memory(&server, &key, before);
    assert!(!model_ready(&server, &key, "mnist"));
}

#[test]
fn bad_names_and_bad_bundles_are_refused_and_change_nothing() {
    // The repository is <base>/repo; <base>/x is a good bundle outside it, which a name
    // that climbs out of the repository would reach.
    let base = tempfile::tempdir().expect("temp dir");
    let repo = base.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let (server, key) = server(&repo);
    bundle(base.path(), "x", "echo", &[]);
    bundle(&repo, "echo", "echo", &[]);
    load(&server, &key, "echo", None).expect(200);
    let wasm = repo_root().join("functions/target/wasm32-wasip2/release/echo.wasm");

    // Bad bundles, each with the file its error should name.
    let write = |name: &str, toml: &str, with_wasm: bool| {
        let dir = repo.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("sluice.toml"), toml).unwrap();
        if with_wasm {
            std::fs::copy(&wasm, dir.join("echo.wasm")).unwrap();
        }
    };
    let bad: Vec<(&str, &str)> = vec![
        ("no-component", ".wasm"),
        ("missing-component", "absent.wasm"),
        ("bad-toml", "sluice.toml"),
        ("missing-artifact", "absent.bin"),
        ("no-tenant", "sluice.toml"),
    ];
    write("no-component", &format!("[function]\ntenant = \"{TENANT}\"\n"), false);
    write("missing-component", &format!("[function]\ntenant = \"{TENANT}\"\ncomponent = \"absent.wasm\"\n"), true);
    write("bad-toml", "[function\ntenant = \n", true);
    write(
        "missing-artifact",
        &format!("[function]\ntenant = \"{TENANT}\"\n\n[artifacts]\nmodel = \"absent.bin\"\n"),
        true,
    );
    write("no-tenant", "[function]\nname = \"no-tenant\"\n", true);

    let functions_before = server.get("/v1/functions", &key).expect(200);
    let index_before = index(&server, &key);
    let memory_before = memory(&server, &key);
    let files_before = snapshot(base.path());
    assert_eq!(index_before.get("echo").map(String::as_str), Some("READY"), "{index_before:?}");

    for (name, file) in &bad {
        for body in [None, Some(json!({ "parameters": {} }))] {
            let r = load(&server, &key, name, body.as_ref());
            let v = r.expect(400);
            let (error, code) = (v["error"].as_str(), v["code"].as_str());
            assert!(
                error.is_some_and(|e| e.contains(file)) && code.is_some_and(|c| !c.is_empty()),
                "a bad bundle {name}: the error should name {file}: {v}"
            );
            eprintln!("{name}: 400 {} {}", code.unwrap(), error.unwrap());
        }
    }
    // Bad names: the parent directory, a path out of the repository, a space, capitals;
    // and a directory that is not there. The ones that climb out must be refused as
    // names, never looked up (`..` exists, `../x` is a good bundle).
    // (`..` and `/` percent-encoded, as clients send them: a literal `..` segment is
    // resolved by the client before it is sent.)
    for name in ["%2E%2E", "..%2Fx", "%2E%2E%2Fx", "a%20b", "Bad_Name"] {
        let r = load(&server, &key, name, None);
        assert!((400..500).contains(&r.status), "a bad name {name}: {} {}", r.status, String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()) && v["code"].as_str().is_some_and(|c| !c.is_empty()),
            "a bad name {name}: {v}"
        );
        if name.contains("2E") || name.starts_with("..") {
            assert_ne!(r.status, 404, "a bad name {name} must not be looked up: {v}");
        }
        eprintln!("{name}: {} {}", r.status, v);
        let r = unload(&server, &key, name);
        assert!((400..500).contains(&r.status), "unload of a bad name {name}: {}", r.status);
    }
    load(&server, &key, "absent", None).expect_error(404, "not_found");

    // Nothing changed.
    assert_eq!(server.get("/v1/functions", &key).expect(200), functions_before);
    let index_after = index(&server, &key);
    for (name, state) in &index_after {
        if name == "echo" {
            assert_eq!(state, "READY");
        } else {
            assert_ne!(state, "READY", "{name} became ready");
        }
    }
    assert_eq!(
        index_after.keys().filter(|n| index_before.contains_key(*n)).count(),
        index_before.len(),
        "{index_after:?} against {index_before:?}"
    );
    assert_eq!(memory(&server, &key), memory_before);
    assert_eq!(snapshot(base.path()), files_before, "the repository was written");
    assert!(!index_after.contains_key("x") && !index_after.contains_key("../x"), "{index_after:?}");
    invoke_echo(&server, &key, "x").expect_error(404, "not_found");
    assert_echoed(&invoke_echo(&server, &key, "echo"));
}

/// A repository call without a key, as KServe's model agent makes it from inside the pod:
/// `--keyless-local-repository` takes it from a local, unforwarded caller as the
/// admin's; a forwarded one (a proxy in the pod, as Knative's queue-proxy) is refused
/// like any call without a key, and so is every call without the flag.
#[test]
fn keyless_repository_calls_are_taken_only_from_a_local_unforwarded_caller_with_the_flag() {
    let keyless = |server: &Server, forwarded: bool| -> u16 {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut request = agent.post(format!("{}/v2/repository/models/agent-echo/load", server.url));
        if forwarded {
            request = request.header("x-forwarded-for", "203.0.113.7");
        }
        request.send_empty().expect("a response").status().as_u16()
    };

    // Both servers start on an empty repository; the bundle lands after the start.
    let repo = tempfile::tempdir().unwrap();
    let (plain, key) = server(repo.path());
    bundle(repo.path(), "agent-echo", "echo", &[]);
    assert_eq!(keyless(&plain, false), 401, "without the flag a key is needed");
    assert!(!model_ready(&plain, &key, "agent-echo"));
    drop(plain);

    let repo = tempfile::tempdir().unwrap();
    let trusting = Server::start_with(ServerOptions {
        args: vec!["--model-dir".into(), repo.path().display().to_string(), "--keyless-local-repository".into()],
        ..ServerOptions::default()
    });
    let key = trusting.create_tenant(TENANT);
    bundle(repo.path(), "agent-echo", "echo", &[]);
    assert_eq!(keyless(&trusting, true), 401, "a forwarded call is no local agent's");
    assert!(!model_ready(&trusting, &key, "agent-echo"));
    assert_eq!(keyless(&trusting, false), 200, "the local agent's call loads, as the admin");
    assert_echoed(&invoke_echo(&trusting, &key, "agent-echo"));
    let unloaded = ureq::post(format!("{}/v2/repository/models/agent-echo/unload", trusting.url)).send_empty();
    assert_eq!(unloaded.expect("unload").status().as_u16(), 200);
    assert!(!model_ready(&trusting, &key, "agent-echo"));
}
