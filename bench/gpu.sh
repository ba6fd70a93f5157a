#!/usr/bin/env bash
# gpu.sh - the CUDA backend's correctness runs and benchmarks on a GPU
# machine, in stages (each one fits a 10-minute command), recorded with the
# GPU, the commit and the date under $RESULTS (bench/results/<date>-<gpu>-cuda/).
#
#   bench/gpu.sh build      # Release build for this GPU's architecture (ARCH, default: detected)
#   bench/gpu.sh test       # test_cuda_ops, compute-sanitizer memcheck + racecheck on it,
#                           # test_cuda_model (stories260K golden, SmolLM2 vs CPU), test_backend
#   bench/gpu.sh perf       # op perf (bandwidth, matmul peak) + brisk bench decode/prefill on
#                           # llama-3-8b dummy weights, f16 and int8, graphs on and off
#   bench/gpu.sh serve      # brisk serve (llama-3-8b f16 dummy) + brisk-bench at 1,16,64,256
#   bench/gpu.sh hf         # Hugging Face transformers generate, same shape and batches
#   bench/gpu.sh report     # the table of everything above, and summary.json
#   bench/gpu.sh all        # every stage in order
#
# Environment: ARCH (sm number, e.g. 90), SHAPE (llama-3-8b), LEVELS
# (1,16,64,256), IN/OUT (128/128), BRISK_SHARED_DIR (../shared: stories260K),
# BRISK_MODEL (SmolLM2 GGUF for test_cuda_model), RESULTS (the output folder).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD_DIR:-build-gpu}
SHAPE=${SHAPE:-llama-3-8b}
LEVELS=${LEVELS:-1,16,64,256}
IN=${IN:-128}
OUT_LEN=${OUT:-128}
if command -v nvidia-smi >/dev/null 2>&1; then
    GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-' | tr -cd 'A-Za-z0-9_.-')
    CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
else
    GPU=nogpu CAP=
fi
ARCH=${ARCH:-${CAP:-90}}
RESULTS=${RESULTS:-bench/results/$(date +%Y-%m-%d)-$GPU-cuda}
mkdir -p "$RESULTS"
BRISK=$BUILD/bin/brisk
say() { echo "gpu.sh: $*" >&2; }

stage_build() {
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBRISK_CUDA_ARCHITECTURES="$ARCH" >/dev/null
    cmake --build "$BUILD" -j"$(nproc)" 2>&1 | tail -3
    "$BRISK" --version | tee "$RESULTS/version.txt"
}

stage_test() {
    local rc=0
    "$BUILD/tests/test_cuda_ops" 2>&1 | tee "$RESULTS/test_cuda_ops.txt" || rc=1
    if command -v compute-sanitizer >/dev/null 2>&1; then
        for tool in memcheck racecheck; do
            compute-sanitizer --tool "$tool" --error-exitcode 7 "$BUILD/tests/test_cuda_ops" \
                > "$RESULTS/sanitizer_$tool.txt" 2>&1 || rc=1
            tail -3 "$RESULTS/sanitizer_$tool.txt"
        done
    else
        say "compute-sanitizer not found: memcheck/racecheck not run" | tee "$RESULTS/sanitizer_missing.txt"
        rc=1
    fi
    BRISK_SHARED_DIR=${BRISK_SHARED_DIR:-../shared} "$BUILD/tests/test_cuda_model" 2>&1 \
        | tee "$RESULTS/test_cuda_model.txt" || rc=1
    BRISK_SHARED_DIR=${BRISK_SHARED_DIR:-../shared} "$BUILD/tests/test_backend" 2>&1 \
        | tee "$RESULTS/test_backend.txt" || rc=1
    return $rc
}

stage_perf() {
    "$BUILD/tests/test_cuda_ops" perf 2>&1 | tee "$RESULTS/ops_perf.txt"
    : > "$RESULTS/model_bench.jsonl"
    for w in f16 int8; do
        for g in "" --no-cuda-graphs; do
            [ "$w" = int8 ] && [ -n "$g" ] && continue
            say "brisk bench $SHAPE --weights $w $g"
            "$BRISK" bench --dummy-weights "$SHAPE" --device cuda --weights "$w" $g -p 512 -n 128 \
                --reps 3 | tee -a "$RESULTS/model_bench.jsonl"
        done
    done
}

stage_serve() {
    local log="$RESULTS/serve.log"
    "$BRISK" serve --dummy-weights "$SHAPE" --device cuda --weights f16 --port 0 \
        --max-num-seqs 256 --max-num-batched-tokens 8192 --ctx 1024 > "$log" 2>&1 &
    local pid=$! url=
    trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' RETURN
    for _ in $(seq 3000); do
        url=$(sed -n 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "$log" | head -1)
        [ -n "$url" ] && break
        kill -0 $pid 2>/dev/null || { tail -20 "$log"; return 1; }
        sleep 0.1
    done
    for _ in $(seq 3000); do
        curl -sf "$url/health" >/dev/null 2>&1 && break
        kill -0 $pid 2>/dev/null || { tail -20 "$log"; return 1; }
        sleep 0.2
    done
    "$BUILD/bin/brisk-bench" --base-url "$url" --input-len "$IN" --output-len "$OUT_LEN" \
        --num-prompts 512 --warmup 8 --sweep-concurrency "$LEVELS" --label "brisk $SHAPE f16" \
        --json "$RESULTS/serve_sweep.json" | tee "$RESULTS/serve_sweep.txt"
    curl -sf "$url/metrics" > "$RESULTS/metrics.txt" || true
}

stage_hf() {
    PYTHONUNBUFFERED=1 python3 bench/hf_generate.py --shape "$SHAPE" --batches "$LEVELS" \
        --input-len "$IN" --output-len "$OUT_LEN" --json "$RESULTS/hf_generate.json" \
        || say "transformers baseline not run (see above)"
}

stage_report() {
    python3 - "$RESULTS" "$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" <<'PYEOF'
import datetime, json, os, re, sys
d, commit = sys.argv[1:3]
def load(name):
    p = os.path.join(d, name)
    return json.load(open(p)) if os.path.exists(p) else None
out = {"date": datetime.date.today().isoformat(), "commit": commit,
       "version": open(os.path.join(d, "version.txt")).read().strip()
       if os.path.exists(os.path.join(d, "version.txt")) else None}
rows = []
p = os.path.join(d, "model_bench.jsonl")
if os.path.exists(p):
    out["model_bench"] = [json.loads(l) for l in open(p) if l.startswith("{")]
    for b in out["model_bench"]:
        rows.append(f"decode {b['weights']:>4} {b.get('device','')[:40]:40} tg {b['tg_tok_s']:8.1f} tok/s "
                    f"= {100*b['tg_frac_roofline']:5.1f}% of {b['tg_roofline_tok_s']:.0f} (copy bw {b['read_bw_gb_s']:.0f} GB/s); "
                    f"pp{b['pp']} {b['pp_tok_s']:9.1f} tok/s {b.get('pp_tflop_s',0):.1f} TFLOP/s")
    f16 = [b for b in out["model_bench"] if b["weights"] == "f16"]
    i8 = [b for b in out["model_bench"] if b["weights"] == "int8"]
    if f16 and i8:
        out["int8_over_f16_decode"] = round(i8[0]["tg_tok_s"] / f16[0]["tg_tok_s"], 3)
        rows.append(f"int8 / f16 decode: {out['int8_over_f16_decode']:.2f}x")
p = os.path.join(d, "ops_perf.txt")
if os.path.exists(p):
    m = re.search(r"matmul peak: ([0-9.]+) TFLOP/s", open(p).read())
    if m:
        out["matmul_peak_tflop_s"] = float(m.group(1))
        rows.append(f"matmul peak (cuBLAS f16): {m.group(1)} TFLOP/s")
s = load("serve_sweep.json")
if s:
    out["serve"] = s
    out["serve_levels"] = []
    for r in s.get("runs", []):
        q = lambda k, p: (r.get(k) or {}).get(p)
        lv = {"concurrency": r["level"], "completed": r["completed"], "failed": r["failed"],
              "output_tok_s": round(r["output_throughput"], 1)}
        for k in ("ttft_ms", "itl_ms"):
            for p in ("p50", "p95", "p99"):
                lv[f"{k[:-3]}_{p}_ms"] = None if q(k, p) is None else round(q(k, p), 2)
        out["serve_levels"].append(lv)
        rows.append(f"serve c={lv['concurrency']:>3}: {lv['output_tok_s']:9.1f} output tok/s, failed {lv['failed']}, "
                    f"TTFT p50/p95/p99 {lv['ttft_p50_ms']}/{lv['ttft_p95_ms']}/{lv['ttft_p99_ms']} ms, "
                    f"ITL {lv['itl_p50_ms']}/{lv['itl_p95_ms']}/{lv['itl_p99_ms']} ms")
h = load("hf_generate.json")
if h:
    out["hf_generate"] = h
    for b in h["batches"]:
        rows.append(f"transformers generate batch {b['batch']}: {b.get('output_tok_s', b.get('error'))} tok/s")
json.dump(out, open(os.path.join(d, "summary.json"), "w"), indent=1)
print("\n".join(rows))
PYEOF
}

stage=${1:-all}
case "$stage" in
    build) stage_build ;;
    test) stage_test ;;
    perf) stage_perf ;;
    serve) stage_serve ;;
    hf) stage_hf ;;
    report) stage_report ;;
    all) stage_build; stage_test || say "tests failed (see $RESULTS)"; stage_perf; stage_serve; stage_hf; stage_report ;;
    -h|--help) sed -n '2,20p' "$0" ;;
    *) say "unknown stage '$stage' (see --help)"; exit 2 ;;
esac
