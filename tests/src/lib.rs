//! Shared helpers for the end-to-end tests: a real `sluice serve` process on a free port
//! with a temporary data directory ([`Server`]), a blocking HTTP client ([`Resp`] from
//! [`Server::call`]), a minimal raw HTTP/1.1 connection for byte-exact requests and the
//! benchmark ([`RawConn`]), and the example components ([`function_wasm`]).
//!
//! The `sluice` binary is taken from `SLUICE_BIN` (`cargo xtask test` sets it to the
//! one its own test build made), or built once per test process with the same cargo
//! profile as the test itself (`cargo build -p sluice-runtime --bin sluice`: other
//! features than the workspace's test build, so a rebuild of most dependencies).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub mod attacks;
pub mod crash_loop;
pub mod fixtures;
pub mod fleet;
pub mod hostile;
pub mod minilm;
pub mod postgres;
pub mod resident;
pub mod skip;
pub mod smollm2;
pub mod sse;
pub mod wakeup;

/// The admin key every test server starts with.
pub const ADMIN_KEY: &str = "test-admin-key-0123456789";

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// The bytes of an example function built by `cargo xtask build-functions`.
pub fn function_wasm(name: &str) -> Vec<u8> {
    let path = repo_root().join("functions/target/wasm32-wasip2/release").join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask build-functions` first", path.display()))
}

/// The `sluice` binary, built on first use with this process's cargo profile.
pub fn sluice_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("SLUICE_BIN") {
            return PathBuf::from(bin);
        }
        let exe = std::env::current_exe().expect("current exe");
        let mut profile_dir = exe.parent().expect("exe dir").to_path_buf();
        if profile_dir.ends_with("deps") {
            profile_dir.pop();
        }
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let target_dir = profile_dir.parent().expect("target dir");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "sluice-runtime", "--bin", "sluice", "--target-dir"])
            .arg(target_dir)
            .current_dir(repo_root());
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("running cargo build for the sluice binary");
        assert!(status.success(), "building the sluice binary failed");
        profile_dir.join(format!("sluice{}", std::env::consts::EXE_SUFFIX))
    })
}

/// Times [`Server::start_with`] tries before it gives up on ports taken by others.
pub const PORT_ATTEMPTS: usize = 5;

/// What the server's log says when a port it was given is taken.
const ADDRESS_IN_USE: &str = "Address already in use";

/// A free TCP port on localhost (free now: another process may take it before it is used).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("binding a free port").port()
}

/// A response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Resp {
    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("status {}: body is not JSON ({e}): {}", self.status, String::from_utf8_lossy(&self.body))
        })
    }

    /// Asserts the status and returns the JSON body.
    #[track_caller]
    pub fn expect(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "unexpected status; body: {}", String::from_utf8_lossy(&self.body));
        if self.body.is_empty() { Value::Null } else { self.json() }
    }

    /// Asserts an error response: status, JSON body with a message, and the code.
    #[track_caller]
    pub fn expect_error(&self, status: u16, code: &str) -> String {
        let v = self.expect(status);
        assert_eq!(v["code"], code, "wrong error code in {v}");
        let msg = v["error"].as_str().unwrap_or_else(|| panic!("no error message in {v}"));
        assert!(!msg.is_empty());
        msg.to_owned()
    }
}

/// Options of a test server.
#[derive(Default, Clone)]
pub struct ServerOptions {
    /// Reuse this data directory (for restarts); a fresh temporary one otherwise.
    pub data_dir: Option<PathBuf>,
    /// Extra `sluice serve` arguments.
    pub args: Vec<String>,
    /// Start without `SLUICE_ADMIN_KEY`, so the server generates (and prints) one.
    pub generate_admin_key: bool,
    /// Listen on this HTTP address (`127.0.0.1:port`), e.g. to restart a server where a
    /// proxy expects it; a free port otherwise.
    pub addr: Option<String>,
}

/// A running `sluice serve`; killed on drop.
pub struct Server {
    child: Child,
    pub url: String,
    /// `host:port` of the gRPC endpoint.
    pub grpc_addr: String,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    pub stdout_path: PathBuf,
    _temp: Option<tempfile::TempDir>,
    agent: ureq::Agent,
}

impl Server {
    /// A fresh server with a temporary data directory.
    pub fn start() -> Server {
        Server::start_with(ServerOptions::default())
    }

    /// A server with options; waits until `/v2/health/ready` answers 200.
    ///
    /// Its ports are picked free just before it starts, so another process may take one
    /// first (tests run in parallel, each starting servers): a server that exits because
    /// its address is in use is started again on other ports, up to [`PORT_ATTEMPTS`]
    /// times.
    pub fn start_with(opts: ServerOptions) -> Server {
        let mut attempt = 1;
        loop {
            match Server::try_start(opts.clone()) {
                Ok(server) => return server,
                Err(log) if attempt < PORT_ATTEMPTS && log.contains(ADDRESS_IN_USE) => attempt += 1,
                Err(log) => panic!("sluice serve exited before it was ready (attempt {attempt}); log:\n{log}"),
            }
        }
    }

    /// Starts a server; `Err` with its log if it exited before it was ready.
    fn try_start(opts: ServerOptions) -> Result<Server, String> {
        let (temp, data_dir) = match opts.data_dir {
            Some(d) => (None, d),
            None => {
                let t = tempfile::tempdir().expect("temp dir");
                let d = t.path().join("data");
                (Some(t), d)
            }
        };
        let port = match &opts.addr {
            Some(addr) => addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).expect("addr is host:port"),
            None => free_port(),
        };
        let log_path = data_dir.with_extension(format!("{port}.log"));
        let stdout_path = data_dir.with_extension(format!("{port}.out"));
        std::fs::create_dir_all(data_dir.parent().expect("parent")).expect("creating the data dir's parent");
        let mut cmd = Command::new(sluice_bin());
        let grpc_addr = format!("127.0.0.1:{}", free_port());
        cmd.arg("serve").args(["--addr", &format!("127.0.0.1:{port}"), "--grpc-listen", &grpc_addr, "--data-dir"]);
        cmd.arg(&data_dir).args(&opts.args);
        // A test reads its own writes: a status computed after its request arrived, not
        // the device's snapshot of up to 100 ms ago (tests of the sharing set their own).
        if !opts.args.iter().any(|a| a == "--status-interval-ms") {
            cmd.args(["--status-interval-ms", "0"]);
        }
        if opts.generate_admin_key {
            cmd.env_remove("SLUICE_ADMIN_KEY");
        } else {
            cmd.env("SLUICE_ADMIN_KEY", ADMIN_KEY);
        }
        let child = cmd
            .env("SLUICE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
            .stderr(std::fs::File::create(&log_path).expect("log file"))
            .spawn()
            .expect("starting sluice serve");
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build();
        let mut server = Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
            grpc_addr,
            data_dir,
            log_path,
            stdout_path,
            _temp: temp,
            agent: ureq::Agent::new_with_config(config),
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Waits until the server answers ready; `Err` with its log if it exits first.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Err(format!("(exited with {status})\n{}", self.log()));
            }
            if let Ok(r) = self.try_call("GET", "/v2/health/ready", None, None)
                && r.status == 200
            {
                return Ok(());
            }
            assert!(Instant::now() < deadline, "sluice serve not ready after 120 s; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The server's log (stderr) so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// What the server printed on stdout so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    /// `host:port`.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// Sends a request; `body` is `(content type, bytes)`.
    pub fn try_call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<Resp, ureq::Error> {
        let mut b = ureq::http::Request::builder().method(method).uri(format!("{}{path}", self.url));
        if let Some(k) = key {
            b = b.header("authorization", format!("Bearer {k}"));
        }
        let mut r = match body {
            Some((ct, bytes)) => self.agent.run(b.header("content-type", ct).body(bytes).expect("request")),
            None => self.agent.run(b.body(()).expect("request")),
        }?;
        let headers =
            r.headers().iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())).collect();
        let status = r.status().as_u16();
        let body = r.body_mut().with_config().limit(1 << 30).read_to_vec()?;
        Ok(Resp { status, headers, body })
    }

    /// Like [`Server::try_call`], panicking on transport errors.
    pub fn call(&self, method: &str, path: &str, key: Option<&str>, body: Option<(&str, Vec<u8>)>) -> Resp {
        self.try_call(method, path, key, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn get(&self, path: &str, key: &str) -> Resp {
        self.call("GET", path, Some(key), None)
    }

    pub fn delete(&self, path: &str, key: &str) -> Resp {
        self.call("DELETE", path, Some(key), None)
    }

    pub fn post_json(&self, path: &str, key: &str, body: &Value) -> Resp {
        self.call("POST", path, Some(key), Some(("application/json", serde_json::to_vec(body).expect("json"))))
    }

    pub fn put_bytes(&self, path: &str, key: &str, bytes: Vec<u8>) -> Resp {
        self.call("PUT", path, Some(key), Some(("application/wasm", bytes)))
    }

    /// Creates a tenant with the admin key and returns its first API key.
    pub fn create_tenant(&self, id: &str) -> String {
        let v = self.post_json("/v1/tenants", ADMIN_KEY, &json!({ "id": id })).expect(201);
        v["key"].as_str().expect("a key").to_owned()
    }

    /// Deploys an example function under `name` (query string `query`, may be empty).
    pub fn deploy(&self, key: &str, name: &str, function: &str, query: &str) -> Value {
        let q = if query.is_empty() { String::new() } else { format!("?{query}") };
        self.put_bytes(&format!("/v1/functions/{name}{q}"), key, function_wasm(function)).expect(201)
    }

    /// `GET /v1/status` with `key`. A tenant's status calls are rate limited (429
    /// `status_rate_limit`, `--status-rate-per-s`): a refused call is made again after
    /// its `Retry-After`.
    pub fn status(&self, key: &str) -> Value {
        loop {
            let r = self.get("/v1/status", key);
            if r.status != 429 {
                return r.expect(200);
            }
            let wait = r.headers.get("retry-after").and_then(|s| s.parse().ok()).unwrap_or(1);
            std::thread::sleep(Duration::from_secs(wait));
        }
    }

    /// Polls `GET /v1/status` with `key` until `done` holds and returns that status. The
    /// bound (120 s) only keeps a test that would hang from hanging; it says nothing
    /// about how fast the server is.
    pub fn wait_for_status(&self, key: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let status = self.status(key);
            if done(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{what} never happened: {status}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process with SIGKILL (no shutdown, no flush) and waits for it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM (graceful shutdown).
    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill -TERM");
        assert!(status.success());
    }

    /// Waits for the process to exit, up to `timeout`; returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s.code();
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An OIP request with one FP32 tensor `x` of `data`.
pub fn fp32_request(data: &[f32]) -> Value {
    json!({ "inputs": [{ "name": "x", "shape": [data.len()], "datatype": "FP32", "data": data }] })
}

/// A `misbehave` request in `mode`.
pub fn misbehave_request(mode: &str) -> Value {
    json!({ "inputs": [{ "name": "mode", "shape": [1], "datatype": "BYTES", "data": [mode] }] })
}

/// One keep-alive HTTP/1.1 connection speaking just enough of the protocol for
/// byte-exact requests and low-overhead benchmarking.
pub struct RawConn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl RawConn {
    pub fn connect(addr: &str) -> std::io::Result<RawConn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(RawConn { reader: BufReader::new(stream.try_clone()?), writer: stream })
    }

    /// Writes raw bytes (a request or part of one).
    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)
    }

    /// Sends a JSON request and reads the response.
    pub fn request(&mut self, method: &str, path: &str, key: &str, body: &[u8]) -> std::io::Result<Resp> {
        self.request_typed(method, path, key, "application/json", body)
    }

    /// Sends a request with a body of `content_type` and reads the response.
    pub fn request_typed(
        &mut self,
        method: &str,
        path: &str,
        key: &str,
        content_type: &str,
        body: &[u8],
    ) -> std::io::Result<Resp> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: sluice\r\nauthorization: Bearer {key}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let mut msg = head.into_bytes();
        msg.extend_from_slice(body);
        self.writer.write_all(&msg)?;
        self.read_response()
    }

    /// Whether response bytes arrive within `wait` (without reading them), for a client
    /// that keeps sending until the server answers.
    pub fn response_ready(&mut self, wait: Duration) -> std::io::Result<bool> {
        let stream = self.reader.get_ref();
        stream.set_read_timeout(Some(wait))?;
        let ready = match self.reader.fill_buf() {
            Ok(buf) => Ok(!buf.is_empty()),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => Ok(false),
            Err(e) => Err(e),
        };
        self.reader.get_ref().set_read_timeout(Some(Duration::from_secs(60)))?;
        ready
    }

    /// Reads one response (content-length framed).
    pub fn read_response(&mut self) -> std::io::Result<Resp> {
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status =
            line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad status line {line:?}"))
            })?;
        let mut headers = HashMap::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body)?;
        Ok(Resp { status, headers, body })
    }
}
