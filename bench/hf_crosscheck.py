#!/usr/bin/env python3
"""hf_crosscheck.py - brisk's logits against Hugging Face `transformers` for each
model family brisk runs, an implementation independent of brisk's float64
reference (tests/reference/llama_ref.py, written by the same hands).

    bench/hf_crosscheck.py --llama-cpp DIR
                           [--families qwen3,gemma2,phi3,mistral,qwen3moe,mixtral,olmoe]
                           [--gemma3-gguf FILE] [--folders] [--brisk build/bin/brisk]

Needs torch, transformers (5.x), sentencepiece and numpy (a venv outside the
repository: `pip install torch transformers sentencepiece numpy`), and a
llama.cpp-family checkout (llama.cpp or ik_llama.cpp, brought in for this and
never committed) for its convert_hf_to_gguf.py and gguf-py.

Per family: a tiny model with random weights (no download) is built from a
config of that family, saved, converted to GGUF (F32) by llama.cpp's converter,
and both engines compute the logits of the same random token ids (transformers
with its eager attention: its SDPA path skips Gemma 2's logit soft-capping) (lengths past
the sliding windows and, for Phi-3, past the original context that switches
LongRoPE to its long factors). The converter's vocabulary step is replaced by a
plain list of placeholder tokens (the prompts are token ids; the tiny models
have no tokenizer). Two things the converter in reach does not write are added:
the Mistral file's `llama.attention.sliding_window` (llama.cpp's converter of
this vintage drops it) - one metadata key written with gguf-py. Gemma 3 has no
converter there: its check loads the real Gemma 3 270M file (--gemma3-gguf) into
transformers through its own GGUF reader (dequantised to f32) and compares with
`brisk --weights f32` on the same file.

The mixtures of experts (issue 40): Qwen3MoeForCausalLM (8 experts, top 2,
norm_topk_prob true as Qwen3-30B-A3B's config has it, which llama.cpp's graph
assumes), MixtralForCausalLM (converted as a llama file with experts) and
OlmoeForCausalLM (top 2, not renormalised; whole-width q/k norms), each also
with every expert used (-top8: 8 of 8). Their routers are drawn wider than
the other matrices (N(0, 1.5^2 / fan_in)) so that the top-k weights differ and
their renormalisation shows. transformers 5 holds the experts fused
(experts.gate_up_proj); they are saved in the checkpoint's original per-expert
layout, which llama.cpp's converter reads. Each row also gives the smallest
gap between a token's k-th and (k+1)-th router logits in transformers (a gap
of ~1e-5 or less could route a token otherwise in float32).

--folders: brisk also reads each family's folder as transformers saved it
(`--model DIR`, with a placeholder tokenizer.json: the prompts are ids), against
the same transformers forward. The mixtures of experts are read in both layouts
transformers 5 writes: its default (save_original_format: the experts one by
one, Mixtral's as block_sparse_moe.experts.E.w1/w2/w3) and its own fused form
(save_original_format=False: mlp.experts.gate_up_proj / down_proj, 3-D). A
family the converter cannot convert (OLMoE: ik_llama.cpp has no OlmoeModel)
is then checked through its folders alone.

Prints per family and length the max and mean relative L2 of the logit rows and
the top-1 agreement, and writes bench/results/<date>-<machine>-hf-crosscheck.json.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_meta  # noqa: E402

V = 512  # vocabulary of the tiny models

# The converter with its vocabulary step replaced: placeholder tokens, llama type.
CONVERT_WRAPPER = r'''
import sys
llama_dir, model_dir, out = sys.argv[1:4]
sys.path.insert(0, llama_dir + "/gguf-py")
sys.path.insert(0, llama_dir)
import gguf
import convert_hf_to_gguf as c

def set_vocab(self):
    n = self.hparams["vocab_size"]
    toks = [b"<unk>", b"<s>", b"</s>"] + [("t%d" % i).encode() for i in range(3, n)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + \
        [gguf.TokenType.NORMAL] * (n - 3)
    self.gguf_writer.add_tokenizer_model("llama")
    self.gguf_writer.add_token_list(toks)
    self.gguf_writer.add_token_scores([0.0] * n)
    self.gguf_writer.add_token_types(types)
    self.gguf_writer.add_bos_token_id(1)
    self.gguf_writer.add_eos_token_id(2)
    self.gguf_writer.add_unk_token_id(0)

base = getattr(c, "ModelBase", None) or c.Model
for obj in list(vars(c).values()):
    if isinstance(obj, type) and issubclass(obj, base):
        obj.set_vocab = set_vocab
sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", out, "--outtype", "f32"]
c.main()
'''


def family_config(name):
    """(transformers config, extra legacy keys for config.json, prompt lengths)."""
    import transformers as tf
    common = dict(vocab_size=V, hidden_size=64, intermediate_size=160, rms_norm_eps=1e-6,
                  max_position_embeddings=4096, tie_word_embeddings=False)
    if name == "qwen3":
        cfg = tf.Qwen3Config(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             head_dim=32, rope_parameters={"rope_type": "default",
                                                           "rope_theta": 1e6}, **common)
        return cfg, {"rope_theta": 1e6}, [24]
    if name == "gemma2":
        common["tie_word_embeddings"] = True
        cfg = tf.Gemma2Config(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                              attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                              hidden_activation="gelu_pytorch_tanh",
                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                              **common)
        return cfg, {"rope_theta": 10000.0}, [24]
    if name == "phi3":
        half = 8  # head_dim 16: 8 rotated pairs
        rng = np.random.default_rng(3)
        short = [float(x) for x in 1.0 + rng.random(half)]
        long = [float(x) for x in 1.0 + 8.0 * rng.random(half)]
        rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": short,
                "long_factor": long, "original_max_position_embeddings": 64}
        cfg = tf.Phi3Config(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                            original_max_position_embeddings=64, rope_parameters=rope,
                            sliding_window=2048, pad_token_id=0, **common)
        legacy = {"rope_theta": 10000.0, "original_max_position_embeddings": 64,
                  "rope_scaling": {"type": "longrope", "short_factor": short,
                                   "long_factor": long}}
        return cfg, legacy, [24, 80]
    if name == "mistral":
        cfg = tf.MistralConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=16, sliding_window=8,
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                               **common)
        # ik_llama.cpp's LlamaModel.set_gguf_parameters reads these two unconditionally.
        return cfg, {"rope_theta": 10000.0, "num_experts_per_tok": 0,
                     "prefix_dense_intermediate_size": 160}, [24]
    # Mixtures of experts: 8 experts, top 2 (or all 8 for "-top8").
    base, _, variant = name.partition("-")
    if variant not in ("", "top8"):
        raise SystemExit(f"unknown family {name}")
    top_k = 8 if variant == "top8" else 2
    if base == "qwen3moe":
        # The experts 48 wide beside a dense intermediate_size of 160 (unused:
        # every layer sparse), as the 30B-A3B's 768 beside 6144.
        cfg = tf.Qwen3MoeConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                head_dim=32, num_experts=8, num_experts_per_tok=top_k,
                                moe_intermediate_size=48, norm_topk_prob=True,
                                decoder_sparse_step=1, mlp_only_layers=[],
                                rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                                **common)
        # transformers 5 writes num_local_experts; the converter reads num_experts.
        return cfg, {"rope_theta": 1e6, "num_experts": 8}, [24]
    if base == "mixtral":
        cfg = tf.MixtralConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=16, num_local_experts=8, num_experts_per_tok=top_k,
                               sliding_window=None,
                               rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                               **common)
        # ik_llama.cpp's LlamaModel.set_gguf_parameters reads the second unconditionally.
        return cfg, {"rope_theta": 1e6, "prefix_dense_intermediate_size": 160}, [24]
    if base == "olmoe":
        # As OLMoE-1B-7B: as many KV heads as heads (llama.cpp's olmoe loader
        # takes attn_k_norm n_embd wide).
        common["rms_norm_eps"] = 1e-5
        cfg = tf.OlmoeConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                             num_experts=8, num_experts_per_tok=top_k, norm_topk_prob=False,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                             **common)
        return cfg, {"rope_theta": 10000.0, "num_experts": 8}, [24]
    raise SystemExit(f"unknown family {name}")


def is_router(name):
    """The experts' router of a MoE layer: Qwen3-MoE's and OLMoE's mlp.gate,
    Mixtral's block_sparse_moe.gate (mlp.gate in transformers 5)."""
    return name.endswith(".gate.weight")


def randomise(model, seed):
    """Weights big enough that every nonlinearity, cap and window matters:
    matrices ~ N(0, 1/fan_in), the experts' routers ~ N(0, 1.5^2/fan_in),
    embeddings ~ N(0, 1), norm weights around their neutral value (Gemma's are
    stored as w with (1 + w) applied: around 0). fan_in is the last dim: a
    Linear's [out, in] and transformers 5's fused experts' [expert, out, in]."""
    import torch
    g = torch.Generator().manual_seed(seed)
    gemma = "gemma" in type(model).__name__.lower()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p.shape[-1]
                scale = 1.0 if "embed" in n else fan_in ** -0.5
                if is_router(n):
                    scale *= 1.5
                p.copy_(torch.randn(p.shape, generator=g) * scale)
            elif "norm" in n:
                p.copy_((0.0 if gemma else 1.0) + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def base_family(name):
    return name.partition("-")[0]


def add_sliding_window(path, window, key="attention.sliding_window"):
    """Rewrites the GGUF with llama.<key> = window (u32)."""
    import gguf
    r = gguf.GGUFReader(path)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    w = gguf.GGUFWriter(path + ".tmp", arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        t = f.types[0]
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
    w.add_uint32(f"{arch}.{key}", window)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_shape=list(reversed(t.shape.tolist())),
                     raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)


def brisk_logits(brisk, path, ids, n_vocab):
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        r = subprocess.run([brisk, "generate", "--model", path, "--prompt-ids",
                            " ".join(map(str, ids)), "-n", "0", "--temp", "0", "--weights", "f32",
                            "--dump-logits", f.name], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"brisk failed on {path}: {r.stderr[-3000:]}")
        return np.fromfile(f.name, dtype="<f4").reshape(len(ids), n_vocab).astype(np.float64)


def compare(got, ref):
    rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
    top = float(np.mean(got.argmax(1) == ref.argmax(1)))
    return {"max_rel_l2": float(rel.max()), "mean_rel_l2": float(rel.mean()), "top1": top}


def hf_logits(model, ids):
    import torch
    with torch.no_grad():
        out = model(torch.tensor([ids]))
    return out.logits[0].double().numpy()


def hf_routing_margin(model, ids, top_k):
    """The smallest gap between a token's k-th and (k+1)-th router logits over
    the layers, from transformers' own router logits (None where the model
    gives none; inf where every expert is used)."""
    import torch
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_router_logits=True)
        gaps = [float("inf")]
        for lg in out.router_logits:
            lg = lg.reshape(-1, lg.shape[-1]).double().numpy()
            if top_k < lg.shape[1]:
                s = -np.sort(-lg, axis=1)
                gaps.append(float((s[:, top_k - 1] - s[:, top_k]).min()))
        return min(gaps) if len(gaps) > 1 or top_k >= cfg_experts(model) else None
    except (TypeError, AttributeError, ValueError):
        return None


def cfg_experts(model):
    c = model.config
    return getattr(c, "num_experts", None) or getattr(c, "num_local_experts", 0)


def save_fused(model, d):
    """Saves the model with transformers 5's own fused experts
    (save_original_format=False); False where this transformers has no such
    option or still writes the experts one by one."""
    import inspect
    if "save_original_format" not in inspect.signature(model.save_pretrained).parameters:
        return False
    model.save_pretrained(d, safe_serialization=True, save_original_format=False)
    from safetensors import safe_open
    with safe_open(os.path.join(d, "model.safetensors"), "np") as st:
        return any(k.endswith("experts.gate_up_proj") for k in st.keys())


def save_per_expert(model, d):
    """Saves the model as safetensors in the checkpoint's original layout (the
    experts one by one, as llama.cpp's converter reads them): transformers 5
    holds them fused and reverts that on save (save_original_format, its
    default); a version that would write them fused is refused here."""
    import inspect
    kw = {"safe_serialization": True}
    if "save_original_format" in inspect.signature(model.save_pretrained).parameters:
        kw["save_original_format"] = True
    model.save_pretrained(d, **kw)
    from safetensors import safe_open
    for f in os.listdir(d):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "np") as st:
                fused = [k for k in st.keys() if k.endswith(("experts.gate_up_proj",
                                                             "experts.down_proj"))]
            if fused:
                raise SystemExit(f"transformers saved fused experts ({fused[0]}); the converter "
                                 "reads them one by one: use a transformers that saves the "
                                 "original format")


def check_family(name, a, work, rows):
    import torch
    import transformers as tf
    cfg, legacy, lengths = family_config(name)
    torch.manual_seed(0)
    # eager: transformers' SDPA path skips Gemma 2's attention-logit soft-capping
    # (measured: 2.5e-4 apart with it, 2e-7 with eager).
    model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                                attn_implementation="eager")
    randomise(model, 1)
    model.eval()
    d = os.path.join(work, name)
    moe = getattr(cfg, "num_experts_per_tok", 0) > 0
    if moe:
        save_per_expert(model, d)
    else:
        model.save_pretrained(d, safe_serialization=True)
    cj = os.path.join(d, "config.json")
    conf = json.load(open(cj))
    conf.update(legacy)
    json.dump(conf, open(cj, "w"), indent=1)
    out = os.path.join(work, f"{name}.gguf")
    r = subprocess.run([sys.executable, "-c", CONVERT_WRAPPER, a.llama_cpp, d, out],
                       capture_output=True, text=True)
    converted = r.returncode == 0
    if not converted and not (a.folders and moe):
        raise SystemExit(f"convert {name} failed: {r.stderr[-3000:]}")
    if not converted:
        why = (r.stderr.strip().splitlines() or ["?"])[-1][:200]
        print(f"{name:8s} the converter cannot convert it ({why}): its folders alone",
              flush=True)
        rows.append({"family": name, "source": "llama.cpp converter", "skipped": why})
        lengths_gguf = []
    else:
        lengths_gguf = lengths
    if converted and name == "mistral":
        add_sliding_window(out, cfg.sliding_window)
    if converted and base_family(name) == "mixtral":  # ik_llama.cpp's LlamaModel drops
        add_sliding_window(out, cfg.num_experts_per_tok, "expert_used_count")  # expert_used_count
    rng = np.random.default_rng(7)
    for n in lengths_gguf:
        ids = [int(x) for x in rng.integers(3, V, n)]
        res = compare(brisk_logits(a.brisk, out, ids, V), hf_logits(model, ids))
        if moe:
            res["routing_margin"] = hf_routing_margin(model, ids, cfg.num_experts_per_tok)
        rows.append({"family": name, "source": "random tiny model, llama.cpp converter",
                     "tokens": n, **res})
        extra = ""
        if res.get("routing_margin") is not None:
            extra = f", routing margin {res['routing_margin']:.2e}"
        print(f"{name:8s} {n:4d} tokens: max rel L2 {res['max_rel_l2']:.2e}, mean "
              f"{res['mean_rel_l2']:.2e}, top-1 {100 * res['top1']:.1f}%{extra}", flush=True)
    if a.folders:
        check_folder(name, a, d, model, lengths, rows)
    if a.folders and moe:
        df = os.path.join(work, name + "-fused")
        if save_fused(model, df):
            conf = json.load(open(os.path.join(df, "config.json")))
            conf.update(legacy)
            json.dump(conf, open(os.path.join(df, "config.json"), "w"), indent=1)
            check_folder(name, a, df, model, lengths, rows, "fused")
        else:
            print(f"{name:8s} this transformers writes no fused experts", flush=True)


def placeholder_tokenizer(folder):
    """tokenizer.json for a tiny model's V ids (the prompts are ids): the 256
    byte-level symbols, then placeholder tokens, no merges; brisk's folder
    loader needs one, the logits do not depend on it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(alphabet)}
    for i in range(len(alphabet), V):
        vocab[f"<t{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.save(os.path.join(folder, "tokenizer.json"))


def check_folder(name, a, d, model, lengths, rows, layout=""):
    """brisk on the folder transformers saved (--model DIR: issue 39), against
    transformers' forward on the same random ids (layout: "fused" for the
    experts saved as transformers 5 holds them)."""
    placeholder_tokenizer(d)
    for f in ("config.json", "generation_config.json"):  # transformers' defaults (Phi-3's
        p = os.path.join(d, f)                          # 32000) lie outside a tiny vocabulary
        if os.path.exists(p):
            c = json.load(open(p))
            for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
                if isinstance(c.get(k), int) and c[k] >= V:
                    c[k] = 2
            json.dump(c, open(p, "w"), indent=1)
    rng = np.random.default_rng(7)
    for n in lengths:
        ids = [int(x) for x in rng.integers(3, V, n)]
        res = compare(brisk_logits(a.brisk, d, ids, V), hf_logits(model, ids))
        k = getattr(model.config, "num_experts_per_tok", 0)
        if k:
            res["routing_margin"] = hf_routing_margin(model, ids, k)
        src = "random tiny model, transformers' folder read by brisk --model DIR"
        if layout:
            src += f" ({layout} experts)"
        rows.append({"family": name, "source": src, "tokens": n, **res})
        print(f"{name:8s} {n:4d} tokens, folder{' ' + layout if layout else ''}: max rel L2 "
              f"{res['max_rel_l2']:.2e}, mean {res['mean_rel_l2']:.2e}, top-1 "
              f"{100 * res['top1']:.1f}%" + (f", routing margin {res['routing_margin']:.2e}"
                                              if res.get("routing_margin") is not None else ""),
              flush=True)


def check_gemma3(a, rows):
    import torch
    import transformers as tf
    d, f = os.path.split(os.path.abspath(a.gemma3_gguf))
    model = tf.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                    attn_implementation="eager")
    model.eval()
    n_vocab = model.config.vocab_size
    rng = np.random.default_rng(11)
    for n in (24, 600):
        ids = [2] + [int(x) for x in rng.integers(3, 200000, n - 1)]
        res = compare(brisk_logits(a.brisk, a.gemma3_gguf, ids, n_vocab), hf_logits(model, ids))
        rows.append({"family": "gemma3", "source": f"{f} via transformers' GGUF reader",
                     "tokens": n, **res})
        print(f"gemma3   {n:4d} tokens: max rel L2 {res['max_rel_l2']:.2e}, mean "
              f"{res['mean_rel_l2']:.2e}, top-1 {100 * res['top1']:.1f}%", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("--families", default="qwen3,gemma2,phi3,mistral,qwen3moe,mixtral,olmoe,"
                                         "qwen3moe-top8,mixtral-top8,olmoe-top8")
    ap.add_argument("--gemma3-gguf")
    ap.add_argument("--folders", action="store_true",
                    help="also brisk --model on each family's saved folder (issue 39; the "
                         "mixtures of experts in both layouts)")
    ap.add_argument("--brisk", default=os.path.join(HERE, "..", "build", "bin", "brisk"))
    ap.add_argument("--out")
    a = ap.parse_args()
    import transformers
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in [x for x in a.families.split(",") if x]:
            check_family(name, a, work, rows)
    if a.gemma3_gguf:
        check_gemma3(a, rows)
    path = bench_meta.write_result("hf-crosscheck", {
        "transformers": transformers.__version__, "converter": a.llama_cpp, "rows": rows},
        out=a.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
