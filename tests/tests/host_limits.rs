//! What a tenant can make the host spend besides invocations, bounded per tenant:
//! status calls and live feeds (the device's scheduler computes a status once for all
//! callers; a tenant's status calls are rate limited and its feeds open at once
//! limited), the host memory of decoding a JSON request (refused before admission when
//! it would pass the tenant's budget), and the bytes a streamed invocation queues for a
//! client that stopped reading (bounded; the invocation is cancelled).

use serde_json::{Value, json};
use sluice_tests::sse::EventStream;
use sluice_tests::{ADMIN_KEY, Server, ServerOptions};

fn server(args: &[&str]) -> Server {
    Server::start_with(ServerOptions { args: args.iter().map(|s| s.to_string()).collect(), ..ServerOptions::default() })
}

/// A tenant's open feeds as the admin's status reports them.
fn feeds_open(status: &Value, tenant: &str) -> u64 {
    let open = status["watching"]["live_feeds_open"].as_array().expect("live_feeds_open");
    open.iter().find(|f| f["tenant"] == tenant).map_or(0, |f| f["open"].as_u64().unwrap())
}

#[test]
fn many_status_callers_share_one_computation_and_each_tenant_is_limited() {
    // A snapshot shared for ten minutes: every call of this test is within it.
    let server = server(&[
        "--status-interval-ms",
        "600000",
        "--status-rate-per-s",
        "0.001",
        "--status-burst",
        "3",
        "--max-live-feeds-per-tenant",
        "2",
    ]);
    let a = server.create_tenant("a");
    let b = server.create_tenant("b");

    // 32 concurrent callers (the admin's calls are not rate limited): one computation.
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..32).map(|_| s.spawn(|| server.get("/v1/status", ADMIN_KEY).status)).collect();
        assert!(calls.into_iter().all(|c| c.join().unwrap() == 200));
    });
    let status = server.status(ADMIN_KEY);
    assert_eq!(status["devices"][0]["status_computations"], 1, "{}", status["devices"][0]);
    let metrics = String::from_utf8_lossy(&server.get("/metrics", ADMIN_KEY).body).into_owned();
    assert!(metrics.contains("sluice_device_status_computations_total{device=\"0\"} 1"), "{metrics}");

    // A tenant's calls beyond its burst are refused; another tenant's are not.
    for _ in 0..3 {
        server.get("/v1/status", &a).expect(200);
    }
    let refused = server.get("/v1/status", &a);
    refused.expect_error(429, "status_rate_limit");
    assert!(refused.headers.contains_key("retry-after"), "{:?}", refused.headers);
    server.get("/v1/status", &b).expect(200);
    assert_eq!(server.status(ADMIN_KEY)["watching"]["status_refused"], 1);

    // Live feeds: the (limit+1)th of one tenant is refused while another can open one
    // (two tenants whose status buckets are still full).
    let (c, d) = (server.create_tenant("c"), server.create_tenant("d"));
    let feed = |key: &str| EventStream::open(&server, "/v1/devices/0/live", Some(key));
    let first = feed(&c).expect("c's first feed");
    let _second = feed(&c).expect("c's second feed");
    let (status, body) = feed(&c).err().expect("c's third feed is refused");
    assert_eq!((status, body["code"].as_str()), (429, Some("live_feed_limit")), "{body}");
    let _other = feed(&d).expect("d opens one");
    let admin = server.status(ADMIN_KEY);
    assert_eq!((feeds_open(&admin, "c"), feeds_open(&admin, "d")), (2, 1), "{}", admin["watching"]);
    assert_eq!(admin["watching"]["live_feeds_refused"], 1);
    assert_eq!(admin["devices"][0]["status_computations"], 1, "the feeds' status snapshots are the shared one");

    // A closed feed gives its place back.
    drop(first);
    server.wait_for_status(ADMIN_KEY, "c's closed feed counted out", |s| feeds_open(s, "c") == 1);
    let again = feed(&c).expect("room again");

    // Each opening was a status call: the third opened feed took c's last one, so a
    // tenant opening and dropping feeds in a loop is held to the status rate.
    drop(again);
    server.wait_for_status(ADMIN_KEY, "c's feed counted out", |s| feeds_open(s, "c") == 1);
    let (status, body) = feed(&c).err().expect("c's status bucket is empty");
    assert_eq!((status, body["code"].as_str()), (429, Some("status_rate_limit")), "{body}");
    server.get("/v1/status", &c).expect_error(429, "status_rate_limit");
}

#[test]
fn a_small_json_body_that_would_decode_past_the_budget_is_refused_before_admission() {
    let server = server(&["--tenant-host-memory-kib", "1024"]);
    let key = server.create_tenant("a");
    server.deploy(&key, "echo", "echo", "");
    // ~800 KB of `0,`: 1.6 MB as FP32, with the body over the tenant's 1 MiB.
    let n = 400_000;
    let mut body = format!(r#"{{"inputs":[{{"name":"x","shape":[{n}],"datatype":"FP32","data":[0"#);
    body.push_str(&",0".repeat(n - 1));
    body.push_str("]}]}");
    let refused =
        server.call("POST", "/v1/functions/echo/invoke", Some(&key), Some(("application/json", body.into_bytes())));
    let message = refused.expect_error(413, "decoded_too_large");
    assert!(message.contains("budget of 1048576"), "{message}");

    let status = server.status(ADMIN_KEY);
    assert_eq!(status["invocations"], 0, "nothing was admitted");
    let tenant = &status["host_memory"]["tenants"][0];
    assert_eq!((&tenant["tenant"], &tenant["refused"], &tenant["used_bytes"]), (&json!("a"), &json!(1), &json!(0)));

    // A request that fits is served, and holds nothing afterwards.
    let small = json!({ "inputs": [{ "name": "x", "shape": [2], "datatype": "FP32", "data": [1.5, 2.0] }] });
    let out = server.post_json("/v1/functions/echo/invoke", &key, &small).expect(200);
    assert_eq!(out["outputs"][0]["data"], json!([1.5, 2.0]));
    let after =
        server.wait_for_status(ADMIN_KEY, "the response sent", |s| s["host_memory"]["tenants"][0]["used_bytes"] == 0);
    assert_eq!(after["invocations"], 1);
}

#[test]
fn a_client_that_stops_reading_leaves_at_most_the_bound_queued_and_its_invocation_ends() {
    const BOUND: u64 = 64 << 10;
    let server = server(&["--stream-buffer-kib", "64", "--stream-stall-ms", "500"]);
    let key = server.create_tenant("a");
    server.deploy(&key, "text-stream", "text_stream", "");
    // One 16 KB word, generated without end: chunks of ~16 KB each.
    let word = "x".repeat(16_000);
    let body = json!({ "text_input": word, "repeat": 0 });
    let mut stream = EventStream::post(&server, "/v2/models/text-stream/generate_stream", &key, &body).unwrap();
    let (_, first) = stream.next_event().expect("a chunk");
    assert_eq!(first["text_output"].as_str().map(str::len), Some(16_000));
    // The client reads no more but keeps the connection: once the socket's buffers are
    // full, the stream's room fills, the guest waits, and the stall ends it.
    let ended = server.wait_for_status(ADMIN_KEY, "the stalled invocation's end", |s| {
        s["in_flight"] == 0 && s["host_memory"]["stream_stalls"] == 1
    });
    let peak = ended["host_memory"]["stream_queue_peak_bytes"].as_u64().expect("the peak");
    assert!(peak <= BOUND, "queued {peak} bytes, above the bound of {BOUND}");
    assert!(peak > BOUND / 2, "the room was filled ({peak} bytes) before the stall");
    let queued = ended["host_memory"]["tenants"][0]["stream_queued_bytes"].as_u64().unwrap();
    assert!(queued <= BOUND, "{queued}");
    let metrics = String::from_utf8_lossy(&server.get("/metrics", ADMIN_KEY).body).into_owned();
    assert!(
        metrics.lines().any(|l| l.starts_with("sluice_invocations_total")
            && l.contains("outcome=\"cancelled\"")
            && l.contains("text-stream")),
        "the invocation ended as cancelled: {metrics}"
    );
    // The client goes: what was queued for it is given back.
    drop(stream);
    server.wait_for_status(ADMIN_KEY, "the queue given back", |s| {
        s["host_memory"]["tenants"][0]["stream_queued_bytes"] == 0
    });
}
