//! `cargo xtask test`: every check and every test of the project, from a fresh machine.
//!
//! Set-up first (the wasm target, the guest components — Rust, Python with componentize-py
//! from a cached venv, JavaScript with componentize-js from a cached `npm ci`, which needs
//! the machine's Node.js 20 and npm: [`build_functions`] —, the MiniLM and SmolLM2 models, NVRTC,
//! the Python clients' environment and the SmolLM2 reference's: [`clients_venv`], Chromium for the console's browser
//! tests: [`browser`], haproxy and PostgreSQL for the fleet's and the registry's tests:
//! [`debian`], [`postgres`], the MNIST demo's model:
//! [`fetch_model::fetch_mnist`]), then the
//! lint steps of `cargo xtask lint` (rustfmt, module cycles, unused dependencies, the
//! OpenAPI spec, clippy, rustdoc), then the host workspace's tests, the CUDA backend's
//! tests on the fake CUDA libraries (`cargo xtask test-cuda-fake`), the doc tests, a
//! type-check of the benchmarks, and the guest workspace's native tests (the guest
//! SDK's unit tests, the tokenizer and the MiniLM model code) and the Python guest SDK's
//! unit tests. Extra arguments go to the
//! host `cargo test`. Each step prints a progress line and its time; a failing step
//! does not stop the others, and the table at the end says which failed.
//!
//! Skipped tests are counted: the tests append a line to the file named by
//! `SLUICE_SKIP_LOG` for each skip (`tests/src/skip.rs`), and the run ends with one line
//! per class of skipped tests and its reason ([`skips`]).
//!
//! The host tests get NVRTC's directory first on `LD_LIBRARY_PATH` and
//! `SLUICE_REQUIRE_NVRTC=1`, so the CUDA kernel compile test fails rather than skips
//! when the fetched library cannot be used. If NVRTC cannot be fetched (offline, not
//! x86_64 Linux) that is a warning and the test skips saying why, unless
//! `SLUICE_REQUIRE_NVRTC=1` is already set, which makes it an error.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::steps::Steps;
use crate::{
    browser, build_functions, clients_venv, cmd, debian, fake_cuda, fetch_llm, fetch_model, fetch_nvrtc, host_tests,
    lint, postgres, python_functions, skips,
};

/// The test steps after the lint steps.
const TEST_STEPS: usize = 6;

pub fn run(args: &[String]) -> Result<()> {
    build_functions::run(&[])?;
    let model_dir = fetch_model::fetch()?;
    let llm_dir = fetch_llm::fetch()?;
    let nvrtc_lib = nvrtc()?;
    let clients_python = clients_venv::ensure_for_tests()?;
    let llm_python = clients_venv::ensure_llm_for_tests()?;
    let browser = browser::ensure_for_tests()?;
    let haproxy = debian::ensure_for_tests(&debian::HAPROXY)?;
    let mnist = fetch_model::fetch_mnist_for_tests()?;
    let postgres_bin = postgres::ensure_for_tests()?;
    let root = cmd::repo_root();
    let skip_log = fresh_skip_log(&root)?;

    let mut steps = Steps::new(lint::STEP_COUNT + TEST_STEPS);
    lint::add_steps(&mut steps);
    steps.run("tests: host workspace", || {
        let mut host = cmd::cargo();
        host.current_dir(&root)
            // Benchmarks are programs that print figures (harness = false): they are
            // type-checked below, not run as tests.
            .args(["test", "--no-fail-fast"])
            .args(host_tests::TARGETS)
            .args(args)
            // The `sluice` this build makes, not one built by the tests themselves
            // with other features (a rebuild of most dependencies: host_tests.rs).
            .env("SLUICE_BIN", host_tests::sluice_bin())
            .env("SLUICE_MODEL_DIR", &model_dir)
            .env(fetch_llm::DIR_VAR, &llm_dir)
            .env("SLUICE_SKIP_LOG", &skip_log);
        if let Some(python) = &clients_python {
            host.env(clients_venv::PYTHON_VAR, python);
        }
        if let Some(python) = &llm_python {
            host.env(clients_venv::LLM_PYTHON_VAR, python);
        }
        if let Some(browser) = &browser {
            browser.apply(&mut host);
        }
        if let Some(dir) = &mnist {
            host.env(fetch_model::MNIST_VAR, dir);
        }
        if let Some(path) = &haproxy {
            host.env(debian::HAPROXY_VAR, path);
        }
        if let Some(bin) = &postgres_bin {
            host.env(postgres::BIN_VAR, bin);
        }
        if let Some(lib) = &nvrtc_lib {
            host.env("LD_LIBRARY_PATH", fetch_nvrtc::ld_library_path(lib)?).env("SLUICE_REQUIRE_NVRTC", "1");
        }
        cmd::run(&mut host)
    });
    // The real CUDA backend, through unmodified cudarc, on the fake CUDA libraries
    // (fakecuda/), under both fiber schedules, then `sluice serve --device cuda`.
    steps.run("tests: CUDA backend on the fake CUDA driver (two schedules, serve smoke test)", || fake_cuda::run(&[]));
    steps.run("doc tests: host workspace", || {
        cmd::run(cmd::cargo().current_dir(&root).args(["test", "--workspace", "--doc"]))
    });
    steps.run("benchmarks type-check: host workspace", || {
        cmd::run(cmd::cargo().current_dir(&root).args(["check", "--workspace", "--benches"]))
    });
    // The guest workspace's pure-Rust crates and the guest SDK's unit tests run natively.
    steps.run("native tests: guest workspace (sluice-guest, bert-tokenizer, minilm-embed)", || {
        cmd::run(
            lint::guest_cargo(&root.join("functions"))
                .args(["test", "--release", "-p", "sluice-guest", "-p", "bert-tokenizer", "-p", "minilm-embed"])
                .env("SLUICE_MODEL_DIR", &model_dir)
                .env("SLUICE_SKIP_LOG", &skip_log),
        )
    });
    // The Python guest SDK's pure logic, natively, in the build tool's environment
    // (its bindings are generated by that componentize-py).
    steps.run("native tests: the Python guest SDK (guest-sdk/python/tests)", || {
        let python = clients_venv::ensure_venv("componentize-py", python_functions::REQUIREMENTS)?;
        cmd::run(std::process::Command::new(python).current_dir(&root).args([
            "-m",
            "unittest",
            "discover",
            "-s",
            "guest-sdk/python/tests",
        ]))
    });
    if let Err(e) = skips::summarize(&skip_log) {
        eprintln!("xtask: warning: no summary of skipped tests: {e:#}");
    }
    steps.finish("test")?;
    eprintln!("xtask: all checks and tests passed");
    Ok(())
}

/// An empty skip log in `target/` for this run.
fn fresh_skip_log(root: &Path) -> Result<PathBuf> {
    let path = root.join("target/skipped-tests.tsv");
    std::fs::create_dir_all(root.join("target"))?;
    std::fs::write(&path, "").with_context(|| format!("creating {}", path.display()))?;
    Ok(path)
}

/// NVRTC's lib directory, or `None` (after a warning) when it cannot be fetched and
/// `SLUICE_REQUIRE_NVRTC=1` is not set.
fn nvrtc() -> Result<Option<PathBuf>> {
    match fetch_nvrtc::fetch() {
        Ok(lib) => Ok(Some(lib)),
        Err(e) if std::env::var("SLUICE_REQUIRE_NVRTC").as_deref() == Ok("1") => {
            Err(e.context("SLUICE_REQUIRE_NVRTC=1 but NVRTC could not be fetched"))
        }
        Err(e) => {
            eprintln!(
                "xtask: warning: NVRTC could not be fetched, so the CUDA kernel compile tests will skip \
                 (`cargo xtask fetch-nvrtc` retries; SLUICE_REQUIRE_NVRTC=1 makes this an error): {e:#}"
            );
            Ok(None)
        }
    }
}
