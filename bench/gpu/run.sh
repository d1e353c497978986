#!/usr/bin/env bash
# The one prepared device check, run by the device tool on the H200 from the repository
# root, with the binaries of bench/gpu/prepare.sh carried in bench/gpu/bin/:
#
#   run(command="bash bench/gpu/run.sh", carry=["bench/gpu/bin"], timeout_s=420)
#
# Writes under $OUT (default bench/out): run.log (everything), env.txt, conformance.txt,
# one <hook>.txt per hook, summary.txt. Exit status: non-zero if any step failed.
# Step time limits (seconds) can be overridden: CONFORMANCE_TIMEOUT, HOOK_TIMEOUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
BIN=bench/gpu/bin
status=0
summary() { echo "$1" | tee -a "$OUT/summary.txt"; }

echo "== environment ($(date -u +%FT%TZ))"
{
    uname -a
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || echo "nvidia-smi unavailable"
    # Where the loader will find libcuda, libnvrtc and libcublas.
    ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc\.so|libcublas(Lt)?\.so' || echo "ldconfig: no CUDA libraries listed"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
# NVRTC and cuBLAS often live in the toolkit rather than the loader's default path.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    [[ -d "$d" ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

echo "== conformance (CUDA vs CPU, every op and dtype)"
if [[ ! -f "$BIN/sluice-cuda-conformance.path" ]]; then
    summary "conformance: MISSING (run bash bench/gpu/prepare.sh here and carry bench/gpu/bin)"
    exit 2
fi
conf=$(cat "$BIN/sluice-cuda-conformance.path")
export SLUICE_REQUIRE_CUDA=1
export SLUICE_KERNEL_CACHE_DIR=${SLUICE_KERNEL_CACHE_DIR:-/tmp/sluice-kernel-cache}
SECONDS=0
timeout "${CONFORMANCE_TIMEOUT:-300}" "$conf" --test-threads=1 --nocapture > "$OUT/conformance.txt" 2>&1
rc=$?
secs=$SECONDS
grep -E '^(device:|FAIL|test |[0-9]+ passed|kernel modules:|MemoryStats)|panicked|skipping|SLUICE_REQUIRE_CUDA|case\(s\) failed' "$OUT/conformance.txt" | head -80
summary "conformance: rc=$rc (${secs}s) $(grep -E '^[0-9]+ passed' "$OUT/conformance.txt" | tail -n 1)"
[[ $rc -ne 0 ]] && status=1

# Hooks: every executable bench/gpu/hooks/*.sh runs in name order (e.g. 10-minilm.sh),
# with $OUT, $BIN and LD_LIBRARY_PATH set; its output goes to $OUT/<name>.txt.
for hook in bench/gpu/hooks/*.sh; do
    [[ -x "$hook" ]] || continue
    name=$(basename "$hook" .sh)
    echo "== hook $name"
    OUT="$OUT" BIN="$BIN" timeout "${HOOK_TIMEOUT:-240}" "$hook" > "$OUT/$name.txt" 2>&1
    hrc=$?
    tail -n 40 "$OUT/$name.txt"
    summary "$name: rc=$hrc"
    [[ $hrc -ne 0 ]] && status=1
done

echo "== summary"
cat "$OUT/summary.txt"
exit $status
