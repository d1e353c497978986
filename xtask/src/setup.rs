//! `cargo xtask setup`: installs what the build needs and a fresh machine lacks —
//! the `wasm32-wasip2` Rust target (through rustup) for the guest functions.

use std::process::Command;

use anyhow::{Result, bail};

use crate::cmd;

/// The Rust target guest functions build for.
pub const WASM_TARGET: &str = "wasm32-wasip2";

/// Runs `setup`; it takes no arguments and is idempotent.
pub fn run(args: &[String]) -> Result<()> {
    if let Some(extra) = args.first() {
        bail!("setup takes no arguments (got `{extra}`)");
    }
    ensure_wasm_target()
}

/// Adds [`WASM_TARGET`] with rustup unless it is already installed.
pub fn ensure_wasm_target() -> Result<()> {
    let installed = cmd::output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if installed.lines().any(|l| l.trim() == WASM_TARGET) {
        return Ok(());
    }
    cmd::run(Command::new("rustup").args(["target", "add", WASM_TARGET]))
}
