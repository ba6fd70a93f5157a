#!/usr/bin/env bash
# check-layers.sh - fails on an #include that points up the module chain the
# build enforces (CMakeLists.txt, docs/ARCHITECTURE.md):
#   common <- kernels (cpu <- cuda) <- kv <- models <- scheduler <- server
# and clients/ (brisk-bench) sees only common/. Prints each offending line as
# file:line: include, and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
rank() {
    case "$1" in
        common) echo 0 ;;
        kernels/cpu) echo 1 ;;
        kernels/cuda) echo 2 ;;
        kv) echo 3 ;;
        models) echo 4 ;;
        scheduler) echo 5 ;;
        server) echo 6 ;;
        *) echo -1 ;;
    esac
}
module_of() { # a path inside the tree -> its module
    case "$1" in
        kernels/cpu/*) echo kernels/cpu ;;
        kernels/cuda/*) echo kernels/cuda ;;
        */*) echo "${1%%/*}" ;;
        *) echo "" ;;
    esac
}
bad=0
while IFS= read -r -d '' f; do
    from=$(module_of "$f")
    while IFS= read -r hit; do
        line=${hit%%:*}
        inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${hit#*:}")
        to=$(module_of "$inc")
        [ -z "$to" ] && continue
        if [ "$from" = clients ]; then
            [ "$to" = clients ] || [ "$to" = common ] && continue
            echo "$f:$line: clients/ may include only clients/ and common/: $inc"
            bad=1
            continue
        fi
        rf=$(rank "$from") rt=$(rank "$to")
        [ "$rt" -lt 0 ] && continue
        if [ "$rt" -gt "$rf" ]; then
            echo "$f:$line: $from includes $to, a module above it: $inc"
            bad=1
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include "' "$f" || true)
done < <(find common kernels kv models scheduler server clients -type f \
             \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0)
if [ $bad = 0 ]; then
    echo "check-layers: every #include points down the module chain"
fi
exit $bad
