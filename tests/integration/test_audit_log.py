"""--audit-log against the real binary (stories260K): one JSON line per finished /v1/*
request (success, chat, stream with n=2, 400, 401, 404, 429, a client that leaves mid-stream),
API key ids from --api-key-file (named and derived; never the key), prompt and completion
text only with --audit-log-content, file mode 0600, SIGHUP reopening after a rename,
`--audit-log -` on stdout, and the start-up errors. About 1 s (3.5 s under ASan)."""
import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import time

import pytest

ALICE = "sk-alice-5f1e0c"
ANON = "sk-anon-77ad02"
WRONG = "sk-wrong-0000aa"
ANON_ID = "key-" + hashlib.sha256(ANON.encode()).hexdigest()[:8]
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
FIELDS = ["time", "request_id", "api_key_id", "endpoint", "model", "status", "finish",
          "prompt_tokens", "completion_tokens", "duration_ms", "remote_addr", "remote_port"]


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    assert data == b"" or data.endswith(b"\n"), "a partial line"
    return [json.loads(ln) for ln in data.decode("utf-8").splitlines()]


def wait_line(path, request_id, srv, timeout=5.0):
    """The line of request_id, once flushed (at most a second after the request)."""
    deadline = time.monotonic() + timeout * srv.slow
    while True:
        for ln in read_lines(path):
            if ln["request_id"] == request_id:
                return ln
        srv.check_alive()
        assert time.monotonic() < deadline, f"no audit line for {request_id} in {path}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def audit(start_server, stories260k_gguf, tmp_path_factory):
    d = tmp_path_factory.mktemp("audit")
    keys = d / "keys"
    keys.write_text(f"# test keys\nalice {ALICE}\n\n   {ANON}\r\n")
    log = d / "audit.log"
    srv = start_server(stories260k_gguf, "--api-key-file", keys, "--audit-log", log,
                       "--audit-log-content", "--audit-log-flush-ms", "20",
                       "--chat-template", "chatml")
    srv.api_key = ALICE
    yield srv, log
    srv.stop()


def check_common(ln, srv):
    assert list(ln)[:len(FIELDS)] == FIELDS
    assert TIME_RE.match(ln["time"]), ln["time"]
    assert ln["remote_addr"] == "127.0.0.1" and 0 < ln["remote_port"] < 65536
    assert 0 <= ln["duration_ms"] < 60000


def test_success_and_content(audit):
    srv, log = audit
    prompt = "Once upon a time \"quoted\" \\ tab\t, nl\n, bell\x07 and é"
    r = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0},
                 headers={"X-Request-Id": "audit-test-1"})
    assert r.status == 200, r.body
    body = r.json()
    assert r.headers["x-request-id"] == "audit-test-1"
    ln = wait_line(log, "audit-test-1", srv)
    check_common(ln, srv)
    assert ln["api_key_id"] == "alice" and ln["endpoint"] == "/v1/completions"
    assert ln["model"] == "stories260K" and ln["status"] == 200
    assert ln["finish"] == body["choices"][0]["finish_reason"]
    assert ln["prompt_tokens"] == body["usage"]["prompt_tokens"]
    assert ln["completion_tokens"] == body["usage"]["completion_tokens"] > 0
    assert ln["prompt"] == prompt
    assert ln["completion"] == body["choices"][0]["text"]


def test_stream_n2_derived_key(audit):
    srv, log = audit
    srv_key, srv.api_key = srv.api_key, ANON
    try:
        conn, status, headers = srv.stream("/v1/completions", {
            "prompt": "The cat", "max_tokens": 5, "n": 2, "stream": True, "seed": 3,
            "temperature": 1.0})
        rid = headers["x-request-id"]
        texts = ["", ""]
        for data in conn.iter_sse(headers):
            if data == "[DONE]":
                continue
            for ch in json.loads(data)["choices"]:
                texts[ch["index"]] += ch["text"]
        conn.close()
    finally:
        srv.api_key = srv_key
    assert status == 200
    ln = wait_line(log, rid, srv)
    check_common(ln, srv)
    assert ln["api_key_id"] == ANON_ID and ln["finish"] in ("stop", "length")
    assert ln["completion"] == texts and ln["prompt"] == "The cat"
    assert ln["completion_tokens"] > 0


def test_chat_messages(audit):
    srv, log = audit
    msgs = [{"role": "system", "content": "Be brief.\u001b[0m\n"},
            {"role": "user", "content": "Hi \U0001F600"}]
    r = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 4})
    assert r.status == 200, r.body
    ln = wait_line(log, r.headers["x-request-id"], srv)
    assert ln["endpoint"] == "/v1/chat/completions" and ln["model"] == "stories260K"
    assert ln["messages"] == msgs and "prompt" not in ln
    assert ln["completion"] == r.json()["choices"][0]["message"]["content"]


def test_errors(audit):
    srv, log = audit
    r = srv.post("/v1/completions", {"prompt": "x", "max_tokens": "many"})
    assert r.status == 400
    ln = wait_line(log, r.headers["x-request-id"], srv)
    assert (ln["status"], ln["api_key_id"], ln["finish"]) == (400, "alice", None)
    assert "prompt" not in ln and "completion" not in ln  # never got to generation
    r = srv.post("/v1/completions", {"prompt": "x"}, headers={"Authorization": f"Bearer {WRONG}"})
    assert r.status == 401
    ln = wait_line(log, r.headers["x-request-id"], srv)
    assert ln["status"] == 401 and ln["api_key_id"] is None and ln["model"] is None
    r = srv.request("GET", "/v1/nothing-here")
    assert r.status == 404
    assert wait_line(log, r.headers["x-request-id"], srv)["status"] == 404
    # Only /v1/*: probes and /metrics are not audited.
    r = srv.request("GET", "/health")
    rid = r.headers["x-request-id"]
    wait_line(log, wait_models(srv), srv)
    assert all(ln["request_id"] != rid for ln in read_lines(log))


def wait_models(srv):
    r = srv.request("GET", "/v1/models")
    assert r.status == 200
    return r.headers["x-request-id"]


def test_client_abort_mid_stream(audit):
    srv, log = audit
    conn, status, headers = srv.stream("/v1/completions", {
        "prompt": "Once", "max_tokens": 400, "stream": True, "ignore_eos": True})
    assert status == 200
    events = conn.iter_sse(headers)
    first = json.loads(next(events))
    conn.close()
    ln = wait_line(log, headers["x-request-id"], srv)
    assert ln["status"] == 200 and ln["finish"] == "client_abort"
    assert ln["completion"].startswith(first["choices"][0]["text"])
    assert ln["completion_tokens"] < 400


def test_file_mode_and_no_keys(audit):
    srv, log = audit
    wait_line(log, wait_models(srv), srv)
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    text = log.read_text()
    for key in (ALICE, ANON, WRONG):
        assert key not in text and key not in srv.log()
    assert "key=alice" in srv.log()  # the access log names the key id
    m = srv.metrics_text()
    lines = re.search(r"^brisk_audit_log_lines_total\{[^}]*\} (\S+)$", m, re.M)
    assert lines and float(lines.group(1)) >= 1
    assert re.search(r"^brisk_audit_log_errors_total\{[^}]*\} 0\.0$", m, re.M)


def test_sighup_reopens(audit):
    srv, log = audit
    before = wait_models(srv)
    wait_line(log, before, srv)
    rotated = log.with_name("audit.log.1")
    os.rename(log, rotated)
    srv.signal(signal.SIGHUP)
    deadline = time.monotonic() + 5 * srv.slow
    while not log.exists():  # the reopen creates it
        assert time.monotonic() < deadline, "SIGHUP did not reopen the audit log"
        time.sleep(0.02)
    after = wait_models(srv)
    ln = wait_line(log, after, srv)
    assert ln["status"] == 200
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    assert any(x["request_id"] == before for x in read_lines(rotated))
    assert all(x["request_id"] != after for x in read_lines(rotated))
    srv.check_alive()


def test_stdout_without_content_and_429(start_server, stories260k_gguf):
    # --max-queued-requests 0: every generation request is refused with 429.
    srv = start_server(stories260k_gguf, "--audit-log", "-", "--max-queued-requests", "0",
                       "--audit-log-flush-ms", "20", "--log-format", "json")
    try:
        r = srv.post("/v1/completions", {"prompt": "secret prompt", "max_tokens": 3})
        assert r.status == 429, r.body
        rid = r.headers["x-request-id"]
        deadline = time.monotonic() + 5 * srv.slow
        while True:
            found = [json.loads(x) for x in srv.log().splitlines()
                     if x.startswith("{") and f'"{rid}"' in x]
            if found:
                break
            assert time.monotonic() < deadline, "no audit line on stdout"
            time.sleep(0.05)
    finally:
        srv.stop()
    ln = found[0]
    assert ln["status"] == 429 and ln["api_key_id"] is None and ln["prompt_tokens"] > 0
    assert "prompt" not in ln and "completion" not in ln
    assert "secret prompt" not in srv.log()
    access = [json.loads(x.split(": ", 1)[1]) for x in srv.log().splitlines()
              if x.startswith("brisk info: {") and f'"{rid}"' in x]
    assert access and access[0]["api_key_id"] is None and access[0]["status"] == 429


def test_start_errors(brisk, stories260k_gguf, tmp_path):
    def run(*args):
        p = subprocess.run([brisk.path, "serve", "--model", str(stories260k_gguf), "--port", "0",
                            *map(str, args)], capture_output=True, timeout=30 * brisk.slow_factor)
        return p.returncode, p.stderr.decode()

    rc, err = run("--audit-log", tmp_path / "missing-dir" / "a.log")
    assert rc != 0 and "missing-dir" in err and "listening" not in err
    rc, err = run("--audit-log-content")
    assert rc == 2 and "--audit-log" in err
    bad = tmp_path / "keys"
    bad.write_text(f"ok {ALICE}\nbad/id {ANON}\n")
    rc, err = run("--api-key-file", bad)
    assert rc == 1 and "line 2" in err and ANON not in err and ALICE not in err
