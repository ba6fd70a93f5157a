#!/usr/bin/env python3
"""gpu_report.py - summary.json and the closing table of a bench/gpu.sh run.

    gpu_report.py WORKDIR OUT.json --commit C --device cuda|cpu --quick 0|1

Reads what the stages left in WORKDIR (stages.tsv: name, exit status, seconds,
timeout; each stage's NAME.txt; structured.json, embed_*.json, smoke.json,
pair_*.json and f16_c*/int8_c*.json from brisk-bench, step_trace.jsonl,
metrics_vs_smi.json, model_bench.jsonl, hf_generate.json) and writes one JSON
object with every item of the two GPU issues:

  issue33.item1..item4  each with "status": pass | fail | incomplete (a part
                        did not run) | pending validation (item 3 until
                        bench/gpu_validate.py has checked the structured
                        outputs on the build machine), and its parts;
  issue34.target1..4    each with "status": pass | fail | figure (measured,
                        no pass line: target 4, the CPU rehearsal) | not run,
                        the figures beside the rooflines measured in the same
                        run (the read-only one when the run has it: brisk bench's
                        read_bw_gb_s when it also reports copy_bw_gb_s, else
                        test_cuda_ops perf's read-only line; an older brisk
                        bench's read_bw_gb_s was the copy figure);
  issue38               the KV-cache dtypes on the GPU: "quality" (test_cuda_model's
                        kv-dtype lines: int8 and fp8 against the f16 cache, top-1 at
                        clear margins, >= 99% to pass), "pool" (vllm:cache_config_info's
                        blocks of the fp8 server against the f16 one's, target >= 1.9x),
                        "serving" (fp8 against f16 at serve_f16's 256 level: a figure);
  later                 stages this report does not know (later issues'), with
                        their exit status and time.
Prints a short table. Exit 0 when issue 33's items 1-3 pass or wait only for
validation (the CPU rehearsal: when every stage that can run without a GPU
passed), else 1.
"""
import argparse
import datetime
import glob
import json
import os
import re
import statistics
import sys

KNOWN_STAGES = {"env", "ops", "model", "backend", "structured", "memcheck", "racecheck",
                "serve_f16", "opsperf", "decode", "serve_int8", "hf", "kv_quant", "moe"}
# Stages whose absence of a tool is not a failure of the rehearsal (exit 3: no
# compute-sanitizer, no torch).
TOOL_STAGES = {"memcheck", "racecheck", "hf"}


def read(d, name):
    p = os.path.join(d, name)
    return open(p, errors="replace").read() if os.path.exists(p) else ""


def load(d, name):
    p = os.path.join(d, name)
    try:
        return json.load(open(p)) if os.path.exists(p) else None
    except ValueError as e:
        return {"error": f"unreadable {name}: {e}"}


def item_status(parts):
    """pass when every part passed; fail when one failed; incomplete when a part
    did not run (None); "pending validation" is the caller's."""
    vals = list(parts.values())
    if any(v is False for v in vals):
        return "fail"
    if any(v is None for v in vals):
        return "incomplete"
    return "pass"


def bench_run(d, tag):
    """The first run of a brisk-bench JSON report, flattened; None when missing."""
    j = load(d, f"{tag}.json")
    if not isinstance(j, dict) or "error" in j:
        return None
    r = (j.get("runs") or [j])[0]
    lv = {"completed": r.get("completed"), "failed": r.get("failed"),
          "output_tok_s": r.get("output_throughput"), "duration_s": r.get("duration_s")}
    for k in ("ttft_ms", "itl_ms", "tpot_ms"):
        for p in ("p50", "p95", "p99"):
            lv[f"{k[:-3]}_{p}_ms"] = (r.get(k) or {}).get(p)
    return lv


def levels(d, w):
    out = []
    for p in glob.glob(os.path.join(d, f"{w}_c*.json")):
        c = int(re.search(rf"{w}_c(\d+)\.json$", p).group(1))
        lv = bench_run(d, f"{w}_c{c}")
        if lv:
            lv["concurrency"] = c
            lv["itl_p99_over_p50"] = (round(lv["itl_p99_ms"] / lv["itl_p50_ms"], 2)
                                      if lv.get("itl_p50_ms") and lv.get("itl_p99_ms") else None)
            out.append(lv)
    return sorted(out, key=lambda lv: lv["concurrency"])


def step_trace(d):
    """The f16 server's step trace (brisk serve --step-trace), by how many
    sequences were running: steps, wall time p50/p99/max, and the slowest steps
    with what they did (what makes the ITL's p99)."""
    path = os.path.join(d, "step_trace.jsonl")
    if not os.path.exists(path):
        return None
    steps = []
    for line in open(path, errors="replace"):
        try:
            steps.append(json.loads(line))
        except ValueError:
            continue
    if not steps:
        return {"steps": 0}
    res = {"steps": len(steps), "by_running": {}}
    for lo, hi in ((1, 64), (65, 256), (257, 512), (513, 1024)):
        w = sorted(s["wall_ms"] for s in steps if lo <= s.get("running", 0) <= hi)
        if w:
            res["by_running"][f"{lo}-{hi}"] = {
                "steps": len(w), "wall_p50_ms": round(statistics.median(w), 3),
                "wall_p99_ms": round(w[min(len(w) - 1, int(0.99 * len(w)))], 3), "wall_max_ms": w[-1]}
    keep = ("step", "wall_ms", "forward_ms", "mask_ms", "sample_ms", "host_ms", "gap_ms", "tokens",
            "decode_rows", "prefill_tokens", "prefill_chunks", "constrained", "running", "pass")
    res["slowest"] = [{k: s.get(k) for k in keep}
                      for s in sorted(steps, key=lambda s: -s.get("wall_ms", 0))[:12]]
    return res


def cache_info(text):
    """vllm:cache_config_info's labels from a /metrics text, or None."""
    m = re.search(r"^vllm:cache_config_info\{([^}]*)\}", text or "", re.M)
    return dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))) if m else None


def issue38(d, cuda, model, rows, fmt):
    """Issue 38 (KV-cache dtypes): the quality rule from the model stage, the
    pool's blocks and the serving figure of the kv_quant stage."""
    out = {"quality": [], "pool": None, "serving": None}
    for m in re.finditer(r"^test_cuda_model: kv-dtype (\S+) on (.+?) \((\w+), heads of (\d+)\) vs the f16 "
                         r"cache: prefill (\d+) positions: top-1 (\d+)/(\d+) at clear margins, relative logit "
                         r"error mean (\S+) max (\S+); decode (\d+): top-1 (\d+)/(\d+), mean (\S+) max (\S+); "
                         r"need (\d+)%: (PASS|FAIL)$", model, re.M):
        g = m.groups()
        out["quality"].append({"dtype": g[0], "case": g[1], "device": g[2], "head_dim": int(g[3]),
                               "prefill_positions": int(g[4]), "prefill_top1": f"{g[5]}/{g[6]}",
                               "prefill_mean_rel_err": float(g[7]), "prefill_max_rel_err": float(g[8]),
                               "decode_positions": int(g[9]), "decode_top1": f"{g[10]}/{g[11]}",
                               "decode_mean_rel_err": float(g[12]), "decode_max_rel_err": float(g[13]),
                               "need_pct": int(g[14]), "verdict": g[15]})
    base, kvq = cache_info(read(d, "metrics.txt")), cache_info(read(d, "metrics_kvq.txt"))
    if base and kvq:
        b, q = int(base.get("num_gpu_blocks", 0)), int(kvq.get("num_gpu_blocks", 0))
        out["pool"] = {"f16_blocks": b, "dtype": kvq.get("cache_dtype"), "blocks": q,
                       "ratio": round(q / b, 3) if b else None}
    for p in glob.glob(os.path.join(d, "kvq_*_c*.json")):
        mm = re.search(r"kvq_(\w+)_c(\d+)\.json$", p)
        lv, ref = bench_run(d, f"kvq_{mm.group(1)}_c{mm.group(2)}"), bench_run(d, f"f16_c{mm.group(2)}")
        if lv:
            out["serving"] = {"dtype": mm.group(1), "concurrency": int(mm.group(2)), "run": lv,
                              "f16_output_tok_s": (ref or {}).get("output_tok_s"),
                              "ratio": round(lv["output_tok_s"] / ref["output_tok_s"], 3)
                              if ref and ref.get("output_tok_s") and lv.get("output_tok_s") else None}
    q_ok = [x["verdict"] == "PASS" for x in out["quality"] if x["dtype"] in ("int8", "fp8")]
    out["parts"] = {"quality": all(q_ok) if q_ok else None,
                    "pool_at_least_1_9x": (out["pool"]["ratio"] >= 1.9) if cuda and out["pool"] and
                    out["pool"]["ratio"] else None}
    out["status"] = item_status(out["parts"]) if cuda else "figure"
    rows.append(f"38   {out['status']}: KV dtypes: quality " + (", ".join(
        f"{x['dtype']} {x['case']} prefill {x['prefill_top1']} decode {x['decode_top1']} {x['verdict']}"
        for x in out["quality"]) or "not run"))
    if out["pool"]:
        rows.append(f"     pool: {out['pool']['dtype']} {out['pool']['blocks']} blocks vs f16 "
                    f"{out['pool']['f16_blocks']} = {fmt(out['pool']['ratio'], 3)}x (target 1.9x on the GPU)")
    if out["serving"]:
        sv = out["serving"]
        rows.append(f"     serving c={sv['concurrency']}: {sv['dtype']} {fmt(sv['run']['output_tok_s'])} "
                    f"output tok/s vs f16 {fmt(sv['f16_output_tok_s'])} = {sv['ratio']}x")
    return out


def issue40(d, stages, rows):
    """The moe stage (test_cuda_model --moe): each mixture-of-experts case's
    verdict line, as the model stage's families are read."""
    moe = read(d, "moe.txt")
    fams = [{"family": fm.group(1), "case": fm.group(2), "verdict": fm.group(3),
             "checks_failed": int(fm.group(4)), "auto": fm.group(5), "seconds": float(fm.group(6))}
            for fm in re.finditer(r"^test_cuda_model: family (\S+): (.+?): (PASS|FAIL) \((\d+) checks "
                                  r"failed\); --device auto: ([^;]+); ([0-9.]+) s$", moe, re.M)]
    # test_cuda_ops -o moe, run first in the stage: its case count, and the
    # failed lines (both paths against the reference, grouped vs GEMV).
    m = re.search(r"test_cuda_ops: (\d+)/(\d+) cases passed", moe)
    op = {"passed": int(m.group(1)), "cases": int(m.group(2)),
          "failed": re.findall(r"^  (MOE\w*\(.*\)): .* FAIL$", moe, re.M)} if m else None
    st = stages.get("moe")
    status = "not run" if not st or st["skipped"] else ("pass" if st["rc"] == 0 and fams else "fail")
    ops_txt = f"ops {op['passed']}/{op['cases']}; " if op else ""
    rows.append(f"40 moe {status}: {ops_txt}" +
                (", ".join(f"{f['case']} {f['verdict']}" for f in fams) or "no cases"))
    return {"status": status, "families": fams, "ops": op}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("out")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", type=int, default=0)
    a = ap.parse_args()
    d, cuda = a.workdir, a.device == "cuda"
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
    s["python_modules"] = dict(re.findall(r"^module (\w+): (.+)$", env, re.M))
    rows = []

    def ran(name):
        st = stages.get(name)
        return bool(st) and not st["skipped"]

    def ok(name):
        """True/False for a stage that ran, None for one that did not (or that
        found no tool to run: exit 3 of the sanitizer and hf stages)."""
        if not ran(name) or (name in TOOL_STAGES and stages[name]["rc"] == 3):
            return None
        return stages[name]["rc"] == 0

    fmt = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"  # noqa: E731

    # ---- issue 33 -------------------------------------------------------------------
    i33 = {}
    ops = read(d, "ops.txt")
    m = re.search(r"test_cuda_ops: (\d+)/(\d+) cases passed", ops)
    skipped_ops = "SKIP" in ops[:400]
    item = {"ops_cases": f"{m.group(1)}/{m.group(2)}" if m else None, "ops_skipped": skipped_ops}
    for tool in ("memcheck", "racecheck"):
        t = read(d, f"{tool}.txt")
        summ = re.findall(r"========= ((?:ERROR|RACECHECK) SUMMARY: .*)", t)
        item[tool] = {"summary": summ[-1] if summ else None, "message": None if summ else t.strip()[-300:]}
    item["parts"] = {"ops": None if skipped_ops else ok("ops"), "memcheck": ok("memcheck"),
                     "racecheck": ok("racecheck")}
    item["status"] = item_status(item["parts"])
    i33["item1"] = item
    rows.append(f"33/1 {item['status']}: ops {item['ops_cases']}; memcheck "
                f"{item['memcheck']['summary'] or 'not run'}; racecheck {item['racecheck']['summary'] or 'not run'}")

    model = read(d, "model.txt")
    fams = []
    for fm in re.finditer(r"^test_cuda_model: family (\S+): (.+?): (PASS|FAIL) \((\d+) checks failed\); "
                          r"--device auto: ([^;]+); ([0-9.]+) s$", model, re.M):
        fams.append({"family": fm.group(1), "case": fm.group(2), "verdict": fm.group(3),
                     "checks_failed": int(fm.group(4)), "auto": fm.group(5), "seconds": float(fm.group(6))})
    parity = [ln[len("test_cuda_model: "):] for ln in model.splitlines()
              if ln.startswith("test_cuda_model: parity ") and ln.rstrip().endswith(("PASS", "FAIL"))]
    m = re.search(r"^test_cuda_model: (\d+) passed, (\d+) failed", model, re.M)
    model_skipped = "SKIP: no CUDA" in model
    item = {"checks": f"{m.group(1)} passed, {m.group(2)} failed" if m else None, "families": fams,
            "parity": parity, "lines": [ln for ln in model.splitlines() if ln.startswith("test_cuda_model:")]}
    item["parts"] = {"test_cuda_model": None if model_skipped else ok("model"), "backend": ok("backend"),
                     "window_release": (all(p.endswith("PASS") for p in parity if "window release" in p)
                                        if any("window release" in p for p in parity) else None)}
    item["status"] = item_status(item["parts"])
    i33["item2"] = item
    rows.append(f"33/2 {item['status']}: test_cuda_model {item['checks']}, backend rc "
                f"{stages.get('backend', {}).get('rc')}")
    rows += [f"     {f['family']:8} {f['case']:36} {f['verdict']} ({f['checks_failed']} failed), "
             f"auto {f['auto']}, {f['seconds']:.1f} s" for f in fams]
    rows += [f"     {p[:140]}" for p in parity]

    st = load(d, "structured.json") or {}
    emb = {p: load(d, f"embed_{p}.json") for p in ("mean", "last")}
    emb_model = [p for p in parity if p.startswith("parity embeddings")]
    free, js = bench_run(d, "pair_free"), bench_run(d, "pair_json")
    pair = {"streams": int(os.environ.get("PAIR_C", "0")) or None, "unconstrained_tok_s": free and free["output_tok_s"],
            "json_schema_tok_s": js and js["output_tok_s"], "target": 0.9}
    if free and js and free["output_tok_s"]:
        pair["ratio"] = round(js["output_tok_s"] / free["output_tok_s"], 3)
        pair["failed"] = (free["failed"] or 0) + (js["failed"] or 0)
    item = {"structured": st, "embeddings_http": emb, "embeddings_model": emb_model, "json_schema_64": pair}
    pair_ok = None
    if "ratio" in pair:
        pair_ok = pair["failed"] == 0 and (pair["ratio"] >= 0.9 if cuda else True)
    item["parts"] = {
        "embeddings_model": all(p.endswith("PASS") for p in emb_model) if emb_model else None,
        "embeddings_http_mean": (emb["mean"] or {}).get("passed") if emb["mean"] else None,
        "embeddings_http_last": (emb["last"] or {}).get("passed") if emb["last"] else None,
        "structured_on_device": st.get("passed") if st else None,
        "structured_valid": None,  # bench/gpu_validate.py, on the build machine
        "json_schema_64": pair_ok}
    others = {k: v for k, v in item["parts"].items() if k != "structured_valid"}
    item["status"] = "pending validation" if item_status(others) == "pass" else item_status(item["parts"])
    i33["item3"] = item
    apis = st.get("apis", {})
    rows.append(f"33/3 {item['status']}: structured " + "; ".join(
        f"{k} {v['stop']}/{v['requests']} stop" for k, v in apis.items()) +
        f"; embeddings HTTP mean {item['parts']['embeddings_http_mean']}, last "
        f"{item['parts']['embeddings_http_last']}; JSON schema at {pair['streams']} streams "
        f"{fmt(pair['json_schema_tok_s'])} vs {fmt(pair['unconstrained_tok_s'])} tok/s = "
        f"{pair.get('ratio', '-')}x (target 0.9x)")

    auto_cpu = [f for f in fams if "mini" not in f["case"] and f["auto"].startswith("cpu")]
    passed_not_auto = [f["case"] for f in auto_cpu if f["verdict"] == "PASS"]
    failed_on_auto = [f["case"] for f in fams if f["verdict"] == "FAIL" and f["auto"].startswith("cuda")]
    item = {"auto_cpu": [f["case"] for f in auto_cpu], "passed_but_auto_cpu": passed_not_auto,
            "failed_but_auto_cuda": failed_on_auto,
            "note": "after a passing run, set cuda_validated in models/model_arch.c for the families "
                    "that passed, and list what ran where in docs/CUDA.md"}
    item["parts"] = {"auto_matches_results": (not passed_not_auto and not failed_on_auto) if fams else None}
    item["status"] = item_status(item["parts"])
    i33["item4"] = item
    rows.append(f"33/4 {item['status']}: passed but auto keeps on the CPU: {passed_not_auto or 'none'}; "
                f"failed but auto picks CUDA: {failed_on_auto or 'none'}")
    s["issue33"] = i33

    # ---- issue 34 -------------------------------------------------------------------
    i34 = {}
    perf = read(d, "opsperf.txt")
    roof = {}
    m = re.search(r"device-to-device copy ([0-9.]+) GB/s", perf)
    if m:
        roof["copy_bw_gb_s"] = float(m.group(1))
    m = re.search(r"read-only ([0-9.]+) GB/s", perf)
    if m:
        roof["read_bw_gb_s"], roof["read_source"] = float(m.group(1)), "test_cuda_ops perf"
    m = re.search(r"matmul peak: ([0-9.]+) TFLOP/s", perf)
    if m:
        roof["cublas_f16_tflop_s"] = float(m.group(1))
    mb = [json.loads(ln) for ln in read(d, "model_bench.jsonl").splitlines() if ln.startswith("{")]
    for b in mb:
        # read_bw_gb_s is a read-only figure on the CPU, and on CUDA where brisk
        # bench also reports copy_bw_gb_s; before that, CUDA's was the copy.
        if "copy_bw_gb_s" in b or b.get("backend") == "cpu":
            if b.get("read_bw_gb_s"):
                roof["read_bw_gb_s"], roof["read_source"] = b["read_bw_gb_s"], "brisk bench"
            if b.get("copy_bw_gb_s"):
                roof.setdefault("copy_bw_gb_s", b["copy_bw_gb_s"])
        elif b.get("read_bw_gb_s"):  # an older brisk bench: its read_bw_gb_s was the copy
            roof.setdefault("copy_bw_gb_s", b["read_bw_gb_s"])
    i34["rooflines"] = roof
    f16 = next((b for b in mb if b.get("weights") == "f16"), None)
    i8 = next((b for b in mb if b.get("weights") == "int8"), None)
    rbw = roof.get("read_bw_gb_s")
    t = {"f16": f16, "int8": i8, "read_bw_gb_s": rbw}
    if f16 and rbw:
        t["f16_frac_read_roofline"] = round(f16["tg_tok_s"] * f16["weight_bytes"] / (rbw * 1e9), 3)
    if f16 and i8 and f16.get("tg_tok_s"):
        t["int8_over_f16"] = round(i8["tg_tok_s"] / f16["tg_tok_s"], 3)
    if not cuda:
        t["status"] = "figure" if f16 or i8 else "not run"
    elif not (f16 and i8):
        t["status"] = "not run"
    elif "f16_frac_read_roofline" not in t:
        t["status"] = "incomplete (no read-only roofline in this run)"
    else:
        t["status"] = "pass" if t["f16_frac_read_roofline"] >= 0.8 and t["int8_over_f16"] >= 1.7 else "fail"
    i34["target1"] = t
    rows.append(f"34/1 {t['status']}: decode f16 {fmt(f16 and f16['tg_tok_s'])} tok/s = "
                f"{fmt(100 * t['f16_frac_read_roofline'] if 'f16_frac_read_roofline' in t else None)}% of the read "
                f"roofline ({fmt(rbw, 0)} GB/s, {roof.get('read_source', 'not measured')}; target 80%); int8 "
                f"{fmt(i8 and i8['tg_tok_s'])} = {t.get('int8_over_f16', '-')}x (target 1.7x); copy "
                f"{fmt(roof.get('copy_bw_gb_s'), 0)} GB/s, cuBLAS {fmt(roof.get('cublas_f16_tflop_s'))} TFLOP/s")
    t = {"pp_f16_tok_s": f16 and f16.get("pp_tok_s"), "pp_int8_tok_s": i8 and i8.get("pp_tok_s")}
    if t["pp_f16_tok_s"] and t["pp_int8_tok_s"]:
        t["int8_over_f16"] = round(t["pp_int8_tok_s"] / t["pp_f16_tok_s"], 3)
        t["status"] = ("pass" if t["int8_over_f16"] >= 0.9 else "fail") if cuda else "figure"
    else:
        t["status"] = "not run"
    i34["target2"] = t
    rows.append(f"34/2 {t['status']}: prefill {(f16 or {}).get('pp', 512)} f16 {fmt(t['pp_f16_tok_s'], 0)} tok/s, int8 "
                f"{fmt(t['pp_int8_tok_s'], 0)} = {t.get('int8_over_f16', '-')}x (target 0.9x)")
    lv16, lv8 = levels(d, "f16"), levels(d, "int8")
    t = {"f16": lv16, "int8": lv8, "step_trace": step_trace(d), "smoke": load(d, "smoke.json"),
         "metrics_vs_nvidia_smi": load(d, "metrics_vs_smi.json")}
    at = {lv["concurrency"]: lv for lv in lv16}
    if cuda and 256 in at and 64 in at:
        t["parts"] = {"f16_256_at_least_16000": (at[256]["output_tok_s"] or 0) >= 16000,
                      "itl_p99_within_3x_p50_at_64": (at[64]["itl_p99_over_p50"] or 99) <= 3,
                      "itl_p99_within_3x_p50_at_256": (at[256]["itl_p99_over_p50"] or 99) <= 3,
                      "no_failed_requests": all(lv["failed"] == 0 for lv in lv16 + lv8)}
        t["status"] = item_status(t["parts"])
    else:
        t["status"] = "figure" if lv16 and not cuda else "not run"
    i34["target3"] = t
    rows.append(f"34/3 {t['status']}: serving {os.environ.get('IN', '128')}/{os.environ.get('OUT_LEN', '128')}")
    for w, lvs in (("f16", lv16), ("int8", lv8)):
        for lv in lvs:
            rows.append(f"     {w:4} c={lv['concurrency']:>4}: {fmt(lv['output_tok_s']):>9} output tok/s, "
                        f"{lv['completed']} done, {lv['failed']} failed; TTFT p50/p99 {fmt(lv['ttft_p50_ms'])}/"
                        f"{fmt(lv['ttft_p99_ms'])} ms; ITL p50/p99 {fmt(lv['itl_p50_ms'])}/{fmt(lv['itl_p99_ms'])} ms "
                        f"({lv['itl_p99_over_p50']}x)")
    tr = t["step_trace"]
    if tr and tr.get("steps"):
        worst = tr["slowest"][0]
        rows.append(f"     step trace: {tr['steps']} steps; slowest {worst['wall_ms']} ms ({worst['pass']}, "
                    f"{worst['prefill_tokens']} prefill tokens, {worst['decode_rows']} decode rows)")
    hf = load(d, "hf_generate.json")
    t = {"hf_generate": hf, "status": "figure" if hf and hf.get("batches") else "not run"}
    i34["target4"] = t
    if hf:
        rows.append("34/4 figure: transformers generate " + ", ".join(
            f"batch {b['batch']} {b.get('output_tok_s', b.get('error'))}" for b in hf.get("batches", [])))
    s["issue34"] = i34
    s["issue38"] = issue38(d, cuda, model, rows, fmt)
    s["issue40"] = issue40(d, stages, rows)
    s["later"] = {n: st for n, st in stages.items() if n not in KNOWN_STAGES}

    s["issue33_items_1_3"] = all(i33[k]["status"] in ("pass", "pending validation") for k in ("item1", "item2", "item3"))
    if not cuda:
        # The rehearsal: every stage that can run without a GPU ran and passed
        # (no compute-sanitizer or torch here is not a failure), and the
        # server-side checks passed.
        s["rehearsal_passed"] = all(
            st_["rc"] == 0 or (n in TOOL_STAGES and st_["rc"] == 3)
            for n, st_ in stages.items() if not st_["skipped"]) and \
            i33["item3"]["parts"]["structured_on_device"] is True and \
            i33["item3"]["parts"]["json_schema_64"] is True and bool(lv16)
    for name, st_ in stages.items():
        rows.append(f"stage {name:10} " + ("skipped (budget)" if st_["skipped"] else
                                           f"rc {st_['rc']:>3} {st_['seconds']:7.1f} s (timeout {st_['timeout_s']})"))
    if not cuda:
        rows.append(f"CPU rehearsal: {'PASS' if s['rehearsal_passed'] else 'FAIL'} (a GPU run's items need a GPU)")
    else:
        rows.append(f"issue 33 items 1-3: {'PASS (item 3 pending validation)' if s['issue33_items_1_3'] else 'not all passed'}")
    with open(a.out, "w") as f:
        json.dump(s, f, indent=1)
    print("\n".join(rows))
    return 0 if s.get("rehearsal_passed", s["issue33_items_1_3"]) else 1


if __name__ == "__main__":
    sys.exit(main())
