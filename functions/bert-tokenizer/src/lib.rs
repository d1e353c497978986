//! A small, pure-Rust BERT WordPiece tokenizer that reproduces HF `tokenizers`' BERT
//! pipeline (`BertNormalizer` → `BertPreTokenizer` → `WordPiece` → `[CLS] … [SEP]`)
//! token for token, with no target-specific dependencies: it runs inside sluice guests
//! (wasm32-wasip2) and is tested natively against the real all-MiniLM-L6-v2 vocabulary.
//!
//! ```
//! # use bert_tokenizer::{BertTokenizer, Options};
//! let vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\n!\n";
//! let tok = BertTokenizer::from_vocab_txt(vocab.as_bytes(), Options::default()).unwrap();
//! assert_eq!(tok.encode("Hello worlds!", 16), [2, 5, 6, 7, 8, 3]);
//! ```

#![forbid(unsafe_code)]

mod config;
mod normalizer;
mod pretokenizer;
mod vocab;
mod wordpiece;

use std::collections::HashMap;
use std::fmt;

pub use config::Options;
pub use normalizer::{NormalizerFlags, normalize};
pub use pretokenizer::{is_bert_punctuation, pre_tokenize};
use vocab::Vocab;
pub use wordpiece::WordPiece;

/// Why a tokenizer could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The vocabulary or `tokenizer.json` is malformed or unsupported.
    Config(String),
    /// A token the tokenizer needs (`[UNK]`, `[CLS]`, …) is not in the vocabulary.
    MissingToken(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "bad tokenizer config: {m}"),
            Error::MissingToken(t) => write!(f, "token {t:?} is not in the vocabulary"),
        }
    }
}

impl std::error::Error for Error {}

/// A BERT tokenizer: vocabulary plus options.
#[derive(Debug, Clone)]
pub struct BertTokenizer {
    wordpiece: WordPiece,
    options: Options,
    cls_id: u32,
    sep_id: u32,
    pad_id: u32,
    /// Special tokens matched in the raw text, longest first.
    specials: Vec<(String, u32)>,
}

/// A padded batch of encodings, row-major `[batch, seq_len]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Number of texts.
    pub batch: usize,
    /// Length of the longest encoding; every row is padded to it.
    pub seq_len: usize,
    /// Token ids, `[batch, seq_len]`, padded with the pad id.
    pub ids: Vec<i32>,
    /// 1 for real tokens, 0 for padding, `[batch, seq_len]`.
    pub attention_mask: Vec<u8>,
    /// The unpadded length of each encoding.
    pub lengths: Vec<usize>,
}

impl BertTokenizer {
    /// Builds a tokenizer from a `vocab.txt` (one token per line, id = line number).
    pub fn from_vocab_txt(vocab_txt: &[u8], options: Options) -> Result<Self, Error> {
        let text = std::str::from_utf8(vocab_txt).map_err(|e| Error::Config(format!("vocab.txt is not UTF-8: {e}")))?;
        Self::build(Vocab::from_lines(text), options)
    }

    /// Builds a tokenizer from an HF `tokenizer.json` alone (vocabulary and options).
    pub fn from_tokenizer_json(json: &[u8]) -> Result<Self, Error> {
        let options = Options::from_tokenizer_json(json)?;
        let vocab = config::vocab_from_tokenizer_json(json)?;
        Self::build(Vocab::from_pairs(vocab.iter().map(|(t, &id)| (t.as_str(), id))), options)
    }

    /// Builds a tokenizer from a vocabulary map and options.
    pub fn new(vocab: HashMap<String, u32>, options: Options) -> Result<Self, Error> {
        Self::build(Vocab::from_pairs(vocab.iter().map(|(t, &id)| (t.as_str(), id))), options)
    }

    fn build(vocab: Vocab, options: Options) -> Result<Self, Error> {
        let id = |t: &str| vocab.get(t).ok_or_else(|| Error::MissingToken(t.to_owned()));
        let unk_id = id(&options.unk_token)?;
        let cls_id = id(&options.cls_token)?;
        let sep_id = id(&options.sep_token)?;
        let pad_id = id(&options.pad_token)?;
        let mut specials = options
            .special_tokens
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| Ok((t.clone(), id(t)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        specials.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
        let wordpiece = WordPiece {
            vocab,
            unk_id,
            prefix: options.continuing_subword_prefix.clone(),
            max_input_chars_per_word: options.max_input_chars_per_word,
        };
        Ok(Self { wordpiece, options, cls_id, sep_id, pad_id, specials })
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Number of entries in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.wordpiece.vocab.len()
    }

    /// The id of `token`, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.wordpiece.vocab.get(token)
    }

    /// The pad id (`[PAD]`).
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The ids of `text`'s word pieces, without `[CLS]`/`[SEP]` and without truncation.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        self.split_specials(text, |segment| match segment {
            Segment::Special(id) => out.push(id),
            Segment::Text(t) => {
                let normalized = normalize(t, self.options.normalizer);
                for word in pre_tokenize(&normalized) {
                    self.wordpiece.tokenize_word(word, &mut out);
                }
            }
        });
        out
    }

    /// `[CLS] pieces [SEP]`, with the pieces truncated so the whole is at most `max_len`
    /// ids (`max_len` below 2 is taken as 2).
    pub fn encode(&self, text: &str, max_len: usize) -> Vec<u32> {
        let mut pieces = self.tokenize(text);
        pieces.truncate(max_len.max(2) - 2);
        let mut ids = Vec::with_capacity(pieces.len() + 2);
        ids.push(self.cls_id);
        ids.extend(pieces);
        ids.push(self.sep_id);
        ids
    }

    /// Encodes every text and pads to the longest, with an attention mask.
    pub fn encode_batch<S: AsRef<str>>(&self, texts: &[S], max_len: usize) -> Batch {
        let encodings: Vec<Vec<u32>> = texts.iter().map(|t| self.encode(t.as_ref(), max_len)).collect();
        let seq_len = encodings.iter().map(Vec::len).max().unwrap_or(0);
        let mut ids = vec![self.pad_id as i32; texts.len() * seq_len];
        let mut attention_mask = vec![0u8; texts.len() * seq_len];
        for (row, enc) in encodings.iter().enumerate() {
            let base = row * seq_len;
            for (j, &id) in enc.iter().enumerate() {
                ids[base + j] = id as i32;
                attention_mask[base + j] = 1;
            }
        }
        Batch { batch: texts.len(), seq_len, ids, attention_mask, lengths: encodings.iter().map(Vec::len).collect() }
    }

    /// Splits the raw text around verbatim special tokens (HF's added-token pass, which
    /// runs before normalisation) and hands each piece to `f` in order.
    fn split_specials<'t>(&self, text: &'t str, mut f: impl FnMut(Segment<'t>)) {
        let mut plain_start = 0;
        let mut i = 0;
        let bytes = text.as_bytes();
        while i < bytes.len() {
            let hit =
                self.specials.iter().find(|(t, _)| bytes[i] == t.as_bytes()[0] && text[i..].starts_with(t.as_str()));
            match hit {
                Some((t, id)) => {
                    if plain_start < i {
                        f(Segment::Text(&text[plain_start..i]));
                    }
                    f(Segment::Special(*id));
                    i += t.len();
                    plain_start = i;
                }
                None => i += text[i..].chars().next().map_or(1, char::len_utf8),
            }
        }
        if plain_start < text.len() {
            f(Segment::Text(&text[plain_start..]));
        }
    }
}

enum Segment<'t> {
    Text(&'t str),
    Special(u32),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok() -> BertTokenizer {
        let vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncafe\n,\n.\n日\n本\nun\n##known\nx\n";
        BertTokenizer::from_vocab_txt(vocab.as_bytes(), Options::default()).unwrap()
    }

    #[test]
    fn accents_punctuation_cjk_unknown() {
        let t = tok();
        assert_eq!(t.encode("The CAFÉ, 日本.", 64), [2, 5, 6, 7, 9, 10, 8, 3]);
        assert_eq!(t.encode("unknown zebra", 64), [2, 11, 12, 1, 3]);
    }

    #[test]
    fn special_tokens_in_raw_text() {
        let t = tok();
        assert_eq!(t.encode("the[MASK]the", 64), [2, 5, 4, 5, 3]);
        // Matched before normalisation only: lowercase "[mask]" is ordinary text.
        assert_eq!(t.encode("[mask]", 64), [2, 1, 1, 1, 3]);
    }

    #[test]
    fn truncation_keeps_cls_and_sep() {
        let t = tok();
        let ids = t.encode("the the the the the the", 4);
        assert_eq!(ids, [2, 5, 5, 3]);
        assert_eq!(t.encode("the", 0), [2, 3]);
        assert_eq!(t.encode("", 8), [2, 3]);
    }

    #[test]
    fn batch_pads_with_mask() {
        let t = tok();
        let b = t.encode_batch(&["the cafe", ""], 16);
        assert_eq!((b.batch, b.seq_len), (2, 4));
        assert_eq!(b.ids, [2, 5, 6, 3, 2, 3, 0, 0]);
        assert_eq!(b.attention_mask, [1, 1, 1, 1, 1, 1, 0, 0]);
        assert_eq!(b.lengths, [4, 2]);
        let empty = t.encode_batch::<&str>(&[], 16);
        assert_eq!((empty.batch, empty.seq_len, empty.ids.len()), (0, 0, 0));
    }

    #[test]
    fn missing_special_token_is_an_error() {
        let err = BertTokenizer::from_vocab_txt(b"[PAD]\n[UNK]\n", Options::default()).unwrap_err();
        assert_eq!(err, Error::MissingToken("[CLS]".into()));
    }
}
