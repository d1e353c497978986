//! Admin-owned tenant policy over real HTTP and the CLI: the admin sets a tenant's
//! class ceiling, weight, quota and concurrency; a function may ask for less, never
//! more, and a change applies to functions already deployed. Also atomic (staged)
//! deploys, the tenant's own view of `/v1/status`, the `Bearer` scheme in any case,
//! 4xx kept out of the ERROR log, and plain-text logs in a file.

use std::process::Command;

use serde_json::{Value, json};
use sluice_tests::{ADMIN_KEY, Server, ServerOptions, fp32_request, function_wasm, sluice_bin};

fn patch(server: &Server, tenant: &str, key: &str, body: &Value) -> sluice_tests::Resp {
    let bytes = serde_json::to_vec(body).unwrap();
    server.call("PATCH", &format!("/v1/tenants/{tenant}"), Some(key), Some(("application/json", bytes)))
}

/// The admin's status row of `tenant` in `class` on device 0.
fn device_row(server: &Server, tenant: &str, class: &str) -> Value {
    let status = server.status(ADMIN_KEY);
    let rows = status["devices"][0]["tenants"].as_array().cloned().unwrap_or_default();
    rows.into_iter().find(|t| t["tenant"] == tenant && t["class"] == class).unwrap_or(Value::Null)
}

fn cli(server: &Server, key: &str, args: &[&str]) -> String {
    let out = Command::new(sluice_bin())
        .args(args)
        .env("SLUICE_URL", &server.url)
        .env("SLUICE_KEY", key)
        .output()
        .expect("running sluice");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "sluice {args:?} failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn the_admin_owns_the_policy_and_functions_get_at_most_it() {
    let server = Server::start_with(ServerOptions {
        args: ["--default-memory-quota", "64MiB"].map(String::from).to_vec(),
        ..ServerOptions::default()
    });
    let key = server.create_tenant("acme");
    let other = server.create_tenant("other");

    // A new tenant gets the server's defaults: batch class, the default quota.
    let own = server.get("/v1/tenants/acme", &key).expect(200);
    assert_eq!(own["effective"]["max_priority"], "batch", "{own}");
    assert_eq!(own["effective"]["memory_quota_bytes"], 64 << 20, "{own}");
    assert_eq!(own["settings"]["max_priority"], Value::Null);
    server.get("/v1/tenants/acme", &other).expect_error(404, "not_found");
    server.get("/v1/tenants/acme", ADMIN_KEY).expect(200);

    // A function asks for latency and a weight far above the tenant's; absurd weights are refused.
    server
        .put_bytes("/v1/functions/echo?weight=4294967295", &key, function_wasm("echo"))
        .expect_error(400, "invalid_input");
    server.deploy(&key, "echo", "echo", "priority=latency&weight=1000");
    server.post_json("/v1/functions/echo/invoke", &key, &fp32_request(&[1.0])).expect(200);
    let row = device_row(&server, "acme", "batch");
    assert_eq!(row["weight"], 1, "class and weight clamped to the tenant's: {row}");
    assert_eq!(device_row(&server, "acme", "latency"), Value::Null, "it never ran as latency");
    let mine = server.status(&key);
    assert_eq!(mine["tenants"][0]["memory_quota_bytes"], 64 << 20, "{mine}");

    // Only the admin changes the policy; bad patches are 400 and change nothing.
    patch(&server, "acme", &key, &json!({ "max_priority": "latency" })).expect_error(403, "forbidden");
    patch(&server, "acme", ADMIN_KEY, &json!({ "weight": 4294967295u64 })).expect_error(400, "invalid_input");
    patch(&server, "acme", ADMIN_KEY, &json!({ "weight": 0 })).expect_error(400, "invalid_input");
    patch(&server, "acme", ADMIN_KEY, &json!({ "wieght": 2 })).expect_error(400, "invalid_request");
    patch(&server, "acme", ADMIN_KEY, &json!({ "max_priority": "urgent" })).expect_error(400, "invalid_request");
    patch(&server, "nobody", ADMIN_KEY, &json!({ "weight": 2 })).expect_error(404, "not_found");
    assert_eq!(server.get("/v1/tenants/acme", ADMIN_KEY).expect(200)["settings"]["weight"], 1);

    // The admin grants latency and weight 3: the deployed function runs so at once.
    let changed = patch(
        &server,
        "acme",
        ADMIN_KEY,
        &json!({ "max_priority": "latency", "weight": 3, "memory_quota_bytes": 1 << 30 }),
    )
    .expect(200);
    assert_eq!(changed["effective"]["max_priority"], "latency", "{changed}");
    server.post_json("/v1/functions/echo/invoke", &key, &fp32_request(&[1.0])).expect(200);
    let row = device_row(&server, "acme", "latency");
    assert_eq!(row["weight"], 3, "the function's 1000 is capped at the tenant's 3: {row}");
    assert_eq!(server.status(&key)["tenants"][0]["memory_quota_bytes"], 1u64 << 30);

    // The CLI: set a weight, reset the class to the server's default.
    let out = cli(&server, ADMIN_KEY, &["tenants", "set", "acme", "--weight", "2", "--reset", "max_priority"]);
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["settings"]["weight"], 2, "{shown}");
    assert_eq!(shown["effective"]["max_priority"], "batch", "{shown}");
    let created: Value =
        serde_json::from_str(&cli(&server, ADMIN_KEY, &["tenants", "create", "vip", "--max-priority", "latency"]))
            .unwrap();
    assert_eq!(created["tenant"]["settings"]["max_priority"], "latency", "{created}");
}

#[test]
fn a_staged_version_serves_only_once_published_and_the_cli_makes_one_version() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "f", "echo", "");
    let staged = server.put_bytes("/v1/functions/f?staged=true", &key, function_wasm("echo")).expect(201);
    assert_eq!((staged["version"].as_u64(), staged["staged"].as_bool()), (Some(2), Some(true)));
    let art = server.put_bytes("/v1/functions/f/artifacts/w.bin", &key, vec![1, 2, 3]).expect(201);
    assert_eq!(art["version"], 2, "the artifact joins the staged version: {art}");
    let r = server.post_json("/v1/functions/f/invoke", &key, &fp32_request(&[1.0]));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers.get("x-sluice-function-version").map(String::as_str),
        Some("1"),
        "v1 serves while v2 is staged"
    );
    server.post_json("/v1/functions/f/versions/2/publish", &key, &json!({})).expect(200);
    let r = server.post_json("/v1/functions/f/invoke", &key, &fp32_request(&[1.0]));
    assert_eq!(r.headers.get("x-sluice-function-version").map(String::as_str), Some("2"));
    let info = server.get("/v1/functions/f", &key).expect(200);
    assert_eq!(info["versions"].as_array().unwrap().len(), 2);
    assert_eq!(info["serving_version"], 2);
    server.post_json("/v1/functions/f/versions/9/publish", &key, &json!({})).expect_error(404, "not_found");

    // A function whose only version is staged does not serve.
    server.put_bytes("/v1/functions/g?staged=true", &key, function_wasm("echo")).expect(201);
    server.post_json("/v1/functions/g/invoke", &key, &fp32_request(&[1.0])).expect_error(404, "not_found");

    // `sluice deploy` with three artifacts: one version, serving with all three.
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("echo.wasm");
    std::fs::write(&wasm, function_wasm("echo")).unwrap();
    let mut args = vec!["deploy".to_owned(), "h".into(), wasm.to_str().unwrap().into()];
    for name in ["a", "b", "c"] {
        let path = dir.path().join(name);
        std::fs::write(&path, name).unwrap();
        args.extend(["--artifact".into(), format!("{name}={}", path.display())]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out: Value = serde_json::from_str(&cli(&server, &key, &args)).unwrap();
    assert_eq!((out["version"].as_u64(), out["staged"].as_bool()), (Some(1), Some(false)), "{out}");
    let info = server.get("/v1/functions/h", &key).expect(200);
    assert_eq!(info["versions"].as_array().unwrap().len(), 1, "{info}");
    assert_eq!(info["artifacts"].as_object().unwrap().len(), 3, "{info}");
}

#[test]
fn a_tenant_sees_only_its_own_usage_and_4xx_stay_out_of_the_error_log() {
    let server = Server::start();
    let a = server.create_tenant("tenant-a");
    let b = server.create_tenant("tenant-b");
    server.deploy(&a, "echo", "echo", "");
    server.deploy(&b, "echo", "echo", "");
    for _ in 0..3 {
        server.post_json("/v1/functions/echo/invoke", &a, &fp32_request(&[1.0])).expect(200);
    }

    // The scheme is case-insensitive.
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let mut conn = sluice_tests::RawConn::connect(server.addr()).unwrap();
        let head = format!("GET /v1/functions HTTP/1.1\r\nhost: sluice\r\nauthorization: {scheme} {b}\r\n\r\n");
        conn.write(head.as_bytes()).unwrap();
        assert_eq!(conn.read_response().unwrap().status, 200, "{scheme}");
    }

    // B's status shows nothing of A's activity: no device-wide or server-wide counters.
    let own = server.status(&b);
    for hidden in ["invocations", "kernels", "busy_us", "queued", "resident_bytes", "preemption_latency"] {
        assert!(own.get(hidden).is_none() && own["devices"][0].get(hidden).is_none(), "{hidden} shown: {own}");
    }
    let rows = own["devices"][0]["tenants"].as_array().unwrap();
    assert!(rows.iter().all(|t| t["tenant"] == "tenant-b"), "{own}");
    let admin = server.status(ADMIN_KEY);
    assert!(admin["invocations"].as_u64().unwrap() >= 3, "the admin sees everything: {admin}");

    // Client mistakes: 4xx answers, none logged at ERROR; the log file has no colour codes.
    server.put_bytes("/v1/functions/bad", &b, b"not wasm".to_vec()).expect_error(400, "invalid_component");
    server.post_json("/v1/functions/nope/invoke", &b, &fp32_request(&[1.0])).expect_error(404, "not_found");
    server.put_bytes("/v1/functions/x?weight=0", &b, function_wasm("echo")).expect_error(400, "invalid_input");
    let log = server.log();
    assert!(!log.contains("ERROR"), "a 4xx was logged at ERROR:\n{log}");
    assert!(!log.contains('\u{1b}'), "terminal colour codes in a log file:\n{log}");
}
