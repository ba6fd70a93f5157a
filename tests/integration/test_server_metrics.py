"""GET /metrics of `brisk serve`: vLLM-named families, counters that follow the
usage the API reports, well-formed histograms, and `promtool check metrics`.

The module has its own stories260K server, so every counter starts at zero.
"""

import math
import re
import shutil
import subprocess
import time

import pytest
from conftest import metric_value, parse_prometheus

STORIES = "stories260K"

HISTOGRAMS = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
              "vllm:request_prompt_tokens", "vllm:request_generation_tokens"]
SCALARS = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter",
    "vllm:request_success_total": "counter",
    "brisk_prompt_tokens_per_second": "gauge",
    "brisk_generation_tokens_per_second": "gauge",
}
QUANTILE_GAUGES = [f"brisk_{what}_{q}_seconds"
                   for what in ("time_to_first_token", "inter_token_latency",
                                "e2e_request_latency")
                   for q in ("p50", "p95", "p99")]


@pytest.fixture(scope="module")
def server(stories_server):
    return stories_server


def types_of(text):
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def snapshot(srv):
    return srv.metrics()


def delta(after, before, name, **labels):
    return metric_value(after, name, **labels) - metric_value(before, name, **labels)


def test_exposition_format(server):
    r = server.request("GET", "/metrics")
    assert r.status == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4"), r.headers
    text = r.text
    assert text.endswith("\n")
    types = types_of(text)
    for name, kind in SCALARS.items():
        assert types.get(name) == kind, (name, types.get(name))
    for name in HISTOGRAMS:
        assert types.get(name) == "histogram", name
    for name in QUANTILE_GAUGES:
        assert types.get(name) == "gauge", name
    samples = parse_prometheus(text)
    # every sample belongs to a family with a TYPE line and carries the model name
    for name, labels, _ in samples:
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        assert family in types, name
        assert labels.get("model_name") == STORIES, (name, labels)
    assert {lab.get("finished_reason") for n, lab, _ in samples
            if n == "vllm:request_success_total"} >= {"stop", "length", "abort"}


def wait_counters(srv, before, want, timeout=5.0):
    """Polls until every (name, labels) in want has grown by the given amount;
    returns the last scrape (the caller asserts)."""
    deadline = time.monotonic() + timeout * srv.slow
    while True:
        after = snapshot(srv)
        if all(delta(after, before, name, **dict(labels)) >= d
               for (name, labels), d in want.items()) or time.monotonic() > deadline:
            return after
        time.sleep(0.05)


def test_counters_follow_usage(server):
    client = server.client()
    before = snapshot(server)
    usages, finishes = [], []

    def add(r):
        usages.append((r.usage.prompt_tokens, r.usage.completion_tokens))
        finishes.append(r.choices[0].finish_reason)

    add(client.completions.create(model=STORIES, prompt="Lily had a cat", max_tokens=9,
                                  temperature=0))
    add(client.completions.create(model=STORIES, prompt=[1], max_tokens=200, temperature=0,
                                  stop=["park"]))
    add(client.completions.create(model=STORIES, prompt=[1, 403, 407], max_tokens=5,
                                  temperature=0.7, seed=3, echo=True))
    chunks = list(client.completions.create(model=STORIES, prompt="The dog", max_tokens=7,
                                            stream=True, temperature=0,
                                            stream_options={"include_usage": True}))
    usages.append((chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens))
    finishes += [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]
    assert finishes == ["length", "stop", "length", "length"]

    n_req = len(usages)
    prompt = sum(u[0] for u in usages)
    gen = sum(u[1] for u in usages)
    want = {("vllm:prompt_tokens_total", ()): prompt,
            ("vllm:generation_tokens_total", ()): gen,
            ("vllm:e2e_request_latency_seconds_count", ()): n_req}
    after = wait_counters(server, before, want)
    assert delta(after, before, "vllm:prompt_tokens_total") == prompt
    assert delta(after, before, "vllm:generation_tokens_total") == gen
    assert delta(after, before, "vllm:request_success_total", finished_reason="length") == 3
    assert delta(after, before, "vllm:request_success_total", finished_reason="stop") == 1
    assert delta(after, before, "vllm:request_success_total", finished_reason="error") == 0
    for name in ("vllm:e2e_request_latency_seconds", "vllm:time_to_first_token_seconds",
                 "vllm:request_queue_time_seconds", "vllm:request_prompt_tokens",
                 "vllm:request_generation_tokens"):
        assert delta(after, before, name + "_count") == n_req, name
    assert delta(after, before, "vllm:request_prompt_tokens_sum") == prompt
    assert delta(after, before, "vllm:request_generation_tokens_sum") == gen
    # one inter-token gap per token after the first
    assert delta(after, before, "vllm:inter_token_latency_seconds_count") == gen - n_req
    assert metric_value(after, "brisk_generation_tokens_per_second") > 0
    assert metric_value(after, "brisk_prompt_tokens_per_second") > 0
    for name in QUANTILE_GAUGES[:3] + QUANTILE_GAUGES[6:]:
        assert metric_value(after, name) > 0, name
    for stem in ("time_to_first_token", "inter_token_latency", "e2e_request_latency"):
        p50, p95, p99 = (metric_value(after, f"brisk_{stem}_{q}_seconds")
                         for q in ("p50", "p95", "p99"))
        assert 0 <= p50 <= p95 <= p99, (stem, p50, p95, p99)


def test_histograms_well_formed(server):
    server.client().completions.create(model=STORIES, prompt=[1], max_tokens=20)
    time.sleep(0.1)
    samples = snapshot(server)
    for name in HISTOGRAMS:
        buckets = [(float(lab["le"]), v) for n, lab, v in samples if n == name + "_bucket"]
        assert len(buckets) >= 2, name
        les = [le for le, _ in buckets]
        assert les == sorted(les) and les[-1] == math.inf, (name, les)
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), (name, counts)  # cumulative
        count = metric_value(samples, name + "_count")
        assert counts[-1] == count >= 1, (name, counts[-1], count)
        total = metric_value(samples, name + "_sum")
        assert total >= 0, name
        if name.endswith("_seconds"):
            assert total < 3600 * count, (name, total)


def test_idle_gauges(server):
    got = server.wait_gauges(0, 0)
    assert got == (0, 0)
    samples = snapshot(server)
    assert 0.0 <= metric_value(samples, "vllm:kv_cache_usage_perc") <= 1.0


def test_http_status_counter(server):
    before = snapshot(server)
    for _ in range(2):
        assert server.request("GET", "/no-such-path").status == 404
    assert server.post("/v1/completions", {"prompt": "x", "temperature": 9}).status == 400
    after = wait_counters(server, before, {("brisk_http_requests_total", (("code", "404"),)): 2})
    assert delta(after, before, "brisk_http_requests_total", code="404") == 2
    assert delta(after, before, "brisk_http_requests_total", code="400") == 1


def test_unknown_fields_counted(server):
    before = snapshot(server)
    r = server.post("/v1/completions", {"prompt": [1], "max_tokens": 1, "frobnicate": 1,
                                        "wibble": {"x": 2}})
    assert r.status == 200
    after = wait_counters(server, before, {("brisk_unknown_request_fields_total", ()): 2})
    assert delta(after, before, "brisk_unknown_request_fields_total") == 2


def test_promtool_check(server):
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool not on PATH (scripts/install-deps.sh installs it)")
    server.client().completions.create(model=STORIES, prompt=[1], max_tokens=4)
    text = server.metrics_text()
    p = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True,
                       timeout=60)
    out = (p.stdout + p.stderr).decode()
    # 3 = lint problems only; vLLM's names contain ':', which promtool's linter dislikes.
    assert p.returncode in (0, 3), (p.returncode, out)
    complaints = [ln for ln in out.splitlines() if ln.strip()]
    others = [ln for ln in complaints if "should not contain ':'" not in ln]
    assert not others, out
