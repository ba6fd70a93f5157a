"""brisk-bench, the load generator, end to end: against a running brisk on
stories260K (its completed requests and token counts must equal the deltas of
brisk's own /metrics counters; aborted and invalid requests), against the fake
streaming server of tests/tools/bench_fake.h (256 connections from one thread;
hostile answers; aborts, invalid requests and intervals), and its command
line, JSON report, charts, sweeps and Ctrl-C.

brisk-bench is build/bin/brisk-bench beside BRISK_BIN; the fake server is
build/tests/bench_fake_server.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import SANITIZER_MARKERS, Result, _missing, metric_value

STORIES = "stories260K"
SUCCESS_REASONS = ("stop", "length")


class Bench:
    """The brisk-bench binary; run() fails the test on a crash or a sanitizer report."""

    def __init__(self, path):
        self.path = str(path)
        self.slow_factor = 4.0 if ("asan" in self.path or "tsan" in self.path) else 1.0

    def run(self, *args, timeout=60, check=True):
        argv = [self.path] + [str(a) for a in args]
        try:
            p = subprocess.run(argv, capture_output=True, timeout=timeout * self.slow_factor,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"timed out after {e.timeout:.0f} s: {' '.join(argv)}", pytrace=False)
        r = Result(argv, p.returncode, p.stdout, p.stderr.decode("utf-8", errors="replace"))
        check_result(r, check)
        return r

    def json_run(self, tmp_path, *args, name="report.json", **kw):
        """Runs with --json; returns (Result, report dict)."""
        out = tmp_path / name
        r = self.run(*args, "--json", out, "--quiet", **kw)
        return r, json.loads(out.read_text())


def check_result(r, check):
    tail = r.err[-6000:]
    if any(m in r.err for m in SANITIZER_MARKERS):
        pytest.fail(f"sanitizer report from {' '.join(r.args)}:\n{tail}", pytrace=False)
    if r.returncode < 0:
        pytest.fail(f"killed by signal {-r.returncode}: {' '.join(r.args)}\n{tail}",
                    pytrace=False)
    if check and r.returncode != 0:
        pytest.fail(f"exit {r.returncode}: {' '.join(r.args)}\n{r.stdout}\n{tail}",
                    pytrace=False)


@pytest.fixture(scope="session")
def bench(brisk_bin):
    path = Path(brisk_bin).parent / "brisk-bench"
    if not (path.is_file() and os.access(path, os.X_OK)):
        _missing(f"brisk-bench not found at {path}; build it with scripts/build.sh")
    return Bench(path)


class FakeServer:
    def __init__(self, path, log):
        self.log = log
        self.proc = subprocess.Popen([str(path), "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=open(log, "wb"), stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode()
        m = re.match(r"listening on (http://\S+)", line)
        if not m:
            self.proc.kill()
            pytest.fail(f"bench_fake_server did not start: {line!r}", pytrace=False)
        self.url = m.group(1)

    def stats(self):
        import urllib.request
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as f:
            return json.loads(f.read())

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(30)
        text = Path(self.log).read_text(errors="replace")
        assert not any(m in text for m in SANITIZER_MARKERS), text[-4000:]
        assert rc == 0, text[-2000:]


@pytest.fixture(scope="module")
def fake(brisk_bin, tmp_path_factory):
    path = Path(brisk_bin).parent.parent / "tests" / "bench_fake_server"
    if not (path.is_file() and os.access(path, os.X_OK)):
        _missing(f"bench_fake_server not found at {path}; build it with scripts/build.sh")
    srv = FakeServer(path, tmp_path_factory.mktemp("fake") / "fake.log")
    yield srv
    srv.stop()


def success_total(samples):
    return sum(metric_value(samples, "vllm:request_success_total", finished_reason=r)
               for r in SUCCESS_REASONS)


def counters(srv):
    s = srv.metrics()
    return {"success": success_total(s),
            "gen": metric_value(s, "vllm:generation_tokens_total"),
            "prompt": metric_value(s, "vllm:prompt_tokens_total"),
            "ttft_count": metric_value(s, "vllm:time_to_first_token_seconds_count"),
            "running": metric_value(s, "vllm:num_requests_running")}


def wait_deltas(srv, before, want_success, timeout=10.0):
    """/metrics is updated when a request finishes, which can trail the last
    byte the client read: poll until the success counter has caught up."""
    deadline = time.monotonic() + timeout * srv.slow
    while True:
        after = counters(srv)
        if after["success"] - before["success"] >= want_success or time.monotonic() > deadline:
            return {k: after[k] - before[k] for k in after}
        time.sleep(0.05)


def check_dist(d, n=None):
    assert set(d) >= {"n", "mean", "std", "median", "p50", "p90", "p95", "p99", "min", "max"}
    if n is not None:
        assert d["n"] == n, d
    if d["n"]:
        assert 0 <= d["min"] <= d["p50"] <= d["p90"] <= d["p95"] <= d["p99"] <= d["max"], d
        assert d["median"] == d["p50"]


# ---- against brisk ------------------------------------------------------------------


def test_counts_match_server_metrics(bench, stories_server, tmp_path, report):
    before = counters(stories_server)
    r, rep = bench.json_run(tmp_path, "--base-url", stories_server.url, "--num-prompts", 20,
                            "--max-concurrency", 4, "--input-len", 16, "--output-len", 16)
    run = rep["runs"][0]
    d = wait_deltas(stories_server, before, run["completed"])
    assert run["completed"] == 20 and run["failed"] == 0, run["errors"]
    # ignore_eos: every request gets exactly max_tokens
    assert run["total_output_tokens"] == 20 * 16 == run["expected_output_tokens"]
    assert run["output_len_mismatches"] == 0 and run["usage_missing"] == 0
    # the bench's counts are the server's
    assert d["success"] == run["completed"], d
    assert d["gen"] == run["total_output_tokens"], d
    assert d["prompt"] == run["total_input_tokens"], d
    assert d["ttft_count"] == run["completed"], d
    # the model was discovered from /v1/models
    assert rep["params"]["model"] == STORIES
    check_dist(run["ttft_ms"], 20)
    check_dist(run["e2e_ms"], 20)
    check_dist(run["tpot_ms"], 20)
    check_dist(run["itl_ms"])
    # brisk may merge tokens into one event (UTF-8 hold-back), never split one
    assert 0 < run["itl_ms"]["n"] <= 20 * 15
    assert run["e2e_ms"]["min"] >= run["ttft_ms"]["min"]
    assert run["request_throughput"] > 0 and run["output_throughput"] > 0
    assert abs(run["output_throughput"] * run["duration_s"] - 320) < 1e-6 * 320
    for key in ("tool", "version", "commit", "date", "machine", "params"):
        assert key in rep, key
    assert rep["machine"]["cores"] >= 1 and rep["sweep"] is None and not rep["interrupted"]
    # the human table on stdout
    assert re.search(r"Successful requests:\s+20\n", r.stdout), r.stdout
    assert "TTFT" in r.stdout and "Errors: none" in r.stdout
    report(f"brisk-bench vs brisk /metrics (stories260K, 20 requests, c=4): "
           f"{run['total_output_tokens']} tokens = {d['gen']:.0f} generated; "
           f"{run['output_throughput']:.0f} tok/s")


def test_warmup_not_counted(bench, stories_server, tmp_path):
    before = counters(stories_server)
    _, rep = bench.json_run(tmp_path, "--base-url", stories_server.url, "--model", STORIES,
                            "--num-prompts", 6, "--max-concurrency", 3, "--input-len", 8,
                            "--output-len", 5, "--warmup", 3)
    run = rep["runs"][0]
    d = wait_deltas(stories_server, before, 9)
    assert run["completed"] == 6
    assert d["success"] == 6 + 3 and d["gen"] == (6 + 3) * 5, d


def test_calibrated_prompt_length(bench, stories_server, tmp_path):
    # stories260K's 512-token vocabulary splits words; after a warm-up the
    # prompts come out near the asked length anyway.
    _, rep = bench.json_run(tmp_path, "--base-url", stories_server.url, "--num-prompts", 8,
                            "--max-concurrency", 4, "--input-len", 64, "--output-len", 4,
                            "--warmup", 4)
    run = rep["runs"][0]
    per_request = run["total_input_tokens"] / run["completed"]
    assert 48 <= per_request <= 80, per_request


def test_dataset_and_shared_prefix(bench, stories_server, tmp_path):
    ds = tmp_path / "prompts.jsonl"
    ds.write_text('{"prompt": "Once upon a time", "output_len": 3}\n'
                  '{"prompt": "The little dog \\"Max\\"", "output_len": 7}\n\n')
    before = counters(stories_server)
    _, rep = bench.json_run(tmp_path, "--base-url", stories_server.url, "--dataset", ds,
                            "--num-prompts", 4, "--max-concurrency", 2)
    run = rep["runs"][0]
    d = wait_deltas(stories_server, before, 4)
    assert run["completed"] == 4 and run["total_output_tokens"] == 2 * (3 + 7)
    assert d["gen"] == 20 and d["prompt"] == run["total_input_tokens"]

    _, rep = bench.json_run(tmp_path, "--base-url", stories_server.url, "--num-prompts", 4,
                            "--max-concurrency", 2, "--input-len", 8, "--output-len", 2,
                            "--shared-prefix-len", 40, name="prefix.json")
    run = rep["runs"][0]
    assert run["completed"] == 4 and rep["params"]["shared_prefix_len"] == 40
    assert run["total_input_tokens"] / 4 >= 48


def test_extra_body_carries_a_constraint(bench, stories_server, tmp_path):
    """--extra-body is merged into every request (bench/gpu.sh sends a response_format JSON
    Schema through it for its constrained-vs-unconstrained throughput pair): a
    guided_choice there bounds each output to "yes" or "no", which then ends (ignore_eos
    cannot extend a finished grammar) however many tokens were asked for."""
    _, rep = bench.json_run(tmp_path, "--base-url", stories_server.url, "--num-prompts", 4,
                            "--max-concurrency", 2, "--input-len", 8, "--output-len", 24,
                            "--extra-body", json.dumps({"guided_choice": ["yes", "no"]}))
    run = rep["runs"][0]
    assert run["completed"] == 4 and run["failed"] == 0, run["errors"]
    # "yes" is at most 3 tokens of stories260K's vocabulary; unconstrained, 4 x 24
    assert 4 <= run["total_output_tokens"] <= 4 * 3, run


def test_rate_and_duration(bench, stories_server, tmp_path):
    _, rep = bench.json_run(tmp_path, "--base-url", stories_server.url, "--request-rate", 40,
                            "--burstiness", 2, "--duration", 1, "--input-len", 8,
                            "--output-len", 4, "--json-requests")
    run = rep["runs"][0]
    assert run["failed"] == 0 and 10 <= run["completed"] <= 120, run["completed"]
    reqs = run["requests"]
    assert len(reqs) == run["completed"]
    assert all(q["result"] == "ok" and q["output_tokens"] == 4 and q["status"] == 200
               and 0 <= q["ttft_ms"] <= q["e2e_ms"] for q in reqs), reqs[:3]
    starts = sorted(q["t_start_s"] for q in reqs)
    assert starts[-1] - starts[0] > 0.3  # arrivals spread over the second, not at once
    assert rep["params"]["request_rate"] == 40 and rep["params"]["num_prompts"] is None


def test_sweep_slo_and_plots(bench, stories_server, tmp_path):
    plots = tmp_path / "plots"
    args = ["--base-url", stories_server.url, "--num-prompts", 6, "--input-len", 8,
            "--output-len", 6, "--sweep-concurrency", "1,2,4", "--slo", "ttft:60000,e2e:60000",
            "--price-per-hour", 2.5]
    have_gnuplot = shutil.which("gnuplot") is not None
    if have_gnuplot:
        args += ["--plot", plots]
    r, rep = bench.json_run(tmp_path, *args, timeout=120)
    assert rep["sweep"]["kind"] == "concurrency" and rep["sweep"]["levels"] == [1, 2, 4]
    assert [x["level"] for x in rep["runs"]] == [1, 2, 4]
    for x in rep["runs"]:
        assert x["completed"] == 6 and x["meets_slo"] and x["slo_attainment"] == 1.0
        assert x["request_goodput"] == pytest.approx(x["request_throughput"])
        assert x["cost_usd"]["per_1m_output_tokens"] == pytest.approx(
            2.5 / 3600 / x["output_throughput"] * 1e6)
        assert x["cost_usd"]["per_1000_requests"] == pytest.approx(
            2.5 / 3600 / x["request_throughput"] * 1e3)
    assert rep["sweep"]["best_level"] == 4
    assert "Highest concurrency meeting the SLO" in r.stdout
    if have_gnuplot:
        for name in ("ttft_cdf", "itl_cdf", "e2e_cdf", "sweep_throughput", "sweep_p95"):
            png = plots / f"{name}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
            assert png.stat().st_size > 2000, name


def test_sweep_nothing_meets_tight_slo(bench, stories_server, tmp_path):
    r, rep = bench.json_run(tmp_path, "--base-url", stories_server.url, "--num-prompts", 4,
                            "--input-len", 8, "--output-len", 4, "--sweep-rate", "50,100",
                            "--slo", "ttft:0.000001")
    assert rep["sweep"]["best_level"] is None
    assert all(not x["meets_slo"] and x["request_goodput"] == 0 for x in rep["runs"])
    assert "No rate met the SLO" in r.stdout


def test_http_errors_counted(bench, start_server, stories260k_gguf, tmp_path):
    srv = start_server(stories260k_gguf, api_key="sekrit")
    try:
        # a wrong key: every request is a 401, counted by status; exit 3 (nothing succeeded)
        r, rep = bench.json_run(tmp_path, "--base-url", srv.url, "--model", STORIES,
                                "--api-key", "wrong", "--num-prompts", 5, "--max-concurrency",
                                2, "--output-len", 4, check=False)
        assert r.returncode == 3, r.err
        run = rep["runs"][0]
        assert run["completed"] == 0 and run["failed"] == 5
        assert run["errors"]["by_status"] == {"401": 5}
        assert "HTTP 401" in run["errors"]["first"]
        # the right key
        _, rep = bench.json_run(tmp_path, "--base-url", srv.url, "--api-key", "sekrit",
                                "--num-prompts", 3, "--output-len", 4, name="ok.json")
        assert rep["runs"][0]["completed"] == 3
        # chat on a model without a chat template: the server's 400 message is kept
        r, rep = bench.json_run(tmp_path, "--base-url", srv.url, "--api-key", "sekrit",
                                "--endpoint", "chat", "--num-prompts", 2, "--output-len", 4,
                                name="chat.json", check=False)
        assert r.returncode == 3
        assert rep["runs"][0]["errors"]["by_status"] == {"400": 2}
        assert "template" in rep["runs"][0]["errors"]["first"]
    finally:
        srv.stop()


def http_codes(samples):
    """{status code: count} of brisk_http_requests_total."""
    out = {}
    for name, labels, v in samples:
        if name == "brisk_http_requests_total":
            out[int(labels["code"])] = out.get(int(labels["code"]), 0) + v
    return out


def test_aborts_and_invalid_against_brisk(bench, stories_server, tmp_path, report):
    """--abort-rate and --invalid-rate against brisk: every invalid request gets its 4xx
    (404 for the unknown model, 400 for the rest), counted by brisk too; aborts are
    neither errors nor latencies; brisk's KV cache and gauges go back to idle."""
    codes0 = http_codes(stories_server.metrics())
    before = counters(stories_server)
    r, rep = bench.json_run(tmp_path, "--base-url", stories_server.url, "--num-prompts", 60,
                            "--max-concurrency", 4, "--input-len", 8, "--output-len", 16,
                            "--abort-rate", 0.3, "--invalid-rate", 0.2, "--seed", 3,
                            "--json-requests")
    run = rep["runs"][0]
    assert run["failed"] == 0 and run["invalid_unexpected"] == 0, run["errors"]
    assert run["completed"] + run["aborted"] + run["invalid_ok"] == 60
    reqs = run["requests"]
    assert sorted(q["index"] for q in reqs) == list(range(60))
    inv = [q for q in reqs if q["kind"] == "invalid"]
    ab = [q for q in reqs if q["kind"] == "abort"]
    assert len(inv) == run["invalid_ok"] >= 4 and len(ab) >= 8, (len(inv), len(ab))
    for q in inv:
        want = 404 if q["invalid"] == "unknown_model" else 400
        assert q["result"] == "invalid_ok" and q["status"] == want, q
    assert {q["invalid"] for q in inv} >= {"bad_json", "out_of_range", "unknown_model"}
    # brisk may send a few tokens in one event, so a stream can end before the abort point
    assert all(q["result"] in ("aborted", "ok") for q in ab), ab
    assert run["aborted"] == sum(q["result"] == "aborted" for q in ab) >= len(ab) - 2
    assert all(q["status"] == 0 for q in ab if q["abort_at"] == -1)
    assert all(q["result"] == "ok" and q["output_tokens"] == 16 for q in reqs
               if q["kind"] == "normal")
    assert run["ttft_ms"]["n"] == run["e2e_ms"]["n"] == run["completed"]
    assert run["invalid_ms"]["n"] == run["invalid_ok"]
    assert rep["params"]["abort_rate"] == 0.3
    assert rep["params"]["invalid_rate"] == 0.2
    # brisk's own counts: the 4xx, no 5xx; the server may finish an aborted request
    # before the close reaches it
    d = wait_deltas(stories_server, before, run["completed"])
    assert run["completed"] <= d["success"] <= run["completed"] + run["aborted"], d
    codes1 = http_codes(stories_server.metrics())
    delta = {c: codes1.get(c, 0) - codes0.get(c, 0) for c in codes1}
    assert delta.get(400, 0) + delta.get(404, 0) == run["invalid_ok"], delta
    assert not any(n for c, n in delta.items() if c >= 500), delta
    assert "Aborted by the client" in r.stdout and "Invalid requests answered 4xx" in r.stdout
    # idle again: no sequence, no KV block left behind by the aborts
    assert stories_server.wait_gauges(0, 0) == (0, 0)
    deadline = time.monotonic() + 5 * stories_server.slow
    while metric_value(stories_server.metrics(), "brisk_kv_cache_blocks", state="used") != 0:
        assert time.monotonic() < deadline, "KV blocks still used after the run"
        time.sleep(0.05)
    report(f"brisk-bench vs brisk: 60 requests, {run['aborted']} aborted, "
           f"{run['invalid_ok']} invalid answered 4xx "
           f"(p99 {run['invalid_ms']['p99']:.1f} ms), 0 unexpected")


@pytest.mark.slow
def test_chat_smollm2(bench, smollm2_server, tmp_path):
    before = counters(smollm2_server)
    _, rep = bench.json_run(tmp_path, "--base-url", smollm2_server.url, "--endpoint", "chat",
                            "--num-prompts", 4, "--max-concurrency", 2, "--input-len", 16,
                            "--output-len", 8, timeout=120)
    run = rep["runs"][0]
    d = wait_deltas(smollm2_server, before, 4)
    assert run["completed"] == 4 and run["total_output_tokens"] == 32
    assert d["gen"] == 32 and d["success"] == 4 and d["prompt"] == run["total_input_tokens"]


def test_connection_refused(bench, tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    port = s.getsockname()[1]
    try:
        r = bench.run("--base-url", f"http://127.0.0.1:{port}", "--model", "x",
                      "--num-prompts", 3, "--quiet", check=False)
        assert r.returncode == 3, r.err
        assert re.search(r"connect: 3", r.stdout), r.stdout
        r = bench.run("--base-url", f"http://127.0.0.1:{port}", "--num-prompts", 3, check=False)
        assert r.returncode == 1 and "models" in r.err, r.err
    finally:
        s.close()


# ---- against the fake server -------------------------------------------------------


def test_client_overhead_256_connections(bench, fake, tmp_path, report):
    stats0 = fake.stats()
    n, out = 2048, 64
    _, rep = bench.json_run(tmp_path, "--base-url", fake.url, "--model", "fake",
                            "--max-concurrency", 256, "--num-prompts", n, "--input-len", 8,
                            "--output-len", out, timeout=120)
    run = rep["runs"][0]
    stats1 = fake.stats()
    assert run["completed"] == n and run["failed"] == 0, run["errors"]
    assert run["total_output_tokens"] == n * out == stats1["tokens"] - stats0["tokens"]
    assert run["total_input_tokens"] == n * 8
    assert run["itl_ms"]["n"] == n * (out - 1)
    # keep-alive: 256 connections carried the 2048 requests (+1 for /stats)
    assert stats1["connections"] - stats0["connections"] <= 257
    tput = run["output_throughput"]
    cpu = run["client_cpu_s"] / run["duration_s"]
    report(f"brisk-bench client: {tput:,.0f} streamed tok/s over 256 connections from one "
           f"thread (client CPU {100 * cpu:.0f}% of a core; claim >= 50,000: "
           f"bench/client_overhead.sh)")


@pytest.mark.parametrize("model,kind", [
    ("fake-garbage", "protocol"), ("fake-badhttp", "protocol"), ("fake-huge", "protocol"),
    ("fake-close", "closed"), ("fake-error-event", "stream_error"),
    ("fake-nocontent", "no_content"), ("fake-hang", "timeout"), ("fake-junk", "protocol"),
    ("fake-bighead", "protocol"),
])
def test_hostile_server(bench, fake, tmp_path, model, kind):
    r, rep = bench.json_run(tmp_path, "--base-url", fake.url, "--model", model,
                            "--num-prompts", 4, "--max-concurrency", 2, "--output-len", 5,
                            "--timeout", 0.5, "--plot" if shutil.which("gnuplot") else "--quiet",
                            *([tmp_path / "p"] if shutil.which("gnuplot") else []), check=False)
    assert r.returncode == 3, (r.returncode, r.err)
    run = rep["runs"][0]
    assert run["failed"] == 4 and run["errors"]["by_kind"][kind] == 4, run["errors"]
    assert "\n" not in run["errors"]["first"]


def test_streams_of_every_shape(bench, fake, tmp_path):
    for model in ("fake-batch", "fake-split", "fake-crlf", "fake-noalive", "fake-eof-body"):
        _, rep = bench.json_run(tmp_path, "--base-url", fake.url, "--model", model,
                                "--num-prompts", 6, "--max-concurrency", 3, "--output-len", 9,
                                "--endpoint", "chat", name=f"{model}.json")
        run = rep["runs"][0]
        assert run["completed"] == 6 and run["total_output_tokens"] == 54, (model, run)
    _, rep = bench.json_run(tmp_path, "--base-url", fake.url, "--model", "fake-nousage",
                            "--num-prompts", 3, "--output-len", 9, name="nousage.json")
    run = rep["runs"][0]
    assert run["usage_missing"] == 3 and run["total_output_tokens"] == 27


def abort_run(bench, fake, tmp_path, model, seed, name):
    """60 requests of 8 tokens, 40% of them aborted; returns the run."""
    _, rep = bench.json_run(tmp_path, "--base-url", fake.url, "--model", model,
                            "--num-prompts", 60, "--max-concurrency", 15, "--output-len", 8,
                            "--abort-rate", 0.4, "--seed", seed, "--json-requests", name=name)
    return rep["runs"][0]


def test_aborts_fake_server(bench, fake, tmp_path):
    """Each aborted request is closed at its point (k tokens, or before the head),
    the server sees every cut (fake-drip: 20 ms a token, so each abort is mid-stream),
    and which requests abort, and where, depends on the seed alone."""
    # earlier tests' cut connections (fake-hang's timeouts) may still be on their way
    s0 = fake.stats()
    while True:
        time.sleep(0.5)
        s1 = fake.stats()
        if s1["cut"] == s0["cut"]:
            break
        s0 = s1
    run = abort_run(bench, fake, tmp_path, "fake-drip", 7, "a.json")
    deadline = time.monotonic() + 5
    while fake.stats()["cut"] - s0["cut"] < run["aborted"] and time.monotonic() < deadline:
        time.sleep(0.02)  # the server notices a cut when the close reaches it
    assert fake.stats()["cut"] - s0["cut"] == run["aborted"]
    ab = [q for q in run["requests"] if q["kind"] == "abort"]
    assert run["aborted"] == len(ab) and 12 <= len(ab) <= 36 and run["failed"] == 0
    assert run["completed"] == 60 - len(ab)
    for q in ab:
        assert q["result"] == "aborted" and (q["ttft_ms"] is None) == (q["abort_at"] <= 0), q
        assert q["content_events"] == max(q["abort_at"], 0), q
    assert any(q["abort_at"] == -1 for q in ab) and any(q["abort_at"] >= 0 for q in ab)
    assert run["itl_ms"]["n"] == run["completed"] * 7  # no gap of an aborted request
    assert run["total_output_tokens"] == run["completed"] * 8
    # the same plan from another server speed; another plan from another seed
    same = abort_run(bench, fake, tmp_path, "fake", 7, "b.json")
    other = abort_run(bench, fake, tmp_path, "fake", 8, "c.json")

    def plan(r):
        return sorted((q["index"], q["kind"], q.get("abort_at"), q["result"])
                      for q in r["requests"])
    assert plan(same) == plan(run)
    assert plan(other) != plan(run)


@pytest.mark.parametrize("model,status", [("fake-lenient", "200"), ("fake-strict500", "500")])
def test_invalid_unexpected(bench, fake, tmp_path, model, status):
    """An invalid request a server streams (200) or fails on (500) is an error, tallied
    by status; the ones it rejects (bad JSON, unknown model) are still invalid_ok."""
    r, rep = bench.json_run(tmp_path, "--base-url", fake.url, "--model", model,
                            "--num-prompts", 40, "--max-concurrency", 4, "--output-len", 4,
                            "--invalid-rate", 1, "--json-requests", check=False)
    run = rep["runs"][0]
    bad = [q for q in run["requests"] if q["invalid"] in ("out_of_range", "wrong_type")]
    assert bad and all(q["result"] == "invalid_unexpected" for q in bad)
    assert run["invalid_unexpected"] == run["failed"] == len(bad)
    assert run["invalid_ok"] == 40 - len(bad) and run["completed"] == 0
    assert run["errors"]["by_status"] == {status: len(bad)}
    assert run["errors"]["by_kind"]["invalid_unexpected"] == len(bad)
    assert "deliberately invalid" in r.stdout
    assert r.returncode == 0  # invalid requests answered 4xx went as planned


def test_intervals(bench, fake, tmp_path):
    """--interval: the intervals tile the run and their figures add up to the run's."""
    r, rep = bench.json_run(tmp_path, "--base-url", fake.url, "--model", "fake-slow",
                            "--request-rate", 50, "--duration", 1.6, "--interval", 0.4,
                            "--output-len", 10, "--abort-rate", 0.1, "--invalid-rate", 0.1)
    run = rep["runs"][0]
    ivs = run["intervals"]
    assert rep["params"]["interval_s"] == 0.4 and not run["intervals_truncated"]
    assert 4 <= len(ivs) <= 5 and ivs[-1]["partial"] and not any(i["partial"] for i in ivs[:-1])
    assert ivs[0]["t_start_s"] == 0
    for a, b in zip(ivs, ivs[1:]):
        assert b["t_start_s"] == a["t_end_s"]
    for i in ivs[:-1]:
        assert abs(i["t_end_s"] - i["t_start_s"] - 0.4) < 0.15, i
    assert abs(ivs[-1]["t_end_s"] - run["duration_s"]) < 1e-9
    for key in ("completed", "failed", "aborted", "invalid_ok", "total_output_tokens"):
        assert sum(i[key] for i in ivs) == run[key], key
    for key in ("ttft_ms", "itl_ms", "e2e_ms"):
        assert sum(i[key]["n"] for i in ivs) == run[key]["n"], key
        for i in ivs:
            check_dist(i[key])
    full = ivs[1]
    assert full["completed"] > 5 and full["output_throughput"] == pytest.approx(
        full["total_output_tokens"] / (full["t_end_s"] - full["t_start_s"]))
    assert set(full["errors"]) == {"by_status", "by_kind"}
    assert "brisk-bench: intervals" in r.stdout
    # without --quiet, a line per interval on stderr
    r = bench.run("--base-url", fake.url, "--model", "fake", "--request-rate", 40,
                  "--duration", 0.7, "--interval", 0.3, "--output-len", 4)
    assert len(re.findall(r"brisk-bench: \[\d+-\d+ s\] \d+ ok", r.err)) >= 2, r.err


def test_sigint_prints_partial_report(bench, fake, tmp_path):
    out = tmp_path / "partial.json"
    argv = [bench.path, "--base-url", fake.url, "--model", "fake-slow", "--num-prompts",
            "100000", "--max-concurrency", "4", "--output-len", "20", "--json", str(out)]
    p = subprocess.Popen(argv,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    time.sleep(1.5 * bench.slow_factor)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=30)
    r = Result(argv, p.returncode, stdout, stderr.decode(errors="replace"))
    check_result(r, check=False)
    assert r.returncode == 130, r.err
    assert "INTERRUPTED" in r.stdout and "Successful requests:" in r.stdout
    assert "interrupted" in r.err
    rep = json.loads(out.read_text())
    run = rep["runs"][0]
    assert rep["interrupted"] and run["interrupted"]
    assert run["completed"] > 0 and run["failed"] == 0 and run["cancelled"] <= 4
    assert run["total_output_tokens"] == 20 * run["completed"]


# ---- the command line ---------------------------------------------------------------


@pytest.mark.parametrize("args,code,msg", [
    (["--no-such-flag"], 2, "unknown option"),
    (["--endpoint", "embeddings"], 2, "--endpoint"),
    (["--input-len", "0"], 2, "--input-len"),
    (["--range-ratio", "1"], 2, "--range-ratio"),
    (["--slo", "ttft"], 2, "--slo"),
    (["--slo", "speed:5"], 2, "unknown metric"),
    (["--sweep-concurrency", "1,x"], 2, "--sweep-concurrency"),
    (["--num-prompts", "0"], 2, "--duration"),
    (["--abort-rate", "1.5"], 2, "--abort-rate"),
    (["--abort-rate", "0.6", "--invalid-rate", "0.5"], 2, "over 1"),
    (["--invalid-rate", "x"], 2, "--invalid-rate"),
    (["--interval", "0"], 2, "--interval"),
    (["--base-url", "https://example.com"], 1, "https"),
    (["--base-url", "http://127.0.0.1:1", "--model", "m", "--dataset", "/nonexistent"], 1,
     "dataset"),
])
def test_usage_errors(bench, args, code, msg):
    r = bench.run(*args, check=False)
    assert r.returncode == code, (r.returncode, r.err)
    assert msg in r.err, r.err


def test_help_and_version(bench):
    r = bench.run("--help")
    for flag in ("--base-url", "--request-rate", "--burstiness", "--max-concurrency", "--slo",
                 "--sweep-concurrency", "--price-per-hour", "--plot", "--shared-prefix-len",
                 "--abort-rate", "--invalid-rate", "--interval"):
        assert flag in r.stdout, flag
    r = bench.run("--version")
    assert re.match(r"^brisk-bench \d+\.\d+\.\d+ \(commit \S+\)$", r.stdout.strip()), r.stdout


def test_readme_command(bench, stories_server, tmp_path):
    """The README's brisk-bench line works as written, pointed at the test server;
    stories260K's context (512) and 512-token vocabulary want shorter lengths."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    m = re.search(r"^## Load testing\n.*?^build/bin/brisk-bench (.*?[^\\])$", readme,
                  re.S | re.M)
    assert m, "README.md has no brisk-bench command under '## Load testing'"
    args = m.group(1).replace("\\\n", " ").split()
    assert "--json" in args and "--plot" in args, args
    for flag, value in (("--input-len", "32"), ("--output-len", "16")):
        if flag in args:
            args[args.index(flag) + 1] = value
    args = [str(tmp_path / "out.json") if a == "out.json" else
            str(tmp_path / "charts") if a == "charts/" else
            stories_server.url if a == "http://127.0.0.1:8080" else a for a in args]
    if not shutil.which("gnuplot"):
        i = args.index("--plot")
        del args[i:i + 2]
    r = bench.run(*args, "--quiet", timeout=120)
    rep = json.loads((tmp_path / "out.json").read_text())
    assert rep["runs"][0]["completed"] == rep["params"]["num_prompts"] > 0
    assert "Successful requests:" in r.stdout
    if shutil.which("gnuplot"):
        assert (tmp_path / "charts" / "ttft_cdf.png").is_file()
