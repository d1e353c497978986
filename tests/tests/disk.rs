//! Disk over real HTTP: a tenant's disk quota (the bytes of the distinct blobs its
//! versions reference) refuses deploys and uploads above it with 429
//! `disk_quota_exceeded`, before the bytes are written where their size is declared
//! and by cutting off a stream that grows past it, and nothing changes; the retention
//! policy keeps the newest `keep_versions` versions of a function (and pinned ones),
//! prunes the rest and their blob files are gone from the data directory; usage is in
//! `/v1/status` and `/metrics`.

use std::path::PathBuf;

use serde_json::{Value, json};
use sluice_tests::{ADMIN_KEY, RawConn, Server, ServerOptions, function_wasm};

fn blob_files(server: &Server) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(server.data_dir.join("blobs/sha256")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

fn blob_exists(server: &Server, digest: &Value) -> bool {
    server.data_dir.join("blobs/sha256").join(digest.as_str().expect("a digest")).exists()
}

fn versions(server: &Server, key: &str, name: &str) -> Vec<u64> {
    let info = server.get(&format!("/v1/functions/{name}"), key).expect(200);
    info["versions"].as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect()
}

fn tenant_row(server: &Server, tenant: &str) -> Value {
    let status = server.status(ADMIN_KEY);
    status["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == tenant).cloned().unwrap_or(Value::Null)
}

fn patch_tenant(server: &Server, tenant: &str, patch: Value) {
    let body = Some(("application/json", serde_json::to_vec(&patch).unwrap()));
    server.call("PATCH", &format!("/v1/tenants/{tenant}"), Some(ADMIN_KEY), body).expect(200);
}

#[test]
fn a_tenant_over_its_disk_quota_is_refused_and_nothing_changes() {
    let server = Server::start();
    let key = server.create_tenant("filler");
    let echo = function_wasm("echo").len() as u64;
    let quota = echo + 50_000;
    patch_tenant(&server, "filler", json!({ "disk_quota_bytes": quota }));
    server.deploy(&key, "f", "echo", "");
    let row = tenant_row(&server, "filler");
    assert_eq!((row["disk_used_bytes"].as_u64(), row["disk_quota_bytes"].as_u64()), (Some(echo), Some(quota)));
    let (files, before) = (blob_files(&server), versions(&server, &key, "f"));
    let unchanged = || {
        assert_eq!(blob_files(&server), files, "no blob file (or temporary file) added");
        assert_eq!(versions(&server, &key, "f"), before);
        assert_eq!(tenant_row(&server, "filler")["disk_used_bytes"], echo);
    };

    // A deploy of a component above the room left (mlp is ~70 kB).
    assert!(function_wasm("mlp").len() as u64 > quota - echo);
    let r = server.put_bytes("/v1/functions/g", &key, function_wasm("mlp"));
    assert!(r.expect_error(429, "disk_quota_exceeded").contains("disk quota"));
    assert_eq!(r.headers.get("retry-after").map(String::as_str), Some("1"));
    server.get("/v1/functions/g", &key).expect_error(404, "not_found");
    unchanged();

    // An artifact declaring more than the room left: refused before its body.
    let mut conn = RawConn::connect(server.addr()).unwrap();
    let head = format!(
        "PUT /v1/functions/f/artifacts/w.bin HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {key}\r\ncontent-length: 60000\r\n\r\n"
    );
    conn.write(head.as_bytes()).unwrap();
    conn.read_response().unwrap().expect_error(429, "disk_quota_exceeded");
    unchanged();

    // A streamed artifact (no length declared) that grows past it: cut off.
    let mut conn = RawConn::connect(server.addr()).unwrap();
    let head = format!(
        "PUT /v1/functions/f/artifacts/w.bin HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {key}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    conn.write(head.as_bytes()).unwrap();
    for _ in 0..6 {
        conn.write(format!("{:x}\r\n", 10_000).as_bytes()).unwrap();
        conn.write(&[3u8; 10_000]).unwrap();
        conn.write(b"\r\n").unwrap();
    }
    conn.write(b"0\r\n\r\n").unwrap();
    conn.read_response().unwrap().expect_error(429, "disk_quota_exceeded");
    unchanged();

    // What fits is stored, and counted.
    server.put_bytes("/v1/functions/f/artifacts/w.bin", &key, vec![1; 40_000]).expect(201);
    assert_eq!(tenant_row(&server, "filler")["disk_used_bytes"], echo + 40_000);
    let metrics = String::from_utf8(server.get("/metrics", ADMIN_KEY).body).unwrap();
    assert!(metrics.contains(&format!("sluice_tenant_disk_used_bytes{{tenant=\"filler\"}} {}", echo + 40_000)));
    assert!(metrics.contains(&format!("sluice_tenant_disk_quota_bytes{{tenant=\"filler\"}} {quota}")));
    // A tenant sees its own usage.
    let own = server.status(&key);
    assert_eq!(own["tenants"][0]["disk_used_bytes"], echo + 40_000);
    // The same component again adds nothing (a blob counts once per tenant), so it is allowed.
    server.deploy(&key, "f2", "echo", "");
    assert_eq!(tenant_row(&server, "filler")["disk_used_bytes"], echo + 40_000);
}

#[test]
fn only_the_newest_versions_and_pinned_ones_are_kept_and_pruned_blobs_are_deleted() {
    let server = Server::start_with(ServerOptions {
        args: ["--keep-versions", "3"].map(String::from).to_vec(),
        ..ServerOptions::default()
    });
    let key = server.create_tenant("acme");
    server.deploy(&key, "f", "echo", "");
    // Versions 2..=7, each with new content for the same artifact.
    let mut digests = vec![Value::Null, Value::Null];
    for n in 2..=7u8 {
        let v = server.put_bytes("/v1/functions/f/artifacts/w.bin", &key, vec![n; 1000 + n as usize]).expect(201);
        assert_eq!(v["version"], n);
        digests.push(v["artifacts"]["w.bin"]["digest"].clone());
        if n == 2 {
            let pinned = server.post_json("/v1/functions/f/versions/2/pin", &key, &json!({})).expect(200);
            assert_eq!(pinned["pinned"], true);
        }
    }
    assert_eq!(versions(&server, &key, "f"), [2, 5, 6, 7], "the newest 3 and the pinned one");
    for n in [3, 4] {
        assert!(!blob_exists(&server, &digests[n]), "version {n}'s artifact is gone from the data directory");
    }
    for n in [2, 5, 6, 7] {
        assert!(blob_exists(&server, &digests[n]), "version {n}'s artifact is kept");
    }
    server.get("/v2/models/f/versions/3", &key).expect_error(404, "not_found");
    let echo = function_wasm("echo").len() as u64;
    let artifacts: u64 = [2u64, 5, 6, 7].iter().map(|n| 1000 + n).sum();
    assert_eq!(tenant_row(&server, "acme")["disk_used_bytes"], echo + artifacts);

    // Unpinned, version 2 goes at the next write; a deploy prunes as uploads do.
    assert_eq!(server.delete("/v1/functions/f/versions/2/pin", &key).status, 200);
    let v8 = server.deploy(&key, "f", "mlp", "");
    assert_eq!(v8["version"], 8);
    assert_eq!(versions(&server, &key, "f"), [6, 7, 8]);
    for n in [2, 5] {
        assert!(!blob_exists(&server, &digests[n]), "version {n}'s artifact is gone");
    }
    assert!(blob_exists(&server, &digests[7]), "the serving version's artifact stays");
    assert!(blob_exists(&server, &v8["digest"]));
    let input = json!({ "inputs": [{ "name": "input", "shape": [1, 16], "datatype": "FP32", "data": vec![0.0; 16] }] });
    server.post_json("/v1/functions/f/invoke", &key, &input).expect(200);
    // A policy per tenant: the admin keeps more for this one.
    patch_tenant(&server, "acme", json!({ "keep_versions": 5 }));
    server.put_bytes("/v1/functions/f/artifacts/w.bin", &key, vec![9; 10]).expect(201);
    assert_eq!(versions(&server, &key, "f"), [6, 7, 8, 9]);
}
