//! The BERT encoder of all-MiniLM-L6-v2 plus sentence-transformers' pooling, written
//! once against the [`Tensor`]/[`Device`] traits: embeddings (word + position + token
//! type 0) and layer norm, N post-norm encoder layers (multi-head self-attention with an
//! additive padding mask, GELU feed-forward), then mean pooling over the attention mask
//! and L2 normalisation. Every step is one host op; nothing is computed in the guest
//! except the masks, which are uploaded.
//!
//! The encoder layers use the fused ops: each dense layer is one `linear` (matmul, bias
//! and, in the feed-forward, GELU), attention is one `attention` on the `[n, s, hidden]`
//! projections (heads interleaved, no permutes), and each residual block one
//! `add-layer-norm`: 9 launches per layer instead of 28.

use bert_tokenizer::Batch;

use crate::backend::{Device, Precision, Tensor};
use crate::config::BertConfig;

/// Added to attention scores of padding positions. Large enough that `exp` underflows
/// to exactly 0 in f32, small enough to be finite in f16 and bf16.
const MASKED: f32 = -10_000.0;

/// A dense layer `y = x Wᵀ + b` with PyTorch's `[out, in]` weight layout.
struct Linear<T> {
    weight: T,
    bias: T,
}

impl<T: Tensor> Linear<T> {
    /// `x Wᵀ + b`, then exact GELU if `gelu`: one launch.
    fn forward(&self, x: &T, gelu: bool) -> Result<T, T::Error> {
        x.linear(&self.weight, &self.bias, gelu)
    }
}

/// Layer normalisation over the last axis.
struct LayerNorm<T> {
    gamma: T,
    beta: T,
    eps: f32,
}

impl<T: Tensor> LayerNorm<T> {
    fn forward(&self, x: &T) -> Result<T, T::Error> {
        x.layer_norm(&self.gamma, &self.beta, self.eps)
    }

    /// The post-norm residual block: `layer_norm(x + residual)`, one launch.
    fn residual(&self, x: &T, residual: &T) -> Result<T, T::Error> {
        x.add_layer_norm(residual, &self.gamma, &self.beta, self.eps)
    }
}

/// One post-norm encoder layer.
struct Layer<T> {
    query: Linear<T>,
    key: Linear<T>,
    value: Linear<T>,
    attn_out: Linear<T>,
    attn_norm: LayerNorm<T>,
    ffn_in: Linear<T>,
    ffn_out: Linear<T>,
    ffn_norm: LayerNorm<T>,
}

/// The loaded model: weight handles in the compute precision.
pub struct Bert<T> {
    cfg: BertConfig,
    precision: Precision,
    word: T,
    position: T,
    token_type: T,
    emb_norm: LayerNorm<T>,
    layers: Vec<Layer<T>>,
}

/// Sizes of one forward call.
#[derive(Clone, Copy)]
struct Dims {
    n: u32,
    s: u32,
    heads: u32,
    d: u32,
}

impl<T: Tensor> Bert<T> {
    /// Loads every weight through `dev` (the host loads each once and shares it).
    /// Names are HF `BertModel`'s, with or without a `bert.` prefix.
    pub fn load<D: Device<Tensor = T, Error = T::Error>>(
        dev: &D,
        cfg: BertConfig,
        precision: Precision,
    ) -> Result<Self, T::Error> {
        let (prefix, word) = match dev.load("embeddings.word_embeddings.weight", precision) {
            Ok(w) => ("", w),
            Err(first) => match dev.load("bert.embeddings.word_embeddings.weight", precision) {
                Ok(w) => ("bert.", w),
                Err(_) => return Err(first),
            },
        };
        let get = |name: &str| dev.load(&format!("{prefix}{name}"), precision);
        let linear = |name: &str| -> Result<Linear<T>, T::Error> {
            Ok(Linear { weight: get(&format!("{name}.weight"))?, bias: get(&format!("{name}.bias"))? })
        };
        let norm = |name: &str| -> Result<LayerNorm<T>, T::Error> {
            Ok(LayerNorm {
                gamma: get(&format!("{name}.weight"))?,
                beta: get(&format!("{name}.bias"))?,
                eps: cfg.layer_norm_eps,
            })
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let p = format!("encoder.layer.{i}");
                Ok(Layer {
                    query: linear(&format!("{p}.attention.self.query"))?,
                    key: linear(&format!("{p}.attention.self.key"))?,
                    value: linear(&format!("{p}.attention.self.value"))?,
                    attn_out: linear(&format!("{p}.attention.output.dense"))?,
                    attn_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                    ffn_in: linear(&format!("{p}.intermediate.dense"))?,
                    ffn_out: linear(&format!("{p}.output.dense"))?,
                    ffn_norm: norm(&format!("{p}.output.LayerNorm"))?,
                })
            })
            .collect::<Result<Vec<_>, T::Error>>()?;
        Ok(Bert {
            position: get("embeddings.position_embeddings.weight")?,
            token_type: get("embeddings.token_type_embeddings.weight")?,
            emb_norm: norm("embeddings.LayerNorm")?,
            word,
            layers,
            precision,
            cfg,
        })
    }

    /// The L2-normalised mean-pooled embedding of every row of `batch`, row-major
    /// `[batch.batch, hidden_size]` f32. `batch.seq_len` must not exceed the model's
    /// positions; an empty batch makes no host call.
    pub fn embed<D: Device<Tensor = T, Error = T::Error>>(&self, dev: &D, batch: &Batch) -> Result<Vec<f32>, T::Error> {
        if batch.batch == 0 || batch.seq_len == 0 {
            return Ok(Vec::new());
        }
        let dims = Dims {
            n: batch.batch as u32,
            s: batch.seq_len as u32,
            heads: self.cfg.num_attention_heads,
            d: self.cfg.head_dim(),
        };
        let Dims { n, s, .. } = dims;

        // Embeddings: word[ids] + position[0..s] + token_type[0], then layer norm.
        let ids = dev.upload_i32(&[n, s], &batch.ids)?;
        let x = T::embedding(&self.word, &ids)?
            .add(&self.position.slice(0, 0, s)?)?
            .add(&self.token_type.slice(0, 0, 1)?)?;
        // Activations stay [n, s, h]: linear takes any leading axes, attention wants them.
        let mut x = self.emb_norm.forward(&x)?;

        // Additive attention mask [n, 1, 1, s]: 0 for tokens, MASKED for padding.
        let additive: Vec<f32> = batch.attention_mask.iter().map(|&m| if m == 0 { MASKED } else { 0.0 }).collect();
        let mask = self.to_compute(dev.upload_f32(&[n, 1, 1, s], &additive)?)?;

        for layer in &self.layers {
            x = self.layer_forward(layer, &x, &mask, dims)?;
        }

        // Mean pooling over real tokens, in f32.
        let hidden = self.to_f32(x)?;
        let keep: Vec<f32> = batch.attention_mask.iter().map(|&m| f32::from(m)).collect();
        let keep = dev.upload_f32(&[n, s, 1], &keep)?;
        let counts: Vec<f32> = batch.lengths.iter().map(|&l| (l as f32).max(1e-9)).collect();
        let counts = dev.upload_f32(&[n, 1], &counts)?;
        let pooled = hidden.mul(&keep)?.sum(1, false)?.div(&counts)?;

        // L2 normalisation: x / max(‖x‖, 1e-12), as torch.nn.functional.normalize.
        let norm = pooled.mul(&pooled)?.sum(1, true)?.sqrt()?.maximum(&dev.upload_f32(&[1], &[1e-12])?)?;
        dev.read_f32(&pooled.div(&norm)?)
    }

    /// One encoder layer on `x [n, s, h]`: 9 launches.
    fn layer_forward(&self, l: &Layer<T>, x: &T, mask: &T, dims: Dims) -> Result<T, T::Error> {
        let Dims { heads, d, .. } = dims;
        let q = l.query.forward(x, false)?;
        let k = l.key.forward(x, false)?;
        let v = l.value.forward(x, false)?;
        let ctx = T::attention(&q, &k, &v, mask, heads, 1.0 / (d as f32).sqrt())?;
        let x = l.attn_norm.residual(&l.attn_out.forward(&ctx, false)?, x)?;
        let ffn = l.ffn_out.forward(&l.ffn_in.forward(&x, true)?, false)?;
        l.ffn_norm.residual(&ffn, &x)
    }

    fn to_compute(&self, t: T) -> Result<T, T::Error> {
        if self.precision == Precision::F32 { Ok(t) } else { t.cast(self.precision) }
    }

    fn to_f32(&self, t: T) -> Result<T, T::Error> {
        if self.precision == Precision::F32 { Ok(t) } else { t.cast(Precision::F32) }
    }
}
