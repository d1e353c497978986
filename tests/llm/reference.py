"""An independent reference for smollm2-chat: SmolLM2 (llama) in NumPy.

Written for the test from the llama architecture, not from sluice's code. gguf-py
(llama.cpp's reader) reads the GGUF file and dequantizes its Q4_1/Q8_0 tensors to
f32; the forward runs in float32 over them. A linear with a block-quantized weight
multiplies it with its input quantized to Q8 blocks, as ggml and sluice's quantized
linear do (per block of 32: d = max|x| / 127, q = round-half-even(x * (1 / d)), the
values d * q). RMS norm, RoPE on adjacent pairs (the layout of llama weights in GGUF
files), grouped-query causal attention over a KV cache, SwiGLU FFN, the tied output
head. The tokenizer is Hugging Face `tokenizers` configured as SmolLM2's
tokenizer.json (byte-level BPE, digits split one by one) from the GGUF vocabulary and
merges; the chat template is rendered by jinja2 from the GGUF's own template text.

Q8 activations make the model's logits sensitive to rounding: a value that lands
within an ulp of a rounding boundary of its block moves a whole step of d, so two
correct forwards whose f32 sums differ only in order part by 2-4 % of max |logit|
(scaling one norm's weights by 1 + 1e-7 moves them by that much here), where f32
activations part by ~1e-6. The test's bound is set by that, not by f32.

Usage: reference.py SPEC.json. The spec names the GGUF file and, per case, the prompt
(`messages` or `text`), sluice's prompt ids, generated ids and the file of its logits
(f32 little-endian, [steps, vocab]). One causal pass over the prompt and sluice's
tokens gives the reference's logits at every step in sluice's own context. Prints one
JSON object: per case, the reference tokenizer's prompt ids and whether they decode
back to the prompt, and per step (up to the end-of-sequence token) the reference's
argmax, the relative error of sluice's logits, max |a - b| / max |b| over the
vocabulary (b the reference), and the deficit of sluice's token, (max b - b[token]) /
max |b| (0 when sluice picked the reference's argmax).
"""

import json
import sys

import jinja2
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers


def field(reader, name):
    return reader.fields[name].contents()


def load(path):
    """The reader, every tensor as float32, and the names of the block-quantized ones."""
    reader = GGUFReader(path)
    weights, quantized = {}, set()
    for t in reader.tensors:
        a = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        dims = [int(d) for d in t.shape][::-1]  # ggml dims are fastest-first
        weights[t.name] = a.reshape(dims)
        if t.tensor_type.name not in ("F32", "F16", "BF16"):
            quantized.add(t.name)
    return reader, weights, quantized


def q8(x):
    """x (float32, last axis a multiple of 32) as its Q8 blocks stand for."""
    blocks = x.reshape(-1, 32)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
        d[~np.isfinite(blocks).all(axis=1)] = np.nan
        inverse = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        q = np.rint(blocks * inverse)
    return (d * q).astype(np.float32).reshape(x.shape)


def tokenizer(reader):
    tokens = field(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    types = field(reader, "tokenizer.ggml.token_type")
    tok.add_special_tokens([AddedToken(t, special=True) for t, k in zip(tokens, types) if k in (3, 4)])
    return tok


class Llama:
    def __init__(self, reader, w, quantized):
        self.w = w
        self.quantized = quantized
        self.blocks = int(field(reader, "llama.block_count"))
        self.heads = int(field(reader, "llama.attention.head_count"))
        self.kv_heads = int(field(reader, "llama.attention.head_count_kv"))
        self.base = float(field(reader, "llama.rope.freq_base"))
        self.eps = float(field(reader, "llama.attention.layer_norm_rms_epsilon"))
        self.hidden = int(field(reader, "llama.embedding_length"))
        self.d = self.hidden // self.heads
        self.k = [np.zeros((0, self.kv_heads, self.d), dtype=np.float32) for _ in range(self.blocks)]
        self.v = [np.zeros((0, self.kv_heads, self.d), dtype=np.float32) for _ in range(self.blocks)]

    def norm(self, x, w):
        return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w).astype(np.float32)

    def linear(self, x, name):
        """x · Wᵀ, with x quantized to Q8 blocks where W is block-quantized."""
        return (q8(x) if name in self.quantized else x) @ self.w[name].T

    def rope(self, x, pos):
        s, _, d = x.shape
        freq = self.base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        angle = (pos + np.arange(s, dtype=np.float64))[:, None] * freq[None, :]
        cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out.astype(np.float32)

    def step(self, ids, last=1):
        """Runs `ids` at the next positions; returns the logits of the last `last`."""
        w, s = self.w, len(ids)
        pos = self.k[0].shape[0]
        x = w["token_embd.weight"][ids]
        group = self.heads // self.kv_heads
        for b in range(self.blocks):
            p = f"blk.{b}."
            h = self.norm(x, w[p + "attn_norm.weight"])
            q = self.rope(self.linear(h, p + "attn_q.weight").reshape(s, self.heads, self.d), pos)
            k = self.rope(self.linear(h, p + "attn_k.weight").reshape(s, self.kv_heads, self.d), pos)
            v = self.linear(h, p + "attn_v.weight").reshape(s, self.kv_heads, self.d)
            self.k[b] = np.concatenate([self.k[b], k])
            self.v[b] = np.concatenate([self.v[b], v])
            n = pos + s
            causal = np.arange(n)[None, :] > (pos + np.arange(s))[:, None]
            att = np.empty((s, self.heads, self.d), dtype=np.float32)
            for hh in range(self.heads):
                g = hh // group
                scores = q[:, hh, :] @ self.k[b][:, g, :].T / np.float32(np.sqrt(self.d))
                scores[causal] = -np.inf
                e = np.exp(scores - scores.max(axis=-1, keepdims=True))
                att[:, hh, :] = (e / e.sum(axis=-1, keepdims=True)) @ self.v[b][:, g, :]
            x = x + self.linear(att.reshape(s, self.hidden), p + "attn_output.weight")
            h = self.norm(x, w[p + "ffn_norm.weight"])
            gate = self.linear(h, p + "ffn_gate.weight")
            f = (gate / (np.float32(1) + np.exp(-gate))) * self.linear(h, p + "ffn_up.weight")
            x = x + self.linear(f, p + "ffn_down.weight")
        h = self.norm(x[s - last :], w["output_norm.weight"])
        return self.linear(h, "token_embd.weight").astype(np.float64)


def main():
    spec = json.load(open(sys.argv[1]))
    reader, weights, quantized = load(spec["gguf"])
    tok = tokenizer(reader)
    eos = int(field(reader, "tokenizer.ggml.eos_token_id"))
    template = jinja2.Environment().from_string(field(reader, "tokenizer.chat_template"))
    results = []
    for case in spec["cases"]:
        if "messages" in case:
            text = template.render(messages=case["messages"], add_generation_prompt=True)
        else:
            text = case["text"]
        ids = tok.encode(text, add_special_tokens=False).ids
        roundtrip = tok.decode(ids, skip_special_tokens=False) == text
        logits = np.fromfile(case["logits"], dtype="<f4").reshape(len(case["generated"]), -1)
        generated = case["generated"]
        model = Llama(reader, weights, quantized)
        rows = model.step(case["prompt_ids"] + generated[:-1], last=len(generated))
        argmax, errors, deficits = [], [], []
        for i, ref in enumerate(rows[: case["steps"]]):
            scale = float(np.max(np.abs(ref)))
            argmax.append(int(np.argmax(ref)))
            errors.append(float(np.max(np.abs(logits[i] - ref))) / scale)
            deficits.append(float(np.max(ref) - ref[generated[i]]) / scale)
            if generated[i] == eos:
                break
        results.append(
            {
                "prompt_ids": ids,
                "roundtrip": roundtrip,
                "argmax": argmax,
                "errors": errors,
                "deficits": deficits,
                "text": text,
            }
        )
    json.dump({"cases": results}, sys.stdout)


if __name__ == "__main__":
    main()
