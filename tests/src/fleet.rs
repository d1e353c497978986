//! A fleet on loopback: `sluice serve` nodes behind Debian's haproxy running the shipped
//! configuration (`deploy/fleet/haproxy.cfg`), for the fleet's end-to-end tests.
//!
//! haproxy is found as `SLUICE_HAPROXY` (`cargo xtask test` installs Debian's package and
//! sets it) or `/usr/sbin/haproxy`; without it the tests skip (class "haproxy"), unless
//! `SLUICE_REQUIRE_HAPROXY=1` or `CI=true` makes that a failure.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::skip::skip;
use crate::{free_port, repo_root};

/// The haproxy binary, or `None` after recording the skip.
pub fn haproxy_binary() -> Option<PathBuf> {
    let named = std::env::var_os("SLUICE_HAPROXY").filter(|v| !v.is_empty()).map(PathBuf::from);
    let path = named.unwrap_or_else(|| PathBuf::from("/usr/sbin/haproxy"));
    if path.is_file() {
        return Some(path);
    }
    let reason =
        format!("no haproxy at {} (`apt-get install haproxy`; `cargo xtask test` does it as root)", path.display());
    let required =
        std::env::var("SLUICE_REQUIRE_HAPROXY").as_deref() == Ok("1") || std::env::var("CI").as_deref() == Ok("true");
    assert!(!required, "SLUICE_REQUIRE_HAPROXY=1 or CI=true: {reason}");
    skip("haproxy", &reason);
    None
}

/// haproxy running `deploy/fleet/haproxy.cfg` over three nodes; stopped on drop.
pub struct Haproxy {
    child: Child,
    /// `http://127.0.0.1:<port>` of its frontend.
    pub url: String,
    /// `http://127.0.0.1:<port>` of its statistics page.
    pub stats_url: String,
    log_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    /// Starts `binary` in front of `nodes` (each `host:port`) and waits until its
    /// frontend accepts connections.
    pub fn start(binary: &PathBuf, nodes: [&str; 3]) -> Haproxy {
        let dir = tempfile::tempdir().expect("temp dir");
        let log_path = dir.path().join("haproxy.log");
        let (port, stats_port) = (free_port(), free_port());
        let mut cmd = Command::new(binary);
        cmd.arg("-f").arg(repo_root().join("deploy/fleet/haproxy.cfg")).arg("-db");
        cmd.env("SLUICE_FLEET_BIND", format!("127.0.0.1:{port}"))
            .env("SLUICE_FLEET_STATS_BIND", format!("127.0.0.1:{stats_port}"));
        for (i, node) in nodes.iter().enumerate() {
            cmd.env(format!("SLUICE_NODE{}", i + 1), node);
        }
        let log = std::fs::File::create(&log_path).expect("haproxy log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting haproxy");
        let mut proxy = Haproxy {
            child,
            url: format!("http://127.0.0.1:{port}"),
            stats_url: format!("http://127.0.0.1:{stats_port}/;csv"),
            log_path,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = proxy.child.try_wait().expect("try_wait") {
                panic!("haproxy exited ({status}):\n{}", proxy.log());
            }
            assert!(Instant::now() < deadline, "haproxy does not listen after 60 s:\n{}", proxy.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        proxy
    }

    /// What haproxy logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The health of each server of `backend` as haproxy sees it (`UP`, `DOWN`, …), by
    /// server name, from its statistics page.
    pub fn server_states(&self, backend: &str) -> Vec<(String, String)> {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(30))).build().into();
        let csv = agent
            .get(&self.stats_url)
            .call()
            .and_then(|mut r| r.body_mut().read_to_string())
            .unwrap_or_else(|e| panic!("haproxy's statistics: {e}"));
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap_or_default().trim_start_matches("# ").split(',').collect();
        let column = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} column"));
        let (px, sv, status) = (column("pxname"), column("svname"), column("status"));
        lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| f.get(px) == Some(&backend) && !matches!(f.get(sv), Some(&"FRONTEND" | &"BACKEND")))
            .map(|f| (f[sv].to_owned(), f[status].to_owned()))
            .collect()
    }

    /// Waits until haproxy sees every server of `backend` in `state` (e.g. `UP`).
    pub fn wait_all(&self, backend: &str, state: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let states = self.server_states(backend);
            if !states.is_empty() && states.iter().all(|(_, s)| s == state) {
                return;
            }
            assert!(Instant::now() < deadline, "{backend}: not all {state} after 120 s: {states:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
