"""SmolLM2-135M-Instruct (the Q4_1 GGUF of `cargo xtask fetch-llm`) in llama.cpp through
llama-cpp-python, the peer of sluice's `smollm2-chat` in the LLM benchmark.

Same file, same threads, same prompt text (bench/llm/prompt.json, the chat template
already applied, special tokens parsed), greedy decoding. For each of --runs runs, after
--warmup untimed ones, measured as sluice's side is (from its token stream): the prompt
is evaluated in one batch and the first token taken as the argmax of its last logits
(prompt tokens/s = prompt tokens over that time, the time to first token; each run
evaluates the whole prompt: the model state is reset first, so no prefix of the previous
run's KV cache is reused); then each of
the other decode_tokens - 1 tokens is one decode step of the previous token and a
greedy pick (`Llama.generate` with top_k 1, temperature 0, no penalties) (decode tokens/s = those tokens over the time from the first token to the last).
Threads: n_threads = n_threads_batch = --threads.

Prints one JSON object on stdout: versions, threads, the prompt's token count and ids,
the greedy tokens of the first run, and per run the two rates; progress on stderr.
Run through bench/llm/run_peer.sh, which builds llama-cpp-python from PyPI once.
"""

import argparse
import json
import platform
import statistics
import sys
import time

import llama_cpp


def log(*a):
    print("llama.cpp peer:", *a, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--prompt", required=True, help="bench/llm/prompt.json")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()

    with open(args.prompt) as f:
        spec = json.load(f)
    llm = llama_cpp.Llama(
        model_path=args.gguf,
        n_ctx=1024,
        n_batch=512,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )
    prompt = llm.tokenize(spec["text"].encode(), add_bos=False, special=True)
    steps = spec["decode_tokens"]
    eos = llm.token_eos()
    log(f"{len(prompt)} prompt tokens, {steps} decode steps, {args.threads} threads")

    def run():
        # Forget the previous run's tokens: `generate` would otherwise reuse the KV cache
        # of the prompt prefix it already evaluated and time one token's evaluation as
        # the prompt's (sluice evaluates every prompt whole).
        llm.reset()
        tokens, t0 = [], time.perf_counter()
        greedy = llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True)
        for token in greedy:
            tokens.append(int(token))
            if len(tokens) == 1:
                t1 = time.perf_counter()
            if len(tokens) == steps:
                break
        t2 = time.perf_counter()
        return len(prompt) / (t1 - t0), (steps - 1) / (t2 - t1), tokens

    for _ in range(args.warmup):
        run()
    runs, first_tokens = [], None
    for i in range(args.runs):
        prompt_rate, decode_rate, tokens = run()
        first_tokens = first_tokens or tokens
        runs.append({"prompt_tokens_per_s": prompt_rate, "decode_tokens_per_s": decode_rate})
        log(f"run {i + 1}: prompt {prompt_rate:.0f} tok/s, decode {decode_rate:.1f} tok/s")
    print(json.dumps({
        "llama_cpp_python": llama_cpp.__version__,
        "python": platform.python_version(),
        "threads": args.threads,
        "prompt_ids": prompt,
        "greedy_tokens": first_tokens,
        "eos_in_greedy": eos in first_tokens,
        "runs": runs,
        "prompt_tokens_per_s_p50": statistics.median(r["prompt_tokens_per_s"] for r in runs),
        "decode_tokens_per_s_p50": statistics.median(r["decode_tokens_per_s"] for r in runs),
    }))


if __name__ == "__main__":
    main()
