//! Helpers shared by the registry's integration tests: an [`Env`] per test, on sled or
//! on PostgreSQL, and [`on_both!`], which runs each listed test on both backends (a
//! PostgreSQL test skips, saying why, where no PostgreSQL is installed; with
//! `SLUICE_REQUIRE_POSTGRES` set it fails instead).

#![allow(dead_code, unused_macros)]

#[path = "../../../../tests/src/postgres.rs"]
pub mod pg;
pub mod proxy;
#[path = "../../../../tests/src/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_registry::{Registry, TenantSettings};

/// Where a test's registry lives.
pub enum Backend {
    /// sled in the test's directory.
    Sled,
    /// A database of the shared test server (blobs in the test's directory).
    Postgres {
        /// The database's URL.
        url: String,
    },
}

/// A test's registry location: a temporary data directory, and a database with PostgreSQL.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub backend: Backend,
}

impl Env {
    pub fn sled() -> Env {
        Env { dir: tempfile::tempdir().unwrap(), backend: Backend::Sled }
    }

    /// A new database, or `None` (the skip recorded) where PostgreSQL cannot run.
    pub fn postgres() -> Option<Env> {
        match pg::new_database() {
            Ok(url) => Some(Env { dir: tempfile::tempdir().unwrap(), backend: Backend::Postgres { url } }),
            Err(reason) => {
                assert!(std::env::var_os("SLUICE_REQUIRE_POSTGRES").is_none(), "PostgreSQL required: {reason}");
                skip::skip("PostgreSQL", &reason);
                None
            }
        }
    }

    /// The data directory (with PostgreSQL, where the blobs go: `<dir>/blobs`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Postgres { .. })
    }

    pub fn url(&self) -> &str {
        match &self.backend {
            Backend::Postgres { url } => url,
            Backend::Sled => panic!("not a PostgreSQL test"),
        }
    }

    /// Opens a registry (another node, with PostgreSQL) with the backend's gc grace
    /// period.
    pub fn open_node(&self) -> Registry {
        match &self.backend {
            Backend::Sled => Registry::open(self.dir()).expect("open registry"),
            Backend::Postgres { url } => Registry::open_url(url, self.dir().join("blobs")).expect("open registry"),
        }
    }

    /// Opens a registry whose gc deletes what is unreferenced at once (sled's
    /// behaviour), so the same assertions hold on both backends.
    pub fn open(&self) -> Registry {
        self.open_node().with_gc_grace(Duration::ZERO)
    }

    pub fn with_tenant(&self, id: &str) -> Registry {
        let reg = self.open();
        reg.create_tenant(id, TenantSettings::default()).unwrap();
        reg
    }

    /// The blob directory.
    pub fn blobs(&self) -> PathBuf {
        self.dir().join("blobs/sha256")
    }

    /// Every byte the registry stored: the data directory's files, and with PostgreSQL
    /// every row of the database.
    pub fn stored_bytes(&self) -> Vec<u8> {
        let mut out = all_bytes(self.dir());
        if let Backend::Postgres { url } = &self.backend {
            let mut client = pg::connect(url).unwrap();
            for row in client.query("SELECT tree, key, value FROM sluice_kv", &[]).unwrap() {
                out.extend(row.get::<_, String>(0).into_bytes());
                out.extend(row.get::<_, Vec<u8>>(1));
                out.extend(row.get::<_, Vec<u8>>(2));
            }
        }
        out
    }
}

/// Runs each named `fn(Env)` as a test on sled (`on_sled::<name>`) and on PostgreSQL
/// (`on_postgres::<name>`).
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod on_sled {
            $(
                #[test]
                fn $name() {
                    super::$name(super::common::Env::sled());
                }
            )*
        }
        mod on_postgres {
            $(
                #[test]
                fn $name() {
                    if let Some(env) = super::common::Env::postgres() {
                        super::$name(env);
                    }
                }
            )*
        }
    };
}

/// Every byte of every file under `dir`.
pub fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(all_bytes(&path));
        } else {
            out.extend(std::fs::read(&path).unwrap());
        }
    }
    out
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
