//! The live console's feed, `GET /v1/devices/{index}/live` (server-sent events), over
//! real HTTP: while a latency tenant's `mlp` and a batch tenant's `gemm-burn` run, the
//! admin's feed shows kernels of both tenants by name, and a tenant's feed shows its
//! own kernels by name and the other tenant's only as `other`; the status snapshots
//! report queues per class, weights, memory against quota and function latencies, each
//! tenant seeing only its own memory and functions.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_tests::sse::EventStream;
use sluice_tests::{ADMIN_KEY, Server};

/// What one feed showed until it had seen `want` among its kernels' tenants.
#[derive(Default)]
struct Seen {
    tenants: BTreeSet<String>,
    functions: BTreeSet<String>,
    kernels: usize,
    statuses: Vec<Value>,
    /// Every event's text, to look for names that must not be there.
    text: String,
}

/// Reads `feed` until its kernel records name every tenant in `want` and a status
/// came after that, or a minute passed (the test then fails on what it saw).
fn watch(mut feed: EventStream, want: &[&str]) -> Seen {
    let mut seen = Seen::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut complete = false;
    while Instant::now() < deadline {
        let Some((name, data)) = feed.next_event() else { break };
        seen.text.push_str(&data.to_string());
        match name.as_str() {
            "kernels" => {
                for r in data["records"].as_array().expect("records") {
                    seen.kernels += 1;
                    seen.tenants.insert(r["tenant"].as_str().unwrap().to_owned());
                    seen.functions.insert(r["function"].as_str().unwrap().to_owned());
                    assert!(r["start_us"].as_u64().unwrap() <= r["end_us"].as_u64().unwrap(), "{r}");
                    assert!(r["queued_us"].as_u64().unwrap() <= r["start_us"].as_u64().unwrap(), "{r}");
                }
                complete = want.iter().all(|t| seen.tenants.contains(*t));
            }
            "status" => {
                let done = complete;
                seen.statuses.push(data);
                if done {
                    break;
                }
            }
            other => panic!("unexpected event {other}: {data}"),
        }
    }
    seen
}

#[test]
fn the_feed_shows_both_tenants_kernels_and_hides_names_from_tenants() {
    let server = Server::start();
    let key_a = server.create_tenant("latency-co");
    let key_b = server.create_tenant("batch-co");
    let grant = serde_json::to_vec(&json!({ "max_priority": "latency", "weight": 3 })).unwrap();
    server.call("PATCH", "/v1/tenants/latency-co", Some(ADMIN_KEY), Some(("application/json", grant))).expect(200);
    server.deploy(&key_a, "mlp", "mlp", "priority=latency");
    server.deploy(&key_b, "burn", "gemm_burn", "priority=batch");

    // Errors first: an unknown device, no key.
    let (status, body) = EventStream::open(&server, "/v1/devices/7/live", Some(ADMIN_KEY)).err().expect("404");
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
    let (status, _) = EventStream::open(&server, "/v1/devices/0/live", None).err().expect("401");
    assert_eq!(status, 401);

    let admin = EventStream::open(&server, "/v1/devices/0/live", Some(ADMIN_KEY)).expect("admin feed");
    let tenant = EventStream::open(&server, "/v1/devices/0/live", Some(&key_a)).expect("tenant feed");
    let mlp = json!({ "inputs": [{ "name": "input", "shape": [1, 16], "datatype": "FP32", "data": vec![0.5; 16] }] });
    let burn = json!({ "inputs": [
        { "name": "duration_ms", "shape": [1], "datatype": "INT64", "data": [50] },
        { "name": "size", "shape": [1], "datatype": "INT64", "data": [64] },
    ]});
    let (admin_seen, tenant_seen) = std::thread::scope(|s| {
        let admin = s.spawn(|| watch(admin, &["latency-co", "batch-co"]));
        let tenant = s.spawn(|| watch(tenant, &["latency-co", "other"]));
        // Both tenants work until both feeds saw what they wait for.
        let started = Instant::now();
        while !(admin.is_finished() && tenant.is_finished()) && started.elapsed() < Duration::from_secs(90) {
            std::thread::scope(|inner| {
                inner.spawn(|| server.post_json("/v2/models/burn/infer", &key_b, &burn).expect(200));
                for _ in 0..3 {
                    server.post_json("/v2/models/mlp/infer", &key_a, &mlp).expect(200);
                }
            });
        }
        (admin.join().unwrap(), tenant.join().unwrap())
    });

    assert!(
        admin_seen.tenants.contains("latency-co") && admin_seen.tenants.contains("batch-co"),
        "{:?}",
        admin_seen.tenants
    );
    assert!(
        admin_seen.functions.contains("mlp") && admin_seen.functions.contains("burn"),
        "{:?}",
        admin_seen.functions
    );
    assert!(
        tenant_seen.tenants.contains("latency-co") && tenant_seen.tenants.contains("other"),
        "{:?}",
        tenant_seen.tenants
    );
    assert!(!tenant_seen.tenants.contains("batch-co"));
    assert!(!tenant_seen.text.contains("batch-co"), "the other tenant's name reached a tenant's feed");
    assert!(!tenant_seen.text.contains("\"burn\""), "the other tenant's function reached a tenant's feed");

    // The admin's last status: every tenant with its weight and class, queues per
    // class, memory against quota per tenant, both functions' latencies.
    let status = admin_seen.statuses.last().expect("a status");
    assert_eq!(status["index"], 0);
    assert!(status["queued"]["latency"].is_u64() && status["queued"]["batch"].is_u64(), "{status}");
    assert!(status["partition"].is_string(), "{status}");
    let rows = status["tenants"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|t| t["tenant"] == name).unwrap_or_else(|| panic!("{name}: {status}"));
    assert_eq!((row("latency-co")["class"].as_str(), row("latency-co")["weight"].as_u64()), (Some("latency"), Some(3)));
    assert_eq!(row("batch-co")["class"], "batch");
    assert!(row("batch-co")["device_time_us"].as_u64().unwrap() > 0);
    assert_eq!(
        names(&status["memory"], "tenant"),
        BTreeSet::from(["batch-co".into(), "latency-co".into()]),
        "{status}"
    );
    assert_eq!(names(&status["functions"], "function"), BTreeSet::from(["burn".into(), "mlp".into()]), "{status}");
    let mlp_latency = status["functions"].as_array().unwrap().iter().find(|f| f["function"] == "mlp").unwrap();
    assert!(mlp_latency["latency"]["p99_us"].as_f64().unwrap() >= mlp_latency["latency"]["p50_us"].as_f64().unwrap());

    // The tenant's: the other tenant's row as `other`, its own memory and functions only.
    let own = tenant_seen.statuses.last().expect("a status");
    assert_eq!(names(&own["tenants"], "tenant"), BTreeSet::from(["latency-co".into(), "other".into()]), "{own}");
    assert_eq!(names(&own["memory"], "tenant"), BTreeSet::from(["latency-co".into()]), "{own}");
    assert_eq!(names(&own["functions"], "function"), BTreeSet::from(["mlp".into()]), "{own}");
}

/// The `field` of every object in the array `list`.
fn names(list: &Value, field: &str) -> BTreeSet<String> {
    list.as_array().expect("an array").iter().map(|v| v[field].as_str().expect("a string").to_owned()).collect()
}

/// A feed opened with a key ends once the key is revoked, with an `error` event; before,
/// it went on for as long as the client kept it open.
#[test]
fn a_feed_ends_when_its_key_is_revoked() {
    let server = Server::start();
    let created = server.post_json("/v1/tenants", ADMIN_KEY, &json!({ "id": "acme" })).expect(201);
    let (key, key_id) = (created["key"].as_str().unwrap(), created["key_id"].as_str().unwrap());
    let mut feed = EventStream::open(&server, "/v1/devices/0/live", Some(key)).expect("the feed opens");
    assert_eq!(feed.next_event().expect("a first status").0, "status");
    assert_eq!(server.delete(&format!("/v1/tenants/acme/keys/{key_id}"), ADMIN_KEY).status, 204);
    // What was sent before the revocation may still arrive (a status a second); the
    // feed checks the key every 100 ms, so a few statuses bound it generously.
    let mut statuses = 0;
    let last = loop {
        let Some((name, data)) = feed.next_event() else { panic!("the feed ended without an error event") };
        match name.as_str() {
            "status" => {
                statuses += 1;
                assert!(statuses <= 3, "the feed sent {statuses} statuses after its key was revoked");
            }
            "kernels" => {}
            _ => break (name, data),
        }
    };
    assert_eq!(last.0, "error");
    assert_eq!(last.1["code"], "unauthorized", "{}", last.1);
    assert!(feed.next_event().is_none(), "the feed ends after the error");
}
