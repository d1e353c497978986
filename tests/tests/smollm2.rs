//! `smollm2-chat` (SmolLM2-135M-Instruct, Q4_1 GGUF) deployed over HTTP on the CPU
//! device: a chat answer ends on the end-of-sequence token or at `max_tokens` with the
//! counts that say so, sampling repeats with its seed, a stop string ends the text
//! before it, bad inputs are 400s, and
//! the greedy decode rate is printed (tokens/s, with the machine's load average); its
//! tokens stream as they are made (server-sent events whose pieces make the one-shot
//! text, a stop string held back until it is decided), and a client that goes
//! mid-stream ends the generation and frees its memory. Skips (class "SmolLM2 model")
//! when the GGUF file has not been fetched, except under CI.

use std::time::Instant;

use serde_json::{Value, json};
use sluice_tests::fixtures::llm_gguf;
use sluice_tests::smollm2::{deploy, infer, int_input, ints, text_input, text_output};
use sluice_tests::sse::EventStream;
use sluice_tests::{ADMIN_KEY, Server};

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "unknown".into(), |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

#[test]
fn chat_answers_stop_on_eos_or_length_and_bad_inputs_are_400s() {
    let Some(gguf) = llm_gguf() else { return };
    let server = Server::start();
    let key = server.create_tenant("llm");
    deploy(&server, &key, "chat", &gguf);
    let messages = r#"[{"role": "user", "content": "What is the capital of Germany?"}]"#;

    let started = Instant::now();
    let out = infer(&server, &key, "chat", vec![text_input("messages", messages), int_input("max_tokens", 48)]);
    let wall = started.elapsed();
    let text = text_output(&out, "text_output");
    let (prompt, completion) = (ints(&out, "prompt_tokens")[0], ints(&out, "completion_tokens")[0]);
    let ids = ints(&out, "token_ids");
    let finish = text_output(&out, "finish_reason");
    println!("smollm2-chat: {text:?} ({prompt} prompt tokens, {completion} generated, finish {finish})");
    assert!(text.contains("Berlin"), "{text:?}");
    assert_eq!(ids.len() as i64, completion);
    assert!((1..=48).contains(&completion));
    match finish.as_str() {
        "stop" => assert_eq!(ids.last(), Some(&2), "the end-of-sequence token <|im_end|> ends it"),
        "length" => assert_eq!(completion, 48),
        other => panic!("finish_reason {other}"),
    }
    println!(
        "smollm2-chat greedy on the CPU device over HTTP: {completion} tokens after a {prompt}-token prompt in {:.2} s \
         = {:.1} tokens/s including the prefill and the weights' first load (load average {})",
        wall.as_secs_f64(),
        completion as f64 / wall.as_secs_f64(),
        load_average()
    );

    // The same request again: the weights are resident, and greedy decoding repeats.
    let again = infer(&server, &key, "chat", vec![text_input("messages", messages), int_input("max_tokens", 48)]);
    assert_eq!(ints(&again, "token_ids"), ids, "greedy decoding repeats");

    // The decode rate: a raw prompt that runs to max_tokens, 2 tokens and then 34; the
    // difference is 32 decode steps (the prompt, setup and HTTP are in both).
    let raw = "The history of the Roman Empire began in 27 BC, when";
    let timed = |n: i32| {
        let started = Instant::now();
        let out = infer(&server, &key, "chat", vec![text_input("text_input", raw), int_input("max_tokens", n)]);
        assert_eq!(ints(&out, "completion_tokens")[0], i64::from(n), "{raw:?} runs to max_tokens");
        started.elapsed().as_secs_f64()
    };
    let (short, long) = (timed(2), timed(34));
    println!(
        "smollm2-chat greedy decode on the CPU device (debug host build, optimised kernels), weights resident: \
         32 steps in {:.2} s = {:.1} tokens/s; {:.2} s for the 11-token prompt and 2 tokens (load average {})",
        long - short,
        32.0 / (long - short).max(1e-9),
        short,
        load_average()
    );

    // Sampling on the device: a seed repeats its tokens, another seed draws others.
    let sampled = |seed: i64| {
        let inputs = vec![
            text_input("messages", messages),
            int_input("max_tokens", 16),
            serde_json::json!({ "name": "temperature", "shape": [1], "datatype": "FP32", "data": [1.0] }),
            serde_json::json!({ "name": "top_p", "shape": [1], "datatype": "FP32", "data": [0.95] }),
            serde_json::json!({ "name": "seed", "shape": [1], "datatype": "INT64", "data": [seed] }),
        ];
        ints(&infer(&server, &key, "chat", inputs), "token_ids")
    };
    let (a, b) = (sampled(11), sampled(12));
    assert_eq!(a, sampled(11), "a seed repeats");
    assert_ne!(a, b, "another seed draws other tokens");

    // max_tokens ends it; a stop string cuts the text before it.
    let short = infer(&server, &key, "chat", vec![text_input("messages", messages), int_input("max_tokens", 2)]);
    assert_eq!((text_output(&short, "finish_reason"), ints(&short, "completion_tokens")[0]), ("length".into(), 2));
    let cut = infer(
        &server,
        &key,
        "chat",
        vec![text_input("messages", messages), int_input("max_tokens", 48), text_input("stop", "Berlin")],
    );
    assert_eq!(text_output(&cut, "finish_reason"), "stop");
    assert!(!text_output(&cut, "text_output").contains("Berlin"));
    assert!(text.starts_with(&text_output(&cut, "text_output")));

    // Bad inputs: the caller's fault.
    let url = "/v2/models/chat/infer";
    let bad = |inputs: serde_json::Value| server.post_json(url, &key, &serde_json::json!({ "inputs": inputs }));
    bad(serde_json::json!([int_input("max_tokens", 4)])).expect(400);
    bad(serde_json::json!([text_input("messages", "not json")])).expect(400);
    bad(serde_json::json!([text_input("text_input", "hi"), int_input("max_tokens", 0)])).expect(400);
}

/// `/v2/models/chat/generate_stream` with `messages` and `parameters`; the events' data.
fn stream(server: &Server, key: &str, messages: &str, parameters: Value) -> Vec<Value> {
    let body = json!({ "messages": messages, "parameters": parameters });
    let mut events = EventStream::post(server, "/v2/models/chat/generate_stream", key, &body).expect("a stream");
    std::iter::from_fn(|| events.next_event().map(|(_, data)| data)).collect()
}

fn pieces(events: &[Value]) -> Vec<String> {
    events.iter().filter_map(|e| e["text_output"].as_str().map(str::to_owned)).collect()
}

#[test]
fn tokens_stream_as_they_are_made_and_a_client_that_goes_ends_the_generation() {
    let Some(gguf) = llm_gguf() else { return };
    let server = Server::start();
    let key = server.create_tenant("llm");
    deploy(&server, &key, "chat", &gguf);
    let messages = r#"[{"role": "user", "content": "What is the capital of Germany?"}]"#;

    // The pieces, in order, make the one-shot (greedy) text; the last event has the counts.
    let whole = infer(&server, &key, "chat", vec![text_input("messages", messages), int_input("max_tokens", 24)]);
    let events = stream(&server, &key, messages, json!({ "max_tokens": 24 }));
    let streamed = pieces(&events);
    assert!(streamed.len() > 1, "one event per token or so, not one at the end: {events:?}");
    assert_eq!(streamed.concat(), text_output(&whole, "text_output"));
    let last = events.last().unwrap();
    assert!(last.get("text_output").is_none(), "the final event carries the rest: {last}");
    assert_eq!(last["completion_tokens"], json!(ints(&whole, "completion_tokens")[0]), "{last}");

    // A stop string that spans tokens is never streamed in part.
    let cut = infer(
        &server,
        &key,
        "chat",
        vec![text_input("messages", messages), int_input("max_tokens", 24), text_input("stop", "is Berlin")],
    );
    let streamed = pieces(&stream(&server, &key, messages, json!({ "max_tokens": 24, "stop": "is Berlin" })));
    assert_eq!(streamed.concat(), text_output(&cut, "text_output"));
    assert!(streamed.concat().ends_with("Germany ") && !streamed.concat().contains(" is"), "{streamed:?}");

    // A long generation: its first tokens arrive while it runs; the client goes, and the
    // generation ends (cancelled) with its device memory given back.
    let idle = server.status(&key)["tenants"][0]["memory_used_bytes"].as_u64().expect("memory used");
    let raw = "Once upon a time, in a land far away, there lived";
    let body = json!({ "text_input": raw, "parameters": { "max_tokens": 4000 } });
    let mut events = EventStream::post(&server, "/v2/models/chat/generate_stream", &key, &body).expect("a stream");
    for _ in 0..3 {
        let (_, event) = events.next_event().expect("a piece");
        assert!(event["text_output"].is_string(), "{event}");
    }
    let running = server.status(&key);
    assert_eq!(running["in_flight"], 1, "still generating after three pieces arrived: {running}");
    assert!(running["tenants"][0]["memory_used_bytes"].as_u64().unwrap() > idle, "{running}");
    drop(events);
    server.wait_for_status(&key, "the generation's end after its client went", |s| {
        s["in_flight"] == 0 && s["tenants"][0]["memory_used_bytes"].as_u64() == Some(idle)
    });
    let metrics = String::from_utf8_lossy(&server.get("/metrics", ADMIN_KEY).body).into_owned();
    assert!(
        metrics.lines().any(|l| l.starts_with("sluice_invocations_total")
            && l.contains("outcome=\"cancelled\"")
            && l.contains("function=\"chat\"")),
        "the generation ended as cancelled: {metrics}"
    );
}

/// Greedy generation against the independent NumPy llama of `tests/llm/reference.py`
/// on the same dequantized weights and Q8 activations: for each prompt (two chats
/// through the GGUF's template, two raw texts) and each of 32 steps, in sluice's own
/// context, the logits agree to a relative error max |a - b| / max |b| ≤
/// [`Q8_LOGIT_NOISE`] (b the reference's, over the vocabulary) and sluice's greedy
/// token is the reference's argmax or within that noise of it (a near tie); the prompt's
/// token ids are those of the Hugging Face `tokenizers` reference, whose decoding gives
/// the prompt back exactly.
#[test]
fn greedy_tokens_and_logits_match_the_numpy_reference() {
    use serde_json::{Value, json};
    let Some(gguf) = llm_gguf() else { return };
    let Some(python) = sluice_tests::fixtures::llm_python() else { return };
    let server = Server::start();
    let key = server.create_tenant("llm");
    deploy(&server, &key, "chat", &gguf);
    let steps = 32;
    let cases = [
        json!({ "messages": [{ "role": "user", "content": "Write a haiku about the sea." }] }),
        json!({ "messages": [
            { "role": "system", "content": "You answer in one short sentence." },
            { "role": "user", "content": "Why is the sky blue? Give 2 reasons, café-style ☕." },
        ]}),
        json!({ "text": "The history of the Roman Empire began in 27 BC, when" }),
        json!({ "text": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n" }),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut spec_cases = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let prompt = match case.get("messages") {
            Some(m) => text_input("messages", &m.to_string()),
            None => text_input("text_input", case["text"].as_str().unwrap()),
        };
        let out =
            infer(&server, &key, "chat", vec![prompt, int_input("max_tokens", steps), int_input("return_logits", 1)]);
        let logits = sluice_tests::minilm::floats(&sluice_tests::minilm::output(&out, "logits")["data"]);
        let bytes: Vec<u8> = logits.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect();
        let file = dir.path().join(format!("logits-{i}.f32"));
        std::fs::write(&file, bytes).unwrap();
        let mut c = case.clone();
        c["prompt_ids"] = json!(ints(&out, "prompt_ids"));
        c["generated"] = json!(ints(&out, "token_ids"));
        c["logits"] = json!(file);
        c["steps"] = json!(steps);
        spec_cases.push(c);
    }
    let spec = dir.path().join("spec.json");
    std::fs::write(&spec, json!({ "gguf": gguf, "cases": spec_cases }).to_string()).unwrap();
    let script = sluice_tests::repo_root().join("tests/llm/reference.py");
    let run = std::process::Command::new(&python).arg(&script).arg(&spec).output().unwrap();
    assert!(run.status.success(), "reference.py failed: {}", String::from_utf8_lossy(&run.stderr));
    let reference: Value = serde_json::from_slice(&run.stdout).unwrap();
    for (case, want) in spec_cases.iter().zip(reference["cases"].as_array().unwrap()) {
        let what = want["text"].as_str().unwrap();
        assert_eq!(case["prompt_ids"], want["prompt_ids"], "{what:?}: the prompt's token ids");
        assert_eq!(want["roundtrip"], true, "{what:?}: decoding the ids gives the prompt back");
        let floats =
            |name: &str| -> Vec<f64> { want[name].as_array().unwrap().iter().map(|e| e.as_f64().unwrap()).collect() };
        let (errors, deficits) = (floats("errors"), floats("deficits"));
        let generated = case["generated"].as_array().unwrap();
        assert_eq!(errors.len(), generated.len(), "{what:?}: one step per generated token");
        let worst = errors.iter().copied().fold(0.0, f64::max);
        let same = generated.iter().zip(want["argmax"].as_array().unwrap()).filter(|(a, b)| a == b).count();
        println!(
            "{what:?}: {same} of {} tokens the reference's argmax (the rest near ties), logits' largest relative error {worst:.2e}",
            generated.len()
        );
        assert!(worst <= Q8_LOGIT_NOISE, "{what:?}: relative errors per step {errors:?}");
        assert!(
            deficits.iter().all(|&d| d <= Q8_LOGIT_NOISE),
            "{what:?}: a greedy token the reference puts below its best by more than the noise: {deficits:?}"
        );
    }
}

/// How far two correct forwards of the model with Q8 activations part, relative to the
/// logits' range. A value within an ulp of a rounding boundary of its block moves a
/// whole step of its block's scale, and the step grows through 30 blocks: the NumPy
/// model against itself with one norm's weights scaled by 1 + 1e-7 parts by 2–4 % of
/// max |logit| at every step (as much as Q8 activations against f32 ones), so the order
/// of f32 sums alone does that much. A structural error (a wrong RoPE layout, norm,
/// mask or position) parts them by more than the logits' whole range. The linear's
/// Q8 rounding itself is held exactly, op by op, by the backends' conformance tests
/// and `tests/tests/gguf.rs`.
const Q8_LOGIT_NOISE: f64 = 0.1;
