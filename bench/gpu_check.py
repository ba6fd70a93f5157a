#!/usr/bin/env python3
"""gpu_check.py - the server checks of bench/gpu.sh, with the Python standard
library alone (the GPU machine has no openai package and nothing to install
from).

    gpu_check.py smoke   --url URL --json OUT   # completions, chat, streaming, n>1
    gpu_check.py metrics --url URL --json OUT   # /metrics against nvidia-smi

smoke: GET /v1/models; a greedy completion twice (same text, 16 tokens with
ignore_eos); a chat completion; a streamed chat completion (SSE chunks, role
then content, one finish_reason, [DONE]); n=3 sampled completions (three
choices, indexes 0..2, each 12 tokens). Exit 1 if any check fails.

metrics: the brisk_gpu_* gauges of /metrics beside `nvidia-smi --query-gpu`
read at the same moment, for each GPU: memory used and total, temperature,
power draw and limit, SM clock and max, throttle reasons. Values sampled at
different instants agree within a tolerance per quantity (below); the
reasons are compared only where both report them. Exit 1 on a disagreement,
3 when there is no nvidia-smi (nothing to compare: the CPU rehearsal).
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request


def call(url, path, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_ready(url, seconds=300):
    t = time.time()
    while time.time() - t < seconds:
        try:
            if call(url, "/health", timeout=5)[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def smoke(url):
    checks = []

    def check(name, ok, detail=""):
        checks.append({"check": name, "ok": bool(ok), "detail": str(detail)[:300]})
        print(f"gpu_check: {'ok  ' if ok else 'FAIL'} {name} {detail if not ok else ''}".rstrip())

    check("ready (/health 200)", wait_ready(url))
    _, body = call(url, "/v1/models")
    models = json.loads(body)["data"]
    check("/v1/models lists the model", len(models) == 1, body)
    model = models[0]["id"] if models else "m"
    greedy = {"model": model, "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0,
              "ignore_eos": True}
    a = json.loads(call(url, "/v1/completions", greedy)[1])
    b = json.loads(call(url, "/v1/completions", greedy)[1])
    ta, tb = a["choices"][0]["text"], b["choices"][0]["text"]
    check("completion: 16 tokens", a["usage"]["completion_tokens"] == 16, a["usage"])
    check("completion: greedy repeats exactly", ta == tb and isinstance(ta, str), (ta, tb))
    chat = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 12,
            "temperature": 0, "ignore_eos": True}
    c = json.loads(call(url, "/v1/chat/completions", chat)[1])
    msg = c["choices"][0]["message"]
    check("chat: assistant message", msg["role"] == "assistant" and isinstance(msg["content"], str), msg)
    check("chat: 12 tokens, finish length", c["usage"]["completion_tokens"] == 12 and
          c["choices"][0]["finish_reason"] == "length", c["usage"])
    # Streaming: read the SSE lines as they come.
    req = urllib.request.Request(url + "/v1/chat/completions",
                                 data=json.dumps(dict(chat, stream=True)).encode(),
                                 headers={"Content-Type": "application/json"})
    chunks, done, text, finishes, role = 0, False, "", [], None
    with urllib.request.urlopen(req, timeout=120) as r:
        ctype = r.headers.get("Content-Type", "")
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                done = True
                break
            ev = json.loads(payload)
            for ch in ev.get("choices", []):
                d = ch.get("delta", {})
                role = role or d.get("role")
                text += d.get("content") or ""
                if ch.get("finish_reason"):
                    finishes.append(ch["finish_reason"])
            chunks += 1
    check("stream: text/event-stream", ctype.startswith("text/event-stream"), ctype)
    check("stream: role, content, one finish_reason, [DONE]",
          done and role == "assistant" and finishes == ["length"] and chunks >= 3,
          (chunks, done, role, finishes))
    check("stream: same text as the non-streamed greedy chat", text == msg["content"], (text, msg["content"]))
    n3 = json.loads(call(url, "/v1/completions", {"model": model, "prompt": "The", "max_tokens": 12, "n": 3,
                                                  "temperature": 0.9, "seed": 7, "ignore_eos": True})[1])
    idx = sorted(ch["index"] for ch in n3["choices"])
    check("n=3: three choices 0..2", idx == [0, 1, 2], idx)
    check("n=3: 36 completion tokens", n3["usage"]["completion_tokens"] == 36, n3["usage"])
    return checks


# nvidia-smi field, brisk gauge, scale to the gauge's unit, tolerance (abs, rel)
FIELDS = [
    ("memory.total", "brisk_gpu_memory_total_bytes", 1 << 20, (1 << 20, 0.0)),
    ("memory.used", "brisk_gpu_memory_used_bytes", 1 << 20, (512 << 20, 0.05)),
    ("temperature.gpu", "brisk_gpu_temperature_celsius", 1, (5, 0.0)),
    ("power.draw", "brisk_gpu_power_draw_watts", 1, (30, 0.3)),
    ("enforced.power.limit", "brisk_gpu_power_limit_watts", 1, (1, 0.01)),
    ("clocks.sm", "brisk_gpu_sm_clock_hertz", 1e6, (100e6, 0.3)),
    ("clocks.max.sm", "brisk_gpu_sm_clock_max_hertz", 1e6, (1e6, 0.0)),
]
SMI_REASONS = {  # nvidia-smi clocks_event_reasons.* field -> brisk reason label
    "gpu_idle": "gpu_idle", "applications_clocks_setting": "applications_clocks_setting",
    "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown", "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal_slowdown", "hw_thermal_slowdown": "hw_thermal_slowdown",
    "hw_power_brake_slowdown": "hw_power_brake_slowdown",
}


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(brisk_gpu_[a-z_]+)\{([^}]*)\} (\S+)$', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        out.setdefault(m.group(1), {})[(labels.get("gpu"), labels.get("reason"))] = float(m.group(3))
    return out


def smi_query(fields):
    r = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=30)
    rows = []
    for line in r.stdout.strip().splitlines():
        vals = [v.strip() for v in line.split(",")]
        rows.append(dict(zip(fields, vals)))
    return rows, r.stderr.strip()


def metrics(url):
    if not shutil.which("nvidia-smi"):
        print("gpu_check: metrics: SKIP: no nvidia-smi on this machine")
        return None
    time.sleep(2.5)  # the sampler runs each second (--gpu-metrics-interval 1)
    got = parse_metrics(call(url, "/metrics")[1])
    smi, err = smi_query([f for f, *_ in FIELDS])
    reasons, rerr = smi_query(["clocks_event_reasons." + k for k in SMI_REASONS])
    if rerr or not reasons:  # older nvidia-smi names
        reasons, rerr = smi_query(["clocks_throttle_reasons." + k for k in SMI_REASONS])
    rows, bad = [], 0
    for i, s in enumerate(smi):
        for field, gauge, scale, (tol_abs, tol_rel) in FIELDS:
            raw = s.get(field, "")
            mine = got.get(gauge, {}).get((str(i), None))
            try:
                want = float(raw) * scale
            except ValueError:
                rows.append({"gpu": i, "field": field, "nvidia_smi": raw, "brisk": mine,
                             "verdict": "not reported by nvidia-smi"})
                continue
            if mine is None:
                verdict = "missing in /metrics"
                bad += 1
            else:
                ok = abs(mine - want) <= max(tol_abs, tol_rel * abs(want))
                verdict = "agree" if ok else "DISAGREE"
                bad += not ok
            rows.append({"gpu": i, "field": field, "gauge": gauge, "nvidia_smi": want, "brisk": mine,
                         "tolerance": [tol_abs, tol_rel], "verdict": verdict})
        if i < len(reasons):
            for k, label in SMI_REASONS.items():
                raw = next((v for f, v in reasons[i].items() if f.endswith("." + k)), "")
                mine = got.get("brisk_gpu_clock_throttle_reason", {}).get((str(i), label))
                if raw not in ("Active", "Not Active") or mine is None:
                    rows.append({"gpu": i, "field": "reason " + k, "nvidia_smi": raw, "brisk": mine,
                                 "verdict": "not compared"})
                    continue
                # Instantaneous flags: idle and power capping can change between reads.
                ok = (raw == "Active") == (mine == 1.0)
                rows.append({"gpu": i, "field": "reason " + k, "nvidia_smi": raw, "brisk": mine,
                             "verdict": "agree" if ok else "differ (instantaneous)"})
    for r in rows:
        print(f"gpu_check: gpu {r['gpu']} {r['field']:32} nvidia-smi {str(r['nvidia_smi']):>16} "
              f"brisk {str(r['brisk']):>16}  {r['verdict']}")
    return {"rows": rows, "disagreements": bad, "nvidia_smi_stderr": err or rerr}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["smoke", "metrics"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    try:
        if a.what == "smoke":
            checks = smoke(a.url)
            res = {"checks": checks, "passed": all(c["ok"] for c in checks)}
            rc = 0 if res["passed"] else 1
        else:
            res = metrics(a.url)
            rc = 3 if res is None else (1 if res["disagreements"] else 0)
            res = res or {"skipped": "no nvidia-smi"}
    except Exception as e:  # a broken server answer is a failed check, with its reason kept
        res, rc = {"error": f"{type(e).__name__}: {e}"}, 1
        print(f"gpu_check: {a.what}: FAIL: {res['error']}")
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
