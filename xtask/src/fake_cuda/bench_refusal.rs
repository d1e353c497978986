//! `bench/gpu/run.sh` refuses the fake CUDA device (issue 11): run with
//! `SLUICE_FAKE_CUDA=1`, or with only the fake `libcuda` (device "sluice CPU emulator")
//! first on `LD_LIBRARY_PATH`, it must exit with status 3 and a message naming the
//! emulator before it runs or writes anything, so no GPU result is ever taken from it.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd;

/// Exit status of `run.sh` on the emulator.
const REFUSED: i32 = 3;

/// Runs `bench/gpu/run.sh` both ways it can meet the emulator and checks each refusal.
pub fn check() -> Result<()> {
    let lib = super::lib_dir();
    let ways: [(&str, Vec<(&str, String)>); 2] = [
        ("SLUICE_FAKE_CUDA=1", vec![("SLUICE_FAKE_CUDA", "1".into())]),
        ("the fake libcuda first on LD_LIBRARY_PATH", vec![("LD_LIBRARY_PATH", lib.display().to_string())]),
    ];
    for (what, env) in ways {
        let out_dir = super::out_dir().join("bench-refusal");
        let _ = std::fs::remove_dir_all(&out_dir);
        let mut c = Command::new("bash");
        c.current_dir(cmd::repo_root())
            .arg("bench/gpu/run.sh")
            .env_remove("SLUICE_FAKE_CUDA")
            .env_remove("LD_LIBRARY_PATH")
            .env("OUT", &out_dir)
            .env("RUN_BUDGET", "30");
        for (k, v) in &env {
            c.env(k, v);
        }
        let out = c.output().context("could not start bash bench/gpu/run.sh")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        refused(what, out.status.code(), &stderr, &out_dir)?;
    }
    eprintln!("xtask: bench/gpu/run.sh refuses the emulator (SLUICE_FAKE_CUDA=1 and the fake libcuda): ok");
    Ok(())
}

/// Whether one run was the refusal: status 3, the message, nothing written.
fn refused(what: &str, code: Option<i32>, stderr: &str, out_dir: &Path) -> Result<()> {
    if code != Some(REFUSED) || !stderr.contains("refusing to run on the CUDA emulator") {
        bail!("bench/gpu/run.sh with {what}: expected the refusal (exit {REFUSED}), got {code:?}:\n{stderr}");
    }
    if out_dir.exists() {
        bail!("bench/gpu/run.sh with {what} refused but wrote {} first", out_dir.display());
    }
    Ok(())
}
