#!/usr/bin/env python3
"""kv_quant.py - what the KV-cache dtypes buy and cost on the CPU, in one run
(issue 38): per model and dtype (f16, q8_0, q4_0; --dtypes),

  bytes per cached position   K and V of every layer (brisk bench's kv_bytes_per_pos:
                              kern_kv.h's layer-block bytes / 16 positions)
  positions in 256 MiB        the pool --kv-cache-bytes 256M makes (brisk serve's blocks
                              x 16; with sliding windows, blocks of a group of layers:
                              the figure is then positions of one group)
  concurrent 4,000s admitted  256 MiB's blocks over the blocks one 4,000-position
                              context holds (brisk serve --ctx 4000 logs both; the
                              engine admits a sequence only with blocks for every known
                              token: sched_core.c), so with sliding windows (Gemma 3) the
                              window layers count a window's worth, not 4,000
  positions in 256 MiB        with windows: positions of every layer the pool holds for
                              one sequence's worth of tables (blocks x 16 / tables)
  decode tok/s at depth D     one stream, every thread: build/bin/kv_quality --decode, every
                              dtype's cache filled with the text to D in one process, then
                              the dtypes take turns at the same 16 decode steps, 8 rounds,
                              the best round each (a shared machine's drift hits them alike)
  logit quality               build/bin/kv_quality against the f16 cache over the first
                              1,000 and 4,000 tokens of --text (the repository's docs by
                              default): max and mean relative logit error, top-1
                              agreement, and at clear margins (the GPU tests' rule)

    bench/kv_quant.py [--smollm2 M] [--gemma3 M] [--dtypes f16,q8_0,q4_0]
        [--depths 512,4000] [--smollm2-depths 512,4000,6000] [--rounds 8]
        [--quality-positions 1000,4000] [--skip quality,admit,decode] [--label NAME]

Prints a table and writes bench/results/<date>-<machine>-kv-quant[-LABEL].json with
the machine, CPU flags, commit, date and the load average before and after.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_meta  # noqa: E402
from bench_server import free_port, metrics, pick  # noqa: E402

MODELS = os.path.expanduser(os.environ.get("BRISK_CACHE_DIR", "~/.cache/brisk")) + "/models"


def loadavg():
    return [float(x) for x in open("/proc/loadavg").read().split()[:3]]


def admit(args, model, dtype):
    """The pool of 256 MiB and the 4,000-position sequences it admits at once, by the
    serving engine's own arithmetic: brisk serve --ctx 4000 --kv-cache-bytes 256M logs
    the pool's blocks and the most blocks one context holds at once (kv_cache_shape's
    seq_blocks: every full-attention group's blocks for 4,000 positions, a window and a
    step's worth for each window group), which is what admission reserves for a
    4,000-position sequence (sched_core.c's admit_one: blocks for every known token)."""
    port = free_port()
    log = f"/tmp/brisk-kv-quant-{os.getpid()}.log"
    cmd = [args.brisk, "serve", "--model", model, "--port", str(port), "--ctx", "4000",
           "--max-num-seqs", "64", "--kv-cache-bytes", "256M", "--kv-cache-dtype", dtype]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            text = open(log).read()
            m = re.search(r"KV cache ([\d.]+) MB (\S+) = (\d+) blocks x (\d+) positions x (\d+) layers, "
                          r"(\d+) block tables per sequence \((\d+) released behind sliding windows; "
                          r"one context holds at most (\d+) blocks\)", text)
            if m:
                break
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"brisk serve did not start:\n{text[-2000:]}")
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    mb, dt, n_blocks, bs, lpg, tables, windowed, ctx_blocks = m.groups()
    return {"kv_mb": float(mb), "dtype": dt, "blocks": int(n_blocks), "block_positions": int(bs),
            "layers_per_block": int(lpg), "tables": int(tables), "window_tables": int(windowed),
            "blocks_per_4000": int(ctx_blocks),
            "positions_256mib": int(n_blocks) * int(bs) // int(tables),
            "admitted_4000": int(n_blocks) // int(ctx_blocks)}


def decode(args, model, depths):
    """Decode tok/s per dtype at each depth: kv_quality --decode, every dtype's cache in
    one process, the dtypes taking turns round by round (best round each)."""
    r = subprocess.run([args.kv_quality, "--model", model, "--text", args.text, "--decode",
                        ",".join(map(str, depths)), "--dtypes", args.dtypes, "--steps", str(args.n_gen),
                        "--rounds", str(args.rounds)], capture_output=True, text=True, timeout=7200)
    if r.returncode != 0:
        raise SystemExit(f"kv_quality --decode failed: {r.stderr[-1500:]}")
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]


def bytes_per_pos(args, model, dtype):
    """K and V bytes of one cached position, every layer (brisk bench's figure)."""
    r = subprocess.run([args.brisk, "bench", "--model", model, "-p", "0", "-n", "1", "--reps", "1",
                        "--kv-cache-dtype", dtype], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"brisk bench failed: {r.stderr[-1500:]}")
    return json.loads(r.stdout)["kv_bytes_per_pos"]


def quality(args, model, positions):
    dts = ",".join(d for d in args.dtypes.split(",") if d != "f16")
    r = subprocess.run([args.kv_quality, "--model", model, "--text", args.text, "--positions", str(positions),
                        "--dtypes", dts], capture_output=True, text=True, timeout=7200)
    if r.returncode not in (0, 1):
        raise SystemExit(f"kv_quality failed: {r.stderr[-1500:]}")
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", default=f"{MODELS}/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--gemma3", default=f"{MODELS}/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--brisk", default=os.path.join(ROOT, "build", "bin", "brisk"))
    ap.add_argument("--kv-quality", default=os.path.join(ROOT, "build", "bin", "kv_quality"))
    ap.add_argument("--dtypes", default="f16,q8_0,q4_0")
    ap.add_argument("--depths", default="512,4000")
    ap.add_argument("--smollm2-depths", default="512,4000,6000")
    ap.add_argument("--n-gen", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--quality-positions", default="1000,4000")
    ap.add_argument("--text", default="")
    ap.add_argument("--skip", default="")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    skip = set(args.skip.split(",")) - {""}
    if not args.text:
        args.text = f"/tmp/brisk-kv-quant-{os.getpid()}.txt"
        with open(args.text, "w") as f:
            for p in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
                f.write(open(p).read())
    dtypes = args.dtypes.split(",")
    load0 = loadavg()
    out = {"dtypes": dtypes, "n_gen": args.n_gen, "rounds": args.rounds, "models": {}}
    for key, model in (("smollm2", args.smollm2), ("gemma3", args.gemma3)):
        if not os.path.exists(model):
            print(f"kv_quant: {model} not found; skipped")
            continue
        depths = [int(x) for x in (args.smollm2_depths if key == "smollm2" else args.depths).split(",")]
        res = {"model": os.path.basename(model), "dtypes": {d: {} for d in dtypes}}
        if "admit" not in skip:
            for d in dtypes:
                res["dtypes"][d]["pool"] = admit(args, model, d)
                print(f"{key} {d}: {res['dtypes'][d]['pool']}", flush=True)
        for d in dtypes:
            res["dtypes"][d]["kv_bytes_per_pos"] = bytes_per_pos(args, model, d)
        if "decode" not in skip:
            for j in decode(args, model, depths):
                res["dtypes"][j["dtype"]][f"decode_{j['depth']}"] = {
                    "tg_tok_s": j["tg_tok_s"], "vs_f16": j["vs_f16"], "steps": j["steps"],
                    "rounds": j["rounds"], "threads": j["threads"], "loadavg": j["loadavg"]}
                print(f"{key} depth {j['depth']} {j['dtype']}: {j['tg_tok_s']:.1f} tok/s ({j['vs_f16']}x f16), "
                      f"load {j['loadavg']}", flush=True)
        if "quality" not in skip:
            for n in [int(x) for x in args.quality_positions.split(",")]:
                for q in quality(args, model, n):
                    res["dtypes"][q["dtype"]][f"quality_{n}"] = q
                    print(f"{key} quality {n} {q['dtype']}: max {q['max_rel_logit_err']:.3g} mean "
                          f"{q['mean_rel_logit_err']:.3g} top-1 {q['top1_agree']:.3f}, clear "
                          f"{q['top1_agree_clear']:.3f} of {q['clear_positions']}", flush=True)
        out["models"][key] = res
    out["loadavg_before"], out["loadavg_after"] = load0, loadavg()
    out["cpu_threads"] = os.cpu_count()

    # The table.
    rows = []
    for key, res in out["models"].items():
        f16 = res["dtypes"].get("f16", {})
        for d, r in res["dtypes"].items():
            pool = r.get("pool", {})
            ratio = (f16.get("kv_bytes_per_pos") / r["kv_bytes_per_pos"]) if r.get("kv_bytes_per_pos") and \
                f16.get("kv_bytes_per_pos") else None
            dec = " | ".join(f"{r[k]['tg_tok_s']:.1f} ({r[k]['vs_f16']}x)" for k in sorted(
                (k for k in r if k.startswith("decode_")), key=lambda k: int(k.split("_")[1])))
            qual = " | ".join(f"{r[k]['mean_rel_logit_err']:.2e} / {r[k]['top1_agree'] * 100:.1f}% / "
                              f"{r[k]['top1_agree_clear'] * 100:.1f}% of {r[k]['clear_positions']}"
                              for k in sorted((k for k in r if k.startswith("quality_")),
                                              key=lambda k: int(k.split("_")[1])))
            rows.append(f"| {res['model']} | {d} | {r.get('kv_bytes_per_pos', '-')} | "
                        f"{ratio and f'{ratio:.3f}x' or '-'} | {pool.get('positions_256mib', '-')} | "
                        f"{pool.get('admitted_4000', '-')} | {dec or '-'} | {qual or '-'} |")
    print("| model | dtype | bytes/position | positions per byte vs f16 | positions in 256 MiB | "
          "4,000s admitted | decode tok/s at depths (vs f16) | quality vs f16 (mean rel err / top-1 / "
          "top-1 at clear margins) |")
    print("|---|---|---:|---:|---:|---:|---|---|")
    print("\n".join(rows))
    print(f"load average before {load0}, after {out['loadavg_after']}")
    kind = "kv-quant" + (f"-{args.label}" if args.label else "")
    path = bench_meta.write_result(kind, out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
