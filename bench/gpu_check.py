#!/usr/bin/env python3
"""gpu_check.py - the server checks of bench/gpu.sh, with the Python standard
library alone (the GPU machine has no openai or jsonschema package and nothing
to install from).

    gpu_check.py smoke      --url URL --json OUT   # completions, chat, streaming, n>1
    gpu_check.py metrics    --url URL --json OUT   # /metrics against nvidia-smi
    gpu_check.py structured --url URL [--ref-url URL] --out OUT.jsonl --json OUT
                                                   # the JSON Schema corpus
    gpu_check.py embed      --url URL --ref-url URL --json OUT [--label L]
                                                   # /v1/embeddings against a CPU server
    gpu_check.py schema-body                       # the --extra-body of the 64-stream pair

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

structured: the structured-output corpus of tests/integration/test_structured.py
(its _schemas(), read from the file's source, so the corpus is the CPU tests'
own: 53 schemas) against URL, each schema twice as the CPU tests send it:
/v1/completions with guided_json at temperature 0 and /v1/chat/completions
with response_format json_schema at temperature 1 (seed = the schema's index,
300 tokens at most); with --ref-url, the greedy completions again on that
server (the CPU), to count the outputs the two devices agree on. Every
output goes to OUT.jsonl (one line each, with its schema), which
bench/gpu_validate.py validates with jsonschema on a machine that has it.
Here: an output that ends with "stop" must parse as JSON, no request may
fail, and at least half of each API's outputs must end with "stop" (the CPU
tests' rule; the rest end at max_tokens). Exit 1 otherwise.

embed: /v1/embeddings of a few texts from URL and from REF_URL (servers with
the same model and pooling): per component within 1e-3 and cosine above
0.9999 (issue 33's bound); a 501 from URL is recorded as unsupported (exit 1).

schema-body: prints the JSON merged into every request of the constrained
half of gpu.sh's 64-stream pair (brisk-bench --extra-body): response_format
with bench/structured_bench.py's schema, an array of at least 40 objects,
which no 128-token output can finish, so the grammar is active at every step.
"""
import argparse
import ast
import concurrent.futures
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


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


# ---- structured outputs ------------------------------------------------------------

def load_corpus():
    """The schema corpus of the CPU tests: _schemas() of test_structured.py, compiled
    from the file's source alone (the test module imports pytest and openai)."""
    path = os.path.join(HERE, "..", "tests", "integration", "test_structured.py")
    tree = ast.parse(open(path).read(), path)
    fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_schemas"]
    if len(fn) != 1:
        raise RuntimeError(f"{path}: no _schemas() function")
    ns = {}
    exec(compile(ast.Module(body=fn, type_ignores=[]), path, "exec"), ns)  # noqa: S102
    return ns["_schemas"]()


def post(url, path, body, timeout=300):
    """(status, parsed body or the error text) of a POST; HTTP errors are answers."""
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")[:500]


def schema_request(url, model, i, schema, api):
    """One corpus request as the CPU tests send it; returns its record."""
    rec = {"i": i, "api": api, "temperature": 0 if api == "completions" else 1, "seed": i}
    if api == "completions":
        body = {"model": model, "prompt": "Once", "max_tokens": 300, "temperature": 0, "seed": i,
                "guided_json": schema}
        status, r = post(url, "/v1/completions", body)
    else:
        body = {"model": model, "messages": [{"role": "user", "content": "Answer in JSON."}],
                "max_tokens": 300, "temperature": 1, "seed": i,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": f"s{i}", "schema": schema,
                                                    "strict": True}}}
        status, r = post(url, "/v1/chat/completions", body)
    if status != 200 or not isinstance(r, dict):
        rec.update(error=f"HTTP {status}: {r}", finish_reason=None, text=None)
        return rec
    c = r["choices"][0]
    rec["finish_reason"] = c["finish_reason"]
    rec["text"] = c["text"] if api == "completions" else c["message"]["content"]
    return rec


def run_corpus(url, schemas, apis, workers=32):
    """Every (schema, api) request, concurrently (the server batches them)."""
    model = json.loads(call(url, "/v1/models")[1])["data"][0]["id"]
    jobs = [(i, s, api) for api in apis for i, s in enumerate(schemas)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(lambda j: schema_request(url, model, *j), jobs))


def structured(url, ref_url, out_path):
    schemas = load_corpus()
    t0 = time.time()
    recs = run_corpus(url, schemas, ["completions", "chat"])
    secs = time.time() - t0
    ref = {r["i"]: r for r in run_corpus(ref_url, schemas, ["completions"])} if ref_url else {}
    with open(out_path, "w") as f:
        for r in recs:
            if r["i"] in ref and r["api"] == "completions":
                r["ref_text"], r["ref_finish_reason"] = ref[r["i"]]["text"], ref[r["i"]]["finish_reason"]
            f.write(json.dumps(dict(r, schema=schemas[r["i"]])) + "\n")
    res = {"schemas": len(schemas), "seconds": round(secs, 1), "apis": {}}
    ok = True
    for api in ("completions", "chat"):
        rs = [r for r in recs if r["api"] == api]
        errors = [f"{r['i']}: {r['error']}" for r in rs if r.get("error")]
        stops = [r for r in rs if r["finish_reason"] == "stop"]
        unparsed = []
        for r in stops:
            try:
                json.loads(r["text"])
            except ValueError:
                unparsed.append(r["i"])
        odd = [r["i"] for r in rs if not r.get("error") and r["finish_reason"] not in ("stop", "length")]
        a = {"requests": len(rs), "stop": len(stops),
             "length": sum(r["finish_reason"] == "length" for r in rs), "errors": errors[:10],
             "n_errors": len(errors), "stop_not_json": unparsed, "other_finish": odd}
        a["passed"] = not errors and not unparsed and not odd and 2 * len(stops) >= len(rs)
        ok &= a["passed"]
        res["apis"][api] = a
        print(f"gpu_check: structured {api}: {a['stop']} of {a['requests']} end with stop (all parse "
              f"as JSON: {not unparsed}), {a['length']} at max_tokens, {len(errors)} failed requests: "
              f"{'ok' if a['passed'] else 'FAIL'}")
        for e in errors[:3]:
            print(f"gpu_check:   {e[:300]}")
    if ref:
        same = sum(r["text"] == r.get("ref_text") for r in recs if r["api"] == "completions")
        res["greedy_same_text_as_ref"] = same
        print(f"gpu_check: structured: greedy outputs equal to the reference server's: "
              f"{same} of {len(schemas)} (a figure: f16 against f32 may part at near-ties)")
    res["passed"] = ok
    return res


# ---- embeddings ----------------------------------------------------------------------

EMBED_INPUTS = ["Once upon a time", "The little dog ran to the park to play.", "a",
                "Lily and Tom played with a big red ball all day long, and then they went home.",
                "Hello world", "The end."]


def embed(url, ref_url):
    got = {}
    for name, u in (("device", url), ("reference", ref_url)):
        model = json.loads(call(u, "/v1/models")[1])["data"][0]["id"]
        status, r = post(u, "/v1/embeddings", {"model": model, "input": EMBED_INPUTS})
        if status != 200 or not isinstance(r, dict):
            res = {"passed": False, "status": status, "server": name, "answer": str(r)[:300],
                   "unsupported": status == 501}
            print(f"gpu_check: embed: the {name} server answered {status}: {str(r)[:200]}")
            return res
        got[name] = [d["embedding"] for d in sorted(r["data"], key=lambda d: d["index"])]
    worst, least_cos = 0.0, 1.0
    for a, b in zip(got["device"], got["reference"]):
        worst = max(worst, max(abs(x - y) for x, y in zip(a, b)))
        dot = sum(x * y for x, y in zip(a, b))
        na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
        least_cos = min(least_cos, dot / (na * nb) if na > 0 and nb > 0 else 0.0)
    res = {"inputs": len(EMBED_INPUTS), "dim": len(got["device"][0]), "max_abs_diff": worst,
           "min_cosine": least_cos, "bounds": {"abs": 1e-3, "cosine": 0.9999}}
    res["passed"] = len(got["device"]) == len(got["reference"]) and worst <= 1e-3 and least_cos > 0.9999
    print(f"gpu_check: embed: {len(EMBED_INPUTS)} inputs of dim {res['dim']}: max |diff| {worst:.2e} "
          f"(bound 1e-3), min cosine {least_cos:.8f} (bound 0.9999): {'ok' if res['passed'] else 'FAIL'}")
    return res


def schema_body():
    sys.path.insert(0, HERE)
    import structured_bench  # the schema of the CPU's structured benchmark
    return {"response_format": {"type": "json_schema",
                                "json_schema": {"name": "rows", "schema": structured_bench.SCHEMA}}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["smoke", "metrics", "structured", "embed", "schema-body"])
    ap.add_argument("--url")
    ap.add_argument("--ref-url")
    ap.add_argument("--json")
    ap.add_argument("--out", help="structured: the outputs, one JSON line each")
    ap.add_argument("--label", default="", help="embed: recorded with the result (e.g. the pooling)")
    a = ap.parse_args()
    if a.what == "schema-body":
        print(json.dumps(schema_body()))
        return 0
    if not a.url or not a.json or (a.what == "structured" and not a.out) or \
            (a.what == "embed" and not a.ref_url):
        ap.error("--url and --json are required (structured: --out; embed: --ref-url)")
    try:
        if a.what == "smoke":
            checks = smoke(a.url)
            res = {"checks": checks, "passed": all(c["ok"] for c in checks)}
            rc = 0 if res["passed"] else 1
        elif a.what == "structured":
            res = structured(a.url, a.ref_url, a.out)
            rc = 0 if res["passed"] else 1
        elif a.what == "embed":
            res = dict(embed(a.url, a.ref_url), label=a.label)
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
