#!/usr/bin/env bash
# The LLM benchmark's peer: llama.cpp (llama-cpp-python, built from PyPI's sdist for this
# CPU) on the same GGUF file, threads and prompts as sluice: llama_cpp_peer.py (one
# stream, the LLM benchmark) or, with --script, llama_cpp_batched.py (several streams
# decoded together, llm-batch-bench).
#
# Creates ~/.cache/sluice/venv-llama-cpp once (PyPI only), then runs the peer.
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for it, like the MiniLM peers.
#
#   bench/llm/run_peer.sh --gguf FILE [--threads 2] [--runs 5] [--warmup 1]
#   bench/llm/run_peer.sh --script llama_cpp_batched.py --gguf FILE --prompts FILE [--streams 1,4,8]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${SLUICE_LLAMA_CPP_VENV:-$HOME/.cache/sluice/venv-llama-cpp}"
python="$venv/bin/python"

if ! "$python" -c 'import llama_cpp' 2>/dev/null; then
    echo "llm peer: creating $venv (llama-cpp-python built from source; a few minutes) …" >&2
    python3 -m venv "$venv"
    "$python" -m pip install --quiet --upgrade pip
    "$python" -m pip install --quiet -r "$here/requirements.txt"
fi

if [[ "${1:-}" == --script ]]; then
    script="$2"
    shift 2
    exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$python" "$here/$script" "$@"
fi
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$python" "$here/llama_cpp_peer.py" \
    --prompt "$here/prompt.json" "$@"
