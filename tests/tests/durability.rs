//! Durability and lifecycle of the real process: an acknowledged deploy survives
//! `kill -9` and is served after a restart *without recompiling* (observed through
//! `/v1/status` counters and the log); a generated admin key is printed once and
//! persists; SIGTERM lets an in-flight invocation finish and exits cleanly.

use std::time::Duration;

use serde_json::json;
use sluice_tests::{ADMIN_KEY, Server, ServerOptions, fp32_request, misbehave_request};

fn on(data_dir: &std::path::Path, args: &[&str]) -> ServerOptions {
    ServerOptions {
        data_dir: Some(data_dir.to_path_buf()),
        args: args.iter().map(|s| s.to_string()).collect(),
        ..ServerOptions::default()
    }
}

#[test]
fn acknowledged_deploy_survives_kill_9_without_recompiling() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut first = Server::start_with(on(&data, &[]));
    let key = first.create_tenant("acme");
    first.deploy(&key, "echo", "echo", "timeout_ms=4000");
    let v2 = first.deploy(&key, "echo", "echo", "timeout_ms=5000");
    assert_eq!(v2["version"], 2);
    // kill -9 right after the 201: no shutdown, no flush beyond what the 201 waited for.
    first.kill9();

    let second = Server::start_with(on(&data, &[]));
    let status = second.status(ADMIN_KEY);
    assert_eq!(status["compilations"], 0, "a restart must not recompile: {status}");
    assert_eq!(status["compiled_cache_loads"], 1, "{status}");
    assert_eq!(status["functions_loaded"], 1, "{status}");
    assert!(second.log().contains("loaded precompiled component"), "{}", second.log());
    assert!(second.stdout().contains("1 loaded from compiled cache, 0 compiled"), "{}", second.stdout());

    let out = second.post_json("/v1/functions/echo/invoke", &key, &fp32_request(&[3.0])).expect(200);
    assert_eq!(out["outputs"][0]["data"], json!([3.0]));
    assert_eq!(out["model_version"], "2");
    let info = second.get("/v1/functions/echo", &key).expect(200);
    assert_eq!(info["options"]["timeout_ms"], 5000);
    assert_eq!(info["versions"].as_array().unwrap().len(), 2);
    assert_eq!(second.status(ADMIN_KEY)["compilations"], 0);
}

#[test]
fn generated_admin_key_is_printed_once_and_persists() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let opts = ServerOptions { generate_admin_key: true, ..on(&data, &[]) };
    let mut first = Server::start_with(opts.clone());
    let stdout = first.stdout();
    let admin = stdout
        .lines()
        .find_map(|l| l.strip_prefix("admin key (shown once, store it now): "))
        .unwrap_or_else(|| panic!("no admin key printed: {stdout}"))
        .to_owned();
    assert!(
        stdout.contains("listening on http://127.0.0.1:") && stdout.contains("data dir:") && stdout.contains("device:"),
        "{stdout}"
    );
    first.get("/v1/tenants", &admin).expect(200);
    first.kill9();

    let second = Server::start_with(opts);
    assert!(!second.stdout().contains("admin key"), "printed twice: {}", second.stdout());
    second.get("/v1/tenants", &admin).expect(200);
}

#[test]
fn sigterm_lets_in_flight_invocations_finish() {
    let mut server = Server::start_with(ServerOptions {
        args: vec!["--grace-period-s".into(), "20".into()],
        ..ServerOptions::default()
    });
    let key = server.create_tenant("acme");
    server.deploy(&key, "slow", "misbehave", "timeout_ms=1500");
    let in_flight = std::thread::scope(|s| {
        let call = s.spawn(|| {
            server.try_call(
                "POST",
                "/v1/functions/slow/invoke",
                Some(&key),
                Some(("application/json", serde_json::to_vec(&misbehave_request("loop")).unwrap())),
            )
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while server.status(&key)["in_flight"] != 1 {
            assert!(std::time::Instant::now() < deadline, "the invocation never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        server.terminate();
        // While it drains, the listener still answers: new requests get 503 shutting_down.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let refused = loop {
            let r = server.try_call("GET", "/v1/functions", Some(&key), None).expect("the listener keeps answering");
            if r.status == 503 {
                break r;
            }
            assert!(std::time::Instant::now() < deadline, "never started draining");
            std::thread::sleep(Duration::from_millis(10));
        };
        refused.expect_error(503, "shutting_down");
        call.join().unwrap()
    });
    // The in-flight request got its real answer (the guest's timeout), not a reset.
    let r = in_flight.expect("the in-flight request must be answered");
    r.expect_error(504, "timeout");
    assert_eq!(server.wait_exit(Duration::from_secs(20)), Some(0), "log:\n{}", server.log());
    assert!(server.log().contains("shutting down"), "{}", server.log());
}
