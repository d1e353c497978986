//! The tokenizer the GGUF file defines, built with Hugging Face `tokenizers`: GPT-2
//! style byte-level BPE over `tokenizer.ggml.tokens` (ids are positions) and
//! `tokenizer.ggml.merges` (`"a b"` pairs, in rank order), the `smollm` pre-tokenizer
//! (each digit alone, then GPT-2's split regex, as llama.cpp's `smollm` pre-type), and
//! the special tokens (token type 3, control, or 4, user-defined) matched whole in the
//! text, so a ChatML prompt's `<|im_start|>` is one token.

use serde_json::Value;
use sluice_guest::{Error, Result};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};

/// ggml token types that are special (matched whole, never split): control and
/// user-defined.
const SPECIAL_TYPES: [i64; 2] = [3, 4];

/// Builds the tokenizer from the GGUF metadata (the host's JSON object).
pub fn from_metadata(meta: &Value) -> Result<Tokenizer> {
    let model = meta["tokenizer.ggml.model"].as_str();
    if model != Some("gpt2") {
        return Err(Error::failed(format!("the GGUF tokenizer is {model:?}, not gpt2 (byte-level BPE)")));
    }
    let tokens: Vec<&str> = strings(meta, "tokenizer.ggml.tokens")?;
    let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| ((*t).to_owned(), i as u32)).collect();
    let merges: Merges = strings(meta, "tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            let (a, b) = m.split_once(' ').ok_or_else(|| Error::failed(format!("merge {m:?} is not a pair")))?;
            Ok((a.to_owned(), b.to_owned()))
        })
        .collect::<Result<_>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| Error::failed(format!("building the BPE model: {e}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let split = Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, false, true).into()]);
    tokenizer.with_pre_tokenizer(Some(split));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    let types = meta["tokenizer.ggml.token_type"].as_array();
    let special: Vec<AddedToken> = tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            types.and_then(|t| t.get(*i)).and_then(Value::as_i64).is_some_and(|t| SPECIAL_TYPES.contains(&t))
        })
        .map(|(_, t)| AddedToken::from((*t).to_owned(), true))
        .collect();
    tokenizer.add_special_tokens(&special);
    Ok(tokenizer)
}

/// Token ids of `text` (special tokens matched whole, nothing added around it).
pub fn encode(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    let encoding = tokenizer.encode(text, false).map_err(|e| Error::failed(format!("tokenizing: {e}")))?;
    Ok(encoding.get_ids().to_vec())
}

/// The text of `ids`, special tokens included as their text.
pub fn decode(tokenizer: &Tokenizer, ids: &[u32]) -> Result<String> {
    tokenizer.decode(ids, false).map_err(|e| Error::failed(format!("decoding: {e}")))
}

fn strings<'a>(meta: &'a Value, key: &str) -> Result<Vec<&'a str>> {
    meta[key]
        .as_array()
        .ok_or_else(|| Error::failed(format!("the GGUF metadata has no array {key}")))?
        .iter()
        .map(|v| v.as_str().ok_or_else(|| Error::failed(format!("{key} holds a non-string"))))
        .collect()
}
