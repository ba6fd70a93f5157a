#!/usr/bin/env python3
"""spec_gpu_check.py - speculative decoding's checks in the GPU campaign
(bench/gpu.sh's spec stage; standard library only: the GPU machine has no
package registry).

  greedy --url URL --json OUT     8 prompts, temperature 0, 48 tokens each,
                                  with log-probs; the tokens and the server's
                                  vllm:spec_decode_* counters into OUT
  compare BASE.json OTHER.json    how many of OTHER's greedy tokens equal BASE's
                                  (prefix match per prompt) and the largest
                                  log-prob difference; exit 0, the figures on
                                  stdout as one JSON line
  trace STEPS.jsonl               the server's --step-trace: the steps that
                                  verified proposals, by pass kind (eager,
                                  warmup, capture, replay: on CUDA a step of
                                  short runs replays a graph), with their mean
                                  forward time; one JSON line

On the CPU the two are equal bit for bit (tests/integration/test_speculative.py);
on CUDA the verification batch changes the kernels' token counts, so the rule is
the CPU/CUDA agreement rule: the same tokens until a near tie (docs/CUDA.md).
"""
import argparse
import json
import re
import sys
import urllib.request

PROMPTS = [
    "Once upon a time there was a",
    "The list of numbers: 1, 2, 3, 4, 5, 6, 7, 8,",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "A B C D E F G A B C D E F G A B C",
    "The cat sat on the mat. The cat sat on the",
    "Repeat after me: hello world, hello world, hello",
    "Q: What is 2+2?\nA: 4\nQ: What is 3+3?\nA:",
    "{\"name\": \"a\", \"id\": 1}, {\"name\": \"b\", \"id\": 2}, {\"name\":",
]


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def counters(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(vllm:spec_decode_\w+)\{[^}]*?(?:position="(\d+)")?[^}]*\} ([0-9.e+]+)$', line)
        if m:
            key = m.group(1) + ("[" + m.group(2) + "]" if m.group(2) else "")
            out[key] = float(m.group(3))
    return out


def greedy(args):
    rows = []
    for p in PROMPTS:
        d = post(args.url, {"prompt": p, "max_tokens": 48, "temperature": 0, "logprobs": 0})
        lp = d["choices"][0]["logprobs"]
        rows.append({"prompt": p, "tokens": lp["tokens"], "logprobs": lp["token_logprobs"]})
    json.dump({"rows": rows, "counters": counters(args.url)}, open(args.json, "w"))
    return 0


def compare(args):
    a = json.load(open(args.base))["rows"]
    b = json.load(open(args.other))["rows"]
    same = total = 0
    max_lp = 0.0
    for x, y in zip(a, b):
        n = 0
        while n < min(len(x["tokens"]), len(y["tokens"])) and x["tokens"][n] == y["tokens"][n]:
            max_lp = max(max_lp, abs(x["logprobs"][n] - y["logprobs"][n]))
            n += 1
        same += n
        total += len(x["tokens"])
    print(json.dumps({"tokens": total, "same_prefix_tokens": same, "max_logprob_diff": max_lp}))
    return 0


def trace(args):
    kinds = {}
    for line in open(args.steps):
        st = json.loads(line)
        if st.get("spec_proposed", 0) <= 0:
            continue
        k = kinds.setdefault(st["pass"], {"steps": 0, "forward_ms": 0.0})
        k["steps"] += 1
        k["forward_ms"] += st["forward_ms"]
    for k in kinds.values():
        k["forward_ms"] = round(k["forward_ms"] / k["steps"], 3)
    print(json.dumps({"verify_steps_by_pass": kinds}))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("greedy")
    g.add_argument("--url", required=True)
    g.add_argument("--json", required=True)
    c = sub.add_parser("compare")
    c.add_argument("base")
    c.add_argument("other")
    t = sub.add_parser("trace")
    t.add_argument("steps")
    args = ap.parse_args()
    return {"greedy": greedy, "compare": compare, "trace": trace}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
