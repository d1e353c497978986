//! Continuous batching of `smollm2-chat` (a serving function: its serving invocation
//! takes requests from the host's queue and decodes every active sequence in one step)
//! over HTTP on the CPU device:
//!
//! - requests that join a running generation's steps produce, token for token, what
//!   each produces alone (greedy ones, whose tokens a step reads together, and a
//!   sampled one beside them, which draws from its own row), and say they shared the
//!   invocation (`x-sluice-batch-size` ≥ 2, deterministic here: a long stream runs
//!   throughout);
//! - a streaming client that goes has its sequence, and its KV cache, dropped while the
//!   other generation goes on, which then answers exactly as it does alone.
//!
//! Skips (class "SmolLM2 model") when the GGUF file has not been fetched, except under CI.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_tests::fixtures::llm_gguf;
use sluice_tests::smollm2::{deploy, int_input, ints, text_input};
use sluice_tests::sse::EventStream;
use sluice_tests::{Resp, Server};

/// Tokens each checked generation runs to.
const TOKENS: i32 = 24;

/// The visible prompts of the SmolLM2 reference data (`tests/data`), chat template applied.
fn prompts() -> Vec<String> {
    let path = sluice_tests::repo_root().join("tests/data/smollm2_ref_visible.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reference: Value = serde_json::from_str(&text).unwrap();
    reference["prompts"].as_array().unwrap().iter().map(|p| p["prompt_text"].as_str().unwrap().to_owned()).collect()
}

fn request(prompt: &str) -> Value {
    json!({ "inputs": [text_input("text_input", prompt), int_input("max_tokens", TOKENS)] })
}

/// `prompt` sampled at temperature 0.8 with a fixed seed.
fn sampled(prompt: &str) -> Value {
    let mut body = request(prompt);
    let inputs = body["inputs"].as_array_mut().unwrap();
    inputs.push(json!({ "name": "temperature", "shape": [1], "datatype": "FP32", "data": [0.8] }));
    inputs.push(json!({ "name": "seed", "shape": [1], "datatype": "INT64", "data": [7] }));
    body
}

fn tokens(r: &Resp) -> Vec<i64> {
    ints(&r.expect(200), "token_ids")
}

fn shared_with(r: &Resp) -> u32 {
    r.headers["x-sluice-batch-size"].parse().unwrap()
}

/// A long generation streamed on its own thread, read as it comes (a reader that stops
/// reading would hold the whole batch back), until `stop` is set; then its client goes.
fn long_stream(server: &Server, key: &str, stop: &AtomicBool, started: mpsc::Sender<()>) -> usize {
    let body = json!({ "text_input": "Once upon a time, in a land far away, there lived", "parameters": { "max_tokens": 4000 } });
    let mut events = EventStream::post(server, "/v2/models/chat/generate_stream", key, &body).expect("a stream");
    let mut pieces = 0;
    while !stop.load(Ordering::Acquire) {
        let (_, event) = events.next_event().expect("the long generation goes on");
        assert!(event["text_output"].is_string(), "{event}");
        pieces += 1;
        if pieces == 2 {
            started.send(()).unwrap();
        }
    }
    pieces
}

fn memory_used(server: &Server, key: &str) -> u64 {
    server.status(key)["tenants"][0]["memory_used_bytes"].as_u64().expect("memory used")
}

#[test]
fn joined_generations_match_each_alone_and_a_leaver_frees_its_cache() {
    let Some(gguf) = llm_gguf() else { return };
    let mut server = Server::start();
    let key = server.create_tenant("llm");
    deploy(&server, &key, "chat", &gguf);
    let prompts = prompts();
    let path = "/v2/models/chat/infer";

    // Each alone, one after the other: a serving invocation with one sequence.
    let bodies: Vec<Value> = prompts.iter().map(|p| request(p)).chain([sampled(&prompts[1])]).collect();
    let alone: Vec<Vec<i64>> = bodies.iter().map(|b| tokens(&server.post_json(path, &key, b))).collect();
    let idle = memory_used(&server, &key);

    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (started, long_started) = mpsc::channel();
        let long = s.spawn(|| long_stream(&server, &key, &stop, started));
        long_started.recv().expect("the long generation streams");

        // All at once, while the long generation runs: they join its decode steps.
        let together: Vec<Resp> = std::thread::scope(|s| {
            let calls: Vec<_> = bodies.iter().map(|b| s.spawn(|| server.post_json(path, &key, b))).collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        for ((body, alone), r) in bodies.iter().zip(&alone).zip(&together) {
            assert_eq!(&tokens(r), alone, "{body}: the same tokens as alone");
            assert!(shared_with(r) >= 2, "{body} shared its steps with the long generation");
        }

        // Another generation starts beside the long one; then the long one's client goes.
        let (first, other_started) = mpsc::channel();
        let (server, key, prompt) = (&server, &key, prompts[0].clone());
        let other = s.spawn(move || {
            let body = json!({ "text_input": prompt, "parameters": { "max_tokens": TOKENS } });
            let mut events = EventStream::post(server, "/v2/models/chat/generate_stream", key, &body).unwrap();
            let mut all = Vec::new();
            while let Some((_, event)) = events.next_event() {
                if all.is_empty() {
                    first.send(()).unwrap();
                }
                all.push(event);
            }
            all
        });
        other_started.recv().expect("the other generation streams");
        let both = memory_used(server, key);
        stop.store(true, Ordering::Release);
        let pieces = long.join().unwrap();
        assert!(pieces >= 2);
        // The long generation's KV caches (4000 positions: far more than anything else
        // it holds) go while the other still runs or soon after; the other is unaffected.
        let dropped = server.wait_for_status(key, "the leaver's caches freed", |st| {
            st["tenants"][0]["memory_used_bytes"].as_u64().is_some_and(|m| m < both.saturating_sub((both - idle) / 2))
        });
        assert!(dropped["tenants"][0]["memory_used_bytes"].as_u64().unwrap() >= idle);
        let events = other.join().unwrap();
        let last = events.last().expect("a final event");
        assert_eq!(last["completion_tokens"], json!(alone[0].len()), "{last}");
    });
    server.wait_for_status(&key, "every generation's memory back", |st| {
        st["in_flight"] == 0 && st["tenants"][0]["memory_used_bytes"].as_u64() == Some(idle)
    });

    // SIGTERM just after an answer, while the serving invocation idles for more (the
    // guest waits 200 ms for a next request): the shutdown closes the queue, the
    // invocation returns, and the process exits cleanly. Before the queue was closed,
    // the runtime went away under the idle guest, whose wait then panicked.
    tokens(&server.post_json(path, &key, &request(&prompts[0])));
    server.terminate();
    assert_eq!(server.wait_exit(Duration::from_secs(120)), Some(0), "sluice serve exits cleanly");
    let log = std::fs::read_to_string(&server.log_path).expect("the server's log");
    assert!(!log.contains("panicked"), "the shutdown panicked a guest thread:\n{log}");
}
