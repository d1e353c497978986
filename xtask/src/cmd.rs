//! Helpers shared by the commands: where the repository is, and running a child
//! process with a clear error when it fails.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The repository root (the parent of the `xtask` crate).
pub fn repo_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// The cargo that runs us (`$CARGO`), so the same toolchain builds everything.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs `command`, echoing it, and fails unless it exits successfully.
pub fn run(command: &mut Command) -> Result<()> {
    eprintln!("xtask: running {command:?}");
    let status = command.status().with_context(|| format!("could not start {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed with {status}");
    }
    Ok(())
}

/// Runs `command` and returns its standard output; fails unless it exits successfully.
pub fn output(command: &mut Command) -> Result<String> {
    let out = command.output().with_context(|| format!("could not start {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed with {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
