//! Function bundles: a directory holding a manifest (`sluice.toml`), a component and its
//! artifacts, as `sluice bundle` writes it and as KServe's storage initializer lays a
//! model out under `/mnt/models` (plain files, an unpacked archive, or symlinks to files
//! elsewhere, which are followed).
//!
//! ```toml
//! [function]
//! name = "minilm-embed"            # optional: else the name it is loaded under
//! tenant = "demo"
//! component = "minilm_embed.wasm"  # optional: else the bundle's one *.wasm file
//! priority = "latency"             # optional, like the deploy's options
//! timeout_ms = 30000
//! max_batch_size = 16              # optional: dynamic batching across requests
//! max_queue_delay_us = 1000        #   and how long a request waits for its batch
//!
//! [artifacts]                      # artifact name -> path inside the bundle
//! model = "model.safetensors"
//! ```
//!
//! [`read`] checks a bundle completely (manifest, names, every file it names) without
//! writing anything; its errors name the file at fault. [`discover`] finds the bundles
//! of a model repository: the directory itself when it holds a manifest, else each
//! subdirectory that does. Loading a bundle into the platform is `super::repository`.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sluice_registry::{
    Batching, FunctionOptions, PriorityClass, validate_artifact_name, validate_function_name, validate_tenant_id,
};

/// The manifest's file name, at a bundle's root.
pub const MANIFEST: &str = "sluice.toml";

/// `sluice.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub function: FunctionSection,
    /// Artifact name → file path relative to the bundle.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub artifacts: BTreeMap<String, String>,
}

/// `[function]`: who owns it and how it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionSection {
    /// Its name, unless the bundle is loaded under another (a repository load by
    /// directory, `--model-name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The owning tenant.
    pub tenant: String,
    /// The component's path relative to the bundle (default: its one `*.wasm` file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<PriorityClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    /// Dynamic batching: the most rows in one invocation (none: no batching).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch_size: Option<u32>,
    /// Dynamic batching: the longest a request waits for its batch, in µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_delay_us: Option<u64>,
}

impl Manifest {
    /// The manifest as TOML text.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a manifest always serialises")
    }
}

/// A bundle read from disk: every name checked, every file it names present.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// Its directory.
    pub dir: PathBuf,
    /// The function name it loads as.
    pub name: String,
    pub tenant: String,
    /// The component file.
    pub component: PathBuf,
    pub options: FunctionOptions,
    /// Artifact name → file.
    pub artifacts: BTreeMap<String, PathBuf>,
}

/// What is wrong with a bundle, naming the file at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BundleError {
    /// A file the bundle needs is not there (yet: an initializer may still be writing it).
    #[error("{}: {what} is missing", path.display())]
    Missing { path: PathBuf, what: &'static str },
    /// The bundle is there and wrong.
    #[error("{}: {problem}", path.display())]
    Invalid { path: PathBuf, problem: String },
}

impl BundleError {
    fn invalid(path: impl Into<PathBuf>, problem: impl std::fmt::Display) -> Self {
        BundleError::Invalid { path: path.into(), problem: problem.to_string() }
    }
}

/// Whether `dir` holds a manifest (following symlinks).
pub fn is_bundle(dir: &Path) -> bool {
    dir.join(MANIFEST).is_file()
}

/// Reads and checks the bundle in `dir`; `name` overrides the manifest's function name.
pub fn read(dir: &Path, name: Option<&str>) -> Result<Bundle, BundleError> {
    if !dir.is_dir() {
        return Err(BundleError::Missing { path: dir.to_owned(), what: "the bundle directory" });
    }
    let manifest_path = dir.join(MANIFEST);
    let text = match std::fs::read_to_string(&manifest_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BundleError::Missing { path: manifest_path, what: "the manifest" });
        }
        Err(e) => return Err(BundleError::invalid(manifest_path, format!("cannot be read: {e}"))),
    };
    let manifest: Manifest = toml::from_str(&text).map_err(|e| {
        let line = e.span().map_or(1, |span| text[..span.start.min(text.len())].lines().count().max(1));
        BundleError::invalid(&manifest_path, format!("line {line}: {}", e.message()))
    })?;
    let f = &manifest.function;
    let name = name
        .map(str::to_owned)
        .or_else(|| f.name.clone())
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    validate_function_name(&name).map_err(|e| BundleError::invalid(&manifest_path, e))?;
    validate_tenant_id(&f.tenant).map_err(|e| BundleError::invalid(&manifest_path, e))?;
    let batching =
        Batching::given(f.max_batch_size, f.max_queue_delay_us).map_err(|e| BundleError::invalid(&manifest_path, e))?;
    let options =
        FunctionOptions::given(f.priority, f.weight, f.timeout_ms, f.memory_limit_bytes).with_batching(batching);
    options.validate().map_err(|e| BundleError::invalid(&manifest_path, e))?;
    let component = match &f.component {
        Some(rel) => inside(dir, rel, &manifest_path, "the component")?,
        None => only_wasm(dir, &manifest_path)?,
    };
    let mut artifacts = BTreeMap::new();
    for (artifact, rel) in &manifest.artifacts {
        validate_artifact_name(artifact).map_err(|e| BundleError::invalid(&manifest_path, e))?;
        artifacts.insert(artifact.clone(), inside(dir, rel, &manifest_path, "an artifact")?);
    }
    Ok(Bundle { dir: dir.to_owned(), name, tenant: f.tenant.clone(), component, options, artifacts })
}

/// The file `rel` of the bundle `dir`: a relative path that stays inside it (the file
/// itself may be a symlink to anywhere, as a storage initializer makes them).
fn inside(dir: &Path, rel: &str, manifest: &Path, what: &'static str) -> Result<PathBuf, BundleError> {
    let path = Path::new(rel);
    if rel.is_empty() || !path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(BundleError::invalid(
            manifest,
            format!("{what} {rel:?} must be a relative path inside the bundle (no `..`, not absolute)"),
        ));
    }
    let file = dir.join(path);
    match std::fs::metadata(&file) {
        Ok(m) if m.is_file() => Ok(file),
        Ok(_) => Err(BundleError::invalid(file, format!("{what} is not a regular file"))),
        Err(_) => Err(BundleError::Missing { path: file, what }),
    }
}

/// The one `*.wasm` file at the bundle's root.
fn only_wasm(dir: &Path, manifest: &Path) -> Result<PathBuf, BundleError> {
    let entries = std::fs::read_dir(dir).map_err(|e| BundleError::invalid(dir, format!("cannot be listed: {e}")))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(BundleError::Missing { path: dir.join("*.wasm"), what: "the component" }),
        n => Err(BundleError::invalid(
            manifest,
            format!("the bundle holds {n} .wasm files: name the component (`component = \"…\"`)"),
        )),
    }
}

/// A bundle of a model repository, not yet read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub dir: PathBuf,
    /// The name it loads under, when the layout says (a subdirectory's name, or the
    /// root's `--model-name`); `None`: the manifest's.
    pub name: Option<String>,
}

/// The bundles of the repository `root`: `root` itself when it holds a manifest (named
/// `root_name`), else each subdirectory that does (named after it), in name order.
/// Entries whose names begin with `.` are skipped (a mounted volume's bookkeeping).
pub fn discover(root: &Path, root_name: Option<&str>) -> Result<Vec<Found>, BundleError> {
    if !root.is_dir() {
        return Err(BundleError::Missing { path: root.to_owned(), what: "the model directory" });
    }
    if is_bundle(root) {
        return Ok(vec![Found { dir: root.to_owned(), name: root_name.map(str::to_owned) }]);
    }
    let entries = std::fs::read_dir(root).map_err(|e| BundleError::invalid(root, format!("cannot be listed: {e}")))?;
    let mut found: Vec<Found> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_owned();
            let dir = e.path();
            (!name.starts_with('.') && is_bundle(&dir)).then_some(Found { dir, name: Some(name) })
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, file: &str, text: &str) {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_complete_bundle_reads_with_its_defaults_and_overrides() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "echo.wasm", "not checked here");
        write(dir.path(), "w/model.bin", "weights");
        write(
            dir.path(),
            MANIFEST,
            "[function]\nname = \"echo\"\ntenant = \"demo\"\npriority = \"batch\"\ntimeout_ms = 500\n\
             max_batch_size = 8\n[artifacts]\nmodel = \"w/model.bin\"\n",
        );
        let b = read(dir.path(), None).unwrap();
        assert_eq!((b.name.as_str(), b.tenant.as_str()), ("echo", "demo"));
        assert_eq!(b.component, dir.path().join("echo.wasm"));
        assert_eq!(b.options.priority, PriorityClass::Batch);
        assert_eq!(b.options.timeout_ms, 500);
        let batching = Batching { max_batch_size: 8, max_queue_delay_us: sluice_registry::DEFAULT_QUEUE_DELAY_US };
        assert_eq!(b.options.batching, Some(batching));
        assert_eq!(b.artifacts["model"], dir.path().join("w/model.bin"));
        assert_eq!(read(dir.path(), Some("other")).unwrap().name, "other");
    }

    #[test]
    fn each_fault_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join(MANIFEST);
        assert!(matches!(read(dir.path(), None), Err(BundleError::Missing { what: "the manifest", .. })));
        let cases: [(&str, &str); 8] = [
            ("[function]\ntenant = \"demo\"\nextra = 1\n", "unknown field"),
            ("[function]\n", "missing field"),
            ("[function]\ntenant = \"Demo!\"\n", "tenant"),
            ("[function]\ntenant = \"demo\"\ncomponent = \"../x.wasm\"\n", "relative path"),
            ("[function]\ntenant = \"demo\"\ntimeout_ms = 0\n", "timeout_ms"),
            ("[function]\ntenant = \"demo\"\nmax_queue_delay_us = 5\n", "needs max_batch_size"),
            ("[function]\ntenant = \"demo\"\nmax_batch_size = 0\n", "max_batch_size must be"),
            ("[function\n", "line 1: unclosed table"),
        ];
        for (text, expected) in cases {
            write(dir.path(), MANIFEST, text);
            match read(dir.path(), Some("f")) {
                Err(BundleError::Invalid { path, problem }) => {
                    assert_eq!(path, manifest, "{text}");
                    assert!(problem.contains(expected), "{text}: {problem}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        write(dir.path(), MANIFEST, "[function]\ntenant = \"demo\"\n[artifacts]\nmodel = \"model.bin\"\n");
        match read(dir.path(), Some("f")) {
            Err(e @ BundleError::Missing { .. }) => assert!(e.to_string().contains("*.wasm"), "{e}"),
            other => panic!("{other:?}"),
        }
        write(dir.path(), "a.wasm", "");
        match read(dir.path(), Some("f")) {
            Err(BundleError::Missing { path, what }) => {
                assert_eq!((path, what), (dir.path().join("model.bin"), "an artifact"))
            }
            other => panic!("{other:?}"),
        }
        write(dir.path(), "b.wasm", "");
        write(dir.path(), "model.bin", "");
        let e = read(dir.path(), Some("f")).unwrap_err();
        assert!(e.to_string().contains("2 .wasm files"), "{e}");
    }

    #[test]
    fn symlinked_files_are_followed_and_a_manifest_round_trips() {
        let store = tempfile::tempdir().unwrap();
        write(store.path(), "real.wasm", "component");
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(store.path().join("real.wasm"), dir.path().join("f.wasm")).unwrap();
        let manifest = Manifest {
            function: FunctionSection {
                name: None,
                tenant: "demo".into(),
                component: Some("f.wasm".into()),
                priority: Some(PriorityClass::Latency),
                weight: None,
                timeout_ms: None,
                memory_limit_bytes: None,
                max_batch_size: None,
                max_queue_delay_us: None,
            },
            artifacts: BTreeMap::new(),
        };
        write(dir.path(), MANIFEST, &manifest.to_toml());
        assert_eq!(toml::from_str::<Manifest>(&manifest.to_toml()).unwrap(), manifest);
        assert_eq!(read(dir.path(), Some("f")).unwrap().component, dir.path().join("f.wasm"));
    }

    #[test]
    fn a_repository_is_one_bundle_or_its_subdirectories() {
        let root = tempfile::tempdir().unwrap();
        assert!(discover(&root.path().join("absent"), None).is_err());
        assert_eq!(discover(root.path(), None).unwrap(), vec![]);
        for sub in ["b", "a", ".hidden"] {
            write(&root.path().join(sub), MANIFEST, "");
        }
        write(&root.path().join("c"), "other.txt", "");
        let names: Vec<_> = discover(root.path(), None).unwrap().into_iter().map(|f| f.name).collect();
        assert_eq!(names, vec![Some("a".to_owned()), Some("b".to_owned())]);
        write(root.path(), MANIFEST, "");
        assert_eq!(
            discover(root.path(), Some("isvc")).unwrap(),
            vec![Found { dir: root.path().to_owned(), name: Some("isvc".into()) }]
        );
    }
}
