//! The tokenizer against the real all-MiniLM-L6-v2 vocabulary and the reference token
//! ids of `tests/data/minilm_ref_visible.json` (produced by HF tokenizers): exact
//! equality for every sentence, at 256 tokens (sentence-transformers) and at 128
//! (tokenizer.json's own truncation). Needs the model: `scripts/fetch-model.sh`.

use std::path::PathBuf;

use bert_tokenizer::{BertTokenizer, Options};
use serde_json::Value;

fn model_dir() -> PathBuf {
    let dir = match std::env::var_os("SLUICE_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is not set and neither is SLUICE_MODEL_DIR");
            PathBuf::from(home).join(".cache/sluice/models/all-MiniLM-L6-v2")
        }
    };
    assert!(
        dir.join("vocab.txt").is_file() && dir.join("tokenizer.json").is_file(),
        "the all-MiniLM-L6-v2 model is not fetched: {} has no vocab.txt/tokenizer.json. \
         Run scripts/fetch-model.sh (or `cargo xtask fetch-model`), or point SLUICE_MODEL_DIR at it.",
        dir.display()
    );
    dir
}

fn read(path: PathBuf) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn reference() -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/minilm_ref_visible.json");
    let root: Value = serde_json::from_slice(&read(path)).expect("reference JSON parses");
    let records = root["records"].as_array().expect("records[]").clone();
    assert_eq!(records.len(), 16, "the visible reference set has 16 sentences");
    records
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("id array").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

fn check(tok: &BertTokenizer, what: &str) {
    let mut checked_128 = 0;
    for (i, r) in reference().iter().enumerate() {
        let text = r["text"].as_str().expect("text");
        let want = ids(&r["input_ids"]);
        assert_eq!(tok.encode(text, 256), want, "{what}: record {i} ({text:?}) at max_len 256");
        let untruncated = r["n_tokens_untruncated"].as_u64().unwrap() as usize;
        assert_eq!(tok.tokenize(text).len() + 2, untruncated, "{what}: record {i} untruncated length");
        if let Some(w128) = r.get("input_ids_max_len_128") {
            assert_eq!(tok.encode(text, 128), ids(w128), "{what}: record {i} at max_len 128");
            checked_128 += 1;
        }
    }
    assert_eq!(checked_128, 2);
}

#[test]
fn vocab_txt_with_tokenizer_json_options_matches_reference() {
    let dir = model_dir();
    let options = Options::from_tokenizer_json(&read(dir.join("tokenizer.json"))).unwrap();
    assert_eq!(options, Options::default(), "all-MiniLM-L6-v2 uses the uncased BERT defaults");
    let tok = BertTokenizer::from_vocab_txt(&read(dir.join("vocab.txt")), options).unwrap();
    assert_eq!(tok.vocab_size(), 30522);
    check(&tok, "vocab.txt");
}

#[test]
fn vocab_txt_alone_matches_reference() {
    let tok = BertTokenizer::from_vocab_txt(&read(model_dir().join("vocab.txt")), Options::default()).unwrap();
    check(&tok, "vocab.txt defaults");
}

#[test]
fn tokenizer_json_alone_matches_reference() {
    let tok = BertTokenizer::from_tokenizer_json(&read(model_dir().join("tokenizer.json"))).unwrap();
    assert_eq!(tok.vocab_size(), 30522);
    check(&tok, "tokenizer.json");
}

#[test]
fn batch_of_reference_texts_pads_to_longest() {
    let tok = BertTokenizer::from_vocab_txt(&read(model_dir().join("vocab.txt")), Options::default()).unwrap();
    let records = reference();
    let texts: Vec<&str> = records.iter().map(|r| r["text"].as_str().unwrap()).collect();
    let b = tok.encode_batch(&texts, 256);
    assert_eq!((b.batch, b.seq_len), (16, 256));
    for (i, r) in records.iter().enumerate() {
        let mask: Vec<u8> = r["attention_mask"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u8).collect();
        let row = &b.attention_mask[i * 256..i * 256 + mask.len()];
        assert_eq!(row, &mask[..]);
        assert_eq!(b.lengths[i], mask.len());
        assert!(b.attention_mask[i * 256 + mask.len()..(i + 1) * 256].iter().all(|&m| m == 0));
    }
}
