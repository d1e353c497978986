//! Every error case over real HTTP, each with its status and JSON body
//! (`{"error", "code"}`), and the rule that bad input changes nothing.

use serde_json::json;
use sluice_tests::{RawConn, Server, ServerOptions, fp32_request, function_wasm, misbehave_request};

fn small_limits() -> ServerOptions {
    ServerOptions {
        args: ["--max-component-mib", "1", "--max-request-mib", "1", "--max-artifact-mib", "1"]
            .map(String::from)
            .to_vec(),
        ..ServerOptions::default()
    }
}

/// Sends only the head of a request whose declared body exceeds the limit, and reads the answer.
fn oversize(server: &Server, method: &str, path: &str, key: &str, declared: usize) -> sluice_tests::Resp {
    let mut conn = RawConn::connect(server.addr()).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {key}\r\ncontent-type: application/octet-stream\r\ncontent-length: {declared}\r\n\r\n"
    );
    conn.write(head.as_bytes()).unwrap();
    conn.write(&vec![0u8; 4096]).unwrap();
    conn.read_response().unwrap()
}

#[test]
fn bad_input_is_a_4xx_with_a_json_body_and_changes_nothing() {
    let server = Server::start_with(small_limits());
    let key = server.create_tenant("acme");
    server.deploy(&key, "good", "echo", "");
    let before = server.get("/v1/functions", &key).expect(200);
    let put = |name: &str, bytes: Vec<u8>| server.put_bytes(&format!("/v1/functions/{name}"), &key, bytes);

    // Components that are not components of our world: 400 invalid_component, for a new
    // name and for an existing one.
    let echo = function_wasm("echo");
    let empty_component = b"\0asm\x0d\0\x01\0".to_vec();
    let core_module = b"\0asm\x01\0\0\0".to_vec();
    for name in ["good", "fresh"] {
        let msg = put(name, b"definitely not wasm".to_vec()).expect_error(400, "invalid_component");
        assert!(msg.contains("not a WebAssembly component"), "{msg}");
        let msg = put(name, core_module.clone()).expect_error(400, "invalid_component");
        assert!(msg.contains("core WebAssembly module"), "{msg}");
        let msg = put(name, empty_component.clone()).expect_error(400, "invalid_component");
        assert!(msg.contains("sluice:gpu/inference"), "{msg}");
        put(name, echo[..echo.len() / 2].to_vec()).expect_error(400, "invalid_component");
        put(name, Vec::new()).expect_error(400, "invalid_component");
    }

    // Bad names and options.
    put("Bad_Name", echo.clone()).expect_error(400, "invalid_name");
    server.put_bytes("/v1/functions/x?priority=urgent", &key, echo.clone()).expect_error(400, "invalid_request");
    server.put_bytes("/v1/functions/x?bogus=1", &key, echo.clone()).expect_error(400, "invalid_request");
    server.put_bytes("/v1/functions/x?timeout_ms=0", &key, echo.clone()).expect_error(400, "invalid_input");
    server
        .put_bytes("/v1/functions/x?memory_limit_bytes=1099511627776", &key, echo.clone())
        .expect_error(400, "invalid_request");

    // Bad requests to a good function: bad JSON, wrong shapes, wrong types → 400.
    let invoke = |body: &[u8]| {
        server.call("POST", "/v1/functions/good/invoke", Some(&key), Some(("application/json", body.to_vec())))
    };
    assert!(invoke(b"{").expect_error(400, "invalid_request").contains("not valid JSON"));
    invoke(b"[1, 2]").expect_error(400, "invalid_request");
    let wrong_shape = json!({ "inputs": [{ "name": "x", "shape": [3], "datatype": "FP32", "data": [1.0] }] });
    assert!(
        invoke(&serde_json::to_vec(&wrong_shape).unwrap())
            .expect_error(400, "invalid_request")
            .contains("needs 3 elements")
    );
    let wrong_type = json!({ "inputs": [{ "name": "x", "shape": [1], "datatype": "FP64", "data": [1.0] }] });
    invoke(&serde_json::to_vec(&wrong_type).unwrap()).expect_error(400, "invalid_request");
    server.post_json("/v2/models/good/infer", &key, &json!({ "inputs": 3 })).expect_error(400, "invalid_request");

    // Shapes the function itself refuses: mlp wants [n, 16].
    server.deploy(&key, "mlp", "mlp", "");
    let bad = json!({ "inputs": [{ "name": "input", "shape": [1, 15], "datatype": "FP32", "data": vec![0.0; 15] }] });
    server.post_json("/v1/functions/mlp/invoke", &key, &bad).expect_error(400, "invalid_input");
    assert_eq!(server.delete("/v1/functions/mlp", &key).status, 204);

    // Unknown function, unknown route, wrong method.
    server.post_json("/v1/functions/missing/invoke", &key, &fp32_request(&[1.0])).expect_error(404, "not_found");
    server.post_json("/v2/models/missing/infer", &key, &fp32_request(&[1.0])).expect_error(404, "not_found");
    server.get("/v1/nothing-here", &key).expect_error(404, "not_found");
    server.call("POST", "/v1/functions", Some(&key), None).expect_error(405, "method_not_allowed");

    // Oversize bodies: 413 before the body is read.
    oversize(&server, "PUT", "/v1/functions/big", &key, 2 << 20).expect_error(413, "payload_too_large");
    oversize(&server, "POST", "/v1/functions/good/invoke", &key, 2 << 20).expect_error(413, "payload_too_large");
    oversize(&server, "POST", "/v2/models/good/infer", &key, 2 << 20).expect_error(413, "payload_too_large");
    oversize(&server, "PUT", "/v1/functions/good/artifacts/w.bin", &key, 2 << 20)
        .expect_error(413, "payload_too_large");
    // A streamed artifact (no length declared up front) that grows past the limit.
    let mut conn = RawConn::connect(server.addr()).unwrap();
    let head = format!(
        "PUT /v1/functions/good/artifacts/w.bin HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {key}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    conn.write(head.as_bytes()).unwrap();
    for _ in 0..17 {
        conn.write(format!("{:x}\r\n", 64 << 10).as_bytes()).unwrap();
        conn.write(&vec![7u8; 64 << 10]).unwrap();
        conn.write(b"\r\n").unwrap();
    }
    conn.write(b"0\r\n\r\n").unwrap();
    conn.read_response().unwrap().expect_error(413, "payload_too_large");

    // Nothing changed: same list, one version of `good`, and it still serves.
    assert_eq!(server.get("/v1/functions", &key).expect(200), before);
    let info = server.get("/v1/functions/good", &key).expect(200);
    assert_eq!(info["versions"].as_array().unwrap().len(), 1);
    server.get("/v1/functions/fresh", &key).expect_error(404, "not_found");
    let out = server.post_json("/v1/functions/good/invoke", &key, &fp32_request(&[1.0])).expect(200);
    assert_eq!(out["outputs"][0]["data"], json!([1.0]));
}

#[test]
fn misbehaving_functions_fail_alone_with_clear_errors() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    // `bad` has a short deadline for the looping modes only: the other modes run on
    // `sturdy`, whose deadline no loaded machine reaches, so their answers never depend
    // on how fast this machine is.
    server.deploy(&key, "bad", "misbehave", "timeout_ms=300&memory_limit_bytes=33554432");
    server.deploy(&key, "sturdy", "misbehave", "timeout_ms=600000&memory_limit_bytes=33554432");
    server.deploy(&key, "big", "misbehave", "memory_limit_bytes=805306368");
    server.deploy(&key, "patient", "misbehave", "timeout_ms=600000");
    let call = |name: &str, mode: &str| {
        server.post_json(&format!("/v1/functions/{name}/invoke"), &key, &misbehave_request(mode))
    };

    assert_eq!(call("sturdy", "ok").expect(200)["outputs"][0]["data"], json!(["ok"]));
    assert!(call("bad", "loop").expect_error(504, "timeout").contains("300 ms"));
    // A request's own timeout (Triton's `timeout`, µs) shortens the function's limit
    // and never extends it.
    let with_timeout = |name: &str, us: u64| {
        let mut request = misbehave_request("loop");
        request["parameters"] = json!({ "timeout": us });
        server.post_json(&format!("/v2/models/{name}/infer"), &key, &request)
    };
    assert!(with_timeout("patient", 250_000).expect_error(504, "timeout").contains("250 ms"));
    assert!(with_timeout("bad", 600_000_000).expect_error(504, "timeout").contains("300 ms"));
    call("sturdy", "trap").expect_error(500, "function_trapped");
    call("sturdy", "oom").expect_error(500, "memory_limit_exceeded");
    assert!(call("sturdy", "bad-shape").expect_error(500, "function_failed").contains("shape-mismatch"));
    call("sturdy", "no-such-mode").expect_error(400, "invalid_input");
    call("big", "huge-output").expect_error(502, "transfer_too_large");
    // The function (and the server) still work afterwards.
    assert_eq!(call("sturdy", "leak").expect(200)["outputs"][0]["data"], json!(["ok"]));
    let status = server.status(&key);
    assert_eq!(status["in_flight"], 0);
}
