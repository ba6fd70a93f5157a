#!/usr/bin/env bash
# serve.sh - the standard serving benchmark: brisk-bench against brisk serve
# (or any OpenAI-compatible server), a fixed matrix, JSON + PNG charts + a
# Markdown summary under bench/results/<date>-<machine>[-<label>]/.
#
#   bench/serve.sh                      # starts brisk on the default model, runs the matrix
#   bench/serve.sh --quick              # a smoke run: a few requests per level, short outputs
#   bench/serve.sh --url http://10.0.0.5:8000 --label vllm    # another server, same matrix
#   bench/serve.sh -- --max-num-seqs 16 # arguments after -- go to `brisk serve`
#
# The matrix: concurrency 1, 4, 16, 64 (a sweep) with 128 prompt / 128 output
# tokens, then a shared-prefix run (a 512-token system prompt common to every
# request, 128 own tokens, concurrency 16). The sweep reports the highest
# concurrency meeting the SLO: 95% of requests within $SLO.
#
# Environment (defaults): BRISK_BIN (build/bin/brisk), BENCH_BIN
# (build/bin/brisk-bench), MODEL (scripts/fetch-model.sh --print-path),
# LEVELS ("1,4,16,64"), SLO ("ttft:2000,tpot:200"), BRISK_MACHINE (hostname),
# BENCH_ARGS (extra brisk-bench arguments, e.g. "--endpoint chat").
set -euo pipefail
cd "$(dirname "$0")/.."

BRISK=${BRISK_BIN:-build/bin/brisk}
BENCH=${BENCH_BIN:-build/bin/brisk-bench}
LEVELS=${LEVELS:-"1,4,16,64"}
SLO=${SLO:-"ttft:2000,tpot:200"}
MACHINE=${BRISK_MACHINE:-$(hostname)}
QUICK=0
URL=
LABEL=
SERVE_ARGS=()

while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --url) URL=$2; shift ;;
        --label) LABEL=$2; shift ;;
        --) shift; SERVE_ARGS=("$@"); break ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "serve.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

if [ ! -x "$BENCH" ]; then
    echo "serve.sh: $BENCH not found; run scripts/build.sh first" >&2
    exit 1
fi
[ -z "$LABEL" ] && LABEL=$([ -n "$URL" ] && echo external || echo brisk)

# Requests per level: enough for P95 to mean something, short with --quick.
if [ "$QUICK" = 1 ]; then
    IN=128 OUT=16 PER_LEVEL_MIN=4 PER_LEVEL_MULT=1 WARMUP=2 PREFIX_N=8
else
    IN=128 OUT=128 PER_LEVEL_MIN=16 PER_LEVEL_MULT=2 WARMUP=4 PREFIX_N=64
fi

DIR=bench/results/$(date +%Y-%m-%d)-$MACHINE-$LABEL
[ "$QUICK" = 1 ] && DIR=$DIR-quick
mkdir -p "$DIR"

SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT

if [ -z "$URL" ]; then
    if [ ! -x "$BRISK" ]; then
        echo "serve.sh: $BRISK not found; run scripts/build.sh first" >&2
        exit 1
    fi
    M=${MODEL:-$(bash scripts/fetch-model.sh --print-path)}
    echo "serve.sh: starting brisk serve on $M" >&2
    "$BRISK" serve --model "$M" --port 0 "${SERVE_ARGS[@]}" > "$DIR/serve.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 600); do
        URL=$(sed -n 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "$DIR/serve.log" | head -1)
        [ -n "$URL" ] && break
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "serve.sh: brisk serve exited:" >&2
            tail -20 "$DIR/serve.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    [ -z "$URL" ] && { echo "serve.sh: brisk serve did not start" >&2; exit 1; }
    # Wait until the model is loaded (/health answers 200).
    for _ in $(seq 600); do
        code=$(python3 -c "import sys,urllib.request
try: print(urllib.request.urlopen(sys.argv[1] + '/health', timeout=2).status)
except Exception as e: print(getattr(e, 'code', 0))" "$URL")
        [ "$code" = 200 ] && break
        sleep 0.1
    done
fi
echo "serve.sh: benchmarking $URL ($LABEL) into $DIR" >&2

# Requests per level: max(PER_LEVEL_MIN, PER_LEVEL_MULT x concurrency) for the largest
# level, so every level sends the same count and the sweep compares like with like.
MAXLEVEL=$(echo "$LEVELS" | tr ',' '\n' | sort -n | tail -1)
N=$((PER_LEVEL_MULT * MAXLEVEL))
[ "$N" -lt "$PER_LEVEL_MIN" ] && N=$PER_LEVEL_MIN

PLOT_SWEEP=() PLOT_PREFIX=()
if command -v gnuplot >/dev/null 2>&1; then
    PLOT_SWEEP=(--plot "$DIR/sweep")
    PLOT_PREFIX=(--plot "$DIR/shared_prefix")
else
    echo "serve.sh: gnuplot not found (scripts/install-deps.sh installs it): no charts" >&2
fi

# shellcheck disable=SC2086  # BENCH_ARGS is a list of words on purpose
"$BENCH" --base-url "$URL" --input-len "$IN" --output-len "$OUT" --num-prompts "$N" \
    --warmup "$WARMUP" --sweep-concurrency "$LEVELS" --slo "$SLO" --label "$LABEL" \
    --json "$DIR/sweep.json" "${PLOT_SWEEP[@]}" ${BENCH_ARGS:-} | tee "$DIR/sweep.txt"

# shellcheck disable=SC2086
"$BENCH" --base-url "$URL" --input-len "$IN" --output-len "$OUT" --num-prompts "$PREFIX_N" \
    --shared-prefix-len 512 --max-concurrency 16 --warmup "$WARMUP" --slo "$SLO" \
    --label "$LABEL shared prefix" --json "$DIR/shared_prefix.json" \
    "${PLOT_PREFIX[@]}" ${BENCH_ARGS:-} | tee "$DIR/shared_prefix.txt"

python3 - "$DIR" "$URL" "$LABEL" "$SLO" "$MACHINE" <<'PYEOF'
import json, os, sys

d, url, label, slo, machine = sys.argv[1:6]
sweep = json.load(open(os.path.join(d, "sweep.json")))
pref = json.load(open(os.path.join(d, "shared_prefix.json")))
p = sweep["params"]
m = sweep["machine"]


def fmt(x, nd=1):
    return "-" if x is None else f"{x:,.{nd}f}"


def errors(run):
    e = run["errors"]
    parts = [f"HTTP {k}: {v}" for k, v in e["by_status"].items()]
    parts += [f"{k}: {v}" for k, v in e["by_kind"].items() if v and k != "http"]
    return ", ".join(parts) or "0"


def row(name, run):
    return (f"| {name} | {run['completed']} | {fmt(run['request_throughput'], 2)} | "
            f"{fmt(run['output_throughput'])} | {fmt(run['ttft_ms']['p50'])} | "
            f"{fmt(run['ttft_ms']['p95'])} | {fmt(run['tpot_ms']['p50'], 2)} | "
            f"{fmt(run['tpot_ms']['p95'], 2)} | {fmt(run['itl_ms']['p95'], 2)} | "
            f"{fmt(run['e2e_ms']['p95'])} | {100 * run['slo_attainment']:.0f}% | "
            f"{errors(run)} |")


lines = [
    f"# Serving benchmark: {label}",
    "",
    f"- server: {url}, model `{p['model']}`",
    f"- machine: {machine} (host {m['hostname']}), {m['cpu']}, {m['cores']} cores; commit "
    f"{sweep['commit']}; {sweep['date']}",
    f"- workload: random prompts, {p['input_len']} in / {p['output_len']} out tokens "
    f"(ignore_eos), {p['num_prompts']} requests per level, {p['warmup']} warm-up",
    f"- SLO: {slo} for {100 * p['slo']['attainment']:.0f}% of requests",
    "",
    "| load | ok | req/s | out tok/s | TTFT p50 ms | TTFT p95 ms | TPOT p50 ms | "
    "TPOT p95 ms | ITL p95 ms | E2E p95 ms | SLO met | errors |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
]
for run in sweep["runs"]:
    lines.append(row(f"concurrency {run['level']:g}", run))
lines.append(row(f"shared prefix {pref['params']['shared_prefix_len']}, c=16", pref["runs"][0]))
best = sweep["sweep"]["best_level"]
lines += ["",
          f"Highest concurrency meeting the SLO: **{best:g}**" if best is not None
          else "No concurrency level met the SLO.",
          "",
          "Charts: sweep/sweep_throughput.png, sweep/sweep_p95.png, sweep/ttft_cdf.png, "
          "sweep/itl_cdf.png, sweep/e2e_cdf.png, shared_prefix/*.png. "
          "Raw figures: sweep.json, shared_prefix.json.", ""]
text = "\n".join(lines)
open(os.path.join(d, "summary.md"), "w").write(text)
print(text)
PYEOF
echo "serve.sh: results in $DIR" >&2
