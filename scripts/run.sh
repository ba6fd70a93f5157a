#!/usr/bin/env bash
# run.sh [extra args] - from a fresh checkout to a running brisk in one command.
#
# Installs the Debian build dependencies, builds the Release binary, fetches
# SmolLM2-135M-Instruct into ~/.cache/brisk/models and then starts the server
# (`brisk serve --model M [extra args]`). While the server subcommand is not
# built yet, it runs a one-shot greedy chat completion instead so that the
# whole pipeline is still shown working; extra args then go to `brisk generate`.
set -euo pipefail
cd "$(dirname "$0")/.."

# Setup progress goes to stderr: stdout carries only what brisk prints.
bash scripts/install-deps.sh >&2
bash scripts/build.sh Release >&2
MODEL=$(bash scripts/fetch-model.sh --print-path)
BRISK=build/bin/brisk

if "$BRISK" serve --help >/dev/null 2>&1; then
    echo "run.sh: starting brisk serve with $MODEL" >&2
    exec "$BRISK" serve --model "$MODEL" "$@"
fi

# ChatML, the chat template in SmolLM2's GGUF metadata.
SYSTEM="You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QUESTION="What is the capital of France?"
PROMPT="<|im_start|>system"$'\n'"$SYSTEM<|im_end|>"$'\n'"<|im_start|>user"$'\n'"$QUESTION<|im_end|>"
PROMPT+=$'\n'"<|im_start|>assistant"$'\n'
echo "run.sh: 'brisk serve' is not available yet; running a greedy chat completion instead" >&2
echo "run.sh: question: $QUESTION" >&2
"$BRISK" generate --model "$MODEL" --special --temp 0 -n 96 --prompt "$PROMPT" "$@"
echo
