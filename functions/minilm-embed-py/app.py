"""`minilm-embed-py`: `minilm-embed` (sentence-transformers all-MiniLM-L6-v2) in Python,
with a pure-Python WordPiece tokenizer; every step of the model is one host op, as in
the Rust function (`functions/minilm-embed`).

- input `text`: BYTES `[n]` (UTF-8); optional `precision`: BYTES `[1]`, `"f32"`
  (default), `"f16"` or `"bf16"`; optional `return_tokens` (any value): also return
  `input_ids` and `attention_mask` (INT64 `[n, s]`).
- output `embedding`: FP32 `[n, 384]`, mean-pooled and L2-normalised.
- artifacts: `model` (model.safetensors), `vocab` (vocab.txt), `config` (config.json).
"""

import json
import math

from sluice_guest import Dtype, Inputs, InvalidInput, IoTensor, Tensor, UnaryOp, export, load_tensor, read_artifact

from wordpiece import WordPiece

#: sentence-transformers truncates all-MiniLM-L6-v2's inputs at 256 tokens.
MAX_SEQ_LEN = 256
#: Added to attention scores of padding (exp underflows to 0; finite in f16 and bf16).
MASKED = -10000.0
PRECISIONS = {"f32": Dtype.F32, "f16": Dtype.F16, "bf16": Dtype.BF16}

_prepared = None


def prepared():
    """The config and the tokenizer, built once per instance (warm instances keep them)."""
    global _prepared
    if _prepared is None:
        config = json.loads(read_artifact("config"))
        _prepared = (config, WordPiece(read_artifact("vocab")))
    return _prepared


class Bert:
    def __init__(self, config, dtype):
        self.cfg, self.dtype = config, dtype
        try:
            load_tensor("model", "embeddings.word_embeddings.weight", dtype)
            prefix = ""
        except Exception:
            prefix = "bert."
        self.get = lambda name: load_tensor("model", prefix + name, dtype)
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.word = self.get("embeddings.word_embeddings.weight")
        self.position = self.get("embeddings.position_embeddings.weight")
        self.token_type = self.get("embeddings.token_type_embeddings.weight")
        self.emb_norm = self.norm("embeddings.LayerNorm")
        self.layers = [self.layer(f"encoder.layer.{i}") for i in range(config["num_hidden_layers"])]

    def linear(self, name):
        return (self.get(name + ".weight"), self.get(name + ".bias"))

    def norm(self, name):
        return (self.get(name + ".weight"), self.get(name + ".bias"))

    def layer(self, p):
        return {
            "q": self.linear(p + ".attention.self.query"),
            "k": self.linear(p + ".attention.self.key"),
            "v": self.linear(p + ".attention.self.value"),
            "o": self.linear(p + ".attention.output.dense"),
            "attn_norm": self.norm(p + ".attention.output.LayerNorm"),
            "ffn_in": self.linear(p + ".intermediate.dense"),
            "ffn_out": self.linear(p + ".output.dense"),
            "ffn_norm": self.norm(p + ".output.LayerNorm"),
        }

    def embed(self, ids, mask, lengths, n, s):
        heads = self.cfg["num_attention_heads"]
        d = self.cfg["hidden_size"] // heads

        def lin(x, wb, gelu=False):
            return x.linear(wb[0], wb[1], UnaryOp.GELU if gelu else None, transpose_w=True)

        ids_t = Tensor.from_list(ids, [n, s], Dtype.I32)
        x = self.word.embedding(ids_t).add(self.position.slice(0, 0, s)).add(self.token_type.slice(0, 0, 1))
        x = x.layer_norm(*self.emb_norm, eps=self.eps)
        additive = Tensor.from_list([0.0 if m else MASKED for m in mask], [n, 1, 1, s])
        if self.dtype != Dtype.F32:
            additive = additive.cast(self.dtype)
        for l in self.layers:
            q, k, v = lin(x, l["q"]), lin(x, l["k"]), lin(x, l["v"])
            ctx = q.attention(k, v, heads, 1.0 / math.sqrt(d), additive)
            x = lin(ctx, l["o"]).add_layer_norm(x, *l["attn_norm"], eps=self.eps)
            ffn = lin(lin(x, l["ffn_in"], gelu=True), l["ffn_out"])
            x = ffn.add_layer_norm(x, *l["ffn_norm"], eps=self.eps)
        if self.dtype != Dtype.F32:
            x = x.cast(Dtype.F32)
        keep = Tensor.from_list([float(m) for m in mask], [n, s, 1])
        counts = Tensor.from_list([max(float(c), 1e-9) for c in lengths], [n, 1])
        pooled = x.mul(keep).sum(1).div(counts)
        norm = pooled.mul(pooled).sum(1, keep_dim=True).sqrt().maximum(Tensor.from_list([1e-12], [1]))
        return pooled.div(norm).to_list()


def run(inputs: Inputs):
    text = inputs["text"]
    if len(text.shape) != 1:
        raise InvalidInput(f"tensor `text`: expected shape [n], got {text.shape}")
    texts = text.as_strings()
    dtype = Dtype.F32
    if "precision" in [t.name for t in inputs]:
        values = inputs["precision"].as_strings()
        if len(values) != 1 or values[0] not in PRECISIONS:
            raise InvalidInput(f'tensor `precision`: one of "f32", "f16", "bf16", got {values}')
        dtype = PRECISIONS[values[0]]
    config, tokenizer = prepared()
    hidden = config["hidden_size"]
    if not texts:
        return [IoTensor.f32("embedding", [0, hidden], [])]
    max_len = min(MAX_SEQ_LEN, config["max_position_embeddings"])
    encodings = [tokenizer.encode(t, max_len) for t in texts]
    n, s = len(encodings), max(len(e) for e in encodings)
    ids, mask = [], []
    for e in encodings:
        ids += e + [tokenizer.pad] * (s - len(e))
        mask += [1] * len(e) + [0] * (s - len(e))
    embedding = Bert(config, dtype).embed(ids, mask, [len(e) for e in encodings], n, s)
    outputs = [IoTensor.f32("embedding", [n, hidden], embedding)]
    if "return_tokens" in [t.name for t in inputs]:
        outputs += [IoTensor.i64("input_ids", [n, s], ids), IoTensor.i64("attention_mask", [n, s], mask)]
    return outputs


WitWorld = export(run)
