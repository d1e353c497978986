//! The example functions as bundles (`sluice.toml`, the component, its artifacts), the
//! form `sluice serve --model-dir` and KServe's storage initializer take: written by
//! `cargo xtask build-functions` under `functions/target/bundles/<name>/`, each for the
//! tenant `demo`. The files are symlinks to the built components and the cached models
//! (as KServe's storage initializer lays out a `file://` model); a bundle whose model
//! has not been fetched (`cargo xtask fetch-model`, `fetch-mnist`, `fetch-llm`) is left
//! out, saying so. `sluice bundle` makes the same from any component.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::fetch_llm;

/// One example: its function name, component stem, class and artifacts (name, file).
struct Example {
    name: &'static str,
    component: &'static str,
    priority: &'static str,
    timeout_ms: Option<u64>,
    artifacts: Vec<(&'static str, PathBuf)>,
}

/// The cache directory of a fetched model (`~/.cache/sluice/models/<dir>`, or the
/// script's variable), if `file` is in it.
fn cached(var: &str, dir: &str, file: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os(var).filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/sluice/models").join(dir),
    };
    dir.join(file).is_file().then_some(dir)
}

fn examples() -> Vec<Example> {
    let plain = |name, component, priority| Example { name, component, priority, timeout_ms: None, artifacts: vec![] };
    let mut list = vec![
        plain("echo", "echo", "latency"),
        plain("mlp", "mlp", "latency"),
        plain("gemm-burn", "gemm_burn", "batch"),
        plain("echo-py", "echo_py", "latency"),
        plain("mlp-py", "mlp_py", "latency"),
        plain("echo-js", "echo_js", "latency"),
    ];
    match cached("SLUICE_MODEL_DIR", "all-MiniLM-L6-v2", "model.safetensors") {
        Some(dir) => {
            let files = || ["model.safetensors", "vocab.txt", "config.json"].map(|f| dir.join(f));
            let [model, vocab, config] = files();
            let minilms = [
                ("minilm-embed", "minilm_embed"),
                ("minilm-embed-py", "minilm_embed_py"),
                ("minilm-embed-js", "minilm_embed_js"),
            ];
            for (name, component) in minilms {
                let artifacts = vec![("model", model.clone()), ("vocab", vocab.clone()), ("config", config.clone())];
                list.push(Example { name, component, priority: "latency", timeout_ms: None, artifacts });
            }
        }
        None => eprintln!("xtask: no MiniLM model (`cargo xtask fetch-model`): no minilm-embed bundles"),
    }
    match cached("SLUICE_MNIST_DIR", "mnist", "model.safetensors") {
        Some(dir) => list.push(Example {
            name: "mnist",
            component: "mnist",
            priority: "latency",
            timeout_ms: None,
            artifacts: vec![("model", dir.join("model.safetensors"))],
        }),
        None => eprintln!("xtask: no MNIST model (`cargo xtask fetch-mnist`): no mnist bundle"),
    }
    match fetch_llm::fetched() {
        Some(gguf) => {
            for (name, component) in [("smollm2-chat", "smollm2_chat"), ("smollm2-chat-py", "smollm2_chat_py")] {
                let artifacts = vec![("model", gguf.clone())];
                list.push(Example { name, component, priority: "latency", timeout_ms: Some(300_000), artifacts });
            }
        }
        None => eprintln!("xtask: no SmolLM2 model (`cargo xtask fetch-llm`): no smollm2-chat bundles"),
    }
    list
}

/// Writes the bundles of the examples whose components are in `wasm_dir` into
/// `out_dir`, replacing what was there; returns their directories.
pub fn write(wasm_dir: &Path, out_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for example in examples() {
        let component = wasm_dir.join(format!("{}.wasm", example.component));
        if !component.is_file() {
            continue;
        }
        let dir = out_dir.join(example.name);
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("replacing {}", dir.display()))?;
        }
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let file = format!("{}.wasm", example.component);
        std::os::unix::fs::symlink(&component, dir.join(&file))?;
        let mut manifest = format!(
            "# An example function of sluice, written by `cargo xtask build-functions`.\n\
             [function]\nname = {:?}\ntenant = \"demo\"\ncomponent = {file:?}\npriority = {:?}\n",
            example.name, example.priority
        );
        if let Some(ms) = example.timeout_ms {
            manifest.push_str(&format!("timeout_ms = {ms}\n"));
        }
        if !example.artifacts.is_empty() {
            manifest.push_str("\n[artifacts]\n");
        }
        for (name, path) in &example.artifacts {
            let file = path.file_name().context("an artifact without a file name")?.to_string_lossy().into_owned();
            std::os::unix::fs::symlink(path, dir.join(&file))?;
            manifest.push_str(&format!("{name} = {file:?}\n"));
        }
        fs::write(dir.join("sluice.toml"), manifest)?;
        written.push(dir);
    }
    Ok(written)
}
