"""Allocation failure injection while serving (binaries built with
-DBRISK_FAULT_INJECT, the ASan flavour of scripts/build.sh; skipped otherwise).

`brisk serve` runs with BRISK_FAULT_ALLOC=rate:0.01:SEED: one allocation in a
hundred on the request path fails (HTTP layer, JSON, generation endpoints, the
engine's per-sequence work). Over a few hundred mixed requests (completions and
chat, streaming or not, n > 1, log-probs, echo, stop strings, invalid bodies,
/v1/models, /metrics), every answer must be the right one or a clean error: a
complete 500/503 with an OpenAI error body, a stream that ends with an error
event, or a connection closed (when even the error could not be written; a
stream may then be cut short). Never a wrong answer that looks right, never a
crash. Then the injection is switched off (SIGUSR2) and the server must be
back to idle (KV blocks, running/waiting) and answer everything right; it
exits 0 on SIGTERM and the sanitizers (LeakSanitizer included) report
nothing.
"""

import asyncio
import json
import os
import re
import signal
import time

import pytest
from aio_http import close_now, connect, fetch, request_bytes, stream_text
from conftest import metric_value

STORIES = "stories260K"
# Longer or harsher runs: BRISK_FAULT_TEST_SPEC=rate:0.05:3 BRISK_FAULT_TEST_REQUESTS=3000
SPEC = os.environ.get("BRISK_FAULT_TEST_SPEC", "rate:0.01:20261121")
N_REQUESTS = int(os.environ.get("BRISK_FAULT_TEST_REQUESTS", "300"))

# The requests: (path, body or None for GET, expected kind).
CASES = [
    ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}, "ok"),
    ("/v1/completions", {"prompt": "Lily saw a big dog", "max_tokens": 30, "temperature": 0,
                         "stream": True, "stream_options": {"include_usage": True}}, "ok"),
    ("/v1/completions", {"prompt": "Tom and Ben", "max_tokens": 20, "n": 3, "temperature": 0.8,
                         "seed": 5}, "ok"),
    ("/v1/completions", {"prompt": ["The sun", "A bird"], "max_tokens": 16, "n": 2, "temperature": 0.9,
                         "seed": 9, "stream": True}, "ok"),
    ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0,
                         "logprobs": 3, "echo": True}, "ok"),
    ("/v1/completions", {"prompt": "One day", "max_tokens": 40, "temperature": 0, "stop": [".", "!"],
                         "stream": True, "logprobs": 1}, "ok"),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "Be kind."},
                                           {"role": "user", "content": "Tell me a story"}],
                              "max_tokens": 24, "temperature": 0}, "ok"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Once "}, {"type": "text", "text": "upon"}]}],
        "max_tokens": 20, "temperature": 0, "stream": True, "logprobs": True, "top_logprobs": 2,
        "stream_options": {"include_usage": True}}, "ok"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 4,}', 400),
    ("/v1/completions", {"prompt": "x", "n": 1000}, 400),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400),
    ("/v1/models", None, "ok"),
    ("/metrics", None, "metrics"),
    # a client that leaves after the head: its sequence must be cancelled
    ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": True,
                         "stream": True}, "leave"),
]


def normalize(path, body, r):
    """What must not change between a run with and without faults: status,
    and for an answer its choices (text, finish, log-probs) and usage (less the
    prefix-cache hits, which depend on what ran before)."""
    if r.status != 200:
        return r.status, r.json()["error"]["type"]
    if path == "/metrics":
        return 200, "vllm:kv_cache_usage_perc" in r.body.decode()
    if path == "/v1/models":
        return 200, [m["id"] for m in r.json()["data"]]
    if body.get("stream"):
        # How tokens are grouped into chunks is not fixed (an event that cannot
        # be allocated leaves its tokens for the next): compare per choice.
        events = r.sse()
        texts, finish, usage, done = stream_text(events)
        if isinstance(usage, dict):
            usage = {k: v for k, v in usage.items() if k != "prompt_tokens_details"}
        lps = {}
        for e in events:
            for c in ([] if e == "[DONE]" else json.loads(e).get("choices", [])):
                lp = c.get("logprobs") or {}
                for key, v in lp.items():
                    lps.setdefault((c["index"], key), []).extend(v)
        return 200, texts, finish, usage, done, lps
    j = r.json()
    return 200, [(c["index"], c.get("text", c.get("message")), c["finish_reason"], c["logprobs"])
                 for c in j["choices"]], {k: v for k, v in j["usage"].items()
                                          if k != "prompt_tokens_details"}


def classify(path, body, r, want):
    """'right', 'error' (a clean one), 'closed' (nothing or a cut stream) or
    a string saying what is wrong."""
    if r.status == 0:
        return "closed" if r.raw == b"" else f"garbage: {r.raw[:200]!r}"
    if not r.complete:
        stream = isinstance(body, dict) and body.get("stream")
        return "closed" if stream and r.status == 200 else f"cut {r.status} answer: {r.raw[:300]!r}"
    if r.status in (500, 503):
        try:
            err = r.json()["error"]
        except (ValueError, KeyError, TypeError):
            return f"{r.status} without an error body: {r.body[:200]!r}"
        return "error" if err.get("message") and err.get("type") == "server_error" \
            else f"bad error body {err}"
    if r.status == 200 and isinstance(body, dict) and body.get("stream"):
        for e in r.sse():
            if e != "[DONE]" and "error" in json.loads(e):
                err = json.loads(e)["error"]
                return "error" if err.get("message") else f"bad error event {e}"
    got = normalize(path, body, r)
    return "right" if got == want else f"wrong answer: {got} != {want}"


def data_of(path, body):
    if body is None:
        return request_bytes(path, method="GET")
    return request_bytes(path, body)


async def run_all(srv, plan, concurrency=8):
    sem = asyncio.Semaphore(concurrency)

    async def leave(path, body):
        reader, writer = await connect(srv.host, srv.port)
        try:
            writer.write(data_of(path, body))
            await reader.readuntil(b"\r\n\r\n")
        finally:
            close_now(writer, rst=True)
        return "left"

    async def one(k):
        path, body, kind = CASES[k]
        async with sem:
            try:
                if kind == "leave":
                    return k, await asyncio.wait_for(leave(path, body), 60 * srv.slow)
                r = await fetch(srv.host, srv.port, data_of(path, body), 60 * srv.slow)
            except (ConnectionError, OSError, asyncio.IncompleteReadError):
                return k, None
        return k, r

    return await asyncio.gather(*[one(k) for k in plan])


def wait_log(srv, pattern, count, timeout=10):
    deadline = time.monotonic() + timeout * srv.slow
    while len(re.findall(pattern, srv.log())) < count:
        srv.check_alive()
        assert time.monotonic() < deadline, f"no {pattern!r} in the log:\n{srv.log()[-2000:]}"
        time.sleep(0.02)
    return re.findall(pattern, srv.log())


def test_serving_with_allocation_failures(brisk, start_server, stories260k_gguf, monkeypatch, report):
    if "fault injection: compiled in" not in brisk.run("--version").stdout:
        pytest.skip("built without -DBRISK_FAULT_INJECT (scripts/build.sh asan has it)")
    monkeypatch.setenv("BRISK_FAULT_ALLOC", SPEC)
    srv = start_server(stories260k_gguf, "--chat-template", "chatml", "--max-num-seqs", "8",
                       wait_ready=False)
    monkeypatch.delenv("BRISK_FAULT_ALLOC")
    armed = r"fault injection armed: BRISK_FAULT_ALLOC=" + re.escape(SPEC)
    disarmed = r"fault injection disarmed: (\d+) of (\d+) allocations failed"
    wait_log(srv, armed, 1, timeout=60)
    srv.signal(signal.SIGUSR2)
    wait_log(srv, disarmed, 1)
    srv.wait_ready()

    # References, with nothing failing.
    want = []
    for path, body, kind in CASES:
        if kind == "leave":
            want.append("left")
            continue
        r = asyncio.run(fetch(srv.host, srv.port, data_of(path, body), 60 * srv.slow))
        assert r.status == (200 if kind in ("ok", "metrics") else kind), (path, body, r.body)
        want.append(normalize(path, body, r))

    # A few hundred requests with one allocation in a hundred failing.
    srv.signal(signal.SIGUSR2)
    wait_log(srv, armed, 2)
    plan = [k % len(CASES) for k in range(N_REQUESTS)]
    results = asyncio.run(run_all(srv, plan))
    srv.signal(signal.SIGUSR2)
    injected, seen = map(int, wait_log(srv, disarmed, 2)[-1])
    srv.check_alive()
    tally = {"right": 0, "error": 0, "closed": 0, "left": 0}
    bad = []
    for k, r in results:
        path, body, _ = CASES[k]
        if r is None or r == "left":
            tally["closed" if r is None else "left"] += 1
            continue
        c = classify(path, body, r, want[k])
        if c in tally:
            tally[c] += 1
        else:
            bad.append((path, body, c))
    assert not bad, "\n".join(str(b) for b in bad[:3])
    assert injected > 0 and tally["error"] + tally["closed"] > 0, (injected, tally)
    assert tally["right"] > 0, tally

    # Injection off: idle, and everything right again.
    deadline = time.monotonic() + 10 * srv.slow
    while True:
        s = srv.metrics()
        idle = (metric_value(s, "vllm:num_requests_running"), metric_value(s, "vllm:num_requests_waiting"),
                metric_value(s, "brisk_kv_cache_blocks", state="used"))
        if idle == (0, 0, 0) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert idle == (0, 0, 0), idle
    assert metric_value(s, "vllm:kv_cache_usage_perc") == 0
    again = asyncio.run(run_all(srv, list(range(len(CASES)))))
    for k, r in again:
        path, body, kind = CASES[k]
        assert r is not None and (kind == "leave" or classify(path, body, r, want[k]) == "right"), \
            (path, body)
    report(f"fault injection {SPEC}: {injected} of {seen} request-path allocations failed over "
           f"{N_REQUESTS} requests: {tally['right']} right, {tally['error']} clean 5xx/error events, "
           f"{tally['closed']} closed, {tally['left']} left early; then idle and all right; "
           f"no sanitizer report at exit")
    srv.stop()
