#!/usr/bin/env bash
# gpu_kquant.sh - the file-only tensor types (Q5_0, Q5_1, the K-quants, IQ4_*;
# kernels/cpu/kern_kquant.h) on the GPU, in one short run that fits a GPU
# grant (docs/CUDA.md): the CUDA op tests (their upload cases convert random
# blocks of every type and compare with the C reference, bit for bit), the
# CUDA model test, and synthetic models stored wholly in each type run with
# --device cuda against the CPU's exact (--weights f32) logits.
#
#   bench/gpu_kquant.sh package          # build machine: bench/gpu.sh package,
#                                        # plus the models and CPU logits
#   bench/gpu_kquant.sh run --out DIR    # GPU machine (or --device cpu here)
#
# Bounds (relative L2 of the logits, every position): f16 weights 1e-2; int8
# weights 2e-2 where the upload carries the codes over (Q5_0, IQ4_NL,
# IQ4_XS), 1e-1 where it requantizes from f32 as float matrices are (the
# others: the GPU's int8 has no offset form), as tests/integration/
# test_synthetic_models.py bounds the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
PKG=${PKG:-build-gpu/pkg}
TYPES="q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs"
IDS="17 200 31 5 250 199 3 64 128 7 9 11 13 15 100 101 102 103 104 105 106 107 108 109"

package() {
    bash bench/gpu.sh package || return 1
    mkdir -p "$PKG/kq" || return 1
    local py=${PYTHON:-.venv-test/bin/python}
    "$py" - "$PKG/kq" $TYPES <<'EOF' || return 1
import sys
sys.path.insert(0, "tests/integration")
from synth_gguf import Spec, write_model
out, types = sys.argv[1], sys.argv[2:]
for i, t in enumerate(types):
    write_model(f"{out}/{t}.gguf", Spec(n_embd=256, n_ff=512, n_head=4, n_head_kv=2,
                                        mat_type=t.upper(), embd_type="Q8_0",
                                        output_type=t.upper(), seed=40 + i))
EOF
    local t
    for t in $TYPES; do
        build/bin/brisk generate --model "$PKG/kq/$t.gguf" --prompt-ids "$IDS" -n 0 --temp 0 \
            --weights f32 --device cpu --dump-logits "$PKG/kq/$t.cpu.f32" 2>/dev/null || return 1
    done
    du -sh "$PKG/kq"
}

run() {
    local out="" device=cuda
    while [ $# -gt 0 ]; do
        case $1 in
        --out) out=$2; shift 2 ;;
        --device) device=$2; shift 2 ;;
        *) echo "gpu_kquant: unknown option $1" >&2; return 2 ;;
        esac
    done
    [ -n "$out" ] || { echo "gpu_kquant: --out DIR" >&2; return 2; }
    mkdir -p "$out"
    # At most three files come back (the GPU run returns at most 8): the log
    # and the two CUDA tests' output; the logits stay in a scratch folder.
    local W
    W=$(mktemp -d)
    export LD_LIBRARY_PATH="$PWD/$PKG/lib:${LD_LIBRARY_PATH:-}"
    export BRISK_SHARED_DIR="$PWD/$PKG/shared"
    local log=$out/gpu_kquant.log rc=0
    : > "$log"
    { nvidia-smi -L 2>&1 || true; } >> "$log"
    for t in test_cuda_ops test_cuda_model; do
        echo "===== $t" >> "$log"
        timeout 150 "$PKG/tests/$t" > "$out/$t.txt" 2>&1
        local r=$?
        echo "$t rc $r" >> "$log"
        tail -5 "$out/$t.txt" >> "$log"
        [ $r -eq 0 ] || rc=1
    done
    echo "===== models ($device)" >> "$log"
    local ty w
    for ty in $TYPES; do
        for w in f16 int8; do
            timeout 60 "$PKG/bin/brisk" generate --model "$PKG/kq/$ty.gguf" --prompt-ids "$IDS" \
                -n 0 --temp 0 --weights "$w" --device "$device" \
                --dump-logits "$W/$ty.$w.f32" > "$W/$ty.$w.txt" 2>&1 ||
                { echo "$ty $w: brisk failed: $(tail -1 "$W/$ty.$w.txt")" >> "$log"; rc=1; }
        done
    done
    grep -h "device\|cuda" "$W/q4_k.int8.txt" >> "$log" 2>/dev/null
    python3 - "$PKG/kq" "$W" $TYPES >> "$log" 2>&1 <<'EOF' || rc=1
import math, struct, sys
kq, out, types = sys.argv[1], sys.argv[2], sys.argv[3:]
CARRY = {"q5_0", "iq4_nl", "iq4_xs"}
bad = 0
def floats(p):
    b = open(p, "rb").read()
    return struct.unpack(f"<{len(b) // 4}f", b)
for t in types:
    ref = floats(f"{kq}/{t}.cpu.f32")
    n_pos = 24
    nv = len(ref) // n_pos
    for w in ("f16", "int8"):
        try:
            got = floats(f"{out}/{t}.{w}.f32")
        except OSError:
            print(f"{t:>7} {w:>4}: no logits"); bad += 1; continue
        worst = 0.0
        for p in range(n_pos):
            r = ref[p * nv:(p + 1) * nv]; g = got[p * nv:(p + 1) * nv]
            num = math.sqrt(sum((a - b) ** 2 for a, b in zip(g, r)))
            den = math.sqrt(sum(a * a for a in r))
            worst = max(worst, num / den if den else float("inf"))
        bound = 1e-2 if w == "f16" else (2e-2 if t in CARRY else 1e-1)
        ok = worst <= bound and len(got) == len(ref)
        bad += not ok
        print(f"{t:>7} {w:>4}: max rel L2 {worst:.2e} (bound {bound:.0e}) {'ok' if ok else 'FAIL'}")
print(f"models: {bad} failed")
sys.exit(1 if bad else 0)
EOF
    rm -rf "$W"
    echo "gpu_kquant: rc $rc" >> "$log"
    cat "$log"
    return $rc
}

case ${1:-} in
package) shift; package "$@" ;;
run) shift; run "$@" ;;
*) echo "usage: bench/gpu_kquant.sh package | run --out DIR [--device cpu]" >&2; exit 2 ;;
esac
