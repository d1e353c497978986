//! `cargo xtask test`: every test of the project, from a fresh machine.
//!
//! Set-up first (the wasm target, the guest components, the model, NVRTC), then the
//! host workspace's tests and the guest workspace's native tests (the tokenizer and the
//! MiniLM model code). Extra arguments go to the host `cargo test`.
//!
//! The host tests get NVRTC's directory first on `LD_LIBRARY_PATH` and
//! `SLUICE_REQUIRE_NVRTC=1`, so the CUDA kernel compile test fails rather than skips
//! when the fetched library cannot be used. If NVRTC cannot be fetched (offline, not
//! x86_64 Linux) that is a warning and the test skips saying why, unless
//! `SLUICE_REQUIRE_NVRTC=1` is already set, which makes it an error.

use std::path::PathBuf;

use anyhow::Result;

use crate::{build_functions, cmd, fetch_model, fetch_nvrtc};

pub fn run(args: &[String]) -> Result<()> {
    build_functions::run(&[])?;
    let model_dir = fetch_model::fetch()?;
    let nvrtc_lib = nvrtc()?;
    let root = cmd::repo_root();

    let mut host = cmd::cargo();
    host.current_dir(&root)
        // Benchmarks are programs that print figures (harness = false): they are
        // type-checked below, not run as tests.
        .args(["test", "--workspace", "--no-fail-fast", "--lib", "--bins", "--tests"])
        .args(args)
        .env("SLUICE_MODEL_DIR", &model_dir);
    if let Some(lib) = &nvrtc_lib {
        host.env("LD_LIBRARY_PATH", fetch_nvrtc::ld_library_path(lib)?).env("SLUICE_REQUIRE_NVRTC", "1");
    }
    cmd::run(&mut host)?;
    cmd::run(cmd::cargo().current_dir(&root).args(["test", "--workspace", "--doc"]))?;
    cmd::run(cmd::cargo().current_dir(&root).args(["check", "--workspace", "--benches"]))?;
    // The guest workspace's pure-Rust crates also run natively.
    cmd::run(
        cmd::cargo()
            .current_dir(root.join("functions"))
            .args(["test", "--release", "-p", "bert-tokenizer", "-p", "minilm-embed"])
            .env_remove("CARGO_BUILD_TARGET")
            .env("SLUICE_MODEL_DIR", &model_dir),
    )?;
    eprintln!("xtask: all tests passed");
    Ok(())
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
