#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, the binaries that bench/gpu/run.sh runs on the H200,
# and copies them, stripped, into bench/gpu/bin/ (gitignored). The H200 has no cargo:
# pass `carry: ["bench/gpu/bin"]` to the device tool.
#
#   bash bench/gpu/prepare.sh        # then: run `bash bench/gpu/run.sh` on the device
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=bench/gpu/bin
mkdir -p "$BIN"

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
# Hook: the MiniLM benchmark and later device checks add their binaries here, e.g.
#   copy_test_binary sluice-runtime minilm_bench sluice-minilm-bench
# and a matching bench/gpu/hooks/NN-name.sh that run.sh executes.

du -sh "$BIN"
