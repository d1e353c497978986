#!/usr/bin/env python3
"""Writes MiniLM-L6-shaped random weights as a safetensors file.

The real all-MiniLM-L6-v2 model.safetensors (90 MB, fp32) is too big to carry to the
device machine (64 MiB limit), and the benchmarks need its shapes, not its values. This
writes a file with the same tensor names, shapes and dtypes (F32, and the I64
`embeddings.position_ids`), derived from config.json (the table below reproduces the
real file's header for hidden 384, 6 layers, intermediate 1536, 512 positions,
vocabulary 30522, 2 token types). Values are seeded: weight matrices and embeddings
N(0, std²) with std 0.02 (config's initializer_range), biases zero, LayerNorm weight
one and bias zero, so the encoder stays numerically sane in f32, f16 and bf16.

Uses numpy when it is importable (and the `safetensors` package to write, if present),
else plain Python (a pool of seeded normal samples, tiled: slower, same format). The
file is written by hand otherwise: 8-byte little-endian header length, the JSON header
(padded with spaces to a multiple of 8), then the raw little-endian data.

    python3 bench/gpu/make_weights.py --config config.json --out /tmp/m/model.safetensors
        [--seed 0] [--std 0.02] [--check-header model.header.json]

--check-header compares the names, shapes and dtypes written with a real file's header
(a JSON file, or a .safetensors file) and exits 1 on any difference.
"""

import argparse
import array
import json
import os
import random
import struct
import sys
import time


def tensor_table(cfg):
    """[(name, dtype, shape, init)] of a BertModel checkpoint, sorted by name."""
    h = cfg["hidden_size"]
    i = cfg["intermediate_size"]
    p = cfg["max_position_embeddings"]
    t = [
        ("embeddings.position_ids", "I64", [1, p], "arange"),
        ("embeddings.LayerNorm.bias", "F32", [h], "zeros"),
        ("embeddings.LayerNorm.weight", "F32", [h], "ones"),
        ("embeddings.position_embeddings.weight", "F32", [p, h], "normal"),
        ("embeddings.token_type_embeddings.weight", "F32", [cfg.get("type_vocab_size", 2), h], "normal"),
        ("embeddings.word_embeddings.weight", "F32", [cfg["vocab_size"], h], "normal"),
        ("pooler.dense.bias", "F32", [h], "zeros"),
        ("pooler.dense.weight", "F32", [h, h], "normal"),
    ]
    for layer in range(cfg["num_hidden_layers"]):
        pre = f"encoder.layer.{layer}."
        for name, shape in [
            ("attention.self.query", [h, h]),
            ("attention.self.key", [h, h]),
            ("attention.self.value", [h, h]),
            ("attention.output.dense", [h, h]),
            ("intermediate.dense", [i, h]),
            ("output.dense", [h, i]),
        ]:
            t.append((pre + name + ".weight", "F32", shape, "normal"))
            t.append((pre + name + ".bias", "F32", [shape[0]], "zeros"))
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            t.append((pre + ln + ".weight", "F32", [h], "ones"))
            t.append((pre + ln + ".bias", "F32", [h], "zeros"))
    return sorted(t)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class NumpyValues:
    def __init__(self, np, seed, std):
        self.np, self.rng, self.std = np, np.random.default_rng(seed), std

    def make(self, dtype, shape, init):
        np = self.np
        if init == "arange":
            return np.arange(numel(shape), dtype=np.int64).reshape(shape)
        if init == "zeros":
            return np.zeros(shape, dtype=np.float32)
        if init == "ones":
            return np.ones(shape, dtype=np.float32)
        return (self.rng.standard_normal(shape, dtype=np.float32) * np.float32(self.std)).astype("<f4")

    @staticmethod
    def raw(value):
        return value.astype(value.dtype.newbyteorder("<"), copy=False).tobytes()


class PlainValues:
    """No numpy: a pool of seeded N(0, std²) samples, each tensor a run of the pool from a
    random offset (correlated across tensors, which does not matter for timing)."""

    POOL = 1 << 20

    def __init__(self, seed, std):
        self.rng = random.Random(seed)
        pool = array.array("f", (self.rng.gauss(0.0, std) for _ in range(self.POOL)))
        if sys.byteorder != "little":
            pool.byteswap()
        self.pool = pool.tobytes()

    def make(self, dtype, shape, init):
        n = numel(shape)
        if init == "arange":
            return struct.pack(f"<{n}q", *range(n))
        if init in ("zeros", "ones"):
            return struct.pack("<f", 0.0 if init == "zeros" else 1.0) * n
        out, need = bytearray(), 4 * n
        while len(out) < need:
            start = 4 * self.rng.randrange(self.POOL)
            out += self.pool[start : start + need - len(out)]
        return bytes(out)

    @staticmethod
    def raw(value):
        return value


def header_of(path):
    """The JSON header of a safetensors file, or a JSON file holding one."""
    with open(path, "rb") as f:
        head = f.read(8)
        if head[:1] == b"{":
            f.seek(0)
            return json.load(f)
        (n,) = struct.unpack("<Q", head)
        return json.loads(f.read(n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="config.json of the model")
    ap.add_argument("--out", required=True, help="the safetensors file to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=None, help="default: config's initializer_range or 0.02")
    ap.add_argument("--check-header", help="a real model's header (JSON) or .safetensors to compare with")
    args = ap.parse_args()

    started = time.time()
    with open(args.config) as f:
        cfg = json.load(f)
    std = args.std if args.std is not None else cfg.get("initializer_range", 0.02)
    table = tensor_table(cfg)

    if args.check_header:
        real = {k: (v["dtype"], v["shape"]) for k, v in header_of(args.check_header).items() if k != "__metadata__"}
        ours = {name: (dtype, shape) for name, dtype, shape, _ in table}
        missing = sorted(set(real) - set(ours))
        extra = sorted(set(ours) - set(real))
        changed = sorted(k for k in set(real) & set(ours) if (real[k][0], list(real[k][1])) != (ours[k][0], ours[k][1]))
        if missing or extra or changed:
            print(f"make_weights: header mismatch: missing {missing}, extra {extra}, changed {changed}", file=sys.stderr)
            sys.exit(1)
        print(f"make_weights: {len(ours)} tensors match the names, shapes and dtypes of {args.check_header}")

    try:
        import numpy as np

        values, how = NumpyValues(np, args.seed, std), f"numpy {np.__version__}"
    except ImportError:
        np, values, how = None, PlainValues(args.seed, std), "plain Python (no numpy)"

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    if np is not None:
        try:
            from safetensors.numpy import save_file

            tensors = {name: values.make(dtype, shape, init) for name, dtype, shape, init in table}
            save_file(tensors, tmp, metadata={"format": "pt"})
            how += " + safetensors"
        except ImportError:
            write_by_hand(tmp, table, values)
    else:
        write_by_hand(tmp, table, values)
    os.replace(tmp, args.out)
    size = os.path.getsize(args.out)
    count = sum(numel(s) for _, _, s, _ in table)
    print(
        f"make_weights: wrote {args.out} ({size / 2**20:.1f} MiB, {len(table)} tensors, {count} values, "
        f"seed {args.seed}, std {std}) with {how} in {time.time() - started:.1f} s"
    )


def write_by_hand(path, table, values):
    width = {"F32": 4, "I64": 8}
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, _ in table:
        n = width[dtype] * numel(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, dtype, shape, init in table:
            raw = values.raw(values.make(dtype, shape, init))
            assert len(raw) == width[dtype] * numel(shape), name
            f.write(raw)


if __name__ == "__main__":
    main()
