//! The BERT hyper-parameters the forward pass needs, read from the `config` artifact
//! (an HF `config.json`), and the sentence-transformers sequence limit.

use serde_json::Value;

/// sentence-transformers' `max_seq_length` for all-MiniLM-L6-v2 (sentence_bert_config.json),
/// including `[CLS]` and `[SEP]`. tokenizer.json's own 128 is deliberately not used.
pub const MAX_SEQ_LEN: usize = 256;

/// BERT encoder shape and constants.
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    /// Width of every token vector (384).
    pub hidden_size: u32,
    /// Attention heads per layer (12); `hidden_size` divides by it.
    pub num_attention_heads: u32,
    /// Encoder layers (6).
    pub num_hidden_layers: u32,
    /// Width of the feed-forward block (1536).
    pub intermediate_size: u32,
    /// Positions the model has embeddings for (512).
    pub max_position_embeddings: u32,
    /// Layer-norm epsilon (1e-12).
    pub layer_norm_eps: f32,
}

impl BertConfig {
    /// Parses an HF BERT `config.json`; only an exact-GELU, absolute-position BERT is accepted.
    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("config.json: {e}"))?;
        let int = |k: &str| -> Result<u32, String> {
            v.get(k)
                .and_then(Value::as_u64)
                .and_then(|x| u32::try_from(x).ok())
                .filter(|&x| x > 0)
                .ok_or_else(|| format!("config.json: `{k}` is missing or not a positive integer"))
        };
        if let Some(act) = v.get("hidden_act").and_then(Value::as_str)
            && act != "gelu"
        {
            return Err(format!("config.json: hidden_act {act:?} is not supported (only exact \"gelu\")"));
        }
        if let Some(pos) = v.get("position_embedding_type").and_then(Value::as_str)
            && pos != "absolute"
        {
            return Err(format!("config.json: position_embedding_type {pos:?} is not supported"));
        }
        let cfg = BertConfig {
            hidden_size: int("hidden_size")?,
            num_attention_heads: int("num_attention_heads")?,
            num_hidden_layers: int("num_hidden_layers")?,
            intermediate_size: int("intermediate_size")?,
            max_position_embeddings: int("max_position_embeddings")?,
            layer_norm_eps: v.get("layer_norm_eps").and_then(Value::as_f64).unwrap_or(1e-12) as f32,
        };
        if !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
            return Err(format!(
                "config.json: hidden_size {} is not a multiple of num_attention_heads {}",
                cfg.hidden_size, cfg.num_attention_heads
            ));
        }
        Ok(cfg)
    }

    /// Width of one attention head (32).
    pub fn head_dim(&self) -> u32 {
        self.hidden_size / self.num_attention_heads
    }

    /// The longest encoding the function produces: sentence-transformers' 256, or fewer
    /// if the model has fewer positions.
    pub fn max_seq_len(&self) -> usize {
        MAX_SEQ_LEN.min(self.max_position_embeddings as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl BertConfig {
        /// all-MiniLM-L6-v2's values.
        const MINILM_L6: BertConfig = BertConfig {
            hidden_size: 384,
            num_attention_heads: 12,
            num_hidden_layers: 6,
            intermediate_size: 1536,
            max_position_embeddings: 512,
            layer_norm_eps: 1e-12,
        };
    }

    #[test]
    fn parses_minilm_config() {
        let json = br#"{"hidden_act":"gelu","hidden_size":384,"intermediate_size":1536,
            "layer_norm_eps":1e-12,"max_position_embeddings":512,"num_attention_heads":12,
            "num_hidden_layers":6,"position_embedding_type":"absolute"}"#;
        let cfg = BertConfig::from_json(json).unwrap();
        assert_eq!(cfg, BertConfig::MINILM_L6);
        assert_eq!((cfg.head_dim(), cfg.max_seq_len()), (32, 256));
    }

    #[test]
    fn rejects_other_activations_and_missing_fields() {
        assert!(BertConfig::from_json(br#"{"hidden_act":"relu"}"#).unwrap_err().contains("relu"));
        assert!(BertConfig::from_json(br#"{"hidden_size":384}"#).unwrap_err().contains("num_attention_heads"));
    }
}
