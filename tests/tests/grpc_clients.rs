//! The standard gRPC clients, with their default settings (raw tensor contents), against
//! a real `sluice serve`: `tritonclient.grpc` (`tests/clients/grpc_tritonclient.py`) and
//! KServe's `InferenceGRPCClient` (`tests/clients/grpc_kserve.py`), on `echo` with every
//! datatype (BYTES with empty and non-UTF-8 elements), readiness and metadata, a missing
//! or wrong key (UNAUTHENTICATED), an unknown model (NOT_FOUND), and `minilm-embed`'s
//! embeddings of the 16 reference sentences in one batch (cosine ≥ 0.9999).
//!
//! The interpreter is `SLUICE_CLIENTS_PYTHON` (`cargo xtask test` sets it to the clients'
//! environment, `cargo xtask clients-venv`). Without it the test skips, counted, unless
//! `SLUICE_REQUIRE_CLIENTS=1` makes that a failure. Needs the model (`cargo xtask
//! fetch-model`).

use std::path::PathBuf;
use std::process::Command;

use sluice_tests::fixtures::clients_python;
use sluice_tests::{Server, repo_root};

/// Runs `script` against `server`; returns its `ok:` lines, or panics with its output.
fn run_script(python: &PathBuf, script: &str, server: &Server, key: &str) -> Vec<String> {
    let clients = repo_root().join("tests/clients");
    let out = Command::new(python)
        .arg(clients.join(script))
        .args(["--url", &server.grpc_addr, "--key", key, "--refdata"])
        .arg(repo_root().join("tests/data/minilm_ref_visible.json"))
        .current_dir(&clients)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", python.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{stdout}\n{}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    stdout.lines().filter(|l| l.starts_with("ok: ")).map(str::to_owned).collect()
}

#[test]
fn tritonclient_and_kserve_grpc_clients_work_unchanged() {
    let Some(python) = clients_python() else { return };
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    sluice_tests::minilm::deploy(&server, &key, "minilm-embed", "minilm_embed");

    let triton = run_script(&python, "grpc_tritonclient.py", &server, &key);
    let kserve = run_script(&python, "grpc_kserve.py", &server, &key);
    for line in triton.iter().chain(&kserve) {
        println!("{line}");
    }
    // Every check ran (a script that stopped early without failing would show here).
    assert_eq!(triton.len(), 11, "tritonclient checks: {triton:#?}");
    assert_eq!(kserve.len(), 6, "KServe checks: {kserve:#?}");
    assert!(triton.iter().any(|l| l.contains("FP32, FP16, BF16, INT32, INT64, UINT8, BYTES")), "{triton:#?}");
}
