"""synth_hf.py - small random-weight Hugging Face folders, and the GGUF the
llama.cpp converter would make of each, for test_hf_folder.py.

write_folder(dir, spec, dtype) takes the tensors synth_gguf.make_tensors(spec)
draws (GGUF names and conventions), undoes what llama.cpp's
convert_hf_to_gguf.py does on the way to GGUF, and writes a folder as
transformers' save_pretrained lays it out: config.json, model.safetensors
(written with the `safetensors` package, numpy only: F32, or BF16 rounded to
nearest-even), tokenizer.json built with the `tokenizers` package from the
same 300-token vocabulary, tokenizer_config.json and generation_config.json.
It returns the GGUF-convention tensors of the values the folder holds, so
that write_model(..., tensors=...) gives the reference file of the same
numbers:
  - llama: the converter permutes q/k rows so RoPE rotates adjacent pairs;
    the folder holds them in rotate-half order (rows of head h: first halves
    of the pairs, then second halves);
  - Gemma: the folder stores norm weights w where the GGUF holds w + 1;
  - tied output: no lm_head.weight, tie_word_embeddings true;
  - mixtures of experts (qwen3moe, olmoe, llama with experts = Mixtral): the
    GGUF's router blk.N.ffn_gate_inp and stacks ffn_{gate,up,down}_exps
    ([expert, out, in]) are the folder's mlp.gate and its experts one by one
    (moe_layout "per-expert", transformers 5's default save:
    mlp.experts.E.{gate,up,down}_proj, Mixtral's
    block_sparse_moe.experts.E.{w1,w3,w2} beside block_sparse_moe.gate) or
    transformers 5's fused tensors ("fused": mlp.experts.gate_up_proj
    [expert, 2 * width, dim], gate rows first, and mlp.experts.down_proj);
    config.json names the expert count (num_experts; num_local_experts for
    Mixtral), num_experts_per_tok, the experts' width (Qwen3-MoE's
    moe_intermediate_size beside the dense intermediate_size) and
    norm_topk_prob.
"""

import json

import numpy as np
from safetensors import TensorSpec, serialize

from synth_gguf import CONTROL, VOCAB

HF_ARCH = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
           "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM",
           "gemma3": "Gemma3ForCausalLM", "phi3": "Phi3ForCausalLM",
           "qwen3moe": "Qwen3MoeForCausalLM", "olmoe": "OlmoeForCausalLM"}
EXPERT_KINDS = {"ffn_gate_exps.weight": ("gate_proj", "w1"),
                "ffn_up_exps.weight": ("up_proj", "w3"),
                "ffn_down_exps.weight": ("down_proj", "w2")}
GEMMA = ("gemma", "gemma2", "gemma3")

LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}


def is_mixtral(spec):
    return spec.arch == "llama" and spec.n_expert > 0


def hf_name(arch, name, mixtral_names=False):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    _, l, rest = name.split(".", 2)
    if rest == "ffn_norm.weight":
        rest = ("pre_feedforward_layernorm.weight" if arch in ("gemma2", "gemma3")
                else "post_attention_layernorm.weight")
    elif rest == "ffn_gate_inp.weight":
        rest = "block_sparse_moe.gate.weight" if mixtral_names else "mlp.gate.weight"
    elif rest == "ffn_up.weight":
        rest = "mlp.gate_up_proj.weight" if arch == "phi3" else "mlp.up_proj.weight"
    else:
        rest = LAYER_NAMES[rest]
    return f"model.layers.{l}.{rest}"


def to_rotate_half(w, n_head):
    """GGUF (adjacent pairs) rows -> the folder's rotate-half rows."""
    rows, cols = w.shape
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def to_adjacent(w, n_head):
    rows, cols = w.shape
    hd = rows // n_head
    return w.reshape(n_head, 2, hd // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def bf16_bits(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, dtype):
    """tensors: name -> float32 array; dtype "F32", "BF16" or "F16". Returns
    the float32 values written (rounded to nearest-even for BF16 and F16)."""
    specs, keep, written = {}, [], {}
    for name, v in tensors.items():
        v = np.ascontiguousarray(v, dtype=np.float32)
        if dtype == "BF16":
            raw = bf16_bits(v)
            written[name] = from_bf16_bits(raw).reshape(v.shape)
        elif dtype == "F16":
            raw = v.astype(np.float16)
            written[name] = raw.astype(np.float32)
        else:
            raw = v
            written[name] = v
        keep.append(raw)
        st_dtype = {"BF16": "bfloat16", "F16": "float16"}.get(dtype, "float32")
        specs[name] = TensorSpec(dtype=st_dtype,
                                 shape=list(v.shape), data_ptr=raw.ctypes.data,
                                 data_len=raw.nbytes)
    data = serialize(specs, {"format": "pt"})
    del keep
    with open(path, "wb") as f:
        f.write(data)
    return written


def write_tokenizer(folder, merges_as_strings=False):
    """tokenizer.json of the synthetic GPT-2 byte-level vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(VOCAB.tokens)}
    merges = [tuple(m.split(" ")) for m in VOCAB.merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(c, special=True, normalized=False) for c in CONTROL])
    path = folder / "tokenizer.json"
    tok.save(str(path))
    if merges_as_strings:
        j = json.loads(path.read_text())
        j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                for m in j["model"]["merges"]]
        path.write_text(json.dumps(j, ensure_ascii=False))
    return path


def config_for(spec, hf_arch=None):
    a = spec.arch
    hd = spec.head_dim or spec.n_embd // spec.n_head
    cfg = {
        "architectures": [hf_arch or HF_ARCH[a]],
        "model_type": a,
        "hidden_size": spec.n_embd,
        "num_hidden_layers": spec.n_layer,
        "intermediate_size": spec.n_ff,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6 if a in ("qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3") else 1e-5,
        "rope_theta": spec.rope_base,
        "tie_word_embeddings": spec.output_type is None,
        "torch_dtype": "float32",
        "bos_token_id": VOCAB.bos,
        "eos_token_id": VOCAB.eos,
    }
    if spec.head_dim:
        cfg["head_dim"] = spec.head_dim
    if a in GEMMA:
        cfg["hidden_activation"] = "gelu_pytorch_tanh"
        cfg["query_pre_attn_scalar"] = hd
    else:
        cfg["hidden_act"] = "silu"
    if spec.sliding_window:
        cfg["sliding_window"] = spec.sliding_window
    if spec.swa_pattern:
        cfg["sliding_window_pattern"] = spec.swa_pattern
    if a == "gemma3":
        cfg["rope_local_base_freq"] = 10000.0
    if spec.attn_softcap:
        cfg["attn_logit_softcapping"] = spec.attn_softcap
    if spec.final_softcap:
        cfg["final_logit_softcapping"] = spec.final_softcap
    if spec.rope_linear:
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": spec.rope_linear}
    if spec.n_expert:
        width = spec.n_ff_exp or spec.n_ff
        cfg["num_local_experts" if is_mixtral(spec) else "num_experts"] = spec.n_expert
        cfg["num_experts_per_tok"] = spec.n_expert_used
        if a == "qwen3moe":  # the experts' width beside the dense one, every layer sparse
            cfg.update(moe_intermediate_size=width, decoder_sparse_step=1, mlp_only_layers=[],
                       norm_topk_prob=spec.expert_weights_norm is not False)
        else:
            cfg["intermediate_size"] = width
        if a == "olmoe":
            cfg["norm_topk_prob"] = bool(spec.expert_weights_norm)
    if spec.rope_orig_ctx:  # Phi-3 LongRoPE: the factor lists are filled in by write_folder
        cfg["original_max_position_embeddings"] = spec.rope_orig_ctx
        cfg["rope_scaling"] = {"type": "longrope", "long_factor": [], "short_factor": []}
    return cfg


def expert_names(spec, name, layout):
    """The folder's tensors of the GGUF stack `name` (blk.L.ffn_*_exps.weight):
    per-expert names, or the fused tensor's name."""
    _, l, rest = name.split(".", 2)
    if layout == "fused":
        fused = "down_proj" if "down" in rest else "gate_up_proj"
        return f"model.layers.{l}.mlp.experts.{fused}"
    mixtral = is_mixtral(spec)
    kind = EXPERT_KINDS[rest][1 if mixtral else 0]
    part = "block_sparse_moe" if mixtral else "mlp"
    return [f"model.layers.{l}.{part}.experts.{e}.{kind}.weight" for e in range(spec.n_expert)]


def write_folder(folder, spec, gguf_tensors, dtype="F32", hf_arch=None, chat_template=None,
                 generation=None, merges_as_strings=False, moe_layout="per-expert"):
    """Writes the folder; returns the GGUF-convention tensors of its values
    (name -> (float32 values, "F32"))."""
    folder.mkdir(parents=True, exist_ok=True)
    a = spec.arch
    hf, factors = {}, {}
    mixtral_names = is_mixtral(spec) and moe_layout == "per-expert"
    for name, (vals, _) in gguf_tensors.items():
        v = np.asarray(vals, dtype=np.float32)
        if name.startswith("rope_factors_"):  # LongRoPE: config.json's lists, not tensors
            factors[name] = v
            continue
        if name.endswith("_exps.weight"):
            names = expert_names(spec, name, moe_layout)
            if moe_layout == "fused" and "down" not in name:  # gate rows, then up rows
                g = gguf_tensors[name.replace("_up_", "_gate_")][0]
                u = gguf_tensors[name.replace("_gate_", "_up_")][0]
                hf[names] = np.concatenate([np.asarray(g, np.float32),
                                            np.asarray(u, np.float32)], axis=1)
            elif moe_layout == "fused":
                hf[names] = v
            else:
                for e, n in enumerate(names):
                    hf[n] = v[e]
            continue
        if a == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            v = to_rotate_half(v, spec.n_head if "attn_q" in name else spec.n_head_kv)
        if a in GEMMA and name.endswith("norm.weight"):
            v = (v - np.float32(1)).astype(np.float32)
        hf[hf_name(a, name, mixtral_names)] = v
    written = write_safetensors(folder / "model.safetensors", hf, dtype)
    cfg = config_for(spec, hf_arch)
    if factors:
        rs = cfg["rope_scaling"]
        rs["long_factor"] = [float(x) for x in factors["rope_factors_long.weight"]]
        rs["short_factor"] = [float(x) for x in factors["rope_factors_short.weight"]]
        if spec.rope_attn_factor:
            rs["attention_factor"] = float(spec.rope_attn_factor)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    write_tokenizer(folder, merges_as_strings)
    tc = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": False,
          "model_max_length": 1024}
    if chat_template:
        tc["chat_template"] = chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))
    if generation is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation, indent=2))
    # Back to GGUF conventions from the values written, as the converter does.
    out = {}
    for name in gguf_tensors:
        if name in factors:
            out[name] = (factors[name], "F32")
            continue
        if name.endswith("_exps.weight"):
            names = expert_names(spec, name, moe_layout)
            if moe_layout == "per-expert":
                v = np.stack([written[n] for n in names])
            elif "down" in name:
                v = written[names]
            else:
                w = written[names]
                h = w.shape[1] // 2
                v = w[:, :h] if "_gate_" in name else w[:, h:]
            out[name] = (np.ascontiguousarray(v), "F32")
            continue
        v = written[hf_name(a, name, mixtral_names)]
        if a == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            v = to_adjacent(v, spec.n_head if "attn_q" in name else spec.n_head_kv)
        if a in GEMMA and name.endswith("norm.weight"):
            v = (v + np.float32(1)).astype(np.float32)
        out[name] = (v, "F32")
    return out


SPM_CORPUS = ["the cat sat on the mat", "hello world, hello there",
              "a quick brown fox jumps over the lazy dog",
              "tokenizers are fun; sentencepiece too", "def main(): return 0"] * 20


def spm_tokenizer_json(style):
    """A SentencePiece-style BPE tokenizer.json (byte fallback, <unk> <s>
    </s>, the 256 <0xXX> byte tokens, merges learnt by the `tokenizers`
    trainer within words) in one of the layouts of real files:
      "llama2": normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer
      "metaspace": Metaspace pre-tokenizer, prepend_scheme "first" (Mistral)
      "gemma": normalizer Replace(" ", "▁") alone (no space prefix);
      "gemma-split": as gemma, with a Split(" ") pre-tokenizer (transformers 5)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    t.normalizer = normalizers.Replace(" ", "▁")
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    t.train_from_iterator(SPM_CORPUS, trainers.BpeTrainer(
        vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    j = json.loads(t.to_str())
    old = j["model"]["vocab"]
    specials = ["<unk>", "<s>", "</s>"]
    order = specials + [f"<0x{b:02X}>" for b in range(256)] + \
        [k for k, _ in sorted(old.items(), key=lambda kv: kv[1]) if k not in specials]
    j["model"]["vocab"] = {k: i for i, k in enumerate(order)}
    j["added_tokens"] = [dict(a, id=order.index(a["content"])) for a in j["added_tokens"]]
    j["model"]["byte_fallback"] = True
    if style == "llama2":
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        j["pre_tokenizer"] = None
    elif style == "metaspace":
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                              "split": False}
    else:
        j["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
        j["pre_tokenizer"] = None
        if style == "gemma-split":  # as transformers 5 writes Gemma's: a Split on " " that,
            # after the normalizer, finds no space
            j["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "},
                                  "behavior": "MergedWithPrevious", "invert": False}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    return json.dumps(j, ensure_ascii=False)
