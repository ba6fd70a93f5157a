#!/usr/bin/env python3
"""llama_ref.py - a float64 NumPy reference forward pass for GGUF Llama-family models.

This is the yardstick brisk's C kernels are measured against: it is written to
be obviously right rather than fast. Every weight is dequantized to float64
with a dequantizer written out below from the block layouts in
kernels/cpu/kern_types.h, and every step of the transformer is done in float64.

Usage:
    llama_ref.py --model M --tokens "1 2 3" --out logits.npy
        logits for every position of the token list, float64 [n_tokens, n_vocab]
    llama_ref.py --model M --tokens "1" --generate 199
        greedy continuation; prints prompt + generated ids on one line

Supported: the architectures of ARCHS below (one row per family, as brisk's
models/model_arch.c), mixtures of experts included (route(), moe_ffn());
tensor types F32, F16, BF16, Q8_0, Q4_0, Q4_1 (and, through the gguf package,
Q5_*, the K-quants and IQ4_*), the experts' stacked 3-D tensors in any of them;
RoPE with linear scaling (rope.scaling.type = linear, or the older
rope.scale_linear) and Llama 3.1-style per-pair frequency divisors
(rope_freqs.weight). The `gguf` package is used only to parse the file.
"""

import argparse
import sys
from dataclasses import dataclass

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - reported to the user
    sys.exit("llama_ref.py: the 'gguf' package is missing (pip install -r tests/requirements.txt)")

QK = 32  # values per quantized block (all three quantized types)

# GGML type ids (they are the ids stored in GGUF files).
T_F32, T_F16, T_Q4_0, T_Q4_1, T_Q8_0, T_BF16 = 0, 1, 2, 3, 8, 30


# ---- dequantization --------------------------------------------------------


def _f16(raw):
    """uint8 [..., 2k] little-endian bytes -> float64 [..., k]."""
    return raw.copy().view("<f2").astype(np.float64)


def dequantize_rows(raw, ggml_type, n_cols):
    """Raw tensor bytes (uint8, any shape) -> float64 [n_rows, n_cols].

    Quantized rows are runs of 32-value blocks:
      Q8_0: fp16 d, int8 qs[32]              x = d * q
      Q4_0: fp16 d, uint8 qs[16]             x = d * (nibble - 8)
      Q4_1: fp16 d, fp16 m, uint8 qs[16]     x = d * nibble + m
    where byte j of qs holds value j (low nibble) and value j+16 (high nibble).
    """
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    if ggml_type == T_F32:
        return raw.view("<f4").astype(np.float64).reshape(-1, n_cols)
    if ggml_type == T_F16:
        return raw.view("<f2").astype(np.float64).reshape(-1, n_cols)
    if ggml_type == T_BF16:
        bits = raw.view("<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64).reshape(-1, n_cols)

    block_bytes = {T_Q8_0: 34, T_Q4_0: 18, T_Q4_1: 20}.get(ggml_type)
    if block_bytes is None:
        # Q5_*, the K-quants, IQ4_*: the gguf package's NumPy dequantizers,
        # an implementation independent of brisk's (kern_kquant.c).
        import gguf
        from gguf.quants import dequantize
        qt = gguf.GGMLQuantizationType(ggml_type)
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        if n_cols % bs:
            raise ValueError(f"row length {n_cols} is not a multiple of {bs}")
        rows = raw.reshape(-1, n_cols // bs * ts)
        return dequantize(rows, qt).astype(np.float64).reshape(-1, n_cols)
    if n_cols % QK:
        raise ValueError(f"row length {n_cols} is not a multiple of {QK}")
    blocks = raw.reshape(-1, block_bytes)
    d = _f16(blocks[:, 0:2])  # [n_blocks, 1]
    if ggml_type == T_Q8_0:
        q = blocks[:, 2:34].copy().view(np.int8).astype(np.float64)
        x = d * q
    else:
        qs = blocks[:, block_bytes - 16 :]
        lo = (qs & 0x0F).astype(np.float64)
        hi = (qs >> 4).astype(np.float64)
        q = np.concatenate([lo, hi], axis=1)  # values 0..15 then 16..31
        if ggml_type == T_Q4_0:
            x = d * (q - 8.0)
        else:
            m = _f16(blocks[:, 2:4])
            x = d * q + m
    return x.reshape(-1, n_cols)


# ---- architectures -----------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """What a family's blocks do, and the tensors its files hold beyond llama's.
    The same columns as brisk's architecture table (models/model_arch.h);
    synth_gguf.py writes files by it."""

    neox: bool = True  # RoPE pairs (i, i + rot/2); False: adjacent (2i, 2i+1), llama's
    qkv_bias: bool = False  # attn_q/k/v.bias
    qk_norm: bool = False  # attn_q_norm/attn_k_norm: RMSNorm of each q and k head
    post_norms: bool = False  # post_attention_norm/post_ffw_norm before each residual add
    fused: bool = False  # attn_qkv, and gate and up in one ffn_up (Phi-3's files)
    gelu: bool = False  # GELU (tanh form) instead of SiLU in the gated MLP
    embd_scale: bool = False  # embeddings times sqrt(n_embd)
    eps: float = 1e-5  # RMSNorm epsilon where the file has none
    # Local/global layers: layer l local iff l % swa_pattern < swa_pattern - 1,
    # on RoPE base rope_base_swa (0: the global one), both unless the file says;
    # 0: a window covers every layer (Mistral) and those keys are not read.
    swa_pattern: int = 0
    rope_base_swa: float = 0.0
    swa_unscaled: bool = False  # local layers not linearly scaled (Gemma 3)
    softcaps: bool = False  # attention-score and final-logit soft-capping from the file
    # q_norm/k_norm over the whole q and k projections ([n_head * head_dim] and
    # [n_head_kv * head_dim] weights, before the split into heads: OLMoE) instead of
    # each head (qk_norm alone: Qwen3, Gemma 3).
    qk_norm_full: bool = False
    # Mixture of experts: every layer's MLP is one (expert_count required); a
    # family without the column has one where the file states expert_count > 0
    # (a llama file: Mixtral). The router's softmax over all experts, top-k,
    # and the chosen k weights renormalised to sum 1 (Mixtral, Qwen3-MoE's
    # norm_topk_prob) or not (OLMoE), unless the file states
    # <arch>.expert_weights_norm.
    experts: bool = False
    norm_topk: bool = True


ARCHS = {
    # llama GGUFs store q/k permuted so that RoPE pairs are adjacent; the others
    # keep the HF layout.
    "llama": Family(neox=False),
    "qwen2": Family(qkv_bias=True),
    "qwen3": Family(qk_norm=True),
    "gemma2": Family(post_norms=True, gelu=True, embd_scale=True, eps=1e-6, swa_pattern=2,
                     softcaps=True),
    "gemma3": Family(qk_norm=True, post_norms=True, gelu=True, embd_scale=True, eps=1e-6,
                     swa_pattern=6, rope_base_swa=10000.0, swa_unscaled=True, softcaps=True),
    "phi3": Family(fused=True),
    "gemma": Family(gelu=True, embd_scale=True, eps=1e-6),
    "qwen3moe": Family(qk_norm=True, eps=1e-6, experts=True),
    "olmoe": Family(qk_norm=True, qk_norm_full=True, experts=True, norm_topk=False),
}


# ---- model -----------------------------------------------------------------


class Model:
    """Hyperparameters from the GGUF metadata and lazily dequantized weights.

    Weights are float64 [out, in] matrices: GGUF's ne[0] is the input dim (the
    row length), ne[1] the number of rows, so W @ x maps in -> out.
    """

    def __init__(self, path):
        self.reader = gguf.GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        arch = self._meta("general.architecture")
        if arch not in ARCHS:
            raise ValueError(f"unsupported architecture {arch!r} (want {', '.join(ARCHS)})")
        self.arch = arch
        f = self.family = ARCHS[arch]
        self.gelu = f.gelu  # a test may switch it off (the feature must show)
        self.n_embd = int(self._meta(f"{arch}.embedding_length"))
        self.n_layer = int(self._meta(f"{arch}.block_count"))
        self.n_head = int(self._meta(f"{arch}.attention.head_count"))
        self.n_head_kv = int(self._meta(f"{arch}.attention.head_count_kv", self.n_head))
        self.head_dim = int(self._meta(f"{arch}.attention.key_length", self.n_embd // self.n_head))
        self.eps = float(self._meta(f"{arch}.attention.layer_norm_rms_epsilon", f.eps))
        self.rope_base = float(self._meta(f"{arch}.rope.freq_base", 10000.0))
        # Sliding windows (the family's published defaults where the file is
        # silent): Gemma 3 every sixth layer global, the others local with RoPE
        # base 10,000; Gemma 2 every other layer (local first), one base; a
        # family without a pattern (a llama file with a window: Mistral): every
        # layer. Layer l is local iff l % pattern < pattern - 1 (pattern 0: all).
        self.n_swa = int(self._meta(f"{arch}.attention.sliding_window", 0))
        self.swa_pattern, self.rope_base_swa = 0, self.rope_base
        if f.swa_pattern:
            self.swa_pattern = int(self._meta(f"{arch}.attention.sliding_window_pattern",
                                              f.swa_pattern))
            self.rope_base_swa = float(self._meta(f"{arch}.rope.local.freq_base",
                                                  f.rope_base_swa or self.rope_base))
        # Gemma 2's soft-capping of the attention scores and of the logits.
        self.attn_softcap = self.final_softcap = 0.0
        if f.softcaps:
            self.attn_softcap = float(self._meta(f"{arch}.attn_logit_softcapping", 0.0))
            self.final_softcap = float(self._meta(f"{arch}.final_logit_softcapping", 0.0))
        self.rope_dim = int(self._meta(f"{arch}.rope.dimension_count", self.head_dim))
        self.rope_scale = 1.0
        if self._meta(f"{arch}.rope.scaling.type", "none") == "linear":
            self.rope_scale = float(self._meta(f"{arch}.rope.scaling.factor", 1.0))
        # Older files state linear scaling as rope.scale_linear (it wins, as in brisk).
        scale_linear = float(self._meta(f"{arch}.rope.scale_linear", 0.0))
        if scale_linear > 0.0:
            self.rope_scale = scale_linear
        self.rope_neox = f.neox
        # Experts (0: a dense MLP). n_expert_used and norm_topk may be changed
        # by a test (the routing rule must show in the logits).
        self.n_expert = int(self._meta(f"{arch}.expert_count", 0))
        self.n_expert_used = int(self._meta(f"{arch}.expert_used_count", 0))
        if f.experts and self.n_expert == 0:
            raise ValueError(f"{arch} needs {arch}.expert_count > 0")
        if self.n_expert and not 0 < self.n_expert_used <= self.n_expert:
            raise ValueError(f"expert_used_count {self.n_expert_used} is not in "
                             f"[1, expert_count {self.n_expert}]")
        # The family's renormalisation rule unless the file states its own.
        self.norm_topk = bool(self._meta(f"{arch}.expert_weights_norm", f.norm_topk))
        # A list to which forward() appends one (layer, router logits [T, E],
        # chosen experts [T, k], their weights [T, k]) per MoE layer; None: none.
        self.routing = None
        self.n_vocab = int(self.tensors["token_embd.weight"].shape[1])
        self._cache = {}
        # Llama 3.1-style frequency factors: one divisor per rotated pair,
        # theta_i = pos * base^(-2i/rot) / rope_freqs[i].
        self.rope_freqs = None
        if self.has("rope_freqs.weight"):
            self.rope_freqs = self.weight("rope_freqs.weight").reshape(-1)
            if self.rope_freqs.shape != (self.rope_dim // 2,):
                raise ValueError(f"rope_freqs.weight has {self.rope_freqs.size} values, "
                                 f"want rope_dim/2 = {self.rope_dim // 2}")
        # Phi-3 LongRoPE: long factors where the context (here: the trained
        # one, context_length) exceeds the original, else short; the rotated
        # dims scaled by rope.scaling.attn_factor.
        self.rope_orig_ctx = int(self._meta(f"{arch}.rope.scaling.original_context_length", 0))
        self.rope_attn_factor = float(self._meta(f"{arch}.rope.scaling.attn_factor", 1.0))
        n_ctx = int(self._meta(f"{arch}.context_length", 2048))
        if self.rope_freqs is None:
            which = "long" if n_ctx > self.rope_orig_ctx else "short"
            if self.has(f"rope_factors_{which}.weight"):
                self.rope_freqs = self.weight(f"rope_factors_{which}.weight").reshape(-1)

    def _meta(self, key, default=None):
        field = self.reader.fields.get(key)
        if field is None:
            if default is None:
                raise KeyError(f"metadata key {key} missing")
            return default
        if hasattr(field, "contents"):
            return field.contents()
        part = field.parts[field.data[0]]
        if field.types and field.types[0] == gguf.GGUFValueType.STRING:
            return bytes(part).decode("utf-8")
        return part[0]

    def has(self, name):
        return name in self.tensors

    def route(self, logits):
        """The chosen experts of router logits [T, E] (module-level route(); a
        test may replace it on an instance to try another rule)."""
        return route(self, logits)

    def weight(self, name, keep=False):
        """float64 array of the tensor: [ne1, ne0] for matrices, [ne0] for vectors,
        [ne2, ne1, ne0] for the stacked experts' matrices ([expert, out, in])."""
        if name in self._cache:
            return self._cache[name]
        t = self.tensors[name]
        ne = [int(n) for n in t.shape]  # ne[0] first, as in the file
        w = dequantize_rows(t.data, int(t.tensor_type), ne[0])
        w = w.reshape(ne[::-1]) if len(ne) != 2 else w.reshape(-1, ne[0])
        if keep:
            self._cache[name] = w
        return w


# ---- forward pass ----------------------------------------------------------


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(g):
    return g / (1.0 + np.exp(-g))


def route(m, logits):
    """The experts each token uses: indices [T, k] (k = m.n_expert_used) of the k
    largest router logits [T, E], largest first; equal logits go lower index
    first (a stable sort), so ties have one answer. The softmax is monotonic:
    these are the k most probable experts."""
    order = np.argsort(-logits, axis=1, kind="stable")
    return order[:, : m.n_expert_used]


def moe_ffn(m, p, h, layer=None):
    """The mixture-of-experts MLP of layer prefix p on h [T, n_embd]: router
    logits h @ ffn_gate_inp^T [T, E], softmax over all E experts, the top k
    (m.route), their probabilities renormalised to sum 1 where m.norm_topk;
    each chosen expert's SiLU(gate) * up -> down, summed with those weights."""
    logits = h @ m.weight(p + "ffn_gate_inp.weight").T  # [T, E]
    if logits.shape[1] != m.n_expert:
        raise ValueError(f"{p}ffn_gate_inp has {logits.shape[1]} rows, want {m.n_expert}")
    z = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    idx = m.route(logits)  # [T, k]
    w = np.take_along_axis(probs, idx, axis=1)
    if m.norm_topk:
        w = w / w.sum(axis=1, keepdims=True)
    if m.routing is not None:
        m.routing.append((layer, logits, idx, w))
    # The stacks are kept dequantized (greedy() reads them again every step).
    gate = m.weight(p + "ffn_gate_exps.weight", keep=True)  # [E, n_ff, n_embd]
    up = m.weight(p + "ffn_up_exps.weight", keep=True)  # [E, n_ff, n_embd]
    down = m.weight(p + "ffn_down_exps.weight", keep=True)  # [E, n_embd, n_ff]
    out = np.zeros_like(h)
    for e in range(m.n_expert):
        tok, slot = np.nonzero(idx == e)  # the tokens that chose expert e
        if len(tok) == 0:
            continue
        x = h[tok]
        y = (silu(x @ gate[e].T) * (x @ up[e].T)) @ down[e].T
        out[tok] += w[tok, slot][:, None] * y
    return out


def rope(x, pos, m, base=None, scale=None):
    """Rotate x [T, n_heads, head_dim] in place-free fashion for positions pos [T]."""
    rot = m.rope_dim
    i = np.arange(rot // 2, dtype=np.float64)
    base = m.rope_base if base is None else base
    inv_freq = base ** (-2.0 * i / rot)  # theta_i = pos * base^(-2i/rot)
    if m.rope_freqs is not None:
        inv_freq = inv_freq / m.rope_freqs  # per-pair divisors (rope_freqs.weight)
    scale = m.rope_scale if scale is None else scale
    ang = (pos.astype(np.float64) / scale)[:, None] * inv_freq[None, :]  # [T, rot/2]
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    out = x.copy()
    cos, sin = cos * m.rope_attn_factor, sin * m.rope_attn_factor
    if m.rope_neox:
        a, b = x[..., : rot // 2], x[..., rot // 2 : rot]
        out[..., : rot // 2] = a * cos - b * sin
        out[..., rot // 2 : rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:rot:2], x[..., 1:rot:2]
        out[..., 0:rot:2] = a * cos - b * sin
        out[..., 1:rot:2] = a * sin + b * cos
    return out


class KVCache:
    def __init__(self, n_layer):
        self.k = [None] * n_layer  # each [T_past, n_head_kv, head_dim]
        self.v = [None] * n_layer
        self.n_past = 0


def forward(m, tokens, cache=None, hidden=False):
    """Logits float64 [len(tokens), n_vocab] for tokens placed after the cache; with
    hidden, the final hidden states after output_norm [len(tokens), n_embd] instead (what
    an embedding pools)."""
    cache = cache or KVCache(m.n_layer)
    tokens = np.asarray(tokens, dtype=np.int64)
    T = len(tokens)
    p0 = cache.n_past
    pos = np.arange(p0, p0 + T)
    hd, nh, nkv = m.head_dim, m.n_head, m.n_head_kv
    group = nh // nkv

    # token embeddings: rows of token_embd [n_vocab, n_embd]
    emb = m.weight("token_embd.weight", keep=True)
    x = emb[tokens].copy()  # [T, n_embd]
    if m.family.embd_scale:
        x = x * np.sqrt(m.n_embd)

    for l in range(m.n_layer):
        p = f"blk.{l}."
        # attention: RMSNorm -> q, k, v (+ biases for qwen2) -> RoPE
        h = rms_norm(x, m.weight(p + "attn_norm.weight"), m.eps)
        if m.has(p + "attn_qkv.weight"):  # phi3: one fused matrix, q then k then v
            qkv = h @ m.weight(p + "attn_qkv.weight").T
            q, k, v = np.split(qkv, [nh * hd, nh * hd + nkv * hd], axis=1)
        else:
            q = h @ m.weight(p + "attn_q.weight").T
            k = h @ m.weight(p + "attn_k.weight").T
            v = h @ m.weight(p + "attn_v.weight").T
        for name, t in (("attn_q.bias", "q"), ("attn_k.bias", "k"), ("attn_v.bias", "v")):
            if m.has(p + name):
                b = m.weight(p + name)
                if t == "q":
                    q = q + b
                elif t == "k":
                    k = k + b
                else:
                    v = v + b
        qk_norm = m.has(p + "attn_q_norm.weight")
        if qk_norm and m.family.qk_norm_full:  # olmoe: RMSNorm of the whole q and k
            q = rms_norm(q, m.weight(p + "attn_q_norm.weight"), m.eps)
            k = rms_norm(k, m.weight(p + "attn_k_norm.weight"), m.eps)
        q = q.reshape(T, nh, hd)
        k = k.reshape(T, nkv, hd)
        if qk_norm and not m.family.qk_norm_full:  # qwen3: RMSNorm of every q and k head
            q = rms_norm(q, m.weight(p + "attn_q_norm.weight"), m.eps)
            k = rms_norm(k, m.weight(p + "attn_k_norm.weight"), m.eps)
        local = m.n_swa > 0 and (m.swa_pattern == 0 or l % m.swa_pattern < m.swa_pattern - 1)
        base = m.rope_base_swa if local else m.rope_base
        # Gemma 3's local layers are not linearly scaled (llama.cpp's
        # rope_freq_scale_train_swa = 1); its global layers and every other
        # family's layers take the file's factor.
        scale = 1.0 if local and m.family.swa_unscaled else m.rope_scale
        q = rope(q, pos, m, base, scale)
        k = rope(k, pos, m, base, scale)
        v = v.reshape(T, nkv, hd)
        cache.k[l] = k if cache.k[l] is None else np.concatenate([cache.k[l], k])
        cache.v[l] = v if cache.v[l] is None else np.concatenate([cache.v[l], v])
        K, V = cache.k[l], cache.v[l]  # [S, nkv, hd], S = p0 + T

        # causal grouped-query attention: query head h reads KV head h // group
        Kq = np.repeat(K, group, axis=1)  # [S, nh, hd]
        Vq = np.repeat(V, group, axis=1)
        scores = np.einsum("thd,shd->hts", q, Kq) / np.sqrt(hd)  # [nh, T, S]
        if m.attn_softcap > 0:
            scores = m.attn_softcap * np.tanh(scores / m.attn_softcap)
        S = K.shape[0]
        mask = np.arange(S)[None, :] > pos[:, None]  # key after query -> hidden
        if local:  # and keys that fell out of the window
            mask |= np.arange(S)[None, :] <= pos[:, None] - m.n_swa
        scores = np.where(mask[None], -np.inf, scores)
        scores -= scores.max(axis=-1, keepdims=True)
        w = np.exp(scores)
        w /= w.sum(axis=-1, keepdims=True)
        att = np.einsum("hts,shd->thd", w, Vq).reshape(T, nh * hd)
        o = att @ m.weight(p + "attn_output.weight").T
        if m.family.post_norms:
            o = rms_norm(o, m.weight(p + "post_attention_norm.weight"), m.eps)
        x = x + o

        # feed-forward: RMSNorm -> SiLU(gate) * up -> down, or the experts'
        h = rms_norm(x, m.weight(p + "ffn_norm.weight"), m.eps)
        if m.n_expert:
            o = moe_ffn(m, p, h, l)
        else:
            if m.has(p + "ffn_gate.weight"):
                g = h @ m.weight(p + "ffn_gate.weight").T
                u = h @ m.weight(p + "ffn_up.weight").T
            else:  # phi3: gate and up fused, gate first
                g, u = np.split(h @ m.weight(p + "ffn_up.weight").T, 2, axis=1)
            if m.gelu:  # GELU, tanh form
                a = 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3)))
            else:  # SiLU
                a = silu(g)
            o = (a * u) @ m.weight(p + "ffn_down.weight").T
        if m.family.post_norms:
            o = rms_norm(o, m.weight(p + "post_ffw_norm.weight"), m.eps)
        x = x + o

    cache.n_past += T
    x = rms_norm(x, m.weight("output_norm.weight"), m.eps)
    if hidden:
        return x
    out_name = "output.weight" if m.has("output.weight") else "token_embd.weight"
    logits = x @ m.weight(out_name, keep=True).T
    if m.final_softcap > 0:
        logits = m.final_softcap * np.tanh(logits / m.final_softcap)
    return logits


def greedy(m, prompt, n_new):
    """Prompt ids + n_new greedily chosen ids (one batched prompt pass, then one at a time)."""
    cache = KVCache(m.n_layer)
    ids = list(prompt)
    logits = forward(m, ids, cache)
    for _ in range(n_new):
        nxt = int(np.argmax(logits[-1]))
        ids.append(nxt)
        logits = forward(m, [nxt], cache)
    return ids


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--tokens", required=True, help='space-separated token ids, e.g. "1 2 3"')
    ap.add_argument("--out", help="write float64 logits [n_tokens, n_vocab] to this .npy file")
    ap.add_argument("--generate", type=int, default=0, metavar="N",
                    help="greedy-generate N tokens after the prompt and print all ids")
    args = ap.parse_args(argv)

    tokens = [int(t) for t in args.tokens.split()]
    if not tokens:
        ap.error("--tokens is empty")
    m = Model(args.model)
    bad = [t for t in tokens if not 0 <= t < m.n_vocab]
    if bad:
        ap.error(f"token ids out of range [0, {m.n_vocab}): {bad[:5]}")
    if args.out:
        np.save(args.out, forward(m, tokens))
    if args.generate:
        print(" ".join(str(t) for t in greedy(m, tokens, args.generate)))
    if not args.out and not args.generate:
        ap.error("nothing to do: give --out and/or --generate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
