//! Crash test: an acknowledged deploy survives SIGKILL.
//!
//! The test re-executes its own binary as a child (selected by an environment variable)
//! that deploys in a loop and prints a line after each `deploy` returns. The parent kills
//! the child with SIGKILL as soon as it has read a few acknowledgements, while the child
//! is in the middle of further deploys, then reopens the data directory and checks that
//! every acknowledged version is there, readable and intact.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use sluice_registry::{FunctionOptions, Registry, TenantSettings};

const CHILD_ENV: &str = "SLUICE_REGISTRY_CRASH_CHILD_DIR";
const ACKS_BEFORE_KILL: u32 = 5;

/// The child's body; a no-op when run as an ordinary test.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let reg = Registry::open(&dir).unwrap();
    reg.create_tenant("acme", TenantSettings::default()).unwrap();
    for i in 1u32.. {
        let component = format!("component {i} ").repeat(10_000);
        let v = reg.deploy("acme", "f", component.as_bytes(), FunctionOptions::default()).unwrap();
        // Acknowledge exactly like the HTTP layer would: after deploy returned.
        println!("ACK {}", v.version);
    }
}

#[test]
fn acknowledged_deploy_survives_sigkill() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut acked = 0;
    for line in stdout.lines() {
        let line = line.unwrap();
        if let Some(v) = line.strip_prefix("ACK ") {
            acked = v.parse().unwrap();
            if acked >= ACKS_BEFORE_KILL {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    assert_eq!(acked, ACKS_BEFORE_KILL, "child stopped early");

    let reg = Registry::open(dir.path()).expect("reopen after kill -9");
    let record = reg.get_function("acme", "f").unwrap();
    assert!(record.latest().version >= acked, "acked {acked}, found {}", record.latest().version);
    for v in &record.versions {
        let bytes = reg.read_blob(&v.component.digest).unwrap();
        assert_eq!(bytes, format!("component {} ", v.version).repeat(10_000).as_bytes());
    }
    // Whatever the kill interrupted is at most an unreferenced blob or temp file.
    reg.gc().unwrap();
    let next = reg.deploy("acme", "f", b"after", FunctionOptions::default()).unwrap();
    assert_eq!(next.version, record.latest().version + 1);
}
