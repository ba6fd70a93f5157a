"""Per-key limits (--limits-file) on one server with several keys (--api-key-file): each key
held to its requests, tokens and concurrency, the others unaffected; 429 with Retry-After,
retry-after-ms and OpenAI's x-ratelimit-* headers; a prompt over the whole budget; reloads
on SIGHUP (which no longer stops a server without --audit-log) and when the files change
on disk, including a key removed from the key file (rotation). stories260K, loopback only,
short windows so that nothing waits long."""
import signal
import time

import pytest

KEYS = "# id key\nteam-a sk-aaaaaaaa\nteam-b sk-bbbbbbbb\nteam-c sk-cccccccc\nfree sk-ffffffff\n"


def auth(key):
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture()
def quota_server(start_server, stories260k_gguf, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text(KEYS)
    limits = tmp_path / "limits"
    limits.write_text("team-a rpm=3 window=6\nteam-b tpm=300 window=60\n"
                      "team-c concurrency=1\n")
    srv = start_server(stories260k_gguf, "--api-key-file", str(keys), "--limits-file",
                       str(limits))
    srv.files = (keys, limits)
    yield srv
    srv.stop()


def complete(srv, key, **kw):
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, **kw}
    return srv.post("/v1/completions", body, headers=auth(key))


def test_requests_per_window(quota_server):
    srv = quota_server
    for i in range(3):
        r = complete(srv, "sk-aaaaaaaa")
        assert r.status == 200, r.text
        assert r.headers["x-ratelimit-limit-requests"] == "3"
        assert r.headers["x-ratelimit-remaining-requests"] == str(2 - i)
        assert "x-ratelimit-limit-tokens" not in r.headers
    r = complete(srv, "sk-aaaaaaaa")
    assert r.status == 429
    err = r.json()["error"]
    assert err["code"] == "rate_limit_exceeded" and err["type"] == "rate_limit_error"
    retry = float(r.headers["retry-after-ms"]) / 1000
    assert 0 < retry <= 2.01 and int(r.headers["retry-after"]) == max(1, round(retry + 0.49))
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    # Other keys are not affected; a key without limits gets no headers.
    r = complete(srv, "sk-ffffffff")
    assert r.status == 200 and "x-ratelimit-limit-requests" not in r.headers
    # The bucket refills at 3 per 6 s: one more after the retry time.
    time.sleep(retry + 0.05)
    assert complete(srv, "sk-aaaaaaaa").status == 200
    assert complete(srv, "sk-aaaaaaaa").status == 429


def test_headers_on_every_response_of_a_limited_key(quota_server):
    srv = quota_server
    r = srv.request("GET", "/v1/models", headers=auth("sk-aaaaaaaa"))
    assert r.status == 200 and r.headers["x-ratelimit-limit-requests"] == "3"
    assert r.headers["x-ratelimit-remaining-requests"] == "3"  # a look takes nothing
    r = srv.post("/v1/completions", {"prompt": 5}, headers=auth("sk-bbbbbbbb"))
    assert r.status == 400 and r.headers["x-ratelimit-limit-tokens"] == "300"
    r = srv.request("GET", "/v1/models", headers=auth("sk-ffffffff"))
    assert "x-ratelimit-limit-requests" not in r.headers


def test_tokens_count_prompt_and_completion(quota_server):
    srv = quota_server
    r = complete(srv, "sk-bbbbbbbb", max_tokens=20)
    assert r.status == 200
    u = r.json()["usage"]
    before = int(r.headers["x-ratelimit-remaining-tokens"])
    assert before == 300 - u["prompt_tokens"]  # at admission: the prompt
    r2 = complete(srv, "sk-bbbbbbbb", max_tokens=1)
    after = int(r2.headers["x-ratelimit-remaining-tokens"])
    # The first request's completion was charged too (plus a little refill: 5 a second).
    spent = u["completion_tokens"] + r2.json()["usage"]["prompt_tokens"]
    assert before - spent <= after <= before - spent + 5
    # Streams also pay as they go; a prompt over the whole budget is refused outright.
    r = complete(srv, "sk-bbbbbbbb", prompt="Once upon a time " * 80, max_tokens=1)
    assert r.status == 400 and r.json()["error"]["code"] == "tokens_over_limit"
    # Spend the rest: the next request waits for its prompt's tokens.
    while True:
        r = complete(srv, "sk-bbbbbbbb", max_tokens=60)
        if r.status == 429:
            break
        assert r.status == 200
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert float(r.headers["retry-after-ms"]) > 0
    assert complete(srv, "sk-aaaaaaaa").status == 200


def test_concurrency(quota_server):
    import http.client
    import json
    srv = quota_server
    # A long stream holds team-c's one slot.
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
    c.request("POST", "/v1/completions",
              json.dumps({"prompt": "Once", "max_tokens": 400, "stream": True,
                          "ignore_eos": True}),
              {"Content-Type": "application/json", **auth("sk-cccccccc")})
    resp = c.getresponse()
    assert resp.status == 200
    resp.read(64)  # it is running
    r = complete(srv, "sk-cccccccc")
    assert r.status == 429 and "concurrency" in r.json()["error"]["message"]
    assert complete(srv, "sk-ffffffff").status == 200
    resp.read()
    c.close()
    deadline = time.time() + 10
    while complete(srv, "sk-cccccccc").status != 200:
        assert time.time() < deadline, "the slot never came back"
        time.sleep(0.05)


def test_reload_on_sighup_and_on_change(quota_server):
    srv = quota_server
    keys, limits = srv.files
    for _ in range(3):
        assert complete(srv, "sk-aaaaaaaa").status == 200
    assert complete(srv, "sk-aaaaaaaa").status == 429
    # SIGHUP without --audit-log: the server reloads and goes on (it used to die).
    limits.write_text("team-a rpm=1000 window=1\n")
    srv.signal(signal.SIGHUP)
    deadline = time.time() + 5
    while complete(srv, "sk-aaaaaaaa").status != 200:
        assert time.time() < deadline, "new limits not applied after SIGHUP"
        time.sleep(0.05)
    srv.check_alive()
    # Key rotation: team-b removed from the key file, noticed without a signal.
    keys.write_text(KEYS.replace("team-b sk-bbbbbbbb\n", "team-b2 sk-b2b2b2b2\n"))
    deadline = time.time() + 10
    while complete(srv, "sk-bbbbbbbb").status != 401:
        assert time.time() < deadline, "a removed key still works"
        time.sleep(0.1)
    assert complete(srv, "sk-b2b2b2b2").status == 200
    # A broken file is not applied: the old keys stay.
    keys.write_text("this line has three fields\n")
    srv.signal(signal.SIGHUP)
    time.sleep(0.3)
    assert complete(srv, "sk-b2b2b2b2").status == 200
    assert "key file not reloaded" in srv.log()
    srv.check_alive()


def test_bad_limits_file_stops_the_start(brisk, stories260k_gguf, tmp_path):
    bad = tmp_path / "limits"
    bad.write_text("team-a rpm=0\n")
    r = brisk.run("serve", "--model", stories260k_gguf, "--limits-file", bad, "--port", "0",
                  check=False, timeout=30)
    assert r.returncode != 0 and "line 1" in r.err


def test_usage_metrics_per_key(quota_server):
    from conftest import metric_value, parse_prometheus
    srv = quota_server
    used = {}
    for key, kid in (("sk-aaaaaaaa", "team-a"), ("sk-ffffffff", "free")):
        for _ in range(2):
            u = complete(srv, key, max_tokens=5).json()["usage"]
            p, g = used.get(kid, (0, 0))
            used[kid] = (p + u["prompt_tokens"], g + u["completion_tokens"])
    for _ in range(2):
        complete(srv, "sk-aaaaaaaa")  # the third passes, the fourth is refused (rpm=3)
    s = parse_prometheus(srv.metrics_text())
    for kid, (p, g) in used.items():
        n = 3 if kid == "team-a" else 2
        assert metric_value(s, "brisk_key_requests_total", key_id=kid,
                            finished_reason="length") == n
        assert metric_value(s, "brisk_key_prompt_tokens_total", key_id=kid) >= p
        assert metric_value(s, "brisk_key_generation_tokens_total", key_id=kid) >= g
    assert metric_value(s, "brisk_key_rate_limited_total", key_id="team-a", limit="requests") == 1
    assert metric_value(s, "brisk_key_rate_limited_total", key_id="free", limit="requests") == 0
    assert "sk-" not in srv.metrics_text()  # ids only, never keys


# ---- priorities and deadlines (SmolLM2: slow enough to hold the one slot) --------------

def chat(srv, content, key=None, **kw):
    body = {"messages": [{"role": "user", "content": content}], "temperature": 0, **kw}
    return srv.post("/v1/chat/completions", body, headers=auth(key) if key else None)


def occupy(srv, key=None, tokens=2000):
    """Starts a long stream on a raw connection; returns it (close to end it)."""
    import http.client
    import json
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    h = {"Content-Type": "application/json", **(auth(key) if key else {})}
    c.request("POST", "/v1/completions", json.dumps(
        {"prompt": "Once upon a time", "max_tokens": tokens, "ignore_eos": True,
         "stream": True}), h)
    resp = c.getresponse()
    assert resp.status == 200
    resp.read(200)  # it is running
    return c


@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_priority_order_and_fcfs_refusal(start_server, smollm2_path, smollm2_server):
    import concurrent.futures as cf
    r = chat(smollm2_server, "Hi", max_tokens=1, priority=3)
    assert r.status == 400 and r.json()["error"]["param"] == "priority"
    assert chat(smollm2_server, "Hi", max_tokens=1, priority=0).status == 200
    srv = start_server(smollm2_path, "--scheduling-policy", "priority", "--max-num-seqs", "1",
                       "--priority-aging", "1000")
    try:
        hold = occupy(srv)
        done = []
        with cf.ThreadPoolExecutor(4) as ex:
            futs = []
            for name, prio in (("low", 10), ("mid", 5), ("high", -5)):
                futs.append(ex.submit(lambda n=name, p=prio: (chat(srv, "Say hi", max_tokens=8,
                                                                   priority=p), done.append(n))))
                time.sleep(0.3)  # arrival order: low, mid, high
            time.sleep(0.3)
            hold.close()  # the slot frees: the waiting three run one at a time
            for f in futs:
                assert f.result()[0].status == 200
        assert done == ["high", "mid", "low"], done
    finally:
        srv.stop()


def test_deadlines(start_server, smollm2_path):
    from conftest import metric_value, parse_prometheus
    srv = start_server(smollm2_path, "--max-num-seqs", "1", "--request-timeout", "600")
    try:
        # Running past its deadline: ended with what it has.
        r = chat(srv, "Tell me a long story", max_tokens=3000, ignore_eos=True, timeout=1.0)
        assert r.status == 200, r.text
        ch = r.json()["choices"][0]
        assert ch["finish_reason"] == "length" and ch["brisk_finish_detail"] == "deadline"
        assert 0 < r.json()["usage"]["completion_tokens"] < 3000
        # Waiting past it: refused without running.
        hold = occupy(srv)
        t0 = time.time()
        r = chat(srv, "Hi", max_tokens=4, timeout=0.5)
        assert r.status == 504 and r.json()["error"]["code"] == "deadline_exceeded"
        assert time.time() - t0 < 5
        hold.close()
        s = parse_prometheus(srv.metrics_text())
        assert metric_value(s, "brisk_deadline_exceeded_total", state="running") == 1
        assert metric_value(s, "brisk_deadline_exceeded_total", state="waiting") == 1
        r = chat(srv, "Hi", max_tokens=2, timeout=0)
        assert r.status == 400 and r.json()["error"]["param"] == "timeout"
    finally:
        srv.stop()


def test_cancelled_request_pays_only_what_it_used(start_server, smollm2_path, tmp_path):
    import http.client
    import json
    keys = tmp_path / "keys"
    keys.write_text("team sk-tttttttt\n")
    limits = tmp_path / "limits"
    limits.write_text("team tpm=100000 window=86400\n")  # no refill to speak of
    srv = start_server(smollm2_path, "--api-key-file", str(keys), "--limits-file", str(limits))
    try:
        c = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps(
            {"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True,
             "stream": True}), {"Content-Type": "application/json", **auth("sk-tttttttt")})
        resp = c.getresponse()
        start = int(resp.getheader("x-ratelimit-remaining-tokens"))
        resp.read(2000)  # some tokens, then the client leaves
        c.close()
        time.sleep(0.5)
        r = srv.request("GET", "/v1/models", headers=auth("sk-tttttttt"))
        spent = start - int(r.headers["x-ratelimit-remaining-tokens"])
        assert 0 < spent < 1500, spent  # far less than the 3,000 it asked for
        # And the counters agree with what was charged.
        s = srv.metrics_text()
        assert 'brisk_key_requests_total{model_name="SmolLM2-135M-Instruct.Q4_1",key_id="team",' \
               'finished_reason="abort"} 1' in s
    finally:
        srv.stop()
