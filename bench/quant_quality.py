#!/usr/bin/env python3
"""quant_quality.py - how far a quantized GGUF's logits are from its F16 file,
as brisk runs each (the K-quant mixes, Q5_*, IQ4_*, Q4_*, Q8_0 of one model).

    bench/quant_quality.py --ref smol-f16.gguf smol-Q4_K_M.gguf smol-Q6_K.gguf ...

For a fixed prompt (a chat turn of about 100 tokens, plus 64 fixed
continuation tokens, teacher-forced) brisk dumps every position's logits from
the reference file with --weights f32 (exact) and from each file with the
weights given (default auto, what `brisk serve` runs) and with --weights f32
(the file's exact values). Printed per file: the file's own distance from the
reference (its f32 logits: max and mean relative L2 of the logit rows, top-1
agreement), brisk's (the given weights against the file's f32 logits: what
brisk's conversions and integer kernels add), and the greedy continuation's
first 24 tokens as text, so a reader sees whether it is sensible. The files
of one model quantized from its F16 file differ from it by what the
quantization costs; an F16 file made from an already-quantized one (the
shipped SmolLM2 is Q4_1) makes every other grid's rounding land off the
original grid, so the first columns measure the re-quantization. Writes bench/results/<date>-<machine>-quant-quality.json.

Needs only the Python standard library and NumPy (the test venv has it).
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_meta  # noqa: E402

PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
          "Explain in a few sentences why the sky is blue, and then name three colours "
          "that appear in a sunset and the reason each appears.<|im_end|>\n"
          "<|im_start|>assistant\n")


def run(brisk, *args):
    r = subprocess.run([brisk, *map(str, args)], capture_output=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"quant_quality: brisk {' '.join(map(str, args))} failed:\n{r.stderr.decode()}")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True, help="the F16 (or F32) file")
    ap.add_argument("--brisk", default="build/bin/brisk")
    ap.add_argument("--weights", default="auto")
    ap.add_argument("--out", default=None)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()

    ids = [int(t) for t in run(a.brisk, "tokenize", "--model", a.ref, "--special", "--text",
                               PROMPT).stdout.split()]
    # 64 continuation tokens: the reference's own greedy text, fixed for all.
    cont = run(a.brisk, "generate", "--model", a.ref, "--weights", "f32", "--prompt-ids",
               " ".join(map(str, ids)), "-n", 64, "--temp", 0, "--ignore-eos").stdout
    cont_ids = [int(t) for t in run(a.brisk, "tokenize", "--model", a.ref, "--text",
                                    cont.decode("utf-8", "replace")).stdout.split()][:64]
    all_ids = " ".join(map(str, ids + cont_ids))
    n_pos = len(ids) + len(cont_ids)

    def logits(path, weights):
        with tempfile.NamedTemporaryFile(suffix=".f32") as f:
            run(a.brisk, "generate", "--model", path, "--weights", weights, "--prompt-ids",
                all_ids, "-n", 0, "--temp", 0, "--dump-logits", f.name)
            x = np.fromfile(f.name, dtype="<f4").astype(np.float64)
        return x.reshape(n_pos, -1)

    ref = logits(a.ref, "f32")
    rows = []
    def dist(got, want):
        rel = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
        return rel, float(np.mean(got.argmax(1) == want.argmax(1)))

    print(f"| file | file type | file vs ref: max / mean rel L2, top-1 | brisk {a.weights} vs "
          f"the file's f32: max rel L2, top-1 | greedy text (24 tokens) |")
    print("|---|---|---:|---:|---|")
    for path in a.files:
        exact = logits(path, "f32")
        got = logits(path, a.weights)
        rel, top1 = dist(exact, ref)
        own, own_top1 = dist(got, exact)
        r = run(a.brisk, "generate", "--model", path, "--weights", a.weights, "--prompt-ids",
                " ".join(map(str, ids)), "-n", 24, "--temp", 0)
        text = r.stdout.decode("utf-8", "replace").replace("\n", " ").strip()
        ftype = next((ln.split("file type ", 1)[1].split(";")[0]
                      for ln in r.stderr.decode().splitlines() if "file type" in ln), "?")
        rows.append({"file": os.path.basename(path), "file_type": ftype,
                     "file_max_rel_l2": float(rel.max()), "file_mean_rel_l2": float(rel.mean()),
                     "file_top1": top1, "brisk_max_rel_l2": float(own.max()),
                     "brisk_top1": own_top1, "text": text})
        print(f"| {rows[-1]['file']} | {ftype} | {rel.max():.3f} / {rel.mean():.3f}, "
              f"{top1 * 100:.1f}% | {own.max():.2e}, {own_top1 * 100:.1f}% | {text[:80]} |")

    out = bench_meta.write_result("quant-quality", {"ref": os.path.basename(a.ref),
                                                    "weights": a.weights, "positions": n_pos,
                                                    "rows": rows}, a.out)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
