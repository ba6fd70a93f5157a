#!/usr/bin/env bash
# fuzz.sh TARGET|all SECONDS [JOBS] [--merge] - runs brisk's libFuzzer targets.
#
#   scripts/fuzz.sh fuzz_http 600          # one target for ten minutes
#   scripts/fuzz.sh all 1800 2             # every target for 30 minutes, two at a time
#   scripts/fuzz.sh gguf 300 1 --merge     # then minimise new inputs into the tree's corpus
#
# TARGET is a name from tests/fuzz/ (fuzz_http, fuzz_json_completions,
# fuzz_json_chat, fuzz_gguf, fuzz_tokenizer, fuzz_chat_template, fuzz_sse, fuzz_audit,
# fuzz_cli_opts, fuzz_grammar, fuzz_schema; the
# fuzz_ prefix may be left out) or `all`. JOBS is how many libFuzzer processes
# run at once (default 1): with `all`, that many targets side by side; with one
# target, libFuzzer's -fork=JOBS.
#
# Builds build-fuzz/ first when needed (clang, -DBRISK_FUZZ=ON: ASan + UBSan +
# libFuzzer). Each target fuzzes a working corpus outside the tree,
# .fuzz-work/<target>/corpus (git-ignored, kept between runs), seeded from
# tests/fuzz/corpus/<target> (read, never written) with the dictionary
# tests/fuzz/dict/<target>.dict; crash, leak, timeout and out-of-memory inputs
# land in .fuzz-work/<target>/artifacts/. For each target it prints and writes
# bench/results/fuzz/<date>-<target>.json: executions, exec/s, coverage
# (libFuzzer's cov = edges, ft = features), corpus size and the inputs that
# failed. The exit code is 1 when any target failed.
#
# --merge: afterwards, `-merge=1` adds the inputs of the working corpus that
# bring new coverage to tests/fuzz/corpus/<target> (minimised, named by their
# SHA-1), so that CI replays them from then on. Review before committing.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

ALL_TARGETS=(fuzz_http fuzz_json_completions fuzz_json_chat fuzz_gguf fuzz_tokenizer
             fuzz_chat_template fuzz_sse fuzz_audit fuzz_cli_opts fuzz_grammar fuzz_schema
             fuzz_anthropic fuzz_safetensors fuzz_hfjson)

usage() {
    echo "usage: $0 TARGET|all SECONDS [JOBS] [--merge]   (targets: ${ALL_TARGETS[*]})" >&2
    exit 2
}

MERGE=0
ARGS=()
for a in "$@"; do
    if [ "$a" = "--merge" ]; then MERGE=1; else ARGS+=("$a"); fi
done
[ ${#ARGS[@]} -ge 2 ] || usage
WHICH=${ARGS[0]}
SECONDS_EACH=${ARGS[1]}
JOBS=${ARGS[2]:-1}
if ! [[ "$SECONDS_EACH" =~ ^[1-9][0-9]*$ && "$JOBS" =~ ^[1-9][0-9]*$ ]]; then usage; fi

if [ "$WHICH" = "all" ]; then
    TARGETS=("${ALL_TARGETS[@]}")
else
    t=fuzz_${WHICH#fuzz_}
    if [ ! -d "tests/fuzz/corpus/$t" ]; then usage; fi
    TARGETS=("$t")
fi

# Largest input per target: big enough for every seed and the structures the
# target parses, small enough that one input stays around a millisecond.
max_len() {
    case $1 in
    fuzz_gguf) echo 65536 ;;
    fuzz_http) echo 24576 ;; # past the 16 KiB read buffer, for pipelined floods
    fuzz_json_* | fuzz_chat_template | fuzz_anthropic) echo 4096 ;;
    fuzz_sse) echo 2048 ;;
    fuzz_safetensors | fuzz_hfjson) echo 16384 ;; # the seeds: headers and tokenizer.json up to 8 KB
    *) echo 1024 ;;
    esac
}

# Plain files in a directory, by name (corpus files never hold odd characters).
list_files() {
    find "$1" -maxdepth 1 -type f -printf '%f\n' | sort
}

count_files() {
    list_files "$1" | wc -l
}

dict_for() {
    local d=tests/fuzz/dict/$1.dict
    [ -f "$d" ] || d=tests/fuzz/dict/${1%_*}.dict # fuzz_json_chat -> fuzz_json
    echo "$d"
}

# A target without its dictionary or seeds fuzzes blind (libFuzzer exits at once
# on a missing -dict file and reports nothing): refuse before building.
for t in "${TARGETS[@]}"; do
    if [ ! -f "$(dict_for "$t")" ]; then
        echo "fuzz.sh: $t has no dictionary (tests/fuzz/dict/$t.dict)" >&2
        exit 1
    fi
    if [ "$(count_files "tests/fuzz/corpus/$t")" -eq 0 ]; then
        echo "fuzz.sh: $t has an empty seed corpus (tests/fuzz/corpus/$t/)" >&2
        exit 1
    fi
done

# ---- build ----------------------------------------------------------------------
BUILD=build-fuzz
if ! command -v clang >/dev/null; then
    echo "fuzz.sh: clang is needed (Debian: apt-get install clang)" >&2
    exit 1
fi
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DBRISK_FUZZ=ON -DBRISK_CUDA=OFF || exit 1
fi
cmake --build "$BUILD" -j"$(nproc)" --target "${TARGETS[@]}" || exit 1

# ---- run ------------------------------------------------------------------------
DATE=$(date +%Y-%m-%d)
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && COMMIT="$COMMIT-dirty"
MACHINE="$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')"
OUT_DIR=bench/results/fuzz
mkdir -p "$OUT_DIR"

run_one() {
    local t=$1 work=.fuzz-work/$1
    mkdir -p "$work/corpus" "$work/artifacts"
    local before t0
    before=$(list_files "$work/artifacts")
    t0=$(date +%s)
    local fork=()
    [ ${#TARGETS[@]} -eq 1 ] && [ "$JOBS" -gt 1 ] && fork=(-fork="$JOBS" -ignore_crashes=1)
    # -timeout: one input taking 10 s is a hang; leaks are checked per input.
    "$BUILD/bin/$t" "$work/corpus" "tests/fuzz/corpus/$t" \
        -dict="$(dict_for "$t")" -max_len="$(max_len "$t")" -max_total_time="$SECONDS_EACH" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/" "${fork[@]}" >"$work/fuzz.log" 2>&1
    local rc=$?
    local new
    new=$(comm -13 <(echo "$before") <(list_files "$work/artifacts") | sed '/^$/d')
    # The last status line: "#N <event> cov: C ft: F corp: K/S ... exec/s: E"
    # (fork mode: "#N: cov: C ft: F corp: K exec/s: E ...").
    local last execs cov ft corp eps elapsed
    elapsed=$(($(date +%s) - t0))
    last=$(grep -E '^#[0-9]+:?[[:space:]]' "$work/fuzz.log" | grep ' cov: ' | tail -n 1)
    execs=$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$last")
    cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
    ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
    corp=$(count_files "$work/corpus")
    # -print_final_stats gives the exact totals (not in fork mode).
    local st
    st=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$work/fuzz.log" | tail -n 1)
    [ -n "$st" ] && execs=$st
    eps=$(( ${execs:-0} / (elapsed > 0 ? elapsed : 1) ))
    local crashes_json="[]"
    if [ -n "$new" ]; then
        crashes_json=$(while read -r a; do echo "$work/artifacts/$a"; done <<<"$new" |
            python3 -c 'import json,sys; print(json.dumps([l.strip() for l in sys.stdin if l.strip()]))')
    fi
    local f="$OUT_DIR/$DATE-$t.json" i=2
    while [ -e "$f" ]; do f="$OUT_DIR/$DATE-$t-$i.json"; i=$((i + 1)); done
    cat >"$f" <<JSON
{
  "target": "$t",
  "date": "$DATE",
  "commit": "$COMMIT",
  "machine": "$MACHINE",
  "seconds": $SECONDS_EACH,
  "elapsed_s": $elapsed,
  "jobs": $JOBS,
  "executions": ${execs:-0},
  "exec_per_s": $eps,
  "cov_edges": ${cov:-0},
  "features": ${ft:-0},
  "working_corpus_files": $corp,
  "seed_corpus_files": $(count_files "tests/fuzz/corpus/$t"),
  "max_len": $(max_len "$t"),
  "libfuzzer_exit": $rc,
  "failures": $crashes_json
}
JSON
    printf '%-24s %12s execs %8s/s  cov %6s  ft %7s  corpus %6s  failures %s  -> %s\n' \
        "$t" "${execs:-0}" "$eps" "${cov:-0}" "${ft:-0}" "$corp" \
        "$( [ -n "$new" ] && tr '\n' ' ' <<<"$new" || echo none)" "$f"
    if [ "${execs:-0}" -eq 0 ]; then
        echo "fuzz.sh: $t ran no executions: see $work/fuzz.log" >&2
        return 1
    fi
    [ -z "$new" ] && [ "$rc" -eq 0 ]
}

echo "fuzz.sh: ${TARGETS[*]}: $SECONDS_EACH s each, $JOBS at a time (logs: .fuzz-work/<target>/fuzz.log)"
FAIL=0
running=0
pids=()
for t in "${TARGETS[@]}"; do
    if [ ${#TARGETS[@]} -gt 1 ] && [ "$JOBS" -gt 1 ]; then
        run_one "$t" &
        pids+=($!)
        running=$((running + 1))
        if [ "$running" -ge "$JOBS" ]; then
            wait "${pids[0]}" || FAIL=1
            pids=("${pids[@]:1}")
            running=$((running - 1))
        fi
    else
        run_one "$t" || FAIL=1
    fi
done
for p in "${pids[@]}"; do wait "$p" || FAIL=1; done

if [ "$MERGE" = 1 ]; then
    for t in "${TARGETS[@]}"; do
        n0=$(count_files "tests/fuzz/corpus/$t")
        "$BUILD/bin/$t" -merge=1 -max_len="$(max_len "$t")" "tests/fuzz/corpus/$t" \
            ".fuzz-work/$t/corpus" >".fuzz-work/$t/merge.log" 2>&1 || FAIL=1
        echo "fuzz.sh: merge $t: $n0 -> $(count_files "tests/fuzz/corpus/$t") files in tests/fuzz/corpus/$t"
    done
fi
[ "$FAIL" = 0 ] || echo "fuzz.sh: failures: see .fuzz-work/<target>/artifacts and fuzz.log" >&2
exit "$FAIL"
