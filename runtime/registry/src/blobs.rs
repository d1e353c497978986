//! Content-addressed blob files: `<blobs>/sha256/<hex>` (`<blobs>` is `<data>/blobs` by
//! default, and may be a directory shared by several nodes).
//!
//! Large bytes (components, compiled components, weights) never go into sled. A blob is
//! written to a temporary file in the same directory, fsynced, renamed to its digest and
//! the directory fsynced, so a blob name that exists always holds its complete content,
//! and a `put` that returned is durable. Blobs are immutable and shared by everything that
//! references the same content; [`crate::Registry::gc`] deletes unreferenced ones.
//!
//! A [`BlobUpload`] is such a temporary file written piece by piece, for as long as its
//! source takes (a slow client): it holds no lock meanwhile. The store remembers the
//! temporary files in flight, so gc (which removes stale ones) leaves them alone; only
//! placing the finished file under its digest happens under the registry's blob lock.
//!
//! Several processes may write the same blob at once: each writes its own temporary file
//! (named by process id and 64 random bits), and the renames land identical content
//! under the same name. A writer that finds its blob stored already refreshes the file's
//! modification time, so another node's gc (which spares young files, see
//! [`crate::BLOB_GRACE`]) sees it as just written.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use sha2::Digest as _;

use crate::error::{RegistryError, Result};
use crate::model::{BlobRef, Digest};

/// Prefix of temporary files (never a valid digest, so listings can tell them apart).
const TEMP_PREFIX: &str = ".tmp-";

/// What [`BlobStore::list`] found.
pub(crate) struct Listing {
    /// Stored blobs with their sizes and modification times.
    pub blobs: Vec<(Digest, u64, SystemTime)>,
    /// Temporary files not being written by this process, with their modification times.
    pub temps: Vec<(PathBuf, SystemTime)>,
}

/// Temporary files being written now (gc must not remove them).
type InFlight = Arc<Mutex<HashSet<PathBuf>>>;

/// The blob directory.
#[derive(Debug)]
pub(crate) struct BlobStore {
    dir: PathBuf,
    in_flight: InFlight,
}

/// A blob being written: a temporary file in the blob directory and the hash of what it
/// holds so far. Dropped before it is stored, it removes its file.
pub struct BlobUpload {
    tmp: PathBuf,
    file: Option<File>,
    hasher: sha2::Sha256,
    size: u64,
    in_flight: InFlight,
}

impl BlobUpload {
    /// Appends `bytes` (a blocking write).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        let file = self.file.as_mut().ok_or_else(|| RegistryError::Corrupt("writing a finished upload".into()))?;
        file.write_all(bytes).map_err(|e| RegistryError::storage(format!("writing {}", self.tmp.display()), e))?;
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Fsyncs and closes the file; its digest and size.
    fn seal(&mut self) -> Result<BlobRef> {
        if let Some(file) = self.file.take() {
            file.sync_all().map_err(|e| RegistryError::storage(format!("fsyncing {}", self.tmp.display()), e))?;
        }
        Ok(BlobRef { digest: Digest::from_sha(&self.hasher.clone().finalize()), size: self.size })
    }
}

impl std::fmt::Debug for BlobUpload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobUpload").field("tmp", &self.tmp).field("size", &self.size).finish_non_exhaustive()
    }
}

impl Drop for BlobUpload {
    fn drop(&mut self) {
        self.file = None;
        // Gone already once placed under its digest.
        let _ = fs::remove_file(&self.tmp);
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.tmp);
    }
}

impl BlobStore {
    /// Opens (creating) `<blobs>/sha256`.
    pub(crate) fn open(blobs: &Path) -> Result<BlobStore> {
        let dir = blobs.join("sha256");
        fs::create_dir_all(&dir).map_err(|e| RegistryError::storage(format!("creating {}", dir.display()), e))?;
        sync_dir(blobs)?;
        if let Some(parent) = blobs.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
        Ok(BlobStore { dir, in_flight: InFlight::default() })
    }

    /// Where the blob with this digest lives (whether or not it exists).
    pub(crate) fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.as_str())
    }

    /// A new temporary file to write a blob into, known to gc as in flight.
    pub(crate) fn begin(&self) -> Result<BlobUpload> {
        let tmp = self.dir.join(format!("{TEMP_PREFIX}{}-{:016x}", std::process::id(), rand::random::<u64>()));
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).insert(tmp.clone());
        // Built first, so that its drop forgets the name again if the file cannot be created.
        let mut upload = BlobUpload {
            file: None,
            tmp: tmp.clone(),
            hasher: sha2::Sha256::new(),
            size: 0,
            in_flight: self.in_flight.clone(),
        };
        let file =
            File::create_new(&tmp).map_err(|e| RegistryError::storage(format!("creating {}", tmp.display()), e))?;
        upload.file = Some(file);
        Ok(upload)
    }

    /// Fsyncs `upload` and places it under its digest; durable when it returns. Takes
    /// no lock: a caller about to reference the blob holds the registry's blob lock
    /// from here until its metadata is committed.
    pub(crate) fn place(&self, mut upload: BlobUpload) -> Result<BlobRef> {
        let blob = upload.seal()?;
        let tmp = upload.tmp.clone();
        let ctx = |what: &str| format!("{what} {}", tmp.display());
        let dest = self.path(&blob.digest);
        // Same content already stored (the upload's drop removes its file): make sure it
        // (and its name) is on disk, in case an earlier process died between its rename
        // and directory sync, and mark it as just written for other nodes' gc. If it
        // vanished meanwhile (gc), ours takes its place.
        let refreshed = File::options().append(true).open(&dest).and_then(|f| {
            f.set_modified(SystemTime::now())?;
            f.sync_all()
        });
        match refreshed {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::rename(&tmp, &dest).map_err(|e| RegistryError::storage(ctx("renaming"), e))?;
            }
            Err(e) => return Err(RegistryError::storage(format!("fsyncing {}", dest.display()), e)),
        }
        drop(upload);
        sync_dir(&self.dir)?;
        Ok(blob)
    }

    /// Streams `reader` into a new upload (without placing it).
    pub(crate) fn upload_from(&self, mut reader: impl Read) -> Result<BlobUpload> {
        let mut upload = self.begin()?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return Ok(upload),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(RegistryError::storage("reading blob input", e)),
            };
            upload.write(&buf[..n])?;
        }
    }

    /// Reads a blob and checks its content against the digest.
    pub(crate) fn read(&self, digest: &Digest) -> Result<Vec<u8>> {
        let path = self.path(digest);
        let bytes = fs::read(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => RegistryError::not_found(format!("blob {digest}")),
            _ => RegistryError::storage(format!("reading {}", path.display()), e),
        })?;
        if Digest::of(&bytes) != *digest {
            return Err(RegistryError::Corrupt(format!("blob {digest} does not match its digest")));
        }
        Ok(bytes)
    }

    /// All stored blobs with their sizes, and the temporary files not written by this
    /// process (left by interrupted writes, or another node's in flight), with their
    /// modification times.
    pub(crate) fn list(&self) -> Result<Listing> {
        let mut blobs = Vec::new();
        let mut temps = Vec::new();
        let entries = fs::read_dir(&self.dir)
            .map_err(|e| RegistryError::storage(format!("listing {}", self.dir.display()), e))?;
        for entry in entries {
            crate::pause::point();
            let entry = entry.map_err(|e| RegistryError::storage("listing blobs", e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            // A file removed since the listing began (another node's gc) is skipped.
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if name.starts_with(TEMP_PREFIX) {
                let path = entry.path();
                if !self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).contains(&path) {
                    temps.push((path, modified));
                }
            } else if let Ok(digest) = Digest::parse(name) {
                blobs.push((digest, meta.len(), modified));
            }
        }
        Ok(Listing { blobs, temps })
    }

    /// Deletes a blob file (missing is fine). Call [`BlobStore::sync`] after a batch.
    pub(crate) fn remove_path(&self, path: &Path) -> Result<()> {
        match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RegistryError::storage(format!("removing {}", path.display()), e)),
        }
    }

    /// Fsyncs the blob directory.
    pub(crate) fn sync(&self) -> Result<()> {
        sync_dir(&self.dir)
    }
}

/// Fsyncs a directory so renames and creations in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| RegistryError::storage(format!("fsyncing directory {}", dir.display()), e))
}
