# Helpers shared by the fetch scripts (sourced, not run). Set TAG first: the prefix of
# every message.

log() { echo "$TAG: $*" >&2; }
die() { echo "$TAG: ERROR: $*" >&2; exit 1; }

# sha256_of FILE: the file's sha256 in hex (sha256sum, or Python where it is missing).
sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        "$PYTHON" -c 'import hashlib,sys
h=hashlib.sha256()
with open(sys.argv[1],"rb") as f:
    for b in iter(lambda: f.read(1<<20), b""): h.update(b)
print(h.hexdigest())' "$1"
    fi
}
