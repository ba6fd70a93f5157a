#!/usr/bin/env python3
"""make_draft_pair.py - the draft-model pairs of bench/spec_bench.py: SmolLM2
F32, F16 (targets) and Q4_0 (the draft) written from the shipped Q4_1 file
with the `gguf` package's quantize functions, into a cache folder outside the
repository (never commit model files).

    .venv-test/bin/python bench/make_draft_pair.py [--src SmolLM2-135M-Instruct.Q4_1.gguf]
        [--out ~/.cache/brisk/models]

Each matrix stored Q4_1 or Q8_0 is dequantized once (the shipped file is the
only one there is: the F16/F32 "originals" are that file's exact values) and
written as F32, as F16, or requantized to Q4_0 (32-value blocks, one f16 scale,
what llama-quantize's Q4_0 writes); norms and other F32 tensors stay F32. The
metadata (tokenizer included) is copied as is, so the three share a
vocabulary, and general.file_type is set to the new type. Files that exist are
kept. Prints the three paths, one a line."""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
    from gguf import quants
except ImportError:
    sys.exit("make_draft_pair.py: needs the gguf package (.venv-test)")

# general.file_type values (llama.cpp's LLAMA_FTYPE_*).
FTYPE = {"F32": 0, "F16": 1, "Q4_0": 2}


def copy_fields(r, w, ftype):
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        t = f.types[0]
        if f.name == "general.file_type":
            w.add_uint32(f.name, ftype)
            continue
        if t == gguf.GGUFValueType.ARRAY:
            sub = f.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]) for i in f.data]
            else:
                val = [f.parts[i][0].item() for i in f.data]
            w.add_key_value(f.name, val, t, sub_type=sub)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(f.name, bytes(f.parts[-1]), t)
        else:
            w.add_key_value(f.name, f.parts[-1][0].item(), t)


def rewrite(src, dst, ftype, tensor):
    """dst: src's metadata (general.file_type set to ftype) and tensors, 1-D
    F32 ones as they are, every other one dequantized to float32 rows and
    written as tensor(reader, name, x) gives it: (data, raw_dtype), raw_dtype
    None for plain numpy data. Written to dst.tmp, then renamed."""
    r = gguf.GGUFReader(str(src))
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    tmp = str(dst) + ".tmp"
    w = gguf.GGUFWriter(tmp, arch)
    copy_fields(r, w, ftype)
    for t in r.tensors:
        shape = list(reversed(t.shape.tolist()))  # rows first, as numpy holds them
        if t.tensor_type == gguf.GGMLQuantizationType.F32 and len(shape) == 1:
            w.add_tensor(t.name, np.array(t.data, dtype=np.float32))
            continue
        x = quants.dequantize(np.array(t.data), t.tensor_type).astype(np.float32).reshape(shape)
        data, raw = tensor(r, t.name, x)
        if raw is None:
            w.add_tensor(t.name, data)
        else:
            w.add_tensor(t.name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, dst)


def convert(src, dst, kind):
    def tensor(_r, _name, x):
        if kind == "F32":
            return x, None
        if kind == "F16":
            return x.astype(np.float16), None
        q4 = gguf.GGMLQuantizationType.Q4_0
        return quants.quantize(x, q4), q4

    rewrite(src, dst, FTYPE[kind], tensor)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cache = Path(os.environ.get("BRISK_CACHE_DIR", Path.home() / ".cache" / "brisk")) / "models"
    ap.add_argument("--src", default=str(cache / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=str(cache))
    a = ap.parse_args()
    src = Path(a.src)
    if not src.exists():
        sys.exit(f"make_draft_pair.py: {src} not found (scripts/fetch-model.sh)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = src.name.split(".")[0]
    for kind in ("F32", "F16", "Q4_0"):
        dst = out / f"{stem}.{kind}.gguf"
        if not dst.exists():
            print(f"make_draft_pair.py: writing {dst}", file=sys.stderr)
            convert(src, dst, kind)
        print(dst)


if __name__ == "__main__":
    main()
