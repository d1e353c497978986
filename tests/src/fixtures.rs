//! What the end-to-end tests take from outside the repository: the MiniLM model that
//! `cargo xtask fetch-model` caches, the SmolLM2 GGUF file that `cargo xtask fetch-llm`
//! caches, and the Python environment of the standard OIP clients that
//! `cargo xtask clients-venv` makes (all set up by `cargo xtask test`).

use std::path::PathBuf;

use crate::skip::skip;

/// The MiniLM model directory: `SLUICE_MODEL_DIR`, else the fetch cache.
pub fn model_dir() -> PathBuf {
    std::env::var_os("SLUICE_MODEL_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/sluice/models/all-MiniLM-L6-v2")
    })
}

/// [`model_dir`], checked to hold the weights.
pub fn required_model_dir() -> PathBuf {
    let dir = model_dir();
    assert!(dir.join("model.safetensors").is_file(), "no model in {}: run `cargo xtask fetch-model`", dir.display());
    dir
}

/// The file name of the SmolLM2 model inside [`llm_dir`].
pub const LLM_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The SmolLM2 model directory: `SLUICE_LLM_DIR`, else the fetch cache.
pub fn llm_dir() -> PathBuf {
    std::env::var_os("SLUICE_LLM_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/sluice/models/SmolLM2-135M-Instruct")
    })
}

/// The SmolLM2 GGUF file, or `None` after recording the skip (class "SmolLM2 model")
/// when it has not been fetched; under `CI=true` or `SLUICE_REQUIRE_LLM=1` its absence
/// is a failure instead.
pub fn llm_gguf() -> Option<PathBuf> {
    let path = llm_dir().join(LLM_FILE);
    if path.is_file() {
        return Some(path);
    }
    let reason = format!("no {} (run `cargo xtask fetch-llm`)", path.display());
    let required =
        std::env::var("CI").as_deref() == Ok("true") || std::env::var("SLUICE_REQUIRE_LLM").as_deref() == Ok("1");
    assert!(!required, "CI=true or SLUICE_REQUIRE_LLM=1: {reason}");
    skip("SmolLM2 model", &reason);
    None
}

/// The interpreter of the SmolLM2 reference's environment (`SLUICE_LLM_PYTHON`: NumPy,
/// gguf-py, tokenizers, jinja2 as `tests/llm/requirements.txt` pins them), or `None`
/// after recording the skip (class "SmolLM2 reference"); under `CI=true` or
/// `SLUICE_REQUIRE_LLM=1` its absence is a failure instead.
pub fn llm_python() -> Option<PathBuf> {
    let reason = match std::env::var_os("SLUICE_LLM_PYTHON").filter(|v| !v.is_empty()).map(PathBuf::from) {
        Some(python) if python.is_file() => return Some(python),
        Some(python) => format!("SLUICE_LLM_PYTHON names {}, which does not exist", python.display()),
        None => "SLUICE_LLM_PYTHON is not set (`cargo xtask test` sets it)".to_owned(),
    };
    let required =
        std::env::var("CI").as_deref() == Ok("true") || std::env::var("SLUICE_REQUIRE_LLM").as_deref() == Ok("1");
    assert!(!required, "CI=true or SLUICE_REQUIRE_LLM=1: {reason}");
    skip("SmolLM2 reference", &reason);
    None
}

/// The interpreter of the clients' environment (`SLUICE_CLIENTS_PYTHON`), or `None` after
/// recording the skip (class "Python clients"); `SLUICE_REQUIRE_CLIENTS=1` makes its
/// absence a failure instead.
pub fn clients_python() -> Option<PathBuf> {
    let reason = match std::env::var_os("SLUICE_CLIENTS_PYTHON").filter(|v| !v.is_empty()).map(PathBuf::from) {
        Some(python) if python.is_file() => return Some(python),
        Some(python) => format!("SLUICE_CLIENTS_PYTHON names {}, which does not exist", python.display()),
        None => "SLUICE_CLIENTS_PYTHON is not set (`cargo xtask test` sets it; `cargo xtask clients-venv` prints it)"
            .to_owned(),
    };
    assert!(std::env::var("SLUICE_REQUIRE_CLIENTS").as_deref() != Ok("1"), "SLUICE_REQUIRE_CLIENTS=1: {reason}");
    skip("Python clients", &reason);
    None
}

/// The MNIST demo's directory (`SLUICE_MNIST_DIR`, else the fetch cache of `cargo
/// xtask fetch-mnist`) with `model.safetensors` and `mnist_5k.bin`, or `None` after
/// recording the skip (class "MNIST"); `SLUICE_REQUIRE_MNIST=1` or `CI=true` makes its
/// absence a failure instead.
pub fn mnist_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SLUICE_MNIST_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/sluice/models/mnist"));
    if dir.join("model.safetensors").is_file() && dir.join("mnist_5k.bin").is_file() {
        return Some(dir);
    }
    let reason = format!("no MNIST model and samples in {} (`cargo xtask fetch-mnist`)", dir.display());
    let required =
        std::env::var("SLUICE_REQUIRE_MNIST").as_deref() == Ok("1") || std::env::var("CI").as_deref() == Ok("true");
    assert!(!required, "SLUICE_REQUIRE_MNIST=1 or CI=true: {reason}");
    skip("MNIST", &reason);
    None
}
