//! Artifact uploads: a per-tenant cap on uploads in flight, the tenant's disk quota
//! while the bytes arrive, and the store of a complete upload.
//!
//! An upload is three steps, so that a slow client holds nothing anyone else needs:
//! [`Platform::begin_upload`] (short, blocking) takes one of the tenant's upload slots
//! ([`PlatformError::TooManyUploads`] at once when none is free), checks the declared
//! size against its disk quota and against its device-memory quota (the version the
//! upload makes must be placeable: [`PlatformError::WeightsOverQuota`]) and opens a
//! temporary blob file; the HTTP layer then reads the body asynchronously and hands
//! complete pieces to [`ArtifactUpload::write`] on the background pool, after
//! [`ArtifactUpload::accept`] counted them against both quotas (bytes of the tenant's
//! uploads in flight count too for the disk);
//! [`Platform::finish_upload`] (blocking) stores the file and the version that sees it.
//! No registry lock is held until that last step, so gc, deletes and other tenants'
//! deploys never wait for a slow upload. Dropping an [`ArtifactUpload`] at any point
//! removes its temporary file and gives its slot and reserved bytes back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_registry::{BlobUpload, FunctionVersion, RegistryError, StoragePolicy, validate_artifact_name};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::functions::UploadBudget;
use super::{Platform, PlatformError, Result, TenantRuntime};

/// A tenant's artifact uploads in flight: at most `limit` at once, and the bytes they
/// have received so far (counted against its disk quota before they are stored).
pub(crate) struct UploadSlots {
    permits: Arc<Semaphore>,
    limit: u32,
    reserved: AtomicU64,
}

impl UploadSlots {
    pub(crate) fn new(limit: u32) -> Self {
        UploadSlots { permits: Arc::new(Semaphore::new(limit as usize)), limit, reserved: AtomicU64::new(0) }
    }

    /// Its size.
    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }

    /// Uploads in flight now.
    pub(crate) fn in_use(&self) -> u32 {
        self.limit.saturating_sub(self.permits.available_permits() as u32)
    }

    fn try_acquire(&self) -> Result<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().map_err(|_| PlatformError::TooManyUploads { limit: self.limit })
    }
}

/// One artifact upload in flight (see the module docs).
pub struct ArtifactUpload {
    /// The temporary file (taken when it is stored).
    blob: Option<BlobUpload>,
    tenant_id: String,
    function: String,
    artifact: String,
    tenant: Arc<TenantRuntime>,
    policy: StoragePolicy,
    /// The tenant's disk usage when the upload began.
    used_at_start: u64,
    /// Bytes this upload added to the tenant's reserved total (the declared size, then
    /// whatever arrived beyond it).
    reserved: u64,
    /// Bytes of the body received so far.
    received: u64,
    /// What the version it makes may place on a device (`None`: no quota).
    weights: Option<UploadBudget>,
    _slot: OwnedSemaphorePermit,
}

impl ArtifactUpload {
    /// Counts `n` more bytes of the body against the tenant's disk quota (with the
    /// bytes of its other uploads in flight); [`RegistryError::DiskQuotaExceeded`] when
    /// they would not fit. Bytes within the declared size were counted when the upload
    /// began. Cheap: call it on the async side as each piece arrives.
    pub fn accept(&mut self, n: u64) -> Result<()> {
        self.received = self.received.saturating_add(n);
        if let Some(budget) = &self.weights {
            budget.check(self.received)?;
        }
        match self.received.checked_sub(self.reserved) {
            Some(more) if more > 0 => self.reserve(more),
            _ => Ok(()),
        }
    }

    /// Adds `n` bytes to the tenant's reserved total, refusing if that passes its quota.
    fn reserve(&mut self, n: u64) -> Result<()> {
        let total = self.tenant.uploads.reserved.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        self.reserved += n;
        let Some(quota) = self.policy.disk_quota_bytes else { return Ok(()) };
        let needed = self.used_at_start.saturating_add(total);
        if needed > quota {
            return Err(disk_quota_exceeded(&self.tenant_id, self.used_at_start, needed, quota));
        }
        Ok(())
    }

    /// Appends accepted bytes to the temporary file (blocking: run it on the background
    /// pool). They are hashed and written a piece at a time, giving the core away
    /// between pieces (`background::give_way_if_due`).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        let blob = self.blob.as_mut().ok_or_else(|| PlatformError::internal("uploading", "the upload is stored"))?;
        for piece in bytes.chunks(WRITE_PIECE_BYTES) {
            blob.write(piece)?;
            crate::background::give_way_if_due();
        }
        Ok(())
    }
}

/// Bytes an upload hashes and writes between chances to give its core away (~0.1 ms of
/// SHA-256).
const WRITE_PIECE_BYTES: usize = 128 << 10;

impl Drop for ArtifactUpload {
    fn drop(&mut self) {
        self.tenant.uploads.reserved.fetch_sub(self.reserved, Ordering::Relaxed);
    }
}

fn disk_quota_exceeded(tenant: &str, used: u64, needed: u64, quota: u64) -> PlatformError {
    PlatformError::Registry(RegistryError::DiskQuotaExceeded {
        tenant: tenant.to_owned(),
        used_bytes: used,
        needed_bytes: needed,
        quota_bytes: quota,
    })
}

impl Platform {
    /// Begins an upload of artifact `artifact` to `tenant`'s function `name`, whose body
    /// declares `declared` bytes if it says: refused at once if the function does not
    /// exist, the tenant has as many uploads in flight as it may, or the declared size
    /// would take it above its disk quota. Blocking (short).
    pub fn begin_upload(
        &self,
        tenant: &str,
        name: &str,
        artifact: &str,
        declared: Option<u64>,
    ) -> Result<ArtifactUpload> {
        validate_artifact_name(artifact)?;
        self.registry.get_function(tenant, name)?;
        let runtime = self.tenant_runtime(tenant)?;
        let slot = runtime.uploads.try_acquire()?;
        let policy = runtime.policy.storage();
        let used_at_start = self.registry.tenant_disk_usage(tenant)?;
        let weights = self.artifact_budget(tenant, name, artifact)?;
        let mut upload = ArtifactUpload {
            blob: Some(self.registry.begin_upload()?),
            tenant_id: tenant.to_owned(),
            function: name.to_owned(),
            artifact: artifact.to_owned(),
            tenant: runtime,
            policy,
            used_at_start,
            reserved: 0,
            received: 0,
            weights,
            _slot: slot,
        };
        if let Some(n) = declared {
            if let Some(budget) = &upload.weights {
                budget.check(n)?;
            }
            upload.reserve(n)?;
        }
        Ok(upload)
    }

    /// An upload of `bytes`, all in hand, from begin to finish (in-process callers and
    /// tests; the HTTP layer streams). Blocking.
    pub fn put_artifact(&self, tenant: &str, name: &str, artifact: &str, bytes: &[u8]) -> Result<FunctionVersion> {
        let mut upload = self.begin_upload(tenant, name, artifact, Some(bytes.len() as u64))?;
        upload.accept(bytes.len() as u64)?;
        upload.write(bytes)?;
        self.finish_upload(upload)
    }

    /// Stores a complete upload and returns the version that sees it: a staged newest
    /// version takes it in place (and still does not serve); otherwise a new version
    /// that serves at once. Old versions beyond the tenant's retention are pruned and
    /// their blobs reclaimed. Blocking.
    #[tracing::instrument(name = "sluice_platform.finish_upload", skip_all, fields(tenant = %upload.tenant_id, function = %upload.function, artifact = %upload.artifact), err(level = "debug", Display))]
    pub fn finish_upload(&self, mut upload: ArtifactUpload) -> Result<FunctionVersion> {
        let blob = upload.blob.take().ok_or_else(|| PlatformError::internal("uploading", "the upload is stored"))?;
        let (tenant, name) = (upload.tenant_id.as_str(), upload.function.as_str());
        // Before the registry stores it: a delete from now on keeps it from serving.
        let ticket = self.functions.begin_load();
        let written = self.registry.put_artifact_upload(tenant, name, &upload.artifact, blob, upload.policy);
        let written = self.after_write(tenant, written)?;
        drop(upload);
        self.serve_artifact_version(written.version, &ticket)
    }
}
