//! `cargo xtask fetch-nvrtc`: NVRTC 13.0 for the CUDA kernel compile tests, which need
//! no GPU (`runtime/backend/cuda/tests/nvrtc_compile.rs`).
//!
//! Runs `scripts/fetch-nvrtc.sh`, which downloads the PyPI wheel
//! `nvidia-cuda-nvrtc==13.0.88` with pip, checks its sha256 and installs its libraries
//! outside the repository (`$SLUICE_NVRTC_DIR/lib`, default
//! `~/.cache/sluice/nvrtc-13.0.88/lib`). A second run is instant and offline.
//!
//! cudarc opens `libnvrtc` by name through the dynamic loader (no path override), and
//! libnvrtc opens its builtins library by name as well, so the test processes get the
//! directory first on `LD_LIBRARY_PATH` ([`ld_library_path`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};

use crate::cmd;

/// Fetches (or finds) NVRTC and returns the directory holding `libnvrtc.so.13`.
pub fn fetch() -> Result<PathBuf> {
    let script = cmd::repo_root().join("scripts/fetch-nvrtc.sh");
    let dir = cmd::output(Command::new("bash").arg(&script).stderr(std::process::Stdio::inherit()))?;
    let dir = PathBuf::from(dir.trim());
    if !dir.join("libnvrtc.so.13").is_file() {
        bail!("{} did not leave libnvrtc.so.13 in {}", script.display(), dir.display());
    }
    Ok(dir)
}

/// `LD_LIBRARY_PATH` with `lib` first, ahead of the current value (empty entries, which
/// the loader would read as the working directory, are dropped).
pub fn ld_library_path(lib: &Path) -> Result<OsString> {
    let current = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    let rest = std::env::split_paths(&current).filter(|p| !p.as_os_str().is_empty());
    Ok(std::env::join_paths(std::iter::once(lib.to_path_buf()).chain(rest))?)
}

pub fn run(args: &[String]) -> Result<()> {
    if !args.is_empty() {
        bail!("fetch-nvrtc takes no arguments");
    }
    println!("{}", fetch()?.display());
    Ok(())
}
