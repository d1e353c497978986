#!/usr/bin/env python3
"""The PyTorch baseline of the MiniLM benchmark, on the GPU.

BertModel built from the local config.json (hidden 384, 6 layers, 12 heads,
intermediate 1536, 512 positions: all-MiniLM-L6-v2's shape), loading the same
safetensors file sluice loads (random from make_weights.py, or the real one), then mean
pooling and L2 normalisation as sentence-transformers does. Batch 1/8/32 at 128 tokens,
fp32 and fp16, eager and CUDA-graph replay (static inputs captured once), p50/p99 of the
wall clock of one forward pass + synchronize (~100 runs after warm-up). Nothing is
downloaded: the config comes from the file, HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE are set.

Every row is a fully real 128-token sequence, so the model runs without an attention mask
(model.embeddings then model.encoder, as BertModel.forward does, without its mask
preparation, whose data-dependent checks break graph capture); pooling is over all 128
tokens. Token ids come from --sluice-dump (the text sluice's benchmark
ran, so both sides see the same ids) or are seeded random ids with [CLS]/[SEP].

With --sluice-dump (written by the sluice benchmark, SLUICE_BENCH_DUMP), also checks that
PyTorch's batch-1 embeddings match sluice's (cosine; printed as a `torch-vs-sluice` line).

Prints one JSON line per case ({"bench":"torch-minilm",...}), then a table. Exit status 1
if a case failed.

    python3 bench/gpu/minilm_torch.py --model-dir /tmp/sluice-minilm [--sluice-dump F]
"""

import argparse
import json
import math
import os
import struct
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(*a):
    print("minilm_torch:", *a, file=sys.stderr, flush=True)


def load_safetensors(path, torch):
    """{name: tensor} of a safetensors file (the `safetensors` package if present)."""
    try:
        from safetensors.torch import load_file

        return load_file(path)
    except ImportError:
        pass
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(data[a:b], dtype=dtypes[t["dtype"]]).reshape(t["shape"]).clone()
    return out


def pct(sorted_ms, q):
    return sorted_ms[round((len(sorted_ms) - 1) * q)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True, help="config.json and model.safetensors")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--no-graph", action="store_true")
    ap.add_argument("--sluice-dump", help="JSON of the sluice benchmark (token ids, batch-1 embeddings)")
    args = ap.parse_args()

    started = time.time()
    try:
        import torch
        import torch.nn.functional as F
        import transformers
        from transformers import BertConfig, BertModel
    except ImportError as e:
        log(f"torch not importable ({e}): the PyTorch baseline needs torch and transformers")
        sys.exit(2)

    if not torch.cuda.is_available():
        log("torch.cuda.is_available() is False: no GPU for the PyTorch baseline")
        sys.exit(2)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(0)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {gpu}, imports {time.time() - started:.1f} s")

    with open(os.path.join(args.model_dir, "config.json")) as f:
        config = BertConfig.from_dict(json.load(f))
    state = load_safetensors(os.path.join(args.model_dir, "model.safetensors"), torch)
    base = BertModel(config, add_pooling_layer=True)
    missing, unexpected = base.load_state_dict(state, strict=False)
    buffers = {"embeddings.position_ids", "embeddings.token_type_ids"}
    missing = [k for k in missing if k not in buffers]
    unexpected = [k for k in unexpected if k not in buffers]
    if missing or unexpected:
        log(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
        sys.exit(1)
    base.eval()
    attn = getattr(base.config, "_attn_implementation", "?")
    log(f"model loaded ({sum(p.numel() for p in base.parameters())} parameters, attention {attn})")

    dump = None
    if args.sluice_dump and os.path.exists(args.sluice_dump):
        with open(args.sluice_dump) as f:
            dump = json.load(f)
    if dump and len(dump.get("input_ids", [])) == args.seq:
        ids_row = [int(i) for i in dump["input_ids"]]
        ids_from = "sluice's tokenization of its benchmark text"
    else:
        g = torch.Generator().manual_seed(0)
        ids_row = [101] + torch.randint(1000, config.vocab_size, (args.seq - 2,), generator=g).tolist() + [102]
        ids_from = "seeded random ids"
    log(f"token ids: {ids_from}")

    def embed_fn(model, ids, token_types):
        # BertModel.forward without a mask, minus its mask preparation (whose
        # data-dependent checks, e.g. "is the mask all ones", synchronize and so break
        # graph capture in some transformers versions): embeddings, then the encoder.
        def run():
            hidden = model.encoder(model.embeddings(input_ids=ids, token_type_ids=token_types), attention_mask=None)[0]
            return F.normalize(hidden.float().mean(dim=1), p=2.0, dim=-1)

        return run

    def timed(fn):
        for _ in range(args.warmup):
            fn()
        torch.cuda.synchronize()
        walls = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e3)
        walls.sort()
        return {"p50_ms": pct(walls, 0.5), "p99_ms": pct(walls, 0.99), "mean_ms": sum(walls) / len(walls),
                "min_ms": walls[0], "runs": len(walls)}

    failed = False
    rows = []
    cross = {}
    for precision in args.precisions.split(","):
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
        model = BertModel(config, add_pooling_layer=True)
        model.load_state_dict(base.state_dict())
        model = model.eval().to(dev, dtype)
        for batch in [int(b) for b in args.batches.split(",")]:
            common = {"bench": "torch-minilm", "device": gpu, "torch": torch.__version__,
                      "transformers": transformers.__version__, "attention": attn,
                      "precision": precision, "batch": batch, "seq": args.seq}
            ids = torch.tensor([ids_row] * batch, dtype=torch.long, device=dev)
            token_types = torch.zeros_like(ids)
            fn = embed_fn(model, ids, token_types)
            with torch.no_grad():
                try:
                    out = fn()
                    torch.cuda.synchronize()
                    norms = out.norm(dim=-1)
                    ok = bool(torch.isfinite(out).all()) and float((norms - 1).abs().max()) < 1e-3
                    if batch == 1:
                        cross[precision] = out[0].double().cpu()
                    rec = dict(common, mode="eager", ok=ok, **timed(fn))
                except Exception as e:  # noqa: BLE001 - report and go on
                    rec, ok = dict(common, mode="eager", ok=False, error=repr(e)[:300]), False
                print(json.dumps(rec), flush=True)
                rows.append(rec)
                failed |= not rec["ok"]
                if args.no_graph:
                    continue
                try:
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(3):
                            fn()
                    torch.cuda.current_stream().wait_stream(side)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        static_out = fn()
                    graph.replay()
                    torch.cuda.synchronize()
                    same = float((static_out - out).abs().max()) if ok else float("nan")
                    rec = dict(common, mode="graph", ok=bool(same < 1e-2), graph_vs_eager_max_abs=same,
                               **timed(graph.replay))
                    del graph, static_out
                except Exception as e:  # noqa: BLE001
                    rec = dict(common, mode="graph", ok=False, error=repr(e)[:300])
                print(json.dumps(rec), flush=True)
                rows.append(rec)
                failed |= not rec["ok"]
        del model
        torch.cuda.empty_cache()

    if dump:
        def cos(a, b):
            b = torch.tensor(b, dtype=torch.float64)
            return float(a @ b / (a.norm() * b.norm()))

        rec = {"bench": "torch-vs-sluice", "ids_from": ids_from}
        for precision, key in (("fp32", "f32"), ("fp16", "f16")):
            if precision in cross and dump.get(key):
                rec[f"cos_{precision}_vs_sluice_{key}"] = cos(cross[precision], dump[key])
        if "fp32" in cross and dump.get("cpu_f32"):
            rec["cos_fp32_vs_sluice_cpu_f32"] = cos(cross["fp32"], dump["cpu_f32"])
        # fp32 against sluice's f32 (CUDA and CPU): ≥ 0.9999; fp16 against sluice's f16: ≥ 0.995.
        bounds = {k: (0.995 if "fp16" in k else 0.9999) for k in rec if k.startswith("cos_")}
        rec["ok"] = bool(bounds) and all(rec[k] >= b for k, b in bounds.items())
        print(json.dumps(rec), flush=True)
        failed |= not rec["ok"]

    print()
    print(f"PyTorch {torch.__version__} / transformers {transformers.__version__} on {gpu}: BertModel "
          f"(attention {attn}) + mean pooling + L2 norm, seq {args.seq}, wall clock per forward + sync, "
          f"{args.runs} runs after {args.warmup} warm-up")
    print(f"{'precision':<10} {'batch':>5} {'mode':>6} {'p50':>10} {'p99':>10}  check")
    for r in rows:
        p50 = f"{r['p50_ms']:.3f}ms" if "p50_ms" in r else "—"
        p99 = f"{r['p99_ms']:.3f}ms" if "p99_ms" in r else "—"
        check = "ok" if r["ok"] else r.get("error", "FAILED (non-finite or norm ≠ 1, or graph ≠ eager)")
        print(f"{r['precision']:<10} {r['batch']:>5} {r['mode']:>6} {p50:>10} {p99:>10}  {check}")
    log(f"done in {time.time() - started:.1f} s")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
