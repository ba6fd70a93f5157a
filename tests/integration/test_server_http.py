"""`brisk serve` at the HTTP level, over raw sockets: keep-alive, pipelining,
malformed requests, limits (404/405/413/414/431), API keys, health and
readiness, clients that go away mid-request, the 429 of a full queue, and
draining on SIGTERM/SIGINT.

stories260K serves the protocol tests (it answers in milliseconds); SmolLM2 is
used where a request must last long enough to be cut off or drained.
"""

import json
import signal
import socket
import time

import openai
import pytest
from conftest import metric_value
from test_stories260k import GOLDEN_TEXT

GOLDEN = GOLDEN_TEXT.decode()


def raw_request(method, target, headers=(), body=b"", host=True):
    lines = [f"{method} {target} HTTP/1.1"] + (["Host: test"] if host else [])
    lines += [f"{k}: {v}" for k, v in headers]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def completion_request(**body):
    body.setdefault("temperature", 0)
    data = json.dumps(body).encode()
    return raw_request("POST", "/v1/completions", [("Content-Type", "application/json")], data)


def error_of(resp, status):
    assert resp.status == status, (resp.status, resp.body)
    err = resp.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    return err


# ---- connections ----------------------------------------------------------------


def test_keep_alive(stories_server):
    conn = stories_server.raw()
    try:
        for path in ("/health", "/v1/models", "/health"):
            conn.send(raw_request("GET", path))
            r = conn.read_response()
            assert r.status == 200, (path, r.status, r.body)
            assert r.headers.get("connection", "keep-alive").lower() != "close"
        conn.send(completion_request(prompt=[1], max_tokens=8))
        assert GOLDEN.startswith(conn.read_response().json()["choices"][0]["text"])
        assert not conn.is_closed(timeout=0.2)
    finally:
        conn.close()


def test_pipelining_answers_in_order(stories_server):
    conn = stories_server.raw()
    try:
        conn.send(raw_request("GET", "/health")
                  + completion_request(prompt=[1], max_tokens=12)
                  + raw_request("GET", "/v1/models")
                  + completion_request(prompt=[1], max_tokens=3, stream=True)
                  + raw_request("GET", "/nope"))
        r1 = conn.read_response()
        r2 = conn.read_response()
        r3 = conn.read_response()
        status, _, headers = conn.read_head()
        events = list(conn.iter_sse(headers))
        r5 = conn.read_response()
    finally:
        conn.close()
    assert r1.status == 200
    assert r2.status == 200 and r2.json()["object"] == "text_completion"
    text12 = r2.json()["choices"][0]["text"]
    assert GOLDEN.startswith(text12) and text12
    assert r3.status == 200 and r3.json()["object"] == "list"
    assert status == 200 and events[-1] == "[DONE]"
    streamed = "".join(c["text"] for e in events[:-1] for c in json.loads(e)["choices"])
    assert text12.startswith(streamed) and streamed
    assert r5.status == 404


@pytest.mark.parametrize("data", [
    b"GARBAGE\r\n\r\n",
    b"GET /health HTTP/1.1\nHost: x\n\n",                       # bare LF
    b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n",                # space before the colon
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",             # smuggling shape
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Bad\x01: y\r\n\r\n",
], ids=["garbage", "bare-lf", "space-colon", "bad-length", "length-and-chunked",
        "two-lengths", "bad-chunk", "ctl-in-name"])
def test_malformed_request_400_and_close(stories_server, data):
    conn = stories_server.raw()
    try:
        conn.send(data)
        r = conn.read_response()
        assert r.status == 400, (r.status, r.body)
        assert conn.is_closed(timeout=5), "connection left open after a malformed request"
    finally:
        conn.close()
    stories_server.check_alive()


def test_unsupported_http_version(stories_server):
    conn = stories_server.raw()
    try:
        conn.send(b"GET /health HTTP/3.0\r\nHost: x\r\n\r\n")
        r = conn.read_response()
        assert r.status in (400, 505), r.status
    finally:
        conn.close()


def test_request_id_echoed(stories_server):
    r = stories_server.request("GET", "/health", headers={"X-Request-Id": "trace-abc-123"})
    assert r.headers.get("x-request-id") == "trace-abc-123"
    r = stories_server.request("GET", "/health")
    assert r.headers.get("x-request-id")
    # Not visible ASCII: replaced by the server's own id, never echoed.
    r = stories_server.request("GET", "/health", headers={"X-Request-Id": "a" * 65})
    assert r.headers.get("x-request-id") and r.headers["x-request-id"] != "a" * 65


# ---- status codes ------------------------------------------------------------------


def test_404_unknown_path(stories_server):
    for path in ("/nope", "/v1", "/v1/completions/x", "/V1/MODELS"):
        error_of(stories_server.request("GET", path), 404)


@pytest.mark.parametrize("method,path,allowed", [
    ("GET", "/v1/completions", "POST"),
    ("PUT", "/v1/chat/completions", "POST"),
    ("POST", "/v1/models", "GET"),
    ("DELETE", "/health", "GET"),
    ("POST", "/metrics", "GET"),
])
def test_405_with_allow(stories_server, method, path, allowed):
    r = stories_server.request(method, path, body=b"{}" if method != "GET" else None)
    error_of(r, 405)
    allow = [m.strip() for m in r.headers.get("allow", "").split(",")]
    assert allowed in allow, r.headers


def test_414_uri_too_long(stories_server):
    conn = stories_server.raw()
    try:
        conn.send(raw_request("GET", "/" + "a" * 10000))
        assert conn.read_response().status == 414
    finally:
        conn.close()
    stories_server.check_alive()


def test_431_too_many_headers(stories_server):
    conn = stories_server.raw()
    try:
        conn.send(raw_request("GET", "/health", [(f"X-H{i}", "v") for i in range(150)]))
        assert conn.read_response().status == 431
    finally:
        conn.close()


def test_431_header_too_large(stories_server):
    conn = stories_server.raw()
    try:
        conn.send(raw_request("GET", "/health", [("X-Big", "b" * 40000)]))
        assert conn.read_response().status == 431
    finally:
        conn.close()


@pytest.fixture(scope="module")
def limits_server(start_server, stories260k_gguf):
    srv = start_server(stories260k_gguf, "--max-body-bytes", "4096", "--max-header-bytes",
                       "2048", "--max-headers", "20")
    yield srv
    srv.stop()


def test_413_body_too_large(limits_server):
    small = json.dumps({"prompt": [1], "max_tokens": 2, "x": " " * 3900}).encode()
    assert len(small) < 4096
    r = limits_server.post("/v1/completions", small,
                           headers={"Content-Type": "application/json"})
    assert r.status == 200, r.body

    big = json.dumps({"prompt": [1], "max_tokens": 2, "x": " " * 5000}).encode()
    conn = limits_server.raw()
    try:
        conn.send(raw_request("POST", "/v1/completions", [("Content-Type", "application/json")],
                              big))
        error_of(conn.read_response(), 413)
    finally:
        conn.close()

    # Declared too large: answered from the head, without waiting for the body.
    conn = limits_server.raw()
    try:
        conn.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n"
                  b"\r\n")
        assert conn.read_response().status == 413
    finally:
        conn.close()

    # Chunked: the total counts.
    conn = limits_server.raw()
    try:
        chunks = b"".join(b"400\r\n" + b" " * 1024 + b"\r\n" for _ in range(5))
        conn.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  b"\r\n" + chunks + b"0\r\n\r\n")
        assert conn.read_response().status == 413
    finally:
        conn.close()
    limits_server.check_alive()


def test_431_configured_limits(limits_server):
    for headers in ([(f"X-H{i}", "v") for i in range(30)], [("X-Big", "b" * 3000)]):
        conn = limits_server.raw()
        try:
            conn.send(raw_request("GET", "/health", headers))
            assert conn.read_response().status == 431
        finally:
            conn.close()
    assert limits_server.request("GET", "/health", headers={"X-Ok": "x" * 1000}).status == 200


def test_body_split_across_writes(stories_server):
    conn = stories_server.raw()
    try:
        data = completion_request(prompt=[1], max_tokens=4)
        for i in range(0, len(data), 7):
            conn.send(data[i:i + 7])
            time.sleep(0.002)
        r = conn.read_response()
        assert r.status == 200 and GOLDEN.startswith(r.json()["choices"][0]["text"])
    finally:
        conn.close()


# ---- health ------------------------------------------------------------------------


def test_health_endpoints(stories_server):
    for path in ("/health", "/livez", "/readyz"):
        r = stories_server.request("GET", path)
        assert r.status == 200, (path, r.status, r.body)


def test_access_log_line_per_request(stories_server):
    def n_lines():
        return sum("/livez" in ln for ln in stories_server.log().splitlines())

    before = n_lines()
    for _ in range(3):
        assert stories_server.request("GET", "/livez").status == 200
    deadline = time.monotonic() + 5
    while n_lines() < before + 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert n_lines() == before + 3, stories_server.log()[-2000:]


def test_503_while_loading(start_server, smollm2_path, report):
    # f32 weights are converted at load time, which keeps the model loading for a
    # while after the listener is up; on a fast machine it may still be ready first.
    srv = start_server(smollm2_path, "--weights", "f32", wait_ready=False)
    first = srv.request("GET", "/health")
    assert first.status in (200, 503), first.status
    if first.status == 503:
        ready = srv.request("GET", "/readyz").status
        live = srv.request("GET", "/livez").status
        post = srv.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1})
        still_loading = srv.request("GET", "/health").status == 503
        assert live == 200
        assert ready in (200, 503)
        if still_loading:
            assert ready == 503
            error_of(post, 503)
        report(f"serve: /health 503 while loading (still loading after 3 requests: "
               f"{still_loading})")
    else:
        report("serve: the model was ready before the first /health")
    srv.wait_ready()
    assert srv.request("GET", "/readyz").status == 200
    srv.stop()


# ---- API keys ------------------------------------------------------------------------

KEY = "sk-brisk-file-5c2a9e"
WRONG = "sk-wrong-77f1d0"


@pytest.fixture(scope="module")
def auth_server(start_server, stories260k_gguf, tmp_path_factory):
    key_file = tmp_path_factory.mktemp("key") / "api-key"
    key_file.write_text(KEY + "\n")
    srv = start_server(stories260k_gguf, "--api-key-file", key_file, "--served-model-name",
                       "my-model")
    srv.api_key = KEY
    yield srv
    srv.stop()


def test_api_key_required(auth_server):
    for headers in ({"Authorization": None}, {"Authorization": f"Bearer {WRONG}"},
                    {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"},
                    {"Authorization": f"Bearer {KEY[:-1]}"}, {"Authorization": f"Bearer {KEY}x"}):
        for method, path, body in (("GET", "/v1/models", None),
                                   ("POST", "/v1/completions", {"prompt": [1]}),
                                   ("POST", "/v1/chat/completions", {"messages": []})):
            r = auth_server.request(method, path, body, headers=headers)
            err = error_of(r, 401)
            assert "bearer" in r.headers.get("www-authenticate", "").lower()
            assert KEY not in r.text and WRONG not in r.text, r.text
            assert err["type"]
    r = auth_server.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status == 200
    assert [m["id"] for m in r.json()["data"]] == ["my-model"]


def test_api_key_open_endpoints(auth_server):
    for path in ("/health", "/livez", "/readyz", "/metrics"):
        r = auth_server.request("GET", path, headers={"Authorization": None})
        assert r.status == 200, (path, r.status)


def test_api_key_with_client(auth_server):
    client = auth_server.client()
    r = client.completions.create(model="my-model", prompt=[1], max_tokens=10, temperature=0)
    assert GOLDEN.startswith(r.choices[0].text) and r.model == "my-model"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="stories260K", prompt=[1], max_tokens=1)
    with pytest.raises(openai.AuthenticationError) as ei:
        auth_server.client(api_key=WRONG).models.list()
    assert ei.value.status_code == 401


def test_api_key_not_logged(auth_server):
    auth_server.request("GET", "/v1/models", headers={"Authorization": f"Bearer {WRONG}"})
    auth_server.request("GET", "/v1/models", headers={"Authorization": None})
    time.sleep(0.2)
    log = auth_server.log()
    assert KEY not in log and KEY[:12] not in log
    assert WRONG not in log


def test_metrics_auth(start_server, stories260k_gguf):
    srv = start_server(stories260k_gguf, "--metrics-auth", api_key="sk-metrics-0d9c")
    try:
        error_of(srv.request("GET", "/metrics", headers={"Authorization": None}), 401)
        assert srv.request("GET", "/metrics").status == 200
        assert srv.request("GET", "/health", headers={"Authorization": None}).status == 200
        assert "sk-metrics-0d9c" not in srv.log()
    finally:
        srv.stop()


# ---- clients that go away, a full queue -----------------------------------------------
#
# One running slot and one queue place on SmolLM2 (~100 tokens/s on 2 cores), so
# a request with a large max_tokens runs for many seconds unless it is cut off.

LONG = {"prompt": "Once upon a time", "max_tokens": 1500, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def queue_server(start_server, smollm2_path):
    srv = start_server(smollm2_path, "--max-num-seqs", "1", "--max-queued-requests", "1",
                       "--ctx", "2048")
    yield srv
    srv.stop()


def start_running(srv):
    """A long streaming request, running once its first event has arrived."""
    conn, status, headers = srv.stream("/v1/completions", dict(LONG, stream=True))
    assert status == 200
    events = conn.iter_sse(headers)
    for _ in range(2):
        assert next(events) != "[DONE]"
    return conn


def wait_for(srv, running, waiting, timeout=10):
    got = srv.wait_gauges(running, waiting, timeout)
    assert got == (running, waiting), f"running/waiting: want {(running, waiting)}, got {got}"


def aborts(srv):
    return metric_value(srv.metrics(), "vllm:request_success_total", finished_reason="abort")


def test_disconnect_mid_stream(queue_server):
    wait_for(queue_server, 0, 0)
    n_abort = aborts(queue_server)
    conn = start_running(queue_server)
    wait_for(queue_server, 1, 0)
    conn.close()
    wait_for(queue_server, 0, 0, timeout=5)
    assert aborts(queue_server) == n_abort + 1
    r = queue_server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4})
    assert r.status == 200, r.body


def test_disconnect_non_streaming(queue_server):
    wait_for(queue_server, 0, 0)
    conn = queue_server.send_json("/v1/completions", LONG)
    wait_for(queue_server, 1, 0)
    time.sleep(0.3)
    conn.close()
    wait_for(queue_server, 0, 0, timeout=5)


def test_half_close_cancels(queue_server):
    """A client that shuts down its sending side while waiting is treated as gone."""
    wait_for(queue_server, 0, 0)
    conn = queue_server.send_json("/v1/completions", dict(LONG, stream=True))
    wait_for(queue_server, 1, 0)
    conn.sock.shutdown(socket.SHUT_WR)
    wait_for(queue_server, 0, 0, timeout=5)
    conn.close()


def test_disconnect_while_queued(queue_server):
    wait_for(queue_server, 0, 0)
    running = start_running(queue_server)
    try:
        queued = queue_server.send_json("/v1/completions", dict(LONG, stream=True))
        wait_for(queue_server, 1, 1)
        queued.close()
        wait_for(queue_server, 1, 0, timeout=5)
    finally:
        running.close()
    wait_for(queue_server, 0, 0, timeout=5)


def test_429_when_queue_full(queue_server):
    wait_for(queue_server, 0, 0)
    running = start_running(queue_server)
    queued = None
    try:
        queued = queue_server.send_json("/v1/completions", dict(LONG, stream=True))
        wait_for(queue_server, 1, 1)
        for body in (dict(LONG), dict(LONG, stream=True)):
            r = queue_server.post("/v1/completions", body)
            err = error_of(r, 429)
            assert err["message"]
            assert int(r.headers["retry-after"]) >= 0, r.headers
        with pytest.raises(openai.RateLimitError):
            queue_server.client().completions.create(model="SmolLM2-135M-Instruct.Q4_1",
                                                     prompt="Hi", max_tokens=2)
        # Health stays answerable while saturated.
        assert queue_server.request("GET", "/health").status == 200
    finally:
        running.close()
        if queued:
            queued.close()
    wait_for(queue_server, 0, 0, timeout=5)
    r = queue_server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    assert r.status == 200, r.body


def test_queued_request_runs_after_the_running_one(queue_server):
    wait_for(queue_server, 0, 0)
    # Long enough (~1 s of decoding; fewer tokens in a slower sanitized build)
    # that the second request is seen waiting behind the first.
    body = {"prompt": "Hi", "max_tokens": int(150 / queue_server.slow), "ignore_eos": True,
            "temperature": 0}
    first = queue_server.send_json("/v1/completions", body)
    wait_for(queue_server, 1, 0)
    second = queue_server.send_json("/v1/completions", body)
    try:
        a, b = first.read_response(), second.read_response()
    finally:
        first.close()
        second.close()
    assert a.status == b.status == 200
    assert a.json()["choices"][0]["text"] == b.json()["choices"][0]["text"]


# ---- draining ------------------------------------------------------------------------


def refused_or_503(srv, method="GET", path="/readyz", body=None):
    try:
        r = srv.request(method, path, body, timeout=5)
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    except OSError:
        return True
    return r.status == 503


def test_sigterm_drains_in_flight_stream(start_server, smollm2_path):
    srv = start_server(smollm2_path, "--drain-timeout", "120", "--ctx", "2048")
    # Long enough to still be streaming while /readyz is probed: ~2.5 s of
    # decoding, so a sanitized build (slow) needs fewer tokens for the same time.
    n_tok = int(300 / srv.slow)
    conn, status, headers = srv.stream("/v1/completions", {
        "prompt": "Once upon a time", "max_tokens": n_tok, "temperature": 0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200
    events = conn.iter_sse(headers)
    got = [next(events)]
    srv.signal(signal.SIGTERM)
    deadline = time.monotonic() + 3 * srv.slow
    while not refused_or_503(srv):
        assert time.monotonic() < deadline, "/readyz still 200 after SIGTERM"
        time.sleep(0.02)
    assert refused_or_503(srv, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 1})
    assert srv.proc.poll() is None, "exited before the in-flight request finished"
    got += list(events)
    conn.close()
    assert got[-1] == "[DONE]"
    chunks = [json.loads(e) for e in got[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] == n_tok
    text = "".join(c["text"] for ch in chunks for c in ch["choices"])
    assert len(text) > n_tok  # the whole story arrived
    assert [c["finish_reason"] for ch in chunks for c in ch["choices"]
            if c["finish_reason"]] == ["length"]
    assert srv.stop(timeout=30) == 0


def test_sigterm_idle_exits_promptly(start_server, stories260k_gguf):
    srv = start_server(stories260k_gguf)
    t0 = time.monotonic()
    srv.stop(timeout=10)
    assert time.monotonic() - t0 < 10 * srv.slow


def test_drain_timeout_cuts_long_requests(start_server, smollm2_path):
    srv = start_server(smollm2_path, "--drain-timeout", "1", "--ctx", "2048")
    conn = start_running(srv)
    t0 = time.monotonic()
    srv.signal(signal.SIGTERM)
    rc = srv.wait(timeout=15)
    conn.close()
    assert rc is not None, "did not exit after the drain timeout"
    assert time.monotonic() - t0 < 15 * srv.slow
    srv.check_log()


def test_second_sigint_exits_at_once(start_server, smollm2_path):
    srv = start_server(smollm2_path, "--drain-timeout", "120", "--ctx", "2048")
    conn = start_running(srv)
    srv.signal(signal.SIGINT)
    time.sleep(0.5)
    assert srv.proc.poll() is None, "a request was in flight: the first SIGINT must drain"
    t0 = time.monotonic()
    srv.signal(signal.SIGINT)
    rc = srv.wait(timeout=5)
    conn.close()
    assert rc is not None, "still running 5 s after the second SIGINT"
    assert time.monotonic() - t0 < 5 * srv.slow
    srv.check_log()
