//! Tokenizer options, with the uncased-BERT defaults, optionally read from an HF
//! `tokenizer.json` (normalizer flags, WordPiece settings, special/added tokens).

use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::Value;

use crate::{Error, NormalizerFlags};

/// Everything about the tokenizer except the vocabulary itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Normalisation steps.
    pub normalizer: NormalizerFlags,
    /// The unknown token (`[UNK]`).
    pub unk_token: String,
    /// Prepended to every encoding (`[CLS]`).
    pub cls_token: String,
    /// Appended to every encoding (`[SEP]`).
    pub sep_token: String,
    /// Fills padded positions (`[PAD]`).
    pub pad_token: String,
    /// Prefix of non-initial word pieces (`##`).
    pub continuing_subword_prefix: String,
    /// Longer words (in characters) become the unknown token (100).
    pub max_input_chars_per_word: usize,
    /// Tokens matched verbatim in the raw text before normalisation
    /// (HF "added tokens"): `[PAD] [UNK] [CLS] [SEP] [MASK]` by default.
    pub special_tokens: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            normalizer: NormalizerFlags::default(),
            unk_token: "[UNK]".into(),
            cls_token: "[CLS]".into(),
            sep_token: "[SEP]".into(),
            pad_token: "[PAD]".into(),
            continuing_subword_prefix: "##".into(),
            max_input_chars_per_word: 100,
            special_tokens: ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].map(String::from).to_vec(),
        }
    }
}

/// The parts of `tokenizer.json` the options come from. Unknown fields, notably the
/// 30k-entry `model.vocab`, are skipped without being built into a map.
#[derive(Deserialize)]
struct TokenizerJson {
    normalizer: Option<NormalizerJson>,
    model: Option<ModelJson>,
    added_tokens: Option<Vec<AddedTokenJson>>,
    post_processor: Option<Value>,
    padding: Option<PaddingJson>,
}

#[derive(Deserialize)]
struct NormalizerJson {
    #[serde(rename = "type")]
    kind: String,
    clean_text: Option<bool>,
    handle_chinese_chars: Option<bool>,
    strip_accents: Option<bool>,
    lowercase: Option<bool>,
}

#[derive(Deserialize)]
struct ModelJson {
    #[serde(rename = "type")]
    kind: Option<String>,
    unk_token: Option<String>,
    continuing_subword_prefix: Option<String>,
    max_input_chars_per_word: Option<usize>,
}

#[derive(Deserialize)]
struct AddedTokenJson {
    content: String,
}

#[derive(Deserialize)]
struct PaddingJson {
    pad_token: Option<String>,
}

impl Options {
    /// Reads the options from an HF `tokenizer.json`. Fields that are absent keep their
    /// defaults; a normalizer or model of another type is an error.
    pub fn from_tokenizer_json(bytes: &[u8]) -> Result<Self, Error> {
        let json: TokenizerJson =
            serde_json::from_slice(bytes).map_err(|e| Error::Config(format!("tokenizer.json: {e}")))?;
        let mut o = Options::default();

        if let Some(n) = json.normalizer {
            if n.kind != "BertNormalizer" {
                return Err(Error::Config(format!("unsupported normalizer type {:?}", n.kind)));
            }
            let lowercase = n.lowercase.unwrap_or(true);
            o.normalizer = NormalizerFlags {
                clean_text: n.clean_text.unwrap_or(true),
                handle_chinese_chars: n.handle_chinese_chars.unwrap_or(true),
                // `null` means "follow lowercase", as in HF.
                strip_accents: n.strip_accents.unwrap_or(lowercase),
                lowercase,
            };
        }
        if let Some(m) = json.model {
            if let Some(kind) = m.kind.filter(|k| k != "WordPiece") {
                return Err(Error::Config(format!("unsupported model type {kind:?}")));
            }
            if let Some(u) = m.unk_token {
                o.unk_token = u;
            }
            if let Some(p) = m.continuing_subword_prefix {
                o.continuing_subword_prefix = p;
            }
            if let Some(n) = m.max_input_chars_per_word {
                o.max_input_chars_per_word = n;
            }
        }
        if let Some(added) = json.added_tokens {
            o.special_tokens = added.into_iter().map(|t| t.content).collect();
        }
        // [CLS]/[SEP] come from a BertProcessing or TemplateProcessing post-processor.
        if let Some(p) = json.post_processor.filter(|p| !p.is_null()) {
            let first = |k: &str| p.get(k).and_then(|c| c.get(0)).and_then(Value::as_str);
            if let (Some(cls), Some(sep)) = (first("cls"), first("sep")) {
                o.cls_token = cls.to_owned();
                o.sep_token = sep.to_owned();
            } else if let Some(single) = p.get("single").and_then(Value::as_array) {
                let specials: Vec<&str> =
                    single.iter().filter_map(|e| e.get("SpecialToken")?.get("id")?.as_str()).collect();
                if let [cls, sep] = specials[..] {
                    o.cls_token = cls.to_owned();
                    o.sep_token = sep.to_owned();
                }
            }
        }
        if let Some(pad) = json.padding.and_then(|p| p.pad_token) {
            o.pad_token = pad;
        }
        Ok(o)
    }
}

/// The vocabulary of a `tokenizer.json`'s WordPiece model.
pub(crate) fn vocab_from_tokenizer_json(bytes: &[u8]) -> Result<FxHashMap<String, u32>, Error> {
    #[derive(Deserialize)]
    struct Root {
        model: VocabModel,
    }
    #[derive(Deserialize)]
    struct VocabModel {
        vocab: FxHashMap<String, u32>,
    }
    let root: Root =
        serde_json::from_slice(bytes).map_err(|e| Error::Config(format!("tokenizer.json model.vocab: {e}")))?;
    Ok(root.model.vocab)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flags() {
        let json = br###"{"normalizer":{"type":"BertNormalizer","clean_text":true,
            "handle_chinese_chars":false,"strip_accents":null,"lowercase":false},
            "model":{"type":"WordPiece","unk_token":"<unk>","continuing_subword_prefix":"##",
            "max_input_chars_per_word":50,"vocab":{}},
            "added_tokens":[{"id":0,"content":"<unk>"}],
            "post_processor":{"type":"BertProcessing","sep":["</s>",2],"cls":["<s>",1]}}"###;
        let o = Options::from_tokenizer_json(json).unwrap();
        assert!(!o.normalizer.lowercase && !o.normalizer.strip_accents && !o.normalizer.handle_chinese_chars);
        assert_eq!(o.unk_token, "<unk>");
        assert_eq!(o.max_input_chars_per_word, 50);
        assert_eq!(o.special_tokens, ["<unk>"]);
        assert_eq!((o.cls_token.as_str(), o.sep_token.as_str()), ("<s>", "</s>"));
    }

    #[test]
    fn rejects_other_models() {
        let json = br#"{"model":{"type":"BPE"}}"#;
        assert!(Options::from_tokenizer_json(json).is_err());
    }
}
