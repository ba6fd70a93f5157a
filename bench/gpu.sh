#!/usr/bin/env bash
# gpu.sh - the CUDA backend's checks and figures on a GPU machine that has no
# package registry, in one call of at most a few minutes.
#
# On the build machine (CUDA toolkit, libuv and cJSON installed):
#   bench/gpu.sh package [--from DIR]  # (--from: the binaries of an existing build)
#                                   # Release build for sm_$ARCH (90) into build-gpu/,
#                                   # then build-gpu/pkg/: the binaries, libuv and
#                                   # libcjson beside them, stories260K; prints the
#                                   # size of what travels (working tree + pkg)
# On the GPU machine (from the repository root, the package carried along):
#   bench/gpu.sh run [--quick] [--device cuda|cpu] [--out DIR]
#
# run does every stage under its own timeout, never stopping at a failure, and
# writes three files into DIR ($OUT, else bench/results/<date>-<gpu>-cuda):
#   summary.json   what passed and every figure (bench/gpu_report.py)
#   gpu.log        the whole log
#   results.tar.gz each stage's own output
# The stages, by the GPU issue's items:
#   1 env       nvidia-smi, where the CUDA libraries are, brisk --version
#   1 ops       test_cuda_ops: every op against its CPU reference
#   2 model     test_cuda_model: stories260K golden, CPU/CUDA greedy agreement
#               (f16, int8; stories260K, dummy smollm2-135m, llama-3.2-1b, qwen3-0.6b and gemma3-1b)
#   2 backend   test_backend
#   3 serve     brisk serve --device cuda (llama-3-8b dummy f16): completions,
#               chat, streaming, n>1 (gpu_check.py smoke); brisk-bench 128/128 at
#               concurrency 1,16,64,256; /metrics against nvidia-smi
#   1 memcheck, racecheck   compute-sanitizer on test_cuda_ops --small
#   4 opsperf   copy bandwidth, cuBLAS f16 peak, each op's time (test_cuda_ops perf)
#   4 decode    brisk bench decode/prefill, llama-3-8b f16 and int8 (+ f16 graphs off)
#   4 hf        transformers generate, same shape and batch sizes
# --quick: env, ops, model, backend, serve (one wave a level, 32 tokens out),
# memcheck and racecheck, in about 3 minutes (the run after fixes).
# --device cpu: the rehearsal on a machine without a GPU (scripts/test.sh runs
# `--device cpu --quick`): stories260K instead of the 8B shape, small levels;
# the CUDA tests report SKIP and test_cuda_model rehearses on the CPU.
#
# Environment: GIT_COMMIT (recorded; the GPU machine's copy of .git may be older),
# PKG (build-gpu/pkg), BUDGET_S (whole run: 300, quick 180),
# SHAPE (llama-3-8b), LEVELS (1,16,64,256), IN/OUT (128/128), ARCH (90).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PKG=${PKG:-build-gpu/pkg}
say() { echo "gpu.sh: $*" >&2; }

# ---- package (build machine) -------------------------------------------------------
package() {
    local arch=${ARCH:-90} bdir=${BUILD_DIR:-build-gpu} from=
    [ "${1:-}" = --from ] && { from=$2; bdir=$2; }
    if [ -z "$from" ]; then
        cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DBRISK_CUDA_ARCHITECTURES="$arch" >/dev/null || return 1
        cmake --build "$bdir" -j"$(nproc)" --target brisk brisk-bench test_cuda_ops test_cuda_model test_backend \
            2>&1 | tail -2
    fi
    rm -rf "$PKG" && mkdir -p "$PKG/bin" "$PKG/tests" "$PKG/lib" "$PKG/shared/models" || return 1
    cp "$bdir/bin/brisk" "$bdir/bin/brisk-bench" "$PKG/bin/" || return 1
    cp "$bdir/tests/test_backend" "$PKG/tests/" || return 1
    # --from a build without CUDA (no toolkit): the CUDA tests are not there,
    # and run says so.
    local t
    for t in test_cuda_ops test_cuda_model; do
        if [ -x "$bdir/tests/$t" ]; then cp "$bdir/tests/$t" "$PKG/tests/"
        elif [ -z "$from" ]; then say "package: $bdir/tests/$t was not built"; return 1
        else say "package: $t not in $bdir (a build without CUDA)"; fi
    done
    # Only the libraries that are not CUDA's: the GPU machine has the CUDA
    # runtime and cuBLAS (dlopened by brisk), but no libuv or cJSON.
    local lib
    for lib in libuv.so.1 libcjson.so.1; do
        local p
        p=$(ldd "$PKG/bin/brisk" | awk -v l="$lib" '$1 == l { print $3 }')
        [ -n "$p" ] || { say "package: $lib not found by ldd"; return 1; }
        cp -L "$p" "$PKG/lib/$lib" || return 1
    done
    local shared=${BRISK_SHARED_DIR:-../shared}
    cp "$shared/models/stories260K.bin" "$shared/models/tok512.bin" "$PKG/shared/models/" || return 1
    strip --strip-unneeded "$PKG/bin/"* "$PKG/tests/"* 2>/dev/null || true
    [ -n "$from" ] && { echo "package from $from: $(cd "$PKG" && find . -type f | sort | tr '\n' ' ')"; return 0; }
    echo "built for sm_$arch: $(cd "$PKG" && find . -type f | sort | tr '\n' ' ')"
    du -sh "$PKG"
    # What travels: tracked and untracked-not-ignored files, plus the package.
    local tree
    tree=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) )
    local pkgb
    pkgb=$(du -sb "$PKG" | cut -f1)
    echo "travels: working tree $((tree / 1048576)) MiB + package $((pkgb / 1048576)) MiB = $(((tree + pkgb) / 1048576)) MiB (limit 64 MiB)"
    [ $((tree + pkgb)) -lt $((64 * 1048576)) ]
}

# ---- run (GPU machine, or the CPU rehearsal) ---------------------------------------
QUICK=0 DEVICE=cuda OUTDIR=${OUT:-}
T0=$(date +%s)
remaining() { echo $((BUDGET_S - ($(date +%s) - T0))); }

# stage NAME CAP CMD...: CMD under timeout min(CAP, what the budget has left
# less a reserve for the report), its output in $W/NAME.txt and the log,
# its exit status and seconds in $W/stages.tsv. A stage the budget cannot
# start is recorded as skipped.
stage() {
    local name=$1 cap=$2
    shift 2
    local left t s rc
    left=$(($(remaining) - 15))
    t=$((cap < left ? cap : left))
    if [ "$t" -lt 10 ]; then
        say "stage $name: skipped (budget left ${left}s)"
        printf '%s\tskipped\t0\t%s\n' "$name" "$cap" >> "$W/stages.tsv"
        return 0
    fi
    say "stage $name: start (timeout ${t}s)"
    s=$(date +%s.%N)
    timeout --kill-after=10 "$t" "$@" > "$W/$name.txt" 2>&1
    rc=$?
    local secs
    secs=$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "gpu.sh: TIMEOUT after ${t}s" >> "$W/$name.txt"
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$secs" "$t" >> "$W/stages.tsv"
    { echo "===== $name (rc $rc, ${secs}s, timeout ${t}s)"; tail -c 60000 "$W/$name.txt"; } >> "$W/gpu.log"
    say "stage $name: rc $rc in ${secs}s"
}

# Where the CUDA runtime and cuBLAS are on this machine: the loader's cache,
# else the toolkit's folders, else the Python wheels (nvidia-*-cu13).
find_cuda_libs() {
    local dirs="" lib d
    for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
        ldconfig -p 2>/dev/null | grep -q "$lib" && continue
        d=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt /usr/local/lib/python3* -name "$lib" \
            -print -quit 2>/dev/null)
        [ -n "$d" ] && dirs="$dirs:$(dirname "$d")"
    done
    echo "${dirs#:}"
}

find_sanitizer() {
    command -v compute-sanitizer 2>/dev/null && return
    find /usr/local/cuda*/bin /opt/nvidia -name compute-sanitizer -type f -print -quit 2>/dev/null
}

st_env() {
    echo "date: $(date -u +%FT%TZ)  host: $(uname -nrm)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi
        nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.mem,enforced.power.limit \
            --format=csv
    else
        echo "nvidia-smi: not found"
    fi
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "compute-sanitizer: ${SANITIZER:-not found}"
    ldd "$PKG/bin/brisk" "$PKG/tests/test_cuda_ops"
    "$PKG/bin/brisk" --version
}

st_serve() {
    local log=$W/serve.log pid url=
    local args=(--port 0 --chat-template chatml --served-model-name m --gpu-metrics-interval 1)
    if [ "$DEVICE" = cuda ]; then
        args+=(--dummy-weights "$SHAPE" --device cuda --weights f16 --max-num-seqs 256
            --max-num-batched-tokens 8192 --ctx 1024 --gpu-metrics on)
    else
        args+=(--model "$W/stories260K.gguf" --device cpu --max-num-seqs 16 --ctx 256)
    fi
    echo "brisk serve ${args[*]}"
    "$PKG/bin/brisk" serve "${args[@]}" > "$log" 2>&1 &
    pid=$!
    echo $pid > "$W/serve.pid"
    trap 'kill -TERM $pid 2>/dev/null; sleep 1; kill -KILL $pid 2>/dev/null' EXIT
    for _ in $(seq 1800); do
        url=$(sed -n 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "$log" | head -1)
        [ -n "$url" ] && break
        kill -0 $pid 2>/dev/null || { echo "server exited:"; tail -30 "$log"; return 1; }
        sleep 0.1
    done
    [ -n "$url" ] || { echo "server did not listen"; tail -30 "$log"; return 1; }
    # Ready when /health says so (the model loads after the port opens); a
    # server that exits (a failed load) ends the wait at once.
    local ready=0
    for _ in $(seq 1200); do
        python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" \
            "$url" 2>/dev/null && { ready=1; break; }
        kill -0 $pid 2>/dev/null || { echo "server exited:"; tail -30 "$log"; return 1; }
        sleep 0.2
    done
    [ $ready = 1 ] || { echo "server not ready"; tail -30 "$log"; return 1; }
    echo "ready: $(grep -m1 'model:' "$log")"
    local rc=0
    python3 bench/gpu_check.py smoke --url "$url" --json "$W/smoke.json" || rc=1
    local c n out=$OUT_LEN
    for c in ${LEVELS//,/ }; do
        # Two waves a level (one when quick), at least 4 requests.
        n=$((QUICK ? c : 2 * c))
        [ "$n" -lt 4 ] && n=4
        "$PKG/bin/brisk-bench" --base-url "$url" --input-len "$IN" --output-len "$out" \
            --num-prompts "$n" --warmup 2 --max-concurrency "$c" --label "brisk $SHAPE c=$c" --quiet \
            --json "$W/serve_c$c.json" || rc=1
    done
    python3 bench/gpu_check.py metrics --url "$url" --json "$W/metrics_vs_smi.json"
    case $? in 0|3) ;; *) rc=1 ;; esac  # 3: no nvidia-smi to compare with
    python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('$url/metrics').read().decode())" \
        > "$W/metrics.txt" || true
    kill -TERM $pid
    wait $pid || { echo "server exit status $?"; rc=1; }
    trap - EXIT
    tail -5 "$log"
    return $rc
}

st_decode() {
    local rc=0 w g
    for w in f16 int8 f16-nographs; do
        g=
        [ "$w" = f16-nographs ] && g=--no-cuda-graphs
        echo "brisk bench --dummy-weights $SHAPE --device cuda --weights ${w%-nographs} $g -p 512 -n 128 --reps 3" >&2
        "$PKG/bin/brisk" bench --dummy-weights "$SHAPE" --device cuda --weights "${w%-nographs}" $g \
            -p 512 -n 128 --reps 3 | tee -a "$W/model_bench.jsonl" || rc=1
    done
    return $rc
}

run() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --quick) QUICK=1 ;;
            --device) DEVICE=$2; shift ;;
            --out) OUTDIR=$2; shift ;;
            *) say "run: unknown option '$1'"; return 2 ;;
        esac
        shift
    done
    case "$DEVICE" in cuda|cpu) ;; *) say "--device cuda|cpu"; return 2 ;; esac
    if [ "$DEVICE" = cuda ]; then
        SHAPE=${SHAPE:-llama-3-8b} LEVELS=${LEVELS:-1,16,64,256} IN=${IN:-128}
        OUT_LEN=${OUT_LEN:-$([ $QUICK = 1 ] && echo 32 || echo 128)}
    else
        SHAPE=stories260K LEVELS=${LEVELS:-1,4} IN=${IN:-16} OUT_LEN=${OUT_LEN:-8}
    fi
    BUDGET_S=${BUDGET_S:-$([ $QUICK = 1 ] && echo 180 || echo 300)}
    [ -x "$PKG/bin/brisk" ] || { say "no package at $PKG (bench/gpu.sh package on the build machine)"; return 1; }
    local gpu=cpu
    command -v nvidia-smi >/dev/null 2>&1 &&
        gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-' | tr -cd 'A-Za-z0-9_.-')
    OUTDIR=${OUTDIR:-bench/results/$(date +%Y-%m-%d)-$gpu-cuda}
    mkdir -p "$OUTDIR" || return 1
    OUTDIR=$(cd "$OUTDIR" && pwd)
    W=$(mktemp -d /tmp/brisk-gpu-XXXXXX)
    : > "$W/stages.tsv"
    : > "$W/gpu.log"
    export LD_LIBRARY_PATH="$ROOT/$PKG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local cl
    cl=$(find_cuda_libs)
    [ -n "$cl" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cl"
    SANITIZER=$(find_sanitizer)
    export BRISK_SHARED_DIR=$ROOT/$PKG/shared
    export W PKG DEVICE QUICK SHAPE LEVELS IN OUT_LEN SANITIZER
    export -f st_env st_serve st_decode
    say "run: device $DEVICE, quick $QUICK, budget ${BUDGET_S}s, output $OUTDIR, work $W"
    # stories260K as GGUF (the CPU rehearsal serves it).
    "$PKG/bin/brisk" convert-llama2c --model "$BRISK_SHARED_DIR/models/stories260K.bin" \
        --tokenizer "$BRISK_SHARED_DIR/models/tok512.bin" --out "$W/stories260K.gguf" > /dev/null 2>&1 ||
        say "convert-llama2c failed"

    # A CUDA test missing from the package: a failure on the GPU, a note in the
    # rehearsal of a build without CUDA.
    local t
    for t in test_cuda_ops test_cuda_model; do
        [ -x "$PKG/tests/$t" ] && continue
        mkdir -p "$W/missing"
        printf '#!/bin/sh\necho "%s: SKIP: not in the package (a build without CUDA)"\nexit %s\n' "$t" \
            "$([ "$DEVICE" = cpu ] && echo 0 || echo 1)" > "$W/missing/$t"
        chmod +x "$W/missing/$t"
    done
    stage env 30 bash -c st_env
    local ops=$PKG/tests/test_cuda_ops mdl=$PKG/tests/test_cuda_model
    [ -x "$ops" ] || ops=$W/missing/test_cuda_ops
    [ -x "$mdl" ] || mdl=$W/missing/test_cuda_model
    stage ops 150 "$ops"
    if [ "$DEVICE" = cuda ]; then
        stage model 150 "$mdl"
    else
        stage model 150 "$mdl" --cpu
    fi
    stage backend 60 "$PKG/tests/test_backend"
    stage serve 200 bash -c st_serve
    # A timed-out stage's shell is killed before its trap runs: the server
    # must not keep the GPU's memory from the stages after it.
    [ -f "$W/serve.pid" ] && kill -KILL "$(cat "$W/serve.pid")" 2>/dev/null
    local tool
    for tool in memcheck racecheck; do
        if [ -n "$SANITIZER" ]; then
            stage "$tool" 75 "$SANITIZER" --tool "$tool" --error-exitcode 7 "$ops" --small
        else
            stage "$tool" 10 bash -c "echo 'compute-sanitizer: not found on this machine'; exit 3"
        fi
    done
    if [ "$QUICK" = 0 ]; then
        if [ "$DEVICE" = cuda ]; then
            stage opsperf 90 "$ops" perf
            stage decode 150 bash -c st_decode
            stage hf 150 env PYTHONUNBUFFERED=1 python3 bench/hf_generate.py --shape "$SHAPE" --batches "$LEVELS" \
                --input-len "$IN" --output-len "$OUT_LEN" --timeout-s 100 --json "$W/hf_generate.json"
        else
            stage decode 60 "$PKG/bin/brisk" bench --model "$W/stories260K.gguf" --device cpu -p 16 -n 8 --reps 1
        fi
    fi
    python3 bench/gpu_report.py "$W" "$OUTDIR/summary.json" \
        --commit "${GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}" --device "$DEVICE" \
        --quick "$QUICK" > "$W/report.txt" 2>&1
    local rrc=$?
    cat "$W/report.txt" | tee -a "$W/gpu.log"
    cp "$W/gpu.log" "$OUTDIR/gpu.log"
    tar czf "$OUTDIR/results.tar.gz" -C "$W" --exclude gpu.log --exclude stories260K.gguf . 2>/dev/null
    say "run: $(($(date +%s) - T0))s; $OUTDIR: $(ls "$OUTDIR" | tr '\n' ' ')"
    rm -rf "$W"
    return $rrc
}

case "${1:-}" in
    package) shift; package "$@" ;;
    run) shift; run "$@" ;;
    -h|--help|"") sed -n '2,40p' "$0" ;;
    *) say "unknown command '$1' (package | run; see --help)"; exit 2 ;;
esac
