//! The `sluice serve --device cuda` smoke test on the fake device: MiniLM end to end
//! (HTTP, the engine, the guest, the CUDA backend's kernels and cuBLAS calls), in f32 and
//! f16, against the reference embeddings of `tests/data/minilm_ref_visible.json`, on a
//! server with two GPUs (`SLUICE_FAKE_CUDA_DEVICES=2`).
//!
//! Starts the debug `sluice` on a free local port with a throw-away data directory,
//! creates a tenant, deploys MiniLM as two functions (each version is placed on the
//! least-loaded GPU, so one lands on each), embeds the shortest reference sentences (the
//! emulator runs ~1 µs per CUDA thread, so long batches would take minutes) in f32
//! through one and in f16 through the other, checks every embedding's cosine similarity
//! to the reference, and checks in `/v1/status` that both GPUs ran kernels.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::{build_functions, cmd, fetch_model};

/// Reference sentences embedded per precision (the shortest ones come first in the file).
const SENTENCES: usize = 5;
/// Hidden size of MiniLM.
const HIDDEN: usize = 384;
/// (function, precision, least cosine similarity to the reference accepted).
const RUNS: [(&str, &str, f64); 2] = [("minilm-embed", "f32", 0.99999), ("minilm-embed-2", "f16", 0.999)];
/// GPUs the fake driver shows the server.
const GPUS: usize = 2;

/// Kills the server when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn request(addr: &str, method: &str, path: &str, key: &str, body: &str) -> Result<String> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    if !head.starts_with("HTTP/1.1 200") {
        bail!("{method} {path}: {}\n{body}", head.lines().next().unwrap_or(""));
    }
    Ok(body.to_owned())
}

/// The JSON string after `"key":` in `json` (raw, escapes kept).
fn string_after<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let rest = &json[json.find(&format!("\"{key}\""))? + key.len() + 2..];
    let start = rest.find('"')? + 1;
    let bytes = rest.as_bytes();
    let mut end = start;
    while end < bytes.len() && bytes[end] != b'"' {
        end += if bytes[end] == b'\\' { 2 } else { 1 };
    }
    rest.get(start..end)
}

/// The numbers of the first JSON array after `from`.
fn numbers_after(json: &str, from: usize) -> Option<(Vec<f64>, usize)> {
    let open = from + json[from..].find('[')?;
    let close = open + json[open..].find(']')?;
    let v = json[open + 1..close].split(',').map(|t| t.trim().parse::<f64>().ok()).collect::<Option<Vec<_>>>()?;
    Some((v, close))
}

/// (raw JSON text literal, embedding) of the first `n` reference records.
fn reference(n: usize) -> Result<Vec<(String, Vec<f64>)>> {
    let path = cmd::repo_root().join("tests/data/minilm_ref_visible.json");
    let json = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    let mut at = 0;
    while out.len() < n {
        let rec = at + json[at..].find("\"text\"").context("fewer reference records than expected")?;
        let text = string_after(&json[rec..], "text").context("a record without text")?.to_owned();
        let emb = rec + json[rec..].find("\"embedding\"").context("a record without an embedding")?;
        let (e, end) = numbers_after(&json, emb).context("an unreadable embedding")?;
        out.push((text, e));
        at = end;
    }
    Ok(out)
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn client(sluice: &Path, url: &str, key: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(sluice).args(args).env("SLUICE_URL", url).env("SLUICE_KEY", key).output()?;
    if !out.status.success() {
        bail!("sluice {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs the smoke test with `schedule` and the debug binary `sluice` (the host test
/// build's).
pub fn run(sluice: &Path, schedule: &str) -> Result<()> {
    let root = cmd::repo_root();
    build_functions::run(&[])?;
    let model = fetch_model::fetch()?;
    let data = std::env::temp_dir().join(format!("sluice-fake-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let addr = format!("127.0.0.1:{}", free_port()?);
    let url = format!("http://{addr}");
    let admin = format!("sluice_admin_fake_{}", std::process::id());
    let mut c = Command::new(sluice);
    c.args(["serve", "--addr", &addr, "--grpc-listen", "127.0.0.1:0", "--device", "cuda", "--data-dir"])
        .arg(&data)
        .env("SLUICE_ADMIN_KEY", &admin)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    super::env(&mut c, schedule)?;
    c.env("SLUICE_FAKE_CUDA_DEVICES", GPUS.to_string());
    let mut server = Server(c.spawn().context("starting sluice serve")?);
    let deadline = Instant::now() + Duration::from_secs(120);
    while request(&addr, "GET", "/v2/health/ready", "", "").is_err() {
        if let Some(status) = server.0.try_wait()? {
            bail!("sluice serve --device cuda exited with {status} on the fake device");
        }
        if Instant::now() > deadline {
            bail!("sluice serve was not ready after 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = request(&addr, "GET", "/v1/status", &admin, "")?;
    if !status.contains("sluice CPU emulator") {
        bail!("the server does not run on the fake CUDA device: {status}");
    }
    let created = client(sluice, &url, &admin, &["tenants", "create", "smoke"])?;
    let key = string_after(&created, "key").context("no key in the answer to `tenants create`")?.to_owned();
    let wasm = root.join("functions/target/wasm32-wasip2/release/minilm_embed.wasm");
    let artifact = |name: &str, file: &str| format!("{name}={}", model.join(file).display());
    for (function, _, _) in RUNS {
        client(
            sluice,
            &url,
            &key,
            &[
                "deploy",
                function,
                &wasm.display().to_string(),
                "--artifact",
                &artifact("model", "model.safetensors"),
                "--artifact",
                &artifact("vocab", "vocab.txt"),
                "--artifact",
                &artifact("config", "config.json"),
            ],
        )?;
    }
    let records = reference(SENTENCES)?;
    let texts = records.iter().map(|(t, _)| format!("\"{t}\"")).collect::<Vec<_>>().join(",");
    for (function, precision, least) in RUNS {
        let body = format!(
            "{{\"inputs\":[{{\"name\":\"text\",\"shape\":[{SENTENCES}],\"datatype\":\"BYTES\",\"data\":[{texts}]}},\
             {{\"name\":\"precision\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"{precision}\"]}}]}}"
        );
        let t0 = Instant::now();
        let reply = request(&addr, "POST", &format!("/v2/models/{function}/infer"), &key, &body)?;
        let mut at = 0;
        let embeddings = loop {
            let data = at + reply[at..].find("\"data\"").context("no output of the expected size")?;
            let (v, end) = numbers_after(&reply, data).context("an unreadable output")?;
            if v.len() == SENTENCES * HIDDEN {
                break v;
            }
            at = end;
        };
        let worst = records
            .iter()
            .enumerate()
            .map(|(i, (_, want))| cosine(&embeddings[i * HIDDEN..(i + 1) * HIDDEN], want))
            .fold(1.0f64, f64::min);
        eprintln!(
            "xtask: MiniLM {precision} on the fake CUDA device via sluice serve: {SENTENCES} sentences in {:.1} s, \
             least cosine to the reference {worst:.7}",
            t0.elapsed().as_secs_f64()
        );
        if worst.is_nan() || worst < least {
            bail!("MiniLM {precision} on the fake CUDA device: cosine {worst} < {least}");
        }
    }
    let kernels = kernels_per_device(&request(&addr, "GET", "/v1/status", &admin, "")?);
    eprintln!("xtask: kernels run per fake GPU: {kernels:?}");
    if kernels.len() != GPUS || kernels.contains(&0) {
        bail!("sluice serve should run on {GPUS} fake GPUs, each running kernels; kernels per device: {kernels:?}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}

/// The `kernels` count of each device in a `/v1/status` body, in order.
fn kernels_per_device(status: &str) -> Vec<u64> {
    let devices = &status[status.find("\"devices\"").unwrap_or(0)..];
    devices
        .split("\"partition\"")
        .skip(1)
        .filter_map(|d| {
            let at = d.find("\"kernels\":")? + "\"kernels\":".len();
            let digits: String = d[at..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}
