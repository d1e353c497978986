//! PostgreSQL for the registry's and the fleet's tests: `cargo xtask test` installs
//! Debian's `postgresql` when it is missing (as [`debian`] does haproxy), finds the
//! server's binaries (`/usr/lib/postgresql/<version>/bin`, the newest holding `initdb`)
//! and hands their directory to the tests as `SLUICE_PG_BIN`; each test then starts a
//! throw-away server of its own (`tests/src/postgres.rs`). Without them the
//! PostgreSQL tests skip, saying why, and the run's summary counts them.

use std::path::PathBuf;

use anyhow::{Result, bail};

use crate::debian::{self, Tool};

/// Where the tests find PostgreSQL's binaries.
pub const BIN_VAR: &str = "SLUICE_PG_BIN";

/// Debian's PostgreSQL server (`postgresql-common`'s wrapper marks it installed; the
/// server's own binaries are under a versioned directory, found by [`server_bin`]).
const POSTGRESQL: Tool = Tool {
    what: "PostgreSQL",
    packages: &["postgresql"],
    files: &["/usr/bin/pg_ctlcluster"],
    require_var: "SLUICE_REQUIRE_POSTGRES",
};

/// The server's binaries for `cargo xtask test`, installing them if needed; a failure
/// is a warning (the tests skip) unless `CI=true` or `SLUICE_REQUIRE_POSTGRES=1`.
pub fn ensure_for_tests() -> Result<Option<PathBuf>> {
    if let Some(bin) = server_bin() {
        return Ok(Some(bin));
    }
    if debian::ensure_for_tests(&POSTGRESQL)?.is_none() {
        return Ok(None);
    }
    match server_bin() {
        Some(bin) => Ok(Some(bin)),
        None => bail!("apt-get installed postgresql, but no /usr/lib/postgresql/*/bin/initdb is there"),
    }
}

/// The newest `/usr/lib/postgresql/*/bin` holding `initdb`.
fn server_bin() -> Option<PathBuf> {
    std::fs::read_dir("/usr/lib/postgresql").ok().and_then(|entries| {
        entries
            .filter_map(|e| {
                let e = e.ok()?;
                let version: u32 = e.file_name().to_str()?.parse().ok()?;
                let bin = e.path().join("bin");
                bin.join("initdb").is_file().then_some((version, bin))
            })
            .max()
            .map(|(_, bin)| bin)
    })
}
