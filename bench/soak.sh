#!/usr/bin/env bash
# soak.sh - brisk under a long steady load with client aborts and invalid
# requests, judged on what must not drift: errors, restarts, memory, file
# descriptors, KV blocks, latency.
#
#   bench/soak.sh                   # one hour on SmolLM2 int8 (the lead's recorded run)
#   bench/soak.sh --smoke           # SMOKE=1: 120 s with 30 s windows, to check the script
#   MODEL=/tmp/stories260K.gguf bench/soak.sh --smoke
#
# 1. Starts `brisk serve` (MODEL, default SmolLM2 from scripts/fetch-model.sh;
#    --weights $WEIGHTS, default int8; SERVE_ARGS) and takes an idle sample.
# 2. Capacity: a closed loop of CAP_CONCURRENCY (32, brisk's default
#    --max-num-seqs) requests of IN prompt / OUT output tokens for CAPACITY_S
#    seconds. Capacity is its completed requests per second: the saturated
#    request rate, not a rate meeting an SLO. RATE=R skips the measurement.
# 3. The soak: brisk-bench at RATE_FRACTION (0.6) of capacity, Poisson
#    arrivals, for DURATION seconds, with --abort-rate ABORT_RATE (0.05)
#    --invalid-rate INVALID_RATE (0.01) --interval INTERVAL --json-requests,
#    in three phases back to back: A = the first WINDOW with --seed SEED,
#    B = DURATION - 2 x WINDOW with --seed SEED+1, C = the last WINDOW with
#    --seed SEED again, so that the first and last windows get the same
#    requests at the same times (DURATION < 3 x WINDOW: one run).
#    Every SAMPLE_EVERY seconds bench/soak.py samples the server: alive and
#    the same process, VmRSS, open fds, and /metrics (KV usage, used blocks,
#    running, waiting, HTTP responses by status).
# 4. After it: waits (up to 60 s) for the server to be idle, stops it with
#    SIGTERM, judges every criterion (bench/README.md), prints the table and
#    writes bench/results/<date>-<machine>-soak[-smoke][-<model>].json.
#    Exit 0 when every criterion passes, 1 when one fails, 2 on bad settings.
#
# Environment (default; --smoke default):
#   DURATION (3600; 120)  WINDOW (300; 30): first/last windows compared, RSS
#   growth counted after the first   INTERVAL (60; 10)   SAMPLE_EVERY (10; 5)
#   CAPACITY_S (60; 20)   CAP_CONCURRENCY (32)   RATE_FRACTION (0.6)   RATE
#   IN (128)  OUT (128)   ABORT_RATE (0.05)   INVALID_RATE (0.01)   SEED (1)
#   RSS_LIMIT_MIB (16)    P99_TOLERANCE (0.10)   MODEL   WEIGHTS (int8)
#   SERVE_ARGS   BRISK_BIN   BENCH_BIN   BRISK_MACHINE (hostname)
#   OUT_DIR (bench/results)   WORK_DIR (a new /tmp/brisk-soak.XXXXXX: the
#   server log, brisk-bench's reports and the raw samples; kept)
set -euo pipefail
cd "$(dirname "$0")/.."

SMOKE=${SMOKE:-0}
case "${1:-}" in
    --smoke) SMOKE=1 ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    "") ;;
    *) echo "soak.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac
if [ "$SMOKE" = 1 ]; then
    DURATION=${DURATION:-120} WINDOW=${WINDOW:-30} INTERVAL=${INTERVAL:-10}
    SAMPLE_EVERY=${SAMPLE_EVERY:-5} CAPACITY_S=${CAPACITY_S:-20}
else
    DURATION=${DURATION:-3600} WINDOW=${WINDOW:-300} INTERVAL=${INTERVAL:-60}
    SAMPLE_EVERY=${SAMPLE_EVERY:-10} CAPACITY_S=${CAPACITY_S:-60}
fi
CAP_CONCURRENCY=${CAP_CONCURRENCY:-32}
RATE_FRACTION=${RATE_FRACTION:-0.6}
IN=${IN:-128}
OUT=${OUT:-128}
ABORT_RATE=${ABORT_RATE:-0.05}
INVALID_RATE=${INVALID_RATE:-0.01}
SEED=${SEED:-1}
RSS_LIMIT_MIB=${RSS_LIMIT_MIB:-16}
P99_TOLERANCE=${P99_TOLERANCE:-0.10}
WEIGHTS=${WEIGHTS:-int8}
BRISK=${BRISK_BIN:-build/bin/brisk}
BENCH=${BENCH_BIN:-build/bin/brisk-bench}
MACHINE=${BRISK_MACHINE:-$(hostname)}
OUT_DIR=${OUT_DIR:-bench/results}
PY=${PYTHON:-python3}

for b in "$BRISK" "$BENCH"; do
    [ -x "$b" ] || { echo "soak.sh: $b not found; run scripts/build.sh first" >&2; exit 2; }
done
if ! "$PY" -c "import sys; d, w = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (w > 0 and d >= 2 * w))" \
    "$DURATION" "$WINDOW"; then
    echo "soak.sh: DURATION ($DURATION) must be at least twice WINDOW ($WINDOW)" >&2
    exit 2
fi
if [ -n "${MODEL:-}" ]; then
    M=$MODEL
    TAG=-$(basename "$M" | sed 's/\.gguf$//; s/[^A-Za-z0-9._-]/_/g')
else
    M=$(bash scripts/fetch-model.sh --print-path)
    TAG=
fi
[ -f "$M" ] || { echo "soak.sh: model $M not found" >&2; exit 2; }
SUFFIX=
SMOKE_FLAG=()
if [ "$SMOKE" = 1 ]; then
    SUFFIX=-smoke
    SMOKE_FLAG=(--smoke)
fi
RESULT=$OUT_DIR/$(date +%Y-%m-%d)-$MACHINE-soak$SUFFIX$TAG.json
WORK=${WORK_DIR:-$(mktemp -d /tmp/brisk-soak.XXXXXX)}
mkdir -p "$WORK"
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || COMMIT=$COMMIT-dirty
log() { echo "soak.sh: $*" >&2; }

SERVER_PID=
SAMPLER_PID=
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    if [ -n "$SAMPLER_PID" ]; then
        kill "$SAMPLER_PID" 2>/dev/null || true
    fi
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT

# ---- 1. the server -------------------------------------------------------------------
# shellcheck disable=SC2086  # SERVE_ARGS is a list of words on purpose
"$BRISK" serve --model "$M" --host 127.0.0.1 --port 0 --weights "$WEIGHTS" ${SERVE_ARGS:-} \
    > "$WORK/serve.log" 2>&1 &
SERVER_PID=$!
URL=
for _ in $(seq 3000); do
    URL=$(sed -n 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "$WORK/serve.log" | head -1)
    [ -n "$URL" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -20 "$WORK/serve.log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$URL" ] || { log "brisk serve did not start"; exit 1; }
"$PY" bench/soak.py wait-ready --url "$URL" --pid "$SERVER_PID"
log "brisk serve (pid $SERVER_PID) at $URL: $M, --weights $WEIGHTS ${SERVE_ARGS:-}; work dir $WORK"
IDLE_FDS=$("$PY" bench/soak.py idle-fds --pid "$SERVER_PID")
"$PY" bench/soak.py snapshot --url "$URL" --pid "$SERVER_PID" > "$WORK/idle.json"
# the idle fd count is the least of a few reads (our own scrape may be open)
"$PY" - "$WORK/idle.json" "$IDLE_FDS" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
s["fds"] = int(sys.argv[2])
json.dump(s, open(sys.argv[1], "w"))
EOF

# ---- 2. capacity ---------------------------------------------------------------------
if [ -z "${RATE:-}" ]; then
    log "capacity: closed loop at concurrency $CAP_CONCURRENCY for ${CAPACITY_S} s ($IN in / $OUT out)"
    "$BENCH" --base-url "$URL" --max-concurrency "$CAP_CONCURRENCY" --duration "$CAPACITY_S" \
        --input-len "$IN" --output-len "$OUT" --warmup 4 --seed "$SEED" --quiet \
        --json "$WORK/capacity.json" > "$WORK/capacity.txt"
    CAPACITY=$("$PY" bench/soak.py capacity "$WORK/capacity.json")
    RATE=$("$PY" -c "import sys; print(f'{float(sys.argv[1]) * float(sys.argv[2]):.6g}')" \
        "$CAPACITY" "$RATE_FRACTION")
else
    CAPACITY=0 # not measured
fi
log "capacity $CAPACITY req/s (0: not measured); the soak runs at $RATE req/s for $DURATION s"

# ---- 3. the soak ---------------------------------------------------------------------
# The same --seed gives the same requests: brisk-bench takes nothing from the clock or
# its PID. Its arrival gaps come from a stream seeded by --seed alone (bench_run.c),
# and each request's prompt, output length, abort point and invalid variant from
# --seed and the request's index (bench_workload.c). The warm-up counts too: its
# requests take the first indices and calibrate words per token, which sets the
# prompts' word counts, so every phase runs the same --warmup 4. At the end of a
# phase brisk-bench waits for its requests in flight, and the next one starts with its
# warm-up: a lull of up to a request's latency plus a few seconds between phases.
if "$PY" -c "import sys; sys.exit(not float(sys.argv[1]) >= 3 * float(sys.argv[2]))" \
    "$DURATION" "$WINDOW"; then
    MID=$("$PY" -c "import sys; print(f'{float(sys.argv[1]) - 2 * float(sys.argv[2]):g}')" \
        "$DURATION" "$WINDOW")
    PHASES=("a $SEED $WINDOW" "b $((SEED + 1)) $MID" "c $SEED $WINDOW")
else
    PHASES=("a $SEED $DURATION")
fi
"$PY" bench/soak.py settle --url "$URL" --pid "$SERVER_PID" --idle-fds 1000000 --timeout 60 \
    > "$WORK/pre.json"
T0=$("$PY" -c 'import time; print(time.time())')
echo "$T0" > "$WORK/t0"
: > "$WORK/phases.jsonl"
"$PY" bench/soak.py sample --url "$URL" --pid "$SERVER_PID" --every "$SAMPLE_EVERY" \
    --t0 "$T0" --out "$WORK/samples.jsonl" &
SAMPLER_PID=$!
for PHASE in "${PHASES[@]}"; do
    read -r NAME PSEED PDUR <<< "$PHASE"
    log "phase ${NAME^^}: $PDUR s, --seed $PSEED"
    START=$(date +%s.%N)
    BENCH_RC=0
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of words on purpose
    "$BENCH" --base-url "$URL" --request-rate "$RATE" --duration "$PDUR" \
        --input-len "$IN" --output-len "$OUT" --abort-rate "$ABORT_RATE" \
        --invalid-rate "$INVALID_RATE" --interval "$INTERVAL" --seed "$PSEED" --warmup 4 \
        --json "$WORK/soak-$NAME.json" --json-requests ${BENCH_ARGS:-} \
        > "$WORK/soak-$NAME.txt" 2> >(tee "$WORK/soak-$NAME.err" >&2) || BENCH_RC=$?
    END=$(date +%s.%N)
    "$PY" -c 'import json, sys; n, s, d, a, b, rc = sys.argv[1:]; print(json.dumps({
        "name": n.upper(), "seed": int(s), "duration_s": float(d), "json": f"soak-{n}.json",
        "start_wall": float(a), "end_wall": float(b), "rc": int(rc)}))' \
        "$NAME" "$PSEED" "$PDUR" "$START" "$END" "$BENCH_RC" >> "$WORK/phases.jsonl"
    sed -n '/brisk-bench: serving benchmark result/,/^====*$/p' "$WORK/soak-$NAME.txt" >&2
    [ "$BENCH_RC" = 0 ] || log "brisk-bench exited $BENCH_RC in phase ${NAME^^}"
done
kill "$SAMPLER_PID" 2>/dev/null || true
wait "$SAMPLER_PID" 2>/dev/null || true
SAMPLER_PID=

# ---- 4. back to idle, stop, judge ----------------------------------------------------
log "waiting for the server to be idle"
"$PY" bench/soak.py settle --url "$URL" --pid "$SERVER_PID" --idle-fds "$IDLE_FDS" \
    --t0 "$T0" --timeout 60 > "$WORK/final.json"
# SIGTERM and its exit status; a server that died on its own gives its status here
kill -TERM "$SERVER_PID" 2>/dev/null || log "brisk serve had exited before the end"
EXIT=0
wait "$SERVER_PID" || EXIT=$?
echo "$EXIT" > "$WORK/exit_code"
SERVER_PID=
set +e
"$PY" bench/soak.py verdict --work "$WORK" --out "$RESULT" --model "$M" --weights "$WEIGHTS" \
    --serve-args "${SERVE_ARGS:-}" --machine "$MACHINE" --commit "$COMMIT" \
    --duration "$DURATION" --window "$WINDOW" --interval "$INTERVAL" \
    --sample-every "$SAMPLE_EVERY" --rate-fraction "$RATE_FRACTION" --capacity "$CAPACITY" \
    --rate "$RATE" --capacity-concurrency "$CAP_CONCURRENCY" --capacity-s "$CAPACITY_S" \
    --input-len "$IN" --output-len "$OUT" --abort-rate "$ABORT_RATE" \
    --invalid-rate "$INVALID_RATE" --seed "$SEED" --rss-limit-mib "$RSS_LIMIT_MIB" \
    --p99-tolerance "$P99_TOLERANCE" "${SMOKE_FLAG[@]}"
RC=$?
log "work files (server log, brisk-bench reports, samples): $WORK"
exit $RC
