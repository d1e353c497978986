//! The model repository: bundles on a read-only directory (`sluice serve --model-dir`,
//! KServe's `/mnt/models`) loaded as functions, and the KServe/Triton repository
//! extension's index, load and unload over them.
//!
//! Loading a bundle ([`Platform::load_bundle`]) is a deploy: the component and its
//! artifacts are read from the bundle (never written) and stored in the registry as a
//! new version, staged until its artifacts are in, then published, so it serves whole or
//! not at all. A bundle whose component, options and artifacts equal the serving
//! version's is left as it is (a restart over a kept data directory makes no version).
//! Its tenant is created with the server's defaults when it does not exist. Unloading is
//! a delete: the function's versions go, its instances and device memory with them.
//!
//! A tenant's key loads, unloads and lists only bundles its manifest gives to that
//! tenant; the admin's key any.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::Serialize;
use sha2::Digest as _;
use sluice_registry::{Digest, FunctionVersion, Principal, RegistryError, TenantSettings, validate_function_name};

use super::bundle::{self, Bundle, BundleError};
use super::{Platform, PlatformError, Result};

/// The model repository a server was started with.
#[derive(Debug, Clone)]
pub struct ModelRepository {
    /// Its directory.
    pub root: std::path::PathBuf,
    /// The name of a bundle at the root (`--model-name`).
    pub root_name: Option<String>,
}

/// What [`Platform::load_bundle`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Loaded {
    /// A new version was stored and serves.
    Deployed { version: u32 },
    /// The serving version is the bundle already.
    Unchanged { version: u32 },
}

/// One entry of the repository index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IndexEntry {
    pub name: String,
    /// The serving version, when one serves.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// `READY` or `UNAVAILABLE`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The repository parameters a load takes: none (a bundle says how it loads).
pub const LOAD_PARAMETERS: &[&str] = &[];

/// The repository parameters an unload takes: Triton's `unload_dependents`, which
/// changes nothing here.
pub const UNLOAD_PARAMETERS: &[&str] = &["unload_dependents"];

/// Refuses a repository call naming a parameter outside `allowed`.
pub fn check_parameters<'a>(names: impl IntoIterator<Item = &'a String>, allowed: &[&str]) -> Result<()> {
    match names.into_iter().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(PlatformError::InvalidRequest(format!(
            "parameter {k:?} is not supported: a model's bundle (sluice.toml) says how it loads"
        ))),
        None => Ok(()),
    }
}

/// Bytes of a component a bundle may hold (as an upload may).
const MAX_COMPONENT_BYTES: u64 = 256 << 20;

impl From<BundleError> for PlatformError {
    fn from(e: BundleError) -> Self {
        PlatformError::InvalidRequest(format!("bad bundle: {e}"))
    }
}

impl Platform {
    /// The model repository, if the server has one.
    pub fn model_repository(&self) -> Option<&ModelRepository> {
        self.config.model_repository.as_ref()
    }

    /// The bundle of the repository named `name` (its subdirectory), read and checked,
    /// if `who` may load it.
    pub fn repository_bundle(&self, who: &Principal, name: &str) -> Result<Bundle> {
        validate_function_name(name)?;
        let repo = self.model_repository().ok_or_else(|| {
            PlatformError::InvalidRequest("this server has no model repository (`sluice serve --model-dir`)".into())
        })?;
        let dir = repo.root.join(name);
        if !bundle::is_bundle(&dir) {
            return Err(RegistryError::NotFound {
                what: format!("model {name:?} in the repository (no {})", dir.join(bundle::MANIFEST).display()),
            }
            .into());
        }
        let bundle = bundle::read(&dir, Some(name))?;
        allowed(who, &bundle.tenant, name)?;
        Ok(bundle)
    }

    /// Loads `bundle` (see the module docs). Blocking: it compiles the component.
    #[tracing::instrument(name = "sluice_platform.load_bundle", skip_all, fields(function = %bundle.name, tenant = %bundle.tenant), err(level = "debug", Display))]
    pub fn load_bundle(&self, bundle: &Bundle) -> Result<Loaded> {
        let (tenant, name) = (bundle.tenant.as_str(), bundle.name.as_str());
        match self.registry.get_tenant(tenant) {
            Ok(_) => {}
            Err(RegistryError::NotFound { .. }) => match self.create_tenant(tenant, TenantSettings::default()) {
                Ok(_) | Err(PlatformError::Registry(RegistryError::AlreadyExists { .. })) => {
                    tracing::info!(tenant, "tenant created for a bundle");
                }
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e.into()),
        }
        let wasm = read_component(&bundle.component)?;
        if let Some(version) = self.serving_equal(bundle, &wasm)? {
            return Ok(Loaded::Unchanged { version });
        }
        let v = if bundle.artifacts.is_empty() {
            self.deploy(tenant, name, &wasm, bundle.options.clone())?.version.version
        } else {
            let staged = self.stage(tenant, name, &wasm, bundle.options.clone())?;
            for (artifact, file) in &bundle.artifacts {
                self.put_artifact_file(tenant, name, artifact, file)?;
            }
            self.publish(tenant, name, staged.version)?.version.version
        };
        tracing::info!(tenant, function = name, version = v, dir = %bundle.dir.display(), "bundle loaded");
        Ok(Loaded::Deployed { version: v })
    }

    /// Unloads `name` for `who`: deletes the function (its device memory is freed as its
    /// last invocation ends). The admin names a bundle of the repository, or a function
    /// of the one tenant that has it.
    pub fn unload(&self, who: &Principal, name: &str) -> Result<()> {
        validate_function_name(name)?;
        let tenant = match who {
            Principal::Tenant(t) => t.clone(),
            Principal::Admin => self.owner_for_admin(name)?,
        };
        self.delete_function(&tenant, name)
    }

    /// The repository's bundles and the deployed functions `who` sees, by name; with
    /// `ready_only`, only those that serve.
    pub fn repository_index(&self, who: &Principal, ready_only: bool) -> Result<Vec<IndexEntry>> {
        let mut entries: BTreeMap<String, IndexEntry> = BTreeMap::new();
        let summaries = match who {
            Principal::Tenant(t) => self.registry.list_functions(t)?,
            Principal::Admin => self.registry.all_functions()?,
        };
        for s in summaries {
            let (version, state, reason) = match &s.serving {
                Some(v) if self.cached(&s.tenant, &s.name).is_some() => (v.version.to_string(), "READY", String::new()),
                Some(v) => (v.version.to_string(), "UNAVAILABLE", "not loaded".to_owned()),
                None => (String::new(), "UNAVAILABLE", "only a staged draft".to_owned()),
            };
            entries.insert(s.name.clone(), IndexEntry { name: s.name, version, state, reason });
        }
        if let Some(repo) = self.model_repository() {
            for found in bundle::discover(&repo.root, repo.root_name.as_deref()).unwrap_or_default() {
                let read = bundle::read(&found.dir, found.name.as_deref());
                let (name, reason) = match &read {
                    Ok(b) if allowed(who, &b.tenant, &b.name).is_err() => continue,
                    Ok(b) => (b.name.clone(), "not loaded".to_owned()),
                    // A bundle too broken to say its tenant is the admin's to see.
                    Err(_) if *who != Principal::Admin => continue,
                    Err(e) => (found.name.clone().unwrap_or_default(), e.to_string()),
                };
                entries.entry(name.clone()).or_insert(IndexEntry {
                    name,
                    version: String::new(),
                    state: "UNAVAILABLE",
                    reason,
                });
            }
        }
        Ok(entries.into_values().filter(|e| !ready_only || e.state == "READY").collect())
    }

    /// Streams the file `path` into artifact `artifact` of `tenant/name`, as an upload
    /// of its size (quotas checked before it is stored). Blocking.
    fn put_artifact_file(&self, tenant: &str, name: &str, artifact: &str, path: &Path) -> Result<FunctionVersion> {
        let io = |e: std::io::Error| {
            PlatformError::from(BundleError::Invalid { path: path.to_owned(), problem: e.to_string() })
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        let mut upload = self.begin_upload(tenant, name, artifact, Some(size))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            upload.accept(n as u64)?;
            upload.write(&buf[..n])?;
        }
        self.finish_upload(upload)
    }

    /// The serving version of the bundle's function when it is the bundle already.
    fn serving_equal(&self, bundle: &Bundle, wasm: &[u8]) -> Result<Option<u32>> {
        let record = match self.registry.get_function(&bundle.tenant, &bundle.name) {
            Ok(r) => r,
            Err(RegistryError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Some(serving) = record.versions.iter().rev().find(|v| !v.staged) else { return Ok(None) };
        let same = serving.component.digest == Digest::of(wasm)
            && serving.options == bundle.options
            && serving.artifacts.len() == bundle.artifacts.len()
            && bundle.artifacts.iter().all(|(a, file)| {
                serving.artifacts.get(a).is_some_and(|b| file_digest(file).is_ok_and(|d| d == b.digest.as_str()))
            });
        Ok(same.then_some(serving.version))
    }

    /// The tenant of the repository bundle or deployed function `name`, for the admin.
    fn owner_for_admin(&self, name: &str) -> Result<String> {
        if let Some(repo) = self.model_repository()
            && let Ok(b) = bundle::read(&repo.root.join(name), Some(name))
        {
            return Ok(b.tenant);
        }
        let owners: Vec<String> =
            self.registry.all_functions()?.into_iter().filter(|s| s.name == name).map(|s| s.tenant).collect();
        match owners.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(RegistryError::NotFound { what: format!("model {name:?}") }.into()),
            _ => Err(PlatformError::InvalidRequest(format!(
                "several tenants have a function {name:?}: unload it with that tenant's key"
            ))),
        }
    }
}

/// Whether `who` may load or unload a bundle that belongs to `tenant`.
fn allowed(who: &Principal, tenant: &str, name: &str) -> Result<()> {
    match who {
        Principal::Admin => Ok(()),
        Principal::Tenant(t) if t == tenant => Ok(()),
        Principal::Tenant(_) => {
            Err(RegistryError::NotFound { what: format!("model {name:?} in the repository") }.into())
        }
    }
}

fn read_component(path: &Path) -> Result<Vec<u8>> {
    let invalid = |problem: String| PlatformError::from(BundleError::Invalid { path: path.to_owned(), problem });
    let size = std::fs::metadata(path).map_err(|e| invalid(e.to_string()))?.len();
    if size > MAX_COMPONENT_BYTES {
        return Err(invalid(format!(
            "the component is {size} bytes, above the {MAX_COMPONENT_BYTES} a bundle may hold"
        )));
    }
    std::fs::read(path).map_err(|e| invalid(e.to_string()))
}

/// The sha256 of a file, in hex, read in pieces.
fn file_digest(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hex::encode(hasher.finalize()));
        }
        hasher.update(&buf[..n]);
    }
}
