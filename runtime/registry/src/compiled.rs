//! Precompiled components: the engine-specific compiled form of a function version.
//!
//! The engine compiles a version once and stores the result here with its engine
//! fingerprint, so a restart deserialises instead of recompiling. Storing a fingerprint
//! replaces the entries of other fingerprints for that version (one engine per process),
//! leaving their blobs to [`Registry::gc`].

use std::path::PathBuf;

use crate::functions::{compiled_key, validate_ids, version_key};
use crate::model::{CompiledRef, now_ms};
use crate::{Registry, RegistryError, Result, Tree, abort};

/// Longest accepted engine fingerprint, in bytes.
pub const MAX_FINGERPRINT_LEN: usize = 512;

impl Registry {
    /// Stores the precompiled form of a version for the engine with `fingerprint`,
    /// replacing entries for other fingerprints of that version.
    #[tracing::instrument(name = "sluice_registry.store_compiled", skip(self, bytes), fields(bytes = bytes.len()), err(level = "debug"))]
    pub fn store_compiled(
        &self,
        tenant: &str,
        name: &str,
        version: u32,
        fingerprint: &str,
        bytes: &[u8],
    ) -> Result<CompiledRef> {
        if fingerprint.is_empty() || fingerprint.len() > MAX_FINGERPRINT_LEN {
            return Err(RegistryError::InvalidInput(format!(
                "engine fingerprint must be 1 to {MAX_FINGERPRINT_LEN} bytes"
            )));
        }
        self.get_version(tenant, name, version)?;
        let mut upload = self.blobs.begin()?;
        upload.write(bytes)?;
        let _b = self.blob_lock()?;
        let blob = self.blobs.place(upload)?;
        let entry = CompiledRef { fingerprint: fingerprint.to_owned(), blob, created_ms: now_ms() };
        let _w = self.write_lock();
        let vkey = version_key(tenant, name, version);
        let key = compiled_key(tenant, name, version, fingerprint);
        self.commit(|tx| {
            let others = tx.keys(Tree::Compiled, &vkey)?;
            if tx.get(Tree::Versions, &vkey)?.is_none() {
                return abort(RegistryError::not_found(format!("version {version} of function {name:?}")));
            }
            for k in &others {
                tx.remove(Tree::Compiled, k)?;
            }
            tx.put_json(Tree::Compiled, &key, &entry)
        })?;
        Ok(entry)
    }

    /// The precompiled form of a version for `fingerprint`, if stored.
    pub fn compiled(&self, tenant: &str, name: &str, version: u32, fingerprint: &str) -> Result<Option<CompiledRef>> {
        validate_ids(tenant, name)?;
        self.store.get_json(Tree::Compiled, &compiled_key(tenant, name, version, fingerprint))
    }

    /// The path of the precompiled form for `fingerprint`, if stored and present on disk.
    pub fn compiled_blob(&self, tenant: &str, name: &str, version: u32, fingerprint: &str) -> Result<Option<PathBuf>> {
        Ok(self
            .compiled(tenant, name, version, fingerprint)?
            .map(|c| self.blob_path(&c.blob.digest))
            .filter(|p| p.is_file()))
    }
}
