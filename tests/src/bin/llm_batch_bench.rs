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
//! measured the same way, in-process, on the same prompts' token ids, threads and file,
//! by one peer process kept for the whole run (`--serve`). The three sides take turns
//! run by run (the starting side rotating), and each ratio is the median of the runs'
//! own ratios: this machine's speed drifts by tens of percent over minutes, and sides
//! measured one after the other took that drift for a difference between them.
//! Checked on both sides: every generation has T tokens or ends on the end-of-sequence
//! token, and its tokens are compared with the same prompt run alone (the count that
//! match exactly is printed; sluice's must all match: a sequence's rows are computed
//! with the arithmetic of that row alone, the Q8 activations included).

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
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

/// One timed run of one side: aggregate tokens per second, wall time, streams whose
/// tokens matched the same prompt alone.
#[derive(Clone, Copy, Debug)]
struct Row {
    rate: f64,
    wall: Duration,
    matches: usize,
}

/// llama.cpp's batched decode (`llama_cpp_batched.py --serve`), one process for the
/// whole benchmark, asked for one timed run at a time so that its runs interleave with
/// sluice's.
struct Peer {
    child: Child,
    ask: ChildStdin,
    rows: Lines<BufReader<ChildStdout>>,
    /// What it printed first: versions, threads.
    header: Value,
}

impl Peer {
    /// Starts it (the model loaded, each prompt's alone tokens computed); `None`, with the
    /// reason on stderr, when skipped.
    fn start(gguf: &std::path::Path, streams: &[usize], tokens: i32) -> Option<Peer> {
        if std::env::var("SLUICE_BENCH_PEERS").is_ok_and(|v| v == "0") {
            eprintln!("llm-batch-bench: SLUICE_BENCH_PEERS=0: llama.cpp skipped");
            return None;
        }
        let root = sluice_tests::repo_root();
        let script = root.join("bench/llm/run_peer.sh");
        let streams = streams.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        let spawned = Command::new(&script)
            .args(["--script", "llama_cpp_batched.py", "--serve", "--gguf"])
            .arg(gguf)
            .arg("--prompts")
            .arg(root.join("tests/data/smollm2_ref_visible.json"))
            .args(["--streams", &streams, "--tokens", &tokens.to_string()])
            .args(["--threads", &threads().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                eprintln!("llm-batch-bench: {}: {e}: llama.cpp skipped", script.display());
                return None;
            }
        };
        let ask = child.stdin.take()?;
        let mut rows = BufReader::new(child.stdout.take()?).lines();
        match rows.next().and_then(Result::ok).and_then(|l| serde_json::from_str(&l).ok()) {
            Some(header) => Some(Peer { child, ask, rows, header }),
            None => {
                let status = child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
                eprintln!("llm-batch-bench: {} failed to start ({status}): llama.cpp skipped", script.display());
                None
            }
        }
    }

    /// One timed run of `streams` streams (the first of a count after a warm-up).
    fn run(&mut self, streams: usize) -> Row {
        writeln!(self.ask, "{streams}").expect("llama.cpp peer: write");
        let line = self.rows.next().expect("llama.cpp peer: it exited").expect("llama.cpp peer: read");
        let row: Value = serde_json::from_str(&line).expect("llama.cpp peer: a JSON row");
        let number = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("llama.cpp peer: no {k} in {row}"));
        Row {
            rate: number("tokens_per_s"),
            wall: Duration::from_secs_f64(number("wall_s")),
            matches: number("same_as_alone") as usize,
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // It would exit when its stdin closes; it is stopped outright instead.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sides a run measures, in the order of run 0; run r starts r places later, so that
/// no side is always the first (or the last) of a run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Llama,
    Alone,
    Batched,
}

const SIDES: [Side; 3] = [Side::Llama, Side::Alone, Side::Batched];

/// The median of `values` (sorted here).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The run whose rate is the median of `rows`.
fn median_row(rows: &[Row]) -> Row {
    let mut sorted = rows.to_vec();
    sorted.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    sorted[sorted.len() / 2]
}

/// `a[i] / b[i]` for each run: the median, the lowest and the highest.
fn paired(a: &[Row], b: &[Row]) -> (f64, f64, f64) {
    let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| a.rate / b.rate).collect();
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(0.0, f64::max);
    (median(ratios), lo, hi)
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
    // llama.cpp loads its model and checks each prompt alone before sluice starts.
    let mut llama = Peer::start(&gguf, &streams, tokens);
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
        "SmolLM2-135M-Instruct Q4_1, greedy, {tokens} tokens per request, /v2 over HTTP, {} CPUs, median of {runs} \
         runs, each side's runs interleaved with the others'",
        threads()
    );
    println!("{:<8} {:<34} {:>12} {:>12} {:>16}", "streams", "", "tokens/s", "slowest s", "same as alone");
    for clients in streams {
        let (mut without, mut batched, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..runs {
            for i in 0..SIDES.len() {
                let sluice = |function| {
                    let (n, wall, matches) = run(&server, &key, function, &prompts, &alone, clients, tokens);
                    Row { rate: n as f64 / wall.as_secs_f64(), wall, matches }
                };
                match SIDES[(r + i) % SIDES.len()] {
                    Side::Llama => theirs.extend(llama.as_mut().map(|l| l.run(clients))),
                    Side::Alone => without.push(sluice("chat-alone")),
                    Side::Batched => batched.push(sluice("chat")),
                }
            }
        }
        let print_row = |label: &str, rows: &[Row]| {
            let Row { rate, wall, matches } = median_row(rows);
            println!("{clients:<8} {label:<34} {rate:>12.1} {:>12.2} {matches:>13}/{clients}", wall.as_secs_f64());
        };
        let print_ratio = |label: &str, (mid, lo, hi): (f64, f64, f64)| {
            println!("{clients:<8} {label:<34} {mid:>11.2}×  (runs {lo:.2}–{hi:.2}×)");
        };
        print_row("sluice without batching", &without);
        print_row("sluice, continuous batching", &batched);
        print_ratio("continuous / without", paired(&batched, &without));
        if !theirs.is_empty() {
            print_row("llama.cpp, batched in one context", &theirs);
            print_ratio("continuous / llama.cpp", paired(&batched, &theirs));
        }
    }
    if let Some(l) = &llama {
        println!(
            "llama.cpp: llama-cpp-python {}, {} threads, the same prompts' token ids, greedy; ratios are the median \
             (lowest–highest) of each run's pair",
            l.header["llama_cpp_python"].as_str().unwrap_or("?"),
            l.header["threads"]
        );
    }
}
