//! `smollm2-chat-py` (the Python guest SDK's SmolLM2, a port of `smollm2-chat` op for op
//! with a pure-Python byte-level BPE) deployed beside `smollm2-chat` over HTTP on the CPU
//! device: for the visible prompts of `tests/data/smollm2_ref_visible.json` both give the
//! refdata's prompt ids, the same first-step logits bit for bit (within the Q8 noise of
//! the refdata's at its top 5) and the same greedy tokens token for token; where they
//! part from the refdata's f32 tokens (sluice's linears round activations to Q8) it is
//! at a near tie of the refdata's top 5, printed. Sampling, stop strings, streaming,
//! `max_tokens` and bad inputs behave the same in both; as a serving function, requests
//! that join a running generation's steps give what each gives alone. `gguf-probe-py`
//! checks the Python SDK's GGUF, KV-cache and sampling calls against `gguf-probe` and by
//! value, and its declared signature (`signature.json`) is reported and enforced; and the pure-Python tokenizer is checked against Hugging Face `tokenizers`
//! (`tests/llm/bpe_py_check.py`, in the `SLUICE_LLM_PYTHON` environment). Skips (class
//! "SmolLM2 model") without the GGUF file, except under CI; the tokenizer check skips
//! (class "SmolLM2 reference") without the environment.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde_json::{Value, json};
use sluice_tests::Server;
use sluice_tests::fixtures::{llm_gguf, llm_python};
use sluice_tests::minilm::output;
use sluice_tests::smollm2::{deploy, deploy_component, infer, int_input, ints, text_input, text_output};
use sluice_tests::sse::EventStream;

/// Greedy tokens generated per visible prompt (the refdata has 32; each guest runs them).
const STEPS: i32 = 24;

/// How far sluice's logits may part from the refdata's f32 forward, relative to the
/// largest logit: the noise of the Q8 activations of sluice's quantized linears (as
/// `Q8_LOGIT_NOISE` in `smollm2.rs`, where two correct forwards part by 2–6 %).
const Q8_LOGIT_NOISE: f64 = 0.1;

/// One visible prompt of the refdata.
struct Visible {
    id: String,
    user: String,
    prompt_ids: Vec<i64>,
    /// 32 greedy tokens of the f32 forward.
    generated: Vec<i64>,
    /// Per step, the top-5 ids and their logits.
    top5: Vec<Vec<(i64, f64)>>,
}

/// The visible prompts of `tests/data/smollm2_ref_visible.json`.
fn visible_prompts() -> Vec<Visible> {
    let path = sluice_tests::repo_root().join("tests/data/smollm2_ref_visible.json");
    let refdata: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let ids = |v: &Value| v.as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect::<Vec<_>>();
    refdata["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Visible {
            id: p["id"].as_str().unwrap().to_owned(),
            user: p["user_message"].as_str().unwrap().to_owned(),
            prompt_ids: ids(&p["prompt_ids"]),
            generated: ids(&p["generated_ids"]),
            top5: p["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|step| {
                    let logits = step["top5_logits"].as_array().unwrap().iter().map(|l| l.as_f64().unwrap());
                    ids(&step["top5_ids"]).into_iter().zip(logits).collect()
                })
                .collect(),
        })
        .collect()
}

fn messages(user: &str) -> String {
    json!([{ "role": "user", "content": user }]).to_string()
}

/// The bits of FP32 output `name` (JSON numbers of f32 values, read back as f32).
fn f32_bits(response: &Value, name: &str) -> Vec<u32> {
    output(response, name)["data"].as_array().unwrap().iter().map(|v| (v.as_f64().unwrap() as f32).to_bits()).collect()
}

fn common_prefix(a: &[i64], b: &[i64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[test]
fn the_python_guest_generates_the_rust_guests_tokens_for_the_visible_prompts() {
    let Some(gguf) = llm_gguf() else { return };
    let server = Server::start();
    let key = server.create_tenant("llm");
    deploy(&server, &key, "chat", &gguf);
    deploy_component(&server, &key, "chat-py", "smollm2_chat_py", &gguf);

    for Visible { id, user, prompt_ids, generated: reference, top5 } in visible_prompts() {
        let chat = text_input("messages", &messages(&user));
        // One step with its logits: the prompt's ids are the refdata's (the template and
        // the tokenizer), and the first logits are the Rust guest's bit for bit.
        let first = |name: &str| {
            infer(&server, &key, name, vec![chat.clone(), int_input("max_tokens", 1), int_input("return_logits", 1)])
        };
        let (rust, py) = (first("chat"), first("chat-py"));
        assert_eq!(ints(&rust, "prompt_ids"), prompt_ids, "{id}: the Rust guest's prompt ids");
        assert_eq!(ints(&py, "prompt_ids"), prompt_ids, "{id}: the Python guest's prompt ids");
        assert!(f32_bits(&py, "logits") == f32_bits(&rust, "logits"), "{id}: the first step's logits differ");
        // ... and within the Q8 noise of the refdata's f32 forward at its top 5.
        let logits = f32_bits(&py, "logits");
        let scale = top5[0].iter().map(|(_, l)| l.abs()).fold(0.0, f64::max);
        for &(token, want) in &top5[0] {
            let got = f64::from(f32::from_bits(logits[token as usize]));
            assert!(
                (got - want).abs() <= Q8_LOGIT_NOISE * scale,
                "{id}: logit of {token} {got} vs the refdata's {want}"
            );
        }

        // Greedy generation: token for token the Rust guest's.
        let generate = |name: &str| {
            let started = Instant::now();
            let out = infer(&server, &key, name, vec![chat.clone(), int_input("max_tokens", STEPS)]);
            (out, started.elapsed().as_secs_f64())
        };
        let ((rust, rust_s), (py, py_s)) = (generate("chat"), generate("chat-py"));
        let (rust_ids, py_ids) = (ints(&rust, "token_ids"), ints(&py, "token_ids"));
        let matched = common_prefix(&py_ids, &rust_ids);
        let with_reference = common_prefix(&rust_ids, &reference);
        println!(
            "{id}: Python {matched} of {} tokens the Rust guest's; Rust and the f32 refdata agree on the first \
             {with_reference}; {} tokens in {rust_s:.2} s (Rust, {:.1} tokens/s) and {py_s:.2} s (Python, {:.1} \
             tokens/s), prefill and HTTP included",
            rust_ids.len(),
            rust_ids.len(),
            rust_ids.len() as f64 / rust_s,
            py_ids.len() as f64 / py_s,
        );
        assert_eq!(py_ids, rust_ids, "{id}: the Python guest's greedy tokens");
        for name in ["text_output", "finish_reason"] {
            assert_eq!(text_output(&py, name), text_output(&rust, name), "{id}: {name}");
        }
        for name in ["prompt_tokens", "completion_tokens"] {
            assert_eq!(ints(&py, name), ints(&rust, name), "{id}: {name}");
        }
        // The refdata is an f32 forward without sluice's Q8 activations: where sluice
        // parts from its tokens, it is at a near tie, sluice's token one of the
        // refdata's top 5 within the Q8 noise of its best.
        if let Some(&chosen) = rust_ids.get(with_reference).filter(|_| with_reference < reference.len()) {
            let step = &top5[with_reference];
            let best = step[0].1;
            let at = step.iter().find(|(t, _)| *t == chosen).map(|(_, l)| *l);
            println!(
                "{id}: parts from the refdata at step {with_reference}: {chosen} (refdata logit {at:?}) for its best {step:?}"
            );
            let deficit = at.map_or(f64::INFINITY, |l| (best - l) / best.abs());
            assert!(
                deficit <= Q8_LOGIT_NOISE,
                "{id}: step {with_reference}: {chosen} is not a near tie of the refdata's {step:?}"
            );
        }
    }
}

#[test]
fn the_python_guest_samples_stops_streams_and_refuses_like_the_rust_guest() {
    let Some(gguf) = llm_gguf() else { return };
    let server = Server::start();
    let key = server.create_tenant("llm");
    deploy(&server, &key, "chat", &gguf);
    deploy_component(&server, &key, "chat-py", "smollm2_chat_py", &gguf);
    let chat = text_input("messages", r#"[{"role": "user", "content": "What is the capital of Germany?"}]"#);
    let both =
        |inputs: Vec<Value>| (infer(&server, &key, "chat", inputs.clone()), infer(&server, &key, "chat-py", inputs));

    // Sampling on the device: step i draws with seed + i in both.
    let sampling = |seed: i64| {
        vec![
            chat.clone(),
            int_input("max_tokens", 12),
            json!({ "name": "temperature", "shape": [1], "datatype": "FP32", "data": [1.0] }),
            json!({ "name": "top_p", "shape": [1], "datatype": "FP32", "data": [0.95] }),
            json!({ "name": "seed", "shape": [1], "datatype": "INT64", "data": [seed] }),
        ]
    };
    let (rust, py) = both(sampling(11));
    assert_eq!(ints(&py, "token_ids"), ints(&rust, "token_ids"), "seed 11");
    let (_, other) = both(sampling(12));
    assert_ne!(ints(&other, "token_ids"), ints(&py, "token_ids"), "another seed draws other tokens");

    // max_tokens and a stop string end both the same way.
    let (rust, py) = both(vec![chat.clone(), int_input("max_tokens", 2)]);
    assert_eq!((text_output(&py, "finish_reason"), ints(&py, "completion_tokens")), ("length".into(), vec![2]));
    assert_eq!(ints(&py, "token_ids"), ints(&rust, "token_ids"));
    let (rust, py) = both(vec![chat.clone(), int_input("max_tokens", 24), text_input("stop", "Berlin")]);
    assert_eq!(text_output(&py, "finish_reason"), "stop");
    assert_eq!(text_output(&py, "text_output"), text_output(&rust, "text_output"));
    assert!(!text_output(&py, "text_output").contains("Berlin"));

    // Streamed: the same pieces (a stop string that spans tokens never sent in part).
    let pieces = |name: &str, parameters: Value| {
        let body = json!({ "messages": r#"[{"role": "user", "content": "What is the capital of Germany?"}]"#,
                           "parameters": parameters });
        let url = format!("/v2/models/{name}/generate_stream");
        let mut events = EventStream::post(&server, &url, &key, &body).expect("a stream");
        let events: Vec<Value> = std::iter::from_fn(|| events.next_event().map(|(_, data)| data)).collect();
        let texts: Vec<String> = events.iter().filter_map(|e| e["text_output"].as_str().map(str::to_owned)).collect();
        (texts, events.last().cloned().unwrap_or_default())
    };
    for parameters in [json!({ "max_tokens": 16 }), json!({ "max_tokens": 24, "stop": "is Berlin" })] {
        let ((rust, rust_last), (py, py_last)) = (pieces("chat", parameters.clone()), pieces("chat-py", parameters));
        assert!(py.len() > 1, "one event per token or so: {py:?}");
        assert_eq!(py, rust, "the streamed pieces");
        assert_eq!(py_last["completion_tokens"], rust_last["completion_tokens"]);
    }

    // Bad inputs: the caller's fault in both.
    for inputs in [
        json!([int_input("max_tokens", 4)]),
        json!([text_input("messages", "not json")]),
        json!([text_input("text_input", "hi"), int_input("max_tokens", 0)]),
        json!([
            text_input("text_input", "hi"),
            json!({ "name": "top_p", "shape": [1], "datatype": "FP32", "data": [0.0] })
        ]),
        json!([
            text_input("text_input", "hi"),
            json!({ "name": "max_tokens", "shape": [1], "datatype": "FP32", "data": [4.0] })
        ]),
    ] {
        for name in ["chat", "chat-py"] {
            let url = format!("/v2/models/{name}/infer");
            server.post_json(&url, &key, &json!({ "inputs": inputs })).expect_error(400, "invalid_input");
        }
    }
}

/// A serving function in Python too (the `serving` file): requests that join a running
/// generation's decode steps (`Model.step_many`, one pass over the weights for all) give
/// what each gives alone, and say they shared the serving invocation.
#[test]
fn the_python_guest_batches_joined_generations_like_the_rust_guest() {
    let Some(gguf) = llm_gguf() else { return };
    let server = Server::start();
    let key = server.create_tenant("llm");
    deploy_component(&server, &key, "chat-py", "smollm2_chat_py", &gguf);
    let prompts: Vec<String> = visible_prompts().into_iter().map(|v| v.user).collect();
    let path = "/v2/models/chat-py/infer";
    let request =
        |user: &str| json!({ "inputs": [text_input("messages", &messages(user)), int_input("max_tokens", 12)] });
    let alone: Vec<Vec<i64>> =
        prompts.iter().map(|p| ints(&server.post_json(path, &key, &request(p)).expect(200), "token_ids")).collect();

    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (started, long_started) = std::sync::mpsc::channel();
        let (server, key, stop) = (&server, &key, &stop);
        let long = s.spawn(move || {
            let body = json!({ "text_input": "Once upon a time, in a land far away, there lived",
                               "parameters": { "max_tokens": 4000 } });
            let mut events = EventStream::post(server, "/v2/models/chat-py/generate_stream", key, &body).unwrap();
            let mut pieces = 0;
            while !stop.load(Ordering::Acquire) {
                let (_, event) = events.next_event().expect("the long generation goes on");
                assert!(event["text_output"].is_string(), "{event}");
                pieces += 1;
                if pieces == 2 {
                    started.send(()).unwrap();
                }
            }
        });
        long_started.recv().expect("the long generation streams");
        let together: Vec<_> = std::thread::scope(|s| {
            let calls: Vec<_> = prompts.iter().map(|p| s.spawn(|| server.post_json(path, key, &request(p)))).collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        stop.store(true, Ordering::Release);
        long.join().unwrap();
        for ((prompt, alone), r) in prompts.iter().zip(&alone).zip(&together) {
            let shared: u32 = r.headers["x-sluice-batch-size"].parse().unwrap();
            assert_eq!(&ints(&r.expect(200), "token_ids"), alone, "{prompt:?}: the same tokens as alone");
            assert!(shared >= 2, "{prompt:?} shared its steps with the long generation ({shared})");
        }
    });
}

#[test]
fn the_python_sdks_gguf_kv_cache_and_sampling_calls_match_the_rust_probe() {
    let Some(gguf) = llm_gguf() else { return };
    let server = Server::start();
    let key = server.create_tenant("probe");
    for (name, wasm) in [("probe", "gguf_probe"), ("probe-py", "gguf_probe_py")] {
        server.deploy(&key, name, wasm, "timeout_ms=120000");
        let bytes = std::fs::read(&gguf).unwrap();
        server.put_bytes(&format!("/v1/functions/{name}/artifacts/model"), &key, bytes).expect(201);
    }
    // Its signature (`signature.json`, the section the Rust SDK's `signature!` writes)
    // is reported, and a request that does not match it is refused before the guest runs.
    let meta = server.get("/v2/models/probe-py", &key).expect(200);
    assert_eq!(meta["inputs"][1], json!({ "name": "x", "datatype": "FP32", "shape": [-1, -1] }), "{meta}");
    assert_eq!(meta["outputs"][3], json!({ "name": "cache", "datatype": "FP32", "shape": [6, 3, 64] }), "{meta}");
    let wrong = json!({ "inputs": [text_input("tensor", "token_embd.weight"),
                                   { "name": "x", "shape": [1], "datatype": "INT32", "data": [1] }] });
    let e = server.post_json("/v2/models/probe-py/infer", &key, &wrong).expect_error(400, "invalid_request");
    assert!(e.contains("datatype INT32"), "{e}");

    let m = 2;
    let x: Vec<f32> = (0..m * 576).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
    for (tensor, dtype) in [("blk.0.ffn_up.weight", "q4_1"), ("token_embd.weight", "q8_0")] {
        let inputs = vec![
            text_input("tensor", tensor),
            json!({ "name": "x", "shape": [m, 576], "datatype": "FP32", "data": x }),
        ];
        let rust = infer(&server, &key, "probe", inputs.clone());
        let py = infer(&server, &key, "probe-py", inputs);
        for name in ["y", "dtype", "metadata", "cache", "refusals"] {
            assert_eq!(output(&py, name), output(&rust, name), "{tensor}: output {name}");
        }
        assert_eq!(text_output(&py, "dtype"), dtype);
        assert_eq!(output(&py, "names")["data"], json!(["model"]), "artifacts.names()");
        let (sampled, greedy) = (ints(&py, "sampled"), ints(&py, "greedy"));
        let n = output(&rust, "y")["shape"][1].as_i64().unwrap();
        assert!(sampled.iter().all(|t| (0..n).contains(t)), "{sampled:?}");
        assert_eq!(ints(&py, "sampled_again"), sampled, "a seed repeats its draw");
        assert_eq!(ints(&py, "top1"), greedy, "top_k 1 is the argmax");
        assert_eq!(output(&py, "weight_rows")["shape"], json!([2, 576]));
        assert_eq!(output(&py, "q_zeros")["data"], json!([0.0]));
        let checks: Vec<String> =
            output(&py, "checks")["data"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
        let want = [
            "transpose_out_of_range=INVALID_ARGUMENT",
            "to_vec_i64_of_f32=DTYPE_MISMATCH",
            "expect_dtype=DTYPE_MISMATCH",
            "scalar_f32=2.5",
            "full_f32=[0.5, 0.5, 0.5, 0.5]",
            "from_i64=[-1099511627776, 3]",
            "from_f16_bits=[1.0, -2.0]",
            "from_bf16_bits=[16256]",
            "bf16_to_f32=[-3.0]",
            "matmul_t=[2, 2]",
            "max_pool2d=[4.0]",
            "take=True",
            "u8=0080ff",
        ];
        for w in want {
            assert!(checks.iter().any(|c| c == w), "{tensor}: no check {w:?} in {checks:?}");
        }
        let norm = checks.iter().find(|c| c.starts_with("add_rms_norm=")).unwrap();
        // [3, 3] / sqrt(mean(9, 9)) * [1, 2] = [1, 2]
        assert!(norm == "add_rms_norm=[1.0, 2.0]", "{norm}");
        assert!(checks.iter().any(|c| c == "concat=[1.0, 2.0]"), "{checks:?}");
    }
}

#[test]
fn the_pure_python_tokenizer_matches_hugging_face_tokenizers() {
    let Some(gguf) = llm_gguf() else { return };
    let Some(python) = llm_python() else { return };
    let root = sluice_tests::repo_root();
    let run = std::process::Command::new(&python)
        .arg(root.join("tests/llm/bpe_py_check.py"))
        .arg(&gguf)
        .arg(root.join("tests/data/smollm2_ref_visible.json"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    println!("bpe_py_check: {stdout}");
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
}
