"""The llama forward pass of SmolLM2 on the device, op for op that of
`smollm2-chat/src/model.rs`: hyper-parameters from the GGUF metadata, the weights as
the host loads them (Q4_1 linears, the Q8_0 token table, f32 norms), and one KV cache
per layer that the invocation owns (`Tensor.zeros`) and extends in place (`write_rows`)
by each step's positions.

A step of `s` tokens at position `pos`: embedding; per block, RMS norm, q/k/v linears,
RoPE at `pos`, the new keys and values written into the caches at `pos`, causal
grouped-query attention over the first `pos + s` positions, the output linear and the
residual; RMS norm, SwiGLU FFN (`silu(gate) * up`, down) and the residual; then the
final norm of the last position and the tied output head (`token_embd`).
"""

import math
import struct
from typing import List, Sequence

from sluice_guest import Dtype, Failed, Tensor, UnaryOp, artifacts

#: The function's one artifact: the GGUF file.
ARTIFACT = "model"


def _uint(meta: dict, key: str):
    v = meta.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _float(meta: dict, key: str):
    v = meta.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class Config:
    """Hyper-parameters of a llama GGUF file (the `llama.*` keys)."""

    def __init__(self, meta: dict):
        arch = meta.get("general.architecture")
        if arch != "llama":
            raise Failed(f"the GGUF architecture is {arch!r}, not llama")

        def int_(k):
            v = _uint(meta, k)
            if v is None or v > 0xFFFF_FFFF:
                raise Failed(f"no {k}")
            return v

        def float_(k):
            v = _float(meta, k)
            if v is None:
                raise Failed(f"no {k}")
            return v

        self.blocks = int_("llama.block_count")
        self.hidden = int_("llama.embedding_length")
        self.heads = int_("llama.attention.head_count")
        self.kv_heads = int_("llama.attention.head_count_kv")
        self.context = int_("llama.context_length")
        base = _float(meta, "llama.rope.freq_base")
        self.rope_base = 10_000.0 if base is None else base
        self.eps = float_("llama.attention.layer_norm_rms_epsilon")
        if self.heads == 0 or self.kv_heads == 0 or self.hidden % self.heads or self.heads % self.kv_heads:
            raise Failed(f"inconsistent attention shape {vars(self)}")
        self.head_dim = self.hidden // self.heads


class Block:
    """The weights of one block."""

    __slots__ = ("attn_norm", "q", "k", "v", "out", "ffn_norm", "gate", "up", "down")

    def __init__(self, b: int):
        for name, tensor in zip(
            self.__slots__,
            ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"),
        ):
            setattr(self, name, weight(f"blk.{b}.{tensor}.weight"))


class Cache:
    """One sequence's KV caches (one pair per block) and how many positions they hold."""

    def __init__(self, layers):
        self.layers = layers
        self.pos = 0


def f32(x: float) -> float:
    """`x` rounded to f32 (so a computed parameter is the Rust guest's bit for bit)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def weight(name: str) -> Tensor:
    return artifacts.load_tensor(ARTIFACT, name, None)


class Model:
    """The model's weights (loaded once by the host and shared)."""

    def __init__(self, config: Config):
        self.config = config
        self.blocks = [Block(b) for b in range(config.blocks)]
        self.embed = weight("token_embd.weight")
        self.out_norm = weight("output_norm.weight")

    def cache(self, ctx: int) -> Cache:
        """Fresh KV caches of `ctx` positions for one sequence."""
        c = self.config
        shape = [ctx, c.kv_heads, c.head_dim]
        return Cache([(Tensor.zeros(Dtype.F32, shape), Tensor.zeros(Dtype.F32, shape)) for _ in range(c.blocks)])

    def step(self, cache: Cache, tokens: Sequence[int]) -> Tensor:
        """Runs `tokens` of one sequence at its next positions and returns the logits
        `[1, vocab]` of the last one (queued on the device; nothing is read back)."""
        s = len(tokens)
        x = Tensor.embedding(self.embed, Tensor.from_i32([s], tokens))
        for b, block in enumerate(self.blocks):
            layer, pos = cache.layers[b], cache.pos
            x = self.block(block, x, lambda q, k, v: self.attend(layer, pos, q, k, v))
        cache.pos += s
        last = x.slice(0, s - 1, s) if s > 1 else x
        return self.head(last)

    def step_many(self, caches: List[Cache], tokens: Sequence[int]) -> Tensor:
        """One decode step of many sequences at once (`tokens[i]` the next token of
        `caches[i]`): the linears run on `[n, hidden]`, attention per sequence over its
        own cache; the logits `[n, vocab]`, row `i` sequence `i`'s. One sequence goes
        through `step` itself."""
        if len(caches) == 1 and len(tokens) == 1:
            return self.step(caches[0], tokens)
        n = len(tokens)
        x = Tensor.embedding(self.embed, Tensor.from_i32([n], tokens))
        for b, block in enumerate(self.blocks):

            def attend(q, k, v, b=b):
                rows = []
                for i, cache in enumerate(caches):
                    row = lambda t: t.slice(0, i, i + 1)  # noqa: E731
                    rows.append(self.attend(cache.layers[b], cache.pos, row(q), row(k), row(v)))
                return Tensor.concat(rows, 0)  # `[n, heads, d]` in one launch

            x = self.block(block, x, attend)
        for cache in caches:
            cache.pos += 1
        return self.head(x)

    def block(self, b: Block, x: Tensor, attend) -> Tensor:
        """One block on `x [s, hidden]`; `attend` turns the projections into the
        attention output `[s, heads, d]`."""
        c = self.config
        s = x.shape[0]
        h = x.rms_norm(b.attn_norm, eps=c.eps)
        q = h.linear(b.q, None, None, transpose_w=True)
        k = h.linear(b.k, None, None, transpose_w=True)
        v = h.linear(b.v, None, None, transpose_w=True)
        att = attend(q, k, v)
        o = att.reshape([s, c.hidden]).linear(b.out, None, None, transpose_w=True)
        x = x.add(o)
        h = x.rms_norm(b.ffn_norm, eps=c.eps)
        gate = h.linear(b.gate, None, UnaryOp.SILU, transpose_w=True)
        up = h.linear(b.up, None, None, transpose_w=True)
        f = gate.mul(up).linear(b.down, None, None, transpose_w=True)
        return x.add(f)

    def attend(self, cache, pos: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """RoPE on `q` and `k`, the new keys and values written into the caches at
        `pos`, then causal grouped-query attention over the first `pos + s` positions."""
        c = self.config
        d = c.head_dim
        s = q.shape[0]
        q = q.reshape([s, c.heads, d]).rope(c.rope_base, pos)
        k = k.reshape([s, c.kv_heads, d]).rope(c.rope_base, pos)
        v = v.reshape([s, c.kv_heads, d])
        cache[0].write_rows(pos, k)
        cache[1].write_rows(pos, v)
        return Tensor.gqa_attention(q, cache[0], cache[1], pos + s, f32(1.0 / f32(math.sqrt(d))))

    def head(self, x: Tensor) -> Tensor:
        """The final norm and the tied output head: logits `[s, vocab]`."""
        return x.rms_norm(self.out_norm, eps=self.config.eps).linear(self.embed, None, None, transpose_w=True)
