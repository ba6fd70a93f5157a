#!/bin/sh
# run_emu512.sh - builds and runs the CPU kernel unit tests with the AVX-512
# kernel files compiled against tests/tools/emu512.h (scalar emulations of
# their intrinsics), for checking those files on a machine without AVX-512.
# Needs an AVX2 machine (the emulation builds on AVX2/F16C intrinsics).
#   tests/tools/run_emu512.sh [build-dir]      (default /tmp/brisk-emu512)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-/tmp/brisk-emu512}
cc=${CC:-cc}
mkdir -p "$out"
cflags="-std=c11 -O2 -g -Wall -Wextra -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -I$root"
objs=""
for f in "$root"/kernels/cpu/*.c; do
    name=$(basename "$f" .c)
    case "$name" in
    *_avx512 | *_avx512vnni) extra="-mavx2 -mfma -mf16c -include $root/tests/tools/emu512.h" ;;
    *_avx2) extra="-mavx2 -mfma -mf16c" ;;
    kern_cpu) extra="-DKERN_EMU_AVX512" ;;
    *) extra="" ;;
    esac
    # shellcheck disable=SC2086 # word splitting of the flag lists is intended
    $cc $cflags $extra -c "$f" -o "$out/$name.o"
    objs="$objs $out/$name.o"
done
status=0
for t in test_kern_matmul test_kern_ops; do
    # shellcheck disable=SC2086
    $cc $cflags "$root/tests/unit/$t.c" $objs -lpthread -lm -o "$out/$t"
    echo "== $t (AVX-512 emulated)"
    "$out/$t" || status=1
done
exit $status
