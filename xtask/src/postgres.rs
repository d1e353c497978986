//! PostgreSQL for the registry's tests: `cargo xtask test` looks for Debian's server
//! binaries (`/usr/lib/postgresql/<version>/bin/initdb`, the newest) and hands their
//! directory to the tests as `SLUICE_PG_BIN`; each registry test then starts a
//! throw-away server (`runtime/registry/tests/common/pg.rs`). Without them the
//! PostgreSQL tests skip, saying why, and the run's summary counts them.

use std::path::PathBuf;

/// Where the tests find PostgreSQL's binaries.
pub const BIN_VAR: &str = "SLUICE_PG_BIN";

/// The newest `/usr/lib/postgresql/*/bin` holding `initdb`, or a warning and `None`.
pub fn find_for_tests() -> Option<PathBuf> {
    let found = std::fs::read_dir("/usr/lib/postgresql").ok().and_then(|entries| {
        entries
            .filter_map(|e| {
                let e = e.ok()?;
                let version: u32 = e.file_name().to_str()?.parse().ok()?;
                let bin = e.path().join("bin");
                bin.join("initdb").is_file().then_some((version, bin))
            })
            .max()
            .map(|(_, bin)| bin)
    });
    if found.is_none() {
        eprintln!(
            "xtask: warning: PostgreSQL not found (no /usr/lib/postgresql/*/bin/initdb), so the registry's \
             PostgreSQL tests will skip (`apt-get install postgresql` adds it)"
        );
    }
    found
}
