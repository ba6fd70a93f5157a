#!/usr/bin/env bash
# client_overhead.sh - how many streamed tokens per second one brisk-bench
# thread keeps up with, against a local fake OpenAI server that streams as
# fast as the socket takes it (build/tests/bench_fake_server: one SSE event
# per write, one event per token).
#
# For each connection count it runs brisk-bench at that concurrency, prints a
# Markdown table and writes every row, with the machine and commit, to
#   bench/results/<YYYY-MM-DD>-<machine>-client-overhead.json
# The claim checked: >= 50,000 streamed tokens/s over 256 connections. The
# fake server runs on its own core (taskset, when there are two), so the
# figure is the pair's; "client us/token" is brisk-bench's own CPU time per
# token, and 1e6 / that is what one client core could take on its own.
#
# Environment (defaults): BENCH_BIN (build/bin/brisk-bench),
# FAKE_BIN (build/tests/bench_fake_server), CONNS ("1 64 256 1024"),
# TOKENS (256 per request), SECONDS_PER_ROW (3), BRISK_MACHINE (hostname).
set -euo pipefail
cd "$(dirname "$0")/.."

BENCH=${BENCH_BIN:-build/bin/brisk-bench}
FAKE=${FAKE_BIN:-build/tests/bench_fake_server}
CONNS=${CONNS:-"1 64 256 1024"}
TOKENS=${TOKENS:-256}
SECS=${SECONDS_PER_ROW:-3}
MACHINE=${BRISK_MACHINE:-$(hostname)}
DATE=$(date +%Y-%m-%d)
OUT=bench/results/$DATE-$MACHINE-client-overhead.json

for b in "$BENCH" "$FAKE"; do
    if [ ! -x "$b" ]; then
        echo "client_overhead: $b not found; run scripts/build.sh first" >&2
        exit 1
    fi
done

# Two cores or more: the server on the last one, the client on the first.
PIN_SERVER=() PIN_CLIENT=()
NCPU=$(nproc)
if command -v taskset >/dev/null 2>&1 && [ "$NCPU" -ge 2 ]; then
    PIN_SERVER=(taskset -c $((NCPU - 1)))
    PIN_CLIENT=(taskset -c 0)
fi

TMP=$(mktemp -d)
FAKE_PID=
cleanup() {
    [ -n "$FAKE_PID" ] && kill "$FAKE_PID" 2>/dev/null && wait "$FAKE_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

"${PIN_SERVER[@]}" "$FAKE" --port 0 > "$TMP/fake.out" 2> "$TMP/fake.err" &
FAKE_PID=$!
for _ in $(seq 100); do
    grep -q listening "$TMP/fake.out" 2>/dev/null && break
    sleep 0.05
done
URL=$(sed -n 's/^listening on //p' "$TMP/fake.out")
if [ -z "$URL" ]; then
    echo "client_overhead: the fake server did not start" >&2
    exit 1
fi

for c in $CONNS; do
    echo "client_overhead: $c connections, $TOKENS tokens a request, ${SECS}s ..." >&2
    # A short warm-up opens the connections; the measured level reuses them.
    "${PIN_CLIENT[@]}" "$BENCH" --base-url "$URL" --model fake --input-len 16 \
        --output-len "$TOKENS" --max-concurrency "$c" --num-prompts 0 --duration "$SECS" \
        --warmup "$c" --quiet --json "$TMP/row-$c.json" > /dev/null
done

mkdir -p bench/results
# shellcheck disable=SC2086  # CONNS is a list of numbers on purpose
python3 - "$TMP" "$OUT" "$MACHINE" "$DATE" "$TOKENS" $CONNS <<'PYEOF'
import json, os, sys

sys.path.insert(0, "bench")
import bench_meta  # noqa: E402

tmp, out_path, machine, date, tokens = sys.argv[1:6]
conns = [int(c) for c in sys.argv[6:]]
rows = []
for c in conns:
    rep = json.load(open(os.path.join(tmp, f"row-{c}.json")))
    run = rep["runs"][0]
    tok = run["total_output_tokens"]
    cpu = run["client_cpu_s"]
    rows.append({
        "connections": c,
        "requests": run["completed"],
        "failed": run["failed"],
        "tokens": tok,
        "duration_s": round(run["duration_s"], 3),
        "streamed_tok_s": round(run["output_throughput"], 1),
        "client_cpu_frac": round(cpu / run["duration_s"], 3) if run["duration_s"] else None,
        "client_us_per_token": round(cpu / tok * 1e6, 3) if tok else None,
        "itl_p99_ms": run["itl_ms"]["p99"],
    })
    cpu_model = rep["machine"]["cpu"]
    cores = rep["machine"]["cores"]
    commit = rep["commit"]
commit = bench_meta.git_commit(commit)
result = {
    "benchmark": "brisk-bench client overhead against bench_fake_server",
    "machine": {"name": machine, "cpu": cpu_model, "cores": cores},
    "commit": commit,
    "date": date,
    "tokens_per_request": int(tokens),
    "claim": {"connections": 256, "min_streamed_tok_s": 50000},
    "rows": rows,
}
by = {r["connections"]: r for r in rows}
if 256 in by:
    result["claim"]["measured_streamed_tok_s"] = by[256]["streamed_tok_s"]
    result["claim"]["met"] = by[256]["streamed_tok_s"] >= 50000 and by[256]["failed"] == 0
with open(out_path, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")

print(f"brisk-bench client overhead, {cpu_model}, {cores} cores, commit {commit[:12]}\n")
print("| connections | requests | failed | streamed tok/s | client CPU | client us/token "
      "| one-core capacity tok/s | ITL p99 ms |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    us = r["client_us_per_token"]
    cap = f"{1e6 / us:,.0f}" if us else "-"
    frac = f"{100 * r['client_cpu_frac']:.0f}%" if r["client_cpu_frac"] is not None else "-"
    print(f"| {r['connections']} | {r['requests']} | {r['failed']} | "
          f"{r['streamed_tok_s']:,.0f} | {frac} | {us if us else '-'} | {cap} | "
          f"{r['itl_p99_ms']:.2f} |")
if "met" in result["claim"]:
    verdict = "met" if result["claim"]["met"] else "NOT met"
    print(f"\n>= 50,000 streamed tok/s over 256 connections: {verdict} "
          f"({result['claim']['measured_streamed_tok_s']:,.0f} tok/s)")
print(f"\nwritten: {out_path}")
PYEOF
