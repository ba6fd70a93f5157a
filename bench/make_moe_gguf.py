#!/usr/bin/env python3
"""make_moe_gguf.py - a random-weight qwen3moe GGUF of Qwen3-30B-A3B's shape.

Issue 40's benchmark file: Qwen3-30B-A3B's layer shape (dim 2,048, 32 query
heads / 4 KV heads of 128 with q/k norms, 128 experts of 768 with 8 used per
token, normalised top-k, vocabulary 151,936, RoPE base 1e6, RMS eps 1e-6) in
N of its 48 layers (default 24: ~9 GB at Q4_0), for brisk and llama.cpp /
ik_llama.cpp's llama-bench to read the same file. Written outside the
repository:

    .venv-test/bin/python bench/make_moe_gguf.py --out /work/moe-bench/qwen3-30b-a3b-24l-q4_0.gguf
    .venv-test/bin/python bench/make_moe_gguf.py --out F --type Q8_0 --layers 4
    .venv-test/bin/python bench/make_moe_gguf.py --out F --tiny        # seconds: a test file

The quantized blocks are drawn directly as random bytes (a seeded SFC64
stream, so a file is reproducible from its arguments) and only their fp16
scales are then set: each block's scale is a base value times a jitter in
[0.75, 1.25) taken from the random bytes it replaces, the base chosen by
dequantizing a calibration sample with the gguf package, and a random sign
(see set_scales: same-sign Q4_0 scales make every token look alike after a
few layers), so that the matrix's root-mean-square weight is gain / sqrt(n_in): unit-variance inputs give
outputs of about unit variance (gain 1), neither exploding nor vanishing over
the layers. Norm weights are 1 + N(0, 0.05^2), the router F32 N(0, 1/n_in)
(router logits ~N(0, 1)). Tensors are streamed to disk in chunks of about 32
MiB; the whole model is never held in memory.

The tokenizer is a synthetic GPT-2 byte-level BPE padded to the vocabulary
size: the 256 byte characters, then merges of two byte characters and then of
a two-character token and a byte character until the 151,643 ordinary tokens
are there, then 26 control tokens (<|endoftext|>, <|im_start|>, <|im_end|>,
...) and [PAD] entries of type UNUSED, as Qwen3's GGUFs lay them out;
tokenizer.ggml.pre is "qwen2".

It prints the file size and what one decode token reads (the active
parameters and their bytes): per layer the attention's four matrices, its
four norm vectors, the router and the three matrices of 8 of the 128
experts; once per token one row of token_embd, output_norm and all of
output.weight (the logits of every vocabulary entry). The KV cache is not
counted. --json FILE writes the same figures.
"""

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import gguf

QT = gguf.GGMLQuantizationType
CHUNK_BYTES = 32 << 20

# Qwen3-30B-A3B's hyper-parameters (its config.json; brisk's qwen3-30b-a3b-4l
# dummy shape has the same).
QWEN3_30B_A3B = dict(dim=2048, heads=32, kv_heads=4, head_dim=128, experts=128, experts_used=8,
                     ff_exp=768, ff=6144, vocab=151936, ctx=40960, rope_base=1e6, eps=1e-6)
# --tiny: the same structure at test size.
TINY = dict(dim=256, heads=4, kv_heads=2, head_dim=64, experts=8, experts_used=2, ff_exp=256,
            ff=384, vocab=1024, ctx=4096, rope_base=1e6, eps=1e-6)

N_CONTROL = 26  # Qwen3: 151,643 .. 151,668
N_PAD_FULL = 267  # Qwen3: [PAD151669] .. [PAD151935]

# Where each type's fp16 block scale(s) sit: type -> (d offset, second fp16
# (dmin) offset or None, dmin / d). Q4_K's dmin at 7.5 d centres its values.
BLOCK_SCALES = {
    "Q4_0": (0, None, 0.0),
    "Q8_0": (0, None, 0.0),
    "Q4_K": (0, 2, 7.5),
    "Q6_K": (208, None, 0.0),
}
FILE_TYPE = {"Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M}


@dataclass
class Tensor:
    name: str
    shape: tuple  # NumPy order: [..., rows, cols]
    qtype: str  # a BLOCK_SCALES key, "F16" or "F32"
    kind: str  # "matrix" (random blocks at rms gain/sqrt(cols)), "norm", "router"
    gain: float = 1.0

    def nbytes(self):
        if self.qtype == "F32":
            return int(np.prod(self.shape)) * 4
        if self.qtype == "F16":
            return int(np.prod(self.shape)) * 2
        bs, ts = gguf.GGML_QUANT_SIZES[QT[self.qtype]]
        return int(np.prod(self.shape)) // bs * ts

    def n_params(self):
        return int(np.prod(self.shape))


# ---- vocabulary ---------------------------------------------------------------


def gpt2_byte_chars():
    """GPT-2's byte -> printable character table (index = byte value)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
                 + list(range(ord("\xae"), ord("\xff") + 1)))
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(0x100 + extra))
            extra += 1
    return out


def make_vocab(n_vocab):
    """(tokens, types, merges, bos, eos) of a byte-level BPE of n_vocab entries."""
    n_pad = N_PAD_FULL if n_vocab >= 4096 else 0
    n_plain = n_vocab - N_CONTROL - n_pad
    if n_plain < 257:
        raise ValueError(f"vocabulary of {n_vocab} too small (>= {257 + N_CONTROL})")
    chars = gpt2_byte_chars()
    tokens = list(chars)
    merges = []
    # Two byte characters, then a two-character token and a byte character:
    # every part is a token before its merge, every result new.
    for a in chars:
        for b in chars:
            if len(tokens) == n_plain:
                break
            merges.append(f"{a} {b}")
            tokens.append(a + b)
    pairs = tokens[256:]
    for ab in pairs:
        for c in chars:
            if len(tokens) == n_plain:
                break
            merges.append(f"{ab} {c}")
            tokens.append(ab + c)
        if len(tokens) == n_plain:
            break
    if len(tokens) != n_plain:
        raise ValueError(f"vocabulary of {n_vocab} too large for this scheme")
    bos = len(tokens)
    control = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    control += [f"<|control_{i}|>" for i in range(len(control), N_CONTROL)]
    tokens += control
    types = [int(gguf.TokenType.NORMAL)] * n_plain + [int(gguf.TokenType.CONTROL)] * N_CONTROL
    tokens += [f"[PAD{i}]" for i in range(len(tokens), n_vocab)]
    types += [int(gguf.TokenType.UNUSED)] * n_pad
    return tokens, types, merges, bos, bos + 2  # eos: <|im_end|>


# ---- tensors ------------------------------------------------------------------


def plan(c, n_layer, mat, embd, output):
    """The tensors in file order."""
    dim, hd = c["dim"], c["head_dim"]
    q_dim, kv_dim = c["heads"] * hd, c["kv_heads"] * hd
    t = [Tensor("token_embd.weight", (c["vocab"], dim), embd, "matrix", np.sqrt(dim)),
         Tensor("output_norm.weight", (dim,), "F32", "norm"),
         Tensor("output.weight", (c["vocab"], dim), output, "matrix")]
    for l in range(n_layer):
        p = f"blk.{l}."
        ne, ff = c["experts"], c["ff_exp"]
        t += [Tensor(p + "attn_norm.weight", (dim,), "F32", "norm"),
              Tensor(p + "attn_q.weight", (q_dim, dim), mat, "matrix"),
              Tensor(p + "attn_k.weight", (kv_dim, dim), mat, "matrix"),
              Tensor(p + "attn_v.weight", (kv_dim, dim), mat, "matrix"),
              Tensor(p + "attn_q_norm.weight", (hd,), "F32", "norm"),
              Tensor(p + "attn_k_norm.weight", (hd,), "F32", "norm"),
              Tensor(p + "attn_output.weight", (dim, q_dim), mat, "matrix"),
              Tensor(p + "ffn_norm.weight", (dim,), "F32", "norm"),
              Tensor(p + "ffn_gate_inp.weight", (ne, dim), "F32", "router"),
              Tensor(p + "ffn_gate_exps.weight", (ne, ff, dim), mat, "matrix"),
              Tensor(p + "ffn_up_exps.weight", (ne, ff, dim), mat, "matrix"),
              Tensor(p + "ffn_down_exps.weight", (ne, dim, ff), mat, "matrix")]
    return t


def random_u8(rng, n):
    """n random bytes (uint8 array) from rng."""
    words = rng.integers(0, 2**64, size=(n + 7) // 8, dtype=np.uint64, endpoint=False)
    return words.view(np.uint8)[:n]


def set_scales(raw, qtype, base):
    """Sets the fp16 scales of blocks raw (uint8 [n_blocks, block bytes]) to
    +-base times a jitter in [0.75, 1.25), sign and jitter read from the bytes
    they replace. The random sign matters: Q4_0's codes q - 8 average -0.5 and
    Q8_0's -0.5, so same-sign scales give every row a common -0.5 d offset,
    i.e. each matrix a rank-one all-ones part that adds up over the layers
    until every position's hidden state points the same way (the same logits
    and experts for every token). llama.cpp's quantizers also write negative
    scales (d = max / -8 with max the signed extreme)."""
    d_off, m_off, m_ratio = BLOCK_SCALES[qtype]
    u = raw[:, d_off:d_off + 2].copy().view(np.uint16)[:, 0]
    sign = np.where(u & 0x8000, -1.0, 1.0).astype(np.float32)
    jitter = 0.75 + 0.5 * (u & 0x7FFF).astype(np.float32) / 32768.0
    d = (sign * base * jitter).astype(np.float16)
    raw[:, d_off:d_off + 2] = d.view(np.uint8).reshape(-1, 2)
    if m_off is not None:
        m = (d.astype(np.float32) * m_ratio).astype(np.float16)
        raw[:, m_off:m_off + 2] = m.view(np.uint8).reshape(-1, 2)


def calibrate(qtype, seed):
    """Root-mean-square value of qtype's random blocks at base scale 1."""
    bs, ts = gguf.GGML_QUANT_SIZES[QT[qtype]]
    rng = np.random.Generator(np.random.SFC64(seed))
    raw = random_u8(rng, 4096 * ts).reshape(4096, ts)
    set_scales(raw, qtype, 1.0)
    vals = gguf.quants.dequantize(raw, QT[qtype]).astype(np.float64)
    return float(np.sqrt(np.mean(vals * vals)))


def write_blocks(f, t, rng, rms_at_1):
    """Streams tensor t's random blocks to f."""
    bs, ts = gguf.GGML_QUANT_SIZES[QT[t.qtype]]
    n_blocks = t.n_params() // bs
    target = t.gain / np.sqrt(t.shape[-1])
    base = target / rms_at_1
    # K-quants' super-block scales sit low, as in real files (Q6_K's ~1.6e-5 at
    # 2,048 inputs: fp16 subnormals, a few hundred steps of 6e-8).
    if not (2e-6 < base * 0.75 and base * 1.25 < 6.0e4):
        raise ValueError(f"{t.name}: block scale {base:.3g} outside fp16's useful range")
    per = max(1, CHUNK_BYTES // ts)
    for start in range(0, n_blocks, per):
        n = min(per, n_blocks - start)
        raw = random_u8(rng, n * ts).reshape(n, ts)
        set_scales(raw, t.qtype, base)
        raw.tofile(f)


def write_floats(f, t, rng):
    """Streams tensor t's F32/F16 values to f."""
    n = t.n_params()
    dt = np.float32 if t.qtype == "F32" else np.float16
    per = CHUNK_BYTES // 4
    for start in range(0, n, per):
        k = min(per, n - start)
        z = rng.standard_normal(k, dtype=np.float32)
        if t.kind == "norm":
            v = 1.0 + 0.05 * z
        elif t.kind == "router":
            v = z / np.sqrt(t.shape[-1])
        else:  # an F16 matrix
            v = z * (t.gain / np.sqrt(t.shape[-1]))
        v.astype(dt).tofile(f)


# ---- the file -----------------------------------------------------------------


def active_per_token(tensors, c):
    """(params, bytes, breakdown) one decode token reads."""
    frac = c["experts_used"] / c["experts"]
    parts = {"attention": [0, 0], "norms": [0, 0], "router": [0, 0], "experts": [0, 0],
             "token_embd_row": [0, 0], "output": [0, 0]}
    for t in tensors:
        n, b = t.n_params(), t.nbytes()
        if t.name == "token_embd.weight":
            key, n, b = "token_embd_row", n // t.shape[0], b // t.shape[0]
        elif t.name in ("output.weight", "output_norm.weight"):
            key = "output"
        elif "_exps." in t.name:
            key, n, b = "experts", n * frac, b * frac
        elif t.kind == "norm":
            key = "norms"
        elif t.kind == "router":
            key = "router"
        else:
            key = "attention"
        parts[key][0] += n
        parts[key][1] += b
    params = sum(p for p, _ in parts.values())
    nbytes = sum(b for _, b in parts.values())
    return int(params), int(nbytes), {k: {"params": int(p), "bytes": int(b)}
                                       for k, (p, b) in parts.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the GGUF to write (outside the repository)")
    ap.add_argument("--layers", type=int, default=24, help="layers (Qwen3-30B-A3B has 48)")
    ap.add_argument("--type", default="Q4_0", choices=["Q4_0", "Q8_0", "Q4_K"],
                    help="the layers' matrices (attention and experts)")
    ap.add_argument("--embd-type", default=None, choices=["Q4_0", "Q8_0", "Q4_K", "F16"],
                    help="token_embd (default: --type)")
    ap.add_argument("--output-type", default="Q6_K", choices=["Q4_0", "Q8_0", "Q4_K", "Q6_K", "F16"],
                    help="output.weight (default Q6_K, as llama-quantize's Q4_0 writes it)")
    ap.add_argument("--tiny", action="store_true",
                    help="test size: dim 256, 8 experts of 256 (2 used), vocabulary 1,024")
    for k in ("experts", "experts_used", "dim", "ff_exp", "vocab"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None,
                        help=f"override {k} (default Qwen3-30B-A3B's, or --tiny's)")
    ap.add_argument("--seed", type=int, default=40)
    ap.add_argument("--json", default=None, help="also write the figures here")
    a = ap.parse_args(argv)

    c = dict(TINY if a.tiny else QWEN3_30B_A3B)
    for k in ("experts", "experts_used", "dim", "ff_exp", "vocab"):
        if getattr(a, k) is not None:
            c[k] = getattr(a, k)
    if not 1 <= c["experts_used"] <= c["experts"] or a.layers < 1:
        ap.error("need 1 <= --experts-used <= --experts and --layers >= 1")
    if c["dim"] % 256 or c["ff_exp"] % 256 and a.type == "Q4_K":
        ap.error("dim (and ff-exp for Q4_K) must be multiples of 256")

    embd = a.embd_type or a.type
    tensors = plan(c, a.layers, a.type, embd, a.output_type)
    tokens, types, merges, bos, eos = make_vocab(c["vocab"])

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(out), "qwen3moe")
    w.add_name(f"random-qwen3-30b-a3b-{a.layers}l")
    w.add_file_type(FILE_TYPE[a.type])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_context_length(c["ctx"])
    w.add_embedding_length(c["dim"])
    w.add_block_count(a.layers)
    w.add_feed_forward_length(c["ff"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_expert_count(c["experts"])
    w.add_expert_used_count(c["experts_used"])
    w.add_expert_feed_forward_length(c["ff_exp"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_pad_token_id(bos)
    w.add_add_bos_token(False)
    for t in tensors:
        raw = None if t.qtype in ("F32", "F16") else QT[t.qtype]
        dt = np.float16 if t.qtype == "F16" else np.float32
        w.add_tensor_info(t.name, t.shape, np.dtype(dt), t.nbytes(), raw_dtype=raw)

    t0 = time.time()
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    f = w.fout[0]
    rng = np.random.Generator(np.random.SFC64(a.seed))
    rms1 = {}
    for i, t in enumerate(tensors):
        w.write_padding(f, f.tell())  # the data section starts aligned: offsets match
        if t.qtype in BLOCK_SCALES:
            if t.qtype not in rms1:
                rms1[t.qtype] = calibrate(t.qtype, a.seed + 1)
            write_blocks(f, t, rng, rms1[t.qtype])
        else:
            write_floats(f, t, rng)
        if sys.stderr.isatty() and i % 12 == 0:
            print(f"\r{i + 1}/{len(tensors)} tensors, {f.tell() / 2**30:.2f} GiB", end="",
                  file=sys.stderr)
    w.close()
    if sys.stderr.isatty():
        print(file=sys.stderr)

    size = out.stat().st_size
    total_params = sum(t.n_params() for t in tensors)
    params, nbytes, parts = active_per_token(tensors, c)
    fig = {"path": str(out), "file_bytes": size, "layers": a.layers, "type": a.type,
           "embd_type": embd, "output_type": a.output_type, "seed": a.seed, "shape": c,
           "total_params": total_params, "active_params_per_token": params,
           "active_bytes_per_token": nbytes, "active_breakdown": parts,
           "write_s": round(time.time() - t0, 1)}
    print(f"wrote {out}: {size:,} bytes ({size / 2**30:.2f} GiB), {len(tensors)} tensors, "
          f"{total_params / 1e9:.3f}B parameters, {fig['write_s']} s")
    print(f"one decode token reads {params / 1e6:.1f}M parameters = {nbytes / 2**20:.1f} MiB "
          f"({nbytes:,} bytes; KV cache not counted):")
    for k, v in parts.items():
        print(f"  {k:15s} {v['params'] / 1e6:9.2f}M params {v['bytes'] / 2**20:9.2f} MiB")
    if a.json:
        Path(a.json).write_text(json.dumps(fig, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
