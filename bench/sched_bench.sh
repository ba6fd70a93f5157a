#!/usr/bin/env bash
# sched_bench.sh - continuous batching on the CPU, measured in one server run.
#
#   bench/sched_bench.sh            # SmolLM2 as the file holds it (--weights auto), concurrency 1, 16, 64
#   bench/sched_bench.sh --quick    # fewer requests (a smoke run)
#   IN=16 OUT=256 bench/sched_bench.sh   # a decode-heavy workload
#
# One `brisk serve` (--weights $WEIGHTS --max-num-seqs 64) is driven by brisk-bench
# closed loops at concurrency 1, 16 and 64 ($IN prompt / $OUT output tokens,
# default 128 / 128, ignore_eos). Around each level /metrics is scraped, and the table reports:
#   - generation tokens/s per level and the ratio to the single stream (same server)
#   - failures, TTFT / ITL P50 / P99 (vLLM definitions, from brisk-bench)
#   - KV waste over the level: 1 - d(brisk_kv_cache_slots_filled_total) /
#     d(brisk_kv_cache_slots_allocated_total) (positions in used blocks not
#     holding a token, averaged over engine steps)
#   - engine overhead: 1 - d(forward seconds) / d(busy seconds) of the engine
#     thread (scheduling, sampling, detokenizing, events), and the loop
#     thread's CPU (HTTP, JSON, SSE) relative to the engine's busy time
#   - preemptions and mean tokens per forward pass
# It prints the table and writes bench/results/<date>-<machine>-sched.json
# (machine, commit, date, every figure).
#
# Environment: BRISK_BIN, BENCH_BIN, MODEL, BRISK_MACHINE (hostname), SERVE_ARGS, IN, OUT,
# WEIGHTS (auto; int8, f16 or f32 convert), the CPU's flags and the kernels the server chose
# (its start-up log) go into the JSON beside the figures;
# LEVELS (the concurrency levels, default "1 16 64"; the first is the single-stream base).
set -euo pipefail
cd "$(dirname "$0")/.."

BRISK=${BRISK_BIN:-build/bin/brisk}
BENCH=${BENCH_BIN:-build/bin/brisk-bench}
MACHINE=${BRISK_MACHINE:-$(hostname)}
IN=${IN:-128}
WEIGHTS=${WEIGHTS:-auto}
LEVELS=${LEVELS:-1 16 64}
OUT_LEN=${OUT:-128}
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
for b in "$BRISK" "$BENCH"; do
    [ -x "$b" ] || { echo "sched_bench.sh: $b not found; run scripts/build.sh first" >&2; exit 1; }
done
M=${MODEL:-$(bash scripts/fetch-model.sh --print-path)}
OUT=bench/results/$(date +%Y-%m-%d)-$MACHINE-sched
[ "$IN/$OUT_LEN" != "128/128" ] && OUT=$OUT-$IN-$OUT_LEN
[ "$LEVELS" != "1 16 64" ] && OUT=$OUT-c${LEVELS// /-}
[ "$QUICK" = 1 ] && OUT=$OUT-quick
TMP=$(mktemp -d)
SERVER_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && kill -TERM "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

# shellcheck disable=SC2086
"$BRISK" serve --model "$M" --port 0 --weights "$WEIGHTS" --max-num-seqs 64 ${SERVE_ARGS:-} > "$TMP/serve.log" 2>&1 &
SERVER_PID=$!
URL=
for _ in $(seq 600); do
    URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$TMP/serve.log" | head -1)
    [ -n "$URL" ] && curl -sf "$URL/health" > /dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$TMP/serve.log" >&2; exit 1; }
    sleep 0.2
done
[ -n "$URL" ] || { echo "sched_bench.sh: server did not start" >&2; exit 1; }
echo "sched_bench.sh: brisk serve at $URL ($M, $WEIGHTS)" >&2
# Resident memory (kB) of the server: idle right after start, then after each level.
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status"; }
rss_kb > "$TMP/rss-idle.txt"

# Warm-up (not measured): calibrates nothing on the server, pages weights in.
"$BENCH" --base-url "$URL" --max-concurrency 4 --num-prompts 8 --input-len 128 --output-len 16 --quiet \
    > /dev/null

for C in $LEVELS; do
    if [ "$QUICK" = 1 ]; then N=$((C * 2)); else N=$((C * 4)); fi
    [ "$N" -lt 8 ] && N=8
    curl -sf "$URL/metrics" > "$TMP/before-$C.txt"
    PID_LOOP=$SERVER_PID
    T0=$(awk '{print $14 + $15}' "/proc/$PID_LOOP/task/$PID_LOOP/stat")
    "$BENCH" --base-url "$URL" --max-concurrency "$C" --num-prompts "$N" --input-len "$IN" --output-len "$OUT_LEN" \
        --warmup 2 --quiet --json "$TMP/bench-$C.json" > "$TMP/bench-$C.txt"
    T1=$(awk '{print $14 + $15}' "/proc/$PID_LOOP/task/$PID_LOOP/stat")
    echo "$(( T1 - T0 ))" > "$TMP/loop-ticks-$C.txt"
    curl -sf "$URL/metrics" > "$TMP/after-$C.txt"
    rss_kb > "$TMP/rss-$C.txt"
    echo "sched_bench.sh: concurrency $C done" >&2
done

COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
mkdir -p bench/results
python3 - "$TMP" "$OUT.json" "$MACHINE" "$COMMIT" "$M" "$(getconf CLK_TCK)" "$IN" "$OUT_LEN" "$LEVELS" "$WEIGHTS" <<'EOF'
import json, re, sys, datetime, platform, os
tmp, out, machine, commit, model, hz = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
n_in, n_out = int(sys.argv[7]), int(sys.argv[8])
levels = [int(c) for c in sys.argv[9].split()]
weights = sys.argv[10]
kernels = None
for line in open(f"{tmp}/serve.log", errors="replace"):
    m = re.search(r"engine: (cpu\(.*)", line)
    if m:
        kernels = m.group(1).strip()

def scrape(path):
    vals = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)', line)
        name, labels, v = m.group(1), m.group(2) or "", float(m.group(3))
        st = re.search(r'state="(\w+)"', labels)
        key = name + (":" + st.group(1) if st else "")
        vals[key] = vals.get(key, 0) + v
    return vals

cpu = open("/proc/cpuinfo").read()
cpu_model = re.search(r"model name\s*:\s*(.*)", cpu)
rows = []
for c in levels:
    b = json.load(open(f"{tmp}/bench-{c}.json"))["runs"][0]
    m0, m1 = scrape(f"{tmp}/before-{c}.txt"), scrape(f"{tmp}/after-{c}.txt")
    d = lambda k: m1.get(k, 0) - m0.get(k, 0)
    busy, fwd = d("brisk_engine_busy_seconds_total"), d("brisk_engine_forward_seconds_total")
    alloc, filled = d("brisk_kv_cache_slots_allocated_total"), d("brisk_kv_cache_slots_filled_total")
    loop_s = int(open(f"{tmp}/loop-ticks-{c}.txt").read()) / hz
    steps = d("brisk_engine_steps_total")
    rows.append({
        "concurrency": c, "requests": b["completed"], "failed": b["failed"],
        "duration_s": b["duration_s"], "output_tok_s": b["output_throughput"],
        "ttft_ms": {k: b["ttft_ms"][k] for k in ("p50", "p99")},
        "itl_ms": {k: b["itl_ms"][k] for k in ("p50", "p95", "p99")},
        "tpot_ms_mean": b["tpot_ms"]["mean"],
        "server_generation_tokens": d("vllm:generation_tokens_total"),
        "bench_output_tokens": b["total_output_tokens"],
        "kv_waste": 1 - filled / alloc if alloc else None,
        "engine_busy_s": busy, "engine_forward_s": fwd,
        "engine_overhead": 1 - fwd / busy if busy else None,
        "loop_thread_cpu_s": loop_s,
        "loop_cpu_vs_engine_busy": loop_s / busy if busy else None,
        "preemptions": d("vllm:num_preemptions_total"),
        "tokens_per_step": d("brisk_engine_batch_tokens_total") / steps if steps else None,
        "rss_mb_after": int(open(f"{tmp}/rss-{c}.txt").read()) / 1024,
    })
single = rows[0]["output_tok_s"]
for r in rows:
    r["speedup_vs_single"] = r["output_tok_s"] / single
print()
print(f"brisk continuous batching: SmolLM2-135M {weights}, {n_in} in / {n_out} out, {machine}, commit {commit}")
hdr = ("conc", "reqs", "fail", "gen tok/s", "x single", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99",
       "KV waste", "eng ovh", "loop/eng", "preempt", "tok/step")
print("{:>4} {:>5} {:>4} {:>9} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8} {:>7} {:>8} {:>7} {:>8}".format(*hdr))
for r in rows:
    print("{:>4} {:>5} {:>4} {:>9.1f} {:>8.2f} {:>8.0f} {:>8.0f} {:>7.1f} {:>7.1f} {:>7.2f}% {:>6.2f}% {:>7.1f}% {:>7.0f} {:>8.1f}".format(
        r["concurrency"], r["requests"], r["failed"], r["output_tok_s"], r["speedup_vs_single"],
        r["ttft_ms"]["p50"], r["ttft_ms"]["p99"], r["itl_ms"]["p50"], r["itl_ms"]["p99"],
        100 * (r["kv_waste"] or 0), 100 * (r["engine_overhead"] or 0), 100 * (r["loop_cpu_vs_engine_busy"] or 0),
        r["preemptions"], r["tokens_per_step"] or 0))
print("(ms for latencies; KV waste and engine overhead over each level; loop/eng = loop-thread CPU / engine busy time)")
rss_idle = int(open(f"{tmp}/rss-idle.txt").read()) / 1024
print(f"server RSS: {rss_idle:.0f} MB idle after start; after each level: "
      + ", ".join(f"{r['concurrency']}: {r['rss_mb_after']:.0f} MB" for r in rows))
doc = {"bench": "sched_bench", "machine": {"name": machine, "cpu": cpu_model.group(1) if cpu_model else "",
       "cores": os.cpu_count(), "os": platform.platform()}, "commit": commit,
       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "cpu_flags": [f for f in re.search(r"^flags\s*:(.*)$", cpu, re.M).group(1).split()
                     if f.startswith(("avx", "fma", "f16c", "amx"))],
       "kernels": kernels, "rss_mb_idle": rss_idle,
       "model": os.path.basename(model), "weights": weights, "workload": f"{n_in} in / {n_out} out, ignore_eos, closed loop",
       "levels": rows}
json.dump(doc, open(out, "w"), indent=2)
print(f"wrote {out}")
EOF
