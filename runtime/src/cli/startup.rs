//! What `sluice serve` does between opening the platform and being ready: the tenant
//! keys of a mounted Secret, then, behind a readiness hold while the listeners already
//! answer liveness, the stored functions' warm-up and the model directory's bundles.
//!
//! With `MODEL_INIT_MODE=sync` (the default) the bundles are read and checked before
//! the server listens, so a bad one (or a missing directory) stops it with an error
//! naming the file, as does a bundle that then fails to load; an empty directory is a
//! multi-model server's start, whose models the repository API loads. With `async` the directory may appear or
//! fill later (KServe's storage initializer still writing it): the server retries until
//! every bundle it finds serves, and stays unready until then.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::platform::bundle::{self, Bundle, BundleError};
use crate::platform::{ModelRepository, Platform};

/// `--model-init-mode` (`MODEL_INIT_MODE`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelInitMode {
    Sync,
    Async,
}

/// How often an incomplete model directory is looked at again.
const RETRY: Duration = Duration::from_millis(500);

/// The longest wait between two tries of a bundle that failed to load.
const MAX_RETRY: Duration = Duration::from_secs(10);

/// Makes every key of `dir` valid for its tenant (creating the tenant if missing).
pub fn provision_tenant_keys(platform: &Platform, dir: &Path) -> anyhow::Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading the tenant keys in {}", dir.display()))?;
    let mut files: Vec<(String, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.to_owned(), e.path())))
        .filter(|(name, path)| !name.starts_with('.') && path.is_file())
        .collect();
    files.sort();
    for (tenant, path) in files {
        let key = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        if platform.registry().get_tenant(&tenant).is_err() {
            platform
                .create_tenant(&tenant, Default::default())
                .with_context(|| format!("{}: creating tenant {tenant:?}", path.display()))?;
        }
        let added = platform
            .registry()
            .ensure_tenant_key(&tenant, key.trim())
            .with_context(|| format!("{}: the key of tenant {tenant:?}", path.display()))?;
        tracing::info!(tenant, added, "tenant key provisioned from {}", path.display());
    }
    Ok(())
}

/// The bundles to load at start.
pub enum Bundles {
    None,
    /// Read and checked already (`sync`).
    Checked(Vec<Bundle>),
    /// To be found as they appear (`async`).
    Watch(ModelRepository),
}

impl Bundles {
    /// Reads every bundle now in `sync` mode (an error names the file).
    pub fn check(platform: &Platform, mode: ModelInitMode) -> anyhow::Result<Bundles> {
        let Some(repo) = platform.model_repository().cloned() else { return Ok(Bundles::None) };
        if mode == ModelInitMode::Async {
            return Ok(Bundles::Watch(repo));
        }
        let hint = "(MODEL_INIT_MODE=async waits for it)";
        let found = bundle::discover(&repo.root, repo.root_name.as_deref())
            .with_context(|| format!("the model directory {hint}"))?;
        if found.is_empty() {
            // A multi-model server starts empty: the repository API loads its models.
            println!(
                "model directory {}: no bundle yet (a {} at its root, or in subdirectories)",
                repo.root.display(),
                bundle::MANIFEST
            );
        }
        let bundles = found
            .iter()
            .map(|f| bundle::read(&f.dir, f.name.as_deref()))
            .collect::<Result<Vec<_>, BundleError>>()
            .with_context(|| format!("a bundle of the model directory {hint}"))?;
        Ok(Bundles::Checked(bundles))
    }
}

/// Warms up the stored functions and loads `bundles` on a blocking thread while
/// readiness is held back. The future completes only if that fails for good (a
/// stored-state error, or a `sync` bundle that does not load): then the server stops.
pub fn load_in_background(
    platform: Arc<Platform>,
    bundles: Bundles,
    started: Instant,
) -> impl Future<Output = anyhow::Error> {
    let hold = platform.hold_readiness();
    let task = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let warm = platform.warm_up()?;
        println!(
            "functions: {} loaded from compiled cache, {} compiled, {} failed",
            warm.from_cache, warm.compiled, warm.failed
        );
        match bundles {
            Bundles::None => {}
            Bundles::Checked(list) => {
                for b in &list {
                    let loaded =
                        platform.load_bundle(b).with_context(|| format!("loading the bundle {}", b.dir.display()))?;
                    println!("bundle {}: {loaded:?} for tenant {} from {}", b.name, b.tenant, b.dir.display());
                }
            }
            Bundles::Watch(repo) => watch(&platform, &repo),
        }
        drop(hold);
        tracing::info!(startup_ms = started.elapsed().as_millis() as u64, ready = platform.is_ready(), "ready");
        Ok(())
    });
    async move {
        match task.await {
            Ok(Ok(())) => std::future::pending().await,
            Ok(Err(e)) => e,
            Err(e) => anyhow::anyhow!("start-up loading failed: {e}"),
        }
    }
}

/// Loads the repository's bundles as they appear, until every one found serves (and
/// there is at least one), or the server shuts down. Each new problem is logged once.
fn watch(platform: &Platform, repo: &ModelRepository) {
    let mut loaded: Vec<PathBuf> = Vec::new();
    let mut last_problem = String::new();
    let mut wait = RETRY;
    loop {
        let problem = match bundle::discover(&repo.root, repo.root_name.as_deref()) {
            Ok(found) if found.is_empty() => Some(format!("no bundle in {} yet", repo.root.display())),
            Ok(found) => {
                let mut first_problem = None;
                for f in &found {
                    if loaded.contains(&f.dir) {
                        continue;
                    }
                    let result = bundle::read(&f.dir, f.name.as_deref())
                        .map_err(|e| (e.to_string(), RETRY))
                        .and_then(|b| platform.load_bundle(&b).map(|l| (b, l)).map_err(|e| (e.to_string(), wait * 2)));
                    match result {
                        Ok((b, l)) => {
                            println!("bundle {}: {l:?} for tenant {} from {}", b.name, b.tenant, b.dir.display());
                            loaded.push(f.dir.clone());
                        }
                        Err(p) => {
                            first_problem.get_or_insert(p);
                        }
                    }
                }
                match first_problem {
                    None => return,
                    Some((p, next_wait)) => {
                        wait = next_wait.min(MAX_RETRY);
                        Some(p)
                    }
                }
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(p) = problem {
            if p != last_problem {
                tracing::warn!(problem = %p, "waiting for the model directory (MODEL_INIT_MODE=async)");
                last_problem = p;
            }
        }
        if platform.is_shutting_down() {
            return;
        }
        std::thread::sleep(wait);
    }
}
