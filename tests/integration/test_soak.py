"""bench/soak.py, the judging half of the soak script (bench/soak.sh): its verdicts on
synthetic runs (a clean one passes; each kind of trouble fails exactly its criterion),
its window percentiles against numpy, and its sampling of a real brisk serve (process
figures from /proc, the /metrics fields it reads still exported under those names).
The soak itself is not run here: it takes minutes to an hour (bench/README.md)."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, parse_prometheus

spec = importlib.util.spec_from_file_location("soak", REPO / "bench" / "soak.py")
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)

PARAMS = {"duration_s": 600.0, "window_s": 60.0, "rss_limit_mib": 16.0, "p99_tolerance": 0.10}


def sample(t, rss_mib=300.0, **kw):
    s = {"t": t, "alive": True, "start_ticks": 1234, "rss_kib": int(rss_mib * 1024), "fds": 20,
         "metrics_ok": True, "kv_used_blocks": 3.0, "running": 2.0, "waiting": 0.0,
         "http_5xx": 0, "http": {"200": int(t)}}
    s.update(kw)
    return s


def requests(rng, n, duration, slow_after=None, factor=1.0):
    """Successful requests sent over [0, duration); those sent after slow_after take
    factor times longer. Plus a few aborted and invalid ones, which must not count."""
    out = []
    for i in range(n):
        t = duration * i / n
        k = factor if slow_after is not None and t >= slow_after else 1.0
        ttft = float(rng.uniform(20, 80)) * k
        e2e = ttft + float(rng.uniform(900, 1100)) * k
        out.append({"index": i, "t_start_s": t, "ttft_ms": ttft, "e2e_ms": e2e,
                    "output_tokens": 128, "result": "ok", "kind": "normal"})
    # an aborted request at the end of the last window, 100x slower: not a latency
    out.append({"index": n, "t_start_s": duration - 1, "ttft_ms": None, "e2e_ms": 1e6,
                "output_tokens": 0, "result": "aborted", "kind": "abort"})
    out.append({"index": n + 1, "t_start_s": duration - 2, "ttft_ms": None, "e2e_ms": 1e6,
                "output_tokens": 0, "result": "invalid_ok", "kind": "invalid"})
    return out


def clean_run():
    rng = np.random.default_rng(5)
    return {"completed": 1000, "failed": 0, "aborted": 1, "invalid_ok": 1,
            "invalid_unexpected": 0,
            "errors": {"by_status": {}, "by_kind": {"http": 0}},
            "requests": requests(rng, 1000, PARAMS["duration_s"])}


def clean():
    samples = [sample(float(t), 300 + t / 600) for t in range(0, 600, 10)]
    idle = sample(0, fds=15, kv_used_blocks=0.0, running=0.0)
    pre = sample(0, kv_used_blocks=0.0, running=0.0, http_5xx=2)
    final = sample(610, fds=15, kv_used_blocks=0.0, running=0.0, http_5xx=2)
    return dict(run=clean_run(), samples=samples, idle=idle, pre=pre, final=final, exit_code=0)


def verdicts(case):
    v, windows = soak.judge(PARAMS, case["run"], case["samples"], case["idle"], case["pre"],
                            case["final"], case["exit_code"])
    return {x["criterion"]: x for x in v}, windows


def failing(case):
    v, _ = verdicts(case)
    return sorted(name for name, x in v.items() if x["pass"] is False)


def test_clean_run_passes():
    v, windows = verdicts(clean())
    assert failing(clean()) == []
    assert len([x for x in v.values() if x["pass"] is True]) >= 12
    # the aborted and invalid requests are in no window
    assert windows["first"]["requests"] + windows["last"]["requests"] == 200
    assert windows["last"]["e2e_ms"]["p99"] < 1200


def mutate(fn):
    case = clean()
    fn(case)
    return failing(case)


@pytest.mark.parametrize("what,fn,criterion", [
    ("a sample with the server gone",
     lambda c: c["samples"][30].update(alive=False), "zero restarts"),
    ("another process under the PID",
     lambda c: c["final"].update(start_ticks=999), "zero restarts"),
    ("an unanswered scrape", lambda c: c["samples"][7].update(metrics_ok=False), "/metrics"),
    ("a 503 seen by brisk-bench",
     lambda c: c["run"]["errors"]["by_status"].update({"503": 1}), "zero unexpected 5xx"),
    ("a 500 counted by brisk", lambda c: c["final"].update(http_5xx=3), "zero 5xx sent"),
    ("an invalid request streamed", lambda c: c["run"].update(invalid_unexpected=1),
     "invalid requests"),
    ("a timeout", lambda c: c["run"].update(failed=1), "no failed requests"),
    ("nothing completed", lambda c: c["run"].update(completed=0), "requests completed"),
    ("RSS +20 MiB after the window",
     lambda c: c["samples"][-1].update(rss_kib=(300 + 21) * 1024), "RSS growth"),
    ("an fd left open", lambda c: c["final"].update(fds=16), "open fds"),
    ("a KV block left used", lambda c: c["final"].update(kv_used_blocks=1.0), "KV usage"),
    ("a sequence left running", lambda c: c["final"].update(running=1.0), "KV usage"),
    ("E2E 20% slower at the end",
     lambda c: c["run"].update(requests=requests(np.random.default_rng(5), 1000, 600,
                                                 slow_after=540, factor=1.2)), "E2E P99"),
    ("brisk-bench wrote nothing", lambda c: c.update(run=None), None),
    ("a crash on SIGTERM", lambda c: c.update(exit_code=-11), "brisk serve exits 0"),
])
def test_each_trouble_fails_its_criterion(what, fn, criterion):
    bad = mutate(fn)
    if criterion is None:  # no report: everything that needs it fails
        assert any("report" in b for b in bad) and any("E2E" in b for b in bad), bad
        return
    assert bad and all(b.startswith(criterion) for b in bad), (what, bad)


def test_what_is_not_a_failure():
    # RSS growth inside the first window does not count; faster at the end is fine
    def grow_early(c):
        for s in c["samples"]:
            if s["t"] < 60:
                s["rss_kib"] = int((200 + s["t"]) * 1024)
    assert mutate(grow_early) == []
    fast = mutate(lambda c: c["run"].update(requests=requests(
        np.random.default_rng(5), 1000, 600, slow_after=540, factor=0.5)))
    assert fast == []
    # 5% slower is inside the 10% tolerance
    assert mutate(lambda c: c["run"].update(requests=requests(
        np.random.default_rng(5), 1000, 600, slow_after=540, factor=1.05))) == []
    # 5xx before the soak (the capacity run) are not the soak's
    assert mutate(lambda c: (c["pre"].update(http_5xx=7), c["final"].update(http_5xx=7))) == []


def test_percentile_is_numpy():
    rng = np.random.default_rng(1)
    for n in (1, 2, 7, 100, 1001):
        v = list(rng.exponential(10, n))
        for p in (0, 1, 50, 90, 99, 100):
            assert soak.percentile(v, p) == pytest.approx(float(np.percentile(v, p)), rel=1e-12)
    assert soak.percentile([], 99) is None


def test_samples_a_real_server(stories_server, tmp_path):
    pid = stories_server.proc.pid
    text = stories_server.metrics_text()
    seen = {(n, lab.get("state", "code" in lab)) for n, lab, _ in parse_prometheus(text)}
    for want in (("vllm:kv_cache_usage_perc", False), ("vllm:num_requests_running", False),
                 ("vllm:num_requests_waiting", False), ("brisk_kv_cache_blocks", "used"),
                 ("brisk_kv_cache_blocks", "cached"), ("brisk_http_requests_total", True)):
        assert want in seen, want
    m = soak.parse_metrics(text)
    # (503s answer /health while the model loads: the soak counts 5xx as a delta)
    assert m["http"].get("200", 0) >= 1, m
    assert m["http_5xx"] == sum(n for c, n in m["http"].items() if c.startswith("5")), m
    s = soak.snapshot(stories_server.url, pid)
    assert s["alive"] and s["metrics_ok"] and s["start_ticks"] > 0
    assert s["rss_kib"] > 1024 and s["fds"] >= 3 and s["threads"] >= 1
    assert s["running"] == 0 and s["kv_used_blocks"] == 0
    # the command line: snapshot and settle print one JSON sample
    out = subprocess.run([sys.executable, str(REPO / "bench" / "soak.py"), "settle", "--url",
                          stories_server.url, "--pid", str(pid), "--idle-fds", "1000",
                          "--timeout", "10"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["alive"] and s["settle_s"] < 10 and s["running"] == 0 and s["kv_used_blocks"] == 0
    gone = soak.read_proc(2 ** 22 + 12345)
    assert gone == {"alive": False}
    assert os.path.exists(f"/proc/{pid}")
