//! The Kubernetes manifests of `deploy/kserve/` against the schemas an API server would
//! hold them to, offline: `tests/kserve/validate_manifests.py` checks every document
//! (built-in kinds with kubernetes-validate, strict; KServe's kinds against the KServe
//! v0.20.0 CRDs in `<repo>/../shared/kserve-crds-v0.20.0` or `SLUICE_KSERVE_CRDS`, with
//! unknown fields rejected; a kind without a schema fails). Then copies with one planted
//! mistake each — a misspelt field of a KServe kind and of a built-in kind, a KServe
//! kind under the wrong apiVersion, and a kind without a schema — must fail, naming it.
//!
//! The Python environment is `tests/clients/requirements.txt` (kubernetes-validate and
//! jsonschema are pinned there), named by `SLUICE_CLIENTS_PYTHON`; without it the tests
//! skip (class "Python clients"). Without the CRDs they skip (class "KServe CRDs"),
//! except under `CI=true`, where that is a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sluice_tests::fixtures::clients_python;
use sluice_tests::repo_root;
use sluice_tests::skip::skip;

const VALIDATOR: &str = "tests/kserve/validate_manifests.py";

/// The CRD directory, or `None` after recording the skip.
fn crds() -> Option<PathBuf> {
    let dir = std::env::var_os("SLUICE_KSERVE_CRDS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/kserve-crds-v0.20.0"));
    if dir.join("serving.kserve.io_inferenceservices.yaml").is_file() {
        return Some(dir);
    }
    let reason = format!("no KServe CRDs in {} (set SLUICE_KSERVE_CRDS)", dir.display());
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true: {reason}");
    skip("KServe CRDs", &reason);
    None
}

/// The validator's run on `files` (none: every `deploy/kserve/*.yaml`), and its stdout.
fn validate(python: &Path, crds: &Path, files: &[&Path]) -> (Output, String) {
    let out = Command::new(python)
        .arg(repo_root().join(VALIDATOR))
        .arg("--crds")
        .arg(crds)
        .args(files)
        // Everything it needs is on this machine: a request anywhere would fail.
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .output()
        .expect("running the manifest validator");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    (out, stdout)
}

/// `file` of `deploy/kserve/` with `from` replaced by `to` (which must occur), written
/// into `dir`.
fn planted(dir: &Path, file: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(repo_root().join("deploy/kserve").join(file)).expect("reading the manifest");
    assert!(text.contains(from), "{file} has no `{from}` to change");
    let path = dir.join(file);
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    path
}

#[test]
fn every_manifest_validates_against_its_schema() {
    let Some(python) = clients_python() else { return };
    let Some(crds) = crds() else { return };
    let (out, stdout) = validate(&python, &crds, &[]);
    assert!(out.status.success(), "the manifests do not validate ({}):\n{stdout}", out.status);
    let last = stdout.lines().last().unwrap_or_default();
    let passed: usize = last
        .strip_suffix(" passed, 0 failed")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `N passed, 0 failed` line at the end:\n{stdout}"));
    let oks: Vec<&str> = stdout.lines().filter(|l| l.starts_with("ok ")).collect();
    assert_eq!(oks.len(), passed, "{stdout}");
    // Every file was read, and the kinds the README promises are there.
    for entry in std::fs::read_dir(repo_root().join("deploy/kserve")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".yaml") {
            let shown = format!("ok deploy/kserve/{name} ");
            assert!(oks.iter().any(|l| l.starts_with(&shown)), "nothing of {name} validated:\n{stdout}");
        }
    }
    for kind in [
        "ClusterServingRuntime sluice",
        "ClusterServingRuntime sluice-multi",
        "InferenceService",
        "TrainedModel",
        "HorizontalPodAutoscaler",
        "Secret",
    ] {
        assert!(oks.iter().any(|l| l.contains(&format!(" {kind}"))), "no {kind} validated:\n{stdout}");
    }
}

#[test]
fn planted_mistakes_fail_naming_the_field_or_kind() {
    let Some(python) = clients_python() else { return };
    let Some(crds) = crds() else { return };
    let dir = tempfile::tempdir().unwrap();
    let unknown_kind = dir.path().join("scaledobject.yaml");
    std::fs::write(
        &unknown_kind,
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: minilm-embed\nspec:\n  \
         scaleTargetRef:\n    name: minilm-embed-predictor\n",
    )
    .unwrap();
    let cases = [
        (
            planted(dir.path(), "clusterservingruntime.yaml", "protocolVersions:", "protocolVersion:"),
            "ClusterServingRuntime sluice: spec: Additional properties are not allowed ('protocolVersion' was unexpected)",
        ),
        (
            planted(dir.path(), "inferenceservice-knative.yaml", "containerConcurrency:", "containerConcurency:"),
            "InferenceService echo: spec.predictor: Additional properties are not allowed ('containerConcurency' was \
             unexpected)",
        ),
        (
            planted(dir.path(), "inferenceservice-standard.yaml", "averageValue:", "averageValu:"),
            "HorizontalPodAutoscaler minilm-embed: spec.metrics[0].pods.target: Additional properties are not \
             allowed ('averageValu' was unexpected)",
        ),
        (
            planted(dir.path(), "multi-model.yaml", "serving.kserve.io/v1alpha1", "serving.kserve.io/v1beta1"),
            "TrainedModel minilm-embed: apiVersion: serving.kserve.io/v1beta1 is not served for TrainedModel",
        ),
        (unknown_kind, "ScaledObject minilm-embed: no schema for kind ScaledObject (keda.sh/v1alpha1)"),
    ];
    for (file, expected) in &cases {
        let (out, stdout) = validate(&python, &crds, &[file]);
        assert_eq!(out.status.code(), Some(1), "{} should fail:\n{stdout}", file.display());
        assert!(
            stdout.lines().any(|l| l.starts_with("FAIL ") && l.contains(expected)),
            "{}: no failure `{expected}`:\n{stdout}",
            file.display()
        );
        let last = stdout.lines().last().unwrap_or_default();
        assert!(last.contains(" passed, ") && !last.ends_with(" 0 failed"), "{stdout}");
    }
    // All at once: each fails on its own, nothing passes by accident of another.
    let files: Vec<&Path> = cases.iter().map(|(f, _)| f.as_path()).collect();
    let (out, stdout) = validate(&python, &crds, &files);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.lines().filter(|l| l.starts_with("FAIL ")).count() >= cases.len(), "{stdout}");
}
