//! `cargo xtask soak`: the hostile-load suite, long form (minutes; not part of `test`).
//!
//! Builds the guest components, then runs `sluice-tests`'s `soak` binary in release
//! mode: a latency-class victim beside flooding, looping, memory-hungry, quota-breaking
//! and trapping tenants and tenants that attack what the host shares besides the device
//! (a GGUF bomb, slow uploads, hoarded instance slots, an old version hammered, status
//! and feed floods, a disk filler; `tests/src/attacks.rs`), first with as many clients
//! as their admission limits let run (88) and then with more (`--clients`, the rest
//! refused), then SIGKILL during deploys and uploads in a loop (see
//! `tests/src/hostile.rs`). Extra arguments go to the binary (`--seconds S`,
//! `--clients C`, `--kills K`, `--tenants flood,looper,…`, `--generator idle` for hostile
//! clients in the idle class, as if on other machines). Its short form runs in `cargo xtask
//! test` (`tests/tests/hostile.rs`). Figures are recorded by hand in `bench/RESULTS.md`.

use anyhow::Result;

use crate::{build_functions, cmd};

pub fn run(args: &[String]) -> Result<()> {
    build_functions::run(&[])?;
    cmd::run(
        cmd::cargo()
            .current_dir(cmd::repo_root())
            .args(["run", "--release", "-p", "sluice-tests", "--bin", "soak", "--"])
            .args(args),
    )
}
