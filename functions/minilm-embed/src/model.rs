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
    ///
    /// Rows of very different lengths run in separate forward passes
    /// ([`length_groups`]), so a batch of one long text and many short ones (a server's
    /// dynamic batch, say) does not pad every short one to the long one's length.
    pub fn embed<D: Device<Tensor = T, Error = T::Error>>(&self, dev: &D, batch: &Batch) -> Result<Vec<f32>, T::Error> {
        let groups = length_groups(&batch.lengths);
        if groups.len() <= 1 {
            return self.embed_padded(dev, batch);
        }
        let hidden = self.cfg.hidden_size as usize;
        let mut out = vec![0f32; batch.batch * hidden];
        for rows in groups {
            let part = sub_batch(batch, &rows);
            let embedded = self.embed_padded(dev, &part)?;
            for (&row, e) in rows.iter().zip(embedded.chunks_exact(hidden)) {
                out[row * hidden..(row + 1) * hidden].copy_from_slice(e);
            }
        }
        Ok(out)
    }

    /// [`Bert::embed`] in one forward pass, every row padded to `batch.seq_len`.
    fn embed_padded<D: Device<Tensor = T, Error = T::Error>>(
        &self,
        dev: &D,
        batch: &Batch,
    ) -> Result<Vec<f32>, T::Error> {
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

/// Padding a group may add beyond its rows' own tokens: a quarter of them, plus this
/// many tokens (below which a separate pass's launches cost more than the padding).
const PADDING_SLACK_TOKENS: usize = 32;

/// Splits rows into groups of similar lengths, each run as one padded forward pass:
/// rows in ascending length join a group while its padded size stays within 1.25× its
/// tokens plus [`PADDING_SLACK_TOKENS`]. Row indices per group, in ascending length.
fn length_groups(lengths: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut tokens = 0;
    for i in order {
        let len = lengths[i];
        let fits = groups.last().is_some_and(|g| {
            let padded = (g.len() + 1) * len;
            4 * padded <= 5 * (tokens + len) + 4 * PADDING_SLACK_TOKENS
        });
        if fits {
            groups.last_mut().expect("a group").push(i);
            tokens += len;
        } else {
            groups.push(vec![i]);
            tokens = len;
        }
    }
    groups
}

/// The rows `rows` of `batch`, padded to the longest of them.
fn sub_batch(batch: &Batch, rows: &[usize]) -> Batch {
    let seq_len = rows.iter().map(|&r| batch.lengths[r]).max().unwrap_or(0);
    let mut part = Batch {
        batch: rows.len(),
        seq_len,
        ids: Vec::with_capacity(rows.len() * seq_len),
        attention_mask: Vec::with_capacity(rows.len() * seq_len),
        lengths: Vec::with_capacity(rows.len()),
    };
    for &r in rows {
        // Rows are left-aligned: the first `seq_len` positions hold every real token.
        let start = r * batch.seq_len;
        part.ids.extend_from_slice(&batch.ids[start..start + seq_len]);
        part.attention_mask.extend_from_slice(&batch.attention_mask[start..start + seq_len]);
        part.lengths.push(batch.lengths[r]);
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similar_lengths_share_a_pass_and_outliers_get_their_own() {
        // The reference sentences' token counts.
        let lengths = [5, 2, 9, 9, 12, 18, 37, 23, 41, 18, 12, 11, 16, 9, 133, 256];
        let groups = length_groups(&lengths);
        let lens: Vec<Vec<usize>> = groups.iter().map(|g| g.iter().map(|&i| lengths[i]).collect()).collect();
        assert_eq!(lens, [vec![2, 5, 9, 9, 9, 11, 12, 12], vec![16, 18, 18, 23], vec![37, 41], vec![133, 256]]);
        let mut all: Vec<usize> = groups.concat();
        all.sort();
        assert_eq!(all, (0..lengths.len()).collect::<Vec<_>>(), "every row once");
        assert_eq!(length_groups(&[7]), [vec![0]]);
        assert_eq!(length_groups(&[128, 128, 128]), [vec![0, 1, 2]], "equal lengths never split");
    }

    #[test]
    fn a_sub_batch_keeps_its_rows_tokens_and_pads_to_its_longest() {
        let batch = Batch {
            batch: 3,
            seq_len: 4,
            ids: vec![1, 2, 0, 0, 3, 4, 5, 6, 7, 0, 0, 0],
            attention_mask: vec![1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0],
            lengths: vec![2, 4, 1],
        };
        let part = sub_batch(&batch, &[2, 0]);
        assert_eq!((part.batch, part.seq_len), (2, 2));
        assert_eq!(part.ids, [7, 0, 1, 2]);
        assert_eq!(part.attention_mask, [1, 0, 1, 1]);
        assert_eq!(part.lengths, [1, 2]);
    }
}
