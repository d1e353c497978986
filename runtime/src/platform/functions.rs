//! Functions: deploy, artifacts, list/get/delete, and loading versions into the
//! [`super::cache::FunctionCache`].
//!
//! A deploy validates the component against the world and precompiles it *before*
//! anything is stored, so a bad upload changes nothing; then the registry stores the
//! component (a new immutable version) and the compiled form for this engine's
//! fingerprint, both flushed to disk before the call returns. At start-up
//! [`Platform::warm_up`] loads every function's newest version from its stored compiled
//! form, compiling (and storing) only where none exists for this engine; the two paths
//! are counted separately in [`super::Status`].
//!
//! A version requested by number that does not serve (an old one, or a staged draft) is
//! loaded once and kept among its tenant's few other versions (`super::cache`). Every
//! version's weights are charged to its tenant's [`super::weights::WeightLedger`] before
//! they are placed on a device: a tenant's artifacts never take more device room than
//! its quota. An artifact upload is refused while it streams, before it is stored, once
//! the version it would make could not be placed within the quota.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use sluice_registry::{
    FunctionOptions, FunctionRecord, FunctionSummary, FunctionVersion, NewVersion, RegistryError, Written,
    validate_function_name,
};
use wasmtime::component::Component;

use super::cache::{self, Versioned};

/// A load's ticket for a function of the platform's cache.
pub(super) type LoadTicket<'a> = cache::LoadTicket<'a, LoadedFunction>;
use super::weights::WeightCharge;
use super::{Platform, PlatformError, Result};
use crate::engine::{
    ArtifactSet, ArtifactStats, FunctionImage, FunctionLimits, Signature, declares_serving, read_signature,
};
use crate::scheduler::Placement;

/// A version of a function, ready to run.
pub struct LoadedFunction {
    /// Its stored metadata.
    pub version: FunctionVersion,
    /// Its declared inputs and outputs (`None`: it declares none and accepts any inputs).
    pub signature: Option<Arc<Signature>>,
    pub(crate) component: Component,
    pub(crate) image: FunctionImage,
    /// The device it runs on, holding room for its weights there.
    pub(crate) placement: Placement,
    /// Its weight bytes, charged to its tenant's ledger while it is placed.
    pub(crate) weights: WeightCharge,
    /// A serving function (continuous batching): it declares itself one and imports
    /// `sluice:gpu/requests`; its requests go to its serving invocations (`serving`).
    pub(crate) serves: bool,
}

impl LoadedFunction {
    /// Counters of its shared weights.
    pub fn stats(&self) -> ArtifactStats {
        self.image.artifacts().stats()
    }
}

impl Versioned for LoadedFunction {
    fn tenant(&self) -> &str {
        &self.version.tenant
    }
    fn name(&self) -> &str {
        &self.version.function
    }
    fn number(&self) -> u32 {
        self.version.version
    }
}

/// A function's record plus what is loaded of it.
#[derive(Debug, Serialize)]
pub struct FunctionInfo {
    #[serde(flatten)]
    pub record: FunctionRecord,
    /// The loaded (serving) version and its weight counters, if loaded.
    pub loaded: Option<LoadedInfo>,
}

/// The serving version's load state.
#[derive(Debug, Serialize)]
pub struct LoadedInfo {
    pub version: u32,
    #[serde(flatten)]
    pub stats: ArtifactStats,
}

/// What start-up loading did.
#[derive(Debug, Default, Serialize)]
pub struct WarmReport {
    /// Functions loaded from their stored compiled form.
    pub from_cache: usize,
    /// Functions that had to be compiled.
    pub compiled: usize,
    /// Functions that could not be loaded (logged).
    pub failed: usize,
}

impl Platform {
    /// Loads every function's newest version; marks the platform ready.
    pub fn warm_up(&self) -> Result<WarmReport> {
        let mut report = WarmReport::default();
        for summary in self.registry.all_functions()? {
            let Some(v) = &summary.serving else { continue }; // only staged versions: nothing serves
            let ticket = self.functions.begin_load();
            match self.component_for(v).and_then(|(c, compiled)| Ok((self.load(v, c, true)?, compiled))) {
                Ok((loaded, compiled)) => {
                    if compiled {
                        report.compiled += 1;
                    } else {
                        report.from_cache += 1;
                    }
                    self.install(loaded, &ticket);
                }
                Err(e) => {
                    report.failed += 1;
                    tracing::error!(tenant = %v.tenant, function = %v.function, version = v.version, error = %e, "could not load function");
                }
            }
        }
        self.ready.store(true, Ordering::Release);
        tracing::info!(?report, "functions loaded");
        Ok(report)
    }

    /// Validates, precompiles and durably stores `wasm` as the next version of
    /// `tenant/name`, and makes it the serving version.
    pub fn deploy(
        &self,
        tenant: &str,
        name: &str,
        wasm: &[u8],
        options: FunctionOptions,
    ) -> Result<Arc<LoadedFunction>> {
        let ticket = self.functions.begin_load();
        let (v, compiled) = self.store(tenant, name, wasm, options, false)?;
        let loaded = self.load(&v, self.deserialize(&compiled)?, true)?;
        self.install(loaded.clone(), &ticket);
        Ok(loaded)
    }

    /// Like [`Platform::deploy`], but the new version is staged: it does not serve, and
    /// artifact uploads complete it in place, until [`Platform::publish`].
    pub fn stage(&self, tenant: &str, name: &str, wasm: &[u8], options: FunctionOptions) -> Result<FunctionVersion> {
        Ok(self.store(tenant, name, wasm, options, true)?.0)
    }

    /// Makes the staged `version` of `tenant/name` serve.
    #[tracing::instrument(name = "sluice_platform.publish", skip(self), err(level = "debug", Display))]
    pub fn publish(&self, tenant: &str, name: &str, version: u32) -> Result<Arc<LoadedFunction>> {
        let ticket = self.functions.begin_load();
        let v = self.registry.publish(tenant, name, version)?;
        let (component, _) = self.component_for(&v)?;
        let loaded = self.load(&v, component, true)?;
        self.install(loaded.clone(), &ticket);
        Ok(loaded)
    }

    /// Validates, precompiles and durably stores `wasm` (and its compiled form) as the
    /// next version of `tenant/name`; returns the version and the compiled bytes.
    #[tracing::instrument(name = "sluice_platform.deploy", skip(self, wasm, options), fields(bytes = wasm.len()), err(level = "debug", Display))]
    fn store(
        &self,
        tenant: &str,
        name: &str,
        wasm: &[u8],
        options: FunctionOptions,
        staged: bool,
    ) -> Result<(FunctionVersion, Vec<u8>)> {
        validate_function_name(name)?;
        options.validate()?;
        if options.memory_limit_bytes > self.config.max_memory_bytes as u64 {
            return Err(PlatformError::InvalidRequest(format!(
                "memory_limit_bytes {} is above this server's ceiling of {} bytes",
                options.memory_limit_bytes, self.config.max_memory_bytes
            )));
        }
        self.registry.get_tenant(tenant)?;
        let policy = self.tenant_runtime(tenant)?.policy.storage();
        // Over its disk quota, a tenant is refused before it costs a compilation.
        self.registry.check_deploy_quota(tenant, name, wasm, policy)?;
        let compiled = self.engine.precompile(wasm)?;
        // After the engine's checks, which say best what is wrong with a file that is
        // not a component at all.
        read_signature(wasm)?;
        self.count(|c| &c.compilations);
        let new = NewVersion { staged, host_api: compiled.host_api.as_ref().map(ToString::to_string) };
        let written = self.registry.deploy_with(tenant, name, wasm, options, new, policy);
        let v = self.after_write(tenant, written)?.version;
        self.registry.store_compiled(tenant, name, v.version, &self.fingerprint, &compiled.bytes)?;
        Ok((v, compiled.bytes))
    }

    /// Makes `v`, a version that just received an artifact, serve (unless it is staged);
    /// `ticket` was taken before the registry stored it.
    pub(super) fn serve_artifact_version(
        &self,
        v: FunctionVersion,
        ticket: &LoadTicket<'_>,
    ) -> Result<FunctionVersion> {
        if v.staged {
            return Ok(v);
        }
        let (tenant, name) = (v.tenant.as_str(), v.function.as_str());
        let cached = self.cached(tenant, name).filter(|l| l.version.component.digest == v.component.digest);
        let component = match cached {
            Some(l) => {
                // Same component: store its compiled form for the new version too, so a
                // restart loads it without compiling.
                let bytes = l.component.serialize().map_err(|e| PlatformError::internal("serialising", e))?;
                self.registry.store_compiled(tenant, name, v.version, &self.fingerprint, &bytes)?;
                l.component.clone()
            }
            None => self.component_for(&v)?.0,
        };
        let loaded = self.load(&v, component, true)?;
        self.install(loaded, ticket);
        Ok(v)
    }

    /// What an upload of `artifact` to `tenant/name` may hold before the version it
    /// makes (the newest one's artifacts plus it) could not be placed within the
    /// tenant's quota; `None`: no quota.
    pub(super) fn artifact_budget(&self, tenant: &str, name: &str, artifact: &str) -> Result<Option<UploadBudget>> {
        let record = match self.registry.get_function(tenant, name) {
            Ok(r) => r,
            Err(_) => return Ok(None), // the registry says what is wrong, before reading the body
        };
        let latest = record.latest();
        let kept: u64 = latest.artifacts.iter().filter(|(n, _)| n.as_str() != artifact).map(|(_, b)| b.size).sum();
        let tenant_rt = self.tenant_runtime(tenant)?;
        let Some(quota) = tenant_rt.policy.memory_quota_bytes else { return Ok(None) };
        // A staged draft is placed only once published: only the quota itself bounds it now.
        let room = if latest.staged {
            quota
        } else {
            // The version it replaces goes, and the tenant's other versions give way (`load`).
            let held = |l: &Arc<LoadedFunction>| l.weights.bytes_in(&tenant_rt.weights);
            let replacing = self.cached(tenant, name).as_ref().map_or(0, held);
            let evictable: u64 = self.functions.others(tenant).iter().map(held).sum();
            tenant_rt.weights.room(replacing + evictable).unwrap_or(quota)
        };
        Ok(Some(UploadBudget { kept, quota, room }))
    }

    /// Follows up a write of a version: records the tenant's disk usage and reclaims
    /// the blobs of what retention pruned; after a refusal by the disk quota, reclaims
    /// the blob that was stored for it (its metadata was never committed).
    pub(super) fn after_write(&self, tenant: &str, written: sluice_registry::Result<Written>) -> Result<Written> {
        match written {
            Ok(w) => {
                if let Ok(t) = self.tenant_runtime(tenant) {
                    t.disk_used.store(w.disk_used_bytes, Ordering::Relaxed);
                }
                if !w.pruned.is_empty() {
                    self.collect_garbage();
                }
                Ok(w)
            }
            Err(e @ RegistryError::DiskQuotaExceeded { .. }) => {
                self.collect_garbage();
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Pins (or unpins) a version of `tenant/name`: a pinned version is never pruned.
    pub fn set_pinned(&self, tenant: &str, name: &str, version: u32, pinned: bool) -> Result<FunctionVersion> {
        Ok(self.registry.set_pinned(tenant, name, version, pinned)?)
    }

    /// Records `tenant`'s disk usage as the registry counts it now (after a delete).
    pub(super) fn refresh_disk_usage(&self, tenant: &str) {
        if let (Ok(t), Ok(used)) = (self.tenant_runtime(tenant), self.registry.tenant_disk_usage(tenant)) {
            t.disk_used.store(used, Ordering::Relaxed);
        }
    }

    /// A tenant's functions, each with its newest version.
    pub fn list_functions(&self, tenant: &str) -> Result<Vec<FunctionSummary>> {
        Ok(self.registry.list_functions(tenant)?)
    }

    /// One function with all its versions and its load state.
    pub fn function_info(&self, tenant: &str, name: &str) -> Result<FunctionInfo> {
        let record = self.registry.get_function(tenant, name)?;
        let loaded = self.cached(tenant, name).map(|l| LoadedInfo { version: l.version.version, stats: l.stats() });
        Ok(FunctionInfo { record, loaded })
    }

    /// Deletes a function with all its versions; in-flight invocations finish. A load of
    /// it that began before never installs (see `super::cache`).
    #[tracing::instrument(name = "sluice_platform.delete_function", skip(self), err(level = "debug", Display))]
    pub fn delete_function(&self, tenant: &str, name: &str) -> Result<()> {
        self.registry.delete_function(tenant, name)?;
        self.functions.remove(tenant, name);
        self.metrics.forget(tenant, Some(name));
        self.collect_garbage();
        self.refresh_disk_usage(tenant);
        Ok(())
    }

    /// The serving version of `tenant/name`, loading it if it is not cached.
    pub(crate) fn loaded(&self, tenant: &str, name: &str) -> Result<Arc<LoadedFunction>> {
        if let Some(l) = self.cached(tenant, name) {
            return Ok(l);
        }
        let ticket = self.functions.begin_load();
        let v = self.registry.latest_version(tenant, name)?;
        let (component, _) = self.component_for(&v)?;
        let loaded = self.load(&v, component, true)?;
        self.install(loaded.clone(), &ticket);
        Ok(loaded)
    }

    /// Version `version` of `tenant/name` (the serving one, or `None`): the serving
    /// version from the cache; another one from the tenant's other versions, loaded
    /// and kept there if it is not among them (see `super::cache`).
    pub(crate) fn loaded_version(&self, tenant: &str, name: &str, version: Option<u32>) -> Result<Arc<LoadedFunction>> {
        let Some(wanted) = version else { return self.loaded(tenant, name) };
        if let Some(l) = self.cached(tenant, name).filter(|l| l.version.version == wanted) {
            return Ok(l);
        }
        if let Some(l) = self.functions.get_other(tenant, name, wanted) {
            return Ok(l);
        }
        let ticket = self.functions.begin_load();
        let v = self.registry.get_version(tenant, name, wanted)?;
        let serving = self.registry.latest_version(tenant, name).ok().map(|s| s.version);
        if serving == Some(wanted) {
            return self.loaded(tenant, name);
        }
        let (component, _) = self.component_for(&v)?;
        let loaded = self.load(&v, component, false)?;
        self.functions.keep_other(loaded.clone(), self.config.old_versions_per_tenant, &ticket);
        Ok(loaded)
    }

    pub(crate) fn cached(&self, tenant: &str, name: &str) -> Option<Arc<LoadedFunction>> {
        self.functions.get(tenant, name)
    }

    /// Makes `loaded` the serving version unless a newer one is already installed or
    /// its function was removed since `ticket` was taken.
    fn install(&self, loaded: Arc<LoadedFunction>, ticket: &LoadTicket<'_>) {
        if !self.functions.install(loaded, ticket) {
            tracing::debug!("a load raced a delete: not installed");
        }
    }

    pub(crate) fn forget_tenant(&self, tenant: &str) {
        self.functions.remove_tenant(tenant);
        self.tenants.lock().remove(tenant);
        self.metrics.forget(tenant, None);
    }

    /// The compiled component of `v`: from the registry's compiled form for this
    /// engine if there is one, else compiled now (and stored). The flag says it compiled.
    fn component_for(&self, v: &FunctionVersion) -> Result<(Component, bool)> {
        let (tenant, name, version) = (&v.tenant, &v.function, v.version);
        if let Some(path) = self.registry.compiled_blob(tenant, name, version, &self.fingerprint)? {
            let bytes = std::fs::read(&path).map_err(|e| PlatformError::internal("reading a compiled component", e))?;
            match self.deserialize(&bytes) {
                Ok(c) => {
                    self.count(|c| &c.compiled_loads);
                    tracing::info!(tenant, function = name, version, "loaded precompiled component (no compilation)");
                    return Ok((c, false));
                }
                Err(e) => {
                    tracing::warn!(tenant, function = name, version, error = %e, "stored compiled form unusable; recompiling")
                }
            }
        }
        let wasm = self.registry.read_blob(&v.component.digest)?;
        let compiled = self.engine.precompile(&wasm)?.bytes;
        self.count(|c| &c.compilations);
        self.registry.store_compiled(tenant, name, version, &self.fingerprint, &compiled)?;
        tracing::info!(
            tenant,
            function = name,
            version,
            "compiled component (no compiled form stored for this engine)"
        );
        Ok((self.deserialize(&compiled)?, true))
    }

    fn deserialize(&self, compiled: &[u8]) -> Result<Component> {
        self.engine.deserialize(compiled).map_err(|e| PlatformError::internal("loading a compiled component", e))
    }

    /// Pre-instantiates `component` as version `v`, with one artifact set (shared weights)
    /// charged to the tenant; `serving`: it is to replace the serving version.
    fn load(&self, v: &FunctionVersion, component: Component, serving: bool) -> Result<Arc<LoadedFunction>> {
        let wasm = self.registry.read_blob(&v.component.digest)?;
        let signature = read_signature(&wasm)?.map(Arc::new);
        let declares_serving = declares_serving(&wasm);
        drop(wasm);
        let tenant = self.tenant_runtime(&v.tenant)?;
        let files: HashMap<_, _> =
            v.artifacts.iter().map(|(name, blob)| (name.clone(), self.registry.blob_path(&blob.digest))).collect();
        // Weights count once, against the tenant's quota, on the device chosen here: the
        // quota first, so the device's room is never promised past it.
        let weight_bytes = v.artifacts.values().map(|b| b.size).sum();
        let replacing = match serving {
            true => self.cached(&v.tenant, &v.function).map_or(0, |l| l.weights.bytes_in(&tenant.weights)),
            false => 0,
        };
        let weights = match tenant.weights.charge(weight_bytes, replacing) {
            Ok(charge) => charge,
            // The tenant's other versions give way to what it asks for now.
            Err(_) if self.functions.evict_other_versions(&v.tenant) > 0 => {
                tenant.weights.charge(weight_bytes, replacing).map_err(PlatformError::WeightsOverQuota)?
            }
            Err(refused) => return Err(PlatformError::WeightsOverQuota(refused)),
        };
        let placement = self.devices.place(weight_bytes).map_err(|e| PlatformError::NoDeviceCapacity(e.to_string()))?;
        let artifacts = ArtifactSet::bounded(
            files,
            tenant.account.clone(),
            self.config.max_artifact_metadata_bytes,
            self.config.max_metadata_json_bytes,
        );
        let mut limits =
            FunctionLimits { timeout: Duration::from_millis(v.options.timeout_ms), ..FunctionLimits::default() };
        limits.sandbox.memory_bytes = usize::try_from(v.options.memory_limit_bytes).unwrap_or(usize::MAX);
        let image = self.engine.prepare_for_tenant(&v.tenant, v.function.clone(), &component, artifacts, limits)?;
        let serves = declares_serving && image.imports_requests();
        Ok(Arc::new(LoadedFunction { version: v.clone(), signature, component, image, placement, weights, serves }))
    }

    /// Reclaims unreferenced blobs; failures are only logged.
    pub(crate) fn collect_garbage(&self) {
        if let Err(e) = self.registry.gc() {
            tracing::warn!(error = %e, "registry gc failed");
        }
    }
}

/// What an artifact upload may hold (see [`Platform::artifact_budget`]).
#[derive(Clone, Copy)]
pub(super) struct UploadBudget {
    /// Bytes of the version's other artifacts.
    kept: u64,
    /// The tenant's quota.
    quota: u64,
    /// What the version may place now.
    room: u64,
}

impl UploadBudget {
    /// Refuses an upload once `received` bytes of it make a version that could not be
    /// placed within its tenant's quota, so the blob is never stored.
    pub(super) fn check(&self, received: u64) -> Result<()> {
        let needed = self.kept.saturating_add(received);
        if needed > self.room {
            let placed = self.quota.saturating_sub(self.room);
            return Err(PlatformError::WeightsOverQuota(super::OverQuota { needed, quota: self.quota, placed }));
        }
        Ok(())
    }
}
