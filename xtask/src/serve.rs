//! `cargo xtask serve`: the whole platform on this machine, with the example
//! functions deployed: the README's run command.
//!
//! Builds the guests and a release `sluice`, fetches the model, starts `sluice serve`
//! (sled in `./sluice-data`, the GPU if one is usable, else the CPU), creates the tenant
//! `demo`, deploys `echo`, `mlp`, `minilm-embed` (with its weights, vocabulary and
//! config), `gemm-burn` (batch class), `mnist` (the digit classifier, with its
//! converted weights), the Python functions `echo-py`, `mlp-py` and
//! `minilm-embed-py`, the JavaScript functions `echo-js` and `minilm-embed-js`, and
//! `smollm2-chat` and its Python twin `smollm2-chat-py` (SmolLM2 with its GGUF file,
//! fetched once and sha256-checked like `cargo xtask fetch-llm` does) unless they are
//! already there,
//! prints a key
//! and a few curl commands, and then runs until Ctrl-C.
//!
//! `--addr`, `--grpc-listen`, `--data-dir` and `--device` are passed to `sluice serve`
//! (the Open Inference Protocol's gRPC endpoint listens on `--grpc-listen`,
//! 127.0.0.1:8081 unless told otherwise).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::{build_functions, cmd, fetch_llm, fetch_model};

struct Options {
    addr: String,
    grpc_listen: String,
    data_dir: PathBuf,
    device: String,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        addr: "127.0.0.1:8080".into(),
        grpc_listen: "127.0.0.1:8081".into(),
        data_dir: PathBuf::from("sluice-data"),
        device: "auto".into(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--addr" => o.addr = value()?.clone(),
            "--grpc-listen" => o.grpc_listen = value()?.clone(),
            "--data-dir" => o.data_dir = PathBuf::from(value()?),
            "--device" => o.device = value()?.clone(),
            other => bail!("unknown option {other} (serve takes --addr, --grpc-listen, --data-dir, --device)"),
        }
    }
    Ok(o)
}

/// A fresh admin key for this run (the server replaces any stored one with it).
fn admin_key() -> Result<String> {
    if let Ok(k) = std::env::var("SLUICE_ADMIN_KEY")
        && !k.is_empty()
    {
        return Ok(k);
    }
    let mut bytes = [0u8; 20];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(format!("sluice_admin_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

fn ready(addr: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET /v2/health/ready HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut reply = String::new();
    s.write_all(req.as_bytes()).is_ok() && s.read_to_string(&mut reply).is_ok() && reply.starts_with("HTTP/1.1 200")
}

/// Runs the `sluice` client with `key`; returns stdout, or None if it failed.
fn client(sluice: &Path, url: &str, key: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(sluice)
        .args(args)
        .env("SLUICE_URL", url)
        .env("SLUICE_KEY", key)
        .stderr(Stdio::piped())
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The value of `"key": "…"` in the client's JSON output.
fn key_from(json: &str) -> Option<String> {
    let rest = &json[json.find("\"key\"")? + 5..];
    let start = rest.find('"')? + 1;
    let end = start + rest[start..].find('"')?;
    Some(rest[start..end].to_owned())
}

pub fn run(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let root = cmd::repo_root();
    build_functions::run(&[])?;
    let wasm_dir = root.join("functions/target/wasm32-wasip2/release");
    let model = fetch_model::fetch()?;
    let mnist = fetch_model::fetch_mnist()?;
    cmd::run(cmd::cargo().current_dir(&root).args(["build", "--release", "-p", "sluice-runtime", "--bin", "sluice"]))?;
    let sluice = root.join("target/release/sluice");
    let admin = admin_key()?;
    let url = format!("http://{}", o.addr);

    let mut server = Command::new(&sluice)
        .args(["serve", "--addr", &o.addr, "--grpc-listen", &o.grpc_listen, "--device", &o.device, "--data-dir"])
        .arg(&o.data_dir)
        .env("SLUICE_ADMIN_KEY", &admin)
        .spawn()
        .context("starting sluice serve")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready(&o.addr) {
        if let Some(status) = server.try_wait()? {
            bail!("sluice serve exited with {status} before it was ready");
        }
        if Instant::now() > deadline {
            let _ = server.kill();
            bail!("sluice serve was not ready after 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    let created = client(&sluice, &url, &admin, &["tenants", "create", "demo", "--max-priority", "latency"])
        .or_else(|| client(&sluice, &url, &admin, &["tenants", "key", "demo"]))
        .context("creating the tenant `demo` (or a key for it)")?;
    let key = key_from(&created).context("the server's answer holds no key")?;

    let wasm = |name: &str| wasm_dir.join(format!("{name}.wasm")).display().to_string();
    let artifact = |name: &str, file: &str| format!("{name}={}", model.join(file).display());
    // A MiniLM component with the model's weights, vocabulary and config as artifacts.
    let minilm = |component: &str| {
        let mut args = vec![wasm(component)];
        for (name, file) in [("model", "model.safetensors"), ("vocab", "vocab.txt"), ("config", "config.json")] {
            args.extend(["--artifact".to_owned(), artifact(name, file)]);
        }
        args
    };
    let mut examples: Vec<(&str, Vec<String>)> = vec![
        ("echo", vec![wasm("echo")]),
        ("mlp", vec![wasm("mlp")]),
        ("minilm-embed", minilm("minilm_embed")),
        ("gemm-burn", vec![wasm("gemm_burn"), "--priority".into(), "batch".into()]),
        (
            "mnist",
            vec![wasm("mnist"), "--artifact".into(), format!("model={}", mnist.join("model.safetensors").display())],
        ),
        // Written in Python (functions/*/app.py, the Python guest SDK).
        ("echo-py", vec![wasm("echo_py")]),
        ("mlp-py", vec![wasm("mlp_py")]),
        ("minilm-embed-py", minilm("minilm_embed_py")),
        // Written in JavaScript (functions/*/app.js, the JavaScript guest SDK).
        ("echo-js", vec![wasm("echo_js")]),
        ("minilm-embed-js", minilm("minilm_embed_js")),
    ];
    // The LLM's model is fetched on the first run (98 MB, sha256-checked; then cached).
    // Without it (no network on a first run) the other examples still serve.
    let llm = match fetch_llm::fetched() {
        Some(gguf) => Some(gguf),
        None => {
            eprintln!("xtask: fetching SmolLM2-135M-Instruct (98 MB, once) for smollm2-chat ...");
            match fetch_llm::fetch() {
                Ok(dir) => Some(dir.join(fetch_llm::FILE)),
                Err(e) => {
                    eprintln!("xtask: could not fetch SmolLM2 ({e:#}); smollm2-chat is not deployed");
                    None
                }
            }
        }
    };
    if let Some(gguf) = &llm {
        for (name, component) in [("smollm2-chat", "smollm2_chat"), ("smollm2-chat-py", "smollm2_chat_py")] {
            examples.push((
                name,
                vec![
                    wasm(component),
                    "--timeout-ms".into(),
                    "300000".into(),
                    "--artifact".into(),
                    format!("model={}", gguf.display()),
                ],
            ));
        }
    }
    for (name, rest) in &examples {
        if client(&sluice, &url, &key, &["functions", "get", name]).is_some() {
            eprintln!("xtask: {name} is already deployed");
            continue;
        }
        let mut a = vec!["deploy", name];
        a.extend(rest.iter().map(String::as_str));
        client(&sluice, &url, &key, &a).with_context(|| format!("deploying {name}"))?;
        eprintln!("xtask: deployed {name}");
    }

    println!(
        "\nsluice is serving on {url} (gRPC on {grpc}) with echo, mlp, minilm-embed, gemm-burn, mnist{llm}, echo-py, mlp-py, minilm-embed-py{llm_py} in Python, and echo-js and minilm-embed-js in JavaScript (tenant `demo`);\n\
         the web console: {url}/ (sign in with a key below).\n\
         admin key: {admin}\n\
         demo key:  {key}\n\n\
         try:\n  \
         curl -s {url}/v2/models/minilm-embed/infer -H 'Authorization: Bearer {key}' \\\n    \
         -d '{{\"inputs\":[{{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"Hello, world\"]}}]}}'\n  \
         curl -s {url}/v1/status -H 'Authorization: Bearer {key}'\n\n\
         Ctrl-C stops the server.",
        grpc = o.grpc_listen,
        llm = if llm.is_some() { ", smollm2-chat" } else { "" },
        llm_py = if llm.is_some() { " and smollm2-chat-py" } else { "" },
    );
    let status = server.wait()?;
    if !status.success() {
        bail!("sluice serve exited with {status}");
    }
    Ok(())
}
