#!/usr/bin/env python3
"""hf_folder_check.py - brisk on Hugging Face folders made from real GGUFs,
against brisk on the GGUF itself. Outside CI (tests/integration/test_hf_folder.py is
the CI check, on tiny random folders).

    bench/hf_folder_check.py --gguf ~/.cache/brisk/models/SmolLM2-135M-Instruct.F32.gguf
    bench/hf_folder_check.py --gguf G --transformers    # also a save_pretrained folder

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
whitespace runs. Loading speed (a 1B bf16 folder against a GGUF F16) is
bench/hf_load_bench.py.

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="a GGUF (F32 for exact comparisons) to undo into folders")
    ap.add_argument("--transformers", action="store_true",
                    help="also a folder written by transformers' save_pretrained")
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
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
