"""MiniLM-L6 (all-MiniLM-L6-v2, fp32) on the CPU in the peers a user would compare sluice
with: sentence-transformers on PyTorch (eager) and ONNX Runtime running the graph that
onnxruntime.transformers' BERT optimizer produces from an export of the same weights.

Same inputs as runtime/benches/minilm.rs: the token ids of the reference data
(tests/data/minilm_ref_visible.json), so no tokenizer runs in the timed part:
  seq128  batch 1: the first record longer than 128 tokens, truncated to 128
          (`input_ids_max_len_128`, checked against `embedding_max_len_128`);
  seq256  batch 1: the longest record (256 tokens);
  batch16 the 16 records in one batch, padded to the longest with an attention mask.
Every peer's embeddings are checked against the reference first (cosine >= 0.9999; the
max abs difference is reported), then each case is timed: --warmup untimed runs, then
--runs timed ones (batch16: --batch-runs), peers interleaved run by run so that the
shared machine's load hits them alike. Threads: torch.set_num_threads(N) and ORT's
intra_op_num_threads=N (inter-op 1, sequential execution), N = --threads.

Prints one JSON object on stdout: versions, threads, the CPU's vector width, and per
case and peer the p50/min/max in milliseconds and the min cosine. Progress on stderr.
Run through bench/peers/run.sh, which sets up the virtual environment.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

MIN_COSINE = 0.9999


def log(*a):
    print("peers:", *a, file=sys.stderr, flush=True)


def cases(reference):
    records = reference["records"]
    long = next(r for r in records if len(r.get("input_ids_max_len_128") or []) == 128)
    longest = max(records, key=lambda r: len(r["input_ids"]))
    one = lambda ids, emb: ([ids], [emb])  # noqa: E731
    return {
        "seq128": one(long["input_ids_max_len_128"], long["embedding_max_len_128"]),
        "seq256": one(longest["input_ids"], longest["embedding"]),
        "batch16": ([r["input_ids"] for r in records], [r["embedding"] for r in records]),
    }


def batch_arrays(rows):
    """input_ids, attention_mask, token_type_ids as int64 [b, longest], zero-padded."""
    seq = max(len(r) for r in rows)
    ids = np.zeros((len(rows), seq), dtype=np.int64)
    mask = np.zeros((len(rows), seq), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1
    return ids, mask, np.zeros_like(ids)


def check(name, case, got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    diff = float(np.abs(got - want).max())
    if cos.min() < MIN_COSINE:
        sys.exit(f"peers: {name} {case}: cosine {cos.min()} to the reference")
    return float(cos.min()), diff


def vector_width():
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line
                    break
    except OSError:
        pass
    if " avx512f" in flags:
        return "AVX-512"
    return "AVX2" if " avx2" in flags else "SSE"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--batch-runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--cases", default="seq128,seq256,batch16")
    args = ap.parse_args()

    import onnxruntime as ort
    import sentence_transformers
    import torch
    import transformers
    from onnxruntime.transformers import optimizer
    from sentence_transformers import SentenceTransformer, models

    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    with open(args.reference) as f:
        reference = json.load(f)
    all_cases = cases(reference)

    log(f"loading {args.model_dir} into sentence-transformers (torch {torch.__version__})")
    word = models.Transformer(args.model_dir, max_seq_length=256)
    pooling = models.Pooling(384, pooling_mode="mean")
    st = SentenceTransformer(modules=[word, pooling, models.Normalize()], device="cpu").eval()

    def torch_embed(ids, mask, types):
        feats = {
            "input_ids": torch.from_numpy(ids),
            "attention_mask": torch.from_numpy(mask),
            "token_type_ids": torch.from_numpy(types),
        }
        with torch.inference_mode():
            return st(feats)["sentence_embedding"].numpy()

    # ONNX: the same BertModel exported, optimised for BERT by onnxruntime.transformers;
    # mean pooling and normalisation stay outside the graph (NumPy, timed).
    tmp = tempfile.mkdtemp(prefix="sluice-peers-")
    raw_path, opt_path = os.path.join(tmp, "minilm.onnx"), os.path.join(tmp, "minilm-opt.onnx")
    # The eager attention exports the MatMul/Softmax pattern the optimizer fuses into
    # its Attention op (SDPA exports one it does not recognise); same weights.
    bert = transformers.AutoModel.from_pretrained(args.model_dir, attn_implementation="eager").eval()
    dummy = batch_arrays([[101, 2023, 102]])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    dyn = {n: {0: "batch", 1: "seq"} for n in names}
    dyn["last_hidden_state"] = {0: "batch", 1: "seq"}
    log("exporting to ONNX and optimising the graph (onnxruntime.transformers, model_type bert)")
    export_kwargs = dict(
        input_names=names, output_names=["last_hidden_state"], dynamic_axes=dyn, opset_version=17
    )
    wrapped = _LastHidden(bert)
    try:
        torch.onnx.export(wrapped, tuple(torch.from_numpy(a) for a in dummy), raw_path, dynamo=False, **export_kwargs)
    except TypeError:
        torch.onnx.export(wrapped, tuple(torch.from_numpy(a) for a in dummy), raw_path, **export_kwargs)
    opt = optimizer.optimize_model(raw_path, model_type="bert", num_heads=12, hidden_size=384, opt_level=1)
    opt.save_model_to_file(opt_path)
    fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(opt_path, so, providers=["CPUExecutionProvider"])

    def ort_embed(ids, mask, types):
        (h,) = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        m = mask[:, :, None].astype(np.float32)
        pooled = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    peers = {"torch_eager": torch_embed, "ort_optimized": ort_embed}
    report = {
        "cpu": cpu_name(),
        "vector_width": vector_width(),
        "threads": args.threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_cpu_capability": getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")(),
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "onnxruntime": ort.__version__,
        "ort_fused_ops": fused,
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
        "cases": {},
    }
    for name in args.cases.split(","):
        rows, want = all_cases[name]
        arrays = batch_arrays(rows)
        runs = args.batch_runs if len(rows) > 1 else args.runs
        result = {"tokens": [len(r) for r in rows], "batch": len(rows)}
        for peer, fn in peers.items():
            cos, diff = check(peer, name, fn(*arrays), want)
            result[peer] = {"min_cosine": cos, "max_abs_diff": diff}
        log(f"{name}: timing {', '.join(peers)} ({runs} runs each, interleaved)")
        times = {p: [] for p in peers}
        for _ in range(args.warmup):
            for fn in peers.values():
                fn(*arrays)
        for _ in range(runs):
            for peer, fn in peers.items():
                t0 = time.perf_counter()
                fn(*arrays)
                times[peer].append((time.perf_counter() - t0) * 1e3)
        for peer, t in times.items():
            result[peer].update(p50_ms=statistics.median(t), min_ms=min(t), max_ms=max(t))
        report["cases"][name] = result
    print(json.dumps(report))


class _LastHidden:
    """Wraps a BertModel so that the export has one output, the last hidden state."""

    def __new__(cls, bert):
        import torch

        class LastHidden(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.inner(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        return LastHidden(bert).eval()


if __name__ == "__main__":
    main()
