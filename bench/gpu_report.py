#!/usr/bin/env python3
"""gpu_report.py - summary.json and the closing table of a bench/gpu.sh run.

    gpu_report.py WORKDIR OUT.json --commit C --device cuda|cpu --quick 0|1

Reads what the stages left in WORKDIR (stages.tsv: name, exit status,
seconds, timeout; each stage's NAME.txt; smoke.json, serve_c*.json,
metrics_vs_smi.json, model_bench.jsonl, hf_generate.json) and writes one
JSON object: the stages, the GPU issue's items 1-3 passed or not (and why),
the item 4 figures beside the rooflines measured in the same run, the item 5
comparison. Prints a short table. Exit 0 when items 1-3 pass, else 1.
"""
import argparse
import datetime
import glob
import json
import os
import re
import sys


def read(d, name):
    p = os.path.join(d, name)
    return open(p, errors="replace").read() if os.path.exists(p) else ""


def load(d, name):
    p = os.path.join(d, name)
    try:
        return json.load(open(p)) if os.path.exists(p) else None
    except ValueError as e:
        return {"error": f"unreadable {name}: {e}"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("out")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", type=int, default=0)
    a = ap.parse_args()
    d = a.workdir
    stages = {}
    for line in read(d, "stages.tsv").splitlines():
        f = line.split("\t")
        if len(f) == 4:
            stages[f[0]] = {"rc": None if f[1] == "skipped" else int(f[1]), "skipped": f[1] == "skipped",
                            "seconds": float(f[2]), "timeout_s": int(f[3])}
    s = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "commit": a.commit, "device": a.device, "quick": bool(a.quick), "stages": stages}
    env = read(d, "env.txt")
    m = re.search(r"^name, compute_cap.*\n(.+)$", env, re.M)
    if m:
        s["gpu"] = m.group(1).strip()
    m = re.search(r"^brisk \S+.*$", env, re.M)
    if m:
        s["version"] = m.group(0)
    rows = []

    def ok(name):
        st = stages.get(name)
        return bool(st) and st["rc"] == 0

    # Item 1: the ops against their references, and the sanitizers.
    ops = read(d, "ops.txt")
    m = re.search(r"test_cuda_ops: (\d+)/(\d+) cases passed", ops)
    item1 = {"ops_cases": f"{m.group(1)}/{m.group(2)}" if m else None,
             "ops_skipped": "SKIP" in ops[:400], "ops_ok": ok("ops")}
    for tool in ("memcheck", "racecheck"):
        t = read(d, f"{tool}.txt")
        summ = re.findall(r"========= ((?:ERROR|RACECHECK) SUMMARY: .*)", t)
        item1[tool] = {"ok": ok(tool), "summary": summ[-1] if summ else None,
                       "message": None if summ else t.strip()[-400:]}
    item1["passed"] = item1["ops_ok"] and not item1["ops_skipped"] and all(
        item1[t]["ok"] for t in ("memcheck", "racecheck"))
    s["item1"] = item1
    rows.append(f"1 ops: {item1['ops_cases']} cases, rc {stages.get('ops', {}).get('rc')}; memcheck: "
                f"{item1['memcheck']['summary'] or item1['memcheck']['message']!s:.60}; racecheck: "
                f"{item1['racecheck']['summary'] or item1['racecheck']['message']!s:.60}")

    # Item 2: end to end.
    model = read(d, "model.txt")
    item2 = {"model_ok": ok("model"), "backend_ok": ok("backend"),
             "lines": [l for l in model.splitlines() if l.startswith("test_cuda_model:")]}
    m = re.search(r"test_cuda_model: (\d+) passed, (\d+) failed", model)
    item2["checks"] = f"{m.group(1)} passed, {m.group(2)} failed" if m else None
    item2["passed"] = item2["model_ok"] and item2["backend_ok"] and "SKIP: no CUDA" not in model
    s["item2"] = item2
    rows.append(f"2 model: {item2['checks']}, backend rc {stages.get('backend', {}).get('rc')}")
    rows += ["    " + l[len("test_cuda_model: "):][:150] for l in item2["lines"]]

    # Item 3: the server.
    smoke = load(d, "smoke.json") or {}
    levels = []
    for p in sorted(glob.glob(os.path.join(d, "serve_c*.json")),
                    key=lambda p: int(re.search(r"serve_c(\d+)", p).group(1))):
        c = int(re.search(r"serve_c(\d+)", p).group(1))
        j = load(d, os.path.basename(p)) or {}
        r = (j.get("runs") or [j])[0] if isinstance(j, dict) else {}
        q = lambda k, pp: (r.get(k) or {}).get(pp)
        lv = {"concurrency": c, "completed": r.get("completed"), "failed": r.get("failed"),
              "output_tok_s": r.get("output_throughput")}
        for k in ("ttft_ms", "itl_ms", "tpot_ms"):
            for pp in ("p50", "p95", "p99"):
                lv[f"{k[:-3]}_{pp}_ms"] = q(k, pp)
        levels.append(lv)
    item3 = {"smoke": smoke, "levels": levels, "serve_ok": ok("serve"),
             "smoke_ok": bool(smoke.get("passed")),
             "zero_failed": bool(levels) and all(l["failed"] == 0 and (l["completed"] or 0) > 0 for l in levels)}
    item3["passed"] = item3["serve_ok"] and item3["smoke_ok"] and item3["zero_failed"]
    s["item3"] = item3
    rows.append(f"3 serve: smoke {'ok' if item3['smoke_ok'] else 'FAIL'} "
                f"({sum(c['ok'] for c in smoke.get('checks', []))}/{len(smoke.get('checks', []))} checks)")
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    for lv in levels:
        rows.append(f"    c={lv['concurrency']:>3}: {fmt(lv['output_tok_s']):>9} output tok/s, "
                    f"{lv['completed']} done, {lv['failed']} failed; TTFT p50/95/99 {fmt(lv['ttft_p50_ms'])}/"
                    f"{fmt(lv['ttft_p95_ms'])}/{fmt(lv['ttft_p99_ms'])} ms; ITL {fmt(lv['itl_p50_ms'])}/"
                    f"{fmt(lv['itl_p95_ms'])}/{fmt(lv['itl_p99_ms'])} ms")

    # Item 4: figures and rooflines.
    item4 = {}
    perf = read(d, "opsperf.txt")
    m = re.search(r"matmul peak: ([0-9.]+) TFLOP/s", perf)
    if m:
        item4["cublas_f16_peak_tflop_s"] = float(m.group(1))
    m = re.search(r"copy[^\n]*?([0-9.]+) GB/s", perf)
    if m:
        item4["copy_bw_gb_s"] = float(m.group(1))
    mb = [json.loads(l) for l in read(d, "model_bench.jsonl").splitlines() if l.startswith("{")]
    if mb:
        item4["decode"] = mb
        for b in mb:
            rows.append(f"4 decode {b.get('weights')}{' (graphs off)' if 'graphs off' in b.get('device', '') else ''}: "
                        f"tg {b.get('tg_tok_s', 0):.1f} tok/s = {100 * b.get('tg_frac_roofline', 0):.1f}% of "
                        f"{b.get('tg_roofline_tok_s', 0):.0f} (bw {b.get('read_bw_gb_s', 0):.0f} GB/s); "
                        f"pp{b.get('pp')} {b.get('pp_tok_s', 0):.0f} tok/s, {b.get('pp_tflop_s', 0):.1f} TFLOP/s")
        f16 = [b for b in mb if b.get("weights") == "f16"]
        i8 = [b for b in mb if b.get("weights") == "int8"]
        if f16 and i8 and f16[0].get("tg_tok_s"):
            item4["int8_over_f16_decode"] = round(i8[0]["tg_tok_s"] / f16[0]["tg_tok_s"], 3)
            item4["f16_frac_roofline"] = f16[0].get("tg_frac_roofline")
            rows.append(f"    int8/f16 decode {item4['int8_over_f16_decode']:.2f}x (target 1.7x); f16 at "
                        f"{100 * (item4['f16_frac_roofline'] or 0):.0f}% of roofline (target 80%)")
    if levels:
        top = max(levels, key=lambda l: l["concurrency"])
        item4["serve_top_concurrency_tok_s"] = top["output_tok_s"]
    hf = load(d, "hf_generate.json")
    if hf:
        item4["hf_generate"] = hf
        for b in hf.get("batches", []):
            rows.append(f"4 transformers generate batch {b['batch']}: "
                        f"{b.get('output_tok_s', b.get('error'))} tok/s")
    if "cublas_f16_peak_tflop_s" in item4:
        rows.append(f"4 rooflines: copy {item4.get('copy_bw_gb_s')} GB/s, cuBLAS f16 "
                    f"{item4['cublas_f16_peak_tflop_s']} TFLOP/s")
    s["item4"] = item4

    # Item 5: /metrics against nvidia-smi.
    mv = load(d, "metrics_vs_smi.json")
    if mv:
        s["item5"] = mv
        if "rows" in mv:
            agree = sum(r["verdict"] == "agree" for r in mv["rows"])
            rows.append(f"5 /metrics vs nvidia-smi: {agree} agree, {mv['disagreements']} disagree "
                        f"of {len(mv['rows'])} values")
    s["items_1_3_passed"] = item1["passed"] and item2["passed"] and item3["passed"]
    if a.device == "cpu":
        # The rehearsal: every stage that can run without a GPU ran and passed.
        s["rehearsal_passed"] = item1["ops_ok"] and item2["model_ok"] and item2["backend_ok"] and \
            item3["passed"] and all(st["rc"] == 0 for n, st in stages.items()
                                    if n not in ("memcheck", "racecheck"))
    for name, st in stages.items():
        rows.append(f"stage {name:9} " + ("skipped (budget)" if st["skipped"] else
                                          f"rc {st['rc']:>3} {st['seconds']:7.1f} s (timeout {st['timeout_s']})"))
    if a.device == "cpu":
        rows.append(f"CPU rehearsal: {'PASS' if s['rehearsal_passed'] else 'FAIL'} (a GPU run's items need a GPU)")
    else:
        rows.append(f"items 1-3: {'PASS' if s['items_1_3_passed'] else 'not all passed'}")
    with open(a.out, "w") as f:
        json.dump(s, f, indent=1)
    print("\n".join(rows))
    return 0 if s.get("rehearsal_passed", s["items_1_3_passed"]) else 1


if __name__ == "__main__":
    sys.exit(main())
