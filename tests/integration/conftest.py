"""Shared fixtures for the integration suite: every test starts the real binary.

Environment:
  BRISK_BIN             binary under test (default <repo>/build/bin/brisk)
  BRISK_SHARED_DIR      folder holding models/stories260K.bin (default <repo>/../shared)
  BRISK_CACHE_DIR       fetch-model.sh's cache (default ~/.cache/brisk)
  BRISK_SMOLLM2         explicit path to SmolLM2-135M-Instruct.Q4_1.gguf
  BRISK_REQUIRE_MODELS  1: a missing binary or model fails the run instead of
                        skipping (scripts/test.sh sets it, so CI never passes
                        by skipping everything)

The server tests (test_server_*.py) run `brisk serve` through BriskServer:
start_server starts one with any flags; stories_server and smollm2_server are
module-scoped servers with the default flags.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOLLM2_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Figures (error norms, agreement rates) that tests want shown at the end of
# the run; collected here and printed by pytest_terminal_summary.
_REPORT = []


def _missing(msg):
    if os.environ.get("BRISK_REQUIRE_MODELS") == "1":
        pytest.fail(msg + " (BRISK_REQUIRE_MODELS=1)", pytrace=False)
    pytest.skip(msg)


def pytest_terminal_summary(terminalreporter):
    if _REPORT:
        terminalreporter.section("brisk figures")
        for line in _REPORT:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def report():
    """report(line): show a figure in the terminal summary of this run."""

    def add(line):
        _REPORT.append(line)
        print(line)

    return add


# ---- running the binary -----------------------------------------------------

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer",
                     "SUMMARY: AddressSanitizer", "SUMMARY: UndefinedBehaviorSanitizer",
                     "Sanitizer has encountered a fatal error")


@dataclass
class Result:
    args: list
    returncode: int
    out: bytes  # raw stdout: generated text may hold any bytes
    err: str

    @property
    def stdout(self):
        return self.out.decode("utf-8", errors="replace")

    def err_lines(self):
        return [line for line in self.err.splitlines() if line.strip()]


class Brisk:
    """The binary under test. run() fails the test on a crash or sanitizer report."""

    def __init__(self, path):
        self.path = str(path)
        # Sanitized builds run several times slower.
        self.slow_factor = 4.0 if ("asan" in self.path or "tsan" in self.path) else 1.0

    def run(self, *args, timeout=60, check=True, input=None, env=None):
        """env: variables added to the environment (the BRISK_<NAME> options)."""
        argv = [self.path] + [str(a) for a in args]
        stdin = None if input is not None else subprocess.DEVNULL
        full_env = dict(os.environ, **env) if env else None
        try:
            p = subprocess.run(argv, capture_output=True, timeout=timeout * self.slow_factor,
                               input=input, stdin=stdin, env=full_env)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"timed out after {e.timeout:.0f} s: {' '.join(argv)}", pytrace=False)
        r = Result(argv, p.returncode, p.stdout, p.stderr.decode("utf-8", errors="replace"))
        tail = r.err[-6000:]
        if any(m in r.err for m in SANITIZER_MARKERS):
            pytest.fail(f"sanitizer report from {' '.join(argv)}:\n{tail}", pytrace=False)
        if r.returncode < 0:
            pytest.fail(f"killed by signal {-r.returncode}: {' '.join(argv)}\n{tail}",
                        pytrace=False)
        if check and r.returncode != 0:
            pytest.fail(f"exit {r.returncode}: {' '.join(argv)}\n{tail}", pytrace=False)
        return r

    def generate(self, model, prompt, *args, **kw):
        """Continuation text (str) of a generate run."""
        return self.run("generate", "--model", model, "--prompt", prompt, *args, **kw).stdout

    def tokenize(self, model, text, *args):
        r = self.run("tokenize", "--model", model, "--text", text, *args)
        return [int(t) for t in r.stdout.split()]


@pytest.fixture(scope="session")
def brisk_bin():
    path = Path(os.environ.get("BRISK_BIN") or REPO / "build" / "bin" / "brisk")
    if not (path.is_file() and os.access(path, os.X_OK)):
        _missing(f"brisk binary not found at {path}; build it with scripts/build.sh "
                 "or point BRISK_BIN at it")
    return path


@pytest.fixture(scope="session")
def brisk(brisk_bin):
    return Brisk(brisk_bin)


# ---- models -----------------------------------------------------------------


@pytest.fixture(scope="session")
def shared_dir():
    d = Path(os.environ.get("BRISK_SHARED_DIR") or REPO.parent / "shared")
    if not (d / "models" / "stories260K.bin").is_file():
        _missing(f"shared models not found in {d}/models; set BRISK_SHARED_DIR")
    return d


@pytest.fixture(scope="session")
def smollm2_path():
    env = os.environ.get("BRISK_SMOLLM2")
    if env:
        path = Path(env)
    else:
        cache = Path(os.environ.get("BRISK_CACHE_DIR") or Path.home() / ".cache" / "brisk")
        path = cache / "models" / SMOLLM2_NAME
    if not path.is_file():
        _missing(f"{SMOLLM2_NAME} not found at {path}; run scripts/fetch-model.sh")
    return path


@pytest.fixture(scope="session")
def stories260k_gguf(brisk, shared_dir, tmp_path_factory):
    """stories260K converted to GGUF by `brisk convert-llama2c` (once per session)."""
    out = tmp_path_factory.mktemp("stories") / "stories260K.gguf"
    m = shared_dir / "models"
    brisk.run("convert-llama2c", "--model", m / "stories260K.bin", "--tokenizer",
              m / "tok512.bin", "--out", out, timeout=60)
    assert out.is_file() and out.stat().st_size > 1_000_000
    return out


@pytest.fixture(scope="session")
def reference():
    """The float64 NumPy reference module (tests/reference/llama_ref.py)."""
    sys.path.insert(0, str(REPO / "tests" / "reference"))
    try:
        import llama_ref
    finally:
        sys.path.pop(0)
    return llama_ref


# ---- brisk serve ------------------------------------------------------------
#
# A BriskServer is one `brisk serve` process on an ephemeral port, its stdout
# and stderr in a log file. Module-scoped fixtures share one server across a
# test file; tests that need other flags start their own with start_server.
# Every server is stopped with SIGTERM at the end and must exit 0 without a
# sanitizer report.

LISTEN_RE = re.compile(r"listening on http://(\[[^\]]+\]|[^\s:/]+):(\d+)")


@dataclass
class HttpResponse:
    status: int
    reason: str
    headers: dict  # lower-case names; a repeated header keeps its last value
    body: bytes

    def json(self):
        return json.loads(self.body)

    @property
    def text(self):
        return self.body.decode("utf-8", errors="replace")


def parse_prometheus(text):
    """[(name, {label: value}, float)] for every sample line of an exposition."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$', line)
        assert m, f"bad exposition line: {line!r}"
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        samples.append((m.group(1), labels, float(m.group(4))))
    return samples


def metric_value(samples, name, **labels):
    """Sum of the samples named `name` whose labels include `labels`."""
    return sum(v for n, lab, v in samples
               if n == name and all(lab.get(k) == str(w) for k, w in labels.items()))


class RawConn:
    """A raw TCP connection speaking HTTP/1.1 by hand (for keep-alive, pipelining,
    malformed requests and streams cut off by the client)."""

    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        self.sock.close()

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed by the server")
        self.buf += data

    def _read_until(self, sep):
        while sep not in self.buf:
            self._fill()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def _read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self):
        """(status, reason, headers) of the next response."""
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        assert parts[0] in ("HTTP/1.1", "HTTP/1.0"), lines[0]
        headers = {}
        for ln in lines[1:]:
            if ln:
                k, _, v = ln.partition(":")
                headers[k.strip().lower()] = v.strip()
        return int(parts[1]), (parts[2] if len(parts) > 2 else ""), headers

    def iter_body(self, headers):
        """The body's pieces as they arrive (chunked, Content-Length or until close)."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self._read_until(b"\r\n").split(b";")[0], 16)
                if size == 0:
                    self._read_until(b"\r\n")  # no trailers are sent
                    return
                data = self._read_exact(size)
                assert self._read_exact(2) == b"\r\n"
                yield data
        elif "content-length" in headers:
            n = int(headers["content-length"])
            if n:
                yield self._read_exact(n)
        else:
            while True:
                try:
                    self._fill()
                except EOFError:
                    break
            data, self.buf = self.buf, b""
            yield data

    def read_response(self, head_only=False):
        status, reason, headers = self.read_head()
        body = b"" if head_only else b"".join(self.iter_body(headers))
        return HttpResponse(status, reason, headers, body)

    def iter_sse(self, headers):
        """The `data:` payloads of an SSE body, as str, as they arrive."""
        pending = b""
        for piece in self.iter_body(headers):
            pending += piece
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if line.startswith(b"data:"):
                        yield line[5:].strip().decode("utf-8")
        assert pending.strip() == b"", f"unterminated SSE event: {pending!r}"

    def is_closed(self, timeout=5.0):
        """True when the server closes the connection (EOF or reset) within timeout."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.buf += data
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


class BriskServer:
    def __init__(self, brisk, model, args, log_path, api_key=None):
        self.brisk = brisk
        self.model = Path(model) if model else None  # None: the args name it (--dummy-weights)
        self.args = [str(a) for a in args]
        self.log_path = Path(log_path)
        self.api_key = api_key
        self.proc = None
        self.host = None
        self.port = None
        self.returncode = None

    @property
    def slow(self):
        return self.brisk.slow_factor

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self):
        return self.url + "/v1"

    def start(self, wait_ready=True, timeout=60):
        argv = [self.brisk.path, "serve"] + (["--model", str(self.model)] if self.model else []) + [
            "--host", "127.0.0.1", "--port", "0"] + self.args
        self._log_f = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log_f,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout * self.slow
        while True:
            m = LISTEN_RE.search(self.log())
            if m:
                self.host, self.port = m.group(1).strip("[]"), int(m.group(2))
                break
            if self.proc.poll() is not None:
                self.check_log()
                pytest.fail(f"brisk serve exited ({self.proc.returncode}) before listening: "
                            f"{' '.join(argv)}\n{self.log()[-4000:]}", pytrace=False)
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"brisk serve did not listen within {timeout * self.slow:.0f} s:\n"
                            f"{self.log()[-4000:]}", pytrace=False)
            time.sleep(0.01)
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout * self.slow
        while True:
            try:
                r = self.request("GET", "/health", timeout=5)
                if r.status == 200:
                    return
                assert r.status == 503, f"/health while loading: {r.status} {r.body!r}"
            except OSError:
                pass
            self.check_alive()
            if time.monotonic() > deadline:
                pytest.fail(f"/health not 200 within {timeout * self.slow:.0f} s:\n"
                            f"{self.log()[-4000:]}", pytrace=False)
            time.sleep(0.02)

    def log(self):
        return self.log_path.read_bytes().decode("utf-8", errors="replace")

    def check_log(self):
        """Fails the test on a sanitizer report in the server's log."""
        text = self.log()
        if any(m in text for m in SANITIZER_MARKERS):
            pytest.fail(f"sanitizer report from brisk serve:\n{text[-8000:]}", pytrace=False)

    def check_alive(self):
        if self.proc.poll() is not None:
            self.check_log()
            pytest.fail(f"brisk serve died (exit {self.proc.returncode}):\n{self.log()[-4000:]}",
                        pytrace=False)

    # ---- clients ----

    def auth_headers(self, key=None):
        key = key if key is not None else self.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def request(self, method, path, body=None, headers=None, timeout=60):
        """One request on a fresh connection (http.client); body: bytes, str or a JSON value."""
        hdrs = dict(self.auth_headers())
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        hdrs = {k: v for k, v in hdrs.items() if v is not None}  # None: leave the header out
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout * self.slow)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            data = r.read()
            return HttpResponse(r.status, r.reason, {k.lower(): v for k, v in r.getheaders()},
                                data)
        finally:
            conn.close()

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def raw(self, timeout=30):
        return RawConn(self.host, self.port, timeout * self.slow)

    def send_json(self, path, body, timeout=60):
        """POSTs body on a new raw connection without reading the answer; returns the conn."""
        conn = self.raw(timeout)
        data = json.dumps(body).encode()
        auth = "".join(f"{k}: {v}\r\n" for k, v in self.auth_headers().items())
        conn.send(f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                  f"{auth}Content-Length: {len(data)}\r\n\r\n".encode() + data)
        return conn

    def stream(self, path, body, timeout=60):
        """Sends a (streaming) request on a raw connection; returns (conn, status, headers)."""
        conn = self.send_json(path, body, timeout)
        status, _, headers = conn.read_head()
        return conn, status, headers

    def client(self, **kw):
        import openai
        kw.setdefault("api_key", self.api_key or "unused")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 120 * self.slow)
        return openai.OpenAI(base_url=self.base_url, **kw)

    def async_client(self, **kw):
        import openai
        kw.setdefault("api_key", self.api_key or "unused")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 120 * self.slow)
        return openai.AsyncOpenAI(base_url=self.base_url, **kw)

    def metrics_text(self):
        r = self.request("GET", "/metrics")
        assert r.status == 200, (r.status, r.body)
        return r.text

    def metrics(self):
        return parse_prometheus(self.metrics_text())

    def wait_gauges(self, running=0, waiting=0, timeout=5.0):
        """Polls /metrics until the running/waiting gauges read as given; returns the
        last (running, waiting) seen."""
        deadline = time.monotonic() + timeout * self.slow
        while True:
            s = self.metrics()
            got = (metric_value(s, "vllm:num_requests_running"),
                   metric_value(s, "vllm:num_requests_waiting"))
            if got == (running, waiting) or time.monotonic() > deadline:
                return got
            time.sleep(0.05)

    # ---- stopping ----

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        try:
            self.returncode = self.proc.wait(timeout * self.slow)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()

    def _close_log(self):
        f = getattr(self, "_log_f", None)
        if f and not f.closed:
            f.close()

    def stop(self, timeout=30):
        """SIGTERM; the server must exit 0 within timeout with no sanitizer report."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.wait(timeout)
        if rc is None:
            self.kill()
            pytest.fail(f"brisk serve ignored SIGTERM for {timeout * self.slow:.0f} s:\n"
                        f"{self.log()[-4000:]}", pytrace=False)
        self._close_log()
        self.check_log()
        assert rc == 0, f"brisk serve exited {rc} after SIGTERM:\n{self.log()[-4000:]}"
        return rc


@pytest.fixture(scope="session")
def start_server(brisk, tmp_path_factory):
    """start_server(model, *args, api_key=None, wait_ready=True) -> a running BriskServer.
    Stopping it (server.stop()) is the caller's job; any left running at the end of
    the session are killed."""
    servers = []

    def start(model, *args, api_key=None, wait_ready=True, timeout=60):
        log = tmp_path_factory.mktemp("serve") / "serve.log"
        extra = ["--api-key", api_key] if api_key else []
        srv = BriskServer(brisk, model, list(args) + extra, log, api_key=api_key)
        servers.append(srv)
        return srv.start(wait_ready=wait_ready, timeout=timeout)

    yield start
    for srv in servers:
        srv.kill()


@pytest.fixture(scope="module")
def stories_server(start_server, stories260k_gguf):
    """stories260K served with default flags, one per test module."""
    srv = start_server(stories260k_gguf)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def smollm2_server(start_server, smollm2_path):
    """SmolLM2-135M-Instruct served with default flags, one per test module."""
    srv = start_server(smollm2_path)
    yield srv
    srv.stop()
