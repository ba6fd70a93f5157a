"""Every PromQL expression in deploy/monitoring/ against a real Prometheus.

One `brisk serve` (stories260K) and one Prometheus (the Debian package's
/usr/bin/prometheus) scraping it every second, with the labels the
PodMonitor gives in a cluster (job="brisk", namespace, pod) set through
static_configs. After a little traffic (completions, a stream, a 400) and a
few scrapes, the test evaluates through /api/v1/query:

  - every target of the Grafana dashboard, with $namespace, $pod and
    $__rate_interval substituted as Grafana does;
  - every alert expr of alerts.yaml; Prometheus also loads the rule groups
    and must evaluate each without error, and `promtool check rules` must
    accept them;
  - the Prometheus Adapter rules: seriesQuery through /api/v1/series, and
    metricsQuery with <<.Series>>, <<.LabelMatchers>>, <<.GroupBy>> filled in
    as the adapter does for a per-pod HPA query;
  - the KEDA ScaledObject's query.

Each must succeed. Expressions over brisk's own metrics must return finite
values (the dashboard's and the adapter's and KEDA's) and every metric named
in any expression must be one brisk exports, apart from METRICS_NOT_FROM_BRISK.
On a build without NVML the GPU metrics do not exist: their expressions must
still parse and evaluate, to an empty result.

Runs in about 10 s. Without /usr/bin/prometheus it fails under CI (CI or
BRISK_REQUIRE_MODELS=1 set, as scripts/test.sh does) and skips otherwise.
"""

import copy
import importlib.util
import json
import math
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MON = REPO / "deploy" / "monitoring"

# The integration suite's fixtures (binary, model conversion, BriskServer),
# loaded under another module name so that they are not a second "conftest".
_spec = importlib.util.spec_from_file_location(
    "brisk_integration_conftest", REPO / "tests" / "integration" / "conftest.py")
_it = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_it)
brisk_bin = _it.brisk_bin
brisk = _it.brisk
shared_dir = _it.shared_dir
stories260k_gguf = _it.stories260k_gguf
start_server = _it.start_server

NAMESPACE = "brisk"
POD = "brisk-7d9f8-abcde"
SCRAPE_S = 1.0

# Metrics an expression may name that brisk's /metrics does not export here:
#  - up: Prometheus' own per-target series (brisk down / all replicas down);
#  - kube_pod_container_status_restarts_total: kube-state-metrics, for the
#    restart alert (a restart is invisible from inside the process);
# (brisk_gpu_* come from brisk itself: the stack runs it on a test-double NVML.)
METRICS_NOT_FROM_BRISK = {"up", "kube_pod_container_status_restarts_total"}

# Words of PromQL that can stand bare in an expression (functions,
# aggregations, operators, modifiers). Any other bare identifier outside
# label lists would be a metric named without braces, which the name check
# below could miss, so the test rejects it.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "rate", "irate", "increase", "delta", "idelta",
    "deriv", "histogram_quantile", "absent", "absent_over_time", "abs", "clamp", "clamp_min",
    "clamp_max", "avg_over_time", "max_over_time", "min_over_time", "sum_over_time",
    "count_over_time", "last_over_time", "quantile_over_time", "predict_linear", "vector",
    "scalar", "label_replace", "label_join", "time", "timestamp", "resets", "changes", "round",
    "ceil", "floor", "sort", "sort_desc", "e", "inf", "nan"}


# ---- the expressions --------------------------------------------------------


def dashboard_exprs(namespace, pod_regex, rate_interval):
    """[(where, expr)] for every target of the dashboard, variables substituted."""
    dash = json.loads((MON / "grafana-dashboard.json").read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            e = (t["expr"].replace("$__rate_interval", rate_interval)
                 .replace("$namespace", namespace).replace("$pod", pod_regex))
            assert "$" not in e, f"unsubstituted variable in {p['title']}: {e}"
            out.append((f"dashboard '{p['title']}' {t['refId']}", e))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
            assert m, f"variable {v['name']}: unexpected query {q}"
            e = m.group(1).replace("$namespace", namespace)
            out.append((f"dashboard variable {v['name']} (label {m.group(2)})", e))
    return out


def alert_rules():
    docs = list(yaml.safe_load_all((MON / "alerts.yaml").read_text()))
    assert len(docs) == 1 and docs[0]["kind"] == "PrometheusRule"
    return docs[0]["spec"]["groups"]


def adapter_rules():
    docs = list(yaml.safe_load_all((MON / "prometheus-adapter.yaml").read_text()))
    assert len(docs) == 1 and docs[0]["kind"] == "ConfigMap"
    return yaml.safe_load(docs[0]["data"]["config.yaml"])["rules"]


def keda_queries():
    docs = list(yaml.safe_load_all((MON / "keda-scaledobject.yaml").read_text()))
    assert len(docs) == 1 and docs[0]["kind"] == "ScaledObject"
    return [t["metadata"]["query"] for t in docs[0]["spec"]["triggers"] if t["type"] == "prometheus"]


def adapter_query(rule, namespace, pods):
    """metricsQuery as the adapter builds it for GET .../namespaces/NS/pods/*/METRIC."""
    series = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", rule["seriesQuery"]).group(1)
    matchers = f'namespace="{namespace}",pod=~"{"|".join(pods)}"'
    return (rule["metricsQuery"].replace("<<.Series>>", series)
            .replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", "pod"))


def metric_names(expr):
    """Metric names an expression selects. Fails on a bare identifier that is
    not PromQL (a metric written without braces)."""
    body = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    names = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", body))
    rest = re.sub(r"\{[^}]*\}", " ", body)  # label matchers
    rest = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", rest)
    rest = re.sub(r"\[[^\]]*\]", " ", rest)  # range durations
    for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rest):
        assert word in PROMQL_WORDS or word in names, \
            f"bare identifier {word!r} in {expr!r}: write metrics as name{{...}}"
    return names


def selectors(expr):
    """Every vector selector name{matchers} in an expression."""
    return re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*\s*\{[^}]*\}", expr)


# ---- Prometheus -------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_binary(name):
    path = shutil.which(name) or f"/usr/bin/{name}"
    if not os.access(path, os.X_OK):
        msg = (f"{name} not found: install the Debian package prometheus "
               "(scripts/install-deps.sh)")
        if os.environ.get("CI") or os.environ.get("BRISK_REQUIRE_MODELS") == "1":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return path


class Prometheus:
    def __init__(self, binary, workdir, target, rules_file):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = {
            "global": {"scrape_interval": f"{SCRAPE_S:g}s", "evaluation_interval": "1s"},
            "rule_files": [str(rules_file)],
            "scrape_configs": [{
                "job_name": "brisk",
                "scrape_interval": f"{SCRAPE_S:g}s",
                "scrape_timeout": f"{SCRAPE_S:g}s",
                "static_configs": [{"targets": [target],
                                    "labels": {"namespace": NAMESPACE, "pod": POD}}],
            }],
        }
        self.cfg_path = workdir / "prometheus.yml"
        self.cfg_path.write_text(yaml.safe_dump(cfg))
        self.log_path = workdir / "prometheus.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.cfg_path}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)

    def log(self):
        return self.log_path.read_text(errors="replace")[-4000:]

    def get(self, path, **params):
        url = f"{self.url}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def query(self, expr):
        """/api/v1/query; returns the JSON (status error answers are returned, not raised)."""
        try:
            return self.get("/api/v1/query", query=expr)
        except urllib.error.HTTPError as e:  # 400/422: bad expression
            return json.loads(e.read())

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited {self.proc.returncode}:\n{self.log()}", pytrace=False)
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"prometheus not ready within {timeout} s:\n{self.log()}", pytrace=False)

    def scrapes(self):
        """Successful scrapes of brisk so far (samples of up == 1 in the TSDB)."""
        r = self.query('count_over_time(up{job="brisk"}[10m]) and on () up{job="brisk"} == 1')
        res = r.get("data", {}).get("result", [])
        return int(float(res[0]["value"][1])) if res else 0

    def wait_scrapes(self, n, timeout=20):
        deadline = time.monotonic() + timeout
        while self.scrapes() < n:
            if time.monotonic() > deadline:
                pytest.fail(f"fewer than {n} scrapes of brisk within {timeout} s; targets: "
                            f"{self.get('/api/v1/targets')}\n{self.log()}", pytrace=False)
            time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# ---- the fixture: brisk + Prometheus + traffic ------------------------------


@pytest.fixture(scope="module")
def stack(brisk, start_server, stories260k_gguf, tmp_path_factory):
    prom_bin = prometheus_binary("prometheus")
    work = tmp_path_factory.mktemp("prometheus")
    rules_file = work / "brisk-rules.yml"
    rules_file.write_text(yaml.safe_dump({"groups": alert_rules()}, sort_keys=False))

    # The GPU panels and queries need brisk_gpu_* series: brisk samples the
    # test-double NVML (tests/tools/fake_nvml.c, two GPUs with the values
    # below), so those expressions are checked on values, not just parsed.
    lib = Path(brisk.path).resolve().parent.parent / "tests" / "libfake_nvml.so"
    if not lib.is_file():
        pytest.fail(f"{lib} not built (CMake target fake_nvml)")
    cfg = work / "nvml.cfg"
    # Thermal state of a healthy pair: no GPU alert may fire (GPU 0 idle,
    # GPU 1 at its power cap, which no alert watches).
    cfg.write_text("count 2\n" + "".join(
        f"name.{i} NVIDIA Test {i}\nuuid.{i} GPU-{i:08x}-77\ntotal.{i} {(16 + 64 * i) << 30}\n"
        f"used.{i} {(3 + 5 * i) << 30}\nutil.{i} {37 + 40 * i}\nmemutil.{i} {21 + 9 * i}\n"
        f"temp.{i} {45 + 17 * i}\npower.{i} {123456 + 226544 * i}\npower_limit.{i} "
        f"{700000 - 350000 * i}\nsm_clock.{i} {1410 + 345 * i}\nsm_clock_max.{i} 1980\n"
        f"reasons.{i} {0x1 if i == 0 else 0x4}\n"
        for i in range(2)))
    saved = {k: os.environ.get(k) for k in ("BRISK_NVML_LIB", "FAKE_NVML_FILE")}
    os.environ.update(BRISK_NVML_LIB=str(lib), FAKE_NVML_FILE=str(cfg))
    try:
        srv = start_server(stories260k_gguf, "--gpu-metrics", "on", "--gpu-metrics-interval", "0.2")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    # No request before the first scrape: brisk exports the API routes'
    # common codes (400 among them) at 0 from the start, so rate() sees the
    # first 400 of the traffic below.
    prom = Prometheus(prom_bin, work, f"{srv.host}:{srv.port}", rules_file)
    try:
        prom.wait_ready()
        # Counters must move between scrapes for rate() to be non-zero, so
        # the traffic comes after the first scrape.
        prom.wait_scrapes(1)
        base = prom.scrapes()
        for i in range(4):
            r = srv.post("/v1/completions", {"prompt": f"Once upon a time {i}", "max_tokens": 12,
                                             "temperature": 0})
            assert r.status == 200, r.text
        conn, status, headers = srv.stream("/v1/completions", {
            "prompt": "Once upon a time", "max_tokens": 12, "stream": True})
        assert status == 200
        events = list(conn.iter_sse(headers))
        conn.close()
        assert events and events[-1] == "[DONE]", events[-3:]
        r = srv.post("/v1/completions", {"prompt": "x", "max_tokens": -1})
        assert r.status == 400, r.text
        # Two scrapes after the traffic: the second sample of each counter
        # then holds all of it.
        prom.wait_scrapes(base + 3)
        yield srv, prom
    finally:
        prom.stop()
        srv.stop()


def exported_names(srv):
    names = set()
    for name, _, _ in srv.metrics():
        names.add(re.sub(r"_(bucket|sum|count)$", "", name) if name.endswith(
            ("_bucket", "_sum", "_count")) else name)
        names.add(name)
    return names


def all_exprs():
    """[(where, expr, kind)]: kind 'brisk' (over brisk's metrics), 'alert', 'other'."""
    out = [(w, e, "brisk") for w, e in dashboard_exprs(NAMESPACE, POD, "1m")]
    for g in alert_rules():
        for rule in g["rules"]:
            out.append((f"alert {rule['alert']}", rule["expr"], "alert"))
    for rule in adapter_rules():
        out.append((f"adapter rule {rule['name']['as']}", adapter_query(rule, NAMESPACE, [POD]),
                    "brisk"))
    for i, q in enumerate(keda_queries()):
        out.append((f"KEDA trigger {i}", q, "brisk"))
    return out


# ---- the tests --------------------------------------------------------------


def test_expressions_name_only_exported_metrics(stack):
    srv, _ = stack
    exported = exported_names(srv)
    assert "vllm:num_requests_waiting" in exported  # the scrape parsed
    unknown = {}
    for where, expr, _ in all_exprs():
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        for n in names - exported - METRICS_NOT_FROM_BRISK:
            unknown.setdefault(n, []).append(where)
    for rule in adapter_rules():
        for n in metric_names(rule["seriesQuery"]) - exported:
            unknown.setdefault(n, []).append(f"adapter seriesQuery {rule['name']['as']}")
    assert not unknown, f"expressions name metrics brisk does not export: {unknown}"


def test_every_expression_evaluates(stack):
    _, prom = stack
    problems = []
    counted = 0
    for where, expr, kind in all_exprs():
        r = prom.query(expr)
        counted += 1
        if r.get("status") != "success":
            problems.append(f"{where}: {r.get('errorType')}: {r.get('error')}\n    {expr}")
            continue
        result = r["data"]["result"]
        if kind == "alert":
            # A healthy server under light load: no alert may fire.
            if result:
                problems.append(f"{where}: fires on a healthy server: {result}\n    {expr}")
            continue
        values = [float(s["value"][1]) for s in result]
        if not values or not all(math.isfinite(v) for v in values):
            problems.append(f"{where}: expected finite values, got {result}\n    {expr}")
    assert counted >= 40
    assert not problems, "\n".join(problems)


def test_every_selector_matches_brisk_series(stack):
    """Each name{labels} selector over brisk's metrics selects series: a typo
    in a label (job, namespace, pod, code) would otherwise make an alert or
    panel silently empty."""
    srv, prom = stack
    exported = exported_names(srv)
    problems = []
    for where, expr, _ in all_exprs():
        sub = expr.replace("$namespace", NAMESPACE)
        for sel in selectors(sub):
            name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", sel).group(0)
            if name in METRICS_NOT_FROM_BRISK - {"up"} and name not in exported:
                continue  # kube-state-metrics, or GPU metrics on a CPU build
            if 'code=~"5.."' in sel.replace(" ", ""):
                # No 5xx was provoked; the selector without the code matcher
                # must match instead.
                sel = re.sub(r',\s*code=~"5\.\."', "", sel)
            r = prom.query(sel)
            if r.get("status") != "success" or not r["data"]["result"]:
                problems.append(f"{where}: selector {sel} matches nothing: {r}")
    assert not problems, "\n".join(problems)


def test_traffic_shows_in_the_signals(stack):
    """The panels and scaling signals read what the traffic did."""
    _, prom = stack

    def one(expr):
        r = prom.query(expr)
        assert r["status"] == "success", r
        return {tuple(sorted(s["metric"].items())): float(s["value"][1]) for s in r["data"]["result"]}

    sel = f'job="brisk", namespace="{NAMESPACE}", pod=~"{POD}"'
    by_code = {dict(k).get("code"): v for k, v in one(
        f"sum by (code) (rate(brisk_http_requests_total{{{sel}, route=\"/v1/completions\"}}[1m]))").items()}
    assert by_code.get("200", 0) > 0 and by_code.get("400", 0) > 0, by_code
    gen = one(f"sum(rate(vllm:generation_tokens_total{{{sel}}}[1m]))")
    assert list(gen.values())[0] > 0, gen
    ttft = one(f"histogram_quantile(0.99, sum by (le) "
               f"(rate(vllm:time_to_first_token_seconds_bucket{{{sel}}}[1m])))")
    assert 0 < list(ttft.values())[0] < 60, ttft
    # The adapter's per-pod series carry exactly the pod label the HPA
    # resolves to a Pod object; idle now, so 0 running and 0 waiting.
    for rule in adapter_rules():
        res = one(adapter_query(rule, NAMESPACE, [POD, "brisk-other-pod"]))
        assert list(res) == [(("pod", POD),)], (rule["name"]["as"], res)
        assert list(res.values()) == [0.0]
        series = prom.get("/api/v1/series", **{"match[]": rule["seriesQuery"]})["data"]
        assert series and all(s["namespace"] == NAMESPACE and s["pod"] == POD for s in series)
        assert re.search(rule["name"]["matches"], series[0]["__name__"])
    assert {r["name"]["as"] for r in adapter_rules()} == {"brisk_requests_waiting",
                                                          "brisk_requests_running"}


def test_gpu_panels_show_the_gpus(stack):
    """The dashboard's GPU queries over the test-double NVML's two GPUs give
    back the values it was told to report (memory in bytes, ratios 0..1)."""
    _, prom = stack
    want = {"brisk_gpu_memory_used_bytes": {"0": 3 << 30, "1": 8 << 30},
            "brisk_gpu_memory_total_bytes": {"0": 16 << 30, "1": 80 << 30},
            "brisk_gpu_utilization_ratio": {"0": 0.37, "1": 0.77},
            "brisk_gpu_temperature_celsius": {"0": 45, "1": 62},
            "brisk_gpu_power_draw_watts": {"0": 123.456, "1": 350.0},
            "brisk_gpu_power_limit_watts": {"0": 700.0, "1": 350.0},
            "brisk_gpu_sm_clock_hertz": {"0": 1410e6, "1": 1755e6},
            "brisk_gpu_sm_clock_max_hertz": {"0": 1980e6, "1": 1980e6}}
    exprs = [e for _, e, _ in all_exprs() if "brisk_gpu_" in e]
    assert len(exprs) >= 10, exprs
    for metric, by_gpu in want.items():
        expr = next(e for e in exprs if re.search(rf"\b{metric}\{{", e))
        r = prom.query(expr)
        got = {s["metric"]["gpu"]: float(s["value"][1]) for s in r["data"]["result"]}
        assert got.keys() == by_gpu.keys(), (expr, r)
        for g, v in by_gpu.items():
            assert got[g] == pytest.approx(v, rel=1e-9), (expr, g, got)
    # The throttle reasons panel: one 0/1 row per GPU and reason, gpu_idle
    # left out; GPU 1's power cap is the one active.
    expr = next(e for e in exprs if "brisk_gpu_clock_throttle_reason" in e)
    r = prom.query(expr)
    got = {(s["metric"]["gpu"], s["metric"]["reason"]): float(s["value"][1])
           for s in r["data"]["result"]}
    assert len(got) == 2 * 9 and ("0", "gpu_idle") not in got, got
    assert {k for k, v in got.items() if v} == {("1", "sw_power_cap")}, got


def test_prometheus_evaluates_the_alert_rules(stack):
    _, prom = stack
    want = {r["alert"] for g in alert_rules() for r in g["rules"]}
    deadline = time.monotonic() + 10
    while True:
        groups = prom.get("/api/v1/rules")["data"]["groups"]
        rules = {r["name"]: r for g in groups for r in g["rules"]}
        if set(rules) == want and all(r.get("lastEvaluation", "").startswith("2")
                                      and not r["lastEvaluation"].startswith("0001")
                                      for r in rules.values()):
            break
        assert time.monotonic() < deadline, f"rules not all evaluated: {rules}"
        time.sleep(0.2)
    bad = {n: (r["health"], r.get("lastError")) for n, r in rules.items() if r["health"] != "ok"}
    assert not bad, bad
    firing = {n: r["state"] for n, r in rules.items() if r["state"] != "inactive"}
    assert not firing, firing


def test_promtool_check_rules(tmp_path):
    promtool = prometheus_binary("promtool")
    f = tmp_path / "rules.yml"
    f.write_text(yaml.safe_dump({"groups": alert_rules()}, sort_keys=False))
    p = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    n = sum(len(g["rules"]) for g in alert_rules())
    assert f"SUCCESS: {n} rules found" in p.stdout, p.stdout
    # The check can fail: a broken copy is rejected.
    broken = copy.deepcopy(alert_rules())
    broken[0]["rules"][0]["expr"] = "sum(rate(up[5m]) by"
    f.write_text(yaml.safe_dump({"groups": broken}))
    p = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0


def test_gpu_alerts_fire(tmp_path):
    """The GPU alerts on made-up series (promtool test rules): a thermal
    slowdown, a power brake and a hot GPU fire after their `for`; the power
    cap and an idle GPU, which are normal, fire nothing."""
    promtool = prometheus_binary("promtool")
    groups = [g for g in alert_rules() if g["name"] == "brisk.gpu"]
    assert {r["alert"] for r in groups[0]["rules"]} == {
        "BriskGPUThermalThrottling", "BriskGPUHardwareSlowdown", "BriskGPUHot"}
    for r in groups[0]["rules"]:
        r.pop("annotations")  # templates: compared on labels only
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    lab = 'job="brisk", namespace="brisk", pod="p", gpu="0"'

    def reason(name, values):
        return {"series": f'brisk_gpu_clock_throttle_reason{{{lab}, reason="{name}"}}',
                "values": values}

    series = [reason("sw_thermal_slowdown", "0 1x20"), reason("hw_thermal_slowdown", "0x20"),
              reason("hw_power_brake_slowdown", "0x5 1x15"), reason("sw_power_cap", "1x20"),
              reason("gpu_idle", "1x20"),
              {"series": f"brisk_gpu_temperature_celsius{{{lab}}}", "values": "80 90x20"}]

    def firing(alert, *at):
        return [{"eval_time": t, "alertname": alert,
                 "exp_alerts": [{"exp_labels": {"severity": "warning", "namespace": "brisk",
                                                "pod": "p", "gpu": "0"}}] if fire else []}
                for t, fire in at]

    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": firing("BriskGPUThermalThrottling", ("4m", False), ("7m", True))
        + firing("BriskGPUHardwareSlowdown", ("9m", False), ("11m", True))
        + firing("BriskGPUHot", ("10m", False), ("12m", True))}]}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    p = subprocess.run([promtool, "test", "rules", "tests.yml"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_alerts_have_runbooks():
    for g in alert_rules():
        for rule in g["rules"]:
            a = rule.get("annotations", {})
            assert {"summary", "description", "runbook"} <= set(a), rule["alert"]
            assert rule.get("labels", {}).get("severity") in ("critical", "warning"), rule["alert"]


def test_metric_name_check_catches_typos():
    """The name extraction that guards against unexported metrics works."""
    assert metric_names('sum(rate(vllm:num_requests_waitin{job="brisk"}[1m]))') == {
        "vllm:num_requests_waitin"}
    with pytest.raises(AssertionError):
        metric_names("sum(rate(vllm:generation_tokens_total[1m]))")
    assert metric_names('sum by (le) (rate(a_bucket{x="{"}[5m])) / on (pod) b{}') == {"a_bucket", "b"}


def test_scaling_contract():
    """The names the HPA (deploy/base) and KEDA rely on."""
    rules = adapter_rules()
    assert {r["name"]["as"] for r in rules} == {"brisk_requests_waiting", "brisk_requests_running"}
    for r in rules:
        assert r["resources"]["overrides"]["pod"] == {"resource": "pod"}
        assert r["resources"]["overrides"]["namespace"] == {"resource": "namespace"}
    so = yaml.safe_load((MON / "keda-scaledobject.yaml").read_text())
    assert so["metadata"]["namespace"] == "brisk"
    assert so["spec"]["scaleTargetRef"]["kind"] == "Deployment"
    assert so["spec"]["scaleTargetRef"]["name"] == "brisk"
    assert any("vllm:num_requests_waiting" in q for q in keda_queries())
    for t in so["spec"]["triggers"]:
        assert float(t["metadata"]["threshold"]) > 0


def test_dashboard_shape():
    """Importable: the data source is an input and a variable, ids are unique,
    every target queries that data source."""
    dash = json.loads((MON / "grafana-dashboard.json").read_text())
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert {"namespace", "pod"} <= set(variables)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"] for p in dash["panels"])
    for want in ("Request rate", "Time to first token", "Inter-token", "End-to-end", "Tokens per second",
                 "Running and waiting", "KV cache", "Preemptions", "Errors", "GPU memory",
                 "GPU temperature", "GPU power", "GPU SM clock", "throttle reasons"):
        assert want in titles, want
    for p in dash["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
