//! sentence-transformers **all-MiniLM-L6-v2** as a sluice function: sentence
//! embeddings computed entirely through host tensor ops.
//!
//! # IO contract
//! - input `text`: BYTES, shape `[n]` or `[n, 1]`, UTF-8 texts (`n` may be 0);
//! - optional input `precision`: BYTES, one element, `"f32"` (default), `"f16"` or
//!   `"bf16"`: the dtype the weights are loaded as and the encoder runs in (pooling and
//!   normalisation are always f32);
//! - optional input `return_tokens` (any datatype, any value): also return the
//!   tokenizer's `input_ids` (INT64 `[n, s]`, padded with 0) and `attention_mask`
//!   (INT64 `[n, s]`), `s` being the longest encoding of the batch;
//! - output `embedding`: FP32 `[n, 384]`, mean-pooled over the tokens and L2-normalised,
//!   as `SentenceTransformer("all-MiniLM-L6-v2").encode(texts, normalize_embeddings=True)`
//!   (texts are truncated to 256 tokens including `[CLS]`/`[SEP]`).
//!
//! # Artifacts
//! `model` (model.safetensors, fp32), `vocab` (vocab.txt), `config` (config.json), and
//! optionally `tokenizer` (tokenizer.json, for its normaliser/WordPiece options).
//!
//! # Layout
//! `backend` (the op traits), `config` (hyper-parameters), `model` (the forward pass),
//! `tokenize` (artifacts → tokenizer), `guest` (the traits over the SDK); in tests,
//! `cpu_ref` runs `model` natively against the reference embeddings.

mod backend;
mod config;
mod guest;
mod model;
mod tokenize;

#[cfg(test)]
mod cpu_ref;
#[cfg(test)]
mod ref_test;

use sluice_guest::{Error, Function, Inputs, IoTensor, Result};

use crate::backend::Precision;
use crate::guest::Host;
use crate::model::Bert;

/// The exported function.
struct MiniLmEmbed;

impl Function for MiniLmEmbed {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        let text = inputs.get("text")?;
        text.check()?;
        if !matches!(text.shape[..], [_] | [_, 1]) {
            return Err(Error::invalid_input(format!(
                "tensor `text`: expected shape [n] or [n, 1], got {:?}",
                text.shape
            )));
        }
        let texts = text.as_strings()?;
        let precision = precision(&inputs)?;

        let prepared = tokenize::prepared()?;
        let hidden = prepared.config.hidden_size;
        let shape = [texts.len() as u64, u64::from(hidden)];
        if texts.is_empty() {
            return Ok(vec![IoTensor::f32("embedding", &shape, Vec::new())]);
        }
        let batch = prepared.tokenizer.encode_batch(&texts, prepared.config.max_seq_len());
        let host = Host { weights: "model" };
        let model = Bert::load(&host, prepared.config.clone(), precision)?;
        let embedding = model.embed(&host, &batch)?;
        let mut outputs = vec![IoTensor::f32("embedding", &shape, embedding)];
        if inputs.find("return_tokens").is_some() {
            let tokens = [batch.batch as u64, batch.seq_len as u64];
            let ids = batch.ids.iter().map(|&i| i64::from(i)).collect();
            let mask = batch.attention_mask.iter().map(|&m| i64::from(m)).collect();
            outputs.push(IoTensor::i64("input_ids", &tokens, ids));
            outputs.push(IoTensor::i64("attention_mask", &tokens, mask));
        }
        Ok(outputs)
    }
}

/// The optional `precision` input (default f32).
fn precision(inputs: &Inputs) -> Result<Precision> {
    let Some(t) = inputs.find("precision") else {
        return Ok(Precision::F32);
    };
    match t.as_strings()?[..] {
        [s] => Precision::parse(s).ok_or_else(|| {
            Error::invalid_input(format!("tensor `precision`: {s:?} is not one of \"f32\", \"f16\", \"bf16\""))
        }),
        _ => Err(Error::invalid_input("tensor `precision`: expected exactly one element")),
    }
}

sluice_guest::export!(MiniLmEmbed);

// The host checks requests against this before the guest runs (so `text` as [n, 1],
// which `run` also reads, is refused: the declared form is [n]).
sluice_guest::signature! {
    inputs: [
        "text": BYTES[-1],
        "precision": BYTES[1] optional,
        "return_tokens": UINT8[1] optional,
    ],
    outputs: [
        "embedding": FP32[-1, 384],
        "input_ids": INT64[-1, -1],
        "attention_mask": INT64[-1, -1],
    ],
}
