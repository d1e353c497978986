//! Functions, their immutable versions, artifacts and precompiled components.
//!
//! Every change to a function appends a version (see the crate docs for why artifacts
//! create versions), except a change of a *staged* version's artifacts: a staged
//! version (deployed with `staged`) does not serve, and its artifacts are added or
//! removed in place until [`Registry::publish`] makes it serve. So a component and its
//! artifacts become one version, and nothing serves before its artifacts arrive.
//! Only the newest version can be staged: a later deploy leaves an abandoned draft
//! behind, never served. Blobs are written (durably) before the metadata transaction
//! that references them, so a crash leaves at worst an unreferenced blob for
//! [`Registry::gc`].

use std::collections::BTreeMap;
use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::blobs::BlobUpload;
use crate::change::Change;
use crate::model::{
    BlobRef, Digest, FunctionOptions, FunctionRecord, FunctionSummary, FunctionVersion, NewVersion, VersionOrigin,
    now_ms, validate_artifact_name, validate_function_name, validate_tenant_id,
};
use crate::retention::{self, StoragePolicy, Written};
use crate::{Registry, RegistryError, Result, Tree, Tx, TxResult, abort};

/// The `functions` tree's value: per-function bookkeeping.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct FunctionMeta {
    tenant: String,
    name: String,
    created_ms: u64,
    latest: u32,
}

fn fn_key(tenant: &str, name: &str) -> Vec<u8> {
    format!("{tenant}/{name}").into_bytes()
}

fn fn_prefix(tenant: &str, name: &str) -> Vec<u8> {
    format!("{tenant}/{name}/").into_bytes()
}

pub(crate) fn version_key(tenant: &str, name: &str, version: u32) -> Vec<u8> {
    let mut key = fn_prefix(tenant, name);
    key.extend_from_slice(&version.to_be_bytes());
    key
}

pub(crate) fn compiled_key(tenant: &str, name: &str, version: u32, fingerprint: &str) -> Vec<u8> {
    let mut key = version_key(tenant, name, version);
    key.extend_from_slice(fingerprint.as_bytes());
    key
}

/// The change other nodes hear about when `tenant/name` changes.
fn function_changed(tenant: &str, name: &str) -> Change {
    Change::Function { tenant: tenant.to_owned(), name: name.to_owned() }
}

pub(crate) fn function_not_found(tenant: &str, name: &str) -> RegistryError {
    RegistryError::not_found(format!("function {name:?} of tenant {tenant:?}"))
}

pub(crate) fn validate_ids(tenant: &str, name: &str) -> Result<()> {
    validate_tenant_id(tenant)?;
    validate_function_name(name)
}

/// How a new version is derived from the previous one (if any), its number and the time.
type Build<'a> = dyn Fn(Option<&FunctionVersion>, u32, u64) -> Result<FunctionVersion> + 'a;

/// Whether a change makes a new version always, or changes a staged newest version in place.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Append {
    /// A deploy: always the next number.
    NewVersion,
    /// An artifact change: in place if the newest version is staged.
    InPlaceIfStaged,
}

impl Registry {
    /// Stores a component and appends it as the function's next version (creating the
    /// function at version 1). The new version inherits the previous version's artifacts.
    /// The caller validates that the bytes are a component of the right world first.
    #[tracing::instrument(name = "sluice_registry.deploy", skip(self, component, options), fields(bytes = component.len()), err(level = "debug"))]
    pub fn deploy(
        &self,
        tenant: &str,
        name: &str,
        component: &[u8],
        options: FunctionOptions,
    ) -> Result<FunctionVersion> {
        self.deploy_as(tenant, name, component, options, false)
    }

    /// Like [`Registry::deploy`]; a `staged` version does not serve until published.
    pub fn deploy_as(
        &self,
        tenant: &str,
        name: &str,
        component: &[u8],
        options: FunctionOptions,
        staged: bool,
    ) -> Result<FunctionVersion> {
        let new = NewVersion { staged, host_api: None };
        Ok(self.deploy_with(tenant, name, component, options, new, StoragePolicy::UNLIMITED)?.version)
    }

    /// Like [`Registry::deploy_as`], with what the caller read of the component (`new`),
    /// under the tenant's storage `policy`: refused
    /// ([`RegistryError::DiskQuotaExceeded`]) if it would take the tenant above its disk
    /// quota; old versions beyond the policy's count are pruned.
    pub fn deploy_with(
        &self,
        tenant: &str,
        name: &str,
        component: &[u8],
        options: FunctionOptions,
        new: NewVersion,
        policy: StoragePolicy,
    ) -> Result<Written> {
        validate_ids(tenant, name)?;
        options.validate()?;
        self.get_tenant(tenant)?;
        if policy.disk_quota_bytes.is_some() {
            // The size is known: refuse before the bytes are written (the transaction
            // checks again, against what is stored then).
            self.check_deploy_quota(tenant, name, component, policy)?;
        }
        let mut upload = self.blobs.begin()?;
        upload.write(component)?;
        let _b = self.blob_lock()?;
        let component = self.blobs.place(upload)?;
        let _w = self.write_lock();
        let w = self.write_version(tenant, name, Append::NewVersion, policy, &|prev, version, now| {
            Ok(FunctionVersion {
                tenant: tenant.to_owned(),
                function: name.to_owned(),
                version,
                component: component.clone(),
                options: options.clone(),
                artifacts: prev.map(|p| p.artifacts.clone()).unwrap_or_default(),
                origin: VersionOrigin::Deploy,
                created_ms: now,
                staged: new.staged,
                pinned: false,
                host_api: new.host_api.clone(),
            })
        })?;
        let v = &w.version;
        tracing::info!(tenant, function = name, version = v.version, staged = new.staged, host_api = ?new.host_api, digest = %v.component.digest, pruned = ?w.pruned, "deployed");
        Ok(w)
    }

    /// Stores an artifact and appends a version that sees it (same component and options
    /// as the newest version; an artifact of the same name is replaced).
    pub fn put_artifact(&self, tenant: &str, name: &str, artifact: &str, bytes: &[u8]) -> Result<FunctionVersion> {
        self.put_artifacts(tenant, name, &[(artifact, bytes)])
    }

    /// Like [`Registry::put_artifact`], streaming the bytes from `reader` to disk.
    pub fn put_artifact_reader(
        &self,
        tenant: &str,
        name: &str,
        artifact: &str,
        reader: impl Read,
    ) -> Result<FunctionVersion> {
        validate_ids(tenant, name)?;
        validate_artifact_name(artifact)?;
        self.function_meta(tenant, name)?;
        let upload = self.blobs.upload_from(reader)?;
        Ok(self.put_artifact_upload(tenant, name, artifact, upload, StoragePolicy::UNLIMITED)?.version)
    }

    /// Stores a complete [`BlobUpload`] (from [`Registry::begin_upload`]) as artifact
    /// `artifact` of the function's newest version, like [`Registry::put_artifact`],
    /// under the tenant's storage `policy`. Only placing the file and committing the
    /// version take the blob lock, not the writing of the bytes.
    pub fn put_artifact_upload(
        &self,
        tenant: &str,
        name: &str,
        artifact: &str,
        upload: BlobUpload,
        policy: StoragePolicy,
    ) -> Result<Written> {
        validate_ids(tenant, name)?;
        validate_artifact_name(artifact)?;
        self.function_meta(tenant, name)?;
        let _b = self.blob_lock()?;
        let blob = self.blobs.place(upload)?;
        self.append_artifacts(tenant, name, vec![(artifact.to_owned(), blob)], policy)
    }

    /// Stores several artifacts and appends one version that sees all of them.
    #[tracing::instrument(name = "sluice_registry.put_artifacts", skip_all, fields(tenant, function = name), err(level = "debug"))]
    pub fn put_artifacts(&self, tenant: &str, name: &str, artifacts: &[(&str, &[u8])]) -> Result<FunctionVersion> {
        validate_ids(tenant, name)?;
        if artifacts.is_empty() {
            return Err(RegistryError::InvalidInput("no artifacts given".into()));
        }
        for (artifact, _) in artifacts {
            validate_artifact_name(artifact)?;
        }
        self.function_meta(tenant, name)?;
        let mut uploads = Vec::with_capacity(artifacts.len());
        for (artifact, bytes) in artifacts {
            let mut upload = self.blobs.begin()?;
            upload.write(bytes)?;
            uploads.push(((*artifact).to_owned(), upload));
        }
        let _b = self.blob_lock()?;
        let mut blobs = Vec::with_capacity(uploads.len());
        for (artifact, upload) in uploads {
            blobs.push((artifact, self.blobs.place(upload)?));
        }
        Ok(self.append_artifacts(tenant, name, blobs, StoragePolicy::UNLIMITED)?.version)
    }

    /// Caller holds the blob lock; the blobs are stored.
    fn append_artifacts(
        &self,
        tenant: &str,
        name: &str,
        blobs: Vec<(String, BlobRef)>,
        policy: StoragePolicy,
    ) -> Result<Written> {
        let names: Vec<String> = blobs.iter().map(|(n, _)| n.clone()).collect();
        let _w = self.write_lock();
        let w = self.write_version(tenant, name, Append::InPlaceIfStaged, policy, &|prev, version, now| {
            let prev = prev.ok_or_else(|| function_not_found(tenant, name))?;
            let mut artifacts = prev.artifacts.clone();
            artifacts.extend(blobs.iter().cloned());
            Ok(FunctionVersion {
                version,
                artifacts,
                // A draft stays what it was (a deploy) while its artifacts arrive.
                origin: if prev.staged {
                    prev.origin.clone()
                } else {
                    VersionOrigin::Artifacts { names: names.clone() }
                },
                created_ms: now,
                // A new version starts unpinned; a draft changed in place stays as it was.
                pinned: prev.staged && prev.pinned,
                ..prev.clone()
            })
        })?;
        tracing::info!(tenant, function = name, version = w.version.version, ?names, pruned = ?w.pruned, "artifacts added");
        Ok(w)
    }

    /// Writes the next version of `tenant/name` (or changes its staged draft in place)
    /// in one transaction with what `policy` prunes, refusing a write that would take
    /// the tenant above its disk quota (unless it adds nothing). Caller holds the write lock.
    fn write_version(
        &self,
        tenant: &str,
        name: &str,
        how: Append,
        policy: StoragePolicy,
        build: &Build<'_>,
    ) -> Result<Written> {
        self.commit(|tx| {
            let tenant_versions: Vec<FunctionVersion> =
                tx.scan_json(Tree::Versions, format!("{tenant}/").as_bytes())?.into_iter().map(|(_, v)| v).collect();
            let compiled_keys = tx.keys(Tree::Compiled, &fn_prefix(tenant, name))?;
            let used_before = retention::disk_usage(&tenant_versions);
            let version = append(tx, tenant, name, how, build)?;
            let after = retention::after_write(&tenant_versions, &version, policy.keep_versions);
            for &p in &after.pruned {
                let key = version_key(tenant, name, p);
                tx.remove(Tree::Versions, &key)?;
                for k in compiled_keys.iter().filter(|k| k.starts_with(&key)) {
                    tx.remove(Tree::Compiled, k)?;
                }
            }
            if let Some(e) = policy.refusal(tenant, used_before, after.used_bytes) {
                return abort(e);
            }
            Ok(Written { version, pruned: after.pruned, disk_used_bytes: after.used_bytes })
        })
    }

    /// Refuses ([`RegistryError::DiskQuotaExceeded`]) a deploy of `component` to
    /// `tenant/name` that would take the tenant above its disk quota after the retention
    /// policy pruned what it would prune, so a caller can refuse before costly work
    /// (compiling); [`Registry::deploy_with`] checks again.
    pub fn check_deploy_quota(&self, tenant: &str, name: &str, component: &[u8], policy: StoragePolicy) -> Result<()> {
        validate_ids(tenant, name)?;
        if policy.disk_quota_bytes.is_none() {
            return Ok(());
        }
        let tenant_versions: Vec<FunctionVersion> = self
            .store
            .scan_json(Tree::Versions, format!("{tenant}/").as_bytes())?
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        let prev = tenant_versions.iter().filter(|v| v.function == name).max_by_key(|v| v.version);
        let next = FunctionVersion {
            tenant: tenant.to_owned(),
            function: name.to_owned(),
            version: prev.map_or(1, |p| p.version.saturating_add(1)),
            component: BlobRef { digest: Digest::of(component), size: component.len() as u64 },
            options: FunctionOptions::default(),
            artifacts: prev.map(|p| p.artifacts.clone()).unwrap_or_default(),
            origin: VersionOrigin::Deploy,
            created_ms: 0,
            staged: false,
            pinned: false,
            host_api: None,
        };
        let used = retention::disk_usage(&tenant_versions);
        let after = retention::after_write(&tenant_versions, &next, policy.keep_versions);
        policy.refusal(tenant, used, after.used_bytes).map_or(Ok(()), Err)
    }

    /// Pins (or unpins) `version`: a pinned version is never pruned by the retention policy.
    #[tracing::instrument(name = "sluice_registry.set_pinned", skip(self), err(level = "debug"))]
    pub fn set_pinned(&self, tenant: &str, name: &str, version: u32, pinned: bool) -> Result<FunctionVersion> {
        validate_ids(tenant, name)?;
        let _w = self.write_lock();
        self.commit(|tx| {
            let key = version_key(tenant, name, version);
            let Some(mut v) = tx.get_json::<FunctionVersion>(Tree::Versions, &key)? else {
                return abort(RegistryError::not_found(format!("version {version} of function {name:?}")));
            };
            v.pinned = pinned;
            tx.put_json(Tree::Versions, &key, &v)?;
            tx.notify(function_changed(tenant, name));
            Ok(v)
        })
    }

    /// Appends a version without `artifact`.
    #[tracing::instrument(name = "sluice_registry.remove_artifact", skip(self), err(level = "debug"))]
    pub fn remove_artifact(&self, tenant: &str, name: &str, artifact: &str) -> Result<FunctionVersion> {
        validate_ids(tenant, name)?;
        validate_artifact_name(artifact)?;
        let _w = self.write_lock();
        self.commit(|tx| {
            append(tx, tenant, name, Append::InPlaceIfStaged, &|prev, version, now| {
                let prev = prev.ok_or_else(|| function_not_found(tenant, name))?;
                let mut artifacts: BTreeMap<String, BlobRef> = prev.artifacts.clone();
                if artifacts.remove(artifact).is_none() {
                    return Err(RegistryError::not_found(format!("artifact {artifact:?} of function {name:?}")));
                }
                Ok(FunctionVersion {
                    version,
                    artifacts,
                    origin: if prev.staged {
                        prev.origin.clone()
                    } else {
                        VersionOrigin::ArtifactRemoved { name: artifact.to_owned() }
                    },
                    created_ms: now,
                    pinned: prev.staged && prev.pinned,
                    ..prev.clone()
                })
            })
        })
    }

    /// Makes staged `version` (the newest) the serving version. Publishing a version
    /// that is already published is a no-op (so a retried publish succeeds); an older
    /// draft is refused ([`RegistryError::InvalidInput`]).
    #[tracing::instrument(name = "sluice_registry.publish", skip(self), err(level = "debug"))]
    pub fn publish(&self, tenant: &str, name: &str, version: u32) -> Result<FunctionVersion> {
        validate_ids(tenant, name)?;
        let _w = self.write_lock();
        self.commit(|tx| {
            let Some(meta) = tx.get_json::<FunctionMeta>(Tree::Functions, &fn_key(tenant, name))? else {
                return abort(function_not_found(tenant, name));
            };
            let key = version_key(tenant, name, version);
            let Some(mut v) = tx.get_json::<FunctionVersion>(Tree::Versions, &key)? else {
                return abort(RegistryError::not_found(format!("version {version} of function {name:?}")));
            };
            if v.staged && version != meta.latest {
                return abort(RegistryError::InvalidInput(format!(
                    "version {version} of function {name:?} is an abandoned draft (version {} is newer); \
                     only the newest version can be published",
                    meta.latest
                )));
            }
            v.staged = false;
            tx.put_json(Tree::Versions, &key, &v)?;
            tx.notify(function_changed(tenant, name));
            Ok(v)
        })
    }

    fn function_meta(&self, tenant: &str, name: &str) -> Result<FunctionMeta> {
        self.store.get_json(Tree::Functions, &fn_key(tenant, name))?.ok_or_else(|| function_not_found(tenant, name))
    }

    /// A function with all its versions.
    pub fn get_function(&self, tenant: &str, name: &str) -> Result<FunctionRecord> {
        validate_ids(tenant, name)?;
        let meta: FunctionMeta = self
            .store
            .get_json(Tree::Functions, &fn_key(tenant, name))?
            .ok_or_else(|| function_not_found(tenant, name))?;
        let versions: Vec<FunctionVersion> =
            self.store.scan_json(Tree::Versions, &fn_prefix(tenant, name))?.into_iter().map(|(_, v)| v).collect();
        if versions.is_empty() {
            // Deleted between the two reads (by another thread or node), or broken.
            self.function_meta(tenant, name)?;
            return Err(RegistryError::Corrupt(format!("function {tenant}/{name} has no versions")));
        }
        Ok(FunctionRecord { tenant: meta.tenant, name: meta.name, created_ms: meta.created_ms, versions })
    }

    /// One version of a function.
    pub fn get_version(&self, tenant: &str, name: &str, version: u32) -> Result<FunctionVersion> {
        validate_ids(tenant, name)?;
        self.store.get_json(Tree::Versions, &version_key(tenant, name, version))?.ok_or_else(|| {
            RegistryError::not_found(format!("version {version} of function {name:?} of tenant {tenant:?}"))
        })
    }

    /// The version of a function that serves: its newest published one.
    /// [`RegistryError::NotFound`] while every version is staged.
    pub fn latest_version(&self, tenant: &str, name: &str) -> Result<FunctionVersion> {
        validate_ids(tenant, name)?;
        let summary = self.summary(self.function_meta(tenant, name)?)?;
        summary.serving.ok_or_else(|| {
            RegistryError::not_found(format!(
                "a published version of function {name:?} (version {} is staged: publish it)",
                summary.latest.version
            ))
        })
    }

    /// A tenant's functions, by name, each with its newest version.
    pub fn list_functions(&self, tenant: &str) -> Result<Vec<FunctionSummary>> {
        self.get_tenant(tenant)?;
        self.summaries(format!("{tenant}/").as_bytes())
    }

    /// Every tenant's functions, including those with only staged versions (warm-up
    /// loads each one's serving version).
    pub fn all_functions(&self) -> Result<Vec<FunctionSummary>> {
        self.summaries(b"")
    }

    fn summaries(&self, prefix: &[u8]) -> Result<Vec<FunctionSummary>> {
        self.store
            .scan_json::<FunctionMeta>(Tree::Functions, prefix)?
            .into_iter()
            .map(|(_, m)| self.summary(m))
            .collect()
    }

    fn summary(&self, meta: FunctionMeta) -> Result<FunctionSummary> {
        let get = |n: u32| {
            self.store
                .get_json::<FunctionVersion>(Tree::Versions, &version_key(&meta.tenant, &meta.name, n))?
                .ok_or_else(|| {
                    RegistryError::Corrupt(format!("function {}/{} lacks version {n}", meta.tenant, meta.name))
                })
        };
        let latest = get(meta.latest)?;
        // Drafts are rare and few: walk down from the newest to the first published one.
        let mut serving = None;
        let mut n = meta.latest;
        let mut v = latest.clone();
        loop {
            if !v.staged {
                serving = Some(v);
                break;
            }
            if n <= 1 {
                break;
            }
            n -= 1;
            v = get(n)?;
        }
        Ok(FunctionSummary { tenant: meta.tenant, name: meta.name, created_ms: meta.created_ms, latest, serving })
    }

    /// Deletes a function and all its versions and compiled entries (blobs stay until gc).
    #[tracing::instrument(name = "sluice_registry.delete_function", skip(self), err(level = "debug"))]
    pub fn delete_function(&self, tenant: &str, name: &str) -> Result<()> {
        validate_ids(tenant, name)?;
        let _w = self.write_lock();
        let prefix = fn_prefix(tenant, name);
        let key = fn_key(tenant, name);
        self.commit(|tx| {
            let version_keys = tx.keys(Tree::Versions, &prefix)?;
            let compiled_keys = tx.keys(Tree::Compiled, &prefix)?;
            if !tx.remove(Tree::Functions, &key)? {
                return abort(function_not_found(tenant, name));
            }
            for k in &version_keys {
                tx.remove(Tree::Versions, k)?;
            }
            for k in &compiled_keys {
                tx.remove(Tree::Compiled, k)?;
            }
            tx.notify(function_changed(tenant, name));
            Ok(())
        })
    }
}

/// Appends the next version of `tenant/name` inside a transaction (or, for an artifact
/// change of a staged newest version, replaces that version in place).
fn append(tx: &Tx<'_>, tenant: &str, name: &str, how: Append, build: &Build<'_>) -> TxResult<FunctionVersion> {
    if tx.get(Tree::Tenants, tenant.as_bytes())?.is_none() {
        return abort(RegistryError::not_found(format!("tenant {tenant:?}")));
    }
    let key = fn_key(tenant, name);
    let meta: Option<FunctionMeta> = tx.get_json(Tree::Functions, &key)?;
    let prev: Option<FunctionVersion> = match &meta {
        None => None,
        Some(m) => match tx.get_json(Tree::Versions, &version_key(tenant, name, m.latest))? {
            Some(v) => Some(v),
            None => {
                return abort(RegistryError::Corrupt(format!("function {tenant}/{name} lacks version {}", m.latest)));
            }
        },
    };
    let in_place = how == Append::InPlaceIfStaged && prev.as_ref().is_some_and(|p| p.staged);
    let next = |m: &FunctionMeta| if in_place { Some(m.latest) } else { m.latest.checked_add(1) };
    let Some(number) = meta.as_ref().map_or(Some(1), next) else {
        return abort(RegistryError::InvalidInput(format!("function {name:?} has too many versions")));
    };
    let now = now_ms();
    let version = build(prev.as_ref(), number, now).or_else(abort)?;
    let meta = FunctionMeta {
        tenant: tenant.to_owned(),
        name: name.to_owned(),
        created_ms: meta.map_or(now, |m| m.created_ms),
        latest: number,
    };
    tx.put_json(Tree::Versions, &version_key(tenant, name, number), &version)?;
    tx.put_json(Tree::Functions, &key, &meta)?;
    tx.notify(function_changed(tenant, name));
    Ok(version)
}
