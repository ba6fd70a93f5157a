"""Faults under load, against the real binary (stories260K: fast):

- clients that go away while queued, mid-prefill and mid-decode (RST or FIN,
  after reading nothing, the head or a few events; some before their request
  is even whole), thousands of times, mixed
  with normal clients: the normal clients' outputs equal their solo greedy
  outputs, the server stays up, and KV usage and the running/waiting gauges
  return to idle. The phases are counted from the server's own metrics.
  2,000 disconnects in CI; 10,000 in the slow variant.
- KV exhaustion: a pool a third of the concurrent demand (mixed lengths,
  streaming and not, n > 1): everything completes, outputs identical to an
  unconstrained server's, preemptions counted.
- SIGTERM under load: every request accepted before the signal completes with
  its full output, later ones are refused or get 503, and the process exits 0
  within the drain timeout.

test_server_http.py and test_server_sched.py test single disconnects, the
drain of one stream and a 4-sequence pool; these are the same faults at
volume and mixed together.
"""

import asyncio
import random
import signal
import time

import pytest
from aio_http import (close_now, connect, fetch, parse_response, read_chunk, read_head,
                      request_bytes, stream_text)
from conftest import metric_value

STORIES = "stories260K"
# stories260K: 5 layers x 32 K/V values x 2 x 2 bytes (f16, the default) x 16 positions per block
STORIES_BLOCK_BYTES = 5 * 32 * 2 * 2 * 16

WORDS = ("the cat sat on a mat and then a dog ran to the park with a big red ball "
         "Lily Tom Ben sun tree bird happy sad little girl boy mom dad friend toy").split()


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


# ---- normal clients ---------------------------------------------------------------

NORMAL_PROMPTS = [
    "Once upon a time",
    "Lily and Tom went to the park. They saw a big dog",
    "The sun was hot. " * 8 + "A little bird",
    "One day, a girl named Sue found a red ball in the garden. She",
    " ".join(["Ben had a toy car and he liked to play with it every day."] * 6),
    "Mom said",
]
NORMAL_MAX_TOKENS = 40


def normal_body(i, stream):
    body = {"model": STORIES, "prompt": NORMAL_PROMPTS[i], "max_tokens": NORMAL_MAX_TOKENS,
            "temperature": 0, "ignore_eos": True}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def solo_outputs(srv):
    """Each normal prompt's greedy text, one request at a time on an idle server."""
    out = []
    for i in range(len(NORMAL_PROMPTS)):
        r = srv.post("/v1/completions", normal_body(i, False))
        assert r.status == 200, r.body
        out.append(r.json()["choices"][0]["text"])
    return out


async def normal_request(srv, i, stream, timeout):
    """The text of one normal request, or a sentence saying what went wrong
    (the caller compares either with the solo output)."""
    r = await fetch(srv.host, srv.port, request_bytes("/v1/completions", normal_body(i, stream)),
                    timeout)
    if r.status != 200 or not r.complete:
        return f"status {r.status}, complete {r.complete}: {r.body[:200]!r}"
    if stream:
        texts, finish, usage, done = stream_text(r.sse())
        text = texts.get(0)
        if not done or finish.get(0) != "length" or not usage \
                or usage["completion_tokens"] != NORMAL_MAX_TOKENS:
            return f"stream ended badly: done {done} finish {finish} usage {usage}"
    else:
        body = r.json()
        text = body["choices"][0]["text"]
        if body["usage"]["completion_tokens"] != NORMAL_MAX_TOKENS:
            return f"usage {body['usage']}"
    return text


# ---- disconnecting clients ---------------------------------------------------------

KINDS = ("rst_at_once", "queued", "prefill", "prefill", "decode", "decode", "nonstream",
         "half_close", "partial")


async def disconnector(srv, rng, kind, slow):
    """One client that leaves early in the way `kind` says."""
    rst = rng.random() < 0.5
    if kind == "decode":
        body = {"model": STORIES, "prompt": words(rng, rng.randint(3, 30)), "max_tokens": 300,
                "ignore_eos": True, "stream": True, "temperature": 0.8,
                "seed": rng.randint(0, 1 << 30)}
    else:
        # ~175 words are ~300 tokens: prefill spans ~10 steps of 32 tokens.
        body = {"model": STORIES, "prompt": words(rng, rng.randint(150, 200)), "max_tokens": 100,
                "ignore_eos": True, "stream": kind != "nonstream", "temperature": 0}
    data = request_bytes("/v1/completions", body)
    reader, writer = await connect(srv.host, srv.port)
    try:
        if kind == "partial":  # gone before the request is whole: never reaches the engine
            writer.write(data[:rng.randint(1, len(data) - 1)])
            await writer.drain()
            await asyncio.sleep(rng.random() * 0.002)
            return
        writer.write(data)
        await writer.drain()
        if kind == "rst_at_once":
            rst = True
        elif kind == "queued":
            await asyncio.sleep(rng.random() * 0.002)
        elif kind == "prefill":
            status, _ = await read_head(reader)
            assert status == 200, status
            await asyncio.sleep(rng.random() * 0.03 * slow)
        elif kind == "decode":
            status, _ = await read_head(reader)
            assert status == 200, status
            for _ in range(rng.randint(1, 4)):
                assert await read_chunk(reader) is not None
        elif kind == "nonstream":
            await asyncio.sleep(rng.random() * 0.05 * slow)
        elif kind == "half_close":
            writer.write_eof()
            await asyncio.sleep(rng.random() * 0.01)
    finally:
        close_now(writer, rst)


async def disconnect_storm(srv, n_disconnects, solo, concurrency=10, n_normal=3, seed=1):
    """Runs n_disconnects disconnecting clients (concurrency at a time) beside
    n_normal looping normal clients; returns ({kind: count}, the disconnecting
    clients' unexpected errors, {"ok": n, "bad": [normal requests that differed]})."""
    rng = random.Random(seed)
    slow = srv.slow
    timeout = 60 * slow
    left = [n_disconnects]
    done_kinds = {}
    failures = []
    normal = {"ok": 0, "bad": []}

    async def abuser():
        while left[0] > 0:
            left[0] -= 1
            kind = rng.choice(KINDS)
            try:
                await asyncio.wait_for(disconnector(srv, rng, kind, slow), timeout)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, OSError,
                    AssertionError) as e:
                failures.append(f"{kind}: {type(e).__name__} {e}")
            done_kinds[kind] = done_kinds.get(kind, 0) + 1

    async def normal_client(k):
        j = k
        while left[0] > 0:
            i, stream = j % len(NORMAL_PROMPTS), (j // len(NORMAL_PROMPTS) + k) % 2 == 0
            j += 1
            got = await normal_request(srv, i, stream, timeout)
            if got == solo[i]:
                normal["ok"] += 1
            else:
                normal["bad"].append((i, stream, got))

    await asyncio.gather(*[abuser() for _ in range(concurrency)],
                         *[normal_client(k) for k in range(n_normal)])
    return done_kinds, failures, normal


def phase_counts(before, after):
    """Aborted requests by the phase they were in, from the server's counters:
    never admitted (queued), admitted without a first token (prefill), with
    tokens (decode)."""
    def d(name, **lab):
        return metric_value(after, name, **lab) - metric_value(before, name, **lab)
    finished = sum(d("vllm:request_success_total", finished_reason=f)
                   for f in ("stop", "length", "abort", "error"))
    aborted = d("vllm:request_success_total", finished_reason="abort")
    admitted = d("vllm:request_queue_time_seconds_count")
    with_token = d("vllm:time_to_first_token_seconds_count")
    queued = finished - admitted
    prefill = admitted - with_token
    return {"finished": finished, "aborted": aborted, "queued": queued, "prefill": prefill,
            "decode": aborted - queued - prefill,
            "errors": d("vllm:request_success_total", finished_reason="error")}


def wait_idle(srv, timeout=10):
    """Polls until nothing runs or waits and no KV block is in use; returns the
    last metrics."""
    deadline = time.monotonic() + timeout * srv.slow
    while True:
        s = srv.metrics()
        if (metric_value(s, "vllm:num_requests_running"), metric_value(s, "vllm:num_requests_waiting"),
                metric_value(s, "brisk_kv_cache_blocks", state="used")) == (0, 0, 0) \
                or time.monotonic() > deadline:
            return s
        time.sleep(0.05)


def run_disconnects(start_server, stories260k_gguf, report, n):
    srv = start_server(stories260k_gguf, "--max-num-seqs", "8", "--max-num-batched-tokens", "32")
    s0 = srv.metrics()
    idle_usage = metric_value(s0, "vllm:kv_cache_usage_perc")
    assert idle_usage == 0 and metric_value(s0, "brisk_kv_cache_blocks", state="used") == 0
    solo = solo_outputs(srv)
    s1 = srv.metrics()
    t0 = time.monotonic()
    kinds, failures, normal = asyncio.run(disconnect_storm(srv, n, solo))
    elapsed = time.monotonic() - t0
    srv.check_alive()
    s2 = wait_idle(srv)
    assert metric_value(s2, "brisk_kv_cache_blocks", state="used") == 0
    assert metric_value(s2, "vllm:kv_cache_usage_perc") == idle_usage
    assert metric_value(s2, "vllm:num_requests_running") == 0
    assert metric_value(s2, "vllm:num_requests_waiting") == 0
    # No other client was affected.
    assert not normal["bad"], normal["bad"][:3]
    assert normal["ok"] >= 10, normal
    # The disconnecting clients themselves saw nothing but their own doing.
    assert not failures, failures[:5]
    ph = phase_counts(s1, s2)
    assert ph["errors"] == 0, ph
    # The server noticed the departures: nearly every whole request of a
    # leaving client was cancelled (a few finish before their client goes).
    assert ph["aborted"] >= 0.9 * (n - kinds.get("partial", 0)), (ph, kinds)
    # Every phase was hit, many times over.
    for phase in ("queued", "prefill", "decode"):
        assert ph[phase] >= n // 50, (phase, ph, kinds)
    assert srv.request("GET", "/health").status == 200
    assert solo_outputs(srv) == solo
    mix = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    report(f"faults: {n} disconnects in {elapsed:.1f} s ({mix}); "
           f"server-side aborts: {ph['aborted']:.0f} (queued {ph['queued']:.0f}, mid-prefill "
           f"{ph['prefill']:.0f}, mid-decode {ph['decode']:.0f}); {normal['ok']} normal requests "
           f"all equal to solo; KV back to idle")
    srv.stop()


def test_disconnect_storm(start_server, stories260k_gguf, report):
    run_disconnects(start_server, stories260k_gguf, report, 2000)


@pytest.mark.slow
def test_disconnect_storm_10k(start_server, stories260k_gguf, report):
    run_disconnects(start_server, stories260k_gguf, report, 10000)


# ---- KV exhaustion -------------------------------------------------------------------

def kv_requests():
    """Mixed lengths, streaming and not, n > 1, greedy and seeded."""
    rng = random.Random(3)
    reqs = []
    for k in range(10):
        n = (1, 2, 3)[k % 3]
        body = {"model": STORIES, "prompt": words(rng, rng.choice((4, 20, 60, 110))),
                "max_tokens": rng.choice((60, 120, 180)), "n": n, "ignore_eos": k % 4 != 3,
                "temperature": 0 if k % 2 else 0.9, "seed": 100 + k, "stream": k % 2 == 0}
        if body["stream"]:
            body["stream_options"] = {"include_usage": True}
        reqs.append(body)
    return reqs


async def kv_run(srv, reqs):
    """Every request at once; per request (texts by index, finishes, usage)."""
    async def one(body):
        r = await fetch(srv.host, srv.port, request_bytes("/v1/completions", body), 120 * srv.slow)
        assert r.status == 200 and r.complete, (r.status, r.body[:300])
        if body["stream"]:
            texts, finish, usage, done = stream_text(r.sse())
            assert done
        else:
            j = r.json()
            texts = {c["index"]: c["text"] for c in j["choices"]}
            finish = {c["index"]: c["finish_reason"] for c in j["choices"]}
            usage = j["usage"]
        assert sorted(texts) == list(range(body["n"])), texts
        return texts, finish, usage

    return await asyncio.gather(*[one(b) for b in reqs])


def test_kv_exhaustion_3x_demand(start_server, stories260k_gguf, report):
    reqs = kv_requests()
    roomy = start_server(stories260k_gguf)
    want = asyncio.run(kv_run(roomy, reqs))
    roomy.stop()
    # Demand: every choice at full length; choices of one prompt share its
    # full prompt blocks (forks).
    demand = 0
    for body, (_, _, usage) in zip(reqs, want):
        p = usage["prompt_tokens"]
        m = body["max_tokens"]
        demand += p // 16 + body["n"] * ((p + m + 15) // 16 - p // 16)
    biggest = max((u["prompt_tokens"] + b["max_tokens"] + 15) // 16 for b, (_, _, u) in zip(reqs, want))
    blocks = demand // 3
    assert blocks >= biggest + 2, (blocks, biggest)  # one sequence always fits alone
    tight = start_server(stories260k_gguf, "--kv-cache-bytes", str(blocks * STORIES_BLOCK_BYTES))
    got = asyncio.run(kv_run(tight, reqs))
    s = tight.metrics()
    assert metric_value(s, "brisk_kv_cache_blocks", state="total") == blocks
    preemptions = metric_value(s, "vllm:num_preemptions_total")
    assert preemptions > 0
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"request {k} differs under KV pressure"
    s = wait_idle(tight)
    assert metric_value(s, "brisk_kv_cache_blocks", state="used") == 0
    n_seqs = sum(b["n"] for b in reqs)
    report(f"faults: {len(reqs)} requests ({n_seqs} sequences) demanding {demand} KV blocks in a pool "
           f"of {blocks} ({demand / blocks:.1f}x): {preemptions:.0f} preemptions, outputs identical")
    tight.stop()


# ---- SIGTERM under load ------------------------------------------------------------------

def drain_key(i):
    """(prompt, max_tokens) of the i-th request of the SIGTERM test."""
    return i % len(NORMAL_PROMPTS), 200 + 40 * (i % 2)


def drain_body(i, stream):
    p, m = drain_key(i)
    body = {"model": STORIES, "prompt": NORMAL_PROMPTS[p], "max_tokens": m, "temperature": 0,
            "ignore_eos": True}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def drain_result(r, body):
    """(text, completion tokens) of a whole answer, or a reason string."""
    if r.status != 200 or not r.complete:
        return f"status {r.status} complete {r.complete} {r.body[:200]!r}"
    if body.get("stream"):
        texts, finish, usage, done = stream_text(r.sse())
        if not done or not usage:
            return f"stream without [DONE] or usage: {r.body[-200:]!r}"
        return texts.get(0), usage["completion_tokens"]
    j = r.json()
    return j["choices"][0]["text"], j["usage"]["completion_tokens"]


async def sigterm_scenario(srv, drain_s):
    n = 16
    bodies = [drain_body(i, i % 2 == 0) for i in range(n)]
    inflight = [asyncio.ensure_future(fetch(srv.host, srv.port, request_bytes("/v1/completions", b),
                                            120 * srv.slow)) for b in bodies]
    # All 16 accepted: 4 running, the rest waiting.
    deadline = time.monotonic() + 10 * srv.slow
    while True:
        s = await asyncio.to_thread(srv.metrics)
        if metric_value(s, "vllm:num_requests_running") + metric_value(s, "vllm:num_requests_waiting") == n:
            break
        assert time.monotonic() < deadline, "the 16 requests were not all accepted"
        await asyncio.sleep(0.01)

    async def arrive(i):
        body = drain_body(i, i % 2 == 1)
        t = time.monotonic()
        try:
            r = await fetch(srv.host, srv.port, request_bytes("/v1/completions", body), 60 * srv.slow)
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as e:
            r = e
        return t, body, r

    async def finish_late(conn, data, split, signalled):
        """A client connected before the signal that sends data[split:] after it."""
        reader, writer = conn
        await signalled.wait()
        await asyncio.sleep(0.05)
        t = time.monotonic()
        try:
            writer.write(data[split:])
            await writer.drain()
            r = parse_response(await asyncio.wait_for(reader.read(-1), 60 * srv.slow))
        except (ConnectionError, OSError) as e:
            r = e
        finally:
            writer.close()
        return t, None, r

    # Clients that connected before the signal, idle or halfway through a
    # request head, and finish their request after it.
    signalled = asyncio.Event()
    late = []
    for i in range(6):
        data = request_bytes("/v1/completions", drain_body(i, False))
        split = 0 if i % 3 == 0 else 40
        conn = await connect(srv.host, srv.port)
        conn[1].write(data[:split])
        late.append(asyncio.ensure_future(finish_late(conn, data, split, signalled)))
    # New clients every 10 ms, from 0.1 s before the signal to 1 s after it.
    arriving = []
    t_term = None
    for i in range(110):
        arriving.append(asyncio.ensure_future(arrive(i)))
        if i == 10:
            t_term = time.monotonic()
            srv.signal(signal.SIGTERM)
            signalled.set()
        await asyncio.sleep(0.01)
    arrivals = await asyncio.gather(*arriving, *late)
    results = await asyncio.gather(*inflight)
    rc = await asyncio.to_thread(srv.wait, drain_s + 10)
    t_exit = time.monotonic() - t_term
    return bodies, results, arrivals, t_term, rc, t_exit


async def references(srv, keys):
    async def one(key):
        p, m = key
        body = {"model": STORIES, "prompt": NORMAL_PROMPTS[p], "max_tokens": m, "temperature": 0,
                "ignore_eos": True}
        r = await fetch(srv.host, srv.port, request_bytes("/v1/completions", body), 120 * srv.slow)
        assert r.status == 200, r.body
        return r.json()["choices"][0]["text"]
    return await asyncio.gather(*[one(k) for k in keys])


def test_sigterm_under_load(start_server, stories260k_gguf, brisk, report):
    drain_s = 30 * brisk.slow_factor
    srv = start_server(stories260k_gguf, "--max-num-seqs", "4", "--drain-timeout", str(drain_s))
    # The references, all at once (batch invariance: the same as one by one).
    keys = sorted({drain_key(i) for i in range(2 * len(NORMAL_PROMPTS))})
    refs = dict(zip(keys, asyncio.run(references(srv, keys))))
    bodies, results, arrivals, t_term, rc, t_exit = asyncio.run(sigterm_scenario(srv, drain_s))
    # Every request accepted before the signal finished with its whole output.
    for k, (b, r) in enumerate(zip(bodies, results)):
        got = drain_result(r, b)
        assert isinstance(got, tuple), f"in-flight request {k}: {got}"
        text, n_tok = got
        assert n_tok == b["max_tokens"], (k, n_tok)
        assert text == refs[drain_key(k)], f"in-flight request {k} differs"
    # Later arrivals: refused, or a 503, or (accepted just before) a whole answer.
    refused = served = unavailable = 0
    for t, b, r in arrivals:
        if isinstance(r, Exception) or r.status == 0:
            assert isinstance(r, Exception) or r.raw == b"", r.raw[:200]
            refused += 1
            continue
        if r.status == 503:
            assert r.json()["error"]["message"], r.body
            unavailable += 1
            continue
        assert b is not None, f"a request sent after the signal got {r.status}: {r.body[:200]!r}"
        got = drain_result(r, b)
        # The signal is delivered, and acted on by the loop, a moment after
        # kill(): a client connecting in that moment is still accepted.
        assert isinstance(got, tuple) and t < t_term + 0.25 * srv.slow, \
            f"arrival at {t - t_term:+.3f} s: {got}"
        assert got == (refs[(NORMAL_PROMPTS.index(b["prompt"]), b["max_tokens"])], b["max_tokens"])
        served += 1
    assert refused > 0 and unavailable > 0, (refused, unavailable)
    assert rc == 0, f"exit {rc}"
    assert t_exit < drain_s
    report(f"faults: SIGTERM with 16 requests in flight: all completed in full; {len(arrivals)} arrivals "
           f"({served} served before the signal, {unavailable} got 503, {refused} refused); exit 0 "
           f"after {t_exit:.2f} s")
    srv.stop()

