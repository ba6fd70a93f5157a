#!/usr/bin/env python3
"""hf_generate.py - the Hugging Face transformers baseline for bench/gpu.sh:
`generate` on a randomly initialised model of a real shape (fp16, on the GPU),
the same prompt/output lengths and batch sizes brisk is measured at, in the
same run on the same GPU.

    python3 bench/hf_generate.py --shape llama-3-8b --batches 1,16,64,256 \
        --input-len 128 --output-len 128 --json OUT.json

Prints one line per batch size and writes {"shape", "batches": [{"batch",
"seconds", "output_tok_s"}], "torch", "transformers", "gpu"} to --json.
Greedy decoding with min_new_tokens = max_new_tokens, so every sequence makes
exactly --output-len tokens, as brisk-bench's ignore_eos requests do.
"""
import argparse
import json
import sys
import time

SHAPES = {
    # hidden, ffn, layers, heads, kv heads, vocab, rope theta, tied
    "llama-3-8b": (4096, 14336, 32, 32, 8, 128256, 500000.0, False),
    "llama-3.2-1b": (2048, 8192, 16, 32, 8, 128256, 500000.0, True),
    "smollm2-135m": (576, 1536, 30, 9, 3, 49152, 100000.0, True),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama-3-8b", choices=sorted(SHAPES))
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    try:
        import torch
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print(f"hf_generate: SKIP: {e}", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("hf_generate: SKIP: no CUDA device for torch", file=sys.stderr)
        return 3
    h, ffn, layers, heads, kv, vocab, theta, tied = SHAPES[a.shape]
    cfg = LlamaConfig(hidden_size=h, intermediate_size=ffn, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                      rope_theta=theta, tie_word_embeddings=tied,
                      max_position_embeddings=a.input_len + a.output_len + 16)
    t0 = time.time()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, torch_dtype=torch.float16)
    model.eval()
    print(f"hf_generate: {a.shape} fp16 built in {time.time() - t0:.1f} s", file=sys.stderr)
    out = {"shape": a.shape, "input_len": a.input_len, "output_len": a.output_len,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name(0), "batches": []}
    g = torch.Generator(device="cuda").manual_seed(1)
    for bs in [int(x) for x in a.batches.split(",")]:
        ids = torch.randint(3, vocab, (bs, a.input_len), device="cuda", generator=g)
        mask = torch.ones_like(ids)
        kw = dict(attention_mask=mask, do_sample=False, pad_token_id=0, eos_token_id=None)
        try:
            with torch.inference_mode():
                model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
                torch.cuda.synchronize()
                t = time.time()
                res = model.generate(ids, max_new_tokens=a.output_len,
                                     min_new_tokens=a.output_len, **kw)
                torch.cuda.synchronize()
                secs = time.time() - t
            made = (res.shape[1] - a.input_len) * bs
            row = {"batch": bs, "seconds": round(secs, 3), "output_tokens": made,
                   "output_tok_s": round(made / secs, 1)}
        except torch.cuda.OutOfMemoryError as e:
            row = {"batch": bs, "error": f"out of memory: {str(e)[:120]}"}
            torch.cuda.empty_cache()
        out["batches"].append(row)
        print(f"hf_generate: batch {bs}: {row}", file=sys.stderr)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
