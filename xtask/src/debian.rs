//! System tools the tests run for real, from Debian's packages: installed with apt-get
//! when missing and this is root, never downloaded by a test tool of its own.
//!
//! [`ensure`] installs (refreshing the package lists once if the first try fails);
//! [`ensure_for_tests`] makes a failure a warning, so the tests needing the tool skip
//! saying why, unless `CI=true` or the tool's own `SLUICE_REQUIRE_*` variable is `1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd;

/// A tool from Debian's packages.
pub struct Tool {
    /// What it is, for messages ("haproxy").
    pub what: &'static str,
    /// The packages that provide it.
    pub packages: &'static [&'static str],
    /// The files that must exist once it is installed; the first is its path.
    pub files: &'static [&'static str],
    /// The variable that makes its absence an error in `cargo xtask test`.
    pub require_var: &'static str,
}

/// Debian's haproxy, for the fleet's tests (`tests/tests/fleet.rs`).
pub const HAPROXY: Tool = Tool {
    what: "haproxy",
    packages: &["haproxy"],
    files: &["/usr/sbin/haproxy"],
    require_var: "SLUICE_REQUIRE_HAPROXY",
};

/// The variable that names haproxy to the tests.
pub const HAPROXY_VAR: &str = "SLUICE_HAPROXY";

/// The path of `tool`, installing its packages first if a file is missing.
pub fn ensure(tool: &Tool) -> Result<PathBuf> {
    if let Some(path) = installed(tool) {
        return Ok(path);
    }
    let root = cmd::output(Command::new("id").arg("-u")).map(|uid| uid.trim() == "0").unwrap_or(false);
    if !root {
        bail!(
            "{} is not installed and this is not root: `sudo apt-get install {}`",
            tool.what,
            tool.packages.join(" ")
        );
    }
    let install = || {
        cmd::run(
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends"])
                .args(tool.packages)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    if install().is_err() {
        // A fresh machine's package lists may be missing or stale.
        cmd::run(Command::new("apt-get").arg("update")).context("apt-get update")?;
        install().with_context(|| format!("installing {}", tool.packages.join(" ")))?;
    }
    installed(tool).with_context(|| format!("apt-get installed {}, but {:?} are not there", tool.what, tool.files))
}

fn installed(tool: &Tool) -> Option<PathBuf> {
    tool.files.iter().all(|f| Path::new(f).is_file()).then(|| PathBuf::from(tool.files[0]))
}

/// [`ensure`] for `cargo xtask test`: a failure is a warning (the tests needing the tool
/// then skip, saying why) unless `CI=true` or the tool's `SLUICE_REQUIRE_*` is `1`.
pub fn ensure_for_tests(tool: &Tool) -> Result<Option<PathBuf>> {
    match ensure(tool) {
        Ok(path) => Ok(Some(path)),
        Err(e) if !required(tool) => {
            eprintln!("xtask: warning: no {} for the tests ({e:#}); they will skip", tool.what);
            Ok(None)
        }
        Err(e) => Err(e.context(format!("{}=1 or CI=true", tool.require_var))),
    }
}

fn required(tool: &Tool) -> bool {
    std::env::var(tool.require_var).as_deref() == Ok("1") || std::env::var("CI").as_deref() == Ok("true")
}
