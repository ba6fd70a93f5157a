#!/usr/bin/env python3
"""hf_generate.py - the Hugging Face transformers baseline for bench/gpu.sh:
`generate` on a randomly initialised model of a real shape (fp16, on the GPU),
the same prompt/output lengths and batch sizes brisk is measured at, in the
same run on the same GPU.

    python3 bench/hf_generate.py --shape llama-3-8b --batches 1,16,64,256 \
        --input-len 128 --output-len 128 --json OUT.json

Rehearsal on a machine without a GPU (a tiny random model, float32):

    python3 bench/hf_generate.py --device cpu --shape tiny --batches 1,4 \
        --input-len 16 --output-len 8 --json /tmp/x.json

Prints one line per batch size and writes {"shape", "input_len", "output_len",
"device", "dtype", "torch", "transformers", "gpu", "batches": [{"batch",
"seconds", "output_tokens", "output_tok_s"} or {"batch", "error"}]} to --json
(rewritten after every batch, so a run killed by an outer timeout still leaves
the batches it finished). A batch that runs out of memory or fails otherwise is
recorded with an "error" and the next batch goes on; batches not started
within --timeout-s are recorded as {"batch": n, "error": "skipped: time budget"}.
Greedy decoding, no EOS token and min_new_tokens = max_new_tokens, so every
sequence makes exactly --output-len tokens, as brisk-bench's ignore_eos
requests do.

Exit status: 0 when the JSON was written (even if some batches failed), 3 (SKIP)
when torch/transformers are missing or --device cuda has no CUDA device, 1 when
the model could not be built (the JSON is still written, every batch with the
error), 2 for bad arguments.

Written against torch 2.11 and transformers 5.x (`dtype=`, `rope_parameters`);
it also keeps working on transformers 4.4x (falls back to `torch_dtype=` and
the top-level `rope_theta`).
"""
import argparse
import gc
import json
import os
import sys
import time

# The GPU machine has no network: never let transformers / huggingface_hub try.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

SHAPES = {
    # hidden, ffn, layers, heads, kv heads, vocab, rope theta, tied
    "llama-3-8b": (4096, 14336, 32, 32, 8, 128256, 500000.0, False),
    "llama-3.2-1b": (2048, 8192, 16, 32, 8, 128256, 500000.0, True),
    "smollm2-135m": (576, 1536, 30, 9, 3, 49152, 100000.0, True),
    "tiny": (64, 128, 2, 4, 2, 512, 500000.0, True),  # rehearsal only
}


def write_json(path, out):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, path)


def effective_rope_theta(cfg):
    """The theta the model's rotary embedding reads (rope_parameters in
    transformers 5, rope_theta in 4.x)."""
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and "rope_theta" in rp:
        return rp["rope_theta"]
    return getattr(cfg, "rope_theta", None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="llama-3-8b", choices=sorted(SHAPES))
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default="auto", choices=["auto", "float16", "bfloat16", "float32"],
                    help="auto: float16 on cuda, float32 on cpu")
    ap.add_argument("--timeout-s", type=float, default=150.0,
                    help="do not start another batch once this many seconds have passed "
                         "since the start (the caller still wants a hard timeout around it)")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    t_start = time.time()
    try:
        batches = [int(x) for x in a.batches.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--batches must be comma-separated integers, got {a.batches!r}")
    if not batches or min(batches) < 1 or a.input_len < 1 or a.output_len < 1:
        ap.error("--batches, --input-len and --output-len must be positive")

    try:
        import torch
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print(f"hf_generate: SKIP: {e}", file=sys.stderr)
        return 3
    if a.device == "cuda" and not torch.cuda.is_available():
        print("hf_generate: SKIP: no CUDA device for torch", file=sys.stderr)
        return 3
    dev = torch.device(a.device)
    dtype_name = a.dtype if a.dtype != "auto" else ("float16" if a.device == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    try:
        transformers.logging.set_verbosity_error()  # no per-call generation-config chatter
    except Exception:
        pass

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    h, ffn, layers, heads, kv, vocab, theta, tied = SHAPES[a.shape]
    out = {"shape": a.shape, "input_len": a.input_len, "output_len": a.output_len,
           "device": a.device, "dtype": dtype_name,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
           "batches": []}

    # --- build the model, on the device, in the wanted dtype -----------------
    model = None
    try:
        ckw = dict(hidden_size=h, intermediate_size=ffn, num_hidden_layers=layers,
                   num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                   tie_word_embeddings=tied, bos_token_id=1, eos_token_id=None, pad_token_id=0,
                   use_cache=True,
                   max_position_embeddings=max(a.input_len + a.output_len + 16, 2048))
        try:  # transformers 5: the rotary embedding reads config.rope_parameters["rope_theta"]
            cfg = LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": theta}, **ckw)
        except TypeError:
            cfg = LlamaConfig(rope_theta=theta, **ckw)
        if effective_rope_theta(cfg) != theta:  # 4.x ignores rope_parameters: set the old field
            cfg.rope_theta = theta
        got = effective_rope_theta(cfg)
        if got != theta:
            raise RuntimeError(f"config has rope theta {got}, wanted {theta}")
        t0 = time.time()
        torch.manual_seed(0)
        # Under `with torch.device(dev)` every parameter is allocated and randomly
        # initialised on the device itself (no CPU copy); `_from_config` makes the
        # default dtype `dtype` while it builds, so nothing is made in fp32 first.
        with torch.device(dev):
            try:
                model = LlamaForCausalLM._from_config(cfg, dtype=dtype, attn_implementation="sdpa")
            except TypeError:  # transformers < 4.56 knows only torch_dtype
                model = LlamaForCausalLM._from_config(cfg, torch_dtype=dtype, attn_implementation="sdpa")
        model.eval()
        sync()
        p = next(model.parameters())
        n_params = sum(q.numel() for q in model.parameters())
        if p.device.type != dev.type or p.dtype != dtype:
            raise RuntimeError(f"model built on {p.device} {p.dtype}, wanted {dev} {dtype}")
        gcfg = model.generation_config
        gcfg.do_sample = False
        gcfg.eos_token_id = None
        gcfg.bos_token_id = 1
        gcfg.pad_token_id = 0
        for k in ("temperature", "top_p", "top_k"):  # greedy: unset sampling knobs, no warnings
            if hasattr(gcfg, k):
                setattr(gcfg, k, None)
        if hasattr(gcfg, "disable_compile"):  # eager DynamicCache decode, never torch.compile
            gcfg.disable_compile = True
        print(f"hf_generate: {a.shape} {dtype_name} on {a.device}: {n_params / 1e6:.1f} M params, "
              f"rope theta {effective_rope_theta(model.config)}, "
              f"attn {getattr(model.config, '_attn_implementation', '?')}, "
              f"built in {time.time() - t0:.1f} s", file=sys.stderr)
    except Exception as e:
        msg = f"model build failed: {type(e).__name__}: {str(e)[:300]}"
        print(f"hf_generate: {msg}", file=sys.stderr)
        out["batches"] = [{"batch": bs, "error": msg} for bs in batches]
        write_json(a.json, out)
        return 1

    # --- one generate per batch size ------------------------------------------
    g = torch.Generator(device=dev).manual_seed(1)
    for bs in batches:
        elapsed = time.time() - t_start
        if elapsed > a.timeout_s:
            row = {"batch": bs, "error": "skipped: time budget"}
            out["batches"].append(row)
            print(f"hf_generate: batch {bs}: {row} ({elapsed:.0f} s > {a.timeout_s:g} s)",
                  file=sys.stderr)
            write_json(a.json, out)
            continue
        # Provisional row: if an outer hard timeout kills us mid-batch, the JSON says so.
        write_json(a.json, dict(out, batches=out["batches"] + [
            {"batch": bs, "error": "interrupted: did not finish (killed by an outer timeout?)"}]))
        try:
            ids = torch.randint(3, vocab, (bs, a.input_len), device=dev, generator=g)
            kw = dict(attention_mask=torch.ones_like(ids), do_sample=False,
                      pad_token_id=0, eos_token_id=None, use_cache=True)
            with torch.inference_mode():
                model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
                sync()
                t = time.time()
                res = model.generate(ids, max_new_tokens=a.output_len,
                                     min_new_tokens=a.output_len, **kw)
                sync()
                secs = time.time() - t
            made = (res.shape[1] - a.input_len) * bs
            row = {"batch": bs, "seconds": round(secs, 3), "output_tokens": made,
                   "output_tok_s": round(made / secs, 1)}
            del res, ids
        except torch.cuda.OutOfMemoryError as e:
            row = {"batch": bs, "error": f"out of memory: {str(e)[:160]}"}
        except MemoryError as e:
            row = {"batch": bs, "error": f"out of memory (host): {str(e)[:160]}"}
        except Exception as e:
            row = {"batch": bs, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        # The exception (and its traceback, which holds generate's KV cache) is
        # gone here, so the memory can really be given back before the next batch.
        gc.collect()
        if dev.type == "cuda":
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception as e:  # a sticky CUDA error: record it, later batches will say too
                row["error"] = row.get("error", "") + f" (after: {type(e).__name__}: {str(e)[:120]})"
        out["batches"].append(row)
        print(f"hf_generate: batch {bs}: {row}", file=sys.stderr)
        write_json(a.json, out)
    write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
