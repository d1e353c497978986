//! Tenants and keys over real HTTP: a tenant sees and touches only its own functions,
//! unknown or missing keys are 401, keys of the wrong kind are 403, and health checks
//! need no key.

use serde_json::json;
use sluice_tests::{ADMIN_KEY, Server, fp32_request, function_wasm};

#[test]
fn tenants_are_isolated() {
    let server = Server::start();
    let a = server.create_tenant("tenant-a");
    let b = server.create_tenant("tenant-b");
    server.deploy(&a, "private", "echo", "");

    // B cannot see, invoke, change or delete A's function: it does not exist for B.
    server.get("/v1/functions/private", &b).expect_error(404, "not_found");
    server.post_json("/v1/functions/private/invoke", &b, &fp32_request(&[1.0])).expect_error(404, "not_found");
    server.post_json("/v2/models/private/infer", &b, &fp32_request(&[1.0])).expect_error(404, "not_found");
    server.get("/v2/models/private", &b).expect_error(404, "not_found");
    server.get("/v2/models/private/ready", &b).expect_error(404, "not_found");
    server.delete("/v1/functions/private", &b).expect_error(404, "not_found");
    server
        .call(
            "PUT",
            "/v1/functions/private/artifacts/w.bin",
            Some(&b),
            Some(("application/octet-stream", vec![1, 2, 3])),
        )
        .expect_error(404, "not_found");
    assert_eq!(server.get("/v1/functions", &b).expect(200)["functions"], json!([]));

    // B deploying the same name creates B's own function; A's stays untouched.
    assert_eq!(server.deploy(&b, "private", "mlp", "")["version"], 1);
    let a_info = server.get("/v1/functions/private", &a).expect(200);
    assert_eq!(a_info["latest_version"], 1);
    let out = server.post_json("/v1/functions/private/invoke", &a, &fp32_request(&[2.0])).expect(200);
    assert_eq!(out["outputs"][0]["data"], json!([2.0]));

    // Tenant keys cannot administer; the admin key has no functions.
    server.get("/v1/tenants", &a).expect_error(403, "forbidden");
    server.post_json("/v1/tenants", &a, &json!({ "id": "evil" })).expect_error(403, "forbidden");
    server.post_json("/v1/tenants/tenant-b/keys", &a, &json!({})).expect_error(403, "forbidden");
    server.get("/v1/functions", ADMIN_KEY).expect_error(403, "forbidden");
    server.put_bytes("/v1/functions/x", ADMIN_KEY, function_wasm("echo")).expect_error(403, "forbidden");

    // Wrong, malformed and missing keys: 401 with a JSON body and a challenge.
    let wrong = server.get("/v1/functions", "sk_tenant-a_0000000000000000");
    wrong.expect_error(401, "unauthorized");
    assert_eq!(wrong.headers.get("www-authenticate").map(String::as_str), Some("Bearer"));
    server.call("GET", "/v1/functions", None, None).expect_error(401, "unauthorized");
    server.call("POST", "/v2/models/private/infer", None, None).expect_error(401, "unauthorized");
    server.call("GET", "/v2", None, None).expect_error(401, "unauthorized");
    server.call("GET", "/v1/status", None, None).expect_error(401, "unauthorized");

    // Health checks need no key.
    server.call("GET", "/v2/health/live", None, None).expect(200);
    server.call("GET", "/v2/health/ready", None, None).expect(200);
}

#[test]
fn admin_manages_tenants_and_keys() {
    let server = Server::start();
    let created = server
        .post_json(
            "/v1/tenants",
            ADMIN_KEY,
            &json!({ "id": "corp", "settings": { "weight": 2, "max_concurrency": 3 } }),
        )
        .expect(201);
    assert_eq!(created["tenant"]["settings"]["weight"], 2);
    let first = created["key"].as_str().unwrap().to_owned();
    server.post_json("/v1/tenants", ADMIN_KEY, &json!({ "id": "corp" })).expect_error(409, "already_exists");
    server.post_json("/v1/tenants", ADMIN_KEY, &json!({ "id": "Bad Name" })).expect_error(400, "invalid_name");
    server.post_json("/v1/tenants", ADMIN_KEY, &json!({ "nope": 1 })).expect_error(400, "invalid_request");

    // A second key works; revoking the first makes it 401.
    let second = server.post_json("/v1/tenants/corp/keys", ADMIN_KEY, &json!({})).expect(201);
    let (second_key, first_id) =
        (second["key"].as_str().unwrap().to_owned(), created["key_id"].as_str().unwrap().to_owned());
    let keys = server.get("/v1/tenants/corp/keys", ADMIN_KEY).expect(200);
    assert_eq!(keys["keys"].as_array().unwrap().len(), 2);
    assert!(!keys.to_string().contains(&first), "plaintext keys must never be listed");
    assert_eq!(server.delete(&format!("/v1/tenants/corp/keys/{first_id}"), ADMIN_KEY).status, 204);
    server.get("/v1/functions", &first).expect_error(401, "unauthorized");
    server.get("/v1/functions", &second_key).expect(200);

    let list = server.get("/v1/tenants", ADMIN_KEY).expect(200);
    assert_eq!(list["tenants"][0]["id"], "corp");

    // Deleting a tenant removes its keys and functions.
    server.deploy(&second_key, "f", "echo", "");
    assert_eq!(server.delete("/v1/tenants/corp", ADMIN_KEY).status, 204);
    server.get("/v1/functions", &second_key).expect_error(401, "unauthorized");
    server.get("/v1/tenants/corp", ADMIN_KEY).expect_error(404, "not_found");
}

/// A tenant over its device-memory quota gets the quota's own code (429, retryable),
/// not `function_failed` (500) as before; another tenant is served, and the status
/// reports the device healthy with the tenant's guest CPU time.
#[test]
fn a_tenant_over_its_memory_quota_gets_quota_exceeded() {
    let server = Server::start();
    // 8 KiB: less than the mlp's 16 KiB first layer.
    let settings = json!({ "id": "small", "settings": { "memory_quota_bytes": 8192 } });
    let small = server.post_json("/v1/tenants", ADMIN_KEY, &settings).expect(201)["key"].as_str().unwrap().to_owned();
    let other = server.create_tenant("other");
    server.deploy(&small, "mlp", "mlp", "");
    server.deploy(&other, "mlp", "mlp", "");
    let input =
        json!({ "inputs": [{ "name": "input", "shape": [1, 16], "datatype": "FP32", "data": vec![0.5f32; 16] }] });
    let refused = server.post_json("/v1/functions/mlp/invoke", &small, &input);
    let message = refused.expect_error(429, "quota_exceeded");
    assert!(message.contains("quota") && message.contains("small"), "{message}");
    assert!(refused.headers.contains_key("retry-after"), "{:?}", refused.headers);
    server.post_json("/v1/functions/mlp/invoke", &other, &input).expect(200);

    // Device health is the admin's view; a tenant sees its own usage.
    let status = server.status(ADMIN_KEY);
    let device = &status["devices"][0];
    assert_eq!(device["health"], json!({ "state": "healthy" }), "{device}");
    assert_eq!(device["contained_faults"], 0);
    let own = server.status(&other);
    let tenant = &own["devices"][0]["tenants"][0];
    assert_eq!(tenant["tenant"], "other");
    assert!(tenant["guest_cpu_us"].is_u64(), "{tenant}");
}

/// A version's artifacts are charged to its tenant's device-memory quota before they are
/// placed on the device: an upload that would make a version larger than the quota is
/// refused while it streams (413, nothing stored), and another tenant deploys with
/// artifacts and runs afterwards. Before, the upload was stored and placed whatever the
/// quota (201).
#[test]
fn artifacts_over_the_tenants_quota_are_refused_before_they_are_placed() {
    let server = Server::start();
    let settings = json!({ "id": "small", "settings": { "memory_quota_bytes": 64 << 10 } });
    let small = server.post_json("/v1/tenants", ADMIN_KEY, &settings).expect(201)["key"].as_str().unwrap().to_owned();
    server.deploy(&small, "f", "echo", "");
    let refused = server.put_bytes("/v1/functions/f/artifacts/w.bin", &small, vec![0; 100 << 10]);
    let message = refused.expect_error(413, "payload_too_large");
    assert!(message.contains("quota"), "{message}");
    let info = server.get("/v1/functions/f", &small).expect(200);
    assert_eq!(info["versions"].as_array().unwrap().len(), 1, "nothing stored: {info}");
    assert_eq!(server.status(&small)["tenants"][0]["weights_placed_bytes"], 0);

    let other = server.create_tenant("other");
    server.deploy(&other, "f", "echo", "");
    server.put_bytes("/v1/functions/f/artifacts/w.bin", &other, vec![0; 100 << 10]).expect(201);
    server.post_json("/v1/functions/f/invoke", &other, &fp32_request(&[1.0])).expect(200);
    assert_eq!(server.status(&other)["tenants"][0]["weights_placed_bytes"], 100 << 10);
}
