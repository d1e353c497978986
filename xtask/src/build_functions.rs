//! `cargo xtask build-functions`: builds every crate of the `functions/` workspace
//! into a WebAssembly component and checks that each output is one.
//!
//! The build runs in `functions/` (its own workspace and `functions/target`), with
//! `RUSTFLAGS`/`CARGO_ENCODED_RUSTFLAGS` removed so host-only flags never reach the
//! wasm build. Outputs: `functions/target/wasm32-wasip2/release/<crate_name>.wasm`,
//! where `<crate_name>` is the package name with `-` replaced by `_`. Python functions
//! (`functions/<name>/app.py`) are built beside them by [`crate::python_functions`],
//! JavaScript functions (`functions/<name>/app.js`) by [`crate::js_functions`], and the
//! examples are written as bundles by [`crate::bundles`].

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::setup::{self, WASM_TARGET};
use crate::{bundles, cmd, js_functions, python_functions};

/// The first 8 bytes of a component: `\0asm`, version 0x0d, layer 1.
const COMPONENT_MAGIC: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

/// Runs `build-functions` (`--debug` builds the dev profile instead of release) and
/// returns the path of each built component.
pub fn run(args: &[String]) -> Result<Vec<PathBuf>> {
    let mut release = true;
    for arg in args {
        match arg.as_str() {
            "--debug" => release = false,
            other => bail!("build-functions: unknown argument `{other}` (known: --debug)"),
        }
    }
    setup::ensure_wasm_target()?;

    let dir = cmd::repo_root().join("functions");
    let target_dir = dir.join("target");
    let mut build = cmd::cargo();
    build
        .current_dir(&dir)
        .args(["build", "--target", WASM_TARGET, "--target-dir"])
        .arg(&target_dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET");
    if release {
        build.arg("--release");
    }
    cmd::run(&mut build)?;

    let out_dir = target_dir.join(WASM_TARGET).join(if release { "release" } else { "debug" });
    let mut built = Vec::new();
    for package in member_artifacts(&dir)? {
        let path = out_dir.join(format!("{package}.wasm"));
        let size = check_component(&path)?;
        println!("{:>10} bytes  {}", size, path.display());
        built.push(path);
    }
    for path in python_functions::build(&out_dir)? {
        let size = check_component(&path)?;
        println!("{:>10} bytes  {}  (Python)", size, path.display());
        built.push(path);
    }
    for path in js_functions::build(&out_dir)? {
        let size = check_component(&path)?;
        println!("{:>10} bytes  {}  (JavaScript)", size, path.display());
        built.push(path);
    }
    let bundles = bundles::write(&out_dir, &target_dir.join("bundles"))?;
    println!("{} example bundles in {}", bundles.len(), target_dir.join("bundles").display());
    Ok(built)
}

/// Fails unless `path` is a WebAssembly component; returns its size in bytes.
fn check_component(path: &Path) -> Result<u64> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if !bytes.starts_with(&COMPONENT_MAGIC) {
        bail!("{} is not a WebAssembly component (starts with {:02x?})", path.display(), &bytes[..bytes.len().min(8)]);
    }
    Ok(bytes.len() as u64)
}

/// Component (cdylib) file stems of the members of the workspace at `dir`, in
/// `members` order; members that are plain libraries (shared guest code) are skipped.
fn member_artifacts(dir: &Path) -> Result<Vec<String>> {
    let manifest =
        fs::read_to_string(dir.join("Cargo.toml")).with_context(|| format!("reading {}/Cargo.toml", dir.display()))?;
    let members = string_list(&manifest, "members")
        .with_context(|| format!("no `members = [...]` in {}/Cargo.toml", dir.display()))?;
    let mut stems = Vec::new();
    for member in &members {
        let path = dir.join(member).join("Cargo.toml");
        let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        if !is_cdylib(&text) {
            continue;
        }
        stems.push(artifact_name(&text).with_context(|| format!("no package name in {}", path.display()))?);
    }
    Ok(stems)
}

/// Whether the manifest's `[lib]` table has `crate-type = [..., "cdylib", ...]`.
fn is_cdylib(toml: &str) -> bool {
    let mut inside = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') && !line.starts_with("[\"") {
            inside = line == "[lib]";
        } else if inside && line.starts_with("crate-type") {
            return line.contains("\"cdylib\"");
        }
    }
    false
}

/// The strings of the TOML array `key = ["a", "b", …]` (which may span lines).
fn string_list(toml: &str, key: &str) -> Option<Vec<String>> {
    let start = toml.lines().position(|l| l.trim_start().starts_with(key) && l.contains('='))?;
    let rest: String = toml.lines().skip(start).collect::<Vec<_>>().join("\n");
    let open = rest.find('[')?;
    let close = rest[open..].find(']')? + open;
    let items = rest[open + 1..close].lines().map(|l| l.split('#').next().unwrap_or("")).collect::<Vec<_>>().join(",");
    Some(items.split(',').map(|s| s.trim().trim_matches('"').to_string()).filter(|s| !s.is_empty()).collect())
}

/// The file stem cargo gives the crate's library: `[lib] name`, else the
/// `[package] name` with `-` replaced by `_`.
fn artifact_name(toml: &str) -> Option<String> {
    table_name(toml, "[lib]").or_else(|| table_name(toml, "[package]").map(|n| n.replace('-', "_")))
}

/// The `name = "…"` key of the TOML table `table` (e.g. `[package]`).
fn table_name(toml: &str, table: &str) -> Option<String> {
    let mut inside = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == table;
        } else if inside
            && let Some(value) = line.strip_prefix("name")
            && let Some(value) = value.trim_start().strip_prefix('=')
        {
            return Some(value.trim().trim_matches('"').to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_members_and_names() {
        let ws = "[workspace]\nmembers = [\n  \"echo\", # the echo\n  \"mlp\",\n]\n";
        assert_eq!(string_list(ws, "members").unwrap(), ["echo", "mlp"]);
        let one = "members = [\"a-b\", \"c\"]";
        assert_eq!(string_list(one, "members").unwrap(), ["a-b", "c"]);
        let pkg = "[package]\nname = \"bert-tokenizer\"\n";
        assert_eq!(artifact_name(pkg).unwrap(), "bert_tokenizer");
        let lib = "[package]\nname = \"a-b\"\n[lib]\nname = \"other\"\n";
        assert_eq!(artifact_name(lib).unwrap(), "other");
        assert!(!is_cdylib(pkg));
        assert!(is_cdylib("[package]\nname = \"e\"\n[lib]\ncrate-type = [\"cdylib\"]\n"));
    }
}
