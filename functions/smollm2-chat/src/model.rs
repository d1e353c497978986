//! The llama forward pass of SmolLM2 on the device: hyper-parameters from the GGUF
//! metadata, the weights as the host loads them (Q4_1 linears, the Q8_0 token table,
//! f32 norms), and one KV cache per layer that the invocation owns (`Tensor::zeros`)
//! and extends in place (through `kv-attention`) by each step's positions.
//!
//! A step of `s` tokens at position `pos`: embedding; per block, RMS norm, q/k/v
//! linears, then one `kv-attention` launch: RoPE at `pos` (llama.cpp's adjacent-pair
//! layout, that of GGUF llama weights), the new keys and values written into the caches
//! at `pos`, causal grouped-query attention over the first `pos + s` positions; the
//! output linear and the residual; RMS norm, SwiGLU FFN (`silu(gate) * up`, down) and
//! the residual; then the final norm of the last position and the tied output head
//! (`token_embd`). A decode step of many sequences runs the same launches on one row
//! per sequence, the attention's one launch covering every sequence's caches.

use serde_json::Value;
use sluice_guest::{DType, Error, KvSequence, Result, Tensor, UnaryOp, artifacts};

/// The function's one artifact: the GGUF file.
pub const ARTIFACT: &str = "model";

/// Hyper-parameters of a llama GGUF file.
#[derive(Clone, Debug)]
pub struct Config {
    pub blocks: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub context: u32,
    pub rope_base: f32,
    pub eps: f32,
}

impl Config {
    /// Reads the `llama.*` keys.
    pub fn from_metadata(meta: &Value) -> Result<Config> {
        let int = |k: &str| {
            meta[k].as_u64().and_then(|v| u32::try_from(v).ok()).ok_or_else(|| Error::failed(format!("no {k}")))
        };
        let float = |k: &str| meta[k].as_f64().map(|v| v as f32).ok_or_else(|| Error::failed(format!("no {k}")));
        let arch = meta["general.architecture"].as_str();
        if arch != Some("llama") {
            return Err(Error::failed(format!("the GGUF architecture is {arch:?}, not llama")));
        }
        let c = Config {
            blocks: int("llama.block_count")?,
            hidden: int("llama.embedding_length")?,
            heads: int("llama.attention.head_count")?,
            kv_heads: int("llama.attention.head_count_kv")?,
            context: int("llama.context_length")?,
            rope_base: float("llama.rope.freq_base").unwrap_or(10_000.0),
            eps: float("llama.attention.layer_norm_rms_epsilon")?,
        };
        if c.heads == 0 || c.kv_heads == 0 || !c.hidden.is_multiple_of(c.heads) || !c.heads.is_multiple_of(c.kv_heads) {
            return Err(Error::failed(format!("inconsistent attention shape {c:?}")));
        }
        Ok(c)
    }

    fn head_dim(&self) -> u32 {
        self.hidden / self.heads
    }
}

/// The weights of one block.
struct Block {
    attn_norm: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    ffn_norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

/// The model's weights (loaded once by the host and shared).
pub struct Model {
    config: Config,
    embed: Tensor,
    blocks: Vec<Block>,
    out_norm: Tensor,
}

/// One sequence's KV caches (one pair per block) and how many positions they hold.
pub struct Cache {
    layers: Vec<(Tensor, Tensor)>,
    /// Positions filled so far.
    pub pos: u32,
}

fn weight(name: &str) -> Result<Tensor> {
    artifacts::load_tensor(ARTIFACT, name, None)
}

impl Model {
    /// Loads the weights (shared by the host between invocations).
    pub fn load(config: Config) -> Result<Model> {
        let blocks = (0..config.blocks)
            .map(|b| {
                let w = |t: &str| weight(&format!("blk.{b}.{t}.weight"));
                Ok(Block {
                    attn_norm: w("attn_norm")?,
                    q: w("attn_q")?,
                    k: w("attn_k")?,
                    v: w("attn_v")?,
                    out: w("attn_output")?,
                    ffn_norm: w("ffn_norm")?,
                    gate: w("ffn_gate")?,
                    up: w("ffn_up")?,
                    down: w("ffn_down")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Model { embed: weight("token_embd.weight")?, out_norm: weight("output_norm.weight")?, blocks, config })
    }

    /// Fresh KV caches of `ctx` positions for one sequence.
    pub fn cache(&self, ctx: u32) -> Result<Cache> {
        let c = &self.config;
        let shape = [ctx, c.kv_heads, c.head_dim()];
        let layers = (0..c.blocks)
            .map(|_| Ok((Tensor::zeros(DType::F32, &shape)?, Tensor::zeros(DType::F32, &shape)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Cache { layers, pos: 0 })
    }

    /// Runs `tokens` of one sequence at its next positions and returns the logits
    /// `[1, vocab]` of the last one (queued on the device; nothing is read back).
    pub fn step(&self, cache: &mut Cache, tokens: &[u32]) -> Result<Tensor> {
        let s = tokens.len() as u32;
        let x = self.forward(&mut [cache], &[s], tokens)?;
        let last = if s > 1 { x.slice(0, s - 1, s)? } else { x };
        self.head(&last)
    }

    /// One decode step of many sequences at once: `tokens[i]` is the next token of
    /// `caches[i]`. Every weight is read once for all of them (the linears run on
    /// `[n, hidden]`), and each block's attention is one launch for all of them, each
    /// sequence over its own caches. Returns the logits `[n, vocab]`, row `i` sequence
    /// `i`'s, each computed as [`Model::step`] computes it for that sequence alone.
    pub fn step_many(&self, caches: &mut [&mut Cache], tokens: &[u32]) -> Result<Tensor> {
        let x = self.forward(caches, &vec![1; tokens.len()], tokens)?;
        self.head(&x)
    }

    /// The blocks on `tokens`, of which the first `rows[0]` are `caches[0]`'s next
    /// ones, the next `rows[1]` `caches[1]`'s, and so on; returns the last block's
    /// output `[n, hidden]` and moves each cache's position past its rows.
    fn forward(&self, caches: &mut [&mut Cache], rows: &[u32], tokens: &[u32]) -> Result<Tensor> {
        let c = &self.config;
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let mut x = Tensor::embedding(&self.embed, &Tensor::from_i32(&[tokens.len() as u32], &ids)?)?;
        let scale = 1.0 / (c.head_dim() as f32).sqrt();
        for (b, block) in self.blocks.iter().enumerate() {
            x = self.block(block, &x, |q, k, v| {
                let sequences: Vec<KvSequence<'_>> = caches
                    .iter()
                    .zip(rows)
                    .map(|(cache, &rows)| {
                        let (k_cache, v_cache) = &cache.layers[b];
                        KvSequence { k_cache, v_cache, rows, position: cache.pos }
                    })
                    .collect();
                Tensor::kv_attention(q, k, v, &sequences, c.rope_base, scale)
            })?;
        }
        for (cache, &rows) in caches.iter_mut().zip(rows) {
            cache.pos += rows;
        }
        Ok(x)
    }

    /// One block on `x [s, hidden]`; `attend` turns the projections `q [s, heads, d]`,
    /// `k` and `v [s, kv_heads, d]` into the attention output `[s, heads, d]`.
    fn block(
        &self,
        b: &Block,
        x: &Tensor,
        attend: impl FnOnce(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let s = x.shape()[0];
        let h = x.rms_norm(&b.attn_norm, c.eps)?;
        let d = c.head_dim();
        let q = h.linear(&b.q, None, true, None)?.reshape(&[s, c.heads, d])?;
        let k = h.linear(&b.k, None, true, None)?.reshape(&[s, c.kv_heads, d])?;
        let v = h.linear(&b.v, None, true, None)?.reshape(&[s, c.kv_heads, d])?;
        let att = attend(&q, &k, &v)?;
        let o = att.reshape(&[s, c.hidden])?.linear(&b.out, None, true, None)?;
        let x = x.add(&o)?;
        let h = x.rms_norm(&b.ffn_norm, c.eps)?;
        let gate = h.linear(&b.gate, None, true, Some(UnaryOp::Silu))?;
        let up = h.linear(&b.up, None, true, None)?;
        let f = gate.mul(&up)?.linear(&b.down, None, true, None)?;
        x.add(&f)
    }

    /// The final norm and the tied output head: logits `[s, vocab]`.
    fn head(&self, x: &Tensor) -> Result<Tensor> {
        x.rms_norm(&self.out_norm, self.config.eps)?.linear(&self.embed, None, true, None)
    }
}
