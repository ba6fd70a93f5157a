#!/usr/bin/env python3
"""hf_folder_check.py - brisk on Hugging Face folders made from real GGUFs,
against brisk on the GGUF itself, and the loading time of a folder against a
GGUF of the same weights. Outside CI (tests/integration/test_hf_folder.py is
the CI check, on tiny random folders).

    bench/hf_folder_check.py --gguf ~/.cache/brisk/models/SmolLM2-135M-Instruct.F32.gguf
    bench/hf_folder_check.py --gguf G --transformers    # also a save_pretrained folder
    bench/hf_folder_check.py --loading-speed            # 1B-parameter bf16 folder vs GGUF F16

Folders:
  numpy    the GGUF undone into a folder with numpy alone (names, q/k rows back
           to rotate-half for llama, Gemma norms w = w_gguf - 1, tokenizer.json
           built with the `tokenizers` package from the GGUF's vocabulary and
           pre-tokenizer name, tokenizer_config.json from its BOS/EOS/template);
  transformers (--transformers; needs torch and transformers, skipped with a
           message without them) AutoModelForCausalLM.from_pretrained(dir,
           gguf_file=...) then save_pretrained in float32: an independent
           writer of the folder.
Per folder: brisk's logits on the folder and on the GGUF (--weights f32: the
same numbers by two paths, max |diff| and relative L2), greedy text equal, and
the tokenizer: brisk's ids from tokenizer.json equal brisk's from the GGUF and
the `tokenizers` package's on a corpus of multilingual text, emoji, code and
whitespace runs. --loading-speed writes a llama-shaped 1.04B-parameter model
with random weights as a bf16 folder and as a GGUF F16 and reports brisk's
"load" time of each (best of 3), with the ratio.

Needs the test venv (numpy, gguf, safetensors, tokenizers) and build/bin/brisk.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import gguf  # noqa: E402
from synth_hf import GEMMA, HF_ARCH, hf_name, to_rotate_half, write_safetensors  # noqa: E402

CORPUS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "Größenwahn und Übermut — «citation» française, ¿qué tal? ¡Olé!",
    "日本語のテキストと中文文本，한국어 텍스트도 있습니다。",
    "Emoji: 😀🎉👩‍👩‍👧‍👦 🇫🇷 ✔︎ and symbols ∑∫√∞ ≠ ≤",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "int main(void) {\n\treturn printf(\"%d\\n\", 42);\n}\n",
    "   leading spaces,\t\ttabs,\n\n\nnewlines   and trailing   ",
    "Numbers 1234567890 3.14159 1e-9 0x1F 1,000,000",
    "<|im_start|>user\nhi<|im_end|>\n",
    "Ελληνικά, русский текст, עברית, العربية, हिन्दी",
]
PROMPT = "The capital of France is"

PRE_TOKENIZERS = {
    "smollm": lambda pt: pt.Sequence([pt.Digits(individual_digits=True),
                                      pt.ByteLevel(add_prefix_space=False, use_regex=True)]),
    "gpt2": lambda pt: pt.ByteLevel(add_prefix_space=False, use_regex=True),
    "default": lambda pt: pt.ByteLevel(add_prefix_space=False, use_regex=True),
}


def field(r, key, default=None):
    f = r.get_field(key)
    if f is None:
        return default
    v = f.contents()
    return v


def brisk_run(brisk, *args):
    p = subprocess.run([brisk] + [str(a) for a in args], capture_output=True)
    if p.returncode:
        sys.exit(f"brisk failed: {' '.join(map(str, args))}\n{p.stderr.decode()[-2000:]}")
    return p


def load_seconds(stderr):
    m = re.search(r"load ([0-9.]+) s", stderr.decode())
    return float(m.group(1)) if m else float("nan")


def gguf_to_folder(path, out):
    """The GGUF undone into a Hugging Face folder with numpy (F32 weights)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = gguf.GGUFReader(str(path))
    arch = field(r, "general.architecture")
    if arch not in HF_ARCH:
        sys.exit(f"{arch}: no folder layout for this architecture here")
    a = arch
    n_head = int(field(r, f"{a}.attention.head_count"))
    n_kv = int(field(r, f"{a}.attention.head_count_kv", n_head))
    dim = int(field(r, f"{a}.embedding_length"))
    cfg = {
        "architectures": [HF_ARCH[a]], "model_type": a, "hidden_size": dim,
        "num_hidden_layers": int(field(r, f"{a}.block_count")),
        "intermediate_size": int(field(r, f"{a}.feed_forward_length")),
        "num_attention_heads": n_head, "num_key_value_heads": n_kv,
        "max_position_embeddings": int(field(r, f"{a}.context_length", 2048)),
        "rms_norm_eps": float(field(r, f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(field(r, f"{a}.rope.freq_base", 10000.0)),
        "hidden_act": "gelu_pytorch_tanh" if a in GEMMA else "silu",
        "torch_dtype": "float32",
    }
    kl = field(r, f"{a}.attention.key_length")
    if kl:
        cfg["head_dim"] = int(kl)
    names = {t.name for t in r.tensors}
    cfg["tie_word_embeddings"] = "output.weight" not in names
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for t in r.tensors:
        v = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        v = v.reshape([int(x) for x in reversed(t.shape)]) if len(t.shape) > 1 else v.reshape(-1)
        if a == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
            v = to_rotate_half(v, n_head if "attn_q" in t.name else n_kv)
        if a in GEMMA and t.name.endswith("norm.weight"):
            v = v - np.float32(1)
        tensors[hf_name(a, t.name)] = v
    write_safetensors(out / "model.safetensors", tensors, "F32")
    (out / "config.json").write_text(json.dumps(cfg, indent=1))

    model = field(r, "tokenizer.ggml.model")
    if model != "gpt2":
        sys.exit(f"tokenizer model {model}: only byte-level BPE GGUFs are undone here")
    pre = field(r, "tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        sys.exit(f"pre-tokenizer {pre}: no tokenizer.json layout for it here")
    toks = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=merges))
    tok.pre_tokenizer = PRE_TOKENIZERS[pre](pre_tokenizers)
    tok.decoder = decoders.ByteLevel()
    special = [AddedToken(t, special=True, normalized=False)
               for t, ty in zip(toks, types) if ty == gguf.TokenType.CONTROL]
    tok.add_special_tokens(special)
    tok.save(str(out / "tokenizer.json"))
    tc = {"add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", False))}
    for k in ("bos", "eos"):
        i = field(r, f"tokenizer.ggml.{k}_token_id")
        if i is not None:
            tc[f"{k}_token"] = toks[int(i)]
    tmpl = field(r, "tokenizer.chat_template")
    if tmpl:
        tc["chat_template"] = tmpl
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=1, ensure_ascii=False))
    return out


def transformers_folder(path, out):
    try:
        import torch  # noqa: F401
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        print(f"transformers folder: skipped ({e}; pip install torch transformers)")
        return None
    d, f = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    import torch
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    if getattr(m, "hf_quantizer", None) is not None:
        # transformers 5 marks a GGUF-loaded model as quantized (its weights
        # are already dequantized to float32) and will not save it: the same
        # tensors into a plain model of the same config.
        cfg = m.config
        if hasattr(cfg, "quantization_config"):
            delattr(cfg, "quantization_config")
        plain = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
        plain.load_state_dict(m.state_dict())
        m = plain
    m.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained(out)
    return out


def compare(brisk, gguf_path, folder, label, report):
    from tokenizers import Tokenizer

    ids = brisk_run(brisk, "tokenize", "--model", gguf_path, "--text", PROMPT).stdout.decode().split()
    res = {}
    with tempfile.TemporaryDirectory() as td:
        for name, m in (("gguf", gguf_path), ("folder", folder)):
            p = brisk_run(brisk, "generate", "--model", m, "--prompt-ids", " ".join(ids), "-n",
                          "0", "--temp", "0", "--weights", "f32", "--dump-logits",
                          f"{td}/{name}.f32")
            res[name] = np.fromfile(f"{td}/{name}.f32", dtype="<f4").astype(np.float64)
            res[name + "_load_s"] = load_seconds(p.stderr)
    a, b = res["folder"], res["gguf"]
    rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    texts = {}
    for name, m in (("gguf", gguf_path), ("folder", folder)):
        texts[name] = brisk_run(brisk, "generate", "--model", m, "--prompt", PROMPT, "-n", "32",
                                "--temp", "0", "--weights", "f32").stdout
    tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    tok_gguf = tok_pkg = 0
    for text in CORPUS:
        f_ids = brisk_run(brisk, "tokenize", "--model", folder, "--text", text, "--no-bos",
                          "--special").stdout.decode().split()
        g_ids = brisk_run(brisk, "tokenize", "--model", gguf_path, "--text", text, "--no-bos",
                          "--special").stdout.decode().split()
        p_ids = [str(i) for i in tok.encode(text, add_special_tokens=False).ids]
        tok_gguf += f_ids == g_ids
        tok_pkg += f_ids == p_ids
    line = {"folder": label, "logits_max_abs_diff": float(np.abs(a - b).max()),
            "logits_rel_l2": rel, "greedy_equal": texts["gguf"] == texts["folder"],
            "tokenizer_equal_gguf": f"{tok_gguf}/{len(CORPUS)}",
            "tokenizer_equal_tokenizers": f"{tok_pkg}/{len(CORPUS)}",
            "load_s_gguf": res["gguf_load_s"], "load_s_folder": res["folder_load_s"]}
    report.append(line)
    print(json.dumps(line))


def loading_speed(brisk, root, report):
    """A 1.04B-parameter llama (dim 2048, 16 layers, 32/8 heads, ff 8192,
    vocab 32768) with random weights, as a bf16 folder and a GGUF F16."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from synth_hf import bf16_bits, from_bf16_bits, write_tokenizer
    from safetensors import TensorSpec, serialize_file

    dim, n_layer, n_head, n_kv, ff, vocab = 2048, 16, 32, 8, 8192, 32768
    hd = dim // n_head
    rng = np.random.default_rng(1)
    shapes = {"model.embed_tokens.weight": (vocab, dim), "model.norm.weight": (dim,)}
    for l in range(n_layer):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (dim,),
                       p + "post_attention_layernorm.weight": (dim,),
                       p + "self_attn.q_proj.weight": (n_head * hd, dim),
                       p + "self_attn.k_proj.weight": (n_kv * hd, dim),
                       p + "self_attn.v_proj.weight": (n_kv * hd, dim),
                       p + "self_attn.o_proj.weight": (dim, n_head * hd),
                       p + "mlp.gate_proj.weight": (ff, dim),
                       p + "mlp.up_proj.weight": (ff, dim),
                       p + "mlp.down_proj.weight": (dim, ff)})
    folder = root / "llama-1b-bf16"
    folder.mkdir(parents=True, exist_ok=True)
    keep, specs = {}, {}
    for name, shape in shapes.items():
        v = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
        if len(shape) == 1:
            v += 1
        keep[name] = bf16_bits(v)
        specs[name] = TensorSpec(dtype="bfloat16", shape=list(shape),
                                 data_ptr=keep[name].ctypes.data, data_len=keep[name].nbytes)
    serialize_file(specs, str(folder / "model.safetensors"), {"format": "pt"})
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": dim,
           "num_hidden_layers": n_layer, "intermediate_size": ff, "num_attention_heads": n_head,
           "num_key_value_heads": n_kv, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": True}
    (folder / "config.json").write_text(json.dumps(cfg))
    write_tokenizer(folder)
    # The same values as a GGUF F16 (the converter's layout: q/k rows adjacent).
    gg = root / "llama-1b-f16.gguf"
    w = gguf.GGUFWriter(str(gg), "llama")
    for k, v in (("context_length", 4096), ("embedding_length", dim), ("block_count", n_layer),
                 ("feed_forward_length", ff), ("attention.head_count", n_head),
                 ("attention.head_count_kv", n_kv)):
        w.add_uint32(f"llama.{k}", v)
    w.add_float32("llama.rope.freq_base", 500000.0)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    from synth_gguf import VOCAB
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(VOCAB.tokens)
    w.add_token_types(VOCAB.types)
    w.add_token_merges(VOCAB.merges)
    w.add_add_bos_token(False)
    from synth_hf import to_adjacent
    for name in shapes:
        v = from_bf16_bits(keep[name]).reshape(shapes[name])
        gname = {"model.embed_tokens.weight": "token_embd.weight",
                 "model.norm.weight": "output_norm.weight"}.get(name)
        if gname is None:
            l, rest = name.split(".")[2], ".".join(name.split(".")[3:])
            gname = f"blk.{l}." + {
                "input_layernorm.weight": "attn_norm.weight",
                "post_attention_layernorm.weight": "ffn_norm.weight",
                "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
                "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
                "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
                "mlp.down_proj.weight": "ffn_down.weight"}[rest]
            if rest in ("self_attn.q_proj.weight", "self_attn.k_proj.weight"):
                v = to_adjacent(v, n_head if "q_proj" in rest else n_kv)
        w.add_tensor(gname, v if v.ndim == 1 else v.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    del keep
    times = {}
    for name, m in (("gguf_f16", gg), ("folder_bf16", folder)):
        best = float("inf")
        for _ in range(3):
            p = brisk_run(brisk, "generate", "--model", m, "--prompt-ids", "1", "-n", "1",
                          "--temp", "0")
            best = min(best, load_seconds(p.stderr))
        times[name] = best
    line = {"loading_speed": f"{n_params / 1e9:.2f}B params",
            "load_s_gguf_f16": times["gguf_f16"], "load_s_folder_bf16": times["folder_bf16"],
            "ratio": times["folder_bf16"] / times["gguf_f16"]}
    report.append(line)
    print(json.dumps(line))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="a GGUF (F32 for exact comparisons) to undo into folders")
    ap.add_argument("--transformers", action="store_true",
                    help="also a folder written by transformers' save_pretrained")
    ap.add_argument("--loading-speed", action="store_true")
    ap.add_argument("--brisk", default=str(ROOT / "build" / "bin" / "brisk"))
    ap.add_argument("--work", default=None, help="where to write folders (default: a temp dir)")
    ap.add_argument("--out", default=None, help="JSON report file")
    ap.add_argument("--keep", action="store_true", help="keep the folders and files written")
    a = ap.parse_args()
    report = []
    with tempfile.TemporaryDirectory(dir=a.work) as td:
        root = Path(tempfile.mkdtemp(dir=a.work) if a.keep else td)
        print(f"writing under {root}", file=sys.stderr)
        if a.gguf:
            compare(a.brisk, a.gguf, gguf_to_folder(a.gguf, root / "numpy"), "numpy", report)
            if a.transformers:
                f = transformers_folder(a.gguf, root / "transformers")
                if f:
                    compare(a.brisk, a.gguf, f, "transformers", report)
        if a.loading_speed:
            loading_speed(a.brisk, root, report)
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
