"""SmolLM2-135M-Instruct (the Q4_1 GGUF of `cargo xtask fetch-llm`) decoding several
greedy streams at once in llama.cpp, the peer of sluice's continuous batching in
`llm-batch-bench`.

llama.cpp's own batched decoding (its `batched` example, through llama-cpp-python's
low-level API): one context with a sequence per stream, the streams' prompts evaluated
in one `llama_decode` and then one `llama_decode` per step holding the next token of
every stream still running, each stream's token the argmax of its own logits. Same
file, threads and prompts as sluice's side: stream c takes prompt c mod 3 of
tests/data/smollm2_ref_visible.json, as token ids (the chat template already applied),
and runs until --tokens tokens or the end-of-sequence token.

A row is the median of --runs runs (after one untimed warm-up) of: clear the KV cache,
start the clock, prefill and decode every stream, stop the clock. Measured as sluice's
side is: generated tokens of all streams over that wall time (prefill included), and
the streams' greedy tokens compared with each prompt decoded alone (one stream).

Prints one JSON object on stdout (versions, threads, per stream count the rate, the wall
time and the matches); progress on stderr. Run through bench/llm/run_peer.sh
--script llama_cpp_batched.py, which builds llama-cpp-python from PyPI once.

With --serve, it loads the model, prints the header object (versions, threads, the
alone tokens) as one line, and then runs one timed run per line read on stdin (a
stream count; the first run of a count is preceded by an untimed warm-up), printing
each row as one line, until stdin closes: llm-batch-bench then interleaves llama.cpp's
runs with sluice's, so that a machine whose speed drifts over minutes slows both sides
alike.
"""

import argparse
import ctypes
import json
import platform
import sys
import time

import llama_cpp
import numpy as np


def log(*a):
    print("llama.cpp batched peer:", *a, file=sys.stderr, flush=True)


@llama_cpp.llama_log_callback
def quiet(level, text, user_data):
    """llama.cpp's log (model and context details, per load) is not the benchmark's output."""


class Batched:
    """One llama.cpp context that decodes up to `streams` sequences together."""

    def __init__(self, gguf, threads, streams, ctx_per_stream):
        llama_cpp.llama_log_set(quiet, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        self.model = llama_cpp.llama_model_load_from_file(gguf.encode(), mparams)
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {gguf}")
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = streams * ctx_per_stream
        cparams.n_batch = cparams.n_ctx
        cparams.n_ubatch = min(512, cparams.n_ctx)
        cparams.n_seq_max = streams
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise SystemExit("llama.cpp could not create a context")
        vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        self.eos = llama_cpp.llama_vocab_eos(vocab)
        self.batch = llama_cpp.llama_batch_init(cparams.n_ctx, 0, streams)

    def clear(self):
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)

    def decode(self, entries):
        """entries: (token, position, sequence, wants logits); returns the logits rows' batch indices."""
        b = self.batch
        wanted = []
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i] = token
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
            if logits:
                wanted.append(i)
        b.n_tokens = len(entries)
        rc = llama_cpp.llama_decode(self.ctx, b)
        if rc != 0:
            raise SystemExit(f"llama_decode failed: {rc}")
        return wanted

    def argmax(self, i):
        row = llama_cpp.llama_get_logits_ith(self.ctx, i)
        return int(np.argmax(np.ctypeslib.as_array(ctypes.cast(row, ctypes.POINTER(ctypes.c_float)), shape=(self.n_vocab,))))

    def generate(self, prompts, tokens):
        """Greedy tokens of every prompt, all decoded together; one list per prompt."""
        self.clear()
        entries, last = [], []
        for s, ids in enumerate(prompts):
            entries += [(t, p, s, p == len(ids) - 1) for p, t in enumerate(ids)]
            last.append(len(entries) - 1)
        self.decode(entries)
        out = [[self.argmax(i)] for i in last]
        while True:
            running = [s for s, o in enumerate(out) if len(o) < tokens and o[-1] != self.eos]
            if not running:
                return out
            step = [(out[s][-1], len(prompts[s]) + len(out[s]) - 1, s, True) for s in running]
            rows = self.decode(step)
            for s, i in zip(running, rows):
                out[s].append(self.argmax(i))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--prompts", required=True, help="tests/data/smollm2_ref_visible.json")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--streams", default="1,4,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--serve", action="store_true", help="one run per stream count read on stdin (see above)")
    args = ap.parse_args()

    with open(args.prompts) as f:
        prompts = [json.loads(p["prompt_ids"]) if isinstance(p["prompt_ids"], str) else p["prompt_ids"]
                   for p in json.load(f)["prompts"]]
    counts = [int(n) for n in args.streams.split(",")]
    longest = max(len(p) for p in prompts) + args.tokens
    llm = Batched(args.gguf, args.threads, max(counts), longest)
    alone = [llm.generate([p], args.tokens)[0] for p in prompts]
    log(f"{len(prompts)} prompts, {args.tokens} tokens per stream, {args.threads} threads")

    header = {
        "llama_cpp_python": llama_cpp.__version__,
        "python": platform.python_version(),
        "threads": args.threads,
        "tokens": args.tokens,
        "alone_tokens": alone,
    }

    def streams(n):
        """The prompts of n streams: stream c takes prompt c mod 3."""
        return [prompts[c % len(prompts)] for c in range(n)]

    def timed(n):
        """One timed run of n streams: (tokens per second, wall seconds, matches)."""
        t0 = time.perf_counter()
        out = llm.generate(streams(n), args.tokens)
        wall = time.perf_counter() - t0
        matches = sum(o == alone[c % len(alone)] for c, o in enumerate(out))
        return sum(map(len, out)) / wall, wall, matches

    if args.serve:
        print(json.dumps(header), flush=True)
        warmed = set()
        for line in sys.stdin:
            n = int(line)
            if not 1 <= n <= max(counts):
                raise SystemExit(f"--serve: {n} streams (the context holds 1 to {max(counts)})")
            if n not in warmed:
                llm.generate(streams(n), args.tokens)
                warmed.add(n)
            rate, wall, matches = timed(n)
            print(json.dumps({"streams": n, "tokens_per_s": rate, "wall_s": wall, "same_as_alone": matches}),
                  flush=True)
        return

    rows = []
    for n in counts:
        llm.generate(streams(n), args.tokens)  # warm-up
        results = sorted(timed(n) for _ in range(args.runs))
        rate, wall, matches = results[len(results) // 2]
        log(f"{n} streams: {rate:.1f} tok/s, {wall:.2f} s, {matches}/{n} same as alone")
        rows.append({"streams": n, "tokens_per_s": rate, "wall_s": wall, "same_as_alone": matches,
                     "runs_tokens_per_s": [r[0] for r in results]})
    print(json.dumps({**header, "rows": rows}))


if __name__ == "__main__":
    main()
