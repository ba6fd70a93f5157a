#!/usr/bin/env python3
"""structured_bench.py - what structured output costs: decode speed with a grammar on
every sequence against the same load unconstrained, a schema the server has never seen
(cold) as well as one it has (warm); the grammar engine's compile and mask times over the
schema corpus; and what a costly grammar does to a plain stream beside it.

    bench/structured_bench.py MODEL.gguf [--streams 1,16,64] [--tokens 128] [--reps 5]
        [--threads N] [--label NAME] [--skip-isolation]

1. Decode. Load: S sequences (one /v1/completions request with S prompts, so they run
   together) of --tokens greedy tokens each. Constrained: a JSON Schema (guided_json)
   whose instances cannot end before --tokens (an array of at least 40 objects with
   string, integer and boolean members), so it is active for every token; unconstrained:
   the same prompts with ignore_eos. Each repetition runs unconstrained, constrained
   warm (the schema of the previous runs: the server has its compiled grammar, its
   masks and its automaton) and constrained cold (the schema with its property names
   suffixed by a number never used before: compiled and walked from nothing), in that
   order. Rate = completion tokens / wall seconds; ratios of medians, and the median of
   each repetition's own ratios (its runs are back to back, so they see the same load:
   the figure to trust on a shared machine). 64 streams: half the repetitions.
2. Compile. build/bin/grammar_bench over tests/integration/test_structured.py's schema
   corpus and a 100-property schema on MODEL's vocabulary: JSON Schema -> GBNF ->
   compiled grammar (median of 5 per schema; p50 and p99 over the corpus), the first
   mask from a cold grammar, and the masks' work units along a seeded walk.
3. Isolation (unless --skip-isolation). A server with --threads 1: a plain greedy stream
   alone and beside a request whose regex costs ~2 million work units a mask
   (tests/integration/test_grammar_cost.py's COSTLY), three runs each, interleaved.

Prints tables and writes bench/results/<date>-<machine>-structured[-LABEL].json with the
machine, CPU flags, commit, date and the load average before and after.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_meta  # noqa: E402
from bench_server import free_port  # noqa: E402


def schema(suffix=""):
    return {"type": "array", "minItems": 40,
            "items": {"type": "object",
                      "properties": {f"name{suffix}": {"type": "string", "maxLength": 24},
                                     f"age{suffix}": {"type": "integer"},
                                     f"cat{suffix}": {"type": "boolean"}},
                      "required": [f"name{suffix}", f"age{suffix}", f"cat{suffix}"],
                      "additionalProperties": False}}


SCHEMA = schema()
PROMPTS = ["A JSON list of people with their name, age and whether they own a cat:",
           "Here is the data as JSON:", "Output:", "The records, in JSON:"]
COSTLY = "(?:(?:" + "|".join(f"[a-z]{{1,{n}}}" for n in range(8, 20)) + ")+ ){1,100}"


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    r = json.load(urllib.request.urlopen(req, timeout=3600))
    return time.perf_counter() - t0, r


def run(port, streams, tokens, constraint):
    prompts = [PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)) for i in range(streams)]
    body = {"prompt": prompts, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    if constraint is not None:
        body["guided_json"] = constraint
    wall, r = post(port, body)
    n = r["usage"]["completion_tokens"]
    finishes = {c["finish_reason"] for c in r["choices"]}
    assert n == streams * tokens and finishes == {"length"}, (n, finishes)
    if constraint is not None:
        for c in r["choices"]:  # the text so far is a JSON array prefix
            assert c["text"].lstrip().startswith("["), c["text"][:40]
    return n / wall


def start(brisk, model, *args):
    port = free_port()
    log = open(f"/tmp/brisk-structured-{os.getpid()}-{port}.log", "w")
    proc = subprocess.Popen([brisk, "serve", "--model", model, "--port", str(port), *args],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
            return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("brisk did not start")


def stop(proc):
    proc.terminate()
    proc.wait(timeout=30)


def decode_rows(args, threads):
    proc, port = start(args.brisk, args.model, *threads)
    rows, fresh = [], 0
    try:
        for streams in [int(s) for s in args.streams.split(",")]:
            run(port, streams, 8, None)  # warm-up: pages, threads
            run(port, streams, 8, SCHEMA)  # the warm schema, compiled and walked once
            free, warm, cold = [], [], []
            # 64 streams x 128 tokens is 8,192 tokens a run: fewer repetitions there
            for _ in range(args.reps if streams < 64 else max(2, args.reps // 2)):
                free.append(run(port, streams, args.tokens, None))
                warm.append(run(port, streams, args.tokens, SCHEMA))
                fresh += 1
                cold.append(run(port, streams, args.tokens, schema(fresh)))
            med = statistics.median
            # Each repetition's runs are back to back: their ratios see the same load.
            rows.append({"streams": streams, "unconstrained_tok_s": free,
                         "constrained_tok_s": warm, "cold_constrained_tok_s": cold,
                         "ratio_median": med(warm) / med(free),
                         "cold_ratio_median": med(cold) / med(free),
                         "paired_ratio_median": med(w / f for w, f in zip(warm, free)),
                         "paired_cold_ratio_median": med(c / f for c, f in zip(cold, free))})
    finally:
        stop(proc)
    return rows


def corpus_cases():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "test_structured", os.path.join(ROOT, "tests", "integration", "test_structured.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(spec.origin))
    spec.loader.exec_module(mod)
    cases = [{"name": f"corpus-{i}", "schema": s} for i, s in enumerate(mod.SCHEMAS)]
    kinds = [{"type": "string", "maxLength": 16}, {"type": "integer"}, {"type": "boolean"}]
    props = {f"property_{i}": kinds[i % 3] for i in range(100)}
    cases.append({"name": "props-100", "schema": {"type": "object", "properties": props,
                                                  "required": list(props),
                                                  "additionalProperties": False}})
    return cases


def compile_figures(args):
    gb = os.path.join(os.path.dirname(args.brisk), "grammar_bench")
    cases = corpus_cases()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cases, f)
    try:
        out = subprocess.run([gb, args.model, f.name, "--steps", "128", "--reps", "5"],
                             capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    res = json.loads(out)["cases"]
    corpus = [c for c in res if c["name"].startswith("corpus-")]
    big = [c for c in res if c["name"] == "props-100"][0]

    def q(vals, p):
        vals = sorted(vals)
        return vals[min(len(vals) - 1, max(0, int(p * len(vals) + 0.999999) - 1))]

    comp = [c["convert_ms"] + c["compile_ms"] for c in corpus]
    first = [c["first_mask_ms"] for c in corpus]
    return {"n_schemas": len(corpus),
            "compile_ms_p50": q(comp, 0.5), "compile_ms_p99": q(comp, 0.99),
            "first_mask_ms_p50": q(first, 0.5), "first_mask_ms_p99": q(first, 0.99),
            "mask_ms_max": max(c["mask_ms_max"] for c in corpus),
            "work_units_max": max(c.get("work_units_max", 0) for c in corpus),
            "props100_compile_ms": big["convert_ms"] + big["compile_ms"],
            "props100_gbnf_bytes": big["gbnf_bytes"], "props100_rules": big["rules"],
            "props100_first_mask_ms": big["first_mask_ms"], "cases": res}


def isolation(args):
    proc, port = start(args.brisk, args.model, "--threads", "1")
    plain = {"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0,
             "ignore_eos": True}

    def rate():
        wall, r = post(port, plain)
        return r["usage"]["completion_tokens"] / wall

    try:
        rate()
        solo, beside, hostile = [rate()], [], {}

        def costly():
            try:
                wall, r = post(port, {"prompt": "Words:", "max_tokens": 200, "temperature": 0,
                                      "guided_regex": COSTLY})
                hostile.update(wall=wall, tokens=r["usage"]["completion_tokens"])
            except OSError as e:
                hostile.update(error=str(e))

        th = threading.Thread(target=costly)
        th.start()
        time.sleep(1.0)
        for _ in range(3):
            beside.append(rate())
        overlapped = th.is_alive()
        th.join()
        for _ in range(2):
            solo.append(rate())
    finally:
        stop(proc)
    return {"threads": 1, "plain_solo_tok_s": solo, "plain_beside_costly_tok_s": beside,
            "ratio_median": statistics.median(beside) / statistics.median(solo),
            "costly_overlapped_all_runs": overlapped, "costly_request": hostile,
            "costly_regex": COSTLY}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--brisk", default=os.path.join(ROOT, "build", "bin", "brisk"))
    ap.add_argument("--streams", default="1,16,64")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--label", default="")
    ap.add_argument("--skip-isolation", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()
    threads = ["--threads", str(args.threads)] if args.threads else []
    rows = decode_rows(args, threads)
    comp = compile_figures(args)
    iso = None if args.skip_isolation else isolation(args)
    load_after = os.getloadavg()

    med = statistics.median
    print(f"{os.path.basename(args.model)}: {args.tokens} greedy tokens per sequence, "
          f"JSON Schema active on every token (an array of >= 40 objects); load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print("| streams | unconstrained tok/s | constrained warm | ratio (paired) | "
          "constrained cold | ratio (paired) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['streams']} | {med(r['unconstrained_tok_s']):.0f} | "
              f"{med(r['constrained_tok_s']):.0f} | {r['ratio_median']:.2f} "
              f"({r['paired_ratio_median']:.2f}) | {med(r['cold_constrained_tok_s']):.0f} | "
              f"{r['cold_ratio_median']:.2f} ({r['paired_cold_ratio_median']:.2f}) |")
    print(f"compile (JSON Schema -> GBNF -> grammar), {comp['n_schemas']} schemas: p50 "
          f"{comp['compile_ms_p50']:.3f} ms, p99 {comp['compile_ms_p99']:.3f} ms; first mask "
          f"p50 {comp['first_mask_ms_p50']:.3f} ms, p99 {comp['first_mask_ms_p99']:.3f} ms; "
          f"100 properties: {comp['props100_compile_ms']:.3f} ms ({comp['props100_rules']} "
          f"rules); most work units for one mask: {comp['work_units_max']:.0f}")
    if iso:
        print(f"isolation (--threads 1): plain stream {med(iso['plain_solo_tok_s']):.1f} tok/s "
              f"alone, {med(iso['plain_beside_costly_tok_s']):.1f} beside a costly grammar "
              f"({iso['ratio_median']:.2f}x); the costly request: {iso['costly_request']}")
    kind = "structured" + (f"-{args.label}" if args.label else "")
    path = bench_meta.write_result(kind, {"model": os.path.basename(args.model),
                                          "machine": platform.node(),
                                          "tokens": args.tokens, "reps": args.reps,
                                          "threads": args.threads or "all",
                                          "load_average_before": load_before,
                                          "load_average_after": load_after,
                                          "schema": SCHEMA, "rows": rows,
                                          "compile": comp, "isolation": iso})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
