//! The registry's metadata storage: named trees of byte keys → JSON values, with reads,
//! ordered prefix scans and transactions over several trees, kept in sled or in
//! PostgreSQL.
//!
//! The registry's logic (versions, staging, keys, retention, quota) is written once
//! against [`Store`] and [`Tx`]; each backend lives in its own file and is reached by one
//! `match`. A transaction is a closure that may run more than once (PostgreSQL retries
//! it after a serialization failure), so it must not have side effects besides its reads
//! and writes through [`Tx`]; it returns only after the commit is durable, and its reads
//! (gets and prefix scans) see its own writes.

pub(crate) mod postgres;
mod sled;

use std::cell::RefCell;

use serde::Serialize;
use serde::de::DeserializeOwned;

pub(crate) use self::postgres::{BlobLock, PgStore};
pub(crate) use self::sled::{Pending, SledStore};
use crate::change::Change;
use crate::error::{RegistryError, Result};

/// The trees (tables of key → JSON value) the registry keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tree {
    Tenants,
    Keys,
    Functions,
    Versions,
    Compiled,
}

impl Tree {
    /// The tree's name (sled's tree name, PostgreSQL's `tree` column).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Tree::Tenants => "tenants",
            Tree::Keys => "keys",
            Tree::Functions => "functions",
            Tree::Versions => "versions",
            Tree::Compiled => "compiled",
        }
    }

    /// The tree's place in sled's transaction (declaration order).
    fn index(self) -> usize {
        self as usize
    }
}

/// A key with its stored value.
pub(crate) type Entry = (Vec<u8>, Vec<u8>);

/// Where the metadata lives.
pub(crate) enum Store {
    /// A sled database in the data directory (one process).
    Sled(SledStore),
    /// A PostgreSQL database shared by every node (boxed: its connector is large).
    Postgres(Box<PgStore>),
}

/// Why a transaction's closure stopped.
#[derive(Debug)]
pub(crate) enum TxError {
    /// The registry refuses the change; nothing is written.
    Abort(RegistryError),
    /// A PostgreSQL statement failed (retried when it is a serialization failure).
    Pg(::postgres::Error),
}

impl TxError {
    /// The error a failed transaction reports.
    fn into_registry(self) -> RegistryError {
        match self {
            TxError::Abort(e) => e,
            TxError::Pg(e) => postgres::pg_error("PostgreSQL transaction", e),
        }
    }
}

impl From<::postgres::Error> for TxError {
    fn from(e: ::postgres::Error) -> Self {
        TxError::Pg(e)
    }
}

impl From<RegistryError> for TxError {
    fn from(e: RegistryError) -> Self {
        TxError::Abort(e)
    }
}

/// What a transaction's closure returns.
pub(crate) type TxResult<T> = std::result::Result<T, TxError>;

/// Aborts a transaction with `e`.
pub(crate) fn abort<T>(e: RegistryError) -> TxResult<T> {
    Err(TxError::Abort(e))
}

/// One attempt of a transaction: reads and writes of the trees, and the changes to
/// announce to the other nodes once it commits.
pub(crate) struct Tx<'a> {
    inner: TxInner<'a>,
    changes: RefCell<Vec<Change>>,
}

enum TxInner<'a> {
    Sled { pending: &'a Pending, store: &'a SledStore },
    Pg(RefCell<::postgres::Transaction<'a>>),
}

impl Tx<'_> {
    /// The value of `key`.
    pub(crate) fn get(&self, tree: Tree, key: &[u8]) -> TxResult<Option<Vec<u8>>> {
        match &self.inner {
            TxInner::Sled { pending, store } => Ok(store.tx_get(pending, tree, key)?),
            TxInner::Pg(tx) => postgres::tx_get(&mut tx.borrow_mut(), tree, key),
        }
    }

    /// Writes `value` under `key`.
    pub(crate) fn insert(&self, tree: Tree, key: &[u8], value: Vec<u8>) -> TxResult<()> {
        match &self.inner {
            TxInner::Sled { pending, .. } => {
                pending.borrow_mut()[tree.index()].insert(key.to_vec(), Some(value));
                Ok(())
            }
            TxInner::Pg(tx) => postgres::tx_insert(&mut tx.borrow_mut(), tree, key, &value),
        }
    }

    /// Removes `key`; whether it was there.
    pub(crate) fn remove(&self, tree: Tree, key: &[u8]) -> TxResult<bool> {
        match &self.inner {
            TxInner::Sled { pending, store } => {
                let existed = store.tx_get(pending, tree, key)?.is_some();
                pending.borrow_mut()[tree.index()].insert(key.to_vec(), None);
                Ok(existed)
            }
            TxInner::Pg(tx) => postgres::tx_remove(&mut tx.borrow_mut(), tree, key),
        }
    }

    /// Every entry under `prefix`, in key order (call before writing; see the module docs).
    pub(crate) fn scan(&self, tree: Tree, prefix: &[u8]) -> TxResult<Vec<Entry>> {
        match &self.inner {
            TxInner::Sled { pending, store } => Ok(store.tx_scan(pending, tree, prefix)?),
            TxInner::Pg(tx) => postgres::tx_scan(&mut tx.borrow_mut(), tree, prefix),
        }
    }

    /// Every key under `prefix`.
    pub(crate) fn keys(&self, tree: Tree, prefix: &[u8]) -> TxResult<Vec<Vec<u8>>> {
        Ok(self.scan(tree, prefix)?.into_iter().map(|(k, _)| k).collect())
    }

    /// Reads and decodes `key`.
    pub(crate) fn get_json<T: DeserializeOwned>(&self, tree: Tree, key: &[u8]) -> TxResult<Option<T>> {
        match self.get(tree, key)? {
            None => Ok(None),
            Some(v) => Ok(Some(decode(&v)?)),
        }
    }

    /// Encodes and writes `value` under `key`.
    pub(crate) fn put_json<T: Serialize>(&self, tree: Tree, key: &[u8], value: &T) -> TxResult<()> {
        self.insert(tree, key, encode(value)?)
    }

    /// Reads and decodes every value under `prefix`, with its key.
    pub(crate) fn scan_json<T: DeserializeOwned>(&self, tree: Tree, prefix: &[u8]) -> TxResult<Vec<(Vec<u8>, T)>> {
        let mut out = Vec::new();
        for (k, v) in self.scan(tree, prefix)? {
            crate::pause::point();
            out.push((k, decode(&v)?));
        }
        Ok(out)
    }

    /// Announces `change` to the other nodes when (and only if) this transaction commits.
    pub(crate) fn notify(&self, change: Change) {
        let mut changes = self.changes.borrow_mut();
        if !changes.contains(&change) {
            changes.push(change);
        }
    }
}

impl Store {
    /// The value of `key`, outside any transaction.
    pub(crate) fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self {
            Store::Sled(s) => s.get(tree, key),
            Store::Postgres(p) => postgres::blocking(|| p.get(tree, key)),
        }
    }

    /// Every entry under `prefix`, in key order, outside any transaction.
    pub(crate) fn scan(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<Entry>> {
        match self {
            Store::Sled(s) => s.scan(tree, prefix),
            Store::Postgres(p) => postgres::blocking(|| p.scan(tree, prefix)),
        }
    }

    /// Runs `f` as one transaction (again after a conflict) and returns once it is
    /// durably committed; its [`Tx::notify`] changes are announced with the commit.
    pub(crate) fn transaction<T>(&self, f: impl Fn(&Tx<'_>) -> TxResult<T>) -> Result<T> {
        match self {
            Store::Sled(s) => s.transaction(|pending| {
                let tx = Tx { inner: TxInner::Sled { pending, store: s }, changes: RefCell::default() };
                f(&tx)
            }),
            Store::Postgres(p) => postgres::blocking(|| {
                p.transaction(|pg_tx| {
                    let tx = Tx { inner: TxInner::Pg(RefCell::new(pg_tx)), changes: RefCell::default() };
                    let out = f(&tx);
                    let TxInner::Pg(pg_tx) = tx.inner else { unreachable!("built as PostgreSQL above") };
                    (pg_tx.into_inner(), tx.changes.into_inner(), out)
                })
            }),
        }
    }

    /// Makes every write durable (each transaction already is when it returns).
    pub(crate) fn flush(&self) -> Result<()> {
        match self {
            Store::Sled(s) => s.flush(),
            Store::Postgres(_) => Ok(()),
        }
    }

    /// Reads and decodes `key`.
    pub(crate) fn get_json<T: DeserializeOwned>(&self, tree: Tree, key: &[u8]) -> Result<Option<T>> {
        self.get(tree, key)?.map(|v| decode(&v)).transpose()
    }

    /// Reads and decodes every value under `prefix`, with its key, in key order.
    pub(crate) fn scan_json<T: DeserializeOwned>(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<(Vec<u8>, T)>> {
        self.scan(tree, prefix)?
            .into_iter()
            .map(|(k, v)| {
                crate::pause::point();
                Ok((k, decode(&v)?))
            })
            .collect()
    }
}

/// Decodes a stored JSON value.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| RegistryError::Corrupt(format!("undecodable {}: {e}", std::any::type_name::<T>())))
}

/// Encodes a value for storage.
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| RegistryError::storage("encoding JSON", e))
}
