//! Concurrency limits over real HTTP: a tenant over its limit and a server over its
//! global limit answer 429 with `Retry-After` at once; other tenants are unaffected.
//! A component over the per-component limits is refused at deploy (400
//! `component_limit_exceeded`), and the instance pool is reported in `/v1/status` and
//! `/metrics`.

use std::time::{Duration, Instant};

use sluice_tests::{ADMIN_KEY, Server, ServerOptions, misbehave_request};

#[test]
fn concurrency_limits_answer_429_with_retry_after() {
    let server = Server::start_with(ServerOptions {
        args: ["--tenant-max-concurrency", "1", "--max-concurrency", "2"].map(String::from).to_vec(),
        ..ServerOptions::default()
    });
    let keys: Vec<String> = ["a", "b", "c"].iter().map(|t| server.create_tenant(t)).collect();
    for key in &keys {
        server.deploy(key, "slow", "misbehave", "timeout_ms=1500");
    }
    let body = |mode: &str| Some(("application/json", serde_json::to_vec(&misbehave_request(mode)).unwrap()));
    let wait_in_flight = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while server.status(ADMIN_KEY)["in_flight"] != n {
            assert!(Instant::now() < deadline, "in_flight never reached {n}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    std::thread::scope(|s| {
        let a = s.spawn(|| server.call("POST", "/v1/functions/slow/invoke", Some(&keys[0]), body("loop")));
        wait_in_flight(1);
        // Tenant a is at its limit of 1.
        let r = server.call("POST", "/v1/functions/slow/invoke", Some(&keys[0]), body("ok"));
        r.expect_error(429, "tenant_concurrency_limit");
        assert_eq!(r.headers.get("retry-after").map(String::as_str), Some("1"));

        // Tenant b is not affected by a's limit; with it the server is full (2).
        let b = s.spawn(|| server.call("POST", "/v1/functions/slow/invoke", Some(&keys[1]), body("loop")));
        wait_in_flight(2);
        let r = server.call("POST", "/v1/functions/slow/invoke", Some(&keys[2]), body("ok"));
        r.expect_error(429, "concurrency_limit");
        assert_eq!(r.headers.get("retry-after").map(String::as_str), Some("1"));

        a.join().unwrap().expect_error(504, "timeout");
        b.join().unwrap().expect_error(504, "timeout");
    });
    // Capacity is back.
    for key in &keys {
        server.call("POST", "/v1/functions/slow/invoke", Some(key), body("ok")).expect(200);
    }
    assert_eq!(server.status(ADMIN_KEY)["rejected"], 2);
}

/// An old version named by `/versions/{v}` is loaded once and kept (per tenant, a
/// bounded few), not loaded again for every request; and a request over the tenant's
/// concurrency limit is refused before anything is loaded. Before, every such request
/// loaded the version in full (a stored compiled form read, pre-instantiated, its
/// weights placed), and it did so before admission.
#[test]
fn an_old_version_loads_once_and_a_refused_request_loads_nothing() {
    let server = Server::start_with(ServerOptions {
        args: ["--tenant-max-concurrency", "1"].map(String::from).to_vec(),
        ..ServerOptions::default()
    });
    let key = server.create_tenant("acme");
    for _ in 0..3 {
        server.deploy(&key, "slow", "misbehave", "timeout_ms=1500"); // versions 1, 2, 3 (serving)
    }
    let body = |mode: &str| Some(("application/json", serde_json::to_vec(&misbehave_request(mode)).unwrap()));
    let loads = || server.status(ADMIN_KEY)["compiled_cache_loads"].as_u64().expect("compiled_cache_loads");
    let before = loads();
    for _ in 0..5 {
        server.call("POST", "/v2/models/slow/versions/1/infer", Some(&key), body("ok")).expect(200);
    }
    assert_eq!(loads() - before, 1, "five requests to version 1 loaded it once");
    assert_eq!(server.status(&key)["tenants"][0]["old_versions_loaded"], 1);

    std::thread::scope(|s| {
        let busy = s.spawn(|| server.call("POST", "/v1/functions/slow/invoke", Some(&key), body("loop")));
        while server.status(ADMIN_KEY)["in_flight"] != 1 {
            assert!(!busy.is_finished(), "the looping invocation ended before it was seen running");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Version 2 was never loaded: at the limit, it is refused without a load.
        let r = server.call("POST", "/v2/models/slow/versions/2/infer", Some(&key), body("ok"));
        r.expect_error(429, "tenant_concurrency_limit");
        assert_eq!(loads() - before, 1, "a refused request loaded nothing");
        busy.join().unwrap().expect_error(504, "timeout");
    });
    server.call("POST", "/v2/models/slow/versions/2/infer", Some(&key), body("ok")).expect(200);
    assert_eq!(loads() - before, 2, "admitted, version 2 is loaded");
}

/// A component instantiating one core module that defines a memory three times: three
/// linear memories, one more than a component may have by default. (It implements no
/// world; the limit is checked first.)
fn three_memories() -> Vec<u8> {
    let module = b"\0asm\x01\0\0\0\x05\x03\x01\x00\x01";
    let mut wasm = b"\0asm\x0d\0\x01\0".to_vec();
    wasm.push(1);
    wasm.push(module.len() as u8);
    wasm.extend(module);
    wasm.extend([2, 10, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    wasm
}

#[test]
fn a_component_over_the_per_component_limits_is_refused_and_the_pool_is_reported() {
    let server = Server::start();
    let key = server.create_tenant("t");
    let r = server.put_bytes("/v1/functions/hoarder", &key, three_memories());
    let message = r.expect_error(400, "component_limit_exceeded");
    assert!(message.contains("3 linear memories, more than the 2"), "{message}");
    assert!(message.contains("--max-memories-per-component"), "{message}");
    server.get("/v1/functions/hoarder", &key).expect_error(404, "not_found");

    server.deploy(&key, "echo", "echo", "");
    let body = Some(("application/json", serde_json::to_vec(&sluice_tests::fp32_request(&[1.0])).unwrap()));
    server.call("POST", "/v1/functions/echo/invoke", Some(&key), body).expect(200);
    let status = server.status(ADMIN_KEY);
    let pool = &status["instance_pool"];
    assert_eq!((pool["warm_instances"].as_u64(), pool["tenant_max_warm_instances"].as_u64()), (Some(1), Some(16)));
    assert_eq!(pool["memories_capacity"], pool["component_instances_capacity"].as_u64().unwrap() * 2);
    assert_eq!(pool["max_memories_per_component"], 2);
    assert!(pool["memories"].as_u64() >= Some(1), "{pool}");
    assert_eq!(status["tenants"][0]["warm_instances"], 1);
    let warm_memory = status["tenants"][0]["warm_memory_bytes"].as_u64().unwrap();
    assert!(warm_memory > 0, "the warm echo instance's linear memory");
    assert_eq!(
        (pool["warm_memory_bytes"].as_u64(), pool["tenant_max_warm_memory_bytes"].as_u64()),
        (Some(warm_memory), Some(64 << 20))
    );
    assert_eq!(status["max_artifact_metadata_bytes"], 64 << 20);
    assert_eq!(status["max_metadata_json_bytes"], 16 << 20);
    let metrics = server.get("/metrics", ADMIN_KEY);
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(text.contains("sluice_instance_pool_slots_used{kind=\"memories\"}"), "{text}");
    assert!(text.contains("sluice_tenant_warm_instances{tenant=\"t\"} 1"), "{text}");
    assert!(text.contains(&format!("sluice_tenant_warm_memory_bytes{{tenant=\"t\"}} {warm_memory}")), "{text}");
    assert!(text.contains("sluice_artifact_metadata_bytes"), "{text}");
}
