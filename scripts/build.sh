#!/usr/bin/env bash
# build.sh [Release|Debug|asan|tsan] - configure and build brisk.
#
#   Release -> build/        (the default)
#   Debug   -> build-debug/
#   asan    -> build-asan/   ASan + UBSan + allocation-failure injection
#   tsan    -> build-tsan/   TSan
# The sanitizer flavours compile -O2 -g1 (line tables for the reports) and keep
# assert() on: they are where internal invariants get checked. They leave CUDA
# out (-DBRISK_CUDA=OFF): ASan's shadow memory keeps the CUDA runtime from
# starting, so nothing CUDA could run under them, and the Release build is the
# one that compiles every architecture.
# With CI=true warnings are errors (-DBRISK_WERROR=ON).
# BRISK_BUILD_TARGETS (space-separated) builds only those targets.
# Extra arguments after the flavour go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."

flavour=${1:-Release}
[ $# -gt 0 ] && shift

# BRISK_CUDA_ARCHS overrides the CUDA architectures of Release and Debug (default
# "75;80;90": T4, A100, H100/H200).
cuda_archs=${BRISK_CUDA_ARCHS:-75;80;90}
san=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1" -DBRISK_CUDA=OFF)
case "$flavour" in
    Release|release) dir=build;       args=(-DCMAKE_BUILD_TYPE=Release -DBRISK_CUDA=ON -DBRISK_CUDA_ARCHITECTURES="$cuda_archs") ;;
    Debug|debug)     dir=build-debug; args=(-DCMAKE_BUILD_TYPE=Debug -DBRISK_CUDA=ON -DBRISK_CUDA_ARCHITECTURES="$cuda_archs") ;;
    asan|ASan)       dir=build-asan;  args=("${san[@]}" -DBRISK_SANITIZE=ON -DBRISK_FAULT_INJECT=ON) ;;
    tsan|TSan)       dir=build-tsan;  args=("${san[@]}" -DBRISK_TSAN=ON) ;;
    *) echo "usage: $0 [Release|Debug|asan|tsan] [cmake args...]" >&2; exit 2 ;;
esac

# Fault injection only where the flavour asks for it (a cached ON must not
# reach a Release build).
case " ${args[*]} " in
    *" -DBRISK_FAULT_INJECT=ON "*) ;;
    *) args+=(-DBRISK_FAULT_INJECT=OFF) ;;
esac
# Always explicit: a cached ON from a CI-style run must not stick to local builds.
if [ "${CI:-}" = "true" ]; then
    args+=(-DBRISK_WERROR=ON)
else
    args+=(-DBRISK_WERROR=OFF)
fi

cmake -S . -B "$dir" "${args[@]}" "$@"
# BRISK_BUILD_TARGETS="a b": only those targets (and what they link), as the
# ThreadSanitizer pass of scripts/test.sh builds only the threaded tests.
targets=()
for t in ${BRISK_BUILD_TARGETS:-}; do
    targets+=(--target "$t")
done
cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
echo "build.sh: $flavour build in $dir/ (binary: $dir/bin/brisk)"
