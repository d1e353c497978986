//! SmolLM2-135M-Instruct (Q4_1 GGUF) on the CPU: sluice's `smollm2-chat` in-process and
//! over HTTP streaming, beside llama.cpp (`llama-cpp-python`, built from PyPI by
//! `bench/llm/run_peer.sh`) on the same file, in one run, same threads, same prompt.
//!
//! The prompt is `bench/llm/prompt.json` (the chat template already applied), decoded
//! greedily for its `decode_tokens` tokens. Every side is measured from its token stream
//! the same way: prompt tokens/s = prompt tokens over the time to the first token (the
//! prompt's pass and the first pick), decode tokens/s = the other tokens over the time
//! from the first token to the last. In-process: `Engine::invoke` with a streaming
//! caller, the times of the chunks as the engine saw them. Over HTTP: a server in this
//! process on loopback, `POST /v2/models/smollm2-chat/generate_stream` by a tenant of
//! the latency class, the arrival time of each server-sent event at the client.
//! Correctness: sluice's greedy tokens are held to an independent NumPy model by `tests/tests/smollm2.rs`; here the leading
//! tokens the sides agree on are printed (both quantize activations to Q8 blocks, and
//! the different orders of their f32 sums move a value across a rounding boundary now
//! and then, so at a near tie the two may part).
//!
//! `cargo bench -p sluice-runtime --bench llm [-- --runs R --warmup W]`; needs `cargo
//! xtask build-functions` and `cargo xtask fetch-llm`; `SLUICE_BENCH_PEERS=0` skips
//! llama.cpp. Prints a table; asserts nothing about time.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_runtime::cli::client::{Client, ClientArgs};
use sluice_runtime::device::DeviceChoice;
use sluice_runtime::engine::{
    ArtifactSet, CallerLink, Cancel, Engine, EngineConfig, FunctionLimits, IoData, IoTensor, chunk_channel,
    default_room,
};
use sluice_runtime::platform::{Platform, PlatformConfig};
use sluice_runtime::scheduler::{DeviceQueue, MemoryAccount, PriorityClass};
use sluice_runtime::server::{self, BodyLimits};
use ureq::http::Method;

const ADMIN_KEY: &str = "bench-admin-key-0123456789abcdef";

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

/// The GGUF file of `cargo xtask fetch-llm` (`SLUICE_LLM_DIR` overrides the directory).
fn gguf() -> PathBuf {
    let dir = std::env::var_os("SLUICE_LLM_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/sluice/models/SmolLM2-135M-Instruct")
    });
    let file = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(file.is_file(), "{} is missing: run `cargo xtask fetch-llm` first", file.display());
    file
}

/// One measured generation.
#[derive(Clone, Debug, Default)]
struct Run {
    prompt_tokens: usize,
    tokens: Vec<i64>,
    prompt_per_s: f64,
    decode_per_s: f64,
}

/// The rates of a generation of `completion` tokens whose first token came `first`
/// after the start and whose last came `last` after it.
fn rates(prompt_tokens: usize, completion: usize, first: Duration, last: Duration) -> (f64, f64) {
    let decode =
        if completion > 1 && last > first { (completion - 1) as f64 / (last - first).as_secs_f64() } else { f64::NAN };
    (prompt_tokens as f64 / first.as_secs_f64(), decode)
}

fn output<'a>(outputs: &'a [IoTensor], name: &str) -> &'a IoData {
    &outputs.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no output {name}")).data
}

fn one_int(data: &IoData) -> usize {
    match data {
        IoData::I32(v) => v[0] as usize,
        IoData::I64(v) => v[0] as usize,
        other => panic!("expected one integer, got {other:?}"),
    }
}

fn inputs(text: &str, steps: usize) -> Vec<IoTensor> {
    vec![
        common::bytes_input("text_input", &[text]),
        IoTensor { name: "max_tokens".into(), shape: vec![1], data: IoData::I32(vec![steps as i32]) },
    ]
}

/// `runs` generations in-process, streaming to a caller that reads every chunk.
fn in_process(queue: &DeviceQueue, text: &str, steps: usize, (warmup, runs): (usize, usize)) -> Vec<Run> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let engine = Engine::new(EngineConfig::default()).unwrap();
    let compiled = engine.compile(&common::component("smollm2_chat")).expect("compile smollm2_chat");
    let files = HashMap::from([("model".to_owned(), gguf())]);
    let artifacts = ArtifactSet::new(files, MemoryAccount::new("weights", None, None));
    let limits = FunctionLimits { timeout: Duration::from_secs(600), ..FunctionLimits::default() };
    let image = engine.prepare("smollm2-chat", &compiled, artifacts, limits).expect("prepare smollm2_chat");
    let inputs = inputs(text, steps);
    let mut measured = Vec::new();
    for i in 0..warmup + runs {
        let (sink, mut chunks) = chunk_channel(default_room());
        let mut ctx = common::ctx(queue, "bench", PriorityClass::Latency);
        ctx.caller = CallerLink::streaming(sink, Cancel::default());
        let reader = rt.spawn(async move { while chunks.recv().await.is_some() {} });
        let started = Instant::now();
        let out = rt.block_on(engine.invoke(&image, ctx, &inputs)).expect("smollm2-chat in-process");
        rt.block_on(reader).unwrap();
        let (first, last) = (out.chunks.first.expect("no chunk"), out.chunks.last.expect("no chunk"));
        let prompt_tokens = one_int(output(&out.outputs, "prompt_tokens"));
        let completion = one_int(output(&out.outputs, "completion_tokens"));
        let IoData::I32(tokens) = output(&out.outputs, "token_ids") else { panic!("token_ids is not INT32") };
        let (prompt_per_s, decode_per_s) = rates(prompt_tokens, completion, first - started, last - started);
        if i >= warmup {
            eprintln!(
                "llm bench: in-process run {}: prompt {prompt_per_s:.0} tok/s, decode {decode_per_s:.1} tok/s",
                i - warmup + 1
            );
            measured.push(Run {
                prompt_tokens,
                tokens: tokens.iter().map(|&t| t.into()).collect(),
                prompt_per_s,
                decode_per_s,
            });
        }
    }
    measured
}

/// `runs` generations over HTTP streaming from a server in this process.
fn over_http(text: &str, steps: usize, (warmup, runs): (usize, usize)) -> Vec<Run> {
    let data_dir = std::env::temp_dir().join(format!("sluice-bench-llm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let config = PlatformConfig { data_dir: data_dir.clone(), ..PlatformConfig::default() };
    let device = common::open("llm bench", DeviceChoice::Cpu, Some(threads()));
    let platform = Platform::open(config, vec![device]).expect("platform");
    platform.registry().ensure_admin_key(Some(ADMIN_KEY.to_owned())).unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    rt.spawn(server::serve(listener, platform.clone(), BodyLimits::default(), Duration::from_secs(1)));
    let admin = Client::new(&ClientArgs { url: url.clone(), key: Some(ADMIN_KEY.to_owned()) });
    // The latency class, as an interactive chat's tenant would run (and as the
    // in-process side runs): in the batch class an invocation may queue only 32 kernels,
    // the isolation default, and one stream decoded at ~0.75× of this on 2 cores.
    let tenant = json!({ "id": "bench", "settings": { "max_priority": "latency" } });
    let created = admin.json(Method::POST, "/v1/tenants", Some(&tenant)).expect("tenant");
    let key = created["key"].as_str().expect("key").to_owned();
    let client = Client::new(&ClientArgs { url: url.clone(), key: Some(key.clone()) });
    let staged = client
        .send(
            Method::PUT,
            "/v1/functions/smollm2-chat?staged=true",
            Some(("application/wasm", common::component("smollm2_chat"))),
        )
        .and_then(|r| r.ok())
        .and_then(|r| r.json())
        .expect("deploy smollm2-chat");
    let bytes = std::fs::read(gguf()).unwrap();
    client
        .send(Method::PUT, "/v1/functions/smollm2-chat/artifacts/model", Some(("application/octet-stream", bytes)))
        .and_then(|r| r.ok())
        .expect("upload the GGUF");
    let version = staged["version"].as_u64().expect("version");
    client
        .send(Method::POST, &format!("/v1/functions/smollm2-chat/versions/{version}/publish"), None)
        .and_then(|r| r.ok())
        .expect("publish");

    let body = serde_json::to_vec(&json!({ "text_input": text, "parameters": { "max_tokens": steps } })).unwrap();
    let mut measured = Vec::new();
    for i in 0..warmup + runs {
        let started = Instant::now();
        let response = ureq::post(&format!("{url}/v2/models/smollm2-chat/generate_stream"))
            .header("authorization", &format!("Bearer {key}"))
            .header("content-type", "application/json")
            .send(&body[..])
            .expect("generate_stream");
        let mut events: Vec<(Duration, Value)> = Vec::new();
        for line in BufReader::new(response.into_body().into_reader()).lines() {
            let line = line.expect("reading the event stream");
            if let Some(data) = line.strip_prefix("data:") {
                events.push((started.elapsed(), serde_json::from_str(data.trim()).expect("an event's JSON")));
            }
        }
        let text_events: Vec<&(Duration, Value)> =
            events.iter().filter(|(_, e)| e.get("text_output").is_some()).collect();
        let last_event = &events.last().expect("no event").1;
        let number =
            |name: &str| last_event[name].as_u64().or_else(|| last_event[name][0].as_u64()).unwrap_or(0) as usize;
        let (prompt_tokens, completion) = (number("prompt_tokens"), number("completion_tokens"));
        let (first, last) = (text_events.first().expect("no text event").0, text_events.last().unwrap().0);
        let (prompt_per_s, decode_per_s) = rates(prompt_tokens, completion, first, last);
        if i >= warmup {
            eprintln!(
                "llm bench: HTTP run {}: prompt {prompt_per_s:.0} tok/s, decode {decode_per_s:.1} tok/s",
                i - warmup + 1
            );
            measured.push(Run { prompt_tokens, tokens: Vec::new(), prompt_per_s, decode_per_s });
        }
    }
    // As `sluice serve` stops: the serving invocation, idle after the last run, returns
    // before the async runtime it waits on goes away.
    platform.begin_shutdown();
    rt.block_on(async {
        while platform.serving_invocations() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    rt.shutdown_timeout(Duration::from_millis(200));
    drop(platform);
    let _ = std::fs::remove_dir_all(&data_dir);
    measured
}

/// Cores for the device's kernels and for llama.cpp alike: all of them.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// llama.cpp through `bench/llm/run_peer.sh`; `None` (the reason on stderr) when skipped.
fn peer(runs: usize, warmup: usize) -> Option<Value> {
    if std::env::var("SLUICE_BENCH_PEERS").is_ok_and(|v| v == "0") {
        eprintln!("llm bench: SLUICE_BENCH_PEERS=0: llama.cpp skipped");
        return None;
    }
    let script = common::repo_root().join("bench/llm/run_peer.sh");
    let out = std::process::Command::new(&script)
        .arg("--gguf")
        .arg(gguf())
        .args(["--threads", &threads().to_string(), "--runs", &runs.to_string(), "--warmup", &warmup.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output();
    match out {
        Ok(out) if out.status.success() => serde_json::from_slice(&out.stdout).ok(),
        Ok(out) => {
            eprintln!("llm bench: {} failed ({}): llama.cpp skipped", script.display(), out.status);
            None
        }
        Err(e) => {
            eprintln!("llm bench: {}: {e}: llama.cpp skipped", script.display());
            None
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let (runs, warmup) = (arg("--runs", 5), arg("--warmup", 1));
    let spec: Value =
        serde_json::from_slice(&std::fs::read(common::repo_root().join("bench/llm/prompt.json")).unwrap()).unwrap();
    let (text, steps) = (spec["text"].as_str().unwrap(), spec["decode_tokens"].as_u64().unwrap() as usize);
    eprintln!(
        "llm bench: SmolLM2-135M-Instruct Q4_1, {steps} greedy tokens, {} threads, {runs} runs after {warmup}",
        threads()
    );

    let queue = DeviceQueue::start(common::open("llm bench", DeviceChoice::Cpu, Some(threads())));
    let local = in_process(&queue, text, steps, (warmup, runs));
    drop(queue);
    let http = over_http(text, steps, (warmup, runs));
    let llama = peer(runs, warmup);

    println!();
    println!(
        "SmolLM2-135M-Instruct Q4_1 on the CPU, {} prompt tokens, {steps} greedy tokens, {} threads, median of {runs}",
        local[0].prompt_tokens,
        threads()
    );
    println!("{:<40} {:>14} {:>14} {:>14}", "", "prompt tok/s", "decode tok/s", "decode vs llama.cpp");
    let llama_decode = llama.as_ref().and_then(|l| l["decode_tokens_per_s_p50"].as_f64());
    let row = |name: &str, prompt: f64, decode: f64| {
        let vs = llama_decode.map_or("—".to_owned(), |l| format!("{:.2}×", decode / l));
        println!("{name:<40} {prompt:>14.0} {decode:>14.1} {vs:>14}");
    };
    let med = |v: &[Run], f: fn(&Run) -> f64| median(v.iter().map(f).collect());
    row("sluice in-process (streaming)", med(&local, |r| r.prompt_per_s), med(&local, |r| r.decode_per_s));
    row("sluice over HTTP (generate_stream SSE)", med(&http, |r| r.prompt_per_s), med(&http, |r| r.decode_per_s));
    if let Some(l) = &llama {
        row(
            &format!("llama.cpp (llama-cpp-python {})", l["llama_cpp_python"].as_str().unwrap_or("?")),
            l["prompt_tokens_per_s_p50"].as_f64().unwrap_or(f64::NAN),
            l["decode_tokens_per_s_p50"].as_f64().unwrap_or(f64::NAN),
        );
        let theirs: Vec<i64> = l["greedy_tokens"].as_array().into_iter().flatten().filter_map(Value::as_i64).collect();
        let same = local[0].tokens.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
        println!(
            "greedy tokens: sluice and llama.cpp agree on the first {same} of {} (prompt: {} tokens here, {} in llama.cpp)",
            local[0].tokens.len().min(theirs.len()),
            local[0].prompt_tokens,
            l["prompt_ids"].as_array().map_or(0, Vec::len)
        );
    }
}
