#!/usr/bin/env bash
# kern_table.sh - the kernel table's row for this machine against each SIMD
# level's own kernels (issue 41: the default must be within 0.95x of the
# fastest forced level for every weight type).
#
# Runs `kern_bench THREADS levels ROUNDS TYPES`: every weight type the table
# distinguishes (each X8 form, f16, bf16, f32) at 1, 2, 4, 8, 16 and 64
# tokens on three shapes, each level's own kernels from DRAM (avx2 up to the
# CPU's level, amx included where the CPU has it; the float types at avx2
# and avx512, the levels above run the same float kernels), interleaved
# round by round, best of ROUNDS; the table's default pick for the detected
# kind of CPU (BRISK_CPU_UARCH=<kind> measures another row) and the fastest
# level's time / the default's, flagged below 0.95. Prints kern_bench's
# lines, then the worst fraction per (type, tokens), and writes
#   bench/results/<YYYY-MM-DD>-<machine>-kern-table.json
# (machine, CPU model and SIMD flags, vendor/family/model, kind, level,
# commit, date, load average before and after, every measurement).
# <machine> is $BRISK_MACHINE or the host name.
#
# Environment (defaults): KERN_BENCH (build/bin/kern_bench), THREADS (2),
# ROUNDS (6; halved from 16 tokens on), TYPES (all; or a comma list of type
# names: q8_0x8,f16), BRISK_MACHINE (hostname), OUT (the path above).
# A full run takes minutes: run it on a quiet machine and keep the load
# average it records in mind.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${KERN_BENCH:-build/bin/kern_bench}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-6}
TYPES=${TYPES:-all}
MACHINE=${BRISK_MACHINE:-$(hostname)}
DATE=$(date +%Y-%m-%d)
OUT=${OUT:-bench/results/$DATE-$MACHINE-kern-table.json}

if [ ! -x "$BIN" ]; then
    echo "kern_table: $BIN not found; run scripts/build.sh first" >&2
    exit 1
fi
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
echo "kern_table: $BIN $THREADS levels $ROUNDS $TYPES (load average $LOAD_BEFORE) ..." >&2
"$BIN" "$THREADS" levels "$ROUNDS" "$TYPES" | tee "$LOG"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)

mkdir -p "$(dirname "$OUT")"
python3 - "$LOG" "$OUT" "$MACHINE" "$THREADS" "$ROUNDS" "$TYPES" "$LOAD_BEFORE" "$LOAD_AFTER" <<'PYEOF'
import json
import sys

sys.path.insert(0, "bench")
import bench_meta  # noqa: E402

log, out, machine, threads, rounds, types, load_before, load_after = sys.argv[1:9]
meta, rows = {}, []
for line in open(log):
    if line.startswith("levels-meta "):
        meta = json.loads(line[len("levels-meta "):])
    elif line.startswith("levels-json "):
        rows.append(json.loads(line[len("levels-json "):]))
if not meta:
    sys.exit("kern_table: kern_bench printed no levels-meta line (no AVX2?)")

# The worst fraction per (type, tokens) over the shapes.
worst = {}
for r in rows:
    key = (r["type"], r["n_tok"])
    if key not in worst or r["ratio"] < worst[key]["ratio"]:
        worst[key] = r
summary = []
print(f"\nkind {meta['uarch']}, level {meta['level']}: per type and batch size, the fastest level,"
      " the default and fastest time / default time (worst shape)")
print(f"{'type':10} {'tokens':>6} {'fastest':>11} {'default':>11} {'ratio':>6}")
for (t, n), r in worst.items():
    low = r["ratio"] < 0.95
    print(f"{t:10} {n:6d} {r['fastest']:>11} {r['default']:>11} {r['ratio']:6.3f}"
          f"{'  < 0.95' if low else ''}")
    summary.append({"type": t, "n_tok": n, "fastest": r["fastest"], "default": r["default"],
                    "ratio": r["ratio"], "shape": [r["n_out"], r["n_in"]], "below_0_95": low})
n_low = sum(s["below_0_95"] for s in summary)
print(f"{n_low} of {len(summary)} (type, tokens) below 0.95")
cpu, flags = bench_meta.cpu_model_and_flags()
vendor = family = model = "unknown"
try:
    for line in open("/proc/cpuinfo"):
        k, _, v = line.partition(":")
        k, v = k.strip(), v.strip()
        if k == "vendor_id" and vendor == "unknown":
            vendor = v
        elif k == "cpu family" and family == "unknown":
            family = v
        elif k == "model" and model == "unknown":
            model = v
except OSError:
    pass
path = bench_meta.write_result("kern-table", {
    "machine": machine, "vendor": vendor, "cpu_family": family, "cpu_model_number": model,
    "uarch": meta["uarch"], "level": meta["level"], "kern_cpu": meta["cpu"],
    "threads": int(threads), "rounds": int(rounds), "types": types,
    "load_before": load_before, "load_after": load_after,
    "below_0_95": n_low, "summary": summary, "measurements": rows,
}, out)
print(f"wrote {path}")
PYEOF
