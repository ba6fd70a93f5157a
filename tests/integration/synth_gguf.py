"""synth_gguf.py - small random-weight GGUF models for the integration suite.

write_model(path, Spec(...)) writes a complete GGUF of any family of the
reference's architecture table (llama_ref.ARCHS: metadata, a GPT-2 byte-level
vocabulary and every tensor brisk needs for that family) with weights drawn
from a fixed-seed NumPy generator, each matrix stored in the type the spec
asks for. The file is written with the `gguf` package's GGUFWriter and its
quantizers, so the bytes are what llama.cpp's tools would write, independent
of brisk's own writer.

Weight scales are chosen so that every part of the model matters to the
logits (the point of these models is to catch a wrong RoPE, a missing bias, a
mis-read block) and the next-token distributions look like a language
model's (entropy ~2.5 nats, logits ~N(0, 3^2), argmax not just a copy of the
input token). With RMS-normalised activations of size ~1:
  attn_q, attn_k: N(0, 1.5^2 / n_in)  scores q.k/sqrt(head_dim) ~ N(0, 2^2):
                                 attention is far from uniform, RoPE counts
  attn_v, ffn_gate, ffn_up: N(0, 1 / n_in)
  attn_output, ffn_down: N(0, 1 / n_in)  layer outputs ~1, a few times the
                                 embeddings: the layers shape the logits
  token_embd, output: N(0, 0.25^2)  logits ~N(0, 3^2)
  norms: 1 + N(0, 0.1^2)         never zero, never exactly one
  q/k/v biases: N(0, 0.5^2), N(0, 0.5^2), N(0, 0.2^2)
  ffn_gate_inp (the experts' router): N(0, 1.5^2 / n_in)  router logits ~N(0,
                                 1.5^2): the top-k weights are far from equal
                                 and their sum far from 1 (renormalising shows)
  ffn_{gate,up}_exps, ffn_down_exps: as ffn_gate/up/down, per expert
(The N(0, 0.02^2) of real checkpoints gives these tiny models all-but-uniform
attention and logits that a wrong RoPE would barely move.)

Mixtures of experts follow llama.cpp's files: metadata <arch>.expert_count and
<arch>.expert_used_count (and qwen3moe.expert_feed_forward_length, the
experts' width, beside the dense feed_forward_length), a router
blk.N.ffn_gate_inp.weight (GGUF ne {n_embd, n_expert}) and the experts' matrices
stacked into 3-D tensors blk.N.ffn_{gate,up}_exps.weight (ne {n_embd, n_ff,
n_expert}) and blk.N.ffn_down_exps.weight (ne {n_ff, n_embd, n_expert}), i.e.
NumPy shapes [expert, out, in], in place of ffn_gate/up/down.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import gguf
from gguf.quants import quantize

# The families' tensors come from the reference's architecture table.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reference"))
try:
    from llama_ref import ARCHS
finally:
    sys.path.pop(0)

QT = gguf.GGMLQuantizationType

# ---- vocabulary ---------------------------------------------------------------


def gpt2_byte_chars():
    """GPT-2's byte -> printable character table (index = byte value)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
                 + list(range(ord("\xae"), ord("\xff") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return [table[b] for b in range(256)]


# Merges in rank order; every left and right part is a token by the time it
# is used, and each merge adds its result as a new token ("Ġ" is the space).
MERGES = [
    "Ġ t", "Ġ a", "Ġ i", "Ġ o", "Ġ s", "Ġ w", "Ġ c", "Ġ b", "Ġ h", "Ġ m",
    "Ġ f", "Ġ d", "Ġ l", "Ġ p", "Ġ n", "h e", "Ġt he", "Ġa n", "Ġan d", "Ġi n",
    "Ġo f", "Ġa t", "i n", "e r", "a n", "o n", "r e", "a t", "o r", "e n",
    "i s", "e d", "i t", "a r", "o u", "l l", "in g", "a s", "e s", "Ġc at",
]
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
N_VOCAB = 256 + len(MERGES) + len(CONTROL)  # 300


@dataclass
class Vocab:
    tokens: list  # str
    types: list  # gguf.TokenType ints
    merges: list  # str "a b"
    bos: int
    eos: int
    byte_of_char: dict  # byte-level char -> byte value
    quiet: np.ndarray  # bool per token: prints nothing or bytes outside printable ASCII

    def id(self, text):
        return self.tokens.index(text)

    def decode(self, ids):
        """The bytes brisk prints for ids: control tokens print nothing."""
        out = bytearray()
        for i in ids:
            if self.types[i] == gguf.TokenType.CONTROL:
                continue
            out += bytes(self.byte_of_char[c] for c in self.tokens[i])
        return bytes(out)


def make_vocab():
    chars = gpt2_byte_chars()
    tokens = list(chars)
    for m in MERGES:
        a, b = m.split(" ")
        assert a in tokens and b in tokens, m
        assert a + b not in tokens, m
        tokens.append(a + b)
    tokens += CONTROL
    types = [int(gguf.TokenType.NORMAL)] * (len(tokens) - len(CONTROL)) + \
            [int(gguf.TokenType.CONTROL)] * len(CONTROL)
    eot = tokens.index("<|endoftext|>")
    quiet = np.array([i < 256 and not 0x20 <= i < 0x7F for i in range(len(tokens))])
    quiet[len(tokens) - len(CONTROL):] = True
    return Vocab(tokens, types, list(MERGES), eot, eot, {c: b for b, c in enumerate(chars)},
                 quiet)


VOCAB = make_vocab()
assert len(VOCAB.tokens) == N_VOCAB


# ---- model --------------------------------------------------------------------


@dataclass
class Spec:
    arch: str = "llama"
    n_embd: int = 128
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 4
    n_ff: int = 256
    head_dim: int = None  # attention.key_length; default n_embd / n_head (key not written)
    n_rot: int = None  # rope.dimension_count; default head_dim
    mat_type: str = "F32"  # the seven per-layer matrices (the experts' stacks included)
    embd_type: str = None  # token_embd.weight (default: mat_type)
    output_type: str = None  # output.weight; None: tied to token_embd
    norm_type: str = "F32"  # attn_norm, ffn_norm, output_norm
    rope_base: float = 10000.0
    rope_linear: float = None  # rope.scaling.type = linear with this factor
    rope_freqs: bool = False  # add rope_freqs.weight (Llama 3.1-style divisors)
    qkv_bias: bool = None  # default: the family's (llama_ref.ARCHS; qwen2)
    n_vocab_embd: int = N_VOCAB  # rows of token_embd (== the vocabulary normally)
    drop: tuple = ()  # tensor names to leave out
    sliding_window: int = 0  # gemma3: the local layers' window (attention.sliding_window)
    swa_pattern: int = 0  # gemma: layer l local iff l % p < p - 1 (0: the file is silent)
    rope_orig_ctx: int = 0  # phi3: rope.scaling.original_context_length + LongRoPE factors
    rope_attn_factor: float = 0.0  # phi3: rope.scaling.attn_factor (0: not written)
    attn_softcap: float = 0.0  # gemma2: attn_logit_softcapping (0: not written)
    final_softcap: float = 0.0  # gemma2: final_logit_softcapping
    # Experts (0: a dense MLP; qwen3moe and olmoe need them): n_expert_used of
    # n_expert per token, each n_ff_exp wide (default n_ff; qwen3moe writes it as
    # expert_feed_forward_length), the router stored as router_type (llama.cpp
    # keeps it F32); expert_weights_norm: <arch>.expert_weights_norm (None: not written).
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = None
    router_type: str = "F32"
    expert_weights_norm: bool = None
    shapes: dict = field(default_factory=dict)  # name -> NumPy shape [rows, cols] override
    seed: int = 1234


SCALE = {"embd": 0.25, "qk": 1.5, "out": 1.0, "router": 1.5}  # see the module docstring


# Types the gguf package cannot quantize (K-quants, IQ4_*): their tensors are
# random blocks instead, every code and sub-block scale drawn uniformly, the
# block scales (fp16) at byte offset d_off drawn from U(0.5, 1.5) and then
# scaled so that the tensor's standard deviation is that of the values the
# spec asks for. A second fp16 field (the min's scale dmin, Q5_1's m) at
# m_off is m_ratio times d, which centres the values near zero.
#   type: (d_off, m_off, m_ratio)
RANDOM_BLOCKS = {
    "Q2_K": (80, 82, 1.5),
    "Q3_K": (108, None, 0),
    "Q4_K": (0, 2, 7.5),
    "Q5_K": (0, 2, 15.5),
    "Q6_K": (208, None, 0),
    "IQ4_NL": (0, None, 0),
    "IQ4_XS": (0, None, 0),
}


def random_blocks(qname, shape, std, rng):
    """uint8 [..., rows, row bytes] of type qname (shape [..., rows, cols]) whose
    values have this std."""
    qt = QT[qname]
    bs, ts = gguf.GGML_QUANT_SIZES[qt]
    *lead, cols = shape
    rows = int(np.prod(lead))
    assert cols % bs == 0, f"{qname} rows must be a multiple of {bs}, not {cols}"
    raw = rng.integers(0, 256, size=(rows * cols // bs, ts), dtype=np.uint8)
    d_off, m_off, m_ratio = RANDOM_BLOCKS[qname]
    d = rng.uniform(0.5, 1.5, len(raw)).astype(np.float32)

    def put(scale):
        raw[:, d_off:d_off + 2] = (d * scale).astype(np.float16).view(np.uint8).reshape(-1, 2)
        if m_off is not None:
            m = (d * scale * m_ratio).astype(np.float16)
            raw[:, m_off:m_off + 2] = m.view(np.uint8).reshape(-1, 2)

    put(1.0)
    got = gguf.quants.dequantize(raw, qt).std()
    put(std / got)
    return raw.reshape(*lead, cols // bs * ts)


def _store(w, name, qname, values, rng):
    """Adds float array values (NumPy shape [n], [rows, cols] or [expert, rows,
    cols]) as type qname
    (a RANDOM_BLOCKS type: random blocks of the same shape and spread)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if qname in RANDOM_BLOCKS:
        w.add_tensor(name, random_blocks(qname, values.shape, float(values.std()), rng),
                     raw_dtype=QT[qname])
    elif qname == "F32":
        w.add_tensor(name, values)
    elif qname == "F16":
        w.add_tensor(name, values.astype(np.float16))
    else:
        qt = QT[qname]
        w.add_tensor(name, quantize(values, qt), raw_dtype=qt)


def make_tensors(s):
    """name -> (float32 values, stored type name), in file order."""
    rng = np.random.default_rng(s.seed)
    hd = s.head_dim or s.n_embd // s.n_head
    n_rot = s.n_rot or hd
    q_dim, kv_dim = s.n_head * hd, s.n_head_kv * hd
    # An architecture brisk refuses (a test's) gets llama's tensors.
    fam = ARCHS.get(s.arch, ARCHS["llama"])
    bias = fam.qkv_bias if s.qkv_bias is None else s.qkv_bias
    mt = s.mat_type
    n_expert = s.n_expert
    if fam.experts and not n_expert:
        raise ValueError(f"{s.arch} needs experts (Spec.n_expert)")
    n_ff_exp = s.n_ff_exp or s.n_ff
    t = {}

    def normal(shape, std):
        return rng.standard_normal(shape) * std

    def norm_w(n):
        return 1.0 + normal(n, 0.1)

    # Tokens that print nothing or invalid UTF-8 (control characters, bytes
    # >= 0x80, control tokens) get rows a third the size, so that greedy
    # continuations are mostly printable ASCII and brisk's printed text pins
    # down the ids (an invalid byte prints as U+FFFD whichever it is).
    quiet = np.zeros(s.n_vocab_embd, dtype=bool)  # rows past VOCAB (added tokens): printable
    quiet[: min(len(VOCAB.quiet), s.n_vocab_embd)] = VOCAB.quiet[: s.n_vocab_embd]
    row_scale = np.where(quiet, 0.3, 1.0)[:, None]
    embd = normal((s.n_vocab_embd, s.n_embd), SCALE["embd"])
    t["token_embd.weight"] = (embd * row_scale, s.embd_type or mt)
    t["output_norm.weight"] = (norm_w(s.n_embd), s.norm_type)
    if s.output_type:
        out = normal((s.n_vocab_embd, s.n_embd), SCALE["embd"])
        t["output.weight"] = (out * row_scale, s.output_type)
    if s.rope_freqs:
        # One divisor >= 1 per rotated pair, as Llama 3.1 GGUFs carry (there:
        # 1 for high frequencies, up to 8 for low); random here so that the
        # high-frequency pairs, which dominate short contexts, are affected.
        t["rope_freqs.weight"] = (rng.uniform(1.0, 8.0, n_rot // 2), "F32")
    for l in range(s.n_layer):
        p = f"blk.{l}."
        t[p + "attn_norm.weight"] = (norm_w(s.n_embd), s.norm_type)
        t[p + "attn_q.weight"] = (normal((q_dim, s.n_embd), SCALE["qk"] / np.sqrt(s.n_embd)), mt)
        t[p + "attn_k.weight"] = (normal((kv_dim, s.n_embd), SCALE["qk"] / np.sqrt(s.n_embd)), mt)
        t[p + "attn_v.weight"] = (normal((kv_dim, s.n_embd), 1.0 / np.sqrt(s.n_embd)), mt)
        if bias:
            t[p + "attn_q.bias"] = (normal(q_dim, 0.5), "F32")
            t[p + "attn_k.bias"] = (normal(kv_dim, 0.5), "F32")
            t[p + "attn_v.bias"] = (normal(kv_dim, 0.2), "F32")
        if fam.qk_norm_full:  # olmoe: q/k norms over the whole projections
            t[p + "attn_q_norm.weight"] = (norm_w(q_dim), s.norm_type)
            t[p + "attn_k_norm.weight"] = (norm_w(kv_dim), s.norm_type)
        elif fam.qk_norm:  # per-head q/k norms, [head_dim] each
            t[p + "attn_q_norm.weight"] = (norm_w(hd), s.norm_type)
            t[p + "attn_k_norm.weight"] = (norm_w(hd), s.norm_type)
        t[p + "attn_output.weight"] = (normal((s.n_embd, q_dim), SCALE["out"] / np.sqrt(q_dim)), mt)
        if fam.post_norms:  # the norm of the attention block's output
            t[p + "post_attention_norm.weight"] = (norm_w(s.n_embd), s.norm_type)
        t[p + "ffn_norm.weight"] = (norm_w(s.n_embd), s.norm_type)
        if n_expert:  # the router and the experts' stacks, [expert, out, in]
            t[p + "ffn_gate_inp.weight"] = (
                normal((n_expert, s.n_embd), SCALE["router"] / np.sqrt(s.n_embd)), s.router_type)
            e_in = (n_expert, n_ff_exp, s.n_embd)
            t[p + "ffn_gate_exps.weight"] = (normal(e_in, 1.0 / np.sqrt(s.n_embd)), mt)
            t[p + "ffn_up_exps.weight"] = (normal(e_in, 1.0 / np.sqrt(s.n_embd)), mt)
            t[p + "ffn_down_exps.weight"] = (
                normal((n_expert, s.n_embd, n_ff_exp), SCALE["out"] / np.sqrt(n_ff_exp)), mt)
        else:
            t[p + "ffn_gate.weight"] = (normal((s.n_ff, s.n_embd), 1.0 / np.sqrt(s.n_embd)), mt)
            t[p + "ffn_up.weight"] = (normal((s.n_ff, s.n_embd), 1.0 / np.sqrt(s.n_embd)), mt)
            t[p + "ffn_down.weight"] = (
                normal((s.n_embd, s.n_ff), SCALE["out"] / np.sqrt(s.n_ff)), mt)
        if fam.post_norms:  # and of the MLP's
            t[p + "post_ffw_norm.weight"] = (norm_w(s.n_embd), s.norm_type)
    if fam.fused:  # fused tensors, as Phi-3's GGUFs store them
        for l in range(s.n_layer):
            p = f"blk.{l}."
            parts = [t.pop(p + n) for n in ("attn_q.weight", "attn_k.weight", "attn_v.weight")]
            t[p + "attn_qkv.weight"] = (np.concatenate([v for v, _ in parts]), parts[0][1])
            gate, up = t.pop(p + "ffn_gate.weight"), t.pop(p + "ffn_up.weight")
            t[p + "ffn_up.weight"] = (np.concatenate([gate[0], up[0]]), gate[1])
        if s.rope_orig_ctx:  # LongRoPE divisors, >= 1
            t["rope_factors_long.weight"] = (rng.uniform(1.0, 6.0, n_rot // 2), "F32")
            t["rope_factors_short.weight"] = (rng.uniform(1.0, 1.5, n_rot // 2), "F32")
    for name, shape in s.shapes.items():
        vals, qt = t[name]
        t[name] = (np.resize(vals, shape), qt)
    for name in s.drop:
        del t[name]
    return t


def write_model(path, s, vocab=VOCAB, chat_template=None, tensors=None):
    """Writes the model of spec s to path (its tensors: make_tensors(s), or
    the given name -> (values, type) dict); returns path."""
    a = s.arch
    w = gguf.GGUFWriter(str(path), a)
    w.add_name(f"synthetic-{a}")
    w.add_context_length(1024)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_layer_norm_rms_eps(1e-6 if a in ("qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3")
                             else 1e-5)
    if s.n_expert:
        w.add_expert_count(s.n_expert)
        w.add_expert_used_count(s.n_expert_used)
        if a == "qwen3moe":  # its experts' width beside the dense one (as Qwen3-30B-A3B)
            w.add_expert_feed_forward_length(s.n_ff_exp or s.n_ff)
        if s.expert_weights_norm is not None:
            w.add_expert_weights_norm(s.expert_weights_norm)
    if s.rope_orig_ctx:
        w.add_uint32(f"{a}.rope.scaling.original_context_length", s.rope_orig_ctx)
    if s.rope_attn_factor:
        w.add_float32(f"{a}.rope.scaling.attn_factor", s.rope_attn_factor)
    if s.attn_softcap:
        w.add_float32(f"{a}.attn_logit_softcapping", s.attn_softcap)
    if s.final_softcap:
        w.add_float32(f"{a}.final_logit_softcapping", s.final_softcap)
    if s.sliding_window:
        w.add_uint32(f"{a}.attention.sliding_window", s.sliding_window)
    if s.swa_pattern:
        w.add_uint32(f"{a}.attention.sliding_window_pattern", s.swa_pattern)
    w.add_rope_freq_base(s.rope_base)
    if s.head_dim:
        w.add_key_length(s.head_dim)
        w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.n_rot or s.head_dim or s.n_embd // s.n_head)
    if s.rope_linear is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(s.rope_linear)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    w.add_token_merges(vocab.merges)
    w.add_bos_token_id(vocab.bos)
    w.add_eos_token_id(vocab.eos)
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    blocks_rng = np.random.default_rng(s.seed + 7919)  # random blocks, in file order
    for name, (vals, qt) in (tensors if tensors is not None else make_tensors(s)).items():
        _store(w, name, qt, vals, blocks_rng)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
