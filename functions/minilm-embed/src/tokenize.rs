//! Glue between the artifacts and the tokenizer: builds the [`BertTokenizer`] from the
//! `vocab` artifact (with the options of the optional `tokenizer` artifact, an HF
//! tokenizer.json) and the model config from `config`, once per instance.

use std::sync::OnceLock;

use bert_tokenizer::{BertTokenizer, Options};
use sluice_guest::{Error, ErrorCode, Result, artifacts};

use crate::config::BertConfig;

/// What an instance builds once from the artifacts.
pub struct Prepared {
    /// The model's hyper-parameters.
    pub config: BertConfig,
    /// The tokenizer.
    pub tokenizer: BertTokenizer,
}

static PREPARED: OnceLock<Prepared> = OnceLock::new();

/// The config and tokenizer, built on first use and kept while the instance lives.
pub fn prepared() -> Result<&'static Prepared> {
    if let Some(p) = PREPARED.get() {
        return Ok(p);
    }
    let config = BertConfig::from_json(&artifacts::read("config")?)
        .map_err(|e| Error::failed(format!("artifact `config`: {e}")))?;
    let options = match artifacts::read("tokenizer") {
        Ok(json) => {
            Options::from_tokenizer_json(&json).map_err(|e| Error::failed(format!("artifact `tokenizer`: {e}")))?
        }
        Err(e) if e.is(ErrorCode::NotFound) => Options::default(),
        Err(e) => return Err(e),
    };
    let tokenizer = BertTokenizer::from_vocab_txt(&artifacts::read("vocab")?, options)
        .map_err(|e| Error::failed(format!("artifact `vocab`: {e}")))?;
    Ok(PREPARED.get_or_init(|| Prepared { config, tokenizer }))
}
