#!/usr/bin/env bash
# check-format.sh - every C, header and CUDA file git tracks is formatted as
# .clang-format says, by clang-format 14 (Debian 12's; pinned because other
# versions format differently). Lists the files that are not and exits 1.
#   scripts/check-format.sh          # check
#   scripts/check-format.sh --fix    # reformat them in place
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || true)
if [ -z "$cf" ] && command -v clang-format >/dev/null && clang-format --version | grep -q 'version 14\.'; then
    cf=$(command -v clang-format)
fi
[ -n "$cf" ] || { echo "check-format: clang-format 14 not found (scripts/install-deps.sh installs it)"; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = --fix ]; then
    "$cf" -i "${files[@]}"
    echo "check-format: reformatted ${#files[@]} files"
    exit 0
fi
bad=()
for f in "${files[@]}"; do
    "$cf" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
    printf 'check-format: not formatted (scripts/check-format.sh --fix): %s\n' "${bad[@]}"
    exit 1
fi
echo "check-format: ${#files[@]} files formatted as .clang-format says"
