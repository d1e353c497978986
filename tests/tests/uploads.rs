//! Artifact uploads against slow clients over real HTTP: a body that stalls or trickles
//! is cut off with 408 `upload_stalled` and leaves nothing; a tenant's uploads in flight
//! are capped (429 `too_many_uploads` with `Retry-After`, before the body is read, whose
//! bytes the client goes on sending are dropped rather than reset); and
//! slow uploads left open hold nothing that a delete (and its gc) or another tenant's
//! deploy waits for.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_tests::{ADMIN_KEY, RawConn, Server, ServerOptions, fp32_request};

/// The head of an artifact upload declaring `len` body bytes.
fn upload_head(name: &str, artifact: &str, key: &str, len: usize) -> String {
    format!(
        "PUT /v1/functions/{name}/artifacts/{artifact} HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {key}\r\n\
         content-type: application/octet-stream\r\ncontent-length: {len}\r\n\r\n"
    )
}

/// Temporary blob files in the server's data directory.
fn temp_files(server: &Server) -> Vec<PathBuf> {
    std::fs::read_dir(server.data_dir.join("blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".tmp-"))
        .collect()
}

fn versions(server: &Server, key: &str, name: &str) -> Vec<Value> {
    server.get(&format!("/v1/functions/{name}"), key).expect(200)["versions"].as_array().unwrap().clone()
}

fn tenant_row(status: &Value, tenant: &str) -> Value {
    status["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == tenant).cloned().unwrap_or(Value::Null)
}

#[test]
fn a_stalled_or_trickling_upload_is_cut_off_with_408_and_leaves_nothing() {
    // A window of 1 s that must bring 100 kB: a byte every 20 ms is far below it.
    let server = Server::start_with(ServerOptions {
        args: ["--upload-read-timeout-ms", "1000", "--upload-min-bytes-per-s", "100000"].map(String::from).to_vec(),
        ..ServerOptions::default()
    });
    let key = server.create_tenant("acme");
    server.deploy(&key, "f", "echo", "");
    let before = versions(&server, &key, "f");

    // A body that stops: 10 bytes of the 1 MiB it declares, then nothing.
    let mut conn = RawConn::connect(server.addr()).unwrap();
    conn.write(upload_head("f", "w.bin", &key, 1 << 20).as_bytes()).unwrap();
    conn.write(&[7; 10]).unwrap();
    let r = conn.read_response().expect("a stalled upload gets an answer");
    assert!(r.expect_error(408, "upload_stalled").contains("cut off"));
    assert_eq!(r.headers.get("connection").map(String::as_str), Some("close"));

    // A body that never stops but trickles: a byte every 20 ms until the server answers.
    let mut conn = RawConn::connect(server.addr()).unwrap();
    conn.write(upload_head("f", "w.bin", &key, 1 << 20).as_bytes()).unwrap();
    let mut sent = 0;
    while !conn.response_ready(Duration::from_millis(20)).unwrap() {
        conn.write(b"x").unwrap();
        sent += 1;
        assert!(sent < (1 << 20), "the whole body went through at a trickle");
    }
    conn.read_response().unwrap().expect_error(408, "upload_stalled");
    assert!(sent > 0, "it trickled before it was cut off");

    // Nothing changed, nothing left behind; an upload at a normal pace still works.
    assert_eq!(versions(&server, &key, "f"), before);
    assert_eq!(temp_files(&server), Vec::<PathBuf>::new(), "a refused upload leaves no temporary file");
    let v = server.put_bytes("/v1/functions/f/artifacts/w.bin", &key, vec![1; 64 << 10]).expect(201);
    assert_eq!(v["artifacts"]["w.bin"]["size"], 64 << 10);
}

#[test]
fn slow_uploads_are_capped_per_tenant_and_hold_nothing_deletes_or_other_tenants_wait_for() {
    let server = Server::start_with(ServerOptions {
        args: ["--tenant-max-uploads", "2"].map(String::from).to_vec(),
        ..ServerOptions::default()
    });
    let slow_key = server.create_tenant("slow");
    let other = server.create_tenant("other");
    server.deploy(&slow_key, "f", "echo", "");
    server.deploy(&other, "g", "echo", "");

    // Two uploads of `slow` stay open: a few bytes of the 1 MiB each declares.
    let mut open: Vec<RawConn> = (0..2)
        .map(|i| {
            let mut conn = RawConn::connect(server.addr()).unwrap();
            conn.write(upload_head("f", &format!("w{i}.bin"), &slow_key, 1 << 20).as_bytes()).unwrap();
            conn.write(b"abc").unwrap();
            conn
        })
        .collect();
    let status =
        server.wait_for_status(ADMIN_KEY, "two uploads in flight", |s| tenant_row(s, "slow")["uploads_in_flight"] == 2);
    assert_eq!(tenant_row(&status, "slow")["upload_limit"], 2);
    let metrics = String::from_utf8(server.get("/metrics", ADMIN_KEY).body).unwrap();
    assert!(metrics.contains("sluice_tenant_uploads_in_flight{tenant=\"slow\"} 2"), "{metrics}");

    // While they are open: the other tenant deploys and uploads, `slow` deletes its
    // function (which runs gc), the other deploys again, and the admin deletes `slow`.
    server.deploy(&other, "g", "echo", "");
    server.put_bytes("/v1/functions/g/artifacts/w.bin", &other, vec![5; 4096]).expect(201);
    assert_eq!(server.delete("/v1/functions/f", &slow_key).status, 204);
    server.deploy(&other, "h", "echo", "");
    server.deploy(&slow_key, "f", "echo", "");

    // A third upload of `slow` is refused at once, before its body.
    let mut third = RawConn::connect(server.addr()).unwrap();
    third.write(upload_head("f", "w2.bin", &slow_key, 1 << 20).as_bytes()).unwrap();
    let r = third.read_response().expect("the third upload is answered before its body is sent");
    assert!(r.expect_error(429, "too_many_uploads").contains("2 artifact uploads"));
    assert_eq!(r.headers.get("retry-after").map(String::as_str), Some("1"));
    assert_eq!(r.headers.get("connection").map(String::as_str), Some("close"));

    // A refused client that goes on sending its body (as one that writes the whole
    // request before reading does) still gets its refusal: what it sends is read and
    // dropped before the connection closes, rather than answered by a reset.
    let mut fourth = RawConn::connect(server.addr()).unwrap();
    fourth.write(upload_head("f", "w3.bin", &slow_key, 512 << 10).as_bytes()).unwrap();
    fourth.write(&[1; 64 << 10]).unwrap();
    // Long enough for the refusal to be on its way.
    std::thread::sleep(Duration::from_millis(200));
    fourth.write(&[1; 448 << 10]).expect("the rest of the body is taken, not reset");
    let r = fourth.read_response().expect("the refusal arrives");
    r.expect_error(429, "too_many_uploads");

    assert_eq!(server.delete(&format!("/v1/tenants/{}", "slow"), ADMIN_KEY).status, 204);

    // The open uploads end: their tenant is gone, so nothing is stored, nothing left.
    for conn in &mut open {
        conn.write(&vec![9; (1 << 20) - 3]).unwrap();
        conn.read_response().unwrap().expect_error(404, "not_found");
    }
    assert_eq!(temp_files(&server), Vec::<PathBuf>::new());
    let out = server.post_json("/v1/functions/h/invoke", &other, &fp32_request(&[2.0])).expect(200);
    assert_eq!(out["outputs"][0]["data"], json!([2.0]));
    assert_eq!(tenant_row(&server.status(ADMIN_KEY), "other")["uploads_in_flight"], 0);
}
