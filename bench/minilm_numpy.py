"""NumPy fp32 reference for the MiniLM CPU benchmark (runtime/benches/minilm.rs).

all-MiniLM-L6-v2 as sentence-transformers computes it: the BERT encoder (embeddings
+ layer norm, 6 post-norm layers of 12-head self-attention with an additive padding
mask and an exact-GELU feed-forward), mean pooling over the attention mask and L2
normalisation, in plain NumPy float32. The weights are read from model.safetensors by
parsing its JSON header and viewing the data with numpy.frombuffer; the token ids come
from the reference JSON, so no tokenizer is needed.

It times the same three cases as the Rust benchmark, each chosen from the reference
data by the same rule:
  seq128  batch 1: the first record longer than 128 tokens, truncated to 128
          (`input_ids_max_len_128`, checked against `embedding_max_len_128`);
  seq256  batch 1: the longest record (256 tokens after truncation);
  batch16 the 16 records in one batch, padded to the longest with a mask.
Before timing, every embedding is checked against the reference (cosine >= 0.9999),
so the comparison is between correct implementations; a mismatch exits with status 1.
That checking run also warms up; --warmup more untimed runs follow, then --runs timed
ones (p50 reported).

Prints one JSON object on stdout (timings in milliseconds, BLAS and its thread count);
progress goes to stderr. NumPy's BLAS (OpenBLAS) is multithreaded and is left with its
default thread count: OPENBLAS_* variables are neither set nor changed here.

usage: python3 bench/minilm_numpy.py --model-dir DIR --reference FILE
                                     [--runs 10] [--batch-runs 5] [--warmup 1]
                                     [--cases seq128,seq256,batch16]
"""

import argparse
import ctypes
import json
import math
import os
import platform
import statistics
import struct
import sys
import time

import numpy as np

HEADS = 12
LAYERS = 6
EPS = 1e-12
MASKED = -10_000.0  # additive score of padding positions, as the sluice guest uses
MIN_COSINE = 0.9999

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def load_safetensors(path):
    """Every tensor of a .safetensors file, as NumPy arrays (fp32 weights stay fp32)."""
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        arr = np.frombuffer(data, dtype=dtype, count=(end - start) // np.dtype(dtype).itemsize, offset=base + start)
        tensors[name.removeprefix("bert.")] = arr.reshape(info["shape"])
    return tensors


def erf(x):
    """Vectorised erf (Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7), in float32.

    NumPy has no erf ufunc; this keeps the exact (erf) GELU at NumPy speed.
    """
    p = np.float32(0.3275911)
    a1, a2, a3, a4, a5 = (np.float32(c) for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))
    s = np.sign(x)
    ax = np.abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + p * ax)
    y = np.float32(1.0) - (((((a5 * t + a4) * t) + a3) * t + a2) * t + a1) * t * np.exp(-ax * ax)
    return s * y


def gelu(x):
    return np.float32(0.5) * x * (np.float32(1.0) + erf(x * np.float32(1.0 / math.sqrt(2.0))))


def layer_norm(x, gamma, beta):
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + np.float32(EPS)) * gamma + beta


def linear(w, name, x):
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]


def embed(w, ids, mask):
    """L2-normalised mean-pooled embeddings [n, 384] of int ids [n, s] with mask [n, s]."""
    n, s = ids.shape
    h = w["embeddings.word_embeddings.weight"].shape[1]
    d = h // HEADS
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:s] + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"]).reshape(n * s, h)
    additive = np.where(mask == 0, np.float32(MASKED), np.float32(0.0)).astype(np.float32).reshape(n, 1, 1, s)
    scale = np.float32(1.0 / math.sqrt(d))

    def split(t):
        return t.reshape(n, s, HEADS, d).transpose(0, 2, 1, 3)

    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        q = split(linear(w, f"{p}.attention.self.query", x))
        k = split(linear(w, f"{p}.attention.self.key", x))
        v = split(linear(w, f"{p}.attention.self.value", x))
        scores = (q @ k.transpose(0, 1, 3, 2)) * scale + additive
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(n * s, h)
        x = layer_norm(linear(w, f"{p}.attention.output.dense", ctx) + x, w[f"{p}.attention.output.LayerNorm.weight"], w[f"{p}.attention.output.LayerNorm.bias"])
        ffn = linear(w, f"{p}.output.dense", gelu(linear(w, f"{p}.intermediate.dense", x)))
        x = layer_norm(ffn + x, w[f"{p}.output.LayerNorm.weight"], w[f"{p}.output.LayerNorm.bias"])

    keep = mask.astype(np.float32).reshape(n, s, 1)
    pooled = (x.reshape(n, s, h) * keep).sum(axis=1) / np.maximum(keep.sum(axis=1), np.float32(1e-9))
    norm = np.maximum(np.sqrt((pooled * pooled).sum(axis=1, keepdims=True)), np.float32(1e-12))
    return pooled / norm


def pad(rows):
    """Token-id rows → (ids [n, s], mask [n, s]) padded with 0 to the longest row."""
    s = max(len(r) for r in rows)
    ids = np.zeros((len(rows), s), dtype=np.int64)
    mask = np.zeros((len(rows), s), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1
    return ids, mask


def cases(reference):
    """The benchmark cases: (name, [token-id rows], [reference embeddings])."""
    records = reference["records"]
    long = next(r for r in records if "input_ids_max_len_128" in r and len(r["input_ids_max_len_128"]) == 128)
    longest = max(records, key=lambda r: len(r["input_ids"]))
    return [
        ("seq128", [long["input_ids_max_len_128"]], [long["embedding_max_len_128"]]),
        ("seq256", [longest["input_ids"]], [longest["embedding"]]),
        ("batch16", [r["input_ids"] for r in records], [r["embedding"] for r in records]),
    ]


def min_cosine(got, want):
    want = np.asarray(want, dtype=np.float64)
    got = got.astype(np.float64)
    dots = (got * want).sum(axis=1)
    return float((dots / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))).min())


def blas_info():
    """The BLAS NumPy uses and its thread count (read from OpenBLAS itself when loaded)."""
    name = "unknown"
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        name = f"{cfg.get('name')} {cfg.get('version')}"
    except Exception:  # older NumPy: no dict mode
        pass
    threads = None
    try:
        with open("/proc/self/maps") as maps:
            libs = {line.split()[-1] for line in maps if "openblas" in line.lower() and line.rstrip().endswith((".so", ".so.0"))}
        for lib in sorted(libs):
            handle = ctypes.CDLL(lib)
            for symbol in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
                if hasattr(handle, symbol):
                    threads = int(getattr(handle, symbol)())
                    break
            if threads is not None:
                break
    except OSError:
        pass
    return name, threads


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--runs", type=int, default=10, help="timed runs of each batch-1 case")
    ap.add_argument("--batch-runs", type=int, default=5, help="timed runs of the batch-16 case")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs before each case, after the checking run")
    ap.add_argument("--cases", default="seq128,seq256,batch16", help="comma-separated subset of the cases to run")
    args = ap.parse_args()

    with open(args.reference) as f:
        reference = json.load(f)
    weights = load_safetensors(os.path.join(args.model_dir, "model.safetensors"))
    blas, threads = blas_info()
    out = {
        "numpy": np.__version__,
        "python": platform.python_version(),
        "blas": blas,
        "blas_threads": threads,
        "cases": {},
    }
    wanted = args.cases.split(",")
    unknown = set(wanted) - {name for name, _, _ in cases(reference)}
    if unknown:
        sys.exit(f"minilm_numpy: unknown case(s) {sorted(unknown)}")
    for name, rows, want in cases(reference):
        if name not in wanted:
            continue
        ids, mask = pad(rows)
        cosine = min_cosine(embed(weights, ids, mask), want)
        if cosine < MIN_COSINE:
            sys.exit(f"minilm_numpy: case {name}: cosine {cosine:.6f} to the reference is below {MIN_COSINE}")
        for _ in range(args.warmup):
            embed(weights, ids, mask)
        runs = args.batch_runs if len(rows) > 1 else args.runs
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            embed(weights, ids, mask)
            times.append((time.perf_counter() - start) * 1e3)
        out["cases"][name] = {
            "batch": len(rows),
            "tokens": [len(r) for r in rows],
            "seq_len": int(ids.shape[1]),
            "runs": runs,
            "p50_ms": statistics.median(times),
            "min_ms": min(times),
            "max_ms": max(times),
            "min_cosine": cosine,
        }
        print(f"minilm_numpy: {name}: p50 {statistics.median(times):.2f} ms over {runs} runs, cosine {cosine:.7f}", file=sys.stderr)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
