//! The standard Open Inference Protocol clients against `sluice serve` over HTTP:
//! `tests/clients/http_clients.py` drives `echo` (every datatype, binary and JSON) and
//! `minilm-embed` (its signature, and embeddings against `tests/data/minilm_ref_visible.json`)
//! with tritonclient.http and KServe's InferenceRESTClient at their default settings.
//!
//! The Python environment is `tests/clients/requirements.txt` installed by `cargo xtask
//! test` (`cargo xtask clients-venv`), named by `SLUICE_CLIENTS_PYTHON`; without it the
//! test skips, saying why. Needs the model (`cargo xtask fetch-model`) like `minilm.rs`.

use std::process::Command;

use sluice_tests::fixtures::clients_python;
use sluice_tests::{Server, repo_root};

#[test]
fn tritonclient_and_kserve_over_http() {
    let Some(python) = clients_python() else { return };
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    sluice_tests::minilm::deploy(&server, &key, "minilm-embed", "minilm_embed");
    // Version 1 of `echo` is the one deployed above: the script asks for it by number.
    let out = Command::new(&python)
        .arg(repo_root().join("tests/clients/http_clients.py"))
        .env("SLUICE_URL", &server.url)
        .env("SLUICE_KEY", &key)
        .env("SLUICE_REFDATA", repo_root().join("tests/data/minilm_ref_visible.json"))
        .output()
        .expect("running the Python clients");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "the clients failed ({}):\n{stdout}\n{stderr}\nserver log:\n{}",
        out.status,
        server.log()
    );
}
