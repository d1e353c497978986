//! The llama forward pass of SmolLM2 on the device: hyper-parameters from the GGUF
//! metadata, the weights as the host loads them (Q4_1 linears, the Q8_0 token table,
//! f32 norms), and one KV cache per layer that the invocation owns (`Tensor::zeros`)
//! and extends in place (`write_rows`) by each step's positions.
//!
//! A step of `s` tokens at position `pos`: embedding; per block, RMS norm, q/k/v
//! linears, RoPE at `pos` (llama.cpp's adjacent-pair layout, that of GGUF llama
//! weights), the new keys and values written into the caches at `pos`, causal
//! grouped-query attention over the first `pos + s` positions, the output linear and
//! the residual; RMS norm, SwiGLU FFN (`silu(gate) * up`, down) and the residual; then
//! the final norm of the last position and the tied output head (`token_embd`).

use serde_json::Value;
use sluice_guest::{DType, Error, Result, Tensor, UnaryOp, artifacts};

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

/// The model's weights and the invocation's KV caches.
pub struct Model {
    config: Config,
    embed: Tensor,
    blocks: Vec<Block>,
    out_norm: Tensor,
    caches: Vec<(Tensor, Tensor)>,
    /// Positions of the caches filled so far.
    pub pos: u32,
}

fn weight(name: &str) -> Result<Tensor> {
    artifacts::load_tensor(ARTIFACT, name, None)
}

impl Model {
    /// Loads the weights (shared by the host between invocations) and allocates KV
    /// caches of `ctx` positions.
    pub fn load(config: Config, ctx: u32) -> Result<Model> {
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
        let shape = [ctx, config.kv_heads, config.head_dim()];
        let caches = (0..config.blocks)
            .map(|_| Ok((Tensor::zeros(DType::F32, &shape)?, Tensor::zeros(DType::F32, &shape)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Model {
            embed: weight("token_embd.weight")?,
            out_norm: weight("output_norm.weight")?,
            blocks,
            caches,
            config,
            pos: 0,
        })
    }

    /// Runs `tokens` at the next positions and returns the logits `[1, vocab]` of the
    /// last one (queued on the device; nothing is read back).
    pub fn step(&mut self, tokens: &[u32]) -> Result<Tensor> {
        let c = &self.config;
        let s = tokens.len() as u32;
        let (d, kv) = (c.head_dim(), c.kv_heads * c.head_dim());
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let mut x = Tensor::embedding(&self.embed, &Tensor::from_i32(&[s], &ids)?)?;
        let scale = 1.0 / (d as f32).sqrt();
        for (b, (k_cache, v_cache)) in self.blocks.iter().zip(&self.caches) {
            let h = x.rms_norm(&b.attn_norm, c.eps)?;
            let q = h.linear(&b.q, None, true, None)?.reshape(&[s, c.heads, d])?.rope(c.rope_base, self.pos)?;
            let k = h.linear(&b.k, None, true, None)?.reshape(&[s, c.kv_heads, d])?.rope(c.rope_base, self.pos)?;
            let v = h.linear(&b.v, None, true, None)?.reshape(&[s, c.kv_heads, d])?;
            debug_assert_eq!(kv, c.kv_heads * d);
            k_cache.write_rows(self.pos, &k)?;
            v_cache.write_rows(self.pos, &v)?;
            let att = Tensor::gqa_attention(&q, k_cache, v_cache, self.pos + s, scale)?;
            let o = att.reshape(&[s, c.hidden])?.linear(&b.out, None, true, None)?;
            x = x.add(&o)?;
            let h = x.rms_norm(&b.ffn_norm, c.eps)?;
            let gate = h.linear(&b.gate, None, true, Some(UnaryOp::Silu))?;
            let up = h.linear(&b.up, None, true, None)?;
            let f = gate.mul(&up)?.linear(&b.down, None, true, None)?;
            x = x.add(&f)?;
        }
        self.pos += s;
        let last = if s > 1 { x.slice(0, s - 1, s)? } else { x };
        last.rms_norm(&self.out_norm, c.eps)?.linear(&self.embed, None, true, None)
    }
}
