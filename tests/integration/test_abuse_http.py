"""Abuse of `brisk serve`'s HTTP layer over raw sockets (issue 7): request
smuggling shapes, oversize heads and bodies, other protocols and versions,
pipelined floods, slow clients, clients that never read, connection floods.

Every case expects its status (or a close where no answer is possible) and a
closed connection, and a canary -- a real greedy /v1/completions on stories260K,
on its own connection, whose text is known -- must be served correctly after
every case and, where a case holds connections open, during it too.

stories260K serves everything here: it answers in milliseconds, so the cases
are about the HTTP layer, not the engine. The servers run with short timeouts
(below) so that the slow-client cases take seconds, not minutes.
"""

import http.client
import json
import random
import socket
import threading
import time

import pytest
from conftest import metric_value
from test_stories260k import GOLDEN_TEXT

GOLDEN = GOLDEN_TEXT.decode()

HEAD_MS = 1500        # --head-timeout-ms: the whole head must arrive within it
BODY_IDLE_MS = 1000   # --body-timeout-ms: the longest gap between body bytes
BODY_TOTAL_MS = 2500  # --body-total-timeout-ms: the whole body must arrive within it
WRITE_QUEUE = 16384   # --max-write-queue-bytes: unsent stream bytes before a disconnect
MAX_CONNS = 16        # --max-connections of the flood server
PER_CONN = 100        # --max-requests-per-conn of the flood server
MAX_BODY = 4 << 20    # the default --max-body-bytes
MAX_HEAD = 32 << 10   # the default --max-header-bytes
MAX_HEADERS = 100     # the default --max-headers
MAX_URI = 8 << 10     # the request-target limit (not configurable)

# The server's RSS may grow by at most this much over a flood (non-sanitized
# builds only: ASan's quarantine keeps up to 256 MiB of freed memory resident).
RSS_BOUND_KIB = 48 << 10


@pytest.fixture(scope="module")
def srv(start_server, stories260k_gguf):
    s = start_server(stories260k_gguf, "--head-timeout-ms", HEAD_MS, "--body-timeout-ms",
                     BODY_IDLE_MS, "--body-total-timeout-ms", BODY_TOTAL_MS,
                     "--max-write-queue-bytes", WRITE_QUEUE, "--max-requests-per-conn", 20000)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def flood_srv(start_server, stories260k_gguf):
    s = start_server(stories260k_gguf, "--max-connections", MAX_CONNS, "--max-requests-per-conn",
                     PER_CONN)
    yield s
    s.stop()


class Canary:
    """A greedy completion of BOS on a connection of its own: the text must be the
    first tokens of the stories260K golden, the same every time."""

    BODY = json.dumps({"prompt": [1], "max_tokens": 12, "temperature": 0}).encode()

    def __init__(self, srv):
        self.srv = srv
        self.text = None
        self.served = 0

    def request_bytes(self):
        return (b"POST /v1/completions HTTP/1.1\r\nHost: canary\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                % len(self.BODY) + self.BODY)

    def check_response(self, r, what):
        assert r.status == 200, f"canary {what}: {r.status} {r.body[:300]!r}"
        j = r.json()
        text = j["choices"][0]["text"]
        assert text and GOLDEN.startswith(text), f"canary {what}: wrong text {text!r}"
        assert j["usage"]["completion_tokens"] == 12, f"canary {what}: {j['usage']}"
        if self.text is None:
            self.text = text
        assert text == self.text, f"canary {what}: {text!r} != {self.text!r}"
        self.served += 1

    def check(self, what="after"):
        """On a fresh connection."""
        r = self.srv.post("/v1/completions", self.BODY, timeout=30,
                          headers={"Content-Type": "application/json"})
        self.check_response(r, what)

    def check_on(self, conn, what):
        """On an open keep-alive RawConn."""
        conn.send(self.request_bytes())
        self.check_response(conn.read_response(), what)


@pytest.fixture(scope="module")
def canary(srv):
    c = Canary(srv)
    c.check("first")
    return c


# ---- helpers ----------------------------------------------------------------------


def read_answer(conn):
    """The next response, or None when the server closed (or reset) first."""
    try:
        return conn.read_response()
    except (EOFError, ConnectionResetError, BrokenPipeError):
        return None


def check_error_close(conn, status, what):
    """`status` with an OpenAI error body and Connection: close, then EOF."""
    r = read_answer(conn)
    assert r is not None, f"{what}: closed without a response (want {status})"
    assert r.status == status, f"{what}: {r.status} {r.body[:300]!r} (want {status})"
    assert r.headers.get("connection", "").lower() == "close", f"{what}: {r.headers}"
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["message"], err
    assert conn.is_closed(timeout=5), f"{what}: connection left open after {status}"
    return r


def one_shot(srv, canary, data, status, what):
    """Sends data on a new connection, expects status + close, then the canary."""
    conn = srv.raw(timeout=10)
    try:
        conn.send(data)
        check_error_close(conn, status, what)
    finally:
        conn.close()
    srv.check_alive()
    canary.check(f"after {what}")


def rss_kib(srv):
    with open(f"/proc/{srv.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def sanitized(srv):
    return srv.slow > 1


def post_head(length=None, chunked=False, extra=b""):
    h = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    if length is not None:
        h += b"Content-Length: %d\r\n" % length
    if chunked:
        h += b"Transfer-Encoding: chunked\r\n"
    return h + extra + b"\r\n"


GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n"
POST = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"

# ---- request smuggling shapes ----------------------------------------------------------
#
# (id, bytes, status). Each is answered with its status and the connection closed:
# once framing is in doubt nothing after it on the connection can be trusted.

SMUGGLING = [
    ("cl-and-te", POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("te-and-cl", POST + b"Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n", 400),
    ("cl-twice-same", POST + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400),
    ("cl-twice-different", POST + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}x", 400),
    ("cl-list-same", POST + b"Content-Length: 2, 2\r\n\r\n{}", 400),
    ("cl-list-different", POST + b"Content-Length: 2, 3\r\n\r\n{}x", 400),
    ("cl-plus", POST + b"Content-Length: +5\r\n\r\nhello", 400),
    ("cl-negative", POST + b"Content-Length: -1\r\n\r\n", 400),
    ("cl-underscore", POST + b"Content-Length: 1_0\r\n\r\n0123456789", 400),
    ("cl-hex", POST + b"Content-Length: 0x10\r\n\r\n", 400),
    ("cl-huge", POST + b"Content-Length: 99999999999999999999\r\n\r\n", 400),
    ("cl-empty", POST + b"Content-Length: \r\n\r\n", 400),
    ("cl-space-inside", POST + b"Content-Length: 1 0\r\n\r\n0123456789", 400),
    ("cl-space-before-colon", POST + b"Content-Length : 2\r\n\r\n{}", 400),
    ("te-gzip", POST + b"Transfer-Encoding: gzip\r\n\r\n", 400),
    ("te-identity", POST + b"Transfer-Encoding: identity\r\n\r\n", 400),
    ("te-chunked-identity", POST + b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400),
    ("te-xchunked", POST + b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 400),
    ("te-chunkedx", POST + b"Transfer-Encoding: chunkedx\r\n\r\n0\r\n\r\n", 400),
    ("te-twice", POST + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", 400),
    ("te-space-before-colon", POST + b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400),
    ("te-tab-before-colon", POST + b"Transfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n", 400),
    ("te-vertical-tab", POST + b"Transfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n", 400),
    ("te-http10", b"POST /v1/completions HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"2\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk-negative", CHUNKED + b"-1\r\nx\r\n0\r\n\r\n", 400),
    ("chunk-overflow", CHUNKED + b"ffffffffffffffffff\r\nx\r\n0\r\n\r\n", 400),
    ("chunk-not-hex", CHUNKED + b"g\r\nx\r\n0\r\n\r\n", 400),
    ("chunk-0x", CHUNKED + b"0x2\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk-empty-size", CHUNKED + b"\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk-size-space", CHUNKED + b"2 \r\n{}\r\n0\r\n\r\n", 400),
    ("chunk-no-crlf", CHUNKED + b"2\r\n{}0\r\n\r\n", 400),
    ("chunk-longer-than-size", CHUNKED + b"1\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk-bare-lf", CHUNKED + b"2\n{}\n0\n\n", 400),
    ("chunk-ext-empty", CHUNKED + b"2;\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk-ext-lf", CHUNKED + b"2;a=b\n{}\r\n0\r\n\r\n", 400),
    ("chunk-ext-bad-quote", CHUNKED + b"2;a=\"b\\\"c\"\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk-ext-trailing-semicolons", CHUNKED + b"2;" + b"a=b;" * 5000 + b"\r\n{}\r\n0\r\n\r\n",
     400),
    ("bare-cr-line-ends", b"GET /health HTTP/1.1\rHost: x\r\r", 400),
    ("bare-cr-in-value", GET_HEALTH + b"X: a\rb\r\n\r\n", 400),
    ("bare-cr-between-headers", GET_HEALTH + b"X: a\rY: b\r\n\r\n", 400),
    ("bare-lf-header-line", b"GET /health HTTP/1.1\r\nHost: x\nX: y\r\n\r\n", 400),
    ("bare-lf-ending-head", GET_HEALTH + b"\n", 400),
    ("obs-fold-space", GET_HEALTH + b"X-A: a\r\n b\r\n\r\n", 400),
    ("obs-fold-tab", GET_HEALTH + b"X-A: a\r\n\tb\r\n\r\n", 400),
    ("obs-fold-te", POST + b"Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 400),
    ("obs-fold-cl", POST + b"Content-Length: 1\r\n 0\r\n\r\n0123456789", 400),
    ("obs-fold-connection", GET_HEALTH + b"Connection: keep-alive\r\n close\r\n\r\n", 400),
    ("space-before-first-header", b"GET /health HTTP/1.1\r\n Host: x\r\n\r\n", 400),
    ("space-before-colon", GET_HEALTH + b"X-A : a\r\n\r\n", 400),
    ("empty-header-name", GET_HEALTH + b": a\r\n\r\n", 400),
    ("header-without-colon", GET_HEALTH + b"X-A a\r\n\r\n", 400),
    ("nul-in-method", b"G\x00T /health HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("nul-in-target", b"GET /hea\x00lth HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("nul-in-version", b"GET /health HTTP/1.1\x00\r\nHost: x\r\n\r\n", 400),
    ("nul-in-name", GET_HEALTH + b"X\x00A: a\r\n\r\n", 400),
    ("nul-in-value", GET_HEALTH + b"X-A: a\x00b\r\n\r\n", 400),
    ("del-in-value", GET_HEALTH + b"X-A: a\x7fb\r\n\r\n", 400),
    ("high-byte-in-target", b"GET /he\xffalth HTTP/1.1\r\nHost: x\r\n\r\n", 400),
]


@pytest.mark.parametrize("data,status", [c[1:] for c in SMUGGLING], ids=[c[0] for c in SMUGGLING])
def test_smuggling_shapes(srv, canary, data, status):
    one_shot(srv, canary, data, status, "smuggling shape")


def test_obs_fold_dribbled(srv, canary):
    """A fold split across reads at every byte is still seen (the scan keeps its
    state between reads)."""
    data = POST + b"Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n"
    conn = srv.raw(timeout=10)
    try:
        for i in range(len(data)):
            conn.send(data[i:i + 1])
            time.sleep(0.001)
        check_error_close(conn, 400, "dribbled fold")
    finally:
        conn.close()
    canary.check()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_request_in_a_body_is_never_executed(srv, canary, framing):
    """A request hidden in another's body is data: one answer for the outer
    request, the next request on the connection is answered next, and the hidden
    one never shows in the access log."""
    marker = f"smuggled-{framing}-{random.randrange(1 << 30)}"
    inner = (f"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: {marker}\r\n\r\n"
             + canary.request_bytes().decode()).encode()
    if framing == "chunked":
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(inner), inner)
        outer = post_head(chunked=True) + body
    else:
        outer = post_head(len(inner)) + inner
    conn = srv.raw(timeout=10)
    try:
        conn.send(outer + GET_HEALTH + b"X-Request-Id: after-it\r\n\r\n")
        first = conn.read_response()
        assert first.status == 400, (first.status, first.body)  # the body is not JSON
        assert "JSON" in first.json()["error"]["message"], first.body
        second = conn.read_response()
        assert second.status == 200 and second.headers["x-request-id"] == "after-it", \
            (second.status, second.headers)
        # Nothing else comes: the hidden requests were not answered.
        assert not conn.is_closed(timeout=0.3) and conn.buf == b"", conn.buf[:200]
    finally:
        conn.close()
    time.sleep(0.1)
    assert marker not in srv.log()
    canary.check()


def test_chunk_extensions_long_but_valid(srv, canary):
    """64 KiB of well-formed chunk extensions: accepted (they are skipped, never
    buffered) and the request answered as usual. (llhttp 8 refuses a second
    extension after one with a value, ";a=b;c=d", stricter than RFC 9112; names
    alone are fine.)"""
    body = canary.BODY
    ext = b";" + b";".join(b"ext%d" % i for i in range(10000))
    assert len(ext) > 64 << 10
    conn = srv.raw(timeout=10)
    try:
        conn.send(post_head(chunked=True) + b"%x%s\r\n%s\r\n0\r\n\r\n" % (len(body), ext, body))
        canary.check_response(conn.read_response(), "chunk extensions")
    finally:
        conn.close()
    canary.check()


# ---- oversize heads and bodies -----------------------------------------------------------


def get_with(headers=(), target="/health"):
    return (f"GET {target} HTTP/1.1\r\n".encode()
            + b"".join(k.encode() + b": " + v.encode() + b"\r\n" for k, v in headers) + b"\r\n")


def test_header_count_at_and_past_the_limit(srv, canary):
    at = [("Host", "x")] + [(f"X-H{i}", "v") for i in range(MAX_HEADERS - 1)]
    conn = srv.raw()
    try:
        conn.send(get_with(at))
        assert conn.read_response().status == 200
    finally:
        conn.close()
    one_shot(srv, canary, get_with(at + [("X-One-More", "v")]), 431, "one header too many")


def test_header_bytes_at_and_past_the_limit(srv, canary):
    # Counted: the target, every name and every value (not ": " and CRLF).
    fixed = len("/health") + len("Host") + len("x") + len("X-Pad")
    pad = "p" * (MAX_HEAD - fixed)
    conn = srv.raw()
    try:
        conn.send(get_with([("Host", "x"), ("X-Pad", pad)]))
        assert conn.read_response().status == 200
    finally:
        conn.close()
    one_shot(srv, canary, get_with([("Host", "x"), ("X-Pad", pad + "p")]), 431,
             "one head byte too many")


def test_target_at_and_past_the_limit(srv, canary):
    target = "/health?" + "q" * (MAX_URI - len("/health?"))
    conn = srv.raw()
    try:
        conn.send(get_with([("Host", "x")], target))
        assert conn.read_response().status == 200
    finally:
        conn.close()
    one_shot(srv, canary, get_with([("Host", "x")], target + "q"), 414, "target one byte long")


def test_one_giant_header(srv, canary):
    # 200 KiB: refused at 32 KiB; the rest is drained by the lingering close.
    one_shot(srv, canary, get_with([("Host", "x"), ("X-Giant", "g" * (200 << 10))]), 431,
             "giant header")


def test_huge_request_line(srv, canary):
    one_shot(srv, canary, get_with([("Host", "x")], "/" + "a" * (200 << 10)), 414,
             "huge request line")
    one_shot(srv, canary, b"A" * 10000 + b" / HTTP/1.1\r\n\r\n", 400, "huge method")
    one_shot(srv, canary, b"GET / HTTP/1.1" + b"1" * 10000 + b"\r\n\r\n", 400, "huge version")


def test_body_at_and_past_the_limit(srv, canary):
    body = canary.BODY[:-1] + b" " * (MAX_BODY - len(canary.BODY)) + b"}"
    assert len(body) == MAX_BODY
    conn = srv.raw(timeout=30)
    try:
        conn.send(post_head(len(body)) + body)
        canary.check_response(conn.read_response(), "4 MiB body")
    finally:
        conn.close()
    # Declared one byte too large: refused from the head, the body never read.
    one_shot(srv, canary, post_head(MAX_BODY + 1), 413, "body one byte too large")


# ---- other protocols and versions ----------------------------------------------------------

TLS_CLIENT_HELLO = bytes.fromhex(
    "16030100c8010000c40303") + bytes(range(32)) + bytes.fromhex(
    "20") + bytes(range(32, 64)) + bytes.fromhex(
    "0008130213031301c02f0100007300000010000e00000b6578616d706c652e636f6d000b000403000102"
    "000a000a0008001d001700180019002300000016000000170000000d001e001c040305030603080708080809"
    "080a080b080408050806040105010601002b0003020304")

PROTOCOLS = [
    ("tls-client-hello", TLS_CLIENT_HELLO, 400),
    ("http2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00\x00\x00\x00\x00", 400),
    ("ssh-banner", b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", 400),
    ("smtp-ehlo", b"EHLO mail.example.com\r\n", 400),
    ("random-binary", bytes(random.Random(7).randrange(256) for _ in range(4096)), 400),
    ("http09-request", b"GET /\r\n\r\n", 505),
    ("http-1.2", b"GET /health HTTP/1.2\r\nHost: x\r\n\r\n", 505),
    ("http-2.0", b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    ("http-3.0", b"GET /health HTTP/3.0\r\nHost: x\r\n\r\n", 505),
    ("http-1.10", b"GET /health HTTP/1.10\r\nHost: x\r\n\r\n", 400),
    ("http-01.1", b"GET /health HTTP/01.1\r\nHost: x\r\n\r\n", 400),
    ("lowercase-method", b"get /health HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("unknown-method", b"FOO /health HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("tab-after-method", b"GET\t/health HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("space-in-target", b"GET /he alth HTTP/1.1\r\nHost: x\r\n\r\n", 400),
]


@pytest.mark.parametrize("data,status", [c[1:] for c in PROTOCOLS], ids=[c[0] for c in PROTOCOLS])
def test_other_protocols_and_versions(srv, canary, data, status):
    one_shot(srv, canary, data, status, "protocol")


def test_known_method_on_a_route_without_it(srv, canary):
    conn = srv.raw()
    try:
        conn.send(b"PATCH /health HTTP/1.1\r\nHost: x\r\n\r\n")
        r = conn.read_response()
        assert r.status == 405 and "GET" in r.headers.get("allow", ""), (r.status, r.headers)
        # No body to distrust: the connection stays usable.
        canary.check_on(conn, "after a 405")
    finally:
        conn.close()


def test_http09_head_never_completed(srv, canary):
    """`GET /` with a single CRLF: HTTP/0.9 has no headers to wait for, but brisk
    only speaks 1.x, so it waits for a head that never comes: 408 at the head
    timeout."""
    conn = srv.raw(timeout=10)
    try:
        t0 = time.monotonic()
        conn.send(b"GET /\r\n")
        canary.check("during an unfinished HTTP/0.9 request")
        check_error_close(conn, 408, "HTTP/0.9")
        dt = time.monotonic() - t0
        assert HEAD_MS / 1000 - 0.1 <= dt <= HEAD_MS / 1000 + 1.5 * srv.slow, dt
    finally:
        conn.close()
    canary.check()


# ---- pipelined floods --------------------------------------------------------------------


def health_with_id(i):
    return b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: p-%d\r\n\r\n" % i


def read_in_order(conn, first, n):
    for i in range(first, first + n):
        r = conn.read_response()
        assert r.status == 200 and r.headers.get("x-request-id") == f"p-{i}", \
            (i, r.status, r.headers)


def test_500_pipelined_in_one_write(srv, canary):
    conn = srv.raw(timeout=30)
    try:
        conn.send(b"".join(health_with_id(i) for i in range(500)))
        canary.check("during 500 pipelined")
        read_in_order(conn, 0, 500)
        assert not conn.is_closed(timeout=0.2)
        canary.check_on(conn, "after 500 pipelined")
    finally:
        conn.close()


def test_10000_pipelined_in_a_stream(srv, canary, report):
    """10,000 requests written in batches while the answers are read: every one
    answered, in order; the server's memory stays bounded."""
    n, batch = 10000, 250
    rss0 = rss_kib(srv)
    conn = srv.raw(timeout=60)
    errors = []

    def writer():
        try:
            for k in range(0, n, batch):
                conn.send(b"".join(health_with_id(i) for i in range(k, k + batch)))
        except OSError as e:
            errors.append(e)

    t = threading.Thread(target=writer)
    t0 = time.monotonic()
    t.start()
    try:
        read_in_order(conn, 0, n // 2)
        canary.check("during 10,000 pipelined")
        read_in_order(conn, n // 2, n - n // 2)
    finally:
        t.join()
        conn.close()
    dt = time.monotonic() - t0
    assert not errors, errors
    grew = rss_kib(srv) - rss0
    report(f"abuse: 10,000 pipelined GET /health answered in order in {dt:.2f} s; "
           f"server RSS {grew:+d} KiB")
    if not sanitized(srv):
        assert grew < RSS_BOUND_KIB, f"RSS grew by {grew} KiB"
    canary.check()


def test_pipelining_client_that_never_reads(srv, canary, report):
    """Four connections each pipeline 3,000 GET /metrics (17 KB answers) and never
    read. The server stops parsing a connection's next request while 64 KiB of
    answers wait unsent, so only what the socket buffers hold gets produced --
    before that bound brisk queued all 3,000 answers, 50 MB per connection."""
    before = metric_value(srv.metrics(), "brisk_http_requests_total", code="200")
    rss0 = rss_kib(srv)
    conns = []
    req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        for _ in range(4):
            s = socket.socket()
            # A small MSS and receive buffer keep the kernel's share small too
            # (on loopback the send buffer otherwise grows to megabytes).
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect((srv.host, srv.port))
            s.setblocking(False)
            conns.append(s)
            data, sent, t0 = req * 3000, 0, time.monotonic()
            while sent < len(data) and time.monotonic() - t0 < 1.0:
                try:
                    sent += s.send(data[sent:])
                except BlockingIOError:
                    time.sleep(0.01)
        time.sleep(0.5 * srv.slow)
        canary.check("while pipeliners do not read")
        answered = metric_value(srv.metrics(), "brisk_http_requests_total", code="200") - before
        grew = rss_kib(srv) - rss0
    finally:
        for s in conns:
            s.close()
    report(f"abuse: 4 non-reading pipeliners x 3,000 GET /metrics: {answered:.0f} answers "
           f"produced, server RSS {grew:+d} KiB")
    # Per connection: 64 KiB unsent + what the kernel buffers hold (~200 KB at
    # MSS 536) is about 16 answers; 100 is a generous bound, 3,000 the old result.
    assert answered <= 4 * 100 + 2, answered
    if not sanitized(srv):
        assert grew < RSS_BOUND_KIB, f"RSS grew by {grew} KiB"
    canary.check()


def test_flood_closed_at_max_requests_per_conn(flood_srv):
    can = Canary(flood_srv)
    conn = flood_srv.raw(timeout=30)
    try:
        conn.send(b"".join(health_with_id(i) for i in range(500)))
        for i in range(PER_CONN):
            r = conn.read_response()
            assert r.status == 200 and r.headers.get("x-request-id") == f"p-{i}", (i, r.status)
            want = "close" if i == PER_CONN - 1 else "keep-alive"
            assert r.headers.get("connection") == want, (i, r.headers)
        assert conn.is_closed(timeout=5), "not closed after max-requests-per-conn"
        assert conn.buf == b"", conn.buf[:200]
    finally:
        conn.close()
    can.check()


# ---- slow clients -------------------------------------------------------------------------


class Dribbler(threading.Thread):
    """Sends data one byte per `gap` seconds (never finishing when endless) until
    the server answers or closes; records what came back and when."""

    def __init__(self, conn, data, gap, endless=b""):
        super().__init__()
        self.conn, self.data, self.gap, self.endless = conn, data, gap, endless
        self.answer, self.t_end, self.sent = None, None, 0
        self.t0 = time.monotonic()

    def run(self):
        s = self.conn.sock
        s.setblocking(False)
        i = 0
        try:
            while time.monotonic() - self.t0 < 30:
                if i < len(self.data) or self.endless:
                    b = self.data[i:i + 1] if i < len(self.data) else self.endless
                    try:
                        s.send(b)
                        self.sent += 1
                    except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                        pass
                    i += 1
                try:
                    d = s.recv(65536)
                    if not d:
                        break
                    self.conn.buf += d
                    if b"\r\n\r\n" in self.conn.buf:
                        break
                except BlockingIOError:
                    pass
                except ConnectionResetError:
                    break
                time.sleep(self.gap)
        finally:
            self.t_end = time.monotonic()
            s.setblocking(True)


def dribble_case(srv, canary, prefix, data, gap, status, deadline_ms, endless=b"", what=""):
    conn = srv.raw(timeout=10)
    try:
        if prefix:
            conn.send(prefix)
        d = Dribbler(conn, data, gap, endless)
        d.t0 = time.monotonic()
        d.start()
        time.sleep(0.3)
        canary.check(f"during {what}")
        d.join(timeout=30)
        assert not d.is_alive()
        dt = d.t_end - d.t0
        check_error_close(conn, status, what)
        assert deadline_ms / 1000 - 0.1 <= dt <= deadline_ms / 1000 + 1.5 * srv.slow, \
            f"{what}: answered after {dt:.2f} s, want ~{deadline_ms / 1000:.1f} s"
        return d
    finally:
        conn.close()
        canary.check(f"after {what}")


def test_head_dribbled_slower_than_the_timeout(srv, canary):
    head = GET_HEALTH + b"X-Pad: " + b"a" * 60 + b"\r\n\r\n"
    # 100 bytes at 30 ms: 3 s for the head, twice the head timeout.
    d = dribble_case(srv, canary, b"", head, 0.03, 408, HEAD_MS, what="dribbled head")
    assert d.sent < len(head)


def test_endless_head_cut_at_the_head_timeout(srv, canary):
    """A client that keeps sending header bytes (every 20 ms, far below any idle
    timeout) but never ends the head: the head timeout is a total."""
    dribble_case(srv, canary, b"", GET_HEALTH + b"X-Endless: ", 0.02, 408, HEAD_MS,
                 endless=b"z", what="endless head")


def test_body_that_stalls(srv, canary):
    body = canary.BODY
    dribble_case(srv, canary, post_head(len(body)) + body[:5], b"", 0.05, 408, BODY_IDLE_MS,
                 what="stalled body")


def test_body_dribbled_under_the_idle_timeout(srv, canary):
    """One body byte every 300 ms never trips the 1 s idle timeout; the body's
    total deadline still ends it (without one, this client held its connection
    for as long as it liked)."""
    body = canary.BODY
    d = dribble_case(srv, canary, post_head(len(body)), body, 0.3, 408, BODY_TOTAL_MS,
                     what="dribbled body")
    assert d.sent < len(body)


def test_endless_chunk_extension(srv, canary):
    """Chunk-extension bytes are not body bytes: an extension that never ends is
    cut by the body timers, its bytes never buffered."""
    dribble_case(srv, canary, post_head(chunked=True) + b"10;a=", b"", 0.02, 408,
                 BODY_IDLE_MS, endless=b"b", what="endless chunk extension")


# ---- a client that never reads its stream -------------------------------------------------


def test_stream_never_read(srv, canary, report):
    """Four long streamed choices to a client that reads nothing: once more than
    --max-write-queue-bytes wait unsent the connection is closed and the
    sequences cancelled; the canary is served meanwhile and the KV cache goes
    back to idle."""
    s0 = srv.metrics()
    aborts0 = metric_value(s0, "vllm:request_success_total", finished_reason="abort")
    gen0 = metric_value(s0, "vllm:generation_tokens_total")
    body = json.dumps({"prompt": [1], "max_tokens": 480, "n": 4, "ignore_eos": True,
                       "temperature": 0, "stream": True}).encode()
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((srv.host, srv.port))
    try:
        s.sendall(post_head(len(body)) + body)
        canary.check("while a stream is not read")
        deadline = time.monotonic() + 20 * srv.slow
        while True:
            m = srv.metrics()
            aborted = metric_value(m, "vllm:request_success_total", finished_reason="abort")
            if aborted > aborts0 or time.monotonic() > deadline:
                break
            canary.check("while a stream is not read")
            time.sleep(0.05)
        assert aborted == aborts0 + 1, "the unread stream was not cut off"
    finally:
        s.close()
    assert "client is not reading" in srv.log()
    assert srv.wait_gauges(0, 0) == (0, 0)
    deadline = time.monotonic() + 5 * srv.slow
    while metric_value(srv.metrics(), "vllm:kv_cache_usage_perc") != 0:
        assert time.monotonic() < deadline, "KV usage not back to idle"
        time.sleep(0.05)
    generated = metric_value(srv.metrics(), "vllm:generation_tokens_total") - gen0
    report(f"abuse: unread stream cut after {generated:.0f} of 1920 tokens "
           f"(--max-write-queue-bytes {WRITE_QUEUE})")
    assert generated < 4 * 480
    canary.check()


# ---- connection floods ---------------------------------------------------------------------


def wait_for_slot(srv):
    """Waits until the server has noticed closed connections and a new one is
    served (it answers 503 until then)."""
    deadline = time.monotonic() + 5 * srv.slow
    while True:
        try:
            if srv.request("GET", "/health").status == 200:
                return
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
            pass  # still over the cap: a refused connection may be reset, not answered
        assert time.monotonic() < deadline, "connection slots not released"
        time.sleep(0.05)


def test_connection_flood_beyond_the_cap(flood_srv, report):
    """16 connection slots: 15 busy keep-alive clients and the canary's take them
    all; 48 more connections each get 503 and a close (beyond 64 rejections in
    flight at once they would be closed without an answer); the holders and the
    canary keep working; once they leave, new connections are accepted again."""
    srv = flood_srv
    can = Canary(srv)
    holders, extras = [], []
    try:
        for _ in range(MAX_CONNS - 1):
            c = srv.raw(timeout=10)
            c.send(GET_HEALTH + b"\r\n")
            assert c.read_response().status == 200
            holders.append(c)
        canary_conn = srv.raw(timeout=10)
        holders.append(canary_conn)
        can.check_on(canary_conn, "with every slot taken")
        refused = 0
        for _ in range(48):
            extras.append(srv.raw(timeout=10))  # they send nothing; the server speaks first
        for c in extras:
            r = read_answer(c)
            if r is not None:
                assert r.status == 503 and r.headers.get("connection") == "close", r.status
                refused += 1
            assert c.is_closed(timeout=5)
        for c in holders[:-1]:
            c.send(GET_HEALTH + b"\r\n")
            assert c.read_response().status == 200
        can.check_on(canary_conn, "during the flood")
    finally:
        for c in holders + extras:
            c.close()
    report(f"abuse: connection flood: {refused}/48 over the cap answered 503, the rest closed")
    assert refused == 48  # fewer than 64 in flight: every one is answered
    # The slots come back: a full set of new connections works.
    deadline = time.monotonic() + 5 * srv.slow
    again = []
    try:
        for _ in range(MAX_CONNS):
            while True:
                c = srv.raw(timeout=10)
                c.send(GET_HEALTH + b"\r\n")
                r = read_answer(c)
                if r is not None and r.status == 200:
                    again.append(c)
                    break
                c.close()  # a slot not yet released: try again
                assert time.monotonic() < deadline, "slots not released"
                time.sleep(0.05)
        can.check_on(again[-1], "after the flood")
    finally:
        for c in again:
            c.close()
    srv.check_alive()


def test_connection_flood_many_at_once(flood_srv):
    """200 connections opened at once, each sending a request: at most 16 are
    served, every other one is answered 503 or closed -- none hangs -- and the
    server serves the next client."""
    srv = flood_srv
    conns = []
    try:
        for _ in range(200):
            conns.append(srv.raw(timeout=10))
            try:
                conns[-1].send(GET_HEALTH + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # already refused and closed
        outcomes = {}
        for c in conns:
            r = read_answer(c)
            key = "closed" if r is None else str(r.status)
            outcomes[key] = outcomes.get(key, 0) + 1
        # A rejected client that sent its request may see a reset instead of
        # the 503 (the server closes without reading what it sent).
        assert set(outcomes) <= {"200", "503", "closed"}, outcomes
        assert outcomes.get("200", 0) <= MAX_CONNS, outcomes
        assert outcomes.get("503", 0) + outcomes.get("closed", 0) >= 200 - MAX_CONNS, outcomes
    finally:
        for c in conns:
            c.close()
    wait_for_slot(srv)
    Canary(srv).check()
