//! The crash loop, run by the hostile-load suite after its load (`tests/hostile.rs`,
//! `cargo xtask soak`): deploys and artifact uploads in a loop, the server killed with
//! SIGKILL in the middle of them, restarted on the same data directory; every deploy or
//! upload that was acknowledged (2xx) must be there after the restart, and no temporary
//! file may be left.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::{ADMIN_KEY, Server, ServerOptions, function_wasm};

/// What [`crash_loop`] checked.
#[derive(Debug, Default)]
pub struct CrashReport {
    /// Server kills (SIGKILL).
    pub kills: usize,
    /// Deploys and uploads acknowledged with a 2xx.
    pub acknowledged: usize,
    /// Acknowledged ones missing after a restart (must be empty).
    pub lost: Vec<String>,
    /// Temporary blob files present after a restart (must be 0).
    pub leftover_temp_files: usize,
}

/// Temporary blob files under `data_dir`.
pub fn temp_files(data_dir: &std::path::Path) -> usize {
    std::fs::read_dir(data_dir.join("blobs/sha256"))
        .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-")).count())
        .unwrap_or(0)
}

/// `iterations` rounds of: start the server on one data directory, deploy and upload
/// (a 4 MiB artifact, so kills land mid-write) from a client thread, SIGKILL after
/// `kill_after`, restart, and check everything acknowledged is there.
pub fn crash_loop(iterations: usize, kill_after: Duration) -> CrashReport {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let opts = ServerOptions { data_dir: Some(data.clone()), ..ServerOptions::default() };
    let mut report = CrashReport::default();
    let first = Server::start_with(opts.clone());
    let key = first.create_tenant("crash");
    // Every version is kept: what the loop checks is durability, not retention (on a
    // fast machine a round acknowledged more versions of one function than the default
    // `keep_versions` keeps, and the pruned ones counted as lost).
    let keep_all = serde_json::to_vec(&json!({ "keep_versions": 1_000_000 })).expect("json");
    first.call("PATCH", "/v1/tenants/crash", Some(ADMIN_KEY), Some(("application/json", keep_all))).expect(200);
    drop(first);
    let wasm = function_wasm("echo");
    let artifact = vec![7u8; 4 << 20];
    // (function, version, artifact name or "" for the component) acknowledged so far.
    let mut acked: Vec<(String, u64, String)> = Vec::new();
    for round in 0..iterations {
        let mut server = Server::start_with(opts.clone());
        let new_acks = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("f{round}-{}", i % 3);
                    let r = server.try_call(
                        "PUT",
                        &format!("/v1/functions/{name}"),
                        Some(&key),
                        Some(("application/wasm", wasm.clone())),
                    );
                    let Ok(r) = r else { return };
                    if r.status / 100 == 2 {
                        new_acks.lock().unwrap().push((
                            name.clone(),
                            r.json()["version"].as_u64().unwrap_or(0),
                            String::new(),
                        ));
                    }
                    let art = format!("w{i}");
                    let path = format!("/v1/functions/{name}/artifacts/{art}");
                    let r =
                        server.try_call("PUT", &path, Some(&key), Some(("application/octet-stream", artifact.clone())));
                    let Ok(r) = r else { return };
                    if r.status / 100 == 2 {
                        new_acks.lock().unwrap().push((name, r.json()["version"].as_u64().unwrap_or(0), art));
                    }
                    i += 1;
                }
            });
            std::thread::sleep(kill_after);
            // Kill while the client is mid-request; the client then sees a broken connection.
            stop.store(true, Ordering::Relaxed);
            let _ = std::process::Command::new("kill").args(["-KILL", &server.pid().to_string()]).status();
        });
        server.kill9(); // reaps it
        report.kills += 1;
        acked.extend(new_acks.into_inner().unwrap());
        let server = Server::start_with(opts.clone());
        report.leftover_temp_files += temp_files(&data);
        for (name, version, art) in &acked {
            let r = server.get(&format!("/v1/functions/{name}"), &key);
            let info = if r.status == 200 { r.json() } else { Value::Null };
            let found =
                info["versions"].as_array().into_iter().flatten().find(|v| v["version"].as_u64() == Some(*version));
            let ok = match found {
                Some(v) => art.is_empty() || v["artifacts"].get(art).is_some(),
                None => false,
            };
            if !ok {
                report.lost.push(format!("{name} v{version} {art}"));
            }
        }
        drop(server);
    }
    report.acknowledged = acked.len();
    report
}
