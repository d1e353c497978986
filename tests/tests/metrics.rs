//! `GET /metrics` over real HTTP: the exact invocation counters per outcome, the latency
//! histograms, the scrape-time device and tenant gauges, admin-only access, and series
//! removed when their function or tenant is deleted.

use sluice_tests::{ADMIN_KEY, Server, fp32_request, misbehave_request};

/// Scrapes `/metrics` with the admin key and checks the OpenMetrics framing.
fn scrape(server: &Server) -> String {
    let r = server.get("/metrics", ADMIN_KEY);
    let text = String::from_utf8(r.body.clone()).expect("UTF-8 metrics");
    assert_eq!(r.status, 200, "{text}");
    let content_type = r.headers.get("content-type").map(String::as_str).unwrap_or_default();
    assert!(content_type.starts_with("application/openmetrics-text"), "content type {content_type:?}");
    assert!(text.ends_with("# EOF\n"), "no EOF marker:\n{text}");
    text
}

/// The value of the sample named exactly `series` (name and labels), if present.
fn sample(text: &str, series: &str) -> Option<String> {
    text.lines().find_map(|l| Some(l.strip_prefix(series)?.strip_prefix(' ')?.to_owned()))
}

#[track_caller]
fn assert_sample(text: &str, series: &str, value: &str) {
    assert_eq!(sample(text, series).as_deref(), Some(value), "{series} in:\n{text}");
}

#[test]
fn metrics_count_outcomes_time_invocations_and_show_devices() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    server.deploy(&key, "bad", "misbehave", "");

    for _ in 0..3 {
        server.post_json("/v1/functions/echo/invoke", &key, &fp32_request(&[1.0, 2.0, 3.0])).expect(200);
    }
    server.post_json("/v1/functions/bad/invoke", &key, &misbehave_request("ok")).expect(200);
    for _ in 0..2 {
        server
            .post_json("/v1/functions/bad/invoke", &key, &misbehave_request("trap"))
            .expect_error(500, "function_trapped");
    }
    server.post_json("/v1/functions/nope/invoke", &key, &fp32_request(&[1.0])).expect_error(404, "not_found");

    let text = scrape(&server);
    // Counters per outcome, exactly.
    let inv = |function: &str, outcome: &str| {
        format!("sluice_invocations_total{{tenant=\"acme\",function=\"{function}\",outcome=\"{outcome}\"}}")
    };
    assert_sample(&text, &inv("echo", "ok"), "3");
    assert_sample(&text, &inv("bad", "ok"), "1");
    assert_sample(&text, &inv("bad", "function_trapped"), "2");
    assert_sample(&text, &inv("(unknown)", "not_found"), "1");
    assert!(sample(&text, &inv("echo", "function_trapped")).is_none(), "{text}");
    assert!(text.contains("# TYPE sluice_invocations counter\n"), "{text}");

    // Histograms: one observation per successful invocation, 100 µs to 60 s buckets.
    let echo = "{tenant=\"acme\",function=\"echo\"}";
    for family in ["invocation", "queue", "instantiate", "execute"] {
        assert!(text.contains(&format!("# TYPE sluice_{family}_duration_seconds histogram\n")), "{family}:\n{text}");
        assert_sample(&text, &format!("sluice_{family}_duration_seconds_count{echo}"), "3");
    }
    assert_sample(&text, "sluice_invocation_duration_seconds_count{tenant=\"acme\",function=\"bad\"}", "1");
    let bucket = |le: &str| {
        format!("sluice_invocation_duration_seconds_bucket{{le=\"{le}\",tenant=\"acme\",function=\"echo\"}}")
    };
    assert!(sample(&text, &bucket("0.0001")).is_some(), "{text}");
    assert_sample(&text, &bucket("60.0"), "3");
    assert_sample(&text, &bucket("+Inf"), "3");
    let sum: f64 = sample(&text, &format!("sluice_invocation_duration_seconds_sum{echo}")).unwrap().parse().unwrap();
    assert!(sum > 0.0 && sum < 60.0, "sum {sum}");
    assert!(sample(&text, &format!("sluice_kernel_launches_total{echo}")).is_some(), "{text}");

    // Platform-wide values and the device and tenant gauges, read at scrape time.
    assert_sample(&text, "sluice_functions_loaded", "2");
    assert_sample(&text, "sluice_in_flight", "0");
    let compilations: u64 = sample(&text, "sluice_compilations_total").unwrap().parse().unwrap();
    assert!(compilations >= 2, "{text}");
    for family in [
        "sluice_device_queued",
        "sluice_device_active_invocations",
        "sluice_device_resident_bytes",
        "sluice_device_kernels_total",
        "sluice_device_busy_seconds_total",
        "sluice_device_preemptions_total",
        "sluice_device_sliced_kernels_total",
    ] {
        assert!(sample(&text, &format!("{family}{{device=\"0\"}}")).is_some(), "{family} missing:\n{text}");
    }
    assert_sample(&text, "sluice_device_active_invocations{device=\"0\"}", "0");
    assert_sample(&text, "sluice_device_resets_total{device=\"0\"}", "0");
    assert!(sample(&text, "sluice_tenant_memory_used_bytes{tenant=\"acme\"}").is_some(), "{text}");

    // Admin only, errors in the usual JSON format.
    server.get("/metrics", &key).expect_error(403, "forbidden");
    server.call("GET", "/metrics", None, None).expect_error(401, "unauthorized");
    server.call("POST", "/metrics", Some(ADMIN_KEY), None).expect_error(405, "method_not_allowed");

    // A deleted function's series go; the others stay.
    assert_eq!(server.delete("/v1/functions/bad", &key).status, 204);
    let text = scrape(&server);
    assert!(!text.contains("function=\"bad\""), "{text}");
    assert_sample(&text, &inv("echo", "ok"), "3");
    assert_sample(&text, "sluice_functions_loaded", "1");

    // So do a deleted tenant's invocation series.
    assert_eq!(server.delete("/v1/tenants/acme", ADMIN_KEY).status, 204);
    let text = scrape(&server);
    assert!(!text.contains("sluice_invocations_total{tenant=\"acme\""), "{text}");
    assert!(!text.contains("_duration_seconds_count{tenant=\"acme\""), "{text}");
    assert!(!text.contains("sluice_tenant_memory_used_bytes{tenant=\"acme\""), "{text}");
}

/// The per-function gauges an autoscaler scales on: an invocation whose guest runs is
/// in flight for its function while it runs, and leaves nothing counted once it ends.
#[test]
fn a_running_invocation_is_in_flight_for_its_function_until_it_ends() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "spin", "misbehave", "timeout_ms=3000");
    server.deploy(&key, "echo", "echo", "");
    server.post_json("/v1/functions/echo/invoke", &key, &fp32_request(&[1.0])).expect(200);
    let running = "sluice_function_in_flight{tenant=\"acme\",function=\"spin\"}";
    let queued = "sluice_function_queued{tenant=\"acme\",function=\"spin\"}";
    std::thread::scope(|scope| {
        let spinner = scope.spawn(|| {
            server.post_json("/v1/functions/spin/invoke", &key, &misbehave_request("loop")).expect_error(504, "timeout")
        });
        // Until the spinning guest shows up, unless its invocation has already ended.
        let seen = loop {
            let text = scrape(&server);
            if sample(&text, running).as_deref() == Some("1") {
                break Some(text);
            }
            if spinner.is_finished() {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let text = seen.expect("the spinning invocation ended without being counted in flight");
        assert_sample(&text, "sluice_function_in_flight{tenant=\"acme\",function=\"echo\"}", "0");
        spinner.join().unwrap();
    });
    let text = scrape(&server);
    assert_sample(&text, running, "0");
    assert_sample(&text, queued, "0");
    assert!(text.contains("# TYPE sluice_function_queued gauge\n"), "{text}");
}
