//! sluice's durable registry: tenants, API keys, functions, versions and artifacts.
//!
//! Metadata lives in sled (`<data>/db`, one process) or in PostgreSQL (a `postgres://`
//! URL, shared by every node of a platform), serialised as JSON; large bytes live in
//! content-addressed files (`<blobs>/sha256/<hex>`, by default `<data>/blobs`). Every
//! mutating call returns `Ok` only after the blob files are fsynced and the metadata is
//! committed durably (`sled::Db::flush`, or PostgreSQL's commit), so the HTTP layer may
//! acknowledge (201) as soon as it returns: an acknowledged deploy survives `kill -9`.
//! Changes that touch several trees commit in one transaction. [`RegistryLocation`]
//! says which backend; both keep the same trees with the same semantics, because the
//! registry's logic is written once against the internal `store` (trees of byte keys →
//! JSON values, prefix scans, transactions retried on conflict).
//!
//! ## Layout
//!
//! ```text
//! trees (keys → JSON values): sled trees in <data>/db/, or rows (tree, key, value) of
//! the PostgreSQL table sluice_kv (schema versions in sluice_schema_migrations):
//!   tenants    <tenant>                          → Tenant
//!   keys       sha256(api key) (32 raw bytes)    → KeyInfo
//!   functions  <tenant>/<name>                   → {created_ms, latest}
//!   versions   <tenant>/<name>/<u32 BE version>  → FunctionVersion
//!   compiled   <tenant>/<name>/<u32 BE version><engine fingerprint> → CompiledRef
//!   (sled's default tree) "schema"               → 1
//! <blobs>/sha256/<hex>         immutable content-addressed blobs
//! <blobs>/sha256/.tmp-*        blobs being written (stale ones are removed at open and by gc)
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
//! [`RegistryError::InUse`]). With PostgreSQL any number of nodes open the same
//! database: transactions are `SERIALIZABLE` and retried, so version numbers stay
//! consecutive, and the blob directory is shared (a ReadWriteMany volume). Inside a
//! process, metadata mutations are serialised by a mutex (they are rare and short;
//! reads take no lock), and blob writers hold a shared lock that [`Registry::gc`] takes
//! exclusively, so gc never deletes a blob that a mutation in flight is about to
//! reference; with PostgreSQL the same lock is also taken across nodes (an advisory
//! lock). The shared lock is held only from placing a finished blob under its digest to
//! committing the metadata that references it: the bytes are written to a temporary
//! file first ([`BlobUpload`], which gc leaves alone while it is in flight), so a slow
//! upload holds no lock that gc, and through a waiting gc every other writer, would
//! wait for. Blob files are written under unique temporary names, fsynced and renamed,
//! so several nodes writing the same content is safe. With PostgreSQL, gc also spares
//! blob and temporary files younger than [`BLOB_GRACE`] (another node's upload in
//! flight, or a blob it is about to reference).
//!
//! [`Registry::watch`] tells a node what the others changed (see `watch`); a database
//! that cannot be reached gives [`RegistryError::Unavailable`] (HTTP 503). The API is
//! blocking: call it from blocking threads, or from async code on a multi-threaded
//! tokio runtime (the PostgreSQL client then steps out with `block_in_place`), not from
//! a current-thread runtime's async code.
//!
//! ## An object store for blobs (not implemented)
//!
//! Blobs are reached only through the internal `BlobStore` (begin an upload, place it
//! under its digest, read, list with ages, remove), and the metadata only holds digests.
//! An object store (S3, GCS) would implement those operations: an upload streams to a
//! multipart upload or a temporary object, placing is a conditional put of
//! `sha256/<hex>` (content-addressed, so a concurrent identical put is harmless),
//! listing gives each object's age for gc's grace period, and readers that need a file
//! (weights are memory-mapped, components compiled) go through a local read-through
//! cache keyed by digest, which never needs invalidation because blobs are immutable.
//!
//! ## Disk quota and retention
//!
//! Writes of versions take a [`StoragePolicy`]: the tenant's disk quota (bytes of the
//! distinct blobs its versions reference) and how many versions per function are kept
//! (see `retention`).

mod blobs;
mod change;
mod compiled;
pub mod error;
mod functions;
mod keys;
pub mod model;
mod pause;
mod retention;
mod store;
mod tenants;
pub mod watch;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Duration, SystemTime};

pub use change::Change;
pub use compiled::MAX_FINGERPRINT_LEN;
pub use error::{RegistryError, Result};
pub use keys::{MIN_ADMIN_KEY_LEN, MIN_PROVIDED_TENANT_KEY_LEN};
pub use model::*;
pub use pause::set_pause_point;
pub use retention::{StoragePolicy, Written};
pub use watch::Watcher;

pub use blobs::BlobUpload;

use blobs::BlobStore;
use store::{BlobLock, PgStore, SledStore, Store};
pub(crate) use store::{Tree, Tx, TxResult, abort};

/// How old an unreferenced blob file, or a temporary file, must be before gc deletes it
/// when the blob directory is shared with other nodes (PostgreSQL): younger ones may be
/// another node's upload in flight or a blob it is about to reference. One hour is far
/// longer than any upload's pause between writing bytes (a stalled upload is cut off
/// much sooner) and short enough to reclaim deleted functions' space the same day.
pub const BLOB_GRACE: Duration = Duration::from_secs(60 * 60);

/// Where a registry keeps its metadata and blobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistryLocation {
    /// sled in `<dir>/db` and blobs in `<dir>/blobs` (one process).
    Dir(PathBuf),
    /// A PostgreSQL database (`postgres://…` or `postgresql://…`, `sslmode` in the
    /// URL) and a blob directory shared by every node.
    Postgres {
        /// The database's URL.
        url: String,
        /// The blob directory (`<data>/blobs` by default).
        blobs_dir: PathBuf,
    },
}

impl RegistryLocation {
    /// `registry` if given (a `postgres://` URL, blobs in `blob_dir` or else
    /// `<data_dir>/blobs`; or a directory path), else sled in `data_dir`.
    pub fn from_args(registry: Option<&str>, data_dir: &Path, blob_dir: Option<&Path>) -> RegistryLocation {
        match registry {
            Some(url) if is_postgres_url(url) => RegistryLocation::Postgres {
                url: url.to_owned(),
                blobs_dir: blob_dir.map_or_else(|| data_dir.join("blobs"), Path::to_path_buf),
            },
            Some(path) => RegistryLocation::Dir(PathBuf::from(path)),
            None => RegistryLocation::Dir(data_dir.to_path_buf()),
        }
    }

    /// Whether the metadata is shared with other nodes (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        matches!(self, RegistryLocation::Postgres { .. })
    }

    /// The location for display: a URL's password replaced by `***`.
    pub fn redacted(&self) -> String {
        match self {
            RegistryLocation::Dir(dir) => dir.display().to_string(),
            RegistryLocation::Postgres { url, .. } => redact_url(url),
        }
    }
}

fn is_postgres_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// `url` without the password of its user info.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{}", &rest[authority_end..]),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// The registry. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Registry {
    location: RegistryLocation,
    data_dir: PathBuf,
    store: Store,
    blobs: BlobStore,
    /// Unreferenced blobs and temporary files younger than this survive gc.
    grace: Duration,
    /// Serialises metadata mutations.
    write: Mutex<()>,
    /// Shared by blob writers, exclusive for gc.
    gc: RwLock<()>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("location", &self.location.redacted()).finish_non_exhaustive()
    }
}

/// The blob lock of a writer: this process's, and with PostgreSQL every node's.
pub(crate) struct BlobGuard<'a> {
    _cluster: Option<BlobLock<'a>>,
    _local: RwLockReadGuard<'a, ()>,
}

impl Registry {
    /// Opens (creating if needed) the sled registry in `data_dir`.
    pub fn open(data_dir: impl AsRef<Path>) -> Result<Registry> {
        Registry::open_location(RegistryLocation::Dir(data_dir.as_ref().to_path_buf()))
    }

    /// Opens the PostgreSQL registry at `url` (creating or migrating its schema) with
    /// its blobs in `blobs_dir`. [`RegistryError::Unavailable`] if the server cannot be
    /// reached, [`RegistryError::SchemaTooNew`] if a newer build migrated it.
    pub fn open_url(url: &str, blobs_dir: impl AsRef<Path>) -> Result<Registry> {
        Registry::open_location(RegistryLocation::Postgres {
            url: url.to_owned(),
            blobs_dir: blobs_dir.as_ref().to_path_buf(),
        })
    }

    /// Opens the registry at `location`.
    pub fn open_location(location: RegistryLocation) -> Result<Registry> {
        let (store, data_dir, blobs_dir, grace) = match &location {
            RegistryLocation::Dir(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| RegistryError::storage(format!("creating {}", dir.display()), e))?;
                // sled's lock makes this process the only writer: every temporary file
                // left is from an interrupted write, and nothing will finish it.
                (Store::Sled(SledStore::open(dir)?), dir.clone(), dir.join("blobs"), Duration::ZERO)
            }
            RegistryLocation::Postgres { url, blobs_dir } => {
                if !is_postgres_url(url) {
                    return Err(RegistryError::InvalidInput("a registry URL starts with postgres://".into()));
                }
                let store = Store::Postgres(Box::new(store::postgres::blocking(|| PgStore::open(url))?));
                let data_dir = blobs_dir.parent().unwrap_or(blobs_dir).to_path_buf();
                (store, data_dir, blobs_dir.clone(), BLOB_GRACE)
            }
        };
        let blobs = BlobStore::open(&blobs_dir)?;
        let registry = Registry { location, data_dir, store, blobs, grace, write: Mutex::new(()), gc: RwLock::new(()) };
        registry.remove_stale_temps()?;
        tracing::info!(location = %registry.location.redacted(), "registry opened");
        Ok(registry)
    }

    /// This registry with `grace` instead of its backend's default (zero with sled,
    /// [`BLOB_GRACE`] with PostgreSQL) as the age below which gc spares unreferenced
    /// blobs and temporary files.
    pub fn with_gc_grace(mut self, grace: Duration) -> Registry {
        self.grace = grace;
        self
    }

    /// Where this registry lives.
    pub fn location(&self) -> &RegistryLocation {
        &self.location
    }

    /// The data directory: sled's, or with PostgreSQL the blob directory's parent.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Changes made from now on to the registry by any node (this one included), for
    /// the runtime to reload what they name. With sled nothing else changes it: the
    /// watcher yields nothing. [`RegistryError::Unavailable`] if the database cannot be
    /// reached; once started, the watcher reconnects by itself and says
    /// [`Change::Resync`] after.
    pub fn watch(&self) -> Result<Watcher> {
        match &self.store {
            Store::Sled(_) => Ok(Watcher::closed()),
            Store::Postgres(pg) => store::postgres::blocking(|| Watcher::listen(pg.connector())),
        }
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
        let versions = self.store.scan_json::<FunctionVersion>(Tree::Versions, format!("{tenant}/").as_bytes())?;
        Ok(retention::disk_usage(versions.iter().map(|(_, v)| v)))
    }

    /// Deletes blob files no version or compiled entry references, and stale temporary
    /// files (not those of uploads in flight), sparing those younger than the grace
    /// period (see [`BLOB_GRACE`]).
    #[tracing::instrument(name = "sluice_registry.gc", skip(self), err(level = "debug"))]
    pub fn gc(&self) -> Result<GcReport> {
        let _gc = self.gc.write().unwrap_or_else(|e| e.into_inner());
        let _cluster = match &self.store {
            Store::Postgres(pg) => Some(store::postgres::blocking(|| pg.blob_lock(true))?),
            Store::Sled(_) => None,
        };
        let mut live = HashSet::new();
        for (_, v) in self.store.scan_json::<FunctionVersion>(Tree::Versions, b"")? {
            live.insert(v.component.digest);
            live.extend(v.artifacts.into_values().map(|a| a.digest));
        }
        for (_, c) in self.store.scan_json::<CompiledRef>(Tree::Compiled, b"")? {
            live.insert(c.blob.digest);
        }
        let blobs::Listing { blobs: stored, temps } = self.blobs.list()?;
        let now = SystemTime::now();
        let old = |modified: SystemTime| now.duration_since(modified).unwrap_or_default() >= self.grace;
        let mut report = GcReport::default();
        for (temp, modified) in temps {
            if old(modified) {
                self.blobs.remove_path(&temp)?;
                report.temp_files_removed += 1;
            }
        }
        for (digest, size, modified) in stored {
            pause::point();
            if live.contains(&digest) {
                report.kept += 1;
            } else if !old(modified) {
                report.young += 1;
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

    /// Makes every write durable (every mutation already is when it returns).
    pub fn flush(&self) -> Result<()> {
        self.store.flush()
    }

    /// Removes temporary files of interrupted writes: all of them with sled (this is the
    /// only process), those older than the grace period with a shared directory.
    fn remove_stale_temps(&self) -> Result<()> {
        let now = SystemTime::now();
        let stale: Vec<PathBuf> = self
            .blobs
            .list()?
            .temps
            .into_iter()
            .filter(|(_, modified)| now.duration_since(*modified).unwrap_or_default() >= self.grace)
            .map(|(path, _)| path)
            .collect();
        for temp in &stale {
            self.blobs.remove_path(temp)?;
        }
        if !stale.is_empty() {
            self.blobs.sync()?;
            tracing::info!(removed = stale.len(), "removed temporary files of interrupted writes");
        }
        Ok(())
    }

    pub(crate) fn write_lock(&self) -> MutexGuard<'_, ()> {
        self.write.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The blob lock a writer holds from placing a blob to committing its reference.
    pub(crate) fn blob_lock(&self) -> Result<BlobGuard<'_>> {
        let local = self.gc.read().unwrap_or_else(|e| e.into_inner());
        let cluster = match &self.store {
            Store::Postgres(pg) => Some(store::postgres::blocking(|| pg.blob_lock(false))?),
            Store::Sled(_) => None,
        };
        Ok(BlobGuard { _cluster: cluster, _local: local })
    }

    /// Runs `f` as one transaction over all trees (again after a conflict) and returns
    /// once it is durable. Caller holds `write_lock`.
    pub(crate) fn commit<T>(&self, f: impl Fn(&Tx<'_>) -> TxResult<T>) -> Result<T> {
        self.store.transaction(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_comes_from_a_url_or_a_directory_and_hides_its_password() {
        let data = Path::new("/data");
        let url = "postgres://sluice:s3cret@db.example:5432/sluice?sslmode=require";
        let pg = RegistryLocation::from_args(Some(url), data, None);
        assert_eq!(pg, RegistryLocation::Postgres { url: url.into(), blobs_dir: data.join("blobs") });
        assert_eq!(pg.redacted(), "postgres://sluice:***@db.example:5432/sluice?sslmode=require");
        assert_eq!(redact_url("postgresql://sluice@db/x"), "postgresql://sluice@db/x");
        assert_eq!(RegistryLocation::from_args(None, data, None), RegistryLocation::Dir(data.into()));
        assert_eq!(
            RegistryLocation::from_args(Some("/elsewhere"), data, None),
            RegistryLocation::Dir("/elsewhere".into())
        );
    }
}
