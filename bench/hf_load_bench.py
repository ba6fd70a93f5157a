#!/usr/bin/env python3
"""hf_load_bench.py - how long a Hugging Face folder takes to be ready against the
same weights as a GGUF F16 (issue 39: a 1B-parameter bf16 folder within 1.2x of
the GGUF F16).

    bench/hf_load_bench.py [--reps 5] [--work /tmp/brisk-hf-load] [--clean]
        [--brisk build/bin/brisk] [--baseline OLD_BRISK] [--label NAME]

The model: llama-shaped, dim 2048, 16 layers, 32/8 heads, FFN 8192, tied
embeddings, random weights (normal, sd 0.02; norms around 1), 1.07B parameters.
Written under --work (outside the repository), once, and reused while the shape
file there matches:
  folder  model.safetensors in bf16 (q/k rows in the Hugging Face rotate-half
          order), config.json, tokenizer.json and tokenizer_config.json;
  gguf    the same values as F16 (bf16 -> f16 is exact for these values except
          the subnormal tail, which numpy rounds as brisk does), q/k rows in the
          converter's adjacent order, the same tokenizer as tokenizer.ggml.* keys.
The tokenizer is SmolLM2's 49152-token byte-level BPE taken from its GGUF in
~/.cache/brisk/models (tokenizer.json built with the `tokenizers` package, as
bench/hf_folder_check.py does), so tokenizer.json parsing is timed at a real
size; without that file, tests/integration's synthetic vocabulary.

"Ready": `brisk generate --model M --prompt-ids 1 -n 1 --temp 0`, the whole
process wall time (start, load, one token, exit), its CPU time (user + sys:
steadier than the wall time on a machine other jobs share, since waiting for
a core does not count), and the load figure brisk prints (`load X s`). Page
cache warm (every file read once and one untimed run of each first), then
--reps repetitions, the two interleaved (gguf, folder, gguf, folder, ...);
with --baseline BIN another binary's two runs join each repetition (the
figures before a change, side by side). Ratios of medians, and of the best
runs (on a VM other jobs share, the time to fault in 2 GB of fresh memory
varies 5x from run to run: the best run is the cost without that noise). Before the timing, the two models'
logits are compared (--weights auto, -n 0): bit-equal, since the folder's bf16
becomes the same f16 as the GGUF's.

Prints a table and writes bench/results/<date>-<machine>-hf-load[-LABEL].json
with the machine, CPU flags, commit, date and the load average before and after.
Needs the test venv (numpy, safetensors, gguf, tokenizers) and build/bin/brisk.
"""
import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import bench_meta  # noqa: E402
import gguf  # noqa: E402
from synth_hf import bf16_bits, from_bf16_bits, to_adjacent  # noqa: E402

DIM, N_LAYER, N_HEAD, N_KV, FF = 2048, 16, 32, 8, 8192
SMOLLM2 = Path.home() / ".cache" / "brisk" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
LAYER = {"input_layernorm.weight": "attn_norm.weight",
         "post_attention_layernorm.weight": "ffn_norm.weight",
         "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
         "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
         "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
         "mlp.down_proj.weight": "ffn_down.weight"}


def field(r, key, default=None):
    f = r.get_field(key)
    return default if f is None else f.contents()


def vocabulary():
    """(tokens, types, merges, bos, eos, pre) of SmolLM2's GGUF, or the synthetic
    test vocabulary when that file is not there."""
    if SMOLLM2.exists():
        r = gguf.GGUFReader(str(SMOLLM2))
        return (field(r, "tokenizer.ggml.tokens"), field(r, "tokenizer.ggml.token_type"),
                field(r, "tokenizer.ggml.merges"), field(r, "tokenizer.ggml.bos_token_id"),
                field(r, "tokenizer.ggml.eos_token_id"), field(r, "tokenizer.ggml.pre"),
                "SmolLM2-135M-Instruct (49152 tokens)")
    from synth_gguf import VOCAB
    return (VOCAB.tokens, VOCAB.types, VOCAB.merges, None, None, "gpt2",
            f"synthetic ({len(VOCAB.tokens)} tokens)")


def write_tokenizer_json(folder, tokens, types, merges, bos, eos, pre):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                               merges=[tuple(m.split(" ", 1)) for m in merges]))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                  byte_level]) if pre == "smollm" else byte_level)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == gguf.TokenType.CONTROL])
    tok.save(str(folder / "tokenizer.json"))
    tc = {"add_bos_token": False}
    if bos is not None:
        tc["bos_token"] = tokens[int(bos)]
    if eos is not None:
        tc["eos_token"] = tokens[int(eos)]
    (folder / "tokenizer_config.json").write_text(json.dumps(tc))


def make_models(work):
    """Writes the folder and the GGUF under work unless a matching pair is there;
    returns (folder, gguf path, n_params, vocabulary description)."""
    tokens, types, merges, bos, eos, pre, vdesc = vocabulary()
    vocab = len(tokens)
    hd = DIM // N_HEAD
    shapes = {"model.embed_tokens.weight": (vocab, DIM), "model.norm.weight": (DIM,)}
    for l in range(N_LAYER):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (DIM,),
                       p + "post_attention_layernorm.weight": (DIM,),
                       p + "self_attn.q_proj.weight": (N_HEAD * hd, DIM),
                       p + "self_attn.k_proj.weight": (N_KV * hd, DIM),
                       p + "self_attn.v_proj.weight": (N_KV * hd, DIM),
                       p + "self_attn.o_proj.weight": (DIM, N_HEAD * hd),
                       p + "mlp.gate_proj.weight": (FF, DIM),
                       p + "mlp.up_proj.weight": (FF, DIM),
                       p + "mlp.down_proj.weight": (DIM, FF)})
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    folder, gg, stamp = work / "llama-1b-bf16", work / "llama-1b-f16.gguf", work / "shape.json"
    want = {"dim": DIM, "layers": N_LAYER, "heads": [N_HEAD, N_KV], "ff": FF, "vocab": vdesc}
    if stamp.exists() and json.loads(stamp.read_text()) == want and gg.exists():
        return folder, gg, n_params, vdesc
    from safetensors import TensorSpec, serialize_file
    print(f"writing the models under {work} ({n_params / 1e9:.2f}B params) ...", flush=True)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    keep, specs = {}, {}
    for name, shape in shapes.items():
        v = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
        if len(shape) == 1:
            v += 1
        keep[name] = bf16_bits(v)
        specs[name] = TensorSpec(dtype="bfloat16", shape=list(shape),
                                 data_ptr=keep[name].ctypes.data, data_len=keep[name].nbytes)
    serialize_file(specs, str(folder / "model.safetensors"), {"format": "pt"})
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": DIM,
           "num_hidden_layers": N_LAYER, "intermediate_size": FF, "num_attention_heads": N_HEAD,
           "num_key_value_heads": N_KV, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": True,
           "torch_dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(cfg))
    write_tokenizer_json(folder, tokens, types, merges, bos, eos, pre)
    w = gguf.GGUFWriter(str(gg), "llama")
    for k, v in (("context_length", 4096), ("embedding_length", DIM), ("block_count", N_LAYER),
                 ("feed_forward_length", FF), ("attention.head_count", N_HEAD),
                 ("attention.head_count_kv", N_KV)):
        w.add_uint32(f"llama.{k}", v)
    w.add_float32("llama.rope.freq_base", 500000.0)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_file_type(1)  # MOSTLY_F16
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(int(bos))
    if eos is not None:
        w.add_eos_token_id(int(eos))
    w.add_add_bos_token(False)
    for name, shape in shapes.items():
        v = from_bf16_bits(keep[name]).reshape(shape)
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        else:
            l, rest = name.split(".")[2], ".".join(name.split(".")[3:])
            gname = f"blk.{l}.{LAYER[rest]}"
            if rest in ("self_attn.q_proj.weight", "self_attn.k_proj.weight"):
                v = to_adjacent(v, N_HEAD if "q_proj" in rest else N_KV)
        w.add_tensor(gname, v if v.ndim == 1 else v.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    stamp.write_text(json.dumps(want))
    return folder, gg, n_params, vdesc


def run(brisk, model, pause=0.0):
    """(wall s, CPU s (user + sys of the process), brisk's own load figure s)."""
    time.sleep(pause)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([brisk, "generate", "--model", str(model), "--prompt-ids", "1", "-n", "1",
                        "--temp", "0"], capture_output=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        sys.exit(f"brisk failed on {model}:\n{p.stderr.decode()[-2000:]}")
    m = re.search(r"load ([0-9.]+) s", p.stderr.decode())
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, cpu, float(m.group(1)) if m else float("nan")


def same_logits(brisk, folder, gg, work):
    out = {}
    for name, m in (("gguf", gg), ("folder", folder)):
        dump = work / f"logits-{name}.f32"
        subprocess.run([brisk, "generate", "--model", str(m), "--prompt-ids", "1 2 3 4", "-n",
                        "0", "--temp", "0", "--dump-logits", str(dump)], check=True,
                       capture_output=True)
        out[name] = np.fromfile(dump, dtype="<f4")
    return bool(out["gguf"].size > 0 and np.array_equal(out["gguf"], out["folder"]))


def warm(path):
    for f in ([path] if path.is_file() else sorted(path.iterdir())):
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--work", default="/tmp/brisk-hf-load")
    ap.add_argument("--brisk", default=str(ROOT / "build" / "bin" / "brisk"))
    ap.add_argument("--label", default="")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds to wait before each run "
                    "(lets a VM's free page reporting settle, so every run starts alike)")
    ap.add_argument("--baseline", default=None, help="another brisk binary (e.g. a build of the "
                    "commit before a change) timed the same way, interleaved with --brisk")
    ap.add_argument("--clean", action="store_true", help="remove the models at the end "
                    "(default: kept for the next run)")
    a = ap.parse_args()
    os.chdir(ROOT)  # bench_meta writes bench/results/ and reads the commit from here
    work = Path(a.work).resolve()
    if ROOT in work.resolve().parents:
        sys.exit("--work must be outside the repository")
    work.mkdir(parents=True, exist_ok=True)
    folder, gg, n_params, vdesc = make_models(work)
    equal = same_logits(a.brisk, folder, gg, work)
    print(f"logits of the folder and the GGUF bit-equal: {equal}")
    warm(gg)
    warm(folder)
    bins = {"": a.brisk}
    if a.baseline:
        bins["before_"] = a.baseline
    for b in bins.values():
        run(b, gg)
        run(b, folder)
    load_before = os.getloadavg()
    times = {f"{p}{k}": [] for p in bins for k in ("gguf_f16", "folder_bf16")}
    # Every other repetition runs in the reverse order: what a run finds
    # depends on what the run before it freed (on a VM, whether the host still
    # backs that memory), so no configuration always follows the same one.
    order = [(p, b, name, m) for p, b in bins.items()
             for name, m in (("gguf_f16", gg), ("folder_bf16", folder))]
    for rep in range(a.reps):
        for p, b, name, m in (order if rep % 2 == 0 else order[::-1]):
            times[p + name].append(run(b, m, a.pause))
    load_after = os.getloadavg()
    med = {k: {f: round(statistics.median(r[i] for r in v), 3)
               for i, f in enumerate(("wall_s", "cpu_s", "load_s"))} for k, v in times.items()}
    best = {k: {f: round(min(r[i] for r in v), 3)
                for i, f in enumerate(("wall_s", "cpu_s", "load_s"))} for k, v in times.items()}
    ratios, ratios_best = {}, {}
    for p in bins:
        for f in ("wall_s", "cpu_s", "load_s"):
            ratios[f"{p}{f[:-2]}"] = round(med[p + "folder_bf16"][f] / med[p + "gguf_f16"][f], 3)
            ratios_best[f"{p}{f[:-2]}"] = round(best[p + "folder_bf16"][f] /
                                                best[p + "gguf_f16"][f], 3)
    print(f"\n{n_params / 1e9:.2f}B params, vocabulary {vdesc}, {a.reps} reps interleaved, "
          f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} -> {load_after[0]:.2f}")
    print("medians (best of the runs in brackets)")
    print(f"{'model':<20} {'ready (wall) s':>15} {'CPU s':>13} {'load s':>13}   runs (wall)")
    for k, v in times.items():
        m, b = med[k], best[k]
        print(f"{k:<20} {m['wall_s']:>8.2f} ({b['wall_s']:.2f}) {m['cpu_s']:>6.2f} ({b['cpu_s']:.2f}) "
              f"{m['load_s']:>6.2f} ({b['load_s']:.2f})   " + " ".join(f"{r[0]:.2f}" for r in v))
    for p in bins:
        r, rb = ratios, ratios_best
        print(f"{(p + 'folder / gguf'):<20} {r[p + 'wall']:>7.2f}x ({rb[p + 'wall']:.2f}x) "
              f"{r[p + 'cpu']:>5.2f}x ({rb[p + 'cpu']:.2f}x) {r[p + 'load']:>5.2f}x "
              f"({rb[p + 'load']:.2f}x)   (goal <= 1.2x)")
    kind = "hf-load" + (f"-{a.label}" if a.label else "")
    path = bench_meta.write_result(kind, {
        "machine": platform.node(), "n_cpus": os.cpu_count(),
        "load_avg_before": load_before, "load_avg_after": load_after,
        "model": f"llama shape, dim {DIM}, {N_LAYER} layers, heads {N_HEAD}/{N_KV}, ff {FF}, "
                 f"tied, random weights", "n_params": n_params, "vocabulary": vdesc,
        "command": "brisk generate --model M --prompt-ids 1 -n 1 --temp 0",
        "binaries": {(p or "after").rstrip("_"): b for p, b in bins.items()},
        "reps": a.reps, "pause_s": a.pause, "logits_bit_equal": equal,
        "runs": {k: [{"wall_s": round(w, 3), "cpu_s": round(c, 3), "load_s": l}
                     for w, c, l in v] for k, v in times.items()},
        "median": med, "best": best, "ratio_folder_over_gguf": ratios,
        "ratio_folder_over_gguf_best": ratios_best, "goal": "folder <= 1.2x gguf"})
    print(f"wrote {path}")
    if a.clean:
        import shutil
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
