#!/usr/bin/env bash
# peer_bench.sh - brisk against llama.cpp's llama-bench on the same GGUF files,
# side by side in one run: prompt (pp) and generation (tg) tokens per second
# per file and thread count, with the decode roofline brisk measures.
#
# llama.cpp is not part of brisk: build it yourself, outside this repository
# (any CPU build of its llama-bench), and point LLAMA_BENCH at the binary.
# Without LLAMA_BENCH only brisk's columns are filled.
#
#   LLAMA_BENCH=/path/to/llama-bench MODELS="a.gguf b.gguf" bench/peer_bench.sh
#
# Every measurement runs alone, one after the other (llama.cpp first, then
# brisk at each level in LEVELS), for each file and thread count, so that
# the ratios compare runs minutes apart at most. Both sides report their best
# repetition (llama-bench's fastest sample, brisk bench's best of --reps).
#
# Environment (defaults): BRISK_BIN (build/bin/brisk), MODELS (the default
# SmolLM2 file), THREADS ("1 2"), PP (512), TG (128), REPS (5), LEVELS
# ("default": brisk's own kernel choice; add e.g. "avx2" to force
# BRISK_CPU_LEVEL=avx2 in an extra column), BRISK_MACHINE (hostname).
# Writes bench/results/<date>-<machine>-peer-bench.json (the CPU, its flags,
# brisk's commit, llama.cpp's build, every row) and prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."

BRISK=${BRISK_BIN:-build/bin/brisk}
THREADS=${THREADS:-"1 2"}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-5}
LEVELS=${LEVELS:-default}
MODELS=${MODELS:-$(bash scripts/fetch-model.sh --print-path)}
MACHINE=${BRISK_MACHINE:-$(hostname)}
DATE=$(date +%Y-%m-%d)
OUT=${OUT:-bench/results/$DATE-$MACHINE-peer-bench.json}
LLAMA=${LLAMA_BENCH:-}

if [ ! -x "$BRISK" ]; then
    echo "peer_bench: $BRISK not found; run scripts/build.sh first" >&2
    exit 1
fi
if [ -n "$LLAMA" ] && [ ! -x "$LLAMA" ]; then
    echo "peer_bench: LLAMA_BENCH=$LLAMA is not executable" >&2
    exit 1
fi

ROWS=$(mktemp)
trap 'rm -f "$ROWS"' EXIT
for m in $MODELS; do
    for t in $THREADS; do
        if [ -n "$LLAMA" ]; then
            echo "peer_bench: llama-bench $(basename "$m") -t $t ..." >&2
            j=$("$LLAMA" -m "$m" -t "$t" -p "$PP" -n "$TG" -r "$REPS" -o json 2>/dev/null | tr -d '\n')
            printf '{"side": "llama.cpp", "model_path": "%s", "threads": %s, "result": %s}\n' "$m" "$t" "$j" >> "$ROWS"
        fi
        for lv in $LEVELS; do
            echo "peer_bench: brisk bench $(basename "$m") -t $t level $lv ..." >&2
            if [ "$lv" = default ]; then
                j=$("$BRISK" bench --model "$m" --threads "$t" -p "$PP" -n "$TG" --reps "$REPS" 2>/dev/null | tr -d '\n')
            else
                j=$(BRISK_CPU_LEVEL=$lv "$BRISK" bench --model "$m" --threads "$t" -p "$PP" -n "$TG" --reps "$REPS" 2>/dev/null | tr -d '\n')
            fi
            printf '{"side": "brisk", "level": "%s", "model_path": "%s", "threads": %s, "result": %s}\n' \
                "$lv" "$m" "$t" "$j" >> "$ROWS"
        done
    done
done

mkdir -p "$(dirname "$OUT")"
python3 - "$ROWS" "$OUT" "$MACHINE" "$DATE" "$PP" "$TG" <<'PYEOF'
import json, os, sys

sys.path.insert(0, "bench")
import bench_meta  # noqa: E402

rows_path, out_path, machine, date, pp, tg = sys.argv[1:7]
rows = [json.loads(line) for line in open(rows_path) if line.strip()]

cpu, flags = bench_meta.cpu_model_and_flags()
commit = bench_meta.git_commit("unknown")


def llama_best(res, n_prompt, n_gen):
    for r in res:
        if r.get("n_prompt") == n_prompt and r.get("n_gen") == n_gen:
            return max(r.get("samples_ts") or [r.get("avg_ts", 0.0)])
    return None


table = {}
llama_build = None
for r in rows:
    key = (os.path.basename(r["model_path"]), r["threads"])
    ent = table.setdefault(key, {"brisk": {}})
    if r["side"] == "llama.cpp":
        res = r["result"]
        if res:
            llama_build = f'b{res[0].get("build_number")} {res[0].get("build_commit")}'
        ent["llama"] = (llama_best(res, int(pp), 0), llama_best(res, 0, int(tg)))
    else:
        ent["brisk"][r["level"]] = r["result"]

result = {"machine": {"name": machine, "cpu": cpu, "cores": os.cpu_count(), "cpu_flags": flags},
          "commit": commit, "date": date, "pp": int(pp), "tg": int(tg), "llama_cpp_build": llama_build,
          "rows": rows}
with open(out_path, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")

print(f"{cpu} ({' '.join(flags)}), brisk {commit[:12]}, llama.cpp {llama_build}\n")
print(f"| file | threads | llama.cpp pp{pp} / tg{tg} | brisk level | brisk pp / tg | pp ratio | tg ratio "
      f"| tg roofline | tg % of roofline | kernels |")
print("|---|---:|---:|---|---:|---:|---:|---:|---:|---|")
fmt = lambda v: f"{v:.1f}" if v else "-"
for (name, threads), ent in table.items():
    lp, lt = ent.get("llama", (None, None))
    for lv, b in ent["brisk"].items():
        bp, bt, roof = b.get("pp_tok_s"), b.get("tg_tok_s"), b.get("tg_roofline_tok_s")
        rp = f"{bp / lp:.2f}x" if lp and bp else "-"
        rt = f"{bt / lt:.2f}x" if lt and bt else "-"
        pct = f"{100 * bt / roof:.0f}%" if roof and bt else "-"
        print(f"| {name} | {threads} | {fmt(lp)} / {fmt(lt)} | {lv} | {fmt(bp)} / {fmt(bt)} | {rp} | {rt} "
              f"| {fmt(roof)} | {pct} | {b.get('kernels', '')} |")
print(f"\nwrote {out_path}")
PYEOF
