//! all-MiniLM-L6-v2 through the engine on the CPU device, against the reference
//! embeddings of `tests/data/minilm_ref_visible.json` (sentence-transformers).
//!
//! Needs the model: `cargo xtask fetch-model` (run by `cargo xtask test`). Without it
//! the test fails and says so; it is never skipped silently.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use common::{component, host};
use serde_json::Value;
use sluice_runtime::engine::{ArtifactSet, FunctionImage, FunctionLimits, InvocationContext, IoData, IoTensor};
use sluice_runtime::scheduler::MemoryAccount;

fn model_dir() -> PathBuf {
    let dir = std::env::var_os("SLUICE_MODEL_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/sluice/models/all-MiniLM-L6-v2")
    });
    assert!(
        dir.join("model.safetensors").is_file(),
        "the MiniLM model is not in {}: run `cargo xtask fetch-model` first",
        dir.display()
    );
    dir
}

struct Record {
    text: String,
    input_ids: Vec<i64>,
    embedding: Vec<f64>,
}

fn reference() -> Vec<Record> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/minilm_ref_visible.json");
    let v: Value = serde_json::from_slice(&std::fs::read(&path).expect("reference data")).unwrap();
    v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| Record {
            text: r["text"].as_str().unwrap().to_owned(),
            input_ids: r["input_ids"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect(),
            embedding: r["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect(),
        })
        .collect()
}

fn image() -> FunctionImage {
    let dir = model_dir();
    let files: HashMap<String, PathBuf> =
        [("model", "model.safetensors"), ("vocab", "vocab.txt"), ("config", "config.json")]
            .into_iter()
            .map(|(name, file)| (name.to_owned(), dir.join(file)))
            .collect();
    let h = host();
    let c = h.engine.compile(&component("minilm_embed")).unwrap();
    let artifacts = ArtifactSet::new(files, MemoryAccount::new("minilm weights", None, None));
    h.engine.prepare("minilm-embed", &c, artifacts, FunctionLimits::default()).unwrap()
}

async fn embed(image: &FunctionImage, texts: &[&str]) -> (Vec<f32>, Vec<i64>, u64) {
    let account = MemoryAccount::new("test", None, None);
    let ctx = InvocationContext {
        queue: host().queue.clone(),
        account,
        scheduling: common::scheduling(),
        timeout: None,
        caller: Default::default(),
        serving: None,
    };
    let inputs = vec![
        IoTensor {
            name: "text".into(),
            shape: vec![texts.len() as u64],
            data: IoData::Bytes(texts.iter().map(|t| t.as_bytes().to_vec()).collect()),
        },
        IoTensor { name: "return_tokens".into(), shape: vec![1], data: IoData::U8(vec![1]) },
    ];
    let out = host().engine.invoke(image, ctx, &inputs).await.expect("minilm invocation");
    let find = |n: &str| out.outputs.iter().find(|t| t.name == n).unwrap_or_else(|| panic!("no output {n}"));
    let IoData::F32(e) = &find("embedding").data else { panic!("embedding is not FP32") };
    let IoData::I64(ids) = &find("input_ids").data else { panic!("input_ids is not INT64") };
    let seq = find("input_ids").shape[1];
    (e.clone(), ids.clone(), seq)
}

fn check_embedding(text: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), 384);
    let dot: f64 = got.iter().zip(want).map(|(g, w)| *g as f64 * w).sum();
    let ng: f64 = got.iter().map(|g| (*g as f64).powi(2)).sum::<f64>().sqrt();
    let nw: f64 = want.iter().map(|w| w * w).sum::<f64>().sqrt();
    let cosine = dot / (ng * nw);
    let max_abs = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).abs()).fold(0.0, f64::max);
    assert!(cosine >= 0.9999 && max_abs <= 1e-4, "{text:?}: cosine {cosine}, max abs diff {max_abs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minilm_matches_the_reference_one_by_one_and_batched() {
    let records = reference();
    assert_eq!(records.len(), 16);
    let image = Arc::new(image());
    for r in &records {
        let (e, ids, seq) = embed(&image, &[&r.text]).await;
        assert_eq!(seq as usize, r.input_ids.len(), "{:?}: token count", r.text);
        assert_eq!(ids, r.input_ids, "{:?}: token ids", r.text);
        check_embedding(&r.text, &e, &r.embedding);
    }
    let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
    let (e, ids, seq) = embed(&image, &texts).await;
    for (i, r) in records.iter().enumerate() {
        let row = &ids[i * seq as usize..][..r.input_ids.len()];
        assert_eq!(row, &r.input_ids[..], "{:?}: batched token ids", r.text);
        check_embedding(&r.text, &e[i * 384..(i + 1) * 384], &r.embedding);
    }
    // The weights were uploaded once and shared by every later invocation.
    let stats = image.artifacts().stats();
    assert_eq!(stats.weight_tensors_loaded, 101, "{stats:?}");
    assert!(stats.weight_cache_hits >= 16 * 101, "{stats:?}");

    // Two concurrent invocations share the same loaded copy.
    let (a, b) = tokio::join!(embed(&image, &texts[..2]), embed(&image, &texts[2..4]));
    assert_eq!(a.0.len(), 2 * 384);
    assert_eq!(b.0.len(), 2 * 384);
    assert_eq!(image.artifacts().stats().weight_tensors_loaded, 101);
}
