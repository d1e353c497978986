#!/usr/bin/env bash
# MiniLM-L6 peers on the CPU: sentence-transformers (PyTorch eager) and ONNX Runtime with
# its transformer-optimised graph, same threads, same inputs, one run; see peers.py.
#
# Creates the virtual environment ~/.cache/sluice/venv-peers (PyPI packages only) when it
# is missing, then runs peers.py. OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for the
# peers only (this machine's environment pins OpenBLAS to AVX2 otherwise).
#
#   bench/peers/run.sh [--threads 2] [--runs 10] [--batch-runs 5] [--json out.json]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${SLUICE_PEERS_VENV:-$HOME/.cache/sluice/venv-peers}"
python="$venv/bin/python"

if ! "$python" -c 'import torch, sentence_transformers, onnxruntime, onnx' 2>/dev/null; then
    echo "peers: creating $venv (torch, sentence-transformers, onnxruntime, onnx from PyPI) …" >&2
    python3 -m venv "$venv"
    "$python" -m pip install --quiet --upgrade pip
    "$python" -m pip install --quiet -r "$here/requirements.txt"
fi

model_dir="${SLUICE_MODEL_DIR:-}"
if [ -z "$model_dir" ]; then
    model_dir="$(ls -d "$HOME"/.cache/sluice/models/*/ 2>/dev/null | head -1)"
fi
[ -n "$model_dir" ] && [ -f "$model_dir/model.safetensors" ] || {
    echo "peers: no MiniLM model (run 'cargo xtask fetch-model', or set SLUICE_MODEL_DIR)" >&2
    exit 1
}

exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$python" "$here/peers.py" \
    --model-dir "$model_dir" --reference "$root/tests/data/minilm_ref_visible.json" "$@"
