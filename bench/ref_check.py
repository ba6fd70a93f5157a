#!/usr/bin/env python3
"""ref_check.py - a real GGUF file's logits from brisk (--weights f32: the
file's exact values) against the float64 NumPy reference
(tests/reference/llama_ref.py) on the same file, for prompts of random ids of
the given lengths (longer than a sliding window to cover it).

    bench/ref_check.py MODEL.gguf [--lengths 24,600] [--ctx 1024]

Prints max/mean relative L2 of the logit rows and top-1 agreement per length
and writes bench/results/<date>-<machine>-ref-check.json. The reference holds
the whole model in float64 (a 262k-token embedding is 1.3 GB).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import bench_meta  # noqa: E402
import llama_ref as ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--brisk", default="build/bin/brisk")
    ap.add_argument("--lengths", default="24,600")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    m = ref.Model(a.model)
    rows = []
    for n in (int(x) for x in a.lengths.split(",")):
        ids = [int(t) for t in np.random.default_rng(n).integers(3, m.n_vocab, n)]
        with tempfile.NamedTemporaryFile(suffix=".f32") as f:
            subprocess.run([a.brisk, "generate", "--model", a.model, "--prompt-ids",
                            " ".join(map(str, ids)), "-n", "0", "--temp", "0", "--weights", "f32",
                            "--ctx", str(a.ctx), "--dump-logits", f.name],
                           check=True, capture_output=True)
            got = np.fromfile(f.name, dtype="<f4").astype(np.float64).reshape(n, -1)
        want = ref.forward(m, ids)
        rel = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
        top1 = float(np.mean(got.argmax(1) == want.argmax(1)))
        rows.append({"tokens": n, "max_rel_l2": float(rel.max()), "mean_rel_l2": float(rel.mean()),
                     "top1": top1})
        print(f"{os.path.basename(a.model)} ({m.arch}) f32, {n} tokens: max rel L2 "
              f"{rel.max():.2e}, mean {rel.mean():.2e}, top-1 {top1 * 100:.1f}%")
    out = bench_meta.write_result("ref-check", {"model": os.path.basename(a.model),
                                                "arch": m.arch, "rows": rows}, a.out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
