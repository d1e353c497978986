//! sluice's durable registry: tenants, API keys, functions, versions and artifacts.
//!
//! Metadata lives in sled (`<data>/db`), serialised as JSON; large bytes live in
//! content-addressed files (`<data>/blobs/sha256/<hex>`). Every mutating call
//! returns `Ok` only after the blob files are fsynced and `sled::Db::flush` has completed,
//! so the HTTP layer may acknowledge (201) as soon as it returns: an acknowledged deploy
//! survives `kill -9`. Changes that touch several trees commit in one sled transaction.
//!
//! ## On-disk layout
//!
//! ```text
//! <data>/db/                   sled; trees (keys → JSON values):
//!   tenants    <tenant>                          → Tenant
//!   keys       sha256(api key) (32 raw bytes)    → KeyInfo
//!   functions  <tenant>/<name>                   → {created_ms, latest}
//!   versions   <tenant>/<name>/<u32 BE version>  → FunctionVersion
//!   compiled   <tenant>/<name>/<u32 BE version><engine fingerprint> → CompiledRef
//!   (default)  "schema"                          → 1
//! <data>/blobs/sha256/<hex>    immutable content-addressed blobs
//! <data>/blobs/sha256/.tmp-*   blobs being written (stale ones are removed at open and by gc)
//! ```
//!
//! ## Versions and artifacts
//!
//! Versions are immutable and numbered 1, 2, 3, … per function; the newest version
//! serves. Artifacts (weights, tokenizers) belong to versions: uploading an artifact
//! creates a new version with the same component and options and the previous version's
//! artifacts plus the new one, so "weights are loaded once per function version" holds
//! and a running version never sees its weights change. A deploy (new component) inherits
//! the previous version's artifacts. Deleting a function forgets all its versions (the
//! numbering restarts at 1 if the name is deployed again); blob files are reclaimed by
//! [`Registry::gc`], which the runtime calls at start-up and after deletions.
//!
//! ## Concurrency
//!
//! sled locks `<data>/db`, so only one process opens a data directory (a second gets
//! [`RegistryError::InUse`]). Inside the process, metadata mutations are serialised by a
//! mutex (they are rare and short; reads are lock-free), and blob writers hold a shared
//! lock that [`Registry::gc`] takes exclusively, so gc never deletes a blob that a
//! mutation in flight is about to reference. The shared lock is held only from placing
//! a finished blob under its digest to committing the metadata that references it:
//! the bytes are written to a temporary file first ([`BlobUpload`], which gc leaves
//! alone while it is in flight), so a slow upload holds no lock that gc, and through a
//! waiting gc every other writer, would wait for.
//!
//! ## Disk quota and retention
//!
//! Writes of versions take a [`StoragePolicy`]: the tenant's disk quota (bytes of the
//! distinct blobs its versions reference) and how many versions per function are kept
//! (see `retention`).

mod blobs;
mod compiled;
pub mod error;
mod functions;
mod keys;
pub mod model;
mod retention;
mod tenants;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};

use serde::Serialize;
use serde::de::DeserializeOwned;
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, ConflictableTransactionResult, TransactionalTree};

pub use compiled::MAX_FINGERPRINT_LEN;
pub use error::{RegistryError, Result};
pub use keys::{MIN_ADMIN_KEY_LEN, MIN_PROVIDED_TENANT_KEY_LEN};
pub use model::*;
pub use retention::{StoragePolicy, Written};

pub use blobs::BlobUpload;

use blobs::BlobStore;

const SCHEMA_KEY: &[u8] = b"schema";
const SCHEMA_VERSION: &[u8] = b"1";

/// The registry. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Registry {
    data_dir: PathBuf,
    db: sled::Db,
    tenants: sled::Tree,
    keys: sled::Tree,
    functions: sled::Tree,
    versions: sled::Tree,
    compiled: sled::Tree,
    blobs: BlobStore,
    /// Serialises metadata mutations.
    write: Mutex<()>,
    /// Shared by blob writers, exclusive for gc.
    gc: RwLock<()>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("data_dir", &self.data_dir).finish_non_exhaustive()
    }
}

/// The trees of one transaction, by name.
pub(crate) struct Tx<'a> {
    pub tenants: &'a TransactionalTree,
    pub keys: &'a TransactionalTree,
    pub functions: &'a TransactionalTree,
    pub versions: &'a TransactionalTree,
    pub compiled: &'a TransactionalTree,
}

pub(crate) type TxResult<T> = ConflictableTransactionResult<T, RegistryError>;

impl Registry {
    /// Opens (creating if needed) the registry in `data_dir`.
    pub fn open(data_dir: impl AsRef<Path>) -> Result<Registry> {
        let data_dir = data_dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| RegistryError::storage(format!("creating {}", data_dir.display()), e))?;
        let db = open_sled(&data_dir)?;
        match db.get(SCHEMA_KEY)? {
            None => {
                db.insert(SCHEMA_KEY, SCHEMA_VERSION)?;
                db.flush()?;
            }
            Some(v) if v.as_ref() == SCHEMA_VERSION => {}
            Some(v) => {
                return Err(RegistryError::Corrupt(format!(
                    "unsupported registry schema {:?} (this build reads schema 1)",
                    String::from_utf8_lossy(&v)
                )));
            }
        }
        let blobs = BlobStore::open(&data_dir)?;
        // sled's lock makes this process the only writer: every temporary file left is
        // from an interrupted write (a crash mid-upload) and nothing will finish it.
        let stale = blobs.list()?.temps;
        for temp in &stale {
            blobs.remove_path(temp)?;
        }
        if !stale.is_empty() {
            blobs.sync()?;
            tracing::info!(removed = stale.len(), "removed temporary files of interrupted writes");
        }
        let registry = Registry {
            tenants: db.open_tree("tenants")?,
            keys: db.open_tree("keys")?,
            functions: db.open_tree("functions")?,
            versions: db.open_tree("versions")?,
            compiled: db.open_tree("compiled")?,
            db,
            blobs,
            data_dir,
            write: Mutex::new(()),
            gc: RwLock::new(()),
        };
        tracing::info!(data_dir = %registry.data_dir.display(), "registry opened");
        Ok(registry)
    }

    /// The data directory this registry was opened on.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Where the blob with `digest` lives (it may not exist).
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.blobs.path(digest)
    }

    /// Reads a blob, checking its content against the digest
    /// ([`RegistryError::Corrupt`] on mismatch, [`RegistryError::NotFound`] if missing).
    pub fn read_blob(&self, digest: &Digest) -> Result<Vec<u8>> {
        self.blobs.read(digest)
    }

    /// A temporary blob file to stream an upload into, without any lock: hand it to
    /// [`Registry::put_artifact_upload`] when complete; dropped, it removes its file.
    pub fn begin_upload(&self) -> Result<BlobUpload> {
        self.blobs.begin()
    }

    /// Bytes of the distinct blobs `tenant`'s versions reference (its disk usage; see
    /// `retention` for how shared blobs are charged).
    pub fn tenant_disk_usage(&self, tenant: &str) -> Result<u64> {
        validate_tenant_id(tenant)?;
        let versions = scan_json::<FunctionVersion>(&self.versions, format!("{tenant}/").as_bytes())?;
        Ok(retention::disk_usage(versions.iter().map(|(_, v)| v)))
    }

    /// Deletes blob files no version or compiled entry references, and stale temporary
    /// files (not those of uploads in flight).
    #[tracing::instrument(name = "sluice_registry.gc", skip(self), err(level = "debug"))]
    pub fn gc(&self) -> Result<GcReport> {
        let _gc = self.gc.write().unwrap_or_else(|e| e.into_inner());
        let mut live = HashSet::new();
        for item in self.versions.iter() {
            let (_, value) = item?;
            let v: FunctionVersion = decode(&value)?;
            live.insert(v.component.digest);
            live.extend(v.artifacts.into_values().map(|a| a.digest));
        }
        for item in self.compiled.iter() {
            let (_, value) = item?;
            let c: CompiledRef = decode(&value)?;
            live.insert(c.blob.digest);
        }
        let blobs::Listing { blobs: stored, temps } = self.blobs.list()?;
        let mut report = GcReport::default();
        for temp in temps {
            self.blobs.remove_path(&temp)?;
            report.temp_files_removed += 1;
        }
        for (digest, size) in stored {
            if live.contains(&digest) {
                report.kept += 1;
            } else {
                self.blobs.remove_path(&self.blobs.path(&digest))?;
                report.removed += 1;
                report.freed_bytes += size;
            }
        }
        self.blobs.sync()?;
        tracing::info!(?report, "registry gc done");
        Ok(report)
    }

    /// Flushes sled to disk (every mutation already does this before returning).
    pub fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }

    pub(crate) fn write_lock(&self) -> MutexGuard<'_, ()> {
        self.write.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn blob_lock(&self) -> RwLockReadGuard<'_, ()> {
        self.gc.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` as one transaction over all trees, then flushes. Caller holds `write_lock`.
    pub(crate) fn commit<T>(&self, f: impl Fn(&Tx<'_>) -> TxResult<T>) -> Result<T> {
        let trees = (&self.tenants, &self.keys, &self.functions, &self.versions, &self.compiled);
        let out = trees.transaction(|(tenants, keys, functions, versions, compiled)| {
            f(&Tx { tenants, keys, functions, versions, compiled })
        })?;
        self.db.flush()?;
        Ok(out)
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

/// Reads and decodes `key` from `tree`.
pub(crate) fn get_json<T: DeserializeOwned>(tree: &sled::Tree, key: &[u8]) -> Result<Option<T>> {
    tree.get(key)?.map(|v| decode(&v)).transpose()
}

/// Reads and decodes every value under `prefix`, with its key, in key order.
pub(crate) fn scan_json<T: DeserializeOwned>(tree: &sled::Tree, prefix: &[u8]) -> Result<Vec<(sled::IVec, T)>> {
    tree.scan_prefix(prefix)
        .map(|item| {
            let (k, v) = item?;
            Ok((k, decode(&v)?))
        })
        .collect()
}

/// Aborts a transaction with `e`.
pub(crate) fn abort<T>(e: RegistryError) -> TxResult<T> {
    Err(ConflictableTransactionError::Abort(e))
}

/// Transactional read + decode.
pub(crate) fn tx_get<T: DeserializeOwned>(tree: &TransactionalTree, key: &[u8]) -> TxResult<Option<T>> {
    match tree.get(key)? {
        None => Ok(None),
        Some(v) => decode(&v).map(Some).map_err(ConflictableTransactionError::Abort),
    }
}

/// Transactional encode + write.
pub(crate) fn tx_put<T: Serialize>(tree: &TransactionalTree, key: &[u8], value: &T) -> TxResult<()> {
    let bytes = encode(value).map_err(ConflictableTransactionError::Abort)?;
    tree.insert(key, bytes)?;
    Ok(())
}

/// How long [`open_sled`] waits for another holder of the lock to let go: sled's
/// flusher thread keeps the file lock for a moment after a `Db` is dropped, and a
/// restarting server may find its predecessor still exiting.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens the sled database of `data_dir`, retrying while its lock is held.
fn open_sled(data_dir: &Path) -> Result<sled::Db> {
    let started = std::time::Instant::now();
    loop {
        match sled::Config::new().path(data_dir.join("db")).open() {
            Ok(db) => return Ok(db),
            Err(sled::Error::Io(ref io)) if io.to_string().contains("could not acquire lock") => {
                if started.elapsed() >= LOCK_WAIT {
                    return Err(RegistryError::InUse { path: data_dir.to_path_buf() });
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(RegistryError::storage(format!("opening sled in {}", data_dir.display()), e)),
        }
    }
}
