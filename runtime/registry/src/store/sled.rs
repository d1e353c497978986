//! The sled backend: one sled database in `<data>/db`, one sled tree per [`Tree`], and
//! the schema marker `"schema" → 1` in the default tree (the layout of every earlier
//! build, so existing data directories open unchanged). sled locks the directory, so
//! one process owns it; `flush` after every transaction makes it durable.
//!
//! A transaction runs under the store's own mutex (one writer at a time): its closure
//! reads the trees (through its own pending writes) and buffers its writes, which are
//! then applied in one sled transaction over every tree, so they land together or not at
//! all. sled's transactions cannot scan, and reading the trees directly inside one would
//! deadlock on sled's global lock, hence the buffering.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use ::sled::Transactional;
use ::sled::transaction::{ConflictableTransactionError, TransactionError};

use super::{Entry, Tree, TxResult};
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
    /// Held by a transaction from its first read to its last write.
    writer: Mutex<()>,
}

/// A transaction's writes not yet applied, per tree: key → value (`None`: removed).
pub(crate) type Pending = RefCell<[BTreeMap<Vec<u8>, Option<Vec<u8>>>; 5]>;

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
        Ok(SledStore { db, trees, writer: Mutex::new(()) })
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

    /// Runs `f` with its writes buffered in [`Pending`], applies them in one sled
    /// transaction over every tree, then flushes.
    pub(crate) fn transaction<T>(&self, f: impl FnOnce(&Pending) -> TxResult<T>) -> Result<T> {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let pending = Pending::default();
        let out = f(&pending).map_err(super::TxError::into_registry)?;
        let pending = pending.into_inner();
        if pending.iter().all(BTreeMap::is_empty) {
            return Ok(out);
        }
        let [a, b, c, d, e] = &self.trees;
        let applied = (a, b, c, d, e).transaction(|(a, b, c, d, e)| {
            for (tree, writes) in [a, b, c, d, e].into_iter().zip(&pending) {
                for (key, value) in writes {
                    match value {
                        Some(v) => tree.insert(key.as_slice(), v.as_slice())?,
                        None => tree.remove(key.as_slice())?,
                    };
                }
            }
            Ok::<_, ConflictableTransactionError<RegistryError>>(())
        });
        match applied {
            Ok(()) => {}
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(e)) => return Err(e.into()),
        }
        self.db.flush()?;
        Ok(out)
    }

    /// The value of `key` as `pending` leaves it.
    pub(crate) fn tx_get(&self, pending: &Pending, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match pending.borrow()[tree.index()].get(key) {
            Some(v) => Ok(v.clone()),
            None => self.get(tree, key),
        }
    }

    /// Every entry under `prefix` as `pending` leaves them, in key order.
    pub(crate) fn tx_scan(&self, pending: &Pending, tree: Tree, prefix: &[u8]) -> Result<Vec<Entry>> {
        let mut entries: BTreeMap<Vec<u8>, Vec<u8>> = self.scan(tree, prefix)?.into_iter().collect();
        for (k, v) in pending.borrow()[tree.index()].iter().filter(|(k, _)| k.starts_with(prefix)) {
            match v {
                Some(v) => entries.insert(k.clone(), v.clone()),
                None => entries.remove(k),
            };
        }
        Ok(entries.into_iter().collect())
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
