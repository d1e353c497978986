//! Continuous batching benchmark: SmolLM2-135M-Instruct (Q4_1 GGUF) through a real
//! `sluice serve`, at 1, 4 and 8 concurrent generations, with continuous batching (the
//! serving function's default) and without (the same component deployed with
//! `max_batch_size=1`: each request its own invocation, run concurrently as any
//! function's are), beside llama.cpp decoding as many streams at once in one context
//! (`bench/llm/llama_cpp_batched.py` through `bench/llm/run_peer.sh`, which builds
//! llama-cpp-python from PyPI once; `SLUICE_BENCH_PEERS=0` skips it).
//!
//! `cargo run --release -p sluice-tests --bin llm-batch-bench [-- --tokens T --runs R
//! --streams 1,4,8]` (needs `cargo xtask build-functions` and `cargo xtask fetch-llm`).
//! Each client sends one greedy `/v2` request of T tokens (default 64; `max_tokens`, and
//! the prompts are the three visible SmolLM2 reference prompts in turn); a row is the
//! median of R runs (default 3) of all clients at once: aggregate generated tokens per
//! second of wall time (prefill included) and the slowest request's time. The tenant
//! runs in the latency class, as an interactive chat's would. llama.cpp's rows are
//! measured the same way, in-process, on the same prompts' token ids, threads and file.
//! Checked on both sides: every generation has T tokens or ends on the end-of-sequence
//! token, and its tokens are compared with the same prompt run alone (the count that
//! match exactly is printed; sluice's must all match: a sequence's rows are computed
//! with the arithmetic of that row alone, the Q8 activations included).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_tests::fixtures::llm_gguf;
use sluice_tests::smollm2::{deploy, int_input, ints, text_input};
use sluice_tests::{Server, ServerOptions};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

fn prompts() -> Vec<String> {
    let path = sluice_tests::repo_root().join("tests/data/smollm2_ref_visible.json");
    let reference: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    reference["prompts"].as_array().unwrap().iter().map(|p| p["prompt_text"].as_str().unwrap().to_owned()).collect()
}

fn generate(server: &Server, key: &str, function: &str, prompt: &str, tokens: i32) -> Vec<i64> {
    let body = json!({ "inputs": [text_input("text_input", prompt), int_input("max_tokens", tokens)] });
    let out = server.post_json(&format!("/v2/models/{function}/infer"), key, &body).expect(200);
    ints(&out, "token_ids")
}

/// One run: `clients` requests at once; (generated tokens, wall time, matches).
fn run(
    server: &Server,
    key: &str,
    function: &str,
    prompts: &[String],
    alone: &[Vec<i64>],
    clients: usize,
    tokens: i32,
) -> (usize, Duration, usize) {
    let started = Instant::now();
    let outs: Vec<Vec<i64>> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..clients)
            .map(|c| s.spawn(move || generate(server, key, function, &prompts[c % prompts.len()], tokens)))
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let wall = started.elapsed();
    let mut matches = 0;
    for (c, out) in outs.iter().enumerate() {
        assert!(out.len() == tokens as usize || out.last() == Some(&2), "request {c}: {} tokens", out.len());
        matches += usize::from(out == &alone[c % alone.len()]);
    }
    (outs.iter().map(Vec::len).sum(), wall, matches)
}

/// Cores for the server's device and for llama.cpp alike: all of them.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// llama.cpp's batched decode of the same prompts at each stream count; `None` (the
/// reason on stderr) when skipped.
fn peer(gguf: &std::path::Path, streams: &[usize], tokens: i32, runs: usize) -> Option<Value> {
    if std::env::var("SLUICE_BENCH_PEERS").is_ok_and(|v| v == "0") {
        eprintln!("llm-batch-bench: SLUICE_BENCH_PEERS=0: llama.cpp skipped");
        return None;
    }
    let root = sluice_tests::repo_root();
    let script = root.join("bench/llm/run_peer.sh");
    let streams = streams.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let out = std::process::Command::new(&script)
        .args(["--script", "llama_cpp_batched.py", "--gguf"])
        .arg(gguf)
        .arg("--prompts")
        .arg(root.join("tests/data/smollm2_ref_visible.json"))
        .args(["--streams", &streams, "--tokens", &tokens.to_string(), "--runs", &runs.to_string()])
        .args(["--threads", &threads().to_string()])
        .stderr(std::process::Stdio::inherit())
        .output();
    match out {
        Ok(out) if out.status.success() => serde_json::from_slice(&out.stdout).ok(),
        Ok(out) => {
            eprintln!("llm-batch-bench: {} failed ({}): llama.cpp skipped", script.display(), out.status);
            None
        }
        Err(e) => {
            eprintln!("llm-batch-bench: {}: {e}: llama.cpp skipped", script.display());
            None
        }
    }
}

fn main() {
    let tokens = arg("--tokens", 64) as i32;
    let runs = arg("--runs", 3).max(1) as usize;
    let Some(gguf) = llm_gguf() else {
        eprintln!("llm-batch-bench: no SmolLM2 model (`cargo xtask fetch-llm` fetches it)");
        std::process::exit(2);
    };
    let streams: Vec<usize> = std::env::args()
        .skip_while(|a| a != "--streams")
        .nth(1)
        .map_or(vec![1, 4, 8], |s| s.split(',').filter_map(|n| n.parse().ok()).collect());
    // First, with nothing else running: llama.cpp, each prompt's alone tokens checked there.
    let llama = peer(&gguf, &streams, tokens, runs);
    let server = Server::start_with(ServerOptions {
        args: vec!["--tenant-max-concurrency".into(), "64".into()],
        ..ServerOptions::default()
    });
    // An interactive chat's tenant runs in the latency class (as `llm.rs` does): in
    // the batch class an invocation may queue only 32 kernels (the isolation default),
    // which held one stream's decode to ~0.75× of the latency class's on 2 cores.
    let tenant = json!({ "id": "bench", "settings": { "max_priority": "latency" } });
    let key = server.post_json("/v1/tenants", sluice_tests::ADMIN_KEY, &tenant).expect(201)["key"]
        .as_str()
        .expect("a key")
        .to_owned();
    deploy(&server, &key, "chat", &gguf);
    server.deploy(&key, "chat-alone", "smollm2_chat", "timeout_ms=300000&max_batch_size=1");
    let bytes = std::fs::read(&gguf).unwrap();
    server.put_bytes("/v1/functions/chat-alone/artifacts/model", &key, bytes).expect(201);

    let prompts = prompts();
    // The reference: each prompt alone, without batching (and a warm-up of both).
    let alone: Vec<Vec<i64>> = prompts.iter().map(|p| generate(&server, &key, "chat-alone", p, tokens)).collect();
    for p in &prompts {
        assert_eq!(generate(&server, &key, "chat", p, tokens), generate(&server, &key, "chat-alone", p, tokens));
    }

    println!(
        "SmolLM2-135M-Instruct Q4_1, greedy, {tokens} tokens per request, /v2 over HTTP, {} CPUs, median of {runs}",
        threads()
    );
    println!("{:<8} {:<34} {:>12} {:>12} {:>16}", "streams", "sluice", "tokens/s", "slowest s", "same as alone");
    for clients in streams {
        let mut rates = Vec::new();
        for (function, label) in
            [("chat-alone", "without batching (max_batch_size=1)"), ("chat", "continuous batching")]
        {
            let mut results: Vec<(f64, Duration, usize)> = (0..runs)
                .map(|_| {
                    let (n, wall, matches) = run(&server, &key, function, &prompts, &alone, clients, tokens);
                    (n as f64 / wall.as_secs_f64(), wall, matches)
                })
                .collect();
            results.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (rate, wall, matches) = results[runs / 2];
            rates.push(rate);
            println!("{clients:<8} {label:<34} {rate:>12.1} {:>12.2} {:>13}/{clients}", wall.as_secs_f64(), matches);
        }
        println!("{clients:<8} {:<34} {:>11.2}×", "continuous / without", rates[1] / rates[0]);
        let theirs = llama.as_ref().and_then(|l| {
            l["rows"].as_array()?.iter().find(|r| r["streams"].as_u64() == Some(clients as u64)).cloned()
        });
        if let Some(row) = theirs {
            let rate = row["tokens_per_s"].as_f64().unwrap_or(f64::NAN);
            println!(
                "{clients:<8} {:<34} {rate:>12.1} {:>12.2} {:>13}/{clients}",
                "llama.cpp, batched in one context",
                row["wall_s"].as_f64().unwrap_or(f64::NAN),
                row["same_as_alone"].as_u64().unwrap_or(0),
            );
            println!("{clients:<8} {:<34} {:>11.2}×", "continuous / llama.cpp", rates[1] / rate);
        }
    }
    if let Some(l) = &llama {
        println!(
            "llama.cpp: llama-cpp-python {}, {} threads, the same prompts' token ids, greedy",
            l["llama_cpp_python"].as_str().unwrap_or("?"),
            l["threads"]
        );
    }
}
