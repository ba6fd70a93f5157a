"""bench/soak.py, the judging half of the soak script (bench/soak.sh): its verdicts on
synthetic runs (a clean one passes; each kind of trouble fails exactly its criterion),
its window percentiles against numpy, the soak's phases (A and C with the same seed:
merged totals and records at their offsets, the matched first/last windows, the
verdict command on phase files and on an older single soak.json), and its sampling of a real brisk serve (process
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


def proc_cpu_s(pid):
    """utime + stime of pid in seconds, from /proc/<pid>/stat (fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    # The server's CPU time read straight from /proc just before and after the
    # snapshot brackets what the snapshot reports: a check of the parsing that
    # holds however little CPU a fast machine has spent (0 ticks is possible).
    cpu_before = proc_cpu_s(pid)
    s = soak.snapshot(stories_server.url, pid)
    cpu_after = proc_cpu_s(pid)
    assert s["alive"] and s["metrics_ok"] and s["start_ticks"] > 0
    assert s["rss_kib"] > 1024 and s["fds"] >= 3 and s["threads"] >= 1
    assert cpu_before - 0.005 <= s["cpu_s"] <= cpu_after + 0.005, (cpu_before, s["cpu_s"], cpu_after)
    assert s["host_busy_s"] >= s["cpu_s"] and s["host_steal_s"] >= 0
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


# ---- the phases: A and C with the same seed, so the same requests -------------------


def phase_run(seed, duration, rate=2.0, factor=1.0, lat_seed=7):
    """brisk-bench's runs[0] of one phase: seed sets the schedule (send times, kinds,
    abort points, as brisk-bench's --seed does), lat_seed the latencies, times factor."""
    sched, lat = np.random.default_rng(seed), np.random.default_rng(lat_seed)
    reqs, t, i = [], 0.0, 4  # the warm-up took indices 0-3
    while t < duration:
        u = float(sched.uniform())
        kind = "invalid" if u < 0.02 else "abort" if u < 0.07 else "normal"
        ttft = float(lat.uniform(20, 80)) * factor
        e2e = ttft + float(lat.uniform(900, 1100)) * factor
        q = {"index": i, "t_start_s": t, "ttft_ms": ttft, "e2e_ms": e2e, "input_tokens": 128,
             "output_tokens": 128, "max_tokens": 128, "result": "ok", "kind": kind}
        if kind == "abort":  # 100x slower: in no latency figure
            q.update(result="aborted", ttft_ms=None, e2e_ms=1e6, output_tokens=0,
                     abort_at=int(sched.integers(0, 128)))
        elif kind == "invalid":
            q.update(result="invalid_ok", ttft_ms=None, e2e_ms=0.2, output_tokens=0)
        reqs.append(q)
        t += float(sched.exponential(1 / rate))
        i += 1
    n = {r: sum(q["result"] == r for q in reqs) for r in ("ok", "aborted", "invalid_ok")}
    e2e = [q["e2e_ms"] for q in reqs if q["result"] == "ok"]
    half = duration / 2
    return {"completed": n["ok"], "failed": 0, "cancelled": 0, "aborted": n["aborted"],
            "invalid_ok": n["invalid_ok"], "invalid_unexpected": 0,
            "duration_s": duration + 1.5, "total_input_tokens": 128 * len(reqs),
            "total_output_tokens": 128 * n["ok"], "request_throughput": n["ok"] / duration,
            "output_throughput": 128 * n["ok"] / duration,
            "errors": {"by_status": {}, "by_kind": {"http": 0}, "first": None},
            "ttft_ms": {"p50": 50.0, "p99": 80.0, "max": 80.0},
            "tpot_ms": {"p50": 8.0, "p99": 9.0, "max": 9.0},
            "itl_ms": {"p50": 7.0 * factor, "p99": 30.0 * factor, "max": 99.0},
            "e2e_ms": {"p50": float(np.percentile(e2e, 50)),
                       "p99": float(np.percentile(e2e, 99)), "max": max(e2e)},
            "invalid_ms": {"p50": 0.2, "p99": 0.2, "max": 0.2},
            "intervals": [{"t_start_s": a, "t_end_s": a + half, "partial": False,
                           "completed": 1, "failed": 0, "aborted": 0, "invalid_ok": 0,
                           "invalid_unexpected": 0, "request_throughput": 1.0,
                           "output_throughput": 128.0, "errors": {"by_status": {}},
                           **{k: {"p50": 1.0, "p99": 2.0} for k in ("ttft_ms", "itl_ms",
                                                                     "e2e_ms")}}
                          for a in (0.0, half)],
            "requests": reqs}


OFFSETS = (0.0, 63.0, 545.0)


def three_phases(c_seed=1, c_factor=1.0):
    runs = (phase_run(1, 60), phase_run(2, 480, lat_seed=8), phase_run(c_seed, 60,
                                                                      factor=c_factor))
    return [{"name": n, "seed": s, "duration_s": d, "offset_s": o, "run": r}
            for n, s, d, o, r in zip("ABC", (1, 2, c_seed), (60.0, 480.0, 60.0), OFFSETS,
                                     runs)]


def phased(phases):
    case = clean()
    case["phases"] = phases
    case["run"] = soak.merge_phases(phases)
    return case


def judge_phased(case):
    v, windows = soak.judge(PARAMS, case["run"], case["samples"], case["idle"], case["pre"],
                            case["final"], case["exit_code"], case["phases"])
    return {x["criterion"]: x for x in v}, windows


def failing_phased(case):
    return sorted(n for n, x in judge_phased(case)[0].items() if x["pass"] is False)


def test_merge_phases_sums_and_offsets():
    phases = three_phases()
    phases[1]["run"]["errors"]["by_status"] = {"503": 2, "429": 1}
    phases[1]["run"]["failed"] = 3
    phases[2]["run"]["errors"]["by_status"] = {"503": 1}
    m = soak.merge_phases(phases)
    runs = [ph["run"] for ph in phases]
    for k in ("completed", "aborted", "invalid_ok", "failed", "total_output_tokens",
              "total_input_tokens"):
        assert m[k] == sum(r[k] for r in runs), k
    assert m["errors"]["by_status"] == {"503": 3, "429": 1}
    # every record, moved by its phase's start and tagged with it
    assert len(m["requests"]) == sum(len(r["requests"]) for r in runs)
    at = 0
    for ph in phases:
        for q in ph["run"]["requests"]:
            got = m["requests"][at]
            assert got["phase"] == ph["name"] and got["index"] == q["index"]
            assert got["t_start_s"] == pytest.approx(q["t_start_s"] + ph["offset_s"])
            at += 1
    assert [i["t_start_s"] for i in m["intervals"]] == [0, 30, 63, 303, 545, 575]
    assert [i["phase"] for i in m["intervals"]] == list("AABBCC")
    assert m["duration_s"] == pytest.approx(545 + 61.5)
    # the merged latencies: recomputed from every successful record, as numpy has them
    ok = [q for r in runs for q in r["requests"] if q["result"] == "ok"]
    for pct in (50, 99):
        assert m["e2e_ms"][f"p{pct}"] == pytest.approx(
            float(np.percentile([q["e2e_ms"] for q in ok], pct)), rel=1e-12)
        assert m["ttft_ms"][f"p{pct}"] == pytest.approx(
            float(np.percentile([q["ttft_ms"] for q in ok], pct)), rel=1e-12)
    assert m["e2e_ms"]["max"] < 1e6  # aborted requests are no latency
    # no merge invented for what brisk-bench reports only as a distribution
    assert m["itl_ms"] is None and m["invalid_ms"] is None
    # the source runs are untouched
    assert runs[2]["requests"][0]["t_start_s"] == 0.0 and "phase" not in runs[2]["requests"][0]


def test_matched_windows_same_schedule_passes():
    case = phased(three_phases())
    v, windows = judge_phased(case)
    assert failing_phased(case) == []
    e2e = [x for n, x in v.items() if n.startswith("E2E P99")]
    assert len(e2e) == 1 and "the same arrival schedule (seed 1)" in e2e[0]["criterion"]
    assert "1.00x" in e2e[0]["measured"]
    same = [x for n, x in v.items() if n.startswith("first and last windows")]
    assert len(same) == 1 and same[0]["pass"] is True, same
    # the windows are the phases, placed at their offsets
    assert windows["first"]["phase"] == "A" and windows["last"]["phase"] == "C"
    assert windows["last"]["t_start_s"] == 545.0
    assert windows["first"]["requests"] == windows["last"]["requests"] == \
        case["phases"][0]["run"]["completed"]


@pytest.mark.parametrize("factor,ok", [(1.2, False), (1.08, True), (0.5, True)])
def test_matched_windows_degraded_last_phase(factor, ok):
    bad = failing_phased(phased(three_phases(c_factor=factor)))
    if ok:
        assert bad == []
    else:
        assert len(bad) == 1 and bad[0].startswith("E2E P99"), bad


def test_matched_ratios_tell_a_drift_from_an_episode():
    a = phase_run(1, 180)["requests"]
    # a drift: every request of the last window 1.3x slower
    drift = [{**q, "e2e_ms": q["e2e_ms"] * 1.3} for q in a]
    med, by_min, n = soak.matched_ratios(a, drift)
    assert n == sum(q["result"] == "ok" for q in a)
    assert med == pytest.approx(1.3) and by_min == pytest.approx([1.3, 1.3, 1.3])
    # an episode: only the second minute 2x slower
    ep = [{**q, "e2e_ms": q["e2e_ms"] * (2.0 if 60 <= q["t_start_s"] < 120 else 1.0)} for q in a]
    med, by_min, n = soak.matched_ratios(a, ep)
    assert med == pytest.approx(1.0) and by_min == pytest.approx([1.0, 2.0, 1.0])
    # aborted and unanswered requests are no latency; nothing in common: None
    assert soak.matched_ratios(a, [q for q in a if q["result"] != "ok"]) == (None, [], 0)
    # the row appears, not judged, in a matched verdict
    v, _ = judge_phased(phased(three_phases(c_factor=1.2)))
    row = [x for n, x in v.items() if n.startswith("the same requests one by one")]
    assert len(row) == 1 and row[0]["pass"] is None and row[0]["measured"].startswith("1.20x")


def test_cpu_share_from_samples():
    samples = [sample(t, cpu_s=100 + 1.5 * t, host_steal_s=7 + 0.25 * t) for t in range(0, 121, 10)]
    cores, steal = soak.cpu_share(samples, 20, 80)
    assert cores == pytest.approx(1.5) and steal == pytest.approx(0.25)
    assert soak.cpu_share(samples, 200, 300) == (None, None)  # no samples there
    assert soak.cpu_share([sample(t) for t in (0, 10, 20)], 0, 20) == (None, None)  # old samples
    s = soak.read_host_cpu()
    assert s["host_busy_s"] > 0 and s["host_steal_s"] >= 0


def test_matched_windows_need_the_same_schedule():
    # C said to have seed 1 but sent another schedule: the comparison is not valid
    phases = three_phases()
    phases[2]["run"] = phase_run(3, 60)
    bad = failing_phased(phased(phases))
    assert any(b.startswith("first and last windows") for b in bad), bad
    # phases whose first and last seeds differ are not matched: windows cut by time
    v, windows = judge_phased(phased(three_phases(c_seed=3)))
    assert not any(n.startswith("first and last windows") for n in v)
    assert "phase" not in windows["last"] and windows["last"]["t_start_s"] == 540
    # the same seed, but C's prompts came out another length (say, another calibration)
    phases = three_phases()
    for q in phases[2]["run"]["requests"]:
        q["input_tokens"] = 160
    bad = failing_phased(phased(phases))
    assert bad == [b for b in bad if b.startswith("first and last windows")] and bad, bad


def test_a_phase_without_report_fails():
    phases = three_phases()
    phases[1]["run"] = None
    case = phased(phases)
    v, _ = judge_phased(case)
    bad = failing_phased(case)
    assert bad == ["brisk-bench report of the soak"], bad
    assert "phase B" in v["brisk-bench report of the soak"]["measured"]


def write_work(tmp, phases, t0=1.8e9, lull=2.0):
    """A soak.sh work dir: the phases' reports, phases.jsonl with their wall times
    (brisk-bench's duration_s after a 3-s warm-up), the samples, idle/pre/final."""
    c = clean()
    (tmp / "t0").write_text(f"{t0}\n")
    lines, start = [], t0
    for ph in phases:
        rep = {"tool": "brisk-bench", "runs": [ph["run"]]}
        name = f"soak-{ph['name'].lower()}.json"
        (tmp / name).write_text(json.dumps(rep))
        end = start + 3.0 + ph["run"]["duration_s"]
        lines.append({"name": ph["name"], "seed": ph["seed"], "duration_s": ph["duration_s"],
                      "json": name, "start_wall": start, "end_wall": end, "rc": 0})
        start = end + lull
    (tmp / "phases.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in c["samples"]))
    for name in ("idle", "pre", "final"):
        (tmp / f"{name}.json").write_text(json.dumps(c[name]))
    (tmp / "exit_code").write_text("0\n")
    return lines


def verdict(work, out):
    args = [sys.executable, str(REPO / "bench" / "soak.py"), "verdict", "--work", str(work),
            "--out", str(out)]
    for k, v in (("model", "m.gguf"), ("weights", "int8"), ("serve-args", ""),
                 ("machine", "test"), ("commit", "x"), ("duration", 600), ("window", 60),
                 ("interval", 30), ("sample-every", 10), ("rate-fraction", 0.6),
                 ("capacity", 3.3), ("rate", 2.0), ("capacity-concurrency", 32),
                 ("capacity-s", 20), ("input-len", 128), ("output-len", 128),
                 ("abort-rate", 0.05), ("invalid-rate", 0.02), ("seed", 1),
                 ("rss-limit-mib", 16), ("p99-tolerance", 0.1)):
        args += ["--" + k, str(v)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr, (json.loads(out.read_text())
                                               if out.exists() else None)


def test_verdict_reads_the_phase_files(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    lines = write_work(work, three_phases())
    rc, text, doc = verdict(work, tmp_path / "r.json")
    assert rc == 0, text
    assert doc["pass"] and doc["params"]["matched_windows"] is True
    assert [ph["name"] for ph in doc["phases"]] == ["A", "B", "C"]
    # each phase starts where its measured run began: its end minus brisk-bench's duration
    for ph, ln in zip(doc["phases"], lines):
        assert ph["offset_s"] == pytest.approx(ln["start_wall"] + 3.0 - 1.8e9, abs=1e-3)
        assert ph["run"]["itl_ms"]["p99"] == pytest.approx(30.0)
    assert doc["windows"]["last"]["t_start_s"] == doc["phases"][2]["offset_s"]
    assert doc["run"]["completed"] == sum(ph["run"]["completed"] for ph in doc["phases"])
    assert doc["run"]["itl_ms"] is None
    assert [i["phase"] for i in doc["intervals"]] == list("AABBCC")
    assert doc["intervals"][4]["t_start_s"] == pytest.approx(doc["phases"][2]["offset_s"])
    assert "same arrival schedule (seed 1)" in text
    # the same files with a slower last phase: exit 1, on the E2E P99 alone
    work2 = tmp_path / "work2"
    work2.mkdir()
    write_work(work2, three_phases(c_factor=1.3))
    rc, text, doc = verdict(work2, tmp_path / "r2.json")
    assert rc == 1 and not doc["pass"], text
    assert [x["criterion"][:7] for x in doc["verdicts"] if x["pass"] is False] == ["E2E P99"]


def test_verdict_reads_an_old_single_run(tmp_path):
    # a work dir of the soak.sh before the phases: soak.json, windows cut by time
    write_work(tmp_path, [])
    (tmp_path / "phases.jsonl").unlink()
    run = clean_run()
    run.update(duration_s=600.0, total_output_tokens=128000, request_throughput=1.6,
               output_throughput=213.0,
               **{k: {"p50": 1.0, "p99": 2.0, "max": 3.0}
                  for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "invalid_ms")})
    (tmp_path / "soak.json").write_text(json.dumps({"runs": [run]}))
    rc, text, doc = verdict(tmp_path, tmp_path / "r.json")
    assert rc == 0, text
    assert doc["params"]["matched_windows"] is False and len(doc["phases"]) == 1
    assert doc["run"]["itl_ms"] == {"p50": 1.0, "p99": 2.0, "max": 3.0}
    crit = [x["criterion"] for x in doc["verdicts"] if x["criterion"].startswith("E2E P99")]
    assert crit == ["E2E P99, last 60 s vs first 60 s"]
    assert doc["windows"]["first"]["requests"] + doc["windows"]["last"]["requests"] == 200
