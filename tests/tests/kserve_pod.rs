//! `sluice` as KServe's `sluice` ClusterServingRuntime runs it: `tests/kserve/kubelet.py`
//! reads `deploy/kserve/clusterservingruntime.yaml` and starts the `kserve-container`'s
//! command line as a kubelet would (`{{.Name}}` = `echo`, Secrets as files, emptyDir and
//! the storage initializer's read-only model directory as temporary directories, ports
//! mapped to free ones), with a model directory made by KServe's own storage code
//! (`kserve_storage`) from a `sluice bundle` of `echo`: a `file://` directory, a `.tar.gz`
//! and a `.zip` over loopback HTTP, and (`MODEL_INIT_MODE=async`) a directory that lands
//! after the start. Each probes the server with the manifest's probes at their periods,
//! invokes over REST and over gRPC on the HTTP port, and drains under load on SIGTERM:
//! no failed request, readiness 503 before the exit, exit status 0 within the pod's
//! grace period, nothing under the model directory changed.
//!
//! The Python environment is that of the other clients' tests (`SLUICE_CLIENTS_PYTHON`,
//! `tests/clients/requirements.txt`, with PyYAML and kserve-storage); without it the tests
//! skip (class "Python clients"). `SLUICE_KSERVE_RUNTIME` names another manifest to run.
//! The pods run one at a time: the drain's timing is the manifest's probe periods, which
//! a machine busy with other pods would stretch.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use sluice_tests::fixtures::clients_python;
use sluice_tests::{repo_root, sluice_bin};

/// One pod at a time.
static POD: Mutex<()> = Mutex::new(());

/// The runtime manifest: `SLUICE_KSERVE_RUNTIME`, else the repository's.
fn manifest() -> PathBuf {
    let path = std::env::var_os("SLUICE_KSERVE_RUNTIME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("deploy/kserve/clusterservingruntime.yaml"));
    assert!(path.is_file(), "no runtime manifest at {}", path.display());
    path
}

/// Runs `kubelet.py <scenario>` and asserts that every check passed.
fn run_pod(scenario: &str) {
    let Some(python) = clients_python() else { return };
    let _one = POD.lock().unwrap_or_else(|e| e.into_inner());
    let wasm = repo_root().join("functions/target/wasm32-wasip2/release/echo.wasm");
    assert!(wasm.is_file(), "{}: run `cargo xtask build-functions` first", wasm.display());
    let out = Command::new(&python)
        .arg(repo_root().join("tests/kserve/kubelet.py"))
        .arg(scenario)
        .arg("--manifest")
        .arg(manifest())
        .arg("--sluice")
        .arg(sluice_bin())
        .arg("--wasm")
        .arg(&wasm)
        .output()
        .expect("running tests/kserve/kubelet.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "the pod ({scenario}) failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

#[test]
fn pod_with_a_file_uri_model() {
    run_pod("file");
}

#[test]
fn pod_with_a_tar_gz_model_over_http() {
    run_pod("tar.gz");
}

#[test]
fn pod_with_a_zip_model_over_http() {
    run_pod("zip");
}

#[test]
fn pod_whose_model_directory_lands_after_the_start() {
    run_pod("async");
}
