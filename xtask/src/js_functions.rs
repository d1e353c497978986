//! JavaScript functions: every `functions/<name>/app.js` is built into a component with
//! componentize-js (pinned with jco in `guest-sdk/js/package.json` and its lockfile,
//! installed once with `npm ci` into the cache), against the WIT world in `host-api/wit`
//! and with the JavaScript guest SDK (`guest-sdk/js/sluice_guest`) beside the function,
//! by the driver `guest-sdk/js/build.mjs`.
//!
//! The packages go to `~/.cache/sluice/npm-componentize-js-<hash>` (or under
//! `$XDG_CACHE_HOME`), the hash of the lockfile, so a change to it installs anew; after
//! that a build needs no network: componentize-js carries the StarlingMonkey engine and
//! Wizer in its packages, and the driver never asks for AOT compilation (weval, which
//! would download a binary). Node.js 20 or later and npm are the machine's (`NODE` and
//! `NPM` name others).
//!
//! Outputs go beside the Rust functions' components:
//! `functions/target/wasm32-wasip2/<profile>/<name with - as _>.wasm`. A component newer
//! than every input (the function's directory, the SDK, the driver, the lockfile, the
//! WIT) is not rebuilt: a build takes ~10 s (Wizer snapshots the engine after the
//! module's top level has run).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{clients_venv, cmd, guest_sources};

/// The SDK's directory, relative to the repository root.
const SDK_DIR: &str = "guest-sdk/js";

/// The lockfile `npm ci` installs, in [`SDK_DIR`].
const LOCKFILE: &str = "package-lock.json";

/// The module componentize-js builds in each function's directory.
const APP: &str = "app.js";

/// The oldest Node.js major version componentize-js's dependencies support.
const MIN_NODE_MAJOR: u32 = 20;

/// Builds every JavaScript function into `out_dir`; returns the components' paths.
pub fn build(out_dir: &Path) -> Result<Vec<PathBuf>> {
    let root = cmd::repo_root();
    let functions = guest_sources::functions_with(&root.join("functions"), APP)?;
    if functions.is_empty() {
        return Ok(Vec::new());
    }
    let node = node()?;
    let node_modules = ensure_node_modules()?;
    let sdk = root.join(SDK_DIR);
    let driver = sdk.join("build.mjs");
    let wit = root.join("host-api/wit");
    fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut built = Vec::new();
    for dir in functions {
        let name = dir.file_name().and_then(|n| n.to_str()).context("a function directory without a name")?;
        if dir.join("host-api-version").exists() {
            bail!("{}: JavaScript functions build against host-api/wit only (no host-api-version)", dir.display());
        }
        let out = out_dir.join(format!("{}.wasm", name.replace('-', "_")));
        let inputs_changed = guest_sources::newest(
            &[&dir, &sdk.join("sluice_guest"), &driver, &sdk.join(LOCKFILE), &sdk.join("package.json"), &wit],
            "node_modules",
        )?;
        let fresh = fs::metadata(&out).and_then(|m| m.modified()).is_ok_and(|built| built > inputs_changed);
        if !fresh {
            eprintln!("xtask: building the JavaScript function {name} with componentize-js");
            let mut build = Command::new(&node);
            build.arg(&driver).arg(&node_modules).arg(&wit).arg("inference").arg(&dir).arg(&out);
            cmd::run(&mut build).with_context(|| format!("building {}", dir.display()))?;
        }
        built.push(out);
    }
    Ok(built)
}

/// The Node.js to run the driver with (`NODE`, default `node`), checked to be new enough.
fn node() -> Result<String> {
    let node = std::env::var("NODE").unwrap_or_else(|_| "node".into());
    let version = cmd::output(Command::new(&node).arg("--version")).with_context(|| {
        format!("running `{node} --version`: building the JavaScript functions needs Node.js {MIN_NODE_MAJOR} or later")
    })?;
    let major = version.trim().trim_start_matches('v').split('.').next().and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(major) if major >= MIN_NODE_MAJOR => Ok(node),
        _ => bail!("`{node}` is Node.js {}; componentize-js needs {MIN_NODE_MAJOR} or later", version.trim()),
    }
}

/// The `node_modules` of `npm ci` on the SDK's lockfile, in the cache: installed once per
/// lockfile (`npm-componentize-js-<hash>`).
fn ensure_node_modules() -> Result<PathBuf> {
    let sdk = cmd::repo_root().join(SDK_DIR);
    let manifest = fs::read(sdk.join("package.json")).context("reading guest-sdk/js/package.json")?;
    let lock = fs::read(sdk.join(LOCKFILE)).context("reading guest-sdk/js/package-lock.json")?;
    let dir = clients_venv::cache_dir()?.join(format!("npm-componentize-js-{:016x}", clients_venv::fnv1a(&lock)));
    // Written last: an interrupted install leaves no marker and is redone.
    let done = dir.join(".sluice-installed");
    if !done.is_file() {
        eprintln!("xtask: installing componentize-js into {} from {SDK_DIR}/{LOCKFILE} (once)", dir.display());
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        fs::write(dir.join("package.json"), &manifest)?;
        fs::write(dir.join(LOCKFILE), &lock)?;
        let npm = std::env::var("NPM").unwrap_or_else(|_| "npm".into());
        // No install scripts: every package needed ships its files (the engine, Wizer).
        cmd::run(
            Command::new(&npm)
                .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir),
        )
        .with_context(|| format!("`{npm} ci` of {SDK_DIR}/{LOCKFILE} from the npm registry"))?;
        fs::write(&done, &lock).with_context(|| format!("writing {}", done.display()))?;
    }
    Ok(dir.join("node_modules"))
}
