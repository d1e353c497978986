//! `cargo xtask test`: every test of the project, from a fresh machine.
//!
//! Set-up first (the wasm target, the guest components, the model), then the host
//! workspace's tests and the guest workspace's native tests (the tokenizer and the
//! MiniLM model code). Extra arguments go to the host `cargo test`.

use anyhow::Result;

use crate::{build_functions, cmd, fetch_model};

pub fn run(args: &[String]) -> Result<()> {
    build_functions::run(&[])?;
    let model_dir = fetch_model::fetch()?;
    let root = cmd::repo_root();

    cmd::run(
        cmd::cargo()
            .current_dir(&root)
            // Benchmarks are programs that print figures (harness = false): they are
            // type-checked below, not run as tests.
            .args(["test", "--workspace", "--no-fail-fast", "--lib", "--bins", "--tests"])
            .args(args)
            .env("SLUICE_MODEL_DIR", &model_dir),
    )?;
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
