#!/usr/bin/env python3
"""kv_window.py - what releasing the KV blocks behind sliding windows saves, on a
real model, side by side in one run: `brisk serve` with its default (window layers
in their own block tables, blocks behind the window given back) and with
--no-kv-window-release (one table for every layer), the same pool, the same load.

    bench/kv_window.py MODEL.gguf [--ctx 8192] [--prompt-len 4000] [--n-gen 32]
        [--seqs 4] [--kv-cache-bytes 256M] [--threads N] [--label NAME]

The load is --seqs concurrent completions of --prompt-len random token ids each
(ids 1000-19999, distinct per request so the prefix cache cannot share them) and
--n-gen greedy tokens. While it runs, /metrics is read every 0.2 s. Reported per
mode: the pool's shape (from the engine's ready line), the most KV blocks in use at
once and their bytes, per running sequence, the most requests running at once,
preemptions, and the wall time of the whole load.

Prints a table and writes bench/results/<date>-<machine>-kv-window[-LABEL].json.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_meta  # noqa: E402
from bench_server import free_port, metrics, pick  # noqa: E402


def run_mode(args, release):
    port = free_port()
    log_path = f"/tmp/brisk-kv-window-{os.getpid()}-{int(release)}.log"
    cmd = [args.brisk, "serve", "--model", args.model, "--port", str(port), "--ctx", str(args.ctx),
           "--max-num-seqs", str(args.seqs), "--kv-cache-bytes", args.kv_cache_bytes]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if not release:
        cmd.append("--no-kv-window-release")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            text = open(log_path).read()
            m = re.search(r"KV cache ([\d.]+) MB (f16|f32) = (\d+) blocks x (\d+) positions x (\d+) "
                          r"layers, (\d+) block tables per sequence \((\d+) released behind "
                          r"sliding windows; one context holds at most (\d+) blocks\)", text)
            if m:
                break
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"brisk serve did not start:\n{text[-3000:]}")
            time.sleep(0.2)
        mb, dtype, n_blocks, bs, lpg, tables, windowed, ctx_blocks = m.groups()
        block_mb = float(mb) / int(n_blocks)
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except OSError:
                time.sleep(0.2)
        results, errors = [], []

        def one(i):
            ids = [1000 + (i * 7919 + j * 104729) % 19000 for j in range(args.prompt_len)]
            body = json.dumps({"prompt": ids, "max_tokens": args.n_gen, "temperature": 0,
                               "ignore_eos": True}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                         {"Content-Type": "application/json"})
            try:
                r = json.load(urllib.request.urlopen(req, timeout=3600))
                results.append(r["usage"])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        t0 = time.time()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(args.seqs)]
        for t in threads:
            t.start()
        peak_used = peak_running = 0.0
        while any(t.is_alive() for t in threads):
            s = metrics(port)
            peak_used = max(peak_used, pick(s, "brisk_kv_cache_blocks", 'state="used"'))
            peak_running = max(peak_running, pick(s, "vllm:num_requests_running"))
            time.sleep(0.2)
        wall = time.time() - t0
        s = metrics(port)
        if errors:
            raise SystemExit(f"requests failed: {errors}")
        return {
            "release": release, "kv_mb": float(mb), "kv_dtype": dtype, "blocks": int(n_blocks),
            "block_positions": int(bs), "layers_per_block": int(lpg), "tables": int(tables),
            "window_tables": int(windowed), "context_blocks_max": int(ctx_blocks),
            "block_mb": block_mb, "peak_used_blocks": int(peak_used),
            "peak_used_mb": peak_used * block_mb, "peak_running": int(peak_running),
            "mb_per_running_seq": peak_used * block_mb / max(peak_running, 1),
            "preemptions": int(pick(s, "vllm:num_preemptions_total")),
            "window_released_blocks": int(pick(s, "brisk_kv_cache_window_released_blocks_total")),
            "wall_s": wall,
            "prompt_tokens": sum(u["prompt_tokens"] for u in results),
            "completion_tokens": sum(u["completion_tokens"] for u in results),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--brisk", default=os.path.join(HERE, "..", "build", "bin", "brisk"))
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--prompt-len", type=int, default=4000)
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--kv-cache-bytes", default="256M")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    rows = [run_mode(args, True), run_mode(args, False)]
    print(f"{os.path.basename(args.model)}: {args.seqs} x ({args.prompt_len} prompt + "
          f"{args.n_gen} generated) ids, --ctx {args.ctx}, --kv-cache-bytes {args.kv_cache_bytes}")
    print("| mode | tables (window) | layers/block | block MB | peak blocks used | peak MB | "
          "running at once | MB per running seq | preemptions | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {'release' if r['release'] else 'keep (--no-kv-window-release)'} | "
              f"{r['tables']} ({r['window_tables']}) | {r['layers_per_block']} | "
              f"{r['block_mb']:.3f} | {r['peak_used_blocks']} | {r['peak_used_mb']:.1f} | "
              f"{r['peak_running']} | {r['mb_per_running_seq']:.1f} | {r['preemptions']} | "
              f"{r['wall_s']:.1f} |")
    saving = 1 - rows[0]["mb_per_running_seq"] / rows[1]["mb_per_running_seq"]
    print(f"KV per running sequence: {saving * 100:.0f}% less with release; wall time "
          f"{rows[1]['wall_s'] / rows[0]['wall_s']:.2f}x")
    kind = "kv-window" + (f"-{args.label}" if args.label else "")
    path = bench_meta.write_result(kind, {
        "model": os.path.basename(args.model), "ctx": args.ctx, "prompt_len": args.prompt_len,
        "n_gen": args.n_gen, "seqs": args.seqs, "kv_cache_bytes": args.kv_cache_bytes,
        "threads": args.threads, "modes": rows, "saving_per_running_seq": saving})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
