//! The hostile tenants of the hostile-load suite (`hostile`): what each one does, how it
//! is set up, and one step of its attack.
//!
//! Besides the guests that misbehave on the device ([`Attack::Invoke`]: floods of
//! tensors, loops, memory exhaustion, quota abuse, traps), these attack what the host
//! shares outside the device:
//!
//! - [`Attack::GgufBomb`]: a GGUF artifact whose metadata holds one huge `u8` array,
//!   read by `gguf-probe` on every invocation (host RAM for parsed metadata);
//! - [`Attack::SlowUpload`]: artifact uploads that trickle a few bytes and stall (blocking
//!   threads, the blob store's lock);
//! - [`Attack::SlotHoard`]: many functions invoked round-robin, each kept warm (the
//!   instance pool's slots);
//! - [`Attack::OldVersions`]: invocations of a non-serving version with 4 MiB of weights
//!   (version 2 of three: loads and device memory outside the serving cache);
//! - [`Attack::StatusFlood`]: `GET /v1/status` and live feeds opened and dropped (the
//!   device actor's time);
//! - [`Attack::DiskFill`]: ever more artifacts, each new content (disk).
//!
//! A step returns the response's status and typed `code`; refusals (4xx with a code) are
//! what a bounded server answers, and the suite counts them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::{RawConn, Server, fp32_request, misbehave_request};

/// What a hostile tenant does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attack {
    /// Invokes `misbehave` in this mode.
    Invoke(&'static str),
    GgufBomb,
    SlowUpload,
    SlotHoard,
    OldVersions,
    StatusFlood,
    DiskFill,
}

/// Functions the slot hoarder keeps warm.
pub const HOARDED_FUNCTIONS: usize = 16;

/// Elements of the GGUF bomb's metadata array: 16 MiB of file, ~512 MiB per parse where
/// each element is stored as a full value.
pub const GGUF_BOMB_ELEMENTS: usize = 16 << 20;

/// The disk filler's artifact size.
const FILL_BYTES: usize = 1 << 20;

/// What a slow uploader declares it will send (it sends a few bytes of it).
const SLOW_UPLOAD_DECLARED: usize = 8 << 20;

impl Attack {
    /// Deploys what the attack needs for the tenant with `key`.
    pub fn set_up(self, server: &Server, key: &str) {
        match self {
            Attack::Invoke(_) => {
                server.deploy(key, "bad", "misbehave", "priority=latency&timeout_ms=500");
            }
            Attack::GgufBomb => {
                server.deploy(key, "bomb", "gguf_probe", "timeout_ms=2000");
                let r = server.call(
                    "PUT",
                    "/v1/functions/bomb/artifacts/model",
                    Some(key),
                    Some(("application/octet-stream", gguf_bomb(GGUF_BOMB_ELEMENTS))),
                );
                assert!(r.status == 201 || r.status / 100 == 4, "GGUF bomb upload: {} {:?}", r.status, r.body);
            }
            Attack::SlowUpload => {
                server.deploy(key, "slow", "echo", "");
            }
            Attack::SlotHoard => {
                for i in 0..HOARDED_FUNCTIONS {
                    server.deploy(key, &format!("hoard-{i}"), "echo", "");
                }
            }
            Attack::OldVersions => {
                server.deploy(key, "old", "echo", "");
                for (i, size) in [(1u8, 4 << 20), (2u8, 1 << 10)] {
                    let path = format!("/v1/functions/old/artifacts/w{i}");
                    server.call("PUT", &path, Some(key), Some(("application/octet-stream", vec![i; size]))).expect(201);
                }
            }
            Attack::StatusFlood => {}
            Attack::DiskFill => {
                server.deploy(key, "fill", "echo", "");
            }
        }
    }

    /// One step of the attack by the client with connection `conn` (reconnected where a
    /// step needs its own socket). Returns `(status, code)`, or `None` where the step
    /// was cut short by `stop` or the connection broke.
    pub fn step(
        self,
        server: &Server,
        conn: &mut RawConn,
        key: &str,
        n: u64,
        stop: &AtomicBool,
    ) -> Option<(u16, String)> {
        let invoke = |conn: &mut RawConn, path: &str, body: &Value| {
            let r = conn.request("POST", path, key, &serde_json::to_vec(body).expect("json")).ok()?;
            Some((r.status, code_of(&r.body)))
        };
        match self {
            Attack::Invoke(mode) => invoke(conn, "/v1/functions/bad/invoke", &misbehave_request(mode)),
            Attack::GgufBomb => invoke(conn, "/v2/models/bomb/infer", &gguf_probe_request()),
            Attack::SlotHoard => {
                let path = format!("/v1/functions/hoard-{}/invoke", n as usize % HOARDED_FUNCTIONS);
                invoke(conn, &path, &fp32_request(&[1.0, 2.0]))
            }
            Attack::OldVersions => invoke(conn, "/v2/models/old/versions/2/infer", &v2_fp32(&[1.0, 2.0])),
            Attack::StatusFlood if n.is_multiple_of(2) => {
                let r = conn.request("GET", "/v1/status", key, b"").ok()?;
                Some((r.status, code_of(&r.body)))
            }
            Attack::StatusFlood => open_and_drop_feed(server.addr(), key),
            Attack::DiskFill => {
                // New content every time: content addressing must not make it free.
                let mut bytes = vec![0u8; FILL_BYTES];
                bytes[..8].copy_from_slice(&n.to_le_bytes());
                bytes[8..16].copy_from_slice(&FILL_SALT.fetch_add(1, Ordering::Relaxed).to_le_bytes());
                let path = format!("/v1/functions/fill/artifacts/a{n}");
                let r = conn.request_typed("PUT", &path, key, "application/octet-stream", &bytes).ok()?;
                Some((r.status, code_of(&r.body)))
            }
            Attack::SlowUpload => slow_upload(server.addr(), key, n, stop),
        }
    }
}

/// Distinguishes the disk fillers' contents across clients.
static FILL_SALT: AtomicU64 = AtomicU64::new(0);

/// The `code` of a JSON error body ("" for none).
pub fn code_of(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body).ok().and_then(|v| v["code"].as_str().map(str::to_owned)).unwrap_or_default()
}

/// An OIP request with one FP32 tensor `x` of `data`, on the `/v2` routes.
fn v2_fp32(data: &[f32]) -> Value {
    json!({ "inputs": [{ "name": "x", "shape": [data.len()], "datatype": "FP32", "data": data }] })
}

/// `gguf-probe`'s inputs for the bomb's weight `w` (`[4, 192]` f32).
fn gguf_probe_request() -> Value {
    json!({ "inputs": [
        { "name": "tensor", "shape": [1], "datatype": "BYTES", "data": ["w"] },
        { "name": "x", "shape": [1, 192], "datatype": "FP32", "data": vec![0.5f32; 192] },
    ] })
}

/// A GGUF v3 file with one f32 tensor `w` (`[4, 192]`) and a metadata array of
/// `elements` `u8`s (`bomb.array`).
pub fn gguf_bomb(elements: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(elements + 4096);
    let string = |f: &mut Vec<u8>, s: &str| {
        f.extend_from_slice(&(s.len() as u64).to_le_bytes());
        f.extend_from_slice(s.as_bytes());
    };
    f.extend_from_slice(b"GGUF");
    f.extend_from_slice(&3u32.to_le_bytes());
    f.extend_from_slice(&1u64.to_le_bytes()); // tensors
    f.extend_from_slice(&2u64.to_le_bytes()); // metadata entries
    string(&mut f, "general.alignment");
    f.extend_from_slice(&4u32.to_le_bytes()); // u32
    f.extend_from_slice(&32u32.to_le_bytes());
    string(&mut f, "bomb.array");
    f.extend_from_slice(&9u32.to_le_bytes()); // array
    f.extend_from_slice(&0u32.to_le_bytes()); // of u8
    f.extend_from_slice(&(elements as u64).to_le_bytes());
    f.resize(f.len() + elements, 7);
    string(&mut f, "w");
    f.extend_from_slice(&2u32.to_le_bytes()); // rank
    f.extend_from_slice(&192u64.to_le_bytes()); // ne0 (fastest)
    f.extend_from_slice(&4u64.to_le_bytes()); // ne1
    f.extend_from_slice(&0u32.to_le_bytes()); // f32
    f.extend_from_slice(&0u64.to_le_bytes()); // offset
    f.resize(f.len().next_multiple_of(32), 0);
    for i in 0..4 * 192 {
        f.extend_from_slice(&((i % 7) as f32 * 0.25).to_le_bytes());
    }
    f
}

/// Opens the live feed of device 0 with `key`, reads its first bytes and hangs up.
fn open_and_drop_feed(addr: &str, key: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let head = format!("GET /v1/devices/0/live HTTP/1.1\r\nhost: sluice\r\nauthorization: Bearer {key}\r\n\r\n");
    s.write_all(head.as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf[..n]);
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let code = text.split("\r\n\r\n").nth(1).map(|b| code_of(b.as_bytes())).unwrap_or_default();
    Some((status, code))
}

/// Starts an artifact upload that declares [`SLOW_UPLOAD_DECLARED`] bytes and then sends
/// one byte every 100 ms until the server answers (a refusal, or its body timeout) or
/// `stop` is set (then it hangs up, as a vanished client does).
fn slow_upload(addr: &str, key: &str, n: u64, stop: &AtomicBool) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(100))).ok()?;
    let head = format!(
        "PUT /v1/functions/slow/artifacts/s{n} HTTP/1.1\r\nhost: sluice\r\nauthorization: Bearer {key}\r\n\
         content-type: application/octet-stream\r\ncontent-length: {SLOW_UPLOAD_DECLARED}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).ok()?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                answer.extend_from_slice(&buf[..k]);
                if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                    // Give the body a moment to follow the head.
                    std::thread::sleep(Duration::from_millis(20));
                    if let Ok(k) = s.read(&mut buf) {
                        answer.extend_from_slice(&buf[..k]);
                    }
                    break;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                // The server may already have answered and closed: a failed write is fine.
                let _ = s.write_all(b"x");
            }
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let code = text.split("\r\n\r\n").nth(1).map(|b| code_of(b.as_bytes())).unwrap_or_default();
    Some((status, code))
}
