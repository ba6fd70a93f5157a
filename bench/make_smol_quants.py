#!/usr/bin/env python3
"""make_smol_quants.py - SmolLM2-135M as Q8_0, Q4_0 and Q4_K_M GGUF files for
bench/amx.sh (issue 41 names these three), written from the shipped Q4_1 file
with no llama.cpp: into a cache folder outside the repository (never commit
model files).

    .venv-test/bin/python bench/make_smol_quants.py [--src SmolLM2-135M-Instruct.Q4_1.gguf]
        [--out ~/.cache/brisk/models] [--check]

Every matrix is dequantized once (the shipped Q4_1 file is the only one there
is) and written:
  Q8_0, Q4_0  every matrix in that type, with the `gguf` package's quantizers
              (what llama-quantize's Q8_0 and Q4_0 write); Q4_0 is
              bench/make_draft_pair.py's file, made by its code.
  Q4_K_M      llama-quantize's Q4_K_M choice of types per tensor: the tied
              embedding and attn_v/ffn_down of the layers i < n/8, i >= 7n/8
              and (i - n/8) % 3 == 2 in Q6_K, every other matrix in Q4_K; a
              matrix whose rows are not a multiple of 256 (SmolLM2's 576)
              takes llama-quantize's fallback, Q4_K -> Q5_0 and Q6_K -> Q8_0.
              So 166 of the 210 layer matrices are Q5_0, 14 Q8_0 and the 30
              ffn_down (rows of 1,536) Q4_K or Q6_K, as in the Q4_K_M files
              people download. The Q4_K and Q6_K blocks are written here
              (the gguf package has no K-quant quantizer): min/max per
              sub-block, the sub-block scales on the 6-bit (Q4_K) or int8
              (Q6_K) grid of the block's scale, codes rounded to nearest; a
              plainer rounding than llama-quantize's search, so the logits
              are a little further from the original, and the speed is the
              same (brisk runs a file by its types and shapes).
Norms and other 1-D F32 tensors stay F32; the metadata (tokenizer included)
is copied, general.file_type set. Files that exist are kept. --check
quantizes random blocks and checks the K-quant writers against the gguf
package's dequantizers. Prints the three paths, one a line."""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import gguf
    from gguf import quants

    import make_draft_pair  # noqa: E402
except ImportError:
    sys.exit("make_smol_quants.py: needs the gguf package (.venv-test)")

QT = gguf.GGMLQuantizationType
# general.file_type values (llama.cpp's LLAMA_FTYPE_*).
FTYPE = {"Q8_0": 7, "Q4_K_M": 15}


def _f16(x):
    return x.astype(np.float16)


def quantize_q4_k(x):
    """Rows (n, k), k % 256 == 0 -> Q4_K bytes (n, k / 256 * 144)."""
    n, k = x.shape
    sub = x.reshape(-1, 8, 32).astype(np.float32)
    lo = np.minimum(sub.min(-1), 0.0)
    hi = sub.max(-1)
    step = (hi - lo) / 15.0
    d = _f16(step.max(-1) / 63.0)
    dmin = _f16((-lo).max(-1) / 63.0)
    df, mf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(step, df, out=np.zeros_like(step), where=df > 0)), 0, 63)
    mn = np.clip(np.round(np.divide(-lo, mf, out=np.zeros_like(lo), where=mf > 0)), 0, 63)
    es, em = (df * sc)[..., None], (mf * mn)[..., None]
    q = np.clip(np.round(np.divide(sub + em, es, out=np.zeros_like(sub), where=es > 0)), 0, 15)
    sc, mn, q = sc.astype(np.uint8), mn.astype(np.uint8), q.astype(np.uint8)
    scales = np.zeros((sub.shape[0], 12), np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)
    blk = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                          scales, qs], axis=1)
    return blk.reshape(n, -1)


def quantize_q6_k(x):
    """Rows (n, k), k % 256 == 0 -> Q6_K bytes (n, k / 256 * 210)."""
    n, k = x.shape
    sub = x.reshape(-1, 16, 16).astype(np.float32)
    amax = np.abs(sub).max(-1)
    step = amax / 31.0
    d = _f16(step.max(-1) / 127.0)
    df = d.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(step, df, out=np.zeros_like(step), where=df > 0)), 0, 127)
    es = (df * sc)[..., None]
    q = np.clip(np.round(np.divide(sub, es, out=np.zeros_like(sub), where=es > 0)), -32, 31)
    q = (q + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # [block][half][quarter][l]
    ql = np.concatenate([(q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4),
                         (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)], axis=2).reshape(-1, 128)
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4)
          | ((q[:, :, 3] >> 4) << 6)).reshape(-1, 64)
    blk = np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8),
                          d.view(np.uint8).reshape(-1, 2)], axis=1)
    return blk.reshape(n, -1)


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_type(name, n_in, n_layer):
    """llama-quantize's Q4_K_M type for a matrix, with its fallback."""
    want = QT.Q4_K
    if name in ("output.weight", "token_embd.weight"):
        want = QT.Q6_K
    elif name.endswith(("attn_v.weight", "ffn_down.weight")):
        want = QT.Q6_K if use_more_bits(int(name.split(".")[1]), n_layer) else QT.Q4_K
    if n_in % 256:
        want = {QT.Q4_K: QT.Q5_0, QT.Q6_K: QT.Q8_0}[want]
    return want


def write(src, dst, kind):
    def tensor(r, name, x):
        if kind == "Q8_0":
            qt = QT.Q8_0
        else:
            arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
            n_layer = int(r.fields[f"{arch}.block_count"].parts[-1][0])
            tied = not any(t.name == "output.weight" for t in r.tensors)
            qt = q4_k_m_type("output.weight" if tied and name == "token_embd.weight" else name,
                             x.shape[-1], n_layer)
        if qt == QT.Q4_K:
            return quantize_q4_k(x), qt
        if qt == QT.Q6_K:
            return quantize_q6_k(x), qt
        return quants.quantize(x, qt), qt

    make_draft_pair.rewrite(src, dst, FTYPE[kind], tensor)


def check():
    """The K-quant writers against the gguf package's dequantizers."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 512)).astype(np.float32) * 0.05
    x[3] += 0.2  # a row of positive values only (a zero minimum)
    for qt, fn, tol in ((QT.Q4_K, quantize_q4_k, 0.12), (QT.Q6_K, quantize_q6_k, 0.03)):
        y = quants.dequantize(fn(x), qt).reshape(x.shape)
        rel = np.linalg.norm(y - x) / np.linalg.norm(x)
        print(f"make_smol_quants: {qt.name} round trip relative L2 error {rel:.4f} (limit {tol})",
              file=sys.stderr)
        if not rel < tol:
            sys.exit(f"make_smol_quants: {qt.name} writer is wrong")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cache = Path(os.environ.get("BRISK_CACHE_DIR", Path.home() / ".cache" / "brisk")) / "models"
    ap.add_argument("--src", default=str(cache / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=str(cache))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    check()
    if a.check:
        return
    src = Path(a.src)
    if not src.exists():
        sys.exit(f"make_smol_quants.py: {src} not found (scripts/fetch-model.sh)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = src.name.split(".")[0]
    for kind in ("Q8_0", "Q4_0", "Q4_K_M"):
        dst = out / f"{stem}.{kind}.gguf"
        if not dst.exists():
            print(f"make_smol_quants.py: writing {dst}", file=sys.stderr)
            if kind == "Q4_0":
                make_draft_pair.convert(src, dst, "Q4_0")
            else:
                write(src, dst, kind)
        print(dst)


if __name__ == "__main__":
    main()
