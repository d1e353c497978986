//! The forward pass (`model.rs`, unchanged) on the naive CPU device against the
//! reference embeddings of `tests/data/minilm_ref_visible.json`, with the real weights
//! and vocabulary. Fails with a clear message when the model is not fetched
//! (`scripts/fetch-model.sh`). A debug build checks a padded batch of the short
//! sentences; a release build (`cargo test --release`) checks all 16 sentences.

use std::path::PathBuf;

use bert_tokenizer::{BertTokenizer, Options};
use serde_json::Value;

use crate::backend::Precision;
use crate::config::BertConfig;
use crate::cpu_ref::CpuDevice;
use crate::model::Bert;

fn model_dir() -> PathBuf {
    let dir = std::env::var_os("SLUICE_MODEL_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME or SLUICE_MODEL_DIR must be set"))
            .join(".cache/sluice/models/all-MiniLM-L6-v2")
    });
    assert!(
        dir.join("model.safetensors").is_file(),
        "the all-MiniLM-L6-v2 model is not fetched: {} has no model.safetensors. \
         Run scripts/fetch-model.sh (or `cargo xtask fetch-model`), or point SLUICE_MODEL_DIR at it.",
        dir.display()
    );
    dir
}

fn read(p: PathBuf) -> Vec<u8> {
    std::fs::read(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

#[test]
fn cpu_forward_matches_reference_embeddings() {
    let dir = model_dir();
    let cfg = BertConfig::from_json(&read(dir.join("config.json"))).unwrap();
    let tok = BertTokenizer::from_vocab_txt(&read(dir.join("vocab.txt")), Options::default()).unwrap();
    let dev = CpuDevice::from_safetensors(&read(dir.join("model.safetensors"))).unwrap();
    let model = Bert::load(&dev, cfg.clone(), Precision::F32).unwrap();

    let refdata: Value = serde_json::from_slice(&read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/minilm_ref_visible.json"),
    ))
    .unwrap();
    let records = refdata["records"].as_array().unwrap();
    // Padded batches of similar lengths. Debug builds are slow, so they check only the
    // short batch (lengths 2..=12), which still exercises the attention and pooling masks.
    let groups: &[(u64, u64)] =
        if cfg!(debug_assertions) { &[(0, 12)] } else { &[(0, 12), (13, 64), (65, 200), (201, 256)] };
    let mut worst = 0f64;
    let mut checked = 0;
    for &(lo, hi) in groups {
        let picked: Vec<&Value> =
            records.iter().filter(|r| (lo..=hi).contains(&r["n_tokens"].as_u64().unwrap())).collect();
        let texts: Vec<&str> = picked.iter().map(|r| r["text"].as_str().unwrap()).collect();
        let batch = tok.encode_batch(&texts, cfg.max_seq_len());
        let got = model.embed(&dev, &batch).unwrap();
        assert_eq!(got.len(), texts.len() * 384);
        for (i, r) in picked.iter().enumerate() {
            let want: Vec<f64> = r["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
            let row = &got[i * 384..(i + 1) * 384];
            let diff = row.iter().zip(&want).map(|(&g, &w)| (f64::from(g) - w).abs()).fold(0.0, f64::max);
            let norm: f64 = row.iter().map(|&g| f64::from(g).powi(2)).sum::<f64>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "{:?}: norm {norm}", texts[i]);
            assert!(diff < 2e-5, "{:?}: max abs diff {diff}", texts[i]);
            worst = worst.max(diff);
        }
        checked += texts.len();
    }
    assert_eq!(checked, if cfg!(debug_assertions) { 8 } else { 16 });
    eprintln!("{checked} sentences, max abs diff {worst:.2e}");
}
