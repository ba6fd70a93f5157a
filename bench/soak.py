#!/usr/bin/env python3
"""soak.py - the measuring and judging half of bench/soak.sh (standard library only).

  soak.py wait-ready --url URL --pid PID [--timeout S]   until /health answers 200
  soak.py snapshot --url URL --pid PID [--t0 T]          one sample, as JSON on stdout
  soak.py idle-fds --pid PID                              open fds of an idle server
  soak.py sample --url URL --pid PID --every S --out F   a sample every S s until SIGTERM
  soak.py settle --url URL --pid PID --idle-fds N        until the server is idle again
  soak.py capacity FILE                                   req/s of a brisk-bench closed loop
  soak.py verdict --work DIR --out FILE [params]          the table, the record, exit 1 on a FAIL

A sample is what the server's process and /metrics say at one moment: whether
the process is alive and its start time (so a restart under the same PID
shows), VmRSS, open file descriptors, threads, and from /metrics the KV-cache
usage, used and cached KV blocks, running and waiting sequences, and the HTTP
responses sent by status code.

The verdicts (see bench/README.md) are computed from the samples, brisk-bench's
JSON reports of the soak (with --json-requests and --interval) and the server's
exit status, so that judge() can be tested on synthetic runs
(tests/integration/test_soak.py).

The soak is brisk-bench run in phases (soak.sh): A = the first WINDOW with --seed
SEED, B = the middle with --seed SEED+1, C = the last WINDOW with --seed SEED again,
so that the first and last windows get the same requests at the same offsets and
their latencies differ only by the server's state. WORK/phases.jsonl lists them
(name, seed, planned duration_s, json, start_wall, end_wall, rc); a work dir of an
older soak.sh, with one soak.json and no phases.jsonl, is judged as a single phase
with windows cut by time.
"""

import argparse
import json
import math
import os
import platform
import re
import signal
import sys
import time
import urllib.request

MIB = 1024 * 1024


# ---- sampling ----------------------------------------------------------------------


def parse_metrics(text):
    """The figures the soak watches, from a Prometheus exposition."""
    out = {"kv_usage": 0.0, "kv_used_blocks": 0.0, "kv_cached_blocks": 0.0, "running": 0.0,
           "waiting": 0.0, "http": {}}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)', line)
        if not m:
            continue
        name, labels, v = m.group(1), m.group(3) or "", float(m.group(4))
        lab = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels))
        if name == "vllm:kv_cache_usage_perc":
            out["kv_usage"] += v
        elif name == "vllm:num_requests_running":
            out["running"] += v
        elif name == "vllm:num_requests_waiting":
            out["waiting"] += v
        elif name == "brisk_kv_cache_blocks" and lab.get("state") == "used":
            out["kv_used_blocks"] += v
        elif name == "brisk_kv_cache_blocks" and lab.get("state") == "cached":
            out["kv_cached_blocks"] += v
        elif name == "brisk_http_requests_total" and "code" in lab:
            out["http"][lab["code"]] = out["http"].get(lab["code"], 0) + int(v)
    out["http_5xx"] = sum(n for c, n in out["http"].items() if c.startswith("5"))
    return out


def read_proc(pid):
    """Process figures from /proc; alive is False when it is gone or a zombie."""
    p = {"alive": False}
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        # the fields after "(comm)": state is field 3, starttime field 22
        fields = stat[stat.rindex(")") + 2:].split()
        p["state"] = fields[0]
        p["start_ticks"] = int(fields[19])
        # utime + stime (fields 14 and 15): the CPU the server got, in seconds
        p["cpu_s"] = round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        p["rss_kib"] = int(re.search(r"^VmRSS:\s+(\d+)", status, re.M).group(1))
        p["threads"] = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))
        p["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
        p["alive"] = fields[0] not in ("Z", "X")
    except (OSError, ValueError, AttributeError, IndexError):
        pass
    return p


def read_host_cpu():
    """The machine's CPU time so far from /proc/stat, in seconds summed over the
    CPUs: busy (user+nice+system+irq+softirq) and steal (taken by the hypervisor
    for other guests). {} when unreadable."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        tick = os.sysconf("SC_CLK_TCK")
        return {"host_busy_s": round((v[0] + v[1] + v[2] + v[5] + v[6]) / tick, 2),
                "host_steal_s": round((v[7] if len(v) > 7 else 0) / tick, 2)}
    except (OSError, ValueError, IndexError):
        return {}


def fetch(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as f:
        return f.status, f.read().decode("utf-8", errors="replace")


def snapshot(url, pid, t0=None):
    s = {"t": round(time.time() - t0, 3) if t0 else 0.0, "wall": round(time.time(), 3)}
    s.update(read_proc(pid))
    s.update(read_host_cpu())
    try:
        status, text = fetch(url + "/metrics")
        s["metrics_ok"] = status == 200
        s.update(parse_metrics(text))
    except Exception as e:  # an unanswered scrape is a finding, not a crash
        s["metrics_ok"] = False
        s["metrics_error"] = str(e)[:200]
    return s


def cmd_wait_ready(a):
    deadline = time.monotonic() + a.timeout
    while time.monotonic() < deadline:
        if not read_proc(a.pid)["alive"]:
            sys.exit("soak.py: brisk serve exited while starting")
        try:
            if fetch(a.url + "/health", timeout=2)[0] == 200:
                return
        except Exception:
            pass
        time.sleep(0.2)
    sys.exit(f"soak.py: {a.url}/health not 200 within {a.timeout:.0f} s")


def cmd_snapshot(a):
    print(json.dumps(snapshot(a.url, a.pid, a.t0)))


def idle_fds(pid, reads=5):
    """The fewest open fds over a few reads: a connection a moment ago (our own
    scrape, say) may not be closed on the server's side yet."""
    best = None
    for _ in range(reads):
        n = read_proc(pid).get("fds")
        if n is not None and (best is None or n < best):
            best = n
        time.sleep(0.2)
    return best


def cmd_idle_fds(a):
    print(idle_fds(a.pid))


def cmd_sample(a):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    t0 = a.t0 or time.time()
    with open(a.out, "a") as f:
        while not stop:
            t_next = time.monotonic() + a.every
            f.write(json.dumps(snapshot(a.url, a.pid, t0)) + "\n")
            f.flush()
            while not stop and time.monotonic() < t_next:
                time.sleep(min(0.2, max(0.0, t_next - time.monotonic())))


def is_idle(s, fds):
    return (s.get("alive") and s.get("metrics_ok") and s["running"] == 0 and s["waiting"] == 0
            and s["kv_used_blocks"] == 0 and s.get("fds", 1 << 30) <= fds)


def cmd_settle(a):
    """Polls until no sequence runs or waits, no KV block is used and the fds are
    back to the idle count, or the timeout; prints the last sample."""
    deadline = time.monotonic() + a.timeout
    while True:
        s = snapshot(a.url, a.pid, a.t0)
        if is_idle(s, a.idle_fds):
            # the scrape's own connection may still be counted: read the fds once more
            s["fds"] = idle_fds(a.pid, 3)
        if is_idle(s, a.idle_fds) or time.monotonic() > deadline or not s.get("alive"):
            s["settle_s"] = round(a.timeout - (deadline - time.monotonic()), 2)
            print(json.dumps(s))
            return
        time.sleep(0.5)


def cmd_capacity(a):
    """Completed requests per second of the closed-loop run: the saturated rate."""
    rep = json.load(open(a.file))
    run = rep["runs"][0]
    if run["completed"] == 0 or run["request_throughput"] <= 0:
        sys.exit(f"soak.py: the capacity run completed nothing: {run['errors']}")
    if run["failed"]:
        print(f"soak.py: warning: {run['failed']} requests failed in the capacity run: "
              f"{run['errors']}", file=sys.stderr)
    print(f"{run['request_throughput']:.6g}")


# ---- judging -----------------------------------------------------------------------


def percentile(values, pct):
    """numpy.percentile's default (linear) method; None for no values."""
    v = sorted(values)
    if not v:
        return None
    rank = pct / 100 * (len(v) - 1)
    lo = math.floor(rank)
    if lo >= len(v) - 1:
        return v[-1]
    return v[lo] + (v[lo + 1] - v[lo]) * (rank - lo)


def window_figures(requests, t_lo, t_hi):
    """P50/P99 of TTFT, TPOT and E2E (ms) over the successful requests sent in
    [t_lo, t_hi): a window of the run, by send time."""
    ok = [q for q in requests if q["result"] == "ok" and t_lo <= q["t_start_s"] < t_hi]
    ttft = [q["ttft_ms"] for q in ok if q["ttft_ms"] is not None]
    e2e = [q["e2e_ms"] for q in ok]
    tpot = [(q["e2e_ms"] - q["ttft_ms"]) / (q["output_tokens"] - 1) for q in ok
            if q["ttft_ms"] is not None and q["output_tokens"] > 1]
    out = {"t_start_s": t_lo, "t_end_s": t_hi, "requests": len(ok)}
    for name, vals in (("ttft_ms", ttft), ("tpot_ms", tpot), ("e2e_ms", e2e)):
        out[name] = {"p50": percentile(vals, 50), "p99": percentile(vals, 99)}
    return out


def latency_figures(requests):
    """P50/P99/max of TTFT, TPOT and E2E (ms) over the successful requests, as
    brisk-bench defines them (TPOT: (E2E - TTFT) / (output tokens - 1))."""
    ok = [q for q in requests if q["result"] == "ok"]
    ttft = [q["ttft_ms"] for q in ok if q["ttft_ms"] is not None]
    tpot = [(q["e2e_ms"] - q["ttft_ms"]) / (q["output_tokens"] - 1) for q in ok
            if q["ttft_ms"] is not None and q["output_tokens"] > 1]
    e2e = [q["e2e_ms"] for q in ok]
    return {name: {"p50": percentile(vals, 50), "p99": percentile(vals, 99),
                   "max": max(vals) if vals else None}
            for name, vals in (("ttft_ms", ttft), ("tpot_ms", tpot), ("e2e_ms", e2e))}


SUMMED = ("completed", "failed", "cancelled", "aborted", "invalid_ok", "invalid_unexpected",
          "total_input_tokens", "total_output_tokens", "expected_output_tokens",
          "output_len_mismatches", "usage_missing")


def merge_phases(phases):
    """One run, shaped like brisk-bench's runs[0], from the phases' runs.

    phases: [{"name", "seed", "offset_s", "run"}, ...] in order; offset_s is the
    phase's start on the soak's clock (seconds after the sampler's t0) and run
    brisk-bench's runs[0] of it (None: it wrote no report). Totals and errors are
    summed; the per-request records and the intervals are concatenated with their
    times moved by offset_s and tagged with the phase; TTFT/TPOT/E2E are recomputed
    from the merged records. ITL and invalid-request latency exist only as each
    phase's distribution (brisk-bench keeps no ITL samples): they are None here and
    stay in each phase's own run. None when no phase has a report."""
    runs = [(ph, ph["run"]) for ph in phases if ph.get("run") is not None]
    if not runs:
        return None
    m = {k: sum(r.get(k) or 0 for _, r in runs) for k in SUMMED}
    m["errors"] = {"by_status": {}, "by_kind": {}, "first": None}
    for _, r in runs:
        e = r.get("errors") or {}
        for part in ("by_status", "by_kind"):
            for k, n in (e.get(part) or {}).items():
                m["errors"][part][k] = m["errors"][part].get(k, 0) + n
        if m["errors"]["first"] is None:
            m["errors"]["first"] = e.get("first")
    m["interrupted"] = any(r.get("interrupted") for _, r in runs)
    m["requests"], m["intervals"] = None, []
    if all(r.get("requests") is not None for _, r in runs):
        m["requests"] = [{**q, "t_start_s": q["t_start_s"] + ph["offset_s"], "phase": ph["name"]}
                         for ph, r in runs for q in r["requests"]]
    for ph, r in runs:
        for i in r.get("intervals") or []:
            m["intervals"].append({**i, "t_start_s": i["t_start_s"] + ph["offset_s"],
                                   "t_end_s": i["t_end_s"] + ph["offset_s"],
                                   "phase": ph["name"]})
    # the span from the first phase's start to the last one's end, lulls included
    first, last = runs[0], runs[-1]
    m["duration_s"] = last[0]["offset_s"] + last[1]["duration_s"] - first[0]["offset_s"]
    span = m["duration_s"] if m["duration_s"] > 0 else float("nan")
    m["request_throughput"] = m["completed"] / span
    m["output_throughput"] = m["total_output_tokens"] / span
    if len(runs) == 1:  # one phase: its own figures, ITL included
        for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "invalid_ms", "request_throughput",
                  "output_throughput"):
            m[k] = first[1].get(k, m.get(k))
    else:
        m.update(latency_figures(m["requests"] or []) if m["requests"] is not None else
                 {k: None for k in ("ttft_ms", "tpot_ms", "e2e_ms")})
        m["itl_ms"] = m["invalid_ms"] = None  # per phase only
    return m


def matched(phases):
    """True when the first and last phases are the matched windows: three phases or
    more, the first and the last with the same seed and planned duration."""
    return (len(phases) >= 3 and phases[0]["seed"] == phases[-1]["seed"]
            and phases[0].get("duration_s") == phases[-1].get("duration_s"))


def same_schedule(first, last):
    """Whether two phases' request records are the same workload: by workload index,
    the same kind, max_tokens, abort point and (both answered) prompt tokens; at most
    one request more or less (the last arrival may fall either side of the end).
    Returns (ok, text)."""
    a = {q["index"]: q for q in first}
    b = {q["index"]: q for q in last}
    common = sorted(a.keys() & b.keys())
    diff = [i for i in common
            if any(a[i].get(k) != b[i].get(k) for k in ("kind", "max_tokens", "abort_at"))
            or (a[i]["result"] == b[i]["result"] == "ok"
                and a[i].get("input_tokens") != b[i].get("input_tokens"))]
    extra = len(a.keys() ^ b.keys())
    gap = max((abs(a[i]["t_start_s"] - b[i]["t_start_s"]) for i in common), default=0.0)
    text = (f"{len(common)} requests in both, {len(diff)} differ, {extra} in one only; "
            f"send times within {gap * 1000:.0f} ms")
    return bool(common) and not diff and extra <= 1, text


def matched_ratios(first, last, minute_s=60.0):
    """The same requests of two matched windows, one by one: the median of each
    answered request's E2E in `last` over its E2E in `first`, overall and by minute
    of send time. A drift of the server slows every minute; an episode (a burst,
    a noisy neighbour) slows one. Returns (median, [median by minute], n)."""
    a = {q["index"]: q for q in first if q["result"] == "ok" and q["e2e_ms"]}
    b = {q["index"]: q for q in last if q["result"] == "ok" and q["e2e_ms"]}
    common = sorted(a.keys() & b.keys())
    if not common:
        return None, [], 0
    ratio = {i: b[i]["e2e_ms"] / a[i]["e2e_ms"] for i in common}
    t_end = max(a[i]["t_start_s"] for i in common)
    minutes = []
    for k in range(int(t_end // minute_s) + 1):
        r = [ratio[i] for i in common if k * minute_s <= a[i]["t_start_s"] < (k + 1) * minute_s]
        if r:
            minutes.append(percentile(r, 50))
    return percentile(list(ratio.values()), 50), minutes, len(common)


def cpu_share(samples, t_lo, t_hi):
    """Over the samples in [t_lo, t_hi]: the server's CPU (cores used, from its
    utime+stime) and the host's steal (cores taken by the hypervisor). None where
    the samples lack the figures."""
    w = [s for s in samples if t_lo <= s["t"] <= t_hi]
    if len(w) < 2:
        return None, None
    a, b = w[0], w[-1]
    dt = b["t"] - a["t"]
    if dt <= 0:
        return None, None
    cores = ((b["cpu_s"] - a["cpu_s"]) / dt if "cpu_s" in a and "cpu_s" in b else None)
    steal = ((b["host_steal_s"] - a["host_steal_s"]) / dt
             if "host_steal_s" in a and "host_steal_s" in b else None)
    return cores, steal


def fmt_mib(kib):
    return f"{kib / 1024:.1f} MiB"


def judge(p, run, samples, idle, pre, final, exit_code, phases=None):
    """The verdicts: [{"criterion", "measured", "limit", "pass"}, ...] and the
    first/last window figures.

    p: the parameters (duration_s, window_s, rss_limit_mib, p99_tolerance);
    run: brisk-bench's runs[0] of the soak, or merge_phases() of its phases (None if
    it wrote nothing); phases: as merge_phases() takes them (None: one run); when
    matched(phases), the first window is the first phase's requests and the last
    window the last phase's, the same schedule; otherwise the windows are cut from
    run's records by send time; samples:
    taken during the soak; idle: before any traffic; pre: just before the soak
    (after the capacity run, settled); final: after the soak, settled;
    exit_code: brisk serve's status after SIGTERM at the end (None: not stopped)."""
    v = []

    def add(name, measured, limit, ok):
        v.append({"criterion": name, "measured": measured, "limit": limit, "pass": bool(ok)})

    # zero restarts: one process all along, alive at every sample
    start = idle.get("start_ticks")
    everyone = samples + [final]
    dead = [s["t"] for s in everyone if not s.get("alive") or s.get("start_ticks") != start]
    add("zero restarts: brisk serve alive, same process, at every sample",
        f"{len(everyone) - len(dead)}/{len(everyone)} samples" +
        (f"; first miss at {dead[0]:.0f} s" if dead else ""), "all", not dead and samples)
    unanswered = [s["t"] for s in everyone if not s.get("metrics_ok")]
    add("/metrics answered at every sample", f"{len(unanswered)} unanswered", "0", not unanswered)

    # 5xx and failures, as the client saw them and as brisk counted them
    lost = [ph["name"] for ph in phases or [] if ph.get("run") is None]
    if run is None or lost:
        add("brisk-bench report of the soak",
            f"missing for phase {', '.join(lost)}" if run is not None else "missing",
            "present", False)
    if run is None:
        by_status, failed, inv_bad, inv_ok, completed, aborted = {}, 0, 0, 0, 0, 0
    else:
        by_status = run["errors"]["by_status"]
        failed, inv_bad = run["failed"], run["invalid_unexpected"]
        inv_ok, completed, aborted = run["invalid_ok"], run["completed"], run["aborted"]
    bench_5xx = sum(n for c, n in by_status.items() if c.startswith("5"))
    add("zero unexpected 5xx (brisk-bench)", f"{bench_5xx}", "0", bench_5xx == 0)
    srv_5xx = None
    if pre.get("metrics_ok") and final.get("metrics_ok"):
        srv_5xx = final["http_5xx"] - pre["http_5xx"]
    add("zero 5xx sent (brisk_http_requests_total during the soak)",
        "unknown" if srv_5xx is None else f"{srv_5xx:.0f}", "0", srv_5xx == 0)
    add("invalid requests answered 4xx", f"{inv_ok} 4xx, {inv_bad} otherwise", "0 otherwise",
        inv_bad == 0)
    add("no failed requests (timeouts, resets, 429, 5xx, ...)", f"{failed}", "0", failed == 0)
    add("requests completed", f"{completed} (+{aborted} aborted, {inv_ok} invalid)", "> 0",
        completed > 0)

    # RSS after the first window: from the first sample at or after it to the last
    after = [s for s in samples if s["t"] >= p["window_s"] and s.get("rss_kib")]
    if after:
        growth = after[-1]["rss_kib"] - after[0]["rss_kib"]
        peak = max(s["rss_kib"] for s in after) - after[0]["rss_kib"]
        add(f"RSS growth after the first {p['window_s']:g} s",
            f"{growth / 1024:+.1f} MiB ({fmt_mib(after[0]['rss_kib'])} at {after[0]['t']:.0f} s "
            f"-> {fmt_mib(after[-1]['rss_kib'])}; peak {peak / 1024:+.1f})",
            f"< {p['rss_limit_mib']:g} MiB", growth < p["rss_limit_mib"] * 1024)
    else:
        add(f"RSS growth after the first {p['window_s']:g} s", "no sample after the window",
            f"< {p['rss_limit_mib']:g} MiB", False)

    # back to idle
    fds_ok = final.get("fds") is not None and idle.get("fds") is not None and \
        final["fds"] <= idle["fds"]
    add("open fds back to idle at the end", f"{final.get('fds')} (idle {idle.get('fds')})",
        f"<= {idle.get('fds')}", fds_ok)
    kv_ok = final.get("metrics_ok") and final["kv_used_blocks"] == 0 and \
        final["running"] == 0 and final["waiting"] == 0
    add("KV usage back to idle at the end",
        f"{final.get('kv_used_blocks', '?'):.0f} blocks used, {final.get('running', '?'):.0f} "
        f"running, {final.get('waiting', '?'):.0f} waiting" if final.get("metrics_ok")
        else "unknown", "0, 0, 0", kv_ok)

    # P99 latency: the last window against the first
    windows = {}
    d, w = p["duration_s"], p["window_s"]
    if phases and matched(phases):
        a, c = phases[0], phases[-1]
        if all(ph.get("run") and ph["run"].get("requests") is not None for ph in (a, c)):
            ok, text = same_schedule(a["run"]["requests"], c["run"]["requests"])
            add(f"first and last windows: the same requests (phases {a['name']} and "
                f"{c['name']}, seed {a['seed']})", text, "same", ok)
            for key, ph in (("first", a), ("last", c)):
                f = window_figures(ph["run"]["requests"], 0, math.inf)
                f.update(t_start_s=ph["offset_s"],
                         t_end_s=ph["offset_s"] + ph["run"]["duration_s"],
                         phase=ph["name"], seed=ph["seed"])
                windows[key] = f
            label_of = (f"last {w:g} s vs first {w:g} s, the same arrival schedule "
                        f"(seed {a['seed']})")
            med, by_min, n = matched_ratios(a["run"]["requests"], c["run"]["requests"])
            if med is not None:
                v.append({"criterion": "the same requests one by one: median E2E last/first "
                                       "(not judged)",
                          "measured": f"{med:.2f}x over {n}; by minute "
                                      + " ".join(f"{x:.2f}" for x in by_min),
                          "limit": "-", "pass": None})
            parts = []
            for ph in (a, c):
                cores, steal = cpu_share(samples, ph["offset_s"],
                                         ph["offset_s"] + ph["run"]["duration_s"])
                if cores is not None:
                    parts.append(f"{ph['name']}: server {cores:.2f} cores"
                                 + (f", host steal {steal:.2f}" if steal is not None else ""))
            if parts:
                v.append({"criterion": "CPU in the first and last windows (not judged)",
                          "measured": "; ".join(parts), "limit": "-", "pass": None})
    elif run is not None and run.get("requests") is not None:
        windows = {"first": window_figures(run["requests"], 0, w),
                   "last": window_figures(run["requests"], d - w, d)}
        label_of = f"last {w:g} s vs first {w:g} s"
    if windows:
        first, last = windows["first"], windows["last"]
        tol = p["p99_tolerance"]
        for name, label, judged in (("e2e_ms", "E2E", True), ("ttft_ms", "TTFT", False),
                                    ("tpot_ms", "TPOT", False)):
            a, b = first[name]["p99"], last[name]["p99"]
            ratio = b / a if a and b is not None else None
            text = (f"{b:.1f} ms vs {a:.1f} ms ({ratio:.2f}x; {last['requests']} vs "
                    f"{first['requests']} requests)" if ratio is not None else "no requests")
            crit = f"{label} P99, {label_of}"
            if judged:
                add(crit, text, f"<= {1 + tol:.2f}x", ratio is not None and ratio <= 1 + tol)
            else:
                v.append({"criterion": crit + " (not judged)", "measured": text,
                          "limit": "-", "pass": None})
    else:
        add("E2E P99, last window vs first", "no per-request records", "-", False)

    add("brisk serve exits 0 on SIGTERM after the soak", f"{exit_code}", "0", exit_code == 0)
    return v, windows


def print_table(verdicts, f=sys.stdout):
    w0 = max(len(x["criterion"]) for x in verdicts)
    w1 = max(len(x["measured"]) for x in verdicts)
    w2 = max(len(x["limit"]) for x in verdicts)
    line = f"{'criterion':<{w0}}  {'measured':<{w1}}  {'limit':<{w2}}  verdict"
    print(line, file=f)
    print("-" * len(line), file=f)
    for x in verdicts:
        verdict = "-" if x["pass"] is None else "PASS" if x["pass"] else "FAIL"
        print(f"{x['criterion']:<{w0}}  {x['measured']:<{w1}}  {x['limit']:<{w2}}  {verdict}",
              file=f)


def slim_interval(i):
    keep = ("t_start_s", "t_end_s", "partial", "completed", "failed", "aborted", "invalid_ok",
            "invalid_unexpected", "request_throughput", "output_throughput")
    out = {k: i[k] for k in keep}
    if "phase" in i:
        out["phase"] = i["phase"]
    for name in ("ttft_ms", "itl_ms", "e2e_ms"):
        out[name] = {"p50": i[name]["p50"], "p99": i[name]["p99"]}
    out["errors_by_status"] = i["errors"]["by_status"]
    return out


def load_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def load_jsonl(path):
    """The objects of a JSON-lines file, one per non-blank line; [] when it cannot be
    read (a malformed line still raises: a damaged record is not an empty one)."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError:
        return []


def summary(run):
    """A run's totals and latency figures for the record; the latencies as P50/P99/max
    (None: not available, as ITL over several phases)."""
    out = {k: run.get(k) for k in ("completed", "failed", "aborted", "invalid_ok",
                                   "invalid_unexpected", "duration_s", "request_throughput",
                                   "output_throughput", "total_output_tokens")}
    out["errors"] = run["errors"]
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "invalid_ms"):
        out[k] = None if run.get(k) is None else {q: run[k].get(q) for q in ("p50", "p99", "max")}
    return out


def load_phases(work, seed, duration, samples):
    """The soak's phases, as merge_phases() takes them, from WORK/phases.jsonl and
    each phase's brisk-bench report; a phase starts (offset_s) when its measured run
    began, on the samples' clock: its end minus brisk-bench's duration (which runs
    from the first request, after the warm-up, to the end of the last). Without
    phases.jsonl (an older soak.sh): soak.json as one phase at offset 0."""
    lines = load_jsonl(os.path.join(work, "phases.jsonl"))
    if not lines:
        rep = load_json(os.path.join(work, "soak.json"))
        return [{"name": "soak", "seed": seed, "duration_s": duration, "json": "soak.json",
                 "offset_s": 0.0, "start_wall": None, "end_wall": None, "rc": None,
                 "run": rep["runs"][0] if rep and rep.get("runs") else None}]
    t0 = None
    try:
        t0 = float(open(os.path.join(work, "t0")).read())
    except (OSError, ValueError):
        if samples:
            t0 = samples[0]["wall"] - samples[0]["t"]
    if t0 is None:
        t0 = lines[0]["start_wall"]
    phases = []
    for ph in lines:
        rep = load_json(os.path.join(work, ph["json"]))
        run = rep["runs"][0] if rep and rep.get("runs") else None
        offset = ph["start_wall"] - t0
        if run is not None and ph.get("end_wall") is not None:
            offset = max(offset, ph["end_wall"] - t0 - run["duration_s"])
        phases.append({**ph, "offset_s": round(offset, 3), "run": run})
    return phases


def cmd_verdict(a):
    w = a.work
    idle = load_json(os.path.join(w, "idle.json"), {})
    pre = load_json(os.path.join(w, "pre.json"), {})
    final = load_json(os.path.join(w, "final.json"), {})
    cap = load_json(os.path.join(w, "capacity.json"))
    samples = load_jsonl(os.path.join(w, "samples.jsonl"))
    phases = load_phases(w, a.seed, a.duration, samples)
    run = merge_phases(phases)
    exit_code = None
    try:
        exit_code = int(open(os.path.join(w, "exit_code")).read().strip())
    except (OSError, ValueError):
        pass
    p = {"model": a.model, "weights": a.weights, "serve_args": a.serve_args,
         "duration_s": a.duration, "window_s": a.window, "interval_s": a.interval,
         "sample_every_s": a.sample_every, "rate_fraction": a.rate_fraction,
         "capacity_req_s": a.capacity, "rate_req_s": a.rate,
         "capacity_concurrency": a.capacity_concurrency, "capacity_s": a.capacity_s,
         "input_len": a.input_len, "output_len": a.output_len, "abort_rate": a.abort_rate,
         "invalid_rate": a.invalid_rate, "seed": a.seed, "rss_limit_mib": a.rss_limit_mib,
         "p99_tolerance": a.p99_tolerance, "smoke": a.smoke,
         "capacity_definition": "completed requests per second of a closed loop at "
                                "capacity_concurrency (the saturated request rate)"}
    p["matched_windows"] = matched(phases)
    verdicts, windows = judge(p, run, samples, idle, pre, final, exit_code, phases)
    cpu = re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read())
    doc = {
        "bench": "soak",
        "machine": {"name": a.machine, "hostname": platform.node(),
                    "cpu": cpu.group(1) if cpu else "", "cores": os.cpu_count(),
                    "os": platform.platform()},
        "commit": a.commit,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "params": p,
        "pass": all(x["pass"] is not False for x in verdicts),
        "verdicts": verdicts,
        "capacity_run": None if not cap else {
            k: cap["runs"][0][k] for k in ("completed", "failed", "duration_s",
                                           "request_throughput", "output_throughput")},
        "run": None if run is None else summary(run),
        "phases": [{k: ph.get(k) for k in ("name", "seed", "duration_s", "json", "offset_s",
                                           "start_wall", "end_wall", "rc")}
                   | {"run": None if ph["run"] is None else summary(ph["run"])}
                   for ph in phases],
        "windows": windows,
        "intervals": [slim_interval(i) for i in (run or {}).get("intervals", [])],
        "idle": idle, "pre": pre, "final": final, "samples": samples,
        "server_exit_code": exit_code,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print()
    load = (f"{a.rate:.3g} req/s = {a.rate_fraction:g} x capacity {a.capacity:.3g} req/s"
            if a.capacity > 0 else f"{a.rate:.3g} req/s (capacity not measured)")
    print(f"brisk soak: {os.path.basename(a.model)} ({a.weights}), {a.duration:g} s at {load}, "
          f"{a.input_len} in / {a.output_len} out, aborts {a.abort_rate:g}, invalid "
          f"{a.invalid_rate:g}{' (SMOKE)' if a.smoke else ''}; {a.machine}, commit {a.commit}")
    if len(phases) > 1:
        print("phases: " + ", ".join(
            f"{ph['name']} {ph['duration_s']:g} s --seed {ph['seed']} from {ph['offset_s']:.0f} s"
            for ph in phases) + ("; the first and the last: the same requests" if
                                 p["matched_windows"] else ""))
    print()
    print_table(verdicts)
    print()
    print(f"{'PASS' if doc['pass'] else 'FAIL'}: wrote {a.out}")
    sys.exit(0 if doc["pass"] else 1)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="soak.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def server(sp):
        sp.add_argument("--url", required=True)
        sp.add_argument("--pid", type=int, required=True)
        sp.add_argument("--t0", type=float, default=None, help="time zero (epoch seconds)")

    sp = sub.add_parser("wait-ready")
    server(sp)
    sp.add_argument("--timeout", type=float, default=300)
    sp.set_defaults(fn=cmd_wait_ready)
    sp = sub.add_parser("snapshot")
    server(sp)
    sp.set_defaults(fn=cmd_snapshot)
    sp = sub.add_parser("idle-fds")
    sp.add_argument("--pid", type=int, required=True)
    sp.set_defaults(fn=cmd_idle_fds)
    sp = sub.add_parser("sample")
    server(sp)
    sp.add_argument("--every", type=float, default=10)
    sp.add_argument("--out", required=True)
    sp.set_defaults(fn=cmd_sample)
    sp = sub.add_parser("settle")
    server(sp)
    sp.add_argument("--idle-fds", type=int, required=True)
    sp.add_argument("--timeout", type=float, default=60)
    sp.set_defaults(fn=cmd_settle)
    sp = sub.add_parser("capacity")
    sp.add_argument("file")
    sp.set_defaults(fn=cmd_capacity)
    sp = sub.add_parser("verdict")
    sp.add_argument("--work", required=True)
    sp.add_argument("--out", required=True)
    for name, typ in (("model", str), ("weights", str), ("serve-args", str),
                      ("machine", str), ("commit", str), ("duration", float),
                      ("window", float), ("interval", float), ("sample-every", float),
                      ("rate-fraction", float), ("capacity", float), ("rate", float),
                      ("capacity-concurrency", int), ("capacity-s", float),
                      ("input-len", int), ("output-len", int), ("abort-rate", float),
                      ("invalid-rate", float), ("seed", int), ("rss-limit-mib", float),
                      ("p99-tolerance", float)):
        sp.add_argument("--" + name, type=typ, required=True)
    sp.add_argument("--smoke", action="store_true")
    sp.set_defaults(fn=cmd_verdict)
    a = ap.parse_args(argv)
    a.fn(a)


if __name__ == "__main__":
    main()
