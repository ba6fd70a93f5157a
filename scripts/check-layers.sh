#!/usr/bin/env bash
# check-layers.sh - fails on an #include that crosses the module layering the
# build enforces (CMakeLists.txt, docs/ARCHITECTURE.md):
#   common <- kernels (cpu <- cuda) <- kv <- models <- scheduler
#   server/ops (kv and below)      metrics, GPU/NVML, audit, keys, quotas, usage
#   server/http (ops and below)    connections, parsing, responses, routes, CORS
#   server/api (models and below)  OpenAI JSON <-> C structs; never sockets
#   server/app (all of the above)  the server: handlers, route table, signals
#   cli (everything)               main, the option table, subcommands
# http and api are siblings: neither includes the other. clients/
# (brisk-bench) sees only common/. Prints each offending line as
# file:line: include, and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
# The modules a module may include, besides itself.
allowed() {
    case "$1" in
        common) echo "" ;;
        kernels/cpu) echo "common" ;;
        kernels/cuda) echo "common kernels/cpu" ;;
        kv) echo "common kernels/cpu kernels/cuda" ;;
        models) echo "common kernels/cpu kernels/cuda kv" ;;
        scheduler) echo "common kernels/cpu kernels/cuda kv models" ;;
        server/ops) echo "common kernels/cpu kv" ;;
        server/http) echo "common server/ops" ;;
        server/api) echo "common kernels/cpu kv models" ;;
        server/app) echo "common kernels/cpu kernels/cuda kv models scheduler server/ops server/http server/api" ;;
        cli) echo "common kernels/cpu kernels/cuda kv models scheduler server/ops server/http server/api server/app" ;;
        clients) echo "common" ;;
        *) echo "?" ;;
    esac
}
module_of() { # a path inside the tree -> its module
    case "$1" in
        kernels/cpu/*) echo kernels/cpu ;;
        kernels/cuda/*) echo kernels/cuda ;;
        server/*/*) echo "server/$(cut -d/ -f2 <<<"$1")" ;;
        */*) echo "${1%%/*}" ;;
        *) echo "" ;;
    esac
}
bad=0
while IFS= read -r -d '' f; do
    from=$(module_of "$f")
    ok=" $from $(allowed "$from") "
    if [ "$ok" = " $from ? " ]; then
        echo "$f: not in a known module (add it to scripts/check-layers.sh)"
        bad=1
        continue
    fi
    while IFS= read -r hit; do
        line=${hit%%:*}
        inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${hit#*:}")
        to=$(module_of "$inc")
        [ -z "$to" ] && continue
        [ "$(allowed "$to")" = "?" ] && continue # not a module (tests/, generated)
        case "$ok" in
            *" $to "*) ;;
            *)
                echo "$f:$line: $from may not include $to: $inc"
                bad=1
                ;;
        esac
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include "' "$f" || true)
done < <(find common kernels kv models scheduler server cli clients -type f \
             \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0)
if [ $bad = 0 ]; then
    echo "check-layers: every #include points down the module chain"
fi
exit $bad
