//! Content-addressed blob files: `<data>/blobs/sha256/<hex>`.
//!
//! Large bytes (components, compiled components, weights) never go into sled. A blob is
//! written to a temporary file in the same directory, fsynced, renamed to its digest and
//! the directory fsynced, so a blob name that exists always holds its complete content,
//! and a `put` that returned is durable. Blobs are immutable and shared by everything that
//! references the same content; [`crate::Registry::gc`] deletes unreferenced ones.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use crate::error::{RegistryError, Result};
use crate::model::{BlobRef, Digest};

/// Prefix of temporary files (never a valid digest, so listings can tell them apart).
const TEMP_PREFIX: &str = ".tmp-";

/// What [`BlobStore::list`] found.
pub(crate) struct Listing {
    /// Stored blobs with their sizes.
    pub blobs: Vec<(Digest, u64)>,
    /// Temporary files left by interrupted writes.
    pub temps: Vec<PathBuf>,
}

/// The blob directory.
#[derive(Debug)]
pub(crate) struct BlobStore {
    dir: PathBuf,
}

impl BlobStore {
    /// Opens (creating) `<data>/blobs/sha256`.
    pub(crate) fn open(data_dir: &Path) -> Result<BlobStore> {
        let blobs = data_dir.join("blobs");
        let dir = blobs.join("sha256");
        fs::create_dir_all(&dir).map_err(|e| RegistryError::storage(format!("creating {}", dir.display()), e))?;
        sync_dir(&blobs)?;
        sync_dir(data_dir)?;
        Ok(BlobStore { dir })
    }

    /// Where the blob with this digest lives (whether or not it exists).
    pub(crate) fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.as_str())
    }

    /// Stores `bytes` durably and returns its reference.
    pub(crate) fn put(&self, bytes: &[u8]) -> Result<BlobRef> {
        self.put_reader(bytes)
    }

    /// Streams `reader` into a blob, hashing on the way; durable when it returns.
    pub(crate) fn put_reader(&self, mut reader: impl Read) -> Result<BlobRef> {
        let tmp = self.dir.join(format!("{TEMP_PREFIX}{}-{:016x}", std::process::id(), rand::random::<u64>()));
        let ctx = |what: &str| format!("{what} {}", tmp.display());
        let result = (|| {
            let mut file = File::create_new(&tmp).map_err(|e| RegistryError::storage(ctx("creating"), e))?;
            let mut hasher = sha2::Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut size = 0u64;
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(RegistryError::storage("reading blob input", e)),
                };
                hasher.update(&buf[..n]);
                file.write_all(&buf[..n]).map_err(|e| RegistryError::storage(ctx("writing"), e))?;
                size += n as u64;
            }
            file.sync_all().map_err(|e| RegistryError::storage(ctx("fsyncing"), e))?;
            drop(file);
            let digest = Digest::from_sha(&hasher.finalize());
            let dest = self.path(&digest);
            if dest.exists() {
                // Same content already stored. Make sure it (and its name) is on disk,
                // in case an earlier process died between its rename and directory sync.
                fs::remove_file(&tmp).map_err(|e| RegistryError::storage(ctx("removing"), e))?;
                File::open(&dest)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| RegistryError::storage(format!("fsyncing {}", dest.display()), e))?;
            } else {
                fs::rename(&tmp, &dest).map_err(|e| RegistryError::storage(ctx("renaming"), e))?;
            }
            sync_dir(&self.dir)?;
            Ok(BlobRef { digest, size })
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
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

    /// All stored blobs with their sizes, and the temporary files left by interrupted writes.
    pub(crate) fn list(&self) -> Result<Listing> {
        let mut blobs = Vec::new();
        let mut temps = Vec::new();
        let entries = fs::read_dir(&self.dir)
            .map_err(|e| RegistryError::storage(format!("listing {}", self.dir.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RegistryError::storage("listing blobs", e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(TEMP_PREFIX) {
                temps.push(entry.path());
            } else if let Ok(digest) = Digest::parse(name) {
                let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
                blobs.push((digest, size));
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
