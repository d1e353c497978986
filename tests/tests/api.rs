//! The functions API end to end over real HTTP: deploy, list, get, invoke (REST and
//! Open Inference Protocol), versioning (the newest serves), artifacts, delete; and the
//! `sluice` CLI as a client of the same server.

use std::process::Command;

use serde_json::json;
use sluice_tests::{ADMIN_KEY, Server, fp32_request, function_wasm, sluice_bin};

#[test]
fn deploy_list_invoke_version_and_delete() {
    let server = Server::start();
    let key = server.create_tenant("acme");

    // Deploy: 201 with the version's metadata.
    let v1 = server.deploy(&key, "echo", "echo", "priority=batch&timeout_ms=5000&weight=3");
    assert_eq!(v1["version"], 1);
    assert_eq!(v1["name"], "echo");
    assert_eq!(v1["digest"].as_str().unwrap().len(), 64);
    assert_eq!(v1["options"]["priority"], "batch");
    assert_eq!(v1["options"]["timeout_ms"], 5000);
    assert_eq!(v1["options"]["weight"], 3);

    // List.
    let list = server.get("/v1/functions", &key).expect(200);
    let names: Vec<_> = list["functions"].as_array().unwrap().iter().map(|f| f["name"].clone()).collect();
    assert_eq!(names, vec![json!("echo")]);

    // Invoke over REST, with timing headers.
    let r = server.post_json("/v1/functions/echo/invoke", &key, &fp32_request(&[1.0, -2.5, 3.0]));
    let out = r.expect(200);
    assert_eq!(out["outputs"][0]["data"], json!([1.0, -2.5, 3.0]));
    assert_eq!(out["outputs"][0]["datatype"], "FP32");
    assert_eq!(out["model_version"], "1");
    for h in ["x-sluice-queue-us", "x-sluice-instantiate-us", "x-sluice-execute-us"] {
        let v: u64 = r.headers.get(h).unwrap_or_else(|| panic!("missing {h}")).parse().expect("a number");
        assert!(v < 60_000_000, "{h} = {v}");
    }

    assert_eq!(r.headers.get("x-sluice-instance").map(String::as_str), Some("fresh"), "the first invocation");

    // Invoke over the Open Inference Protocol, with an id: the instance the first
    // invocation left is warm.
    let mut req = fp32_request(&[4.0]);
    req["id"] = json!("req-7");
    let r = server.post_json("/v2/models/echo/infer", &key, &req);
    assert_eq!(r.headers.get("x-sluice-instance").map(String::as_str), Some("warm"));
    let out = r.expect(200);
    assert_eq!(out["id"], "req-7");
    assert_eq!(out["model_name"], "echo");
    assert_eq!(out["outputs"][0]["data"], json!([4.0]));
    let meta = server.get("/v2/models/echo", &key).expect(200);
    assert_eq!(meta["versions"], json!(["1"]));
    assert_eq!(server.get("/v2/models/echo/ready", &key).expect(200)["ready"], true);
    assert_eq!(server.get("/v2", &key).expect(200)["name"], "sluice");
    assert_eq!(server.call("GET", "/v2/health/live", None, None).expect(200)["live"], true);

    // A new deploy under the same name is version 2 and serves at once: `mlp` answers
    // with probabilities where `echo` would echo.
    let v2 = server.deploy(&key, "echo", "mlp", "");
    assert_eq!(v2["version"], 2);
    assert_ne!(v2["digest"], v1["digest"]);
    let input =
        json!({ "inputs": [{ "name": "input", "shape": [1, 16], "datatype": "FP32", "data": vec![0.5f32; 16] }] });
    let out = server.post_json("/v1/functions/echo/invoke", &key, &input).expect(200);
    assert_eq!(out["model_version"], "2");
    assert_eq!(out["outputs"][0]["name"], "probabilities");
    let sum: f64 = out["outputs"][0]["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).sum();
    assert!((sum - 1.0).abs() < 1e-4, "{sum}");

    // Artifacts create a version that keeps the component.
    let v3 = server
        .call(
            "PUT",
            "/v1/functions/echo/artifacts/vocab.txt",
            Some(&key),
            Some(("application/octet-stream", b"hello".to_vec())),
        )
        .expect(201);
    assert_eq!(v3["version"], 3);
    assert_eq!(v3["digest"], v2["digest"]);
    assert_eq!(v3["artifacts"]["vocab.txt"]["size"], 5);

    // Get: metadata, digest, versions, created, and what is loaded.
    let info = server.get("/v1/functions/echo", &key).expect(200);
    assert_eq!(info["latest_version"], 3);
    let versions: Vec<_> =
        info["versions"].as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect();
    assert_eq!(versions, vec![1, 2, 3]);
    assert!(info["created_ms"].as_u64().unwrap() > 0);
    assert_eq!(info["loaded"]["version"], 3);
    assert_eq!(info["loaded"]["weight_tensors_loaded"], 0);

    // Delete: gone from the list, and invocations are 404.
    assert_eq!(server.delete("/v1/functions/echo", &key).status, 204);
    server.post_json("/v1/functions/echo/invoke", &key, &fp32_request(&[1.0])).expect_error(404, "not_found");
    server.get("/v1/functions/echo", &key).expect_error(404, "not_found");
    assert_eq!(server.get("/v1/functions", &key).expect(200)["functions"], json!([]));

    // Status counts the compilations of this process.
    let status = server.status(ADMIN_KEY);
    assert_eq!(status["compilations"], 2);
    assert_eq!(status["ready"], true);
}

#[test]
fn cli_drives_the_server() {
    let server = Server::start();
    let run = |args: &[&str], key: &str| {
        let out = Command::new(sluice_bin())
            .args(args)
            .env("SLUICE_URL", &server.url)
            .env("SLUICE_KEY", key)
            .output()
            .expect("running sluice");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "sluice {args:?} failed: {}{}", stdout, String::from_utf8_lossy(&out.stderr));
        stdout
    };
    let created: serde_json::Value =
        serde_json::from_str(&run(&["tenants", "create", "cli-co", "--max-concurrency", "4"], ADMIN_KEY)).unwrap();
    let key = created["key"].as_str().unwrap().to_owned();
    assert!(run(&["tenants", "list"], ADMIN_KEY).contains("cli-co"));

    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("echo.wasm");
    std::fs::write(&wasm, function_wasm("echo")).unwrap();
    let deployed: serde_json::Value =
        serde_json::from_str(&run(&["deploy", "hello", wasm.to_str().unwrap(), "--timeout-ms", "2000"], &key)).unwrap();
    assert_eq!(deployed["version"], 1);
    assert!(run(&["functions"], &key).contains("hello"));

    let req = dir.path().join("req.json");
    std::fs::write(&req, serde_json::to_vec(&fp32_request(&[7.0])).unwrap()).unwrap();
    for extra in [&[][..], &["--v2"][..]] {
        let mut args = vec!["invoke", "hello", "--input", req.to_str().unwrap(), "--compact"];
        args.extend_from_slice(extra);
        let out: serde_json::Value = serde_json::from_str(&run(&args, &key)).unwrap();
        assert_eq!(out["outputs"][0]["data"], json!([7.0]));
    }
    assert!(run(&["functions", "get", "hello"], &key).contains("\"latest_version\": 1"));
    run(&["functions", "delete", "hello"], &key);
    assert!(!run(&["functions"], &key).contains("hello"));

    // An error from the server is a failing exit with the server's message.
    let out = Command::new(sluice_bin())
        .args(["functions", "get", "nope"])
        .env("SLUICE_URL", &server.url)
        .env("SLUICE_KEY", &key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"), "{}", String::from_utf8_lossy(&out.stderr));
}
