//! `sluice bundle`: makes a function bundle (see `crate::platform::bundle`) from a
//! component and its artifacts: a directory with `sluice.toml`, the component and the
//! artifacts' files, ready for a model repository (`sluice serve --model-dir`), or for
//! an archive (`tar -C DIR -czf bundle.tgz .`) that KServe's storage initializer unpacks.
//!
//! The directory is written beside its final path and renamed into place, so a reader
//! never sees half a bundle; it is read back and checked before the command succeeds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};

use super::remote::FunctionArgs;
use crate::platform::bundle::{self, FunctionSection, Manifest};

#[derive(clap::Args, Debug)]
pub struct BundleArgs {
    /// The component (.wasm, built for wasm32-wasip2).
    component: PathBuf,
    /// The bundle directory to write.
    #[arg(long, short)]
    out: PathBuf,
    /// The owning tenant.
    #[arg(long)]
    tenant: String,
    /// The function name (default: the name it is loaded under, e.g. its directory's).
    #[arg(long)]
    name: Option<String>,
    /// How it runs, and its artifacts (each file is copied into the bundle).
    #[command(flatten)]
    function: FunctionArgs,
    /// Replace the directory if it exists.
    #[arg(long)]
    force: bool,
}

pub fn run(args: BundleArgs) -> anyhow::Result<ExitCode> {
    if args.out.exists() && !args.force {
        bail!("{} exists (--force replaces it)", args.out.display());
    }
    let component_file = file_name(&args.component)?;
    let mut copies: Vec<(PathBuf, String)> = vec![(args.component.clone(), component_file.clone())];
    let mut artifacts = BTreeMap::new();
    for spec in &args.function.artifacts {
        let (name, path) = spec.split_once('=').with_context(|| format!("--artifact {spec:?}: expected NAME=PATH"))?;
        let path = PathBuf::from(path);
        let rel = format!("artifacts/{name}/{}", file_name(&path)?);
        if artifacts.insert(name.to_owned(), rel.clone()).is_some() {
            bail!("--artifact {name:?} is given twice");
        }
        copies.push((path, rel));
    }
    let priority =
        args.function.priority.as_deref().map(|p| serde_json::from_value(serde_json::json!(p))).transpose()?;
    let manifest = Manifest {
        function: FunctionSection {
            name: args.name.clone(),
            tenant: args.tenant.clone(),
            component: Some(component_file),
            priority,
            weight: args.function.weight,
            timeout_ms: args.function.timeout_ms,
            memory_limit_bytes: args.function.memory_limit_bytes,
            max_batch_size: args.function.max_batch_size,
            max_queue_delay_us: args.function.max_queue_delay_us,
        },
        artifacts,
    };
    let parent = args.out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".sluice-bundle-")
        .tempdir_in(parent)
        .with_context(|| format!("creating a directory in {}", parent.display()))?;
    for (from, rel) in &copies {
        let to = staging.path().join(rel);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(from, &to).with_context(|| format!("copying {}", from.display()))?;
    }
    std::fs::write(staging.path().join(bundle::MANIFEST), manifest.to_toml())?;
    // Checked as a server will read it, before it takes the final name.
    let name = args.name.as_deref().or(args.out.file_name().and_then(|n| n.to_str()));
    let checked = bundle::read(staging.path(), name).context("the bundle does not check")?;
    if args.out.exists() {
        std::fs::remove_dir_all(&args.out).with_context(|| format!("replacing {}", args.out.display()))?;
    }
    std::fs::rename(staging.keep(), &args.out)
        .with_context(|| format!("moving the bundle to {}", args.out.display()))?;
    println!(
        "bundle {} for tenant {} in {} ({} artifacts)",
        checked.name,
        checked.tenant,
        args.out.display(),
        checked.artifacts.len()
    );
    Ok(ExitCode::SUCCESS)
}

fn file_name(path: &Path) -> anyhow::Result<String> {
    if !path.is_file() {
        bail!("{} is not a file", path.display());
    }
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .with_context(|| format!("{}: no file name", path.display()))
}
