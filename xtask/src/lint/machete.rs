//! The unused-dependency check: `cargo-machete` over the whole repository (the host
//! workspace, `functions/` and `guest-sdk/`), installed by the xtask at a pinned version.
//!
//! cargo-machete reads each crate's sources for the names of its dependencies; a
//! dependency that is really used without being named (a `links` crate, a feature
//! switch) goes in the crate's `[package.metadata.cargo-machete] ignored` list with a
//! comment saying why.

use anyhow::Result;

use crate::cmd;

/// The cargo-machete release the check runs.
const VERSION: &str = "0.9.2";

/// Installs cargo-machete if needed, then checks every manifest under the repository.
pub fn run() -> Result<()> {
    ensure_installed()?;
    cmd::run(cmd::cargo().current_dir(cmd::repo_root()).args(["machete", "--skip-target-dir"]))
}

/// Runs `cargo install cargo-machete --version VERSION --locked` unless that version is there.
fn ensure_installed() -> Result<()> {
    let installed = cmd::output(cmd::cargo().args(["machete", "--version"])).unwrap_or_default();
    if installed.split_whitespace().any(|word| word == VERSION) {
        return Ok(());
    }
    eprintln!(
        "xtask: cargo-machete {VERSION} is not installed (found: {:?}); installing it from crates.io (a minute or two)",
        installed.trim()
    );
    cmd::run(cmd::cargo().args(["install", "cargo-machete", "--version", VERSION, "--locked"]))
}
