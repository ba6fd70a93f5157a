#!/usr/bin/env bash
# test.sh - run every test brisk has, the way CI does.
#
#   1. install the Debian dependencies (fast when present) and fetch SmolLM2
#   2. Release build -> ctest -> pytest tests/integration (the `timing` tests
#      after the others, on one worker) -> pytest tests/deploy
#      (Dockerfiles, Kubernetes manifests, and the monitoring queries against a
#      real Prometheus scraping brisk; offline)
#   3. a serve session under Valgrind memcheck (scripts/valgrind-serve.sh, its
#      own Debug build); ASan+UBSan build (with allocation-failure injection
#      compiled in) -> ctest -> pytest -m "not slow" on the sanitized binary;
#      the AVX-512 kernel tests on emulated intrinsics under ASan+UBSan
#   4. TSan build -> ctest
#
# Every step runs even when an earlier one failed (except that nothing can be
# tested without a build), and a summary at the end lists them; the exit code
# is non-zero if any step failed. pytest's "no tests collected" (exit 5)
# counts as a failure.
#
# Environment:
#   BRISK_TEST_QUICK=1   skip Valgrind and the sanitizer pass (local iteration)
#   PYTEST_ARGS="..."    extra arguments for both pytest runs (e.g. "-k chat -x")
#   PYTHON=python3       interpreter used to create .venv-test
# shellcheck disable=SC2317  # functions run via step(), which shellcheck cannot follow
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
T_START=$(date +%s)

declare -a SUMMARY=()
N_PASS=0
N_FAIL=0

# step NAME CMD... : runs CMD, records PASS/FAIL with its duration.
step() {
    local name=$1
    shift
    local t0 rc
    t0=$(date +%s)
    echo
    echo "=== test.sh: $name"
    "$@"
    rc=$?
    local dt=$(($(date +%s) - t0))
    if [ $rc -eq 0 ]; then
        SUMMARY+=("PASS  $name (${dt}s)")
        N_PASS=$((N_PASS + 1))
    else
        SUMMARY+=("FAIL  $name (exit $rc, ${dt}s)")
        N_FAIL=$((N_FAIL + 1))
    fi
    return $rc
}

finish() {
    echo
    echo "=== test.sh summary ($(($(date +%s) - T_START))s)"
    local line
    for line in "${SUMMARY[@]}"; do
        echo "  $line"
    done
    echo "steps: $N_PASS passed, $N_FAIL failed"
    [ "$N_FAIL" -eq 0 ]
    exit $?
}

# ---- Python environment for the reference model and pytest ----------------
VENV=$ROOT/.venv-test
REQ=$ROOT/tests/requirements.txt
PY=${PYTHON:-python3}

setup_venv() {
    local want pyver
    pyver=$("$PY" -c 'import sys; print(sys.version.split()[0])')
    want="$(sha256sum "$REQ" | cut -d' ' -f1) $pyver"
    if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'pass' 2>/dev/null; then
        rm -rf "$VENV"
        "$PY" -m venv "$VENV" || return 1
    fi
    if [ "$(cat "$VENV/.requirements-stamp" 2>/dev/null)" = "$want" ]; then
        echo "venv up to date: $VENV"
        return 0
    fi
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQ" || return 1
    echo "$want" > "$VENV/.requirements-stamp"
}

# pytest-xdist workers: the servers under test wait on sockets and timers for a
# third of the time, so two workers on two cores take the suite from 166 s to
# 120 s (Zen 4 VM, 2026-11-29). A file's tests stay on one worker, in order
# (--dist loadfile): several share a server whose prefix cache they warm.
PYTEST_WORKERS=${PYTEST_WORKERS:-$(nproc)}

# run_pytest BIN [pytest args...]: exit 5 (nothing collected) is a failure.
run_pytest() {
    local bin=$1
    shift
    # shellcheck disable=SC2086
    BRISK_BIN="$ROOT/$bin" BRISK_REQUIRE_MODELS=1 \
        "$VENV/bin/python" -m pytest "$ROOT/tests/integration" -ra -n "$PYTEST_WORKERS" \
        --dist loadfile "$@" \
        ${PYTEST_ARGS:-}
    local rc=$?
    if [ "$rc" -eq 5 ]; then
        echo "test.sh: pytest collected no tests; that is a failure"
    fi
    return "$rc"
}

# run_pytest on one worker: the tests marked `timing` measure a speed ratio,
# which a second worker's load beside them would decide.
run_pytest_alone() {
    local PYTEST_WORKERS=1
    run_pytest "$@"
}

# The deployment files (tests/deploy): Dockerfiles, Kubernetes manifests and
# monitoring configs, checked offline against the Release binary. PYTEST_ARGS
# is not passed: a -k meant for the integration suite would deselect all here.
run_pytest_deploy() {
    BRISK_BIN="$ROOT/build/bin/brisk" BRISK_REQUIRE_MODELS=1 \
        "$VENV/bin/python" -m pytest "$ROOT/tests/deploy" -ra
    local rc=$?
    if [ "$rc" -eq 5 ]; then
        echo "test.sh: pytest collected no tests; that is a failure"
    fi
    return "$rc"
}

run_ctest() {
    local dir=$1
    shift
    (cd "$dir" && ctest --output-on-failure -j"$(nproc)" "$@")
}

# ---- the steps --------------------------------------------------------------
step "install dependencies" bash scripts/install-deps.sh || finish
step "fetch SmolLM2" bash scripts/fetch-model.sh
step "python venv" setup_venv
step "module layers (#include check)" bash scripts/check-layers.sh
step "C format (clang-format 14)" bash scripts/check-format.sh
# CUDA for the lowest and the highest architecture only (sm_75, sm_90): both
# sides of a two-way __CUDA_ARCH__ branch compile (today the one in
# kern_cuda_gemv.cu, >= 800), and sm_80 would add 40 s of nvcc for no new check.
# scripts/build.sh alone (README, Dockerfile) builds 75;80;90.
step "build Release" env BRISK_CUDA_ARCHS="75;90" bash scripts/build.sh Release || finish
step "ctest (Release)" run_ctest build
step "pytest (Release)" run_pytest build/bin/brisk -m "not exhaustive and not timing"
step "pytest (timing, one worker)" run_pytest_alone build/bin/brisk -m "timing and not exhaustive"
step "pytest (deploy)" run_pytest_deploy
# The GPU campaign (bench/gpu.sh), rehearsed on the CPU with the Release
# binaries so it cannot rot between GPU sessions: every stage runs, the CUDA
# tests report SKIP (test_cuda_model rehearses with --cpu), the server stages
# serve stories260K, and the structured outputs are validated as the GPU run's
# are afterwards (about 20 s).
# shellcheck disable=SC2016  # $PY_VENV is the inner shell's
step "GPU script rehearsal (CPU)" env PKG=build/gpu-pkg PY_VENV="$VENV/bin/python" bash -c \
    'bench/gpu.sh package --from build && bench/gpu.sh run --device cpu --quick --out build/gpu-rehearsal &&
     "$PY_VENV" bench/gpu_validate.py build/gpu-rehearsal'

if [ "${BRISK_TEST_QUICK:-0}" = "1" ]; then
    echo
    echo "test.sh: BRISK_TEST_QUICK=1: skipping the sanitizer pass"
    SUMMARY+=("SKIP  sanitizer pass (BRISK_TEST_QUICK=1)")
    finish
fi

# Valgrind memcheck over a short serve session, on its own Debug build
# (about 20 s with the build).
step "valgrind serve session" bash scripts/valgrind-serve.sh

# halt_on_error: the first report ends the process, so a test sees it.
# abort_on_error=0: exit with an error code rather than SIGABRT (no core dumps).
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0:print_stacktrace=1
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=0:print_stacktrace=1
if step "build asan" bash scripts/build.sh asan; then
    step "ctest (asan)" run_ctest build-asan
    # Not the reference comparisons (marker "reference": numbers the Release
    # pass checked; ctest above ran the kernels and the loaders under ASan).
    step "pytest (asan, not slow)" run_pytest build-asan/bin/brisk \
        -m "not slow and not exhaustive and not reference"
fi
# The AVX-512 kernel files compiled against scalar emulations of their
# intrinsics (tests/tools/emu512.h) under ASan + UBSan: their C-level bugs
# (misaligned or out-of-bounds loads, overflow) show on any AVX2 machine; on
# an AVX-512 machine the ctest above also runs them natively under the
# sanitizers. Skips with a message on a CPU without AVX2.
# On a CPU with AVX-512 (F, BW, VL, DQ) and VNNI the ctest above already ran
# those files natively under ASan+UBSan, on the same tests, so only the AMX
# file runs emulated (tests/tools/emuamx.h: its tile instructions); on one
# with AMX too, nothing is emulated.
emu512() {
    local f missing=0
    for f in avx512f avx512bw avx512vl avx512dq avx512_vnni; do
        grep -qw "$f" /proc/cpuinfo || missing=1
    done
    # AMX counts when brisk itself runs it (CPUID, XCR0 and the kernel's
    # tile permission: `brisk --version` says amx-int8, not amx-int8(refused)).
    if [ $missing -eq 0 ] && build-asan/bin/brisk --version 2>/dev/null | grep -q "amx-int8[ ;]"; then
        echo "test.sh: this CPU has AVX-512, VNNI and AMX: the ctest (asan) step ran the"
        echo "         AVX-512 and AMX kernel files natively under ASan+UBSan; no emulation needed"
        return 0
    fi
    if [ $missing -eq 0 ]; then
        # AVX-512 native; the AMX file's tile instructions emulated
        # (tests/tools/emuamx.h), the matmul tests at the amx level.
        EMU_AMX_ONLY=1 EMU512_SANITIZE=1 \
            EMU_OBJS_FROM="$ROOT/build-asan/CMakeFiles/brisk_kernels.dir/kernels/cpu" \
            sh tests/tools/run_emu512.sh "$ROOT/build-emuamx"
        return
    fi
    EMU512_SANITIZE=1 sh tests/tools/run_emu512.sh "$ROOT/build-emu512"
}
step "AVX-512/AMX kernels emulated (asan+ubsan)" emu512
# ThreadSanitizer over the C unit tests that start threads: the thread pool,
# the kernels on it, the engine thread and its queues, the loop's async
# handoffs, the bench client. The single-threaded ones (tokenizer, sampler,
# parsers, hostile files, corpus replays) have no race to find and run under
# ASan already. halt_on_error makes the first race fail the test.
# The threaded tests are the ones that start threads (a kern_pool, pthreads,
# the engine, a libuv loop with its worker pool, the GPU sampler, the bench
# client): only they are built and run here.
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
THREADED='kern_pool_create|pthread_create|uv_run\(|sched_engine_create|srv_gpu_create|uv_thread_create|bench_run\('
# ...directly, or through a shared test header that does (test_srv_http_util.h).
THREADED_H=$(grep -l -E "$THREADED" tests/unit/*.h | xargs -r -n1 basename | tr '\n' '|' | sed 's/|$//')
TSAN_TESTS=$( { grep -l -E "$THREADED" tests/unit/test_*.c
    [ -n "$THREADED_H" ] && grep -l -E "#include \"($THREADED_H)\"" tests/unit/test_*.c; } |
    sort -u | xargs -n1 basename | sed 's/\.c$//' | tr '\n' ' ')
echo "test.sh: threaded tests: $TSAN_TESTS"
if step "build tsan" env BRISK_BUILD_TARGETS="$TSAN_TESTS" bash scripts/build.sh tsan; then
    step "ctest (tsan, threaded tests)" run_ctest build-tsan -R "^($(echo $TSAN_TESTS | tr ' ' '|'))\$"
fi
finish
