//! The unused-dependency check: `cargo-machete` over the whole repository (the host
//! workspace, `functions/` and `guest-sdk/`), installed by the xtask at a pinned version.
//!
//! cargo-machete reads each crate's sources for the names of its dependencies; a
//! dependency that is really used without being named (a `links` crate, a feature
//! switch) goes in the crate's `[package.metadata.cargo-machete] ignored` list with a
//! comment saying why.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd;

/// The cargo-machete release the check runs.
const VERSION: &str = "0.9.2";

/// Installs cargo-machete if needed, then checks every manifest under the repository.
pub fn run() -> Result<()> {
    ensure_installed()?;
    cmd::run(machete()?.args(["--skip-target-dir"]).arg(cmd::repo_root()))
}

/// Runs `cargo install cargo-machete --version VERSION --locked` unless that version is there.
fn ensure_installed() -> Result<()> {
    let installed = cmd::output(machete()?.arg("--version")).unwrap_or_default();
    if installed.trim() == VERSION {
        return Ok(());
    }
    eprintln!(
        "xtask: cargo-machete {VERSION} is not installed (found: {:?}); installing it from crates.io (a minute or two)",
        installed.trim()
    );
    cmd::run(cmd::cargo().args(["install", "cargo-machete", "--version", VERSION, "--locked"]))
}

/// The installed `cargo-machete` binary, run directly rather than as `cargo machete`:
/// with `CARGO` set (as it is under `cargo xtask`) it takes its first argument for the
/// subcommand's name, so that variable is removed.
fn machete() -> Result<Command> {
    let cargo_home = match std::env::var_os("CARGO_HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home),
        None => PathBuf::from(std::env::var_os("HOME").context("neither CARGO_HOME nor HOME is set")?).join(".cargo"),
    };
    let mut command = Command::new(cargo_home.join("bin/cargo-machete"));
    command.env_remove("CARGO");
    Ok(command)
}
