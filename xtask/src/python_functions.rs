//! Python functions: every `functions/<name>/app.py` is built into a component with
//! componentize-py (pinned in `guest-sdk/python/requirements-build.txt`, installed once
//! into a virtual environment in the cache), against the WIT world in `host-api/wit` (or
//! the frozen release its `host-api-version` file names) and with the Python guest SDK
//! (`guest-sdk/python`) on its path. A function with a file named `serving` in its
//! directory is a serving function: its component gets the `sluice:serving` custom
//! section, as the Rust SDK's `serving_function!` gives a Rust one; a `signature.json`
//! there (the host's signature JSON, `{"inputs":[…],"outputs":[…]}`) goes into the
//! `sluice:signature` section, as the Rust SDK's `signature!` puts it.
//!
//! Outputs go beside the Rust functions' components:
//! `functions/target/wasm32-wasip2/<profile>/<name with - as _>.wasm`. A component newer
//! than every input (the function's directory, the SDK, the WIT) is not rebuilt: a build
//! takes ~20 s (it pre-initialises the interpreter).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{clients_venv, cmd, guest_sources};

/// The requirements of the build tool, relative to the repository root.
pub const REQUIREMENTS: &str = "guest-sdk/python/requirements-build.txt";

/// A file in a function's directory naming the frozen host API version to build against.
const HOST_API_VERSION: &str = "host-api-version";

/// The module componentize-py imports in each function's directory.
const APP: &str = "app";

/// A file in a function's directory that makes it a serving function.
const SERVING: &str = "serving";

/// The custom section a serving function carries (the runtime's `SERVING_SECTION`).
const SERVING_SECTION: &str = "sluice:serving";

/// A file in a function's directory holding its declared signature (JSON).
const SIGNATURE: &str = "signature.json";

/// The custom section the host reads a signature from (the runtime's `SIGNATURE_SECTION`).
const SIGNATURE_SECTION: &str = "sluice:signature";

/// Builds every Python function into `out_dir`; returns the components' paths.
pub fn build(out_dir: &Path) -> Result<Vec<PathBuf>> {
    let root = cmd::repo_root();
    let functions = guest_sources::functions_with(&root.join("functions"), &format!("{APP}.py"))?;
    if functions.is_empty() {
        return Ok(Vec::new());
    }
    let python = clients_venv::ensure_venv("componentize-py", REQUIREMENTS)?;
    let tool = python.with_file_name("componentize-py");
    let sdk = root.join("guest-sdk/python");
    fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut built = Vec::new();
    for dir in functions {
        let name = dir.file_name().and_then(|n| n.to_str()).context("a function directory without a name")?;
        let out = out_dir.join(format!("{}.wasm", name.replace('-', "_")));
        let wit = wit_of(&root, &dir)?;
        let inputs_changed = guest_sources::newest(&[&dir, &sdk, &wit], "__pycache__")?;
        let fresh = fs::metadata(&out).and_then(|m| m.modified()).is_ok_and(|built| built > inputs_changed);
        if !fresh {
            eprintln!("xtask: building the Python function {name} with componentize-py");
            let mut build = Command::new(&tool);
            build
                .arg("-d")
                .arg(&wit)
                .args(["-w", "inference", "componentize", APP, "-p"])
                .arg(&dir)
                .arg("-p")
                .arg(&sdk)
                .arg("-o")
                .arg(&out)
                // Its cache of generated bindings goes to a scratch directory, not the tree.
                .current_dir(std::env::temp_dir());
            cmd::run(&mut build).with_context(|| format!("building {}", dir.display()))?;
            let mut sections = Vec::new();
            if dir.join(SERVING).is_file() {
                sections.extend(custom_section(SERVING_SECTION, &[1]));
            }
            let signature = dir.join(SIGNATURE);
            if signature.is_file() {
                let json =
                    fs::read_to_string(&signature).with_context(|| format!("reading {}", signature.display()))?;
                sections.extend(custom_section(SIGNATURE_SECTION, json.trim().as_bytes()));
            }
            if !sections.is_empty() {
                let mut wasm = fs::read(&out).with_context(|| format!("reading {}", out.display()))?;
                wasm.extend(sections);
                fs::write(&out, wasm).with_context(|| format!("writing {}", out.display()))?;
            }
        }
        built.push(out);
    }
    Ok(built)
}

/// A custom section (id 0: LEB128 size, LEB128 name length, name, payload), valid at
/// the end of a component as of a module.
fn custom_section(name: &str, payload: &[u8]) -> Vec<u8> {
    fn leb128(mut v: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    let mut section = vec![0u8];
    leb128(body.len(), &mut section);
    section.extend(body);
    section
}

/// The WIT a function builds against: `host-api/wit`, or the frozen release named by a
/// `host-api-version` file in its directory (a compatibility fixture).
fn wit_of(root: &Path, dir: &Path) -> Result<PathBuf> {
    let pinned = dir.join(HOST_API_VERSION);
    if !pinned.is_file() {
        return Ok(root.join("host-api/wit"));
    }
    let version = fs::read_to_string(&pinned).with_context(|| format!("reading {}", pinned.display()))?;
    let wit = root.join("host-api/wit-released").join(version.trim());
    if !wit.is_dir() {
        bail!(
            "{} names {:?}, which is not a released host API version (host-api/wit-released/)",
            pinned.display(),
            version.trim()
        );
    }
    Ok(wit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_custom_section_is_id_0_sized_and_named() {
        let s = custom_section(SERVING_SECTION, &[1]);
        let mut want = vec![0u8, 16, 14];
        want.extend_from_slice(b"sluice:serving");
        want.push(1);
        assert_eq!(s, want);
        // A body over 127 bytes takes a two-byte LEB128 size.
        let long = custom_section("x", &[7; 200]);
        assert_eq!(&long[..4], &[0, 0xca, 0x01, 1]);
        assert_eq!(long.len(), 3 + 202);
    }
}
