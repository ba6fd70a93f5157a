#!/usr/bin/env python3
"""peer_greedy.py - brisk's greedy continuations of fixed prompts against another
engine's on the same GGUF file (issue: "match an independent engine's on all but
at most one prompt").

    bench/peer_greedy.py MODEL.gguf --peer-cli /path/to/llama-cli
        [--peer-model OTHER.gguf] [--peer-args "-ctk f32 -ctv f32"] [-n 32]
        [--prompts FILE] [--label NAME]

The peer is a llama.cpp-family `llama-cli` (llama.cpp, ik_llama.cpp), built
outside this repository; it runs greedy (--temp 0 --top-k 1), --ignore-eos,
without echoing the prompt. --peer-model gives the peer another file holding the
same values (e.g. the file requantized to F32 by its llama-quantize, so the peer
computes in f32 like `brisk --weights f32`); brisk always reads MODEL.

brisk runs twice per prompt: its default (`auto`: the file's blocks, int16
activations) and `--weights f32` (the file's exact values in f32). Where a
continuation differs from the peer's, the script finds the first differing token
and reports the margin there in brisk f32's logits (its choice minus the peer's):
a near-tie (a small fraction of a logit) is within the peers' rounding, not a
modelling difference.

Prints a table and writes bench/results/<date>-<machine>-peer-greedy[-LABEL].json.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_meta  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little girl who",
    "The three primary colors are",
    "def fibonacci(n):",
    "Water boils at a temperature of",
    "The best way to learn a new language is",
    "In 1969, the first human",
    "Photosynthesis is the process by which",
]


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--peer-cli", required=True)
    ap.add_argument("--peer-model")
    ap.add_argument("--peer-args", default="")
    ap.add_argument("--brisk", default=os.path.join(HERE, "..", "build", "bin", "brisk"))
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    prompts = open(a.prompts).read().splitlines() if a.prompts else PROMPTS
    prompts = [p for p in prompts if p.strip()]
    peer_model = a.peer_model or a.model

    def tok(text):
        r = run([a.brisk, "tokenize", "--model", a.model, "--text", text])
        return [int(x) for x in r.stdout.split()]

    def brisk_gen(p, weights):
        r = run([a.brisk, "generate", "--model", a.model, "--prompt", p, "-n", str(a.n),
                 "--temp", "0", "--ignore-eos", "--weights", weights, "--threads",
                 str(a.threads)])
        if r.returncode:
            sys.exit(f"brisk generate failed: {r.stderr[-2000:]}")
        return r.stdout

    def peer_gen(p):
        argv = [a.peer_cli, "-m", peer_model, "-p", p, "-n", str(a.n), "--temp", "0", "--top-k",
                "1", "--no-warmup", "-t", str(a.threads), "--ignore-eos", "--no-display-prompt",
                "--simple-io"] + a.peer_args.split()
        r = run(argv, stdin=subprocess.DEVNULL)
        if r.returncode:
            sys.exit(f"peer failed: {r.stderr[-2000:]}")
        return r.stdout

    def margin(p, ours, theirs):
        """First differing token of the two continuations and brisk f32's logit
        margin there (ours minus theirs, and top-1 minus top-2)."""
        x, y, n0 = tok(p + ours), tok(p + theirs), len(tok(p))
        j = 0
        while j < min(len(x), len(y)) and x[j] == y[j]:
            j += 1
        if j >= min(len(x), len(y)):
            return None
        with tempfile.NamedTemporaryFile(suffix=".f32") as f:
            r = run([a.brisk, "generate", "--model", a.model, "--prompt-ids",
                     " ".join(map(str, x[:j])), "-n", "0", "--temp", "0", "--weights", "f32",
                     "--dump-logits", f.name])
            if r.returncode:
                return None
            logits = np.fromfile(f.name, dtype="<f4").reshape(j, -1)[-1]
        s = np.sort(logits)[::-1]
        return {"token": j - n0 + 1, "ours": x[j], "theirs": y[j],
                "margin": float(logits[x[j]] - logits[y[j]]), "top2_gap": float(s[0] - s[1])}

    rows = []
    for p in prompts:
        auto, f32, peer = brisk_gen(p, "auto"), brisk_gen(p, "f32"), peer_gen(p)
        row = {"prompt": p, "brisk_auto": auto, "brisk_f32": f32, "peer": peer,
               "auto_eq_peer": auto == peer, "f32_eq_peer": f32 == peer, "auto_eq_f32": auto == f32}
        if f32 != peer:
            row["divergence"] = margin(p, f32, peer)
        rows.append(row)

    n_same = sum(r["auto_eq_peer"] for r in rows)
    print(f"{os.path.basename(a.model)}: brisk auto vs peer {n_same}/{len(rows)} identical, "
          f"brisk f32 vs peer {sum(r['f32_eq_peer'] for r in rows)}/{len(rows)}, "
          f"brisk auto vs f32 {sum(r['auto_eq_f32'] for r in rows)}/{len(rows)} "
          f"({a.n} tokens; peer: {os.path.basename(peer_model)} {a.peer_args})")
    print("| prompt | auto = peer | f32 = peer | auto = f32 | first difference (token: margin / top-2 gap) |")
    print("|---|---|---|---|---|")
    for r in rows:
        d = r.get("divergence")
        dd = f"{d['token']}: {d['margin']:.3f} / {d['top2_gap']:.3f}" if d else "-"
        print(f"| {r['prompt']} | {r['auto_eq_peer']} | {r['f32_eq_peer']} | {r['auto_eq_f32']} | {dd} |")
    kind = "peer-greedy" + (f"-{a.label}" if a.label else "")
    path = bench_meta.write_result(kind, {
        "model": os.path.basename(a.model), "peer_cli": a.peer_cli,
        "peer_model": os.path.basename(peer_model), "peer_args": a.peer_args, "n": a.n,
        "threads": a.threads, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
