//! The OpenAPI check: `docs/openapi.yaml` validated by `openapi-spec-validator` (PyPI),
//! which parses the YAML and checks the document against the OpenAPI 3.1 schema.
//!
//! The validator lives in a Python virtual environment that the xtask creates once,
//! outside the repository: `~/.cache/sluice/venv-openapi-<version>` (or under
//! `$XDG_CACHE_HOME`). `PYTHON` names the interpreter (default `python3`).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd;

/// The validator release the check runs.
const VALIDATOR: &str = "openapi-spec-validator==0.9.0";

/// The spec, relative to the repository root.
const SPEC: &str = "docs/openapi.yaml";

/// Creates the validator's environment if needed, then validates the spec.
pub fn run() -> Result<()> {
    let venv = venv_dir()?;
    let validator = venv.join("bin/openapi-spec-validator");
    if !validator.is_file() {
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        eprintln!("xtask: creating {} with {VALIDATOR} (once)", venv.display());
        cmd::run(Command::new(&python).args(["-m", "venv"]).arg(&venv))?;
        cmd::run(Command::new(venv.join("bin/python")).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            VALIDATOR,
        ]))?;
    }
    // Every error, not just the first (each with the part of the schema it breaks).
    cmd::run(Command::new(&validator).args(["--validation-errors", "all", SPEC]).current_dir(cmd::repo_root()))
}

/// `<cache>/sluice/venv-openapi-<version>`.
fn venv_dir() -> Result<PathBuf> {
    let cache = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cache"),
    };
    let version = VALIDATOR.rsplit("==").next().unwrap_or("latest");
    Ok(cache.join("sluice").join(format!("venv-openapi-{version}")))
}
