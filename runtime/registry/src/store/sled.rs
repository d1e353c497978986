//! The sled backend: one sled database in `<data>/db`, one sled tree per [`Tree`], and
//! the schema marker `"schema" → 1` in the default tree (the layout of every earlier
//! build, so existing data directories open unchanged). sled locks the directory, so
//! one process owns it; `flush` after every transaction makes it durable.

use std::path::Path;

use ::sled::Transactional;
use ::sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};

use super::{Entry, Tree, TxError, TxResult};
use crate::error::{RegistryError, Result};

const SCHEMA_KEY: &[u8] = b"schema";
const SCHEMA_VERSION: &[u8] = b"1";

/// How long [`open_sled`] waits for another holder of the lock to let go: sled's
/// flusher thread keeps the file lock for a moment after a `Db` is dropped, and a
/// restarting server may find its predecessor still exiting.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// An open sled database with the registry's trees.
pub(crate) struct SledStore {
    db: ::sled::Db,
    trees: [::sled::Tree; 5],
}

impl SledStore {
    /// Opens (creating) `<data_dir>/db`, checking its schema marker.
    pub(crate) fn open(data_dir: &Path) -> Result<SledStore> {
        let db = open_sled(data_dir)?;
        match db.get(SCHEMA_KEY)? {
            None => {
                db.insert(SCHEMA_KEY, SCHEMA_VERSION)?;
                db.flush()?;
            }
            Some(v) if v.as_ref() == SCHEMA_VERSION => {}
            Some(v) => {
                return Err(RegistryError::SchemaTooNew {
                    found: String::from_utf8_lossy(&v).into_owned(),
                    known: String::from_utf8_lossy(SCHEMA_VERSION).into_owned(),
                });
            }
        }
        let open = |t: Tree| db.open_tree(t.name());
        let trees = [
            open(Tree::Tenants)?,
            open(Tree::Keys)?,
            open(Tree::Functions)?,
            open(Tree::Versions)?,
            open(Tree::Compiled)?,
        ];
        Ok(SledStore { db, trees })
    }

    pub(crate) fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.trees[tree.index()].get(key)?.map(|v| v.to_vec()))
    }

    pub(crate) fn scan(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<Entry>> {
        self.trees[tree.index()]
            .scan_prefix(prefix)
            .map(|item| {
                let (k, v) = item?;
                Ok((k.to_vec(), v.to_vec()))
            })
            .collect()
    }

    /// Runs `f` in one sled transaction over every tree, then flushes.
    pub(crate) fn transaction<T>(&self, f: impl Fn([&TransactionalTree; 5]) -> TxResult<T>) -> Result<T> {
        let [a, b, c, d, e] = &self.trees;
        let out = (a, b, c, d, e).transaction(|(a, b, c, d, e)| {
            f([a, b, c, d, e]).map_err(|e| match e {
                TxError::Abort(e) => ConflictableTransactionError::Abort(e),
                TxError::Sled(e) => e.into(),
                TxError::Pg(e) => ConflictableTransactionError::Abort(RegistryError::storage("sled", e)),
            })
        });
        let out = match out {
            Ok(out) => out,
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(e)) => return Err(e.into()),
        };
        self.db.flush()?;
        Ok(out)
    }

    pub(crate) fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }
}

/// Opens the sled database of `data_dir`, retrying while its lock is held.
fn open_sled(data_dir: &Path) -> Result<::sled::Db> {
    let started = std::time::Instant::now();
    loop {
        match ::sled::Config::new().path(data_dir.join("db")).open() {
            Ok(db) => return Ok(db),
            Err(::sled::Error::Io(ref io)) if io.to_string().contains("could not acquire lock") => {
                if started.elapsed() >= LOCK_WAIT {
                    return Err(RegistryError::InUse { path: data_dir.to_path_buf() });
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(RegistryError::storage(format!("opening sled in {}", data_dir.display()), e)),
        }
    }
}
