//! The host workspace's one test build, shared by every step that runs a host test or
//! the debug `sluice` binary.
//!
//! Cargo resolves features per invocation: `cargo test --workspace` turns on what the
//! dev-dependencies ask for (tokio's `test-util`, more of `syn`, `zerofrom`'s `alloc`),
//! while `cargo build -p sluice-runtime` or `cargo test -p sluice-backend-cuda` resolve
//! smaller sets and rebuild every crate downstream of the difference, most of the
//! dependency tree: over five minutes on CI's two cores, each time. So the steps here
//! take their binaries from one build, [`build`] (`cargo test --no-run` with
//! [`TARGETS`]), and run test executables directly ([`TestBinary::command`]) instead of
//! asking cargo for a narrower build.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd;

/// The targets of the host test build (`cargo test` arguments).
pub const TARGETS: [&str; 4] = ["--workspace", "--lib", "--bins", "--tests"];

/// The host workspace's target directory (`$CARGO_TARGET_DIR`, else `target/`).
pub fn target_dir() -> PathBuf {
    let root = cmd::repo_root();
    match std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// The debug `sluice` binary the test build leaves (the tests' `SLUICE_BIN`).
pub fn sluice_bin() -> PathBuf {
    target_dir().join("debug").join(format!("sluice{}", std::env::consts::EXE_SUFFIX))
}

/// One test executable of the build: a crate's unit tests or one integration test.
#[derive(Debug, Clone)]
pub struct TestBinary {
    /// The package's name (`sluice-runtime`).
    pub package: String,
    /// The target's name (`sluice_runtime` for the library, `conformance` for a test).
    pub target: String,
    /// `lib`, `bin` or `test`.
    pub kind: String,
    pub path: PathBuf,
    /// The package's directory, where cargo would run it.
    pub package_dir: PathBuf,
}

impl TestBinary {
    /// The executable as `cargo test` runs it: in its package's directory, with the
    /// package's variables.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.path);
        c.current_dir(&self.package_dir)
            .env("CARGO_MANIFEST_DIR", &self.package_dir)
            .env("CARGO_PKG_NAME", &self.package);
        c
    }
}

/// The test executables of the build, built (or found up to date) first.
#[derive(Debug)]
pub struct HostTests {
    pub binaries: Vec<TestBinary>,
}

impl HostTests {
    /// The executable of `package`'s target `target` of `kind`.
    pub fn find(&self, package: &str, kind: &str, target: &str) -> Result<&TestBinary> {
        self.binaries.iter().find(|b| b.package == package && b.kind == kind && b.target == target).with_context(|| {
            format!("the host test build has no {kind} target `{target}` in {package} (was it renamed?)")
        })
    }
}

/// Builds the host tests (`cargo test --no-run` with [`TARGETS`]) and lists their
/// executables; [`sluice_bin`] is built with them.
pub fn build() -> Result<HostTests> {
    let mut c = cmd::cargo();
    c.current_dir(cmd::repo_root())
        .args(["test", "--no-run", "--message-format=json-render-diagnostics"])
        .args(TARGETS)
        .stderr(std::process::Stdio::inherit());
    eprintln!("xtask: building the host tests (cargo test --no-run {})", TARGETS.join(" "));
    let out = c.output().with_context(|| format!("could not start {c:?}"))?;
    if !out.status.success() {
        bail!("building the host tests failed with {}", out.status);
    }
    let binaries = parse_artifacts(&String::from_utf8_lossy(&out.stdout))?;
    if binaries.is_empty() {
        bail!("cargo test --no-run listed no test executables");
    }
    Ok(HostTests { binaries })
}

/// The test executables in cargo's JSON messages (`compiler-artifact` with a test
/// profile and an executable).
fn parse_artifacts(messages: &str) -> Result<Vec<TestBinary>> {
    let mut binaries = Vec::new();
    for line in messages.lines().filter(|l| l.starts_with('{')) {
        let msg: serde_json::Value = serde_json::from_str(line).context("a cargo JSON message")?;
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let Some(path) = msg["executable"].as_str() else { continue };
        let manifest = msg["manifest_path"].as_str().context("an artifact without manifest_path")?;
        let package_id = msg["package_id"].as_str().context("an artifact without package_id")?;
        binaries.push(TestBinary {
            package: package_name(package_id).with_context(|| format!("package id {package_id}"))?,
            target: msg["target"]["name"].as_str().unwrap_or_default().to_owned(),
            kind: msg["target"]["kind"][0].as_str().unwrap_or_default().to_owned(),
            path: PathBuf::from(path),
            package_dir: Path::new(manifest).parent().context("manifest path without a parent")?.to_path_buf(),
        });
    }
    Ok(binaries)
}

/// The package name in a cargo package id: `path+file:///w/runtime#sluice-runtime@0.1.0`,
/// `path+file:///w/runtime#0.1.0` (name = the directory), or the older
/// `sluice-runtime 0.1.0 (path+file:///w/runtime)`.
fn package_name(id: &str) -> Option<String> {
    if id.contains(' ') {
        return id.split(' ').next().map(str::to_owned);
    }
    let (url, fragment) = id.rsplit_once('#')?;
    match fragment.split_once('@') {
        Some((name, _)) => Some(name.to_owned()),
        None => url.rsplit('/').next().map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_in_every_id_format() {
        assert_eq!(package_name("path+file:///w/runtime#sluice-runtime@0.1.0").as_deref(), Some("sluice-runtime"));
        assert_eq!(package_name("path+file:///w/tests#0.1.0").as_deref(), Some("tests"));
        assert_eq!(package_name("sluice-tests 0.1.0 (path+file:///w/tests)").as_deref(), Some("sluice-tests"));
        assert_eq!(package_name("nonsense"), None);
    }

    #[test]
    fn only_test_executables_are_listed() {
        let messages = [
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/runtime#sluice-runtime@0.1.0","manifest_path":"/w/runtime/Cargo.toml","target":{"kind":["lib"],"name":"sluice_runtime"},"profile":{"test":true},"executable":"/w/target/debug/deps/sluice_runtime-1"}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/runtime#sluice-runtime@0.1.0","manifest_path":"/w/runtime/Cargo.toml","target":{"kind":["bin"],"name":"sluice"},"profile":{"test":false},"executable":"/w/target/debug/sluice"}"#,
            r#"{"reason":"compiler-artifact","package_id":"registry+https://x#tokio@1.0.0","manifest_path":"/r/tokio/Cargo.toml","target":{"kind":["lib"],"name":"tokio"},"profile":{"test":false},"executable":null}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        let found = parse_artifacts(&messages).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        let tests = HostTests { binaries: found };
        let lib = tests.find("sluice-runtime", "lib", "sluice_runtime").unwrap();
        assert_eq!(lib.path, Path::new("/w/target/debug/deps/sluice_runtime-1"));
        assert_eq!(lib.package_dir, Path::new("/w/runtime"));
        assert!(tests.find("sluice-runtime", "bin", "sluice").is_err());
    }
}
