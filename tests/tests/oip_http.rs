//! The Open Inference Protocol over HTTP at the byte level: the binary tensor data
//! extension (and every malformed framing → 400), versioned routes, `outputs`
//! selection, request parameters, and function signatures (reported in metadata and the
//! model config, checked before any guest code runs, malformed ones refused at deploy).

use serde_json::{Value, json};
use sluice_tests::{RawConn, Resp, Server, function_wasm};

/// POSTs `body` with an optional `Inference-Header-Content-Length`.
fn post_framed(server: &Server, path: &str, key: &str, json_length: Option<&str>, body: &[u8]) -> Resp {
    let mut conn = RawConn::connect(server.addr()).expect("connect");
    let extra = json_length.map(|n| format!("inference-header-content-length: {n}\r\n")).unwrap_or_default();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: sluice\r\nauthorization: Bearer {key}\r\ncontent-type: application/octet-stream\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    conn.write(head.as_bytes()).unwrap();
    conn.write(body).unwrap();
    conn.read_response().expect("a response")
}

/// A JSON header followed by binary data, and the header's length.
fn framed(header: &Value, binary: &[u8]) -> (Vec<u8>, String) {
    let mut body = serde_json::to_vec(header).unwrap();
    let n = body.len().to_string();
    body.extend_from_slice(binary);
    (body, n)
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn binary_tensor_data_in_requests_and_responses() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    let meta = server.get("/v2", &key).expect(200);
    assert_eq!(meta["extensions"], json!(["binary_tensor_data"]));

    // x (binary FP32), n (JSON INT64), s (binary BYTES with an empty and a non-UTF-8
    // element); x and s come back binary, n as JSON.
    let strings = [0u32.to_le_bytes().to_vec(), 2u32.to_le_bytes().to_vec(), vec![0xff, 0x00]].concat();
    let header = json!({
        "id": "b1",
        "inputs": [
            { "name": "x", "shape": [2], "datatype": "FP32", "parameters": { "binary_data_size": 8 } },
            { "name": "n", "shape": [1], "datatype": "INT64", "data": [-3] },
            { "name": "s", "shape": [2], "datatype": "BYTES", "parameters": { "binary_data_size": strings.len() } },
        ],
        "outputs": [
            { "name": "s", "parameters": { "binary_data": true } },
            { "name": "n" },
            { "name": "x", "parameters": { "binary_data": true } },
        ],
    });
    let (body, n) = framed(&header, &[f32_bytes(&[1.5, -2.0]), strings.clone()].concat());
    let r = post_framed(&server, "/v2/models/echo/infer", &key, Some(&n), &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.headers["content-type"], "application/octet-stream");
    let json_len: usize = r.headers["inference-header-content-length"].parse().unwrap();
    let out: Value = serde_json::from_slice(&r.body[..json_len]).unwrap();
    assert_eq!(out["id"], "b1");
    let names: Vec<&str> = out["outputs"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["s", "n", "x"], "the requested outputs, in the requested order");
    assert_eq!(out["outputs"][0]["parameters"]["binary_data_size"], strings.len());
    assert_eq!(out["outputs"][1]["data"], json!([-3]));
    assert!(out["outputs"][2].get("data").is_none());
    assert_eq!(r.body[json_len..], [strings, f32_bytes(&[1.5, -2.0])].concat());

    // binary_data_output: every output binary; without it (and with JSON inputs), plain JSON.
    let header = json!({ "parameters": { "binary_data_output": true },
        "inputs": [{ "name": "x", "shape": [1], "datatype": "FP32", "data": [4.0] }] });
    let r = post_framed(&server, "/v2/models/echo/infer", &key, None, &serde_json::to_vec(&header).unwrap());
    assert_eq!(r.status, 200);
    let json_len: usize = r.headers["inference-header-content-length"].parse().unwrap();
    assert_eq!(r.body[json_len..], f32_bytes(&[4.0]));
    let r = server.post_json("/v2/models/echo/infer", &key, &json!({ "inputs": header["inputs"] }));
    assert!(!r.headers.contains_key("inference-header-content-length"));
    assert_eq!(r.expect(200)["outputs"][0]["data"], json!([4.0]));
}

#[test]
fn malformed_binary_framing_is_a_400_that_says_why() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    let x = |size: usize| json!({ "inputs": [{ "name": "x", "shape": [2], "datatype": "FP32", "parameters": { "binary_data_size": size } }] });
    let (good, n) = framed(&x(8), &f32_bytes(&[1.0, 2.0]));
    let (short, short_n) = framed(&x(8), &f32_bytes(&[1.0]));
    let (wrong_size, wrong_n) = framed(&x(4), &f32_bytes(&[1.0]));
    let (extra, extra_n) = framed(&x(8), &f32_bytes(&[1.0, 2.0, 3.0]));
    let too_long = (good.len() + 1).to_string();
    let cases: Vec<(&[u8], Option<&str>, &str)> = vec![
        (&good, Some("twelve"), "must be a non-negative integer"),
        (&good, Some("-4"), "must be a non-negative integer"),
        (&good, Some("0"), "raw binary requests"),
        (&good, Some(&too_long), "more than the body's"),
        (&good, None, "Inference-Header-Content-Length"),
        (&short, Some(&short_n), "more than the 4 bytes of binary data left"),
        (&wrong_size, Some(&wrong_n), "2 FP32 elements take 8 bytes, binary_data_size is 4"),
        (&extra, Some(&extra_n), "4 bytes of binary data follow"),
        (&good[..good.len() - 8], Some(&n), "more than the 0 bytes"),
    ];
    for (body, header, needle) in cases {
        let r = post_framed(&server, "/v2/models/echo/infer", &key, header, body);
        let message = r.expect_error(400, "invalid_request");
        assert!(message.contains(needle), "{header:?}: {needle:?} not in {message:?}");
    }
    let r = post_framed(&server, "/v2/models/echo/infer", &key, Some(&n), &good);
    assert_eq!(r.status, 200, "the well-formed request still works");
}

/// A staged draft (the CLI and the console stage every deploy with artifacts) does not
/// stand for the model: readiness, metadata, config and inference keep to the serving
/// version, and the draft shows only under its own version's routes.
#[test]
fn a_staged_draft_leaves_the_serving_version_ready_and_in_the_metadata() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    let draft = server.put_bytes("/v1/functions/echo?staged=true", &key, function_wasm("text_stream")).expect(201);
    assert_eq!((draft["version"].as_u64(), draft["staged"].as_bool()), (Some(2), Some(true)));
    server.put_bytes("/v1/functions/echo/artifacts/w.bin", &key, vec![1, 2, 3]).expect(201);

    let ready = server.get("/v2/models/echo/ready", &key).expect(200);
    assert_eq!(ready, json!({ "name": "echo", "ready": true }));
    let metadata = server.get("/v2/models/echo", &key).expect(200);
    assert_eq!(metadata["versions"], json!(["1"]), "{metadata}");
    assert_eq!(metadata["platform"], "sluice_wasm_component");
    assert_eq!(metadata["inputs"], json!([]), "echo declares no signature; the draft (text-stream) does: {metadata}");
    let config = server.get("/v2/models/echo/config", &key).expect(200);
    assert_eq!(config["version_policy"], json!({ "specific": { "versions": [1] } }), "{config}");
    let out = server.post_json("/v2/models/echo/infer", &key, &sluice_tests::fp32_request(&[7.0])).expect(200);
    assert_eq!(out["model_version"], "1");

    // The draft under its own routes: there, and not ready until published.
    assert_eq!(server.get("/v2/models/echo/versions/2", &key).expect(200)["versions"], json!(["2"]));
    let r = server.get("/v2/models/echo/versions/2/ready", &key);
    assert_eq!((r.status, r.json()["ready"].as_bool()), (503, Some(false)));
    server.post_json("/v1/functions/echo/versions/2/publish", &key, &json!({})).expect(200);
    assert_eq!(server.get("/v2/models/echo", &key).expect(200)["versions"], json!(["1", "2"]));
    assert_eq!(server.get("/v2/models/echo/versions/2/ready", &key).expect(200)["ready"], true);
}

#[test]
fn versioned_routes_serve_the_version_they_name() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    server.deploy(&key, "echo", "mlp", ""); // version 2 answers differently
    assert_eq!(server.get("/v2/models/echo", &key).expect(200)["versions"], json!(["1", "2"]));
    assert_eq!(server.get("/v2/models/echo/versions/1", &key).expect(200)["versions"], json!(["1"]));
    let ready = server.get("/v2/models/echo/versions/1/ready", &key).expect(200);
    assert_eq!(ready, json!({ "name": "echo", "ready": true, "version": "1" }));
    assert_eq!(server.get("/v2/models/echo/versions/2/ready", &key).expect(200)["ready"], true);
    for missing in ["3", "0", "latest", "99999999999"] {
        for suffix in ["", "/ready", "/config"] {
            server.get(&format!("/v2/models/echo/versions/{missing}{suffix}"), &key).expect_error(404, "not_found");
        }
        let path = format!("/v2/models/echo/versions/{missing}/infer");
        server.post_json(&path, &key, &sluice_tests::fp32_request(&[1.0])).expect_error(404, "not_found");
    }
    let out =
        server.post_json("/v2/models/echo/versions/1/infer", &key, &sluice_tests::fp32_request(&[7.0])).expect(200);
    assert_eq!(out["model_version"], "1");
    assert_eq!(out["outputs"][0]["data"], json!([7.0]), "version 1 is echo");
    // Version 2 (mlp) wants an input named `input`: the unversioned route runs it too.
    for path in ["/v2/models/echo/versions/2/infer", "/v2/models/echo/infer"] {
        let e = server.post_json(path, &key, &sluice_tests::fp32_request(&[7.0])).expect_error(400, "invalid_input");
        assert!(e.contains("missing input `input`"), "{path}: {e}");
    }
}

#[test]
fn outputs_and_parameters() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    let two = |extra: Value| {
        let mut r = json!({ "inputs": [
            { "name": "a", "shape": [1], "datatype": "INT32", "data": [1] },
            { "name": "b", "shape": [1], "datatype": "UINT8", "data": [2] },
        ]});
        r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        r
    };
    let out =
        server.post_json("/v2/models/echo/infer", &key, &two(json!({ "outputs": [{ "name": "b" }] }))).expect(200);
    assert_eq!(out["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(out["outputs"][0]["name"], "b");
    let e = server
        .post_json("/v2/models/echo/infer", &key, &two(json!({ "outputs": [{ "name": "a" }, { "name": "zz" }] })))
        .expect_error(400, "invalid_request");
    assert!(e.contains("no output named \"zz\""), "{e}");
    // Honoured where it means something (a lower class), ignored otherwise; values that
    // are not parameter values (an array) or a class that does not exist are refused.
    for parameters in [
        json!({ "priority": 2 }),
        json!({ "priority": 0, "sequence_id": 5, "timeout": 600000000, "x-custom": "y", "flag": true }),
    ] {
        server.post_json("/v2/models/echo/infer", &key, &two(json!({ "parameters": parameters }))).expect(200);
    }
    for (parameters, needle) in [
        (json!({ "priority": "urgent" }), "priority"),
        (json!({ "p": [1] }), "\"p\""),
        (json!({ "timeout": -5 }), "timeout"),
        (json!({ "timeout": "soon" }), "timeout"),
    ] {
        let e = server
            .post_json("/v2/models/echo/infer", &key, &two(json!({ "parameters": parameters })))
            .expect_error(400, "invalid_request");
        assert!(e.contains(needle), "{e}");
    }
}

/// The priority classes the tenant's work ran at, from `/v1/status`.
fn classes_seen(server: &Server, key: &str, tenant: &str) -> Vec<String> {
    let status = server.status(key);
    let mut classes: Vec<String> = status["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["tenants"].as_array().unwrap().iter())
        .filter(|t| t["tenant"] == tenant)
        .map(|t| t["class"].as_str().unwrap().to_owned())
        .collect();
    classes.sort();
    classes.dedup();
    classes
}

#[test]
fn a_request_may_lower_its_class_but_never_raise_it() {
    let server = Server::start();
    let a = server.create_tenant("lowered");
    server.deploy(&a, "echo", "echo", "priority=latency");
    let lower = json!({ "parameters": { "priority": "batch" },
        "inputs": [{ "name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2] }] });
    server.post_json("/v2/models/echo/infer", &a, &lower).expect(200);
    assert_eq!(classes_seen(&server, &a, "lowered"), ["batch"]);

    let b = server.create_tenant("capped");
    server.deploy(&b, "echo", "echo", "priority=batch");
    let higher = json!({ "parameters": { "priority": "latency" },
        "inputs": [{ "name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2] }] });
    server.post_json("/v2/models/echo/infer", &b, &higher).expect(200);
    server
        .post_json("/v2/models/echo/infer", &b, &json!({ "parameters": { "priority": 1 }, "inputs": higher["inputs"] }))
        .expect(200);
    assert_eq!(classes_seen(&server, &b, "capped"), ["batch"]);
}

/// `wasm` with one more custom section (a component may carry them anywhere at top level).
fn with_custom_section(mut wasm: Vec<u8>, name: &str, data: &[u8]) -> Vec<u8> {
    let mut body = vec![u8::try_from(name.len()).unwrap()];
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(data);
    wasm.push(0);
    wasm.push(u8::try_from(body.len()).unwrap()); // < 128: one LEB128 byte
    wasm.extend(body);
    wasm
}

#[test]
fn signatures_are_reported_checked_before_the_guest_and_validated_at_deploy() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    // No artifacts: the guest would fail (500) on any request that reached it.
    server.deploy(&key, "minilm", "minilm_embed", "");
    server.deploy(&key, "echo", "echo", "");
    let meta = server.get("/v2/models/minilm", &key).expect(200);
    assert_eq!(meta["inputs"][0], json!({ "name": "text", "datatype": "BYTES", "shape": [-1] }));
    assert_eq!(meta["inputs"][1], json!({ "name": "precision", "datatype": "BYTES", "shape": [1] }));
    assert_eq!(meta["outputs"][0], json!({ "name": "embedding", "datatype": "FP32", "shape": [-1, 384] }));
    let config = server.get("/v2/models/minilm/config", &key).expect(200);
    assert_eq!(config["max_batch_size"], 0);
    assert_eq!(
        config["input"][0],
        json!({ "name": "text", "data_type": "TYPE_STRING", "dims": [-1], "optional": false })
    );
    assert_eq!(config["input"][2]["optional"], true);
    assert_eq!(config["output"][0]["data_type"], "TYPE_FP32");
    // A component without a signature (built before them) lists none and accepts anything.
    let meta = server.get("/v2/models/echo", &key).expect(200);
    assert_eq!((&meta["inputs"], &meta["outputs"]), (&json!([]), &json!([])));
    assert_eq!(server.get("/v2/models/echo/config", &key).expect(200)["input"], json!([]));

    let text = |shape: Value, data: Value| json!({ "name": "text", "shape": shape, "datatype": "BYTES", "data": data });
    let cases = [
        (json!({ "inputs": [] }), "needs an input named \"text\""),
        (json!({ "inputs": [text(json!([1, 1]), json!(["a"]))] }), "shape [1, 1], the function expects [-1]"),
        (json!({ "inputs": [{ "name": "text", "shape": [1], "datatype": "UINT8", "data": [1] }] }), "datatype UINT8"),
        (
            json!({ "inputs": [text(json!([1]), json!(["a"])), { "name": "extra", "shape": [0], "datatype": "FP32", "data": [] }] }),
            "no input named \"extra\"",
        ),
        (
            json!({ "inputs": [text(json!([1]), json!(["a"]))], "outputs": [{ "name": "logits" }] }),
            "no output named \"logits\"",
        ),
    ];
    for (request, needle) in cases {
        let e = server.post_json("/v2/models/minilm/infer", &key, &request).expect_error(400, "invalid_request");
        assert!(e.contains(needle), "{needle:?} not in {e:?}");
    }
    let r = server.post_json("/v2/models/minilm/infer", &key, &json!({ "inputs": [text(json!([1]), json!(["a"]))] }));
    assert_eq!(r.status, 500, "a matching request reaches the guest (which has no weights here)");

    for (section, needle) in [
        (&b"{"[..], "sluice:signature"),
        (br#"{"inputs":[{"name":"x","datatype":"FP64","shape":[1]}],"outputs":[]}"#, "unknown datatype"),
    ] {
        let wasm = with_custom_section(function_wasm("echo"), "sluice:signature", section);
        let e = server.put_bytes("/v1/functions/bad", &key, wasm).expect_error(400, "invalid_component");
        assert!(e.contains(needle), "{needle:?} not in {e:?}");
    }
    server.get("/v1/functions/bad", &key).expect_error(404, "not_found");
}

#[test]
fn statistics_count_what_ran() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    server.deploy(&key, "idle", "echo", "");
    for x in [1.0, 2.0] {
        server.post_json("/v2/models/echo/infer", &key, &sluice_tests::fp32_request(&[x])).expect(200);
    }
    let bad = json!({ "inputs": [{ "name": "x", "shape": [1], "datatype": "FP32", "data": [1] },
                                 { "name": "y", "shape": [0, 1], "datatype": "INT32", "data": [] }],
                      "parameters": { "priority": "urgent" } });
    server.post_json("/v2/models/echo/infer", &key, &bad).expect_error(400, "invalid_request");
    let missing_version = "/v2/models/echo/versions/9/infer";
    server.post_json(missing_version, &key, &sluice_tests::fp32_request(&[1.0])).expect_error(404, "not_found");
    let v = server.get("/v2/models/echo/stats", &key).expect(200);
    let s = &v["model_stats"][0];
    assert_eq!((&s["name"], &s["inference_count"], &s["execution_count"]), (&json!("echo"), &json!(2), &json!(2)));
    let stats = &s["inference_stats"];
    assert_eq!(stats["success"]["count"], 2);
    assert_eq!(stats["queue"]["count"], 2);
    assert_eq!(stats["compute_infer"]["count"], 2);
    let ns = |k: &str| stats[k]["ns"].as_u64().unwrap();
    assert!(ns("success") >= ns("compute_infer") && ns("compute_infer") > 0, "{stats}");
    assert_eq!(stats["fail"]["count"], 1, "the unknown version; the malformed request never reached the platform");
    // A deployed function that never ran has zeros; the tenant-wide list has what ran.
    let idle = server.get("/v2/models/idle/stats", &key).expect(200);
    assert_eq!(idle["model_stats"][0]["inference_stats"]["success"]["count"], 0);
    let all = server.get("/v2/models/stats", &key).expect(200);
    assert_eq!(all["model_stats"].as_array().unwrap().len(), 1);
    server.get("/v2/models/missing/stats", &key).expect_error(404, "not_found");
    // Another tenant sees none of it.
    let other = server.create_tenant("other");
    assert_eq!(server.get("/v2/models/stats", &other).expect(200)["model_stats"], json!([]));
    server.get("/v2/models/echo/stats", &other).expect_error(404, "not_found");
}
