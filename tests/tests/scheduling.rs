//! The scheduler through the server: a batch-class `gemm-burn` next to a
//! latency-class function, and `/v1/status` reporting per device and per tenant the
//! queues, device time, memory and quota, preemptions and the partition in force.

use serde_json::json;
use sluice_tests::{ADMIN_KEY, Server, fp32_request};

#[test]
fn status_reports_classes_device_time_memory_and_partition() {
    let server = Server::start();
    let key_a = server.create_tenant("latency-co");
    let key_b = server.create_tenant("batch-co");
    // New tenants run as batch (the server's default class); the admin grants latency.
    let grant = serde_json::to_vec(&json!({ "max_priority": "latency" })).unwrap();
    server.call("PATCH", "/v1/tenants/latency-co", Some(ADMIN_KEY), Some(("application/json", grant))).expect(200);
    server.deploy(&key_a, "echo", "echo", "priority=latency");
    server.deploy(&key_b, "burn", "gemm_burn", "priority=batch");

    std::thread::scope(|s| {
        let burn = s.spawn(|| {
            let req = json!({ "inputs": [
                { "name": "duration_ms", "shape": [1], "datatype": "INT64", "data": [400] },
                { "name": "size", "shape": [1], "datatype": "INT64", "data": [128] },
            ]});
            server.post_json("/v2/models/burn/infer", &key_b, &req).expect(200)
        });
        for _ in 0..20 {
            server.post_json("/v2/models/echo/infer", &key_a, &fp32_request(&[1.0, 2.0])).expect(200);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let out = burn.join().unwrap();
        assert!(out["outputs"][0]["data"][0].as_i64().unwrap() > 0, "{out}");
    });

    let admin = server.status(ADMIN_KEY);
    let device = &admin["devices"][0];
    assert_eq!(device["policy"], "priority");
    assert!(device["partition"].as_str().unwrap().starts_with("none"), "{device}");
    let tenants = device["tenants"].as_array().unwrap();
    let batch = tenants.iter().find(|t| t["tenant"] == "batch-co").expect("batch tenant");
    assert_eq!(batch["class"], "batch");
    assert!(batch["device_time_us"].as_u64().unwrap() > 10_000, "{batch}");
    let latency = tenants.iter().find(|t| t["tenant"] == "latency-co").expect("latency tenant");
    assert_eq!(latency["class"], "latency");
    assert!(device["preemption_latency"]["count"].as_u64().unwrap() >= 20, "{device}");
    assert_eq!(admin["tenants"].as_array().unwrap().len(), 2);

    // A tenant sees only itself.
    let own = server.status(&key_a);
    let names: Vec<_> = own["devices"][0]["tenants"].as_array().unwrap().iter().map(|t| t["tenant"].clone()).collect();
    assert_eq!(names, vec![json!("latency-co")]);
    assert_eq!(own["tenants"].as_array().unwrap().len(), 1);
    assert_eq!(own["tenants"][0]["tenant"], "latency-co");
}
