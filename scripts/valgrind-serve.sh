#!/usr/bin/env bash
# valgrind-serve.sh - a short `brisk serve` session under Valgrind memcheck.
#
# Builds a plain debug binary (no sanitizer: Valgrind and ASan do not mix) in
# build-valgrind/, converts stories260K to GGUF, and runs
#   valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect \
#            --error-exitcode=99 build-valgrind/bin/brisk serve ...
# through a session: health probes, /v1/models, completions (plain, streaming
# with usage and log-probs, n > 1 with echo), chat completions (stories260K
# has no chat template, so the server runs with --chat-template chatml), a
# client that disconnects mid-stream, invalid requests (bad JSON, a bad field,
# 404, 405, a malformed request line), and /metrics. Then SIGTERM: the
# server must drain and exit 0, which with --error-exitcode means Valgrind
# found no error and no definite or indirect leak.
#
# Usage: scripts/valgrind-serve.sh            (about 1-2 minutes on 2 cores, build included)
# Environment:
#   BRISK_SHARED_DIR   folder with models/stories260K.bin and models/tok512.bin (../shared)
#   KEEP=1             keep the work folder (serve log, valgrind log) and print its path
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$ROOT/build-valgrind
SHARED=${BRISK_SHARED_DIR:-$ROOT/../shared}
T0=$(date +%s)

command -v valgrind >/dev/null || { echo "valgrind-serve.sh: valgrind is not installed" >&2; exit 2; }
command -v curl >/dev/null || { echo "valgrind-serve.sh: curl is not installed" >&2; exit 2; }
[ -f "$SHARED/models/stories260K.bin" ] ||
    { echo "valgrind-serve.sh: no $SHARED/models/stories260K.bin (set BRISK_SHARED_DIR)" >&2; exit 2; }

echo "== build (Debug, no sanitizer, no CUDA) in $BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DBRISK_SANITIZE=OFF -DBRISK_TSAN=OFF \
    -DBRISK_FAULT_INJECT=OFF -DBRISK_CUDA=OFF -DBRISK_WERROR=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target brisk >/dev/null
BRISK=$BUILD/bin/brisk

WORK=$(mktemp -d)
PID=
cleanup() {
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
        kill -KILL "$PID" 2>/dev/null || true
    fi
    if [ "${KEEP:-0}" = "1" ]; then
        echo "valgrind-serve.sh: logs kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

"$BRISK" convert-llama2c --model "$SHARED/models/stories260K.bin" \
    --tokenizer "$SHARED/models/tok512.bin" --out "$WORK/stories260K.gguf" >/dev/null 2>&1

echo "== valgrind brisk serve"
# --fair-sched: the thread pool's workers spin briefly between tasks, and
# Valgrind runs one thread at a time; fair scheduling keeps that from stalling.
valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
    --fair-sched=yes --log-file="$WORK/valgrind.log" \
    "$BRISK" serve --model "$WORK/stories260K.gguf" --host 127.0.0.1 --port 0 --threads 2 \
    --chat-template chatml --drain-timeout 60 >"$WORK/serve.log" 2>&1 &
PID=$!

PORT=
for _ in $(seq 1 600); do
    PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/serve.log" | head -1)
    [ -n "$PORT" ] && break
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/serve.log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$PORT" ] || { echo "valgrind-serve.sh: the server did not listen" >&2; exit 1; }
URL=http://127.0.0.1:$PORT
for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && break
    sleep 0.1
done

FAILS=0
# expect STATUS METHOD PATH [BODY]: one request, its status checked.
expect() {
    local want=$1 method=$2 path=$3 body=${4:-}
    local args=(-s -m 120 -o "$WORK/body" -w '%{http_code}' -X "$method")
    [ -n "$body" ] && args+=(-H 'Content-Type: application/json' --data-binary "$body")
    local got
    got=$(curl "${args[@]}" "$URL$path" || echo "curl-failed")
    if [ "$got" = "$want" ]; then
        echo "  ok   $want $method $path"
    else
        echo "  FAIL $method $path: got $got, want $want: $(head -c 300 "$WORK/body")"
        FAILS=$((FAILS + 1))
    fi
}

echo "== session on port $PORT"
expect 200 GET /health
expect 200 GET /livez
expect 200 GET /readyz
expect 200 GET /v1/models
expect 200 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}'
expect 200 POST /v1/completions '{"prompt":"Lily saw","max_tokens":16,"stream":true,"logprobs":2,"stream_options":{"include_usage":true}}'
expect 200 POST /v1/completions '{"prompt":["The sun","A dog"],"max_tokens":8,"n":2,"echo":true,"logprobs":1,"seed":3,"stop":["."]}'
expect 200 POST /v1/chat/completions '{"messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"Tell me a story"}],"max_tokens":16}'
expect 200 POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"stream":true,"logprobs":true,"top_logprobs":2}'
expect 400 POST /v1/completions '{"prompt": "x",'
expect 400 POST /v1/completions '{"prompt":"x","temperature":7}'
expect 404 GET /nowhere
expect 405 DELETE /v1/models
# A client that reads the head of a long stream and disconnects (RST), and a
# malformed request line; both over raw sockets.
python3 - "$PORT" <<'EOF'
import json, socket, struct, sys
port = int(sys.argv[1])
body = json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True,
                   "stream": True}).encode()
s = socket.create_connection(("127.0.0.1", port), timeout=120)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: v\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(body) + body)
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(4096)
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()
print("  ok   disconnected mid-stream after:", head.split(b"\r\n")[0].decode())
s = socket.create_connection(("127.0.0.1", port), timeout=120)
s.sendall(b"GET /health HTTP/1.1 extra\r\n\r\n")
line = s.recv(4096).split(b"\r\n")[0].decode()
s.close()
assert line.startswith("HTTP/1.1 400"), line
print("  ok   malformed request line:", line)
EOF
expect 200 GET /metrics

echo "== SIGTERM"
kill -TERM "$PID"
set +e
wait "$PID"
RC=$?
set -e
PID=
grep -E "ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|still reachable|no leaks are possible" \
    "$WORK/valgrind.log" | sed 's/^==[0-9]*== /  /'
if [ "$RC" -ne 0 ] || [ "$FAILS" -ne 0 ] || ! grep -q "ERROR SUMMARY: 0 errors" "$WORK/valgrind.log"; then
    echo "valgrind-serve.sh: FAIL (exit $RC, $FAILS failed requests); the valgrind log:" >&2
    sed -n '1,400p' "$WORK/valgrind.log" >&2
    exit 1
fi
echo "valgrind-serve.sh: PASS: 0 errors, no definite or indirect leaks ($(($(date +%s) - T0)) s)"
