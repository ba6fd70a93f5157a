#!/usr/bin/env bash
# model_bench.sh - prompt and generation speed of SmolLM2-135M per weight format.
#
# Runs `brisk bench` for each weight format, prints a Markdown table and writes
# every row, with the machine and commit, to
#   bench/results/<YYYY-MM-DD>-<machine>-model-bench.json
# where <machine> is $BRISK_MACHINE or the host name.
#
# DUMMY=stories110m (any --dummy-weights CONFIG) measures that shape with random
# weights instead of SmolLM2; the file name then ends in -model-bench-<CONFIG>.json.
#
# Environment (defaults): BRISK_BIN (build/bin/brisk), THREADS (2),
# WEIGHTS ("auto int8 f16 f32"), PP (512), TG (128), REPS (brisk's default),
# BRISK_MACHINE (hostname).
set -euo pipefail
cd "$(dirname "$0")/.."

BRISK=${BRISK_BIN:-build/bin/brisk}
THREADS=${THREADS:-2}
WEIGHTS=${WEIGHTS:-"auto int8 f16 f32"}
PP=${PP:-512}
TG=${TG:-128}
MACHINE=${BRISK_MACHINE:-$(hostname)}
DATE=$(date +%Y-%m-%d)
OUT=bench/results/$DATE-$MACHINE-model-bench.json
DUMMY=${DUMMY:-}
[ -n "$DUMMY" ] && OUT=bench/results/$DATE-$MACHINE-model-bench-$DUMMY.json

if [ ! -x "$BRISK" ]; then
    echo "model_bench: $BRISK not found; run scripts/build.sh first" >&2
    exit 1
fi
if [ -n "$DUMMY" ]; then
    SRC=(--dummy-weights "$DUMMY")
    TITLE="dummy $DUMMY (random weights)"
else
    SRC=(--model "$(bash scripts/fetch-model.sh --print-path)")
    TITLE="SmolLM2-135M-Instruct"
fi

ROWS=$(mktemp)
trap 'rm -f "$ROWS"' EXIT
for w in $WEIGHTS; do
    echo "model_bench: $w, $THREADS threads, pp$PP tg$TG ..." >&2
    args=(bench "${SRC[@]}" --weights "$w" --threads "$THREADS" -p "$PP" -n "$TG")
    [ -n "${REPS:-}" ] && args+=(--reps "$REPS")
    "$BRISK" "${args[@]}" | tr -d '\n' >> "$ROWS"
    echo >> "$ROWS"
done

mkdir -p bench/results
python3 - "$ROWS" "$OUT" "$MACHINE" "$DATE" "$THREADS" "$TITLE" <<'PYEOF'
import json, os, sys

sys.path.insert(0, "bench")
import bench_meta  # noqa: E402

rows_path, out_path, machine, date, threads, title = sys.argv[1:7]
rows = [json.loads(line) for line in open(rows_path) if line.strip()]

cpu, flags = bench_meta.cpu_model_and_flags()
commit = bench_meta.git_commit("unknown")

result = {
    "machine": {"name": machine, "cpu": cpu, "cores": os.cpu_count(), "cpu_flags": flags,
                "cpu_features": rows[0].get("cpu") if rows else None},
    "commit": commit,
    "date": date,
    "threads": int(threads),
    "rows": rows,
}
with open(out_path, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")

print(f"{title}, {cpu}, {threads} threads, commit {commit[:12]}\n")
pp = rows[0].get("pp", 512) if rows else 512
tg = rows[0].get("tg", 128) if rows else 128
print(f"| format | pp{pp} tok/s | tg{tg} tok/s | weight MB/token | read bandwidth GB/s "
      f"| roofline tok/s | tg % of roofline |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    roof = r["tg_roofline_tok_s"]
    pct = 100.0 * r["tg_tok_s"] / roof if roof else float("nan")
    print(f"| {r['weights']} | {r['pp_tok_s']:.1f} | {r['tg_tok_s']:.1f} "
          f"| {r['weight_bytes'] / 1e6:.1f} | {r['read_bw_gb_s']:.1f} | {roof:.1f} | {pct:.0f}% |")
for r in rows:
    if r.get("kernels"):
        print(f"\nkernels ({r['weights']}): {r['kernels']}")
print(f"\nwrote {out_path}")
PYEOF
