//! `smollm2-chat` (SmolLM2-135M-Instruct, Q4_1 GGUF) deployed over HTTP on the CPU
//! device: a chat answer ends on the end-of-sequence token or at `max_tokens` with the
//! counts that say so, a stop string ends the text before it, bad inputs are 400s, and
//! the greedy decode rate is printed (tokens/s, with the machine's load). Skips (class
//! "SmolLM2 model") when the GGUF file has not been fetched, except under CI.

use std::time::Instant;

use sluice_tests::Server;
use sluice_tests::fixtures::llm_gguf;
use sluice_tests::smollm2::{deploy, infer, int_input, ints, text_input, text_output};

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|_| "unknown".into(), |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

#[test]
fn chat_answers_stop_on_eos_or_length_and_bad_inputs_are_400s() {
    let Some(gguf) = llm_gguf() else { return };
    let server = Server::start();
    let key = server.create_tenant("llm");
    deploy(&server, &key, "chat", &gguf);
    let messages = r#"[{"role": "user", "content": "What is the capital of France?"}]"#;

    let started = Instant::now();
    let out = infer(&server, &key, "chat", vec![text_input("messages", messages), int_input("max_tokens", 48)]);
    let wall = started.elapsed();
    let text = text_output(&out, "text_output");
    let (prompt, completion) = (ints(&out, "prompt_tokens")[0], ints(&out, "completion_tokens")[0]);
    let ids = ints(&out, "token_ids");
    let finish = text_output(&out, "finish_reason");
    println!("smollm2-chat: {text:?} ({prompt} prompt tokens, {completion} generated, finish {finish})");
    assert!(text.contains("Paris"), "{text:?}");
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

    // The same request again: the weights are resident, so this is the decode rate.
    let started = Instant::now();
    let again = infer(&server, &key, "chat", vec![text_input("messages", messages), int_input("max_tokens", 48)]);
    let wall = started.elapsed();
    assert_eq!(ints(&again, "token_ids"), ids, "greedy decoding repeats");
    println!(
        "smollm2-chat greedy, weights resident: {completion} tokens in {:.2} s = {:.1} tokens/s (load average {})",
        wall.as_secs_f64(),
        completion as f64 / wall.as_secs_f64(),
        load_average()
    );

    // max_tokens ends it; a stop string cuts the text before it.
    let short = infer(&server, &key, "chat", vec![text_input("messages", messages), int_input("max_tokens", 2)]);
    assert_eq!((text_output(&short, "finish_reason"), ints(&short, "completion_tokens")[0]), ("length".into(), 2));
    let cut = infer(
        &server,
        &key,
        "chat",
        vec![text_input("messages", messages), int_input("max_tokens", 48), text_input("stop", "Paris")],
    );
    assert_eq!(text_output(&cut, "finish_reason"), "stop");
    assert!(!text_output(&cut, "text_output").contains("Paris"));
    assert!(text.starts_with(&text_output(&cut, "text_output")));

    // Bad inputs: the caller's fault.
    let url = "/v2/models/chat/infer";
    let bad = |inputs: serde_json::Value| server.post_json(url, &key, &serde_json::json!({ "inputs": inputs }));
    bad(serde_json::json!([int_input("max_tokens", 4)])).expect(400);
    bad(serde_json::json!([text_input("messages", "not json")])).expect(400);
    bad(serde_json::json!([text_input("text_input", "hi"), int_input("max_tokens", 0)])).expect(400);
}
