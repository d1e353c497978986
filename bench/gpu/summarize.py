#!/usr/bin/env python3
"""Reads the logs bench/gpu/run.sh wrote under OUT and prints one summary table: sluice's
MiniLM (f32/f16, batch 1/8/32) against PyTorch eager and CUDA-graph replay, kernel
launches per invocation, MiniLM over HTTP, the embedding cross-check, the co-location
rows (FIFO, priority, + SM partition) and the scheduler overhead, each with the DESIGN.md goal it is measured against.

    python3 bench/gpu/summarize.py OUT          # OUT holds minilm.txt, torch.txt, colocation.txt

Only the standard library; missing or failed steps show as "—" with the reason.
"""

import json
import os
import sys


def records(path):
    """The JSON lines ({"bench": ...}) of a log, and the log's text."""
    out = []
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return out, ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and '"bench"' in line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out, text


def fmt(v, unit="", digits=3):
    return "—" if v is None else f"{v:.{digits}f}{unit}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def table(rows, left_last=False):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for n, r in enumerate(rows):
        left = {0, len(r) - 1} if left_last else {0}
        cells = [str(c).ljust(widths[i]) if i in left else str(c).rjust(widths[i]) for i, c in enumerate(r)]
        print("  ".join(cells).rstrip())
        if n == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))


def why(text, default):
    """The first line of a log that says why it failed."""
    for needle in ("no CUDA driver found", "CUDA backend was requested", "torch not importable",
                   "is_available() is False", "panicked", "Error", "error"):
        for line in text.splitlines():
            if needle in line:
                return line.strip()[:160]
    return default


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "bench/out")
    sluice, sluice_text = records(os.path.join(out, "minilm.txt"))
    torch, torch_text = records(os.path.join(out, "torch.txt"))
    coloc, coloc_text = records(os.path.join(out, "colocation.txt"))

    s = {(r["precision"], r["batch"]): r for r in sluice if r.get("bench") == "sluice-minilm"}
    t = {(r["precision"], r["batch"], r["mode"]): r for r in torch if r.get("bench") == "torch-minilm"}
    device = next((r.get("device") for r in sluice + torch if r.get("device")), "?")
    print(f"== MiniLM-L6 shape, seq 128, p50 per invocation/forward (ms), {device}")
    rows = [["prec", "batch", "sluice p50", "sluice p99", "launches", "torch eager", "torch graph",
             "eager÷sluice", "sluice÷graph", "checks"]]
    for prec, tprec in (("f32", "fp32"), ("f16", "fp16")):
        for batch in (1, 8, 32):
            r = s.get((prec, batch), {})
            eager = t.get((tprec, batch, "eager"), {})
            graph = t.get((tprec, batch, "graph"), {})
            sp50 = r.get("p50_ms")
            checks = []
            for name, rec in (("sluice", r), ("eager", eager), ("graph", graph)):
                if rec and not rec.get("ok"):
                    checks.append(f"{name} FAILED" + (f": {rec['error'][:60]}" if rec.get("error") else ""))
            rows.append([prec, batch, fmt(sp50), fmt(r.get("p99_ms")), fmt(r.get("launches"), digits=0),
                         fmt(eager.get("p50_ms")), fmt(graph.get("p50_ms")),
                         fmt(ratio(eager.get("p50_ms"), sp50), "×", 2), fmt(ratio(sp50, graph.get("p50_ms")), "×", 2),
                         "; ".join(checks) or ("ok" if r or eager else "no data")])
    table(rows, left_last=True)
    if not s:
        print(f"   sluice: no results ({why(sluice_text, 'see minilm.txt')})")
    if not t:
        print(f"   PyTorch: no results ({why(torch_text, 'see torch.txt')})")
    f16 = s.get(("f16", 1), {}).get("p50_ms")
    eager16 = t.get(("fp16", 1, "eager"), {}).get("p50_ms")
    graph16 = t.get(("fp16", 1, "graph"), {}).get("p50_ms")
    if f16 is not None:
        met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
        print(f"   goal f16 batch 1 ≤ 1.0 ms: {f16:.3f} ms, {met(f16 <= 1.0)}", end="")
        if eager16:
            print(f"; ≥ 5× faster than eager: {eager16 / f16:.2f}×, {met(eager16 / f16 >= 5)}", end="")
        if graph16:
            print(f"; moonshot ≤ 0.5 ms and ≤ 1.6× graph: {f16 / graph16:.2f}×, "
                  f"{met(f16 <= 0.5 and f16 / graph16 <= 1.6)}", end="")
        print()
    for r in sluice:
        if r.get("bench") == "sluice-minilm-http":
            if r.get("ok") is False and r.get("p50_ms") is None:
                print(f"   over HTTP, {r.get('precision', '?')} batch 1: FAILED: {str(r.get('error'))[:120]}")
            else:
                print(f"   over HTTP (OIP, one keep-alive client), {r.get('precision')} batch 1: client p50 "
                      f"{fmt(r.get('p50_ms'))} ms, p99 {fmt(r.get('p99_ms'))} ms, server p50 "
                      f"{fmt(r.get('server_p50_ms'))} ms, cosine {fmt(r.get('min_cosine'), digits=6)}"
                      + ("" if r.get("ok") else f" — FAILED: {str(r.get('error'))[:80]}"))
    for r in torch:
        if r.get("bench") == "torch-vs-sluice":
            cos = ", ".join(f"{k[4:]} {v:.6f}" for k, v in r.items() if k.startswith("cos_"))
            print(f"   embeddings, PyTorch vs sluice on the same weights and ids: {cos} → "
                  f"{'ok' if r.get('ok') else 'MISMATCH'}")

    print()
    head = next((line for line in coloc_text.splitlines() if line.startswith("co-location on")), "co-location")
    print(f"== {head}")
    rows = [["mode", "LS p50", "LS p99", "p99÷solo", "preempt p99", "BE share", "BE TFLOP/s"]]
    notes = []
    names = {"ls-solo": "latency tenant alone", "be-solo": "best-effort alone", "fifo": "co-located, FIFO",
             "priority": "co-located, priority + preemption", "partition": "co-located, + SM partition",
             "priority-hold": "priority, 50 ms latency hold", "partition-hold": "+ SM partition, 50 ms hold"}
    for r in coloc:
        if r.get("bench") != "sluice-colocation":
            continue
        if r.get("ok") is False:
            notes.append(f"   {names.get(r.get('mode'), r.get('mode'))}: FAILED: {str(r.get('error'))[:200]}")
            continue
        if r.get("mode") == "partition-info":
            notes.append(f"   SM partition in force: {r.get('note', '—')}")
            continue
        be = r.get("be_fraction")
        rows.append([names.get(r.get("mode"), r.get("mode")), fmt(r.get("ls_p50_ms"), " ms", 2),
                     fmt(r.get("ls_p99_ms"), " ms", 2), fmt(r.get("p99_over_solo"), "×", 2),
                     fmt(r.get("preempt_p99_us"), " µs", 0), "—" if be is None else f"{100 * be:.0f} %",
                     fmt(r.get("be_tflops"), "", 0)])
    if len(rows) > 1:
        table(rows)
        print("\n".join(notes))
        print("   goals: LS p99 ≤ 1.1× solo while BE keeps ≥ 80 %; preemption p99 ≤ 50 µs "
              "(PyTorch today: p99 1.7–1.8× solo)")
    else:
        print(f"   no results ({why(coloc_text, 'see colocation.txt')})")
    for r in coloc:
        if r.get("bench") == "sluice-overhead":
            print(f"   scheduler overhead vs direct dispatch: {r['overhead_pct']:+.2f} % "
                  f"({r['direct_us_per_kernel']:.1f} → {r['scheduled_us_per_kernel']:.1f} µs per kernel; goal ≤ 2 %)")

    texts = sluice_text + torch_text + coloc_text
    try:
        with open(os.path.join(out, "conformance.txt"), errors="replace") as f:
            texts += f.read()
    except OSError:
        pass
    if "no CUDA driver found" in texts:
        print()
        print("FAILED: no CUDA driver found on this machine (libcuda could not be loaded): nothing was measured on a GPU")


if __name__ == "__main__":
    main()
