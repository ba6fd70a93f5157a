#!/bin/sh
# run_emu512.sh - builds and runs the CPU kernel unit tests with the AVX-512
# kernel files compiled against tests/tools/emu512.h (scalar emulations of
# their intrinsics) and the AMX file against tests/tools/emuamx.h as well
# (the tile instructions), for checking those files on a machine without
# AVX-512 or AMX.
# Needs an AVX2 machine (the emulation builds on AVX2/F16C intrinsics); on one
# without, it says so and exits 0.
#   tests/tools/run_emu512.sh [build-dir]      (default /tmp/brisk-emu512)
#   EMU_AMX_ONLY=1 tests/tools/run_emu512.sh   (see below)
# EMU512_SANITIZE=1 builds everything with ASan + UBSan (every report fatal):
# scripts/test.sh runs it that way, so the AVX-512 files' C-level bugs
# (misaligned or out-of-bounds loads, overflow) show on any AVX2 machine.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-/tmp/brisk-emu512}
cc=${CC:-cc}
if ! grep -qw avx2 /proc/cpuinfo 2>/dev/null || ! grep -qw f16c /proc/cpuinfo 2>/dev/null; then
    echo "run_emu512: skipped: this CPU lacks AVX2/F16C, on which the emulation is built"
    exit 0
fi
mkdir -p "$out"
cflags="-std=c11 -g -Wall -Wextra -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -I$root"
opt=-O2
# The emulated files are large once every intrinsic is a function: -O0 keeps
# their compile short (tens of seconds instead of minutes under the
# sanitizers); the tests run at the emulation's speed either way.
emu_opt=-O1
if [ "${EMU512_SANITIZE:-0}" = "1" ]; then
    cflags="$cflags -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
    opt=-O1
    emu_opt=-O0
    export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:abort_on_error=0}"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=0:print_stacktrace=1}"
fi
# EMU_AMX_ONLY=1 (a CPU with AVX-512 and VNNI but no AMX): the AVX-512 files
# native, only the AMX file's tile instructions emulated, and only the
# matmul test at the amx level, and the tile peak benchmark's test.
amx_only=${EMU_AMX_ONLY:-0}
avx512_native="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c"
# Only the AVX-512 levels by default: the scalar and AVX2 ones are native
# here and run in the normal (and sanitized) ctest builds.
if [ "$amx_only" = "1" ]; then
    export KERN_TEST_MIN_LEVEL="${KERN_TEST_MIN_LEVEL:-amx}"
else
    export KERN_TEST_MIN_LEVEL="${KERN_TEST_MIN_LEVEL:-avx512}"
fi
objs=""
pids=""
# EMU_OBJS_FROM=DIR (with EMU_AMX_ONLY=1): the other kernel files' objects
# from a build of the same flavour (scripts/test.sh: the ASan build's
# build-asan/CMakeFiles/brisk_kernels.dir/kernels/cpu), so only the two
# emulation-specific files compile here.
reuse=${EMU_OBJS_FROM:-}
for f in "$root"/kernels/cpu/*.c; do
    name=$(basename "$f" .c)
    o=$opt
    if [ "$amx_only" = "1" ] && [ -n "$reuse" ] && [ -f "$reuse/$name.c.o" ] &&
        [ "$name" != kern_cpu ] && [ "${name%_amx}" = "$name" ]; then
        objs="$objs $reuse/$name.c.o"
        continue
    fi
    if [ "$amx_only" = "1" ]; then
        case "$name" in
        *_avx512) extra="$avx512_native" ;;
        *_avx512vnni) extra="$avx512_native -mavx512vnni" ;;
        *_amx) extra="$avx512_native -mavx512vnni -include $root/tests/tools/emuamx.h" ;;
        *_avx2) extra="-mavx2 -mfma -mf16c" ;;
        kern_cpu) extra="-DKERN_EMU_AMX" ;;
        *) extra="" ;;
        esac
    else
        case "$name" in
        *_avx512 | *_avx512vnni) extra="-mavx2 -mfma -mf16c -include $root/tests/tools/emu512.h"; o=$emu_opt ;;
        *_amx) extra="-mavx2 -mfma -mf16c -include $root/tests/tools/emu512.h -include $root/tests/tools/emuamx.h"; o=$emu_opt ;;
        *_avx2) extra="-mavx2 -mfma -mf16c" ;;
        kern_cpu) extra="-DKERN_EMU_AVX512 -DKERN_EMU_AMX" ;;
        *) extra="" ;;
        esac
    fi
    # Two compiles at a time (the two large files overlap).
    # shellcheck disable=SC2086 # word splitting of the flag lists is intended
    $cc $cflags $o $extra -c "$f" -o "$out/$name.o" &
    pids="$pids $!"
    if [ "$(echo $pids | wc -w)" -ge 2 ]; then
        for p in $pids; do wait "$p" || exit 1; done
        pids=""
    fi
    objs="$objs $out/$name.o"
done
for p in $pids; do wait "$p" || exit 1; done
status=0
tests="test_kern_matmul test_kern_ops test_kern_kv test_kern_bench_amx"
what="AVX-512 and AMX emulated"
if [ "$amx_only" = "1" ]; then
    tests="test_kern_matmul test_kern_bench_amx"
    what="AMX tiles emulated"
fi
for t in $tests; do
    # shellcheck disable=SC2086
    $cc $cflags $opt "$root/tests/unit/$t.c" $objs -lpthread -lm -o "$out/$t"
    echo "== $t ($what${EMU512_SANITIZE:+, sanitized})"
    "$out/$t" || status=1
done
exit $status
