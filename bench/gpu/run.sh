#!/usr/bin/env bash
# The one prepared device check, run by the device tool on the H200 from the repository
# root, with what bench/gpu/prepare.sh built carried in bench/gpu/bin/:
#
#   run(command="bash bench/gpu/run.sh", carry=["bench/gpu/bin"], timeout_s=540)
#
# Steps, each under its own `timeout`, each logged, none stopping the others:
#   conformance   the CUDA conformance test (every op × dtype against the CPU backend)
#   weights       make_weights.py: MiniLM-shaped random weights (real names, shapes, dtypes)
#   minilm        sluice's MiniLM benchmark on CUDA (f32/f16 × batch 1/8/32, seq 128)
#   torch         the PyTorch baseline (eager and CUDA graph), cross-checked with sluice
#   colocation    sluice's scheduling benchmark on CUDA (FIFO, priority + preemption, + a
#                 16-SM green-context partition: SLUICE_BENCH_RESERVED_SMS)
# then one summary table (summarize.py). All of it ends within RUN_BUDGET seconds
# (default 470): a step gets min(its own limit, the time left minus what the steps after
# it need at least), and is skipped when that is under 10 s.
#
# Writes under $OUT (default bench/out), at most 8 files (the device tool brings back no
# more): run.log (everything), env.txt, conformance.txt, minilm.txt, torch.txt,
# colocation.txt, summary.txt. Exit status: non-zero if any step failed; 3, before
# anything runs or is written, on the CUDA emulator (SLUICE_FAKE_CUDA set, or a device or
# libcuda named "sluice CPU emulator").
# Overrides: RUN_BUDGET, CONFORMANCE_TIMEOUT, WEIGHTS_TIMEOUT, MINILM_TIMEOUT,
# TORCH_TIMEOUT, COLOCATION_TIMEOUT, HOOK_TIMEOUT, PYTHON (default python3), STEPS (the
# steps to run, default all: "conformance weights minilm torch colocation hook"),
# MINILM_MODEL_DIR (a directory with real weights: skips the weights step).
set -uo pipefail
cd "$(dirname "$0")/../.."

# Never on the emulator: the fake CUDA libraries (fakecuda/, device "sluice CPU
# emulator") run the kernels on CPU fibers, so every time measured there is meaningless
# as a GPU result. Checked before anything runs or is written; exit status 3.
emulator_reason() {
    if [[ -n "${SLUICE_FAKE_CUDA:-}" && "${SLUICE_FAKE_CUDA}" != 0 ]]; then
        echo "SLUICE_FAKE_CUDA=${SLUICE_FAKE_CUDA} is set"
        return 0
    fi
    local names dir lib
    names=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)
    if grep -q "sluice CPU emulator" <<< "$names"; then
        echo "nvidia-smi names the device \"sluice CPU emulator\""
        return 0
    fi
    # The libcuda the loader would pick first: LD_LIBRARY_PATH, then the loader's cache.
    local IFS=:
    for dir in ${LD_LIBRARY_PATH:-}; do
        lib="$dir/libcuda.so.1"
        if [[ -f "$lib" ]]; then
            grep -qa "sluice CPU emulator" "$lib" && { echo "$lib is the fake driver (device \"sluice CPU emulator\")"; return 0; }
            return 1
        fi
    done
    lib=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
    if [[ -n "$lib" && -f "$lib" ]] && grep -qa "sluice CPU emulator" "$lib"; then
        echo "$lib is the fake driver (device \"sluice CPU emulator\")"
        return 0
    fi
    return 1
}
if why=$(emulator_reason); then
    echo "run.sh: refusing to run on the CUDA emulator ($why)." >&2
    echo "run.sh: bench/gpu measures a real GPU; its results are never taken from the fake CUDA device." >&2
    echo "run.sh: unset SLUICE_FAKE_CUDA and take fakecuda's lib/ off LD_LIBRARY_PATH, on a machine with a GPU." >&2
    exit 3
fi

OUT=${OUT:-bench/out}
mkdir -p "$OUT"
: > "$OUT/summary.txt"
exec > >(tee -a "$OUT/run.log") 2>&1
BIN=bench/gpu/bin
PYTHON=${PYTHON:-python3}
DEADLINE=$(( $(date +%s) + ${RUN_BUDGET:-470} ))
# Which steps run (a rerun of some, e.g. STEPS="weights colocation": colocation and
# minilm need the weights step's file, torch needs minilm's dump).
STEPS=${STEPS:-conformance weights minilm torch colocation hook}
status=0
summary() { echo "$1" | tee -a "$OUT/summary.txt"; }
chmod +x "$BIN"/sluice-* 2>/dev/null

# run_step NAME LIMIT RESERVE LOG CMD...: runs CMD (output to LOG) under `timeout`, for at
# most LIMIT seconds and at most the time left before the deadline less RESERVE (what
# the later steps need at least); records its exit status in summary.txt.
run_step() {
    local name=$1 limit=$2 reserve=$3 log=$4 t0 rc left
    shift 4
    if [[ " $STEPS " != *" ${name%% *} "* ]]; then
        summary "$name: not run (STEPS=$STEPS)"
        return 0
    fi
    left=$(( DEADLINE - $(date +%s) - reserve ))
    (( limit > left )) && limit=$left
    if (( limit < 10 )); then
        summary "$name: SKIPPED (${left}s left of RUN_BUDGET)"
        status=1
        return 1
    fi
    echo "== $name (limit ${limit}s): $*"
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" > "$log" 2>&1
    rc=$?
    local note=""
    (( rc == 124 || rc == 137 )) && note=" TIMED OUT after ${limit}s"
    summary "$name: rc=$rc ($(( $(date +%s) - t0 ))s)$note"
    (( rc != 0 )) && status=1
    return $rc
}

echo "== environment ($(date -u +%FT%TZ))"
{
    uname -a
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.sm,clocks.max.sm,power.draw,power.limit \
        --format=csv 2>&1 || echo "nvidia-smi unavailable"
    # Where the loader will find libcuda, libnvrtc and libcublas.
    ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc\.so|libcublas(Lt)?\.so' || echo "ldconfig: no CUDA libraries listed"
    "$PYTHON" -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)' 2>&1 | tail -n 1
    "$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' 2>&1 | tail -n 1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
# NVRTC and cuBLAS often live in the toolkit rather than the loader's default path.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    [[ -d "$d" ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
export SLUICE_REQUIRE_CUDA=1
# Kernels compiled by NVRTC in one step are loaded from this cache by the next ones.
export SLUICE_KERNEL_CACHE_DIR=${SLUICE_KERNEL_CACHE_DIR:-/tmp/sluice-kernel-cache}

# The minimum each step needs, for the reserve of the steps before it.
MIN_WEIGHTS=20 MIN_MINILM=60 MIN_TORCH=60 MIN_COLOCATION=90 MIN_SUMMARY=10

conf=$BIN/sluice-cuda-conformance
[[ -f $BIN/sluice-cuda-conformance.path ]] && conf=$(cat "$BIN/sluice-cuda-conformance.path")
if [[ -x "$conf" ]]; then
    run_step conformance "${CONFORMANCE_TIMEOUT:-150}" $(( MIN_WEIGHTS + MIN_MINILM + MIN_TORCH + MIN_COLOCATION + MIN_SUMMARY )) \
        "$OUT/conformance.txt" "$conf" --test-threads=1 --nocapture
    [[ -f "$OUT/conformance.txt" ]] && grep -E '^(device:|FAIL|test |[0-9]+ passed|kernel modules:|MemoryStats)|panicked|skipping|SLUICE_REQUIRE_CUDA|case\(s\) failed' \
        "$OUT/conformance.txt" | head -80
    grep -E '^[0-9]+ passed' "$OUT/conformance.txt" | tail -n 1 | sed 's/^/conformance: /' | tee -a "$OUT/summary.txt"
else
    summary "conformance: MISSING $conf (run bash bench/gpu/prepare.sh here and carry bench/gpu/bin)"
    status=1
fi

# The model: real weights if MINILM_MODEL_DIR names them, else random ones of the same shapes.
MODEL=${MINILM_MODEL_DIR:-/tmp/sluice-minilm}
if [[ -z "${MINILM_MODEL_DIR:-}" ]]; then
    mkdir -p "$MODEL"
    cp "$BIN/model/vocab.txt" "$BIN/model/config.json" "$MODEL/" 2>/dev/null
    check=()
    [[ -f $BIN/model/model.header.json ]] && check=(--check-header "$BIN/model/model.header.json")
    run_step weights "${WEIGHTS_TIMEOUT:-60}" $(( MIN_MINILM + MIN_TORCH + MIN_COLOCATION + MIN_SUMMARY )) \
        /tmp/sluice-weights.log "$PYTHON" bench/gpu/make_weights.py --config "$MODEL/config.json" \
        --out "$MODEL/model.safetensors" "${check[@]}"
    cat /tmp/sluice-weights.log
fi

# SLUICE_BENCH_DEVICE=cpu SLUICE_BENCH_GPU_PATH=1 (+ small SLUICE_BENCH_* sizes) dry-runs the GPU path on a CPU.
export SLUICE_MODEL_DIR=$MODEL SLUICE_FUNCTIONS_DIR=$BIN/functions SLUICE_REPO_ROOT=$PWD
export SLUICE_BENCH_DEVICE=${SLUICE_BENCH_DEVICE:-cuda}
export SLUICE_BENCH_DUMP=/tmp/sluice-minilm-dump.json PYTHONUNBUFFERED=1
DUMP=$SLUICE_BENCH_DUMP
rm -f "$DUMP"
if [[ -x $BIN/sluice-bench-minilm ]]; then
    run_step minilm "${MINILM_TIMEOUT:-120}" $(( MIN_TORCH + MIN_COLOCATION + MIN_SUMMARY )) \
        "$OUT/minilm.txt" "$BIN/sluice-bench-minilm" --bench
    grep -vE '^\{' "$OUT/minilm.txt" | tail -n 25
else
    summary "minilm: MISSING $BIN/sluice-bench-minilm (run bash bench/gpu/prepare.sh)"
    status=1
fi

run_step torch "${TORCH_TIMEOUT:-120}" $(( MIN_COLOCATION + MIN_SUMMARY )) "$OUT/torch.txt" \
    "$PYTHON" bench/gpu/minilm_torch.py --model-dir "$MODEL" --sluice-dump "$DUMP"
grep -vE '^\{' "$OUT/torch.txt" | tail -n 25

if [[ -x $BIN/sluice-bench-scheduling ]]; then
    run_step colocation "${COLOCATION_TIMEOUT:-150}" "$MIN_SUMMARY" "$OUT/colocation.txt" \
        "$BIN/sluice-bench-scheduling" --bench
    grep -vE '^\{' "$OUT/colocation.txt" | tail -n 30
else
    summary "colocation: MISSING $BIN/sluice-bench-scheduling (run bash bench/gpu/prepare.sh)"
    status=1
fi

# Hooks: every executable bench/gpu/hooks/*.sh runs in name order, with $OUT, $BIN and
# LD_LIBRARY_PATH set; its output goes to $OUT/<name>.txt (mind the 8-file limit).
export OUT BIN
for hook in bench/gpu/hooks/*.sh; do
    [[ -x "$hook" ]] || continue
    name=$(basename "$hook" .sh)
    run_step "hook $name" "${HOOK_TIMEOUT:-240}" "$MIN_SUMMARY" "$OUT/$name.txt" "$hook"
    tail -n 40 "$OUT/$name.txt"
done

echo
echo "== summary"
"$PYTHON" bench/gpu/summarize.py "$OUT" >> "$OUT/summary.txt" 2>&1 || echo "summarize.py failed" >> "$OUT/summary.txt"
(( status != 0 )) && echo "run.sh: at least one step FAILED (see the rc lines above and the logs under \$OUT)" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $status
