#!/usr/bin/env bash
# install-deps.sh - install the Debian packages brisk needs to build and test.
#
# Only what is missing is installed: dpkg-query is asked first, so on a warm
# machine this takes about a second and never touches the network. apt-get
# update runs only when something has to be installed. Idempotent.
set -euo pipefail

PKGS=(
    build-essential cmake pkg-config git curl
    libuv1-dev libcjson-dev node-llhttp
    python3 python3-venv python3-pip
    prometheus  # promtool lints GET /metrics; tests/deploy runs the daemon against brisk
    gnuplot-nox # brisk-bench --plot draws its PNG charts with it
    valgrind    # scripts/valgrind-serve.sh: memcheck over a short serve session (CI)
    clang-format-14 # scripts/check-format.sh: the C style (.clang-format), pinned: versions format differently
)

# kubectl renders deploy/'s kustomizations in tests/deploy (`kubectl kustomize`,
# offline). Debian's kubernetes-client (1.20) does it; a newer kubectl already on
# PATH (another package owning /usr/bin/kubectl) is used as it is.
if ! command -v kubectl >/dev/null 2>&1; then
    PKGS+=(kubernetes-client)
fi

missing=()
for p in "${PKGS[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    if [ "$status" != "installed" ]; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#PKGS[@]} packages present"
    exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "install-deps: error: not root and no sudo; install these yourself: ${missing[*]}" >&2
        exit 1
    fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
