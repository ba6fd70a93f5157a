#!/usr/bin/env python3
"""structured_bench.py - decode speed with a grammar constraint on every sequence
against the same load unconstrained, side by side on one `brisk serve`.

    bench/structured_bench.py MODEL.gguf [--streams 1,16] [--tokens 128] [--reps 3]
        [--threads N] [--label NAME]

Load: S sequences (one /v1/completions request with S prompts, so they run
together) of --tokens greedy tokens each. Constrained: a JSON Schema (guided_json)
whose instances cannot end before --tokens (an array of at least 40 objects with
string, integer and boolean members), so it is active for every token;
unconstrained: the same prompts with ignore_eos. Each repetition runs both, alternating; the first
constrained run of the server is reported apart ("cold": compiling and an empty
mask cache), the rest are "warm" (the server caches compiled grammars by text and
each grammar's masks by parser state). Rate = completion tokens / wall seconds.

Prints a table and writes bench/results/<date>-<machine>-structured[-LABEL].json.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_meta  # noqa: E402

SCHEMA = {"type": "array", "minItems": 40,
          "items": {"type": "object",
                    "properties": {"name": {"type": "string", "maxLength": 24},
                                   "age": {"type": "integer"}, "cat": {"type": "boolean"}},
                    "required": ["name", "age", "cat"], "additionalProperties": False}}

PROMPTS = ["A JSON list of people with their name, age and whether they own a cat:",
           "Here is the data as JSON:", "Output:", "The records, in JSON:"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    r = json.load(urllib.request.urlopen(req, timeout=3600))
    return time.perf_counter() - t0, r


def run(port, streams, tokens, constrained):
    prompts = [PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)) for i in range(streams)]
    body = {"prompt": prompts, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    if constrained:
        body["guided_json"] = SCHEMA
    wall, r = post(port, body)
    n = r["usage"]["completion_tokens"]
    finishes = {c["finish_reason"] for c in r["choices"]}
    assert n == streams * tokens and finishes == {"length"}, (n, finishes)
    if constrained:
        for c in r["choices"]:  # the text so far is a JSON array prefix
            assert c["text"].lstrip().startswith("["), c["text"][:40]
    return n / wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--brisk", default=os.path.join(HERE, "..", "build", "bin", "brisk"))
    ap.add_argument("--streams", default="1,16")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    port = free_port()
    cmd = [args.brisk, "serve", "--model", args.model, "--port", str(port)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    log = open(f"/tmp/brisk-structured-{os.getpid()}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    rows = []
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except OSError:
                time.sleep(0.2)
        for streams in [int(s) for s in args.streams.split(",")]:
            run(port, streams, 8, False)  # warm-up: pages, threads
            cold = run(port, streams, args.tokens, True) if not rows else None
            free, con = [], []
            for _ in range(args.reps):
                free.append(run(port, streams, args.tokens, False))
                con.append(run(port, streams, args.tokens, True))
            rows.append({"streams": streams, "unconstrained_tok_s": free,
                         "constrained_tok_s": con, "cold_constrained_tok_s": cold,
                         "ratio_median": statistics.median(con) / statistics.median(free)})
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"{os.path.basename(args.model)}: {args.tokens} greedy tokens per sequence, "
          f"JSON Schema active on every token (an array of >= 40 objects)")
    print("| streams | unconstrained tok/s (median) | constrained tok/s (median) | ratio | "
          "cold first constrained run |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        cold = f"{r['cold_constrained_tok_s']:.0f}" if r["cold_constrained_tok_s"] else "-"
        print(f"| {r['streams']} | {statistics.median(r['unconstrained_tok_s']):.0f} | "
              f"{statistics.median(r['constrained_tok_s']):.0f} | {r['ratio_median']:.2f} | "
              f"{cold} |")
    kind = "structured" + (f"-{args.label}" if args.label else "")
    path = bench_meta.write_result(kind, {"model": os.path.basename(args.model),
                                          "tokens": args.tokens, "reps": args.reps,
                                          "schema": SCHEMA, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
