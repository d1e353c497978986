#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, everything bench/gpu/run.sh runs on the H200, and
# copies it into bench/gpu/bin/ (gitignored). The H200 has no cargo: pass
# `carry: ["bench/gpu/bin"]` to the device tool.
#
#   CARGO_TARGET_DIR=... bash bench/gpu/prepare.sh   # then: run `bash bench/gpu/run.sh` on the device
#
# bin/ then holds (stripped release builds; CARGO_TARGET_DIR is respected):
#   sluice-cuda-conformance   the CUDA conformance test (+ .path, what run.sh reads)
#   sluice-bench-minilm       runtime/benches/minilm.rs      (SLUICE_BENCH_DEVICE=cuda)
#   sluice-bench-scheduling   runtime/benches/scheduling.rs  (SLUICE_BENCH_DEVICE=cuda)
#   functions/{minilm_embed,gemm_burn}.wasm                  (cargo xtask build-functions)
#   model/{vocab.txt,config.json,model.header.json}          (from the fetched model; the
#        90 MB weights do not fit the 64 MiB carry limit: run.sh makes random ones of the
#        same shapes with make_weights.py, checked against model.header.json)
# and must stay under BIN_LIMIT_MIB (default 55) so the whole tree travels (64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=bench/gpu/bin
MODEL_DIR=${SLUICE_MODEL_DIR:-$HOME/.cache/sluice/models/all-MiniLM-L6-v2}
LIMIT_MIB=${BIN_LIMIT_MIB:-55}
rm -rf "$BIN"
mkdir -p "$BIN/functions" "$BIN/model"

# copy_test_binary PACKAGE TEST_TARGET NAME
#   builds `cargo test -p PACKAGE --release --no-run`, finds the executable of the
#   integration test TEST_TARGET in cargo's JSON messages, strips it into $BIN/NAME and
#   records its path in $BIN/NAME.path (what run.sh reads).
copy_test_binary() {
    local package=$1 test=$2 name=$3 exe
    exe=$(cargo test -p "$package" --release --no-run --message-format=json \
        | jq -r --arg t "$test" 'select(.reason == "compiler-artifact" and .target.name == $t
                                         and .profile.test == true and .executable != null) | .executable' \
        | tail -n 1)
    if [[ -z "$exe" || ! -x "$exe" ]]; then
        echo "prepare.sh: no test executable '$test' in package $package" >&2
        exit 1
    fi
    cp "$exe" "$BIN/$name"
    strip "$BIN/$name"
    echo "$BIN/$name" > "$BIN/$name.path"
    echo "prepared $BIN/$name ($(du -h "$BIN/$name" | cut -f1)) from $exe"
}

copy_test_binary sluice-backend-cuda conformance sluice-cuda-conformance

# The benchmark binaries (harness = false: plain executables), built in the bench
# profile (release) like `cargo bench` builds them.
benches=$(cargo bench -p sluice-runtime --bench minilm --bench scheduling --no-run --message-format=json \
    | jq -r 'select(.reason == "compiler-artifact" and (.target.kind | index("bench")) and .executable != null)
             | "\(.target.name) \(.executable)"')
for name in minilm scheduling; do
    exe=$(awk -v n="$name" '$1 == n { print $2 }' <<<"$benches" | tail -n 1)
    if [[ -z "$exe" || ! -x "$exe" ]]; then
        echo "prepare.sh: cargo built no bench executable '$name'" >&2
        exit 1
    fi
    cp "$exe" "$BIN/sluice-bench-$name"
    strip "$BIN/sluice-bench-$name"
    echo "prepared $BIN/sluice-bench-$name ($(du -h "$BIN/sluice-bench-$name" | cut -f1)) from $exe"
done

# The guest functions the benchmarks load (always rebuilt: quick when up to date).
cargo xtask build-functions
for f in minilm_embed gemm_burn; do
    cp "functions/target/wasm32-wasip2/release/$f.wasm" "$BIN/functions/"
done

# The model's small files, and the real weights' header for make_weights.py to check
# its names, shapes and dtypes against.
for f in vocab.txt config.json model.safetensors; do
    if [[ ! -f "$MODEL_DIR/$f" ]]; then
        echo "prepare.sh: $MODEL_DIR/$f is missing: run \`cargo xtask fetch-model\` (or set SLUICE_MODEL_DIR)" >&2
        exit 1
    fi
done
cp "$MODEL_DIR/vocab.txt" "$MODEL_DIR/config.json" "$BIN/model/"
python3 - "$MODEL_DIR/model.safetensors" "$BIN/model/model.header.json" <<'EOF'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
with open(sys.argv[2], "w") as f:
    json.dump(header, f, indent=1, sort_keys=True)
EOF

echo
ls -la "$BIN" "$BIN/functions" "$BIN/model"
bytes=$(du -sb "$BIN" | cut -f1)
mib=$(( (bytes + (1 << 20) - 1) >> 20 ))
# What else travels: tracked files and untracked ones git does not ignore.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -n 1 | cut -f1)
echo "bench/gpu/bin: ${mib} MiB (limit ${LIMIT_MIB} MiB); the rest of the working tree: $(( tree >> 20 )) MiB; together $(( (bytes + tree) >> 20 )) MiB of the 64 MiB the device tool carries"
if (( mib > LIMIT_MIB )); then
    echo "prepare.sh: bench/gpu/bin is ${mib} MiB, over the ${LIMIT_MIB} MiB limit" >&2
    exit 1
fi
if (( (bytes + tree) >> 20 >= 64 )); then
    echo "prepare.sh: bench/gpu/bin and the working tree together exceed 64 MiB" >&2
    exit 1
fi
