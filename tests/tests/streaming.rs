//! Streaming over real HTTP, with `text-stream` (a generation function without a model:
//! one word per chunk, each a step on the device): the generate extension
//! (`/generate`, `/generate_stream`) and the OpenAI-compatible endpoints, their shapes,
//! `stop` and `max_tokens`, bad requests (4xx JSON), a one-shot function through
//! `/generate` and a streaming one through `/infer`, time-to-first-token metrics, and a
//! client that disconnects mid-stream: its endless generation ends and frees its device
//! memory. The `openai` Python client (`tests/clients/openai_client.py`, in the clients'
//! environment of `oip_clients.rs`; skipped without it) streams and not.

use std::process::Command;

use serde_json::{Value, json};
use sluice_tests::fixtures::clients_python;
use sluice_tests::sse::EventStream;
use sluice_tests::{ADMIN_KEY, Server, repo_root};

const PROMPT: &str = "the quick brown fox jumps over the lazy dog";

/// A server with a tenant that has `text-stream` and `echo`; its key.
fn server() -> (Server, String) {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "text-stream", "text_stream", "");
    server.deploy(&key, "echo", "echo", "");
    (server, key)
}

/// Every event of a stream, as JSON, until it ends.
fn events(mut stream: EventStream) -> Vec<Value> {
    std::iter::from_fn(|| stream.next_event().map(|(_, data)| data)).collect()
}

/// Every event's raw data, until the stream ends.
fn raw_events(mut stream: EventStream) -> Vec<String> {
    std::iter::from_fn(|| stream.next_data().map(|(_, data)| data)).collect()
}

#[test]
fn generate_stream_concatenates_to_the_one_shot_text() {
    let (server, key) = server();
    let whole = server.post_json("/v2/models/text-stream/generate", &key, &json!({ "text_input": PROMPT })).expect(200);
    assert_eq!(whole["model_name"], "text-stream");
    assert_eq!(whole["model_version"], "1");
    assert_eq!(whole["text_output"], PROMPT);
    assert_eq!(whole["finish_reason"], "stop");
    assert_eq!(whole["completion_tokens"], 9);
    assert_eq!(whole["prompt_tokens"], 9);

    let stream =
        EventStream::post(&server, "/v2/models/text-stream/generate_stream", &key, &json!({ "text_input": PROMPT }))
            .expect("a stream");
    let events = events(stream);
    assert_eq!(events.len(), 10, "one event per word, then the final one: {events:?}");
    let (last, chunks) = events.split_last().unwrap();
    let text: String = chunks.iter().map(|e| e["text_output"].as_str().expect("a text chunk")).collect();
    assert_eq!(text, PROMPT, "the chunks concatenate to the one-shot text");
    assert!(chunks.iter().all(|e| e["model_name"] == "text-stream" && e["model_version"] == "1"));
    assert!(last.get("text_output").is_none(), "the last event leaves the text to the chunks: {last}");
    assert_eq!((&last["finish_reason"], &last["completion_tokens"]), (&json!("stop"), &json!(9)));

    // Sampling options as parameters (the generate extension's way) become inputs.
    let body = json!({ "text_input": PROMPT, "parameters": { "max_tokens": 3 } });
    let r = server.post_json("/v2/models/text-stream/versions/1/generate", &key, &body).expect(200);
    assert_eq!((&r["text_output"], &r["finish_reason"]), (&json!("the quick brown"), &json!("length")));

    // The time to first token and per output token are in /metrics and /v1/status.
    let metrics = server.get("/metrics", ADMIN_KEY);
    let text = String::from_utf8_lossy(&metrics.body);
    for family in ["sluice_time_to_first_token_seconds_count", "sluice_time_per_output_token_seconds_count"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(family) && l.contains("function=\"text-stream\""))
            .unwrap_or_else(|| panic!("no {family} for text-stream in {text}"));
        assert!(line.ends_with(" 3"), "three streaming invocations: {line}");
    }
    let status = server.status(&key);
    let f = status["functions"].as_array().unwrap().iter().find(|f| f["function"] == "text-stream").unwrap();
    assert_eq!(f["time_to_first_token"]["count"], 3, "{f}");
    assert_eq!(f["time_per_output_token"]["count"], 3, "{f}");
    let (ttft, latency) =
        (f["time_to_first_token"]["p50_us"].as_f64().unwrap(), f["latency"]["p50_us"].as_f64().unwrap());
    assert!(ttft <= latency, "the first token comes before the result: {f}");
}

#[test]
fn one_shot_and_streaming_functions_cross_over() {
    let (server, key) = server();
    // A one-shot function through /generate: its outputs by name.
    let r =
        server.post_json("/v2/models/echo/generate", &key, &json!({ "text_input": "hi", "x": [1.5, 2.0] })).expect(200);
    assert_eq!((&r["text_input"], &r["x"]), (&json!("hi"), &json!([1.5, 2.0])));
    // ... and through /generate_stream: no chunks, one final event.
    let stream = EventStream::post(&server, "/v2/models/echo/generate_stream", &key, &json!({ "label": "x" })).unwrap();
    assert_eq!(events(stream), [json!({ "model_name": "echo", "model_version": "1", "label": "x" })]);
    // A streaming function through /infer: its final outputs.
    let body = json!({ "inputs": [{ "name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["a b c"] }] });
    let r = server.post_json("/v2/models/text-stream/infer", &key, &body).expect(200);
    let outputs = r["outputs"].as_array().unwrap();
    let names: Vec<&str> = outputs.iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["text_output", "finish_reason", "prompt_tokens", "completion_tokens"]);
    assert_eq!(outputs[0]["data"], json!(["a b c"]));
}

#[test]
fn openai_chat_and_completions_stream_and_not() {
    let (server, key) = server();
    let messages = json!([{ "role": "system", "content": "be brief" }, { "role": "user", "content": PROMPT }]);
    let r = server
        .post_json(
            "/v1/chat/completions",
            &key,
            &json!({ "model": "text-stream", "messages": messages, "seed": 1, "temperature": 0.0 }),
        )
        .expect(200);
    assert_eq!(r["object"], "chat.completion");
    assert_eq!(r["model"], "text-stream");
    assert!(r["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(r["choices"][0]["message"], json!({ "role": "assistant", "content": PROMPT }));
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    assert_eq!(r["usage"], json!({ "prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18 }));

    let body = json!({ "model": "text-stream", "messages": messages, "stream": true, "max_tokens": 4 });
    let data = raw_events(EventStream::post(&server, "/v1/chat/completions", &key, &body).unwrap());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"]));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let (last, rest) = chunks.split_last().unwrap();
    let text: String = rest.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "the quick brown fox");
    assert!(rest.iter().all(|c| c["choices"][0]["finish_reason"].is_null() && c.get("usage").is_none()));
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(last["usage"], json!({ "prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13 }));

    let r = server
        .post_json("/v1/completions", &key, &json!({ "model": "text-stream", "prompt": PROMPT, "stop": ["fox"] }))
        .expect(200);
    assert_eq!(r["object"], "text_completion");
    assert_eq!(
        (&r["choices"][0]["text"], &r["choices"][0]["finish_reason"]),
        (&json!("the quick brown"), &json!("stop"))
    );
    assert_eq!(r["usage"]["completion_tokens"], 3);

    let body = json!({ "model": "text-stream", "prompt": PROMPT, "stream": true, "stop": "lazy" });
    let data = raw_events(EventStream::post(&server, "/v1/completions", &key, &body).unwrap());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
    assert_eq!(text, "the quick brown fox jumps over the");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 7);
}

#[test]
fn bad_requests_are_4xx_json() {
    let (server, key) = server();
    let messages = json!([{ "role": "user", "content": "hi" }]);
    let openai_error = |path: &str, body: &Value, status: u16, code: &str| {
        let r = server.post_json(path, &key, body);
        assert_eq!(r.status, status, "{path} {body}: {}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["error"]["code"], code, "{v}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{v}");
        assert!(v["error"]["type"].is_string(), "{v}");
    };
    let chat = "/v1/chat/completions";
    openai_error(chat, &json!({ "messages": messages }), 400, "invalid_request");
    openai_error(chat, &json!({ "model": "text-stream", "messages": "hi" }), 400, "invalid_request");
    openai_error(
        chat,
        &json!({ "model": "text-stream", "messages": messages, "max_tokens": "many" }),
        400,
        "invalid_request",
    );
    openai_error(chat, &json!({ "model": "nope", "messages": messages }), 404, "not_found");
    openai_error(chat, &json!({ "model": "nope", "messages": messages, "stream": true }), 404, "not_found");
    openai_error(chat, &json!({ "model": "echo", "messages": messages }), 400, "invalid_request");
    openai_error(chat, &json!({ "model": "echo", "messages": messages, "stream": true }), 400, "invalid_request");
    openai_error("/v1/completions", &json!({ "model": "text-stream" }), 400, "invalid_request");
    let r = server.call("POST", chat, Some(&key), Some(("application/json", b"{not json".to_vec())));
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("invalid_request")));
    let r = server.call("POST", chat, None, Some(("application/json", b"{}".to_vec())));
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (401, Some("authentication_error")));

    // The generate extension: sluice's own error shape.
    let generate = "/v2/models/text-stream/generate";
    server.post_json(generate, &key, &json!(["not", "an", "object"])).expect_error(400, "invalid_request");
    server.post_json(generate, &key, &json!({ "text_input": 5 })).expect_error(400, "invalid_request");
    server.post_json(generate, &key, &json!({ "max_tokens": 2 })).expect_error(400, "invalid_input");
    server.post_json("/v2/models/nope/generate", &key, &json!({ "text_input": "x" })).expect_error(404, "not_found");
    let e = EventStream::post(&server, "/v2/models/nope/generate_stream", &key, &json!({ "text_input": "x" }));
    assert_eq!(e.err().map(|(status, body)| (status, body["code"].clone())), Some((404, json!("not_found"))));
}

#[test]
fn a_client_that_disconnects_stops_an_endless_generation_and_frees_its_memory() {
    let (server, key) = server();
    let idle = server.status(&key)["tenants"][0]["memory_used_bytes"].as_u64().expect("memory used");
    let body = json!({ "text_input": "again and again", "repeat": 0 });
    let mut stream = EventStream::post(&server, "/v2/models/text-stream/generate_stream", &key, &body).unwrap();
    // The generation never ends on its own: each of these arrived before its end.
    for expected in ["again", " and", " again", " again"] {
        let (_, event) = stream.next_event().expect("a chunk");
        assert_eq!(event["text_output"], expected);
    }
    let running = server.status(&key);
    assert_eq!(running["in_flight"], 1, "{running}");
    assert!(running["tenants"][0]["memory_used_bytes"].as_u64().unwrap() > idle, "it holds device memory: {running}");

    drop(stream);
    let ended = server.wait_for_status(&key, "the invocation's end", |s| {
        s["in_flight"] == 0 && s["tenants"][0]["memory_used_bytes"].as_u64() == Some(idle)
    });
    assert_eq!(ended["tenants"][0]["in_flight"], 0);
    let metrics = String::from_utf8_lossy(&server.get("/metrics", ADMIN_KEY).body).into_owned();
    assert!(
        metrics.lines().any(|l| l.starts_with("sluice_invocations_total")
            && l.contains("outcome=\"cancelled\"")
            && l.contains("text-stream")),
        "the invocation ended as cancelled: {metrics}"
    );
    // The server still serves the tenant.
    let r =
        server.post_json("/v2/models/text-stream/generate", &key, &json!({ "text_input": "still here" })).expect(200);
    assert_eq!(r["text_output"], "still here");
}

#[test]
fn the_openai_python_client_streams_and_not() {
    let Some(python) = clients_python() else { return };
    let (server, key) = server();
    let out = Command::new(&python)
        .arg(repo_root().join("tests/clients/openai_client.py"))
        .env("SLUICE_URL", &server.url)
        .env("SLUICE_KEY", &key)
        .output()
        .expect("running the openai client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "the openai client failed ({}):\n{stdout}\n{}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
}
