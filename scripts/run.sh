#!/usr/bin/env bash
# run.sh [extra args] - from a fresh checkout to a running brisk in one command.
#
# Installs the Debian build dependencies, builds the Release binary, fetches
# SmolLM2-135M-Instruct into ~/.cache/brisk/models and then starts the server
# (`brisk serve --model M [extra args]`, on http://127.0.0.1:8080).
set -euo pipefail
cd "$(dirname "$0")/.."

# Setup progress goes to stderr: stdout carries only what brisk prints.
bash scripts/install-deps.sh >&2
bash scripts/build.sh Release >&2
MODEL=$(bash scripts/fetch-model.sh --print-path)
BRISK=build/bin/brisk

echo "run.sh: starting brisk serve with $MODEL (Ctrl-C stops it)" >&2
exec "$BRISK" serve --model "$MODEL" "$@"
