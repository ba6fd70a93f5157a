#!/usr/bin/env bash
# peer_serve.sh - brisk serve against llama.cpp's llama-server on the same GGUF
# file and workload, one server after the other, driven by brisk-bench closed
# loops at each concurrency level: output tokens/s per level, the ratio to the
# same server's single stream, and brisk's ratio to llama-server.
#
# llama.cpp is not part of brisk: build llama-server yourself, outside this
# repository, and point LLAMA_SERVER at it. Without it only brisk runs.
#
#   LLAMA_SERVER=/path/to/llama-server bench/peer_serve.sh
#   IN=16 OUT=256 LLAMA_SERVER=... bench/peer_serve.sh
#
# llama-server runs with -np $NP (16) parallel slots of IN + OUT + 64 positions
# each and continuous batching (its default); brisk serve with its defaults and
# --max-num-seqs $NP. Both get $THREADS threads (default: every CPU) and the
# same requests (brisk-bench --seed, ignore_eos, $IN prompt / $OUT output
# tokens, 4 x concurrency requests per level after 2 warm-up requests).
#
# Environment (defaults): BRISK_BIN, BENCH_BIN, MODEL (the default SmolLM2),
# LLAMA_SERVER, LEVELS ("1 16"), IN (128), OUT (128), NP (16), THREADS (nproc),
# BRISK_MACHINE (hostname). Writes
# bench/results/<date>-<machine>-peer-serve-<IN>-<OUT>.json and prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."

BRISK=${BRISK_BIN:-build/bin/brisk}
BENCH=${BENCH_BIN:-build/bin/brisk-bench}
MACHINE=${BRISK_MACHINE:-$(hostname)}
LEVELS=${LEVELS:-1 16}
IN=${IN:-128}
OUT_LEN=${OUT:-128}
NP=${NP:-16}
THREADS=${THREADS:-$(nproc)}
LLAMA=${LLAMA_SERVER:-}
M=${MODEL:-$(bash scripts/fetch-model.sh --print-path)}
OUT=bench/results/$(date +%Y-%m-%d)-$MACHINE-peer-serve-$IN-$OUT_LEN.json
for b in "$BRISK" "$BENCH"; do
    [ -x "$b" ] || { echo "peer_serve.sh: $b not found; run scripts/build.sh first" >&2; exit 1; }
done
if [ -n "$LLAMA" ] && [ ! -x "$LLAMA" ]; then
    echo "peer_serve.sh: LLAMA_SERVER=$LLAMA is not executable" >&2
    exit 1
fi
TMP=$(mktemp -d)
SERVER_PID=
stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=
    fi
}
trap 'stop_server; rm -rf "$TMP"' EXIT

# wait_url URL: until /health answers 200 (or the server died).
wait_url() {
    for _ in $(seq 1200); do
        curl -sf "$1/health" > /dev/null 2>&1 && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# run_levels NAME URL: brisk-bench at each level into $TMP/NAME-C.json; the
# server's resident memory idle and after the levels into $TMP/NAME-rss.txt.
run_levels() {
    local name=$1 url=$2
    local idle
    idle=$(awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status")
    "$BENCH" --base-url "$url" --max-concurrency 4 --num-prompts 8 --input-len "$IN" --output-len 16 --quiet \
        > /dev/null
    for C in $LEVELS; do
        local n=$((C * 4))
        [ "$n" -lt 8 ] && n=8
        "$BENCH" --base-url "$url" --max-concurrency "$C" --num-prompts "$n" --input-len "$IN" \
            --output-len "$OUT_LEN" --warmup 2 --seed 1 --quiet --json "$TMP/$name-$C.json" > /dev/null
        echo "peer_serve.sh: $name concurrency $C done" >&2
    done
    echo "$idle $(awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status")" > "$TMP/$name-rss.txt"
}

LLAMA_VERSION=
if [ -n "$LLAMA" ]; then
    LLAMA_VERSION=$("$LLAMA" --version 2>&1 | grep -m1 -i "version" || true)
    PORT=$((20000 + RANDOM % 20000))
    "$LLAMA" -m "$M" --port "$PORT" -np "$NP" -c $((NP * (IN + OUT_LEN + 64))) -t "$THREADS" \
        > "$TMP/llama.log" 2>&1 &
    SERVER_PID=$!
    wait_url "http://127.0.0.1:$PORT" || { tail -20 "$TMP/llama.log" >&2; exit 1; }
    echo "peer_serve.sh: llama-server at port $PORT (-np $NP, -t $THREADS)" >&2
    run_levels llama "http://127.0.0.1:$PORT"
    stop_server
fi

"$BRISK" serve --model "$M" --port 0 --threads "$THREADS" --max-num-seqs "$NP" > "$TMP/brisk.log" 2>&1 &
SERVER_PID=$!
URL=
for _ in $(seq 600); do
    URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$TMP/brisk.log" | head -1)
    [ -n "$URL" ] && break
    sleep 0.1
done
wait_url "$URL" || { tail -20 "$TMP/brisk.log" >&2; exit 1; }
echo "peer_serve.sh: brisk serve at $URL" >&2
run_levels brisk "$URL"
stop_server

COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
mkdir -p bench/results
python3 - "$TMP" "$OUT" "$MACHINE" "$COMMIT" "$M" "$IN" "$OUT_LEN" "$LEVELS" "$NP" "$THREADS" \
    "$LLAMA_VERSION" <<'EOF'
import datetime, json, os, re, sys

tmp, out, machine, commit, model, n_in, n_out, levels, np_, threads, llama_version = sys.argv[1:12]
levels = [int(c) for c in levels.split()]
cpu = open("/proc/cpuinfo").read()
cpu_model = re.search(r"model name\s*:\s*(.*)", cpu)
flags = [f for f in re.search(r"^flags\s*:(.*)$", cpu, re.M).group(1).split()
         if f.startswith(("avx", "fma", "f16c", "amx"))]
kernels = None
for line in open(f"{tmp}/brisk.log", errors="replace"):
    m = re.search(r"engine: (cpu\(.*)", line)
    if m:
        kernels = m.group(1).strip()
sides = {}
for name in ("llama", "brisk"):
    if not os.path.exists(f"{tmp}/{name}-rss.txt"):
        continue
    idle, after = (int(v) / 1024 for v in open(f"{tmp}/{name}-rss.txt").read().split())
    rows = []
    for c in levels:
        b = json.load(open(f"{tmp}/{name}-{c}.json"))["runs"][0]
        rows.append({"concurrency": c, "requests": b["completed"], "failed": b["failed"],
                     "output_tok_s": b["output_throughput"],
                     "ttft_ms_p50": b["ttft_ms"]["p50"], "itl_ms_p50": b["itl_ms"]["p50"]})
    for r in rows:
        r["x_single"] = r["output_tok_s"] / rows[0]["output_tok_s"] if rows[0]["output_tok_s"] else None
    sides[name] = {"rss_mb_idle": idle, "rss_mb_after": after, "levels": rows}

print(f"\n{cpu_model.group(1) if cpu_model else ''}, {threads} threads, {os.path.basename(model)}, "
      f"{n_in} in / {n_out} out, brisk {commit}, llama.cpp: {llama_version or 'not run'}")
print("| concurrency | llama-server tok/s (x single) | brisk tok/s (x single) | brisk / llama-server |")
print("|---:|---:|---:|---:|")
for i, c in enumerate(levels):
    lr = sides.get("llama", {}).get("levels", [None] * len(levels))[i]
    br = sides["brisk"]["levels"][i]
    ls = f"{lr['output_tok_s']:.1f} ({lr['x_single']:.2f}x)" if lr else "-"
    ratio = f"{br['output_tok_s'] / lr['output_tok_s']:.2f}x" if lr and lr["output_tok_s"] else "-"
    print(f"| {c} | {ls} | {br['output_tok_s']:.1f} ({br['x_single']:.2f}x) | {ratio} |")
for name, side in sides.items():
    print(f"{name}: RSS {side['rss_mb_idle']:.0f} MB idle after start, {side['rss_mb_after']:.0f} MB after the levels")
doc = {"bench": "peer_serve", "machine": {"name": machine, "cpu": cpu_model.group(1) if cpu_model else "",
       "cores": os.cpu_count(), "cpu_flags": flags}, "commit": commit, "llama_cpp": llama_version,
       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "model": os.path.basename(model), "workload": f"{n_in} in / {n_out} out, ignore_eos, closed loop",
       "slots": int(np_), "threads": int(threads), "brisk_kernels": kernels, "servers": sides}
json.dump(doc, open(out, "w"), indent=2)
print(f"wrote {out}")
EOF
