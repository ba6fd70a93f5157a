#!/usr/bin/env python3
"""moe_peer.py - a mixture-of-experts file on the CPU against a llama.cpp-family
llama-bench, side by side in one run (issue 40's benchmark), a table on stdout
and JSON in bench/results/<date>-<host>-moe-peer.json (machine, CPU and flags,
commit, date, load average).

    .venv-test/bin/python bench/moe_peer.py --model FILE.gguf \\
        [--llama-bench /path/to/llama-bench] [--threads 1,2] [-p 512] [-n 64] [--reps 3]

The file is any GGUF brisk runs; the issue's is a random-weight Qwen3-30B-A3B
shape of 24 layers in Q4_0 (bench/make_moe_gguf.py writes it, outside the
repository: 8.9 GB). llama-bench is not part of brisk: build it yourself from
ik_llama.cpp (older llama.cpp builds cannot load qwen3moe), outside this
repository. Per thread count, one after the other: llama-bench (prefill pp
and decode tg, its best repetition), then `brisk bench` (its best of --reps),
each under /usr/bin/time for its peak resident memory (loading and running).
Then serving: `brisk serve` on the file, brisk-bench's closed loop at 1 and at
4 concurrent streams (32-token prompts, 64 tokens out, ignore_eos), output
tokens/s, and the server's peak resident memory (VmHWM) at the end.
Also printed: brisk's bytes read per decode token (the active-parameter
roofline: attention, router, the 8 experts a token picks, norms, output) and
the read bandwidth `brisk bench` measures."""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_meta  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def timed(cmd):
    """Runs cmd under /usr/bin/time; (stdout, peak RSS in bytes)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf.name] + cmd, capture_output=True,
                           text=True)
        if p.returncode != 0:
            raise SystemExit(f"moe_peer: {' '.join(cmd)} failed ({p.returncode}): {p.stderr[-800:]}")
        rss_kb = int(open(tf.name).read().strip().splitlines()[-1])
    return p.stdout, rss_kb * 1024


def llama_run(binary, model, threads, pp, tg, reps):
    out, rss = timed([binary, "-m", model, "-t", str(threads), "-p", str(pp), "-n", str(tg), "-r", str(reps),
                      "-o", "json"])
    res = json.loads(out)

    def best(n_prompt, n_gen):
        for r in res:
            if r.get("n_prompt") == n_prompt and r.get("n_gen") == n_gen:
                return max(r.get("samples_ts") or [r.get("avg_ts", 0.0)])
        return None

    build = f'{res[0].get("build_commit")} (build {res[0].get("build_number")})' if res else None
    return {"pp_tok_s": best(pp, 0), "tg_tok_s": best(0, tg), "peak_rss": rss, "build": build}


def brisk_run(binary, model, threads, pp, tg, reps):
    out, rss = timed([binary, "bench", "--model", model, "--threads", str(threads), "-p", str(pp), "-n", str(tg),
                      "--reps", str(reps)])
    res = json.loads(out)
    res["peak_rss"] = rss
    return res


def serve_sweep(binary, bench_bin, model, threads, out_len):
    """1 and 4 streams against one brisk serve; (rows, server's VmHWM)."""
    log = tempfile.NamedTemporaryFile(prefix="moe-peer-serve-", suffix=".log", delete=False)
    port = 18000 + os.getpid() % 1000
    srv = subprocess.Popen([binary, "serve", "--model", model, "--threads", str(threads), "--port", str(port),
                            "--max-num-seqs", "8", "--ctx", "512"], stdout=log, stderr=subprocess.STDOUT)
    try:
        t0 = time.time()
        while True:
            if srv.poll() is not None:
                raise SystemExit(f"moe_peer: brisk serve exited; see {log.name}")
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if time.time() - t0 > 600:
                raise SystemExit("moe_peer: brisk serve did not come up in 10 minutes")
            time.sleep(1)
        rows = []
        for conc in (1, 4):
            with tempfile.NamedTemporaryFile("r", suffix=".json") as jf:
                subprocess.run([bench_bin, "--base-url", f"http://127.0.0.1:{port}", "--input-len", "32",
                                "--output-len", str(out_len), "--max-concurrency", str(conc), "--num-prompts",
                                str(2 * conc + 2), "--warmup", "1", "--json", jf.name], check=True,
                               capture_output=True, text=True)
                rows.append({"streams": conc, "report": json.load(open(jf.name))})
        status = open(f"/proc/{srv.pid}/status").read()
        hwm = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024
        return rows, hwm
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            srv.kill()


def output_tok_s(report):
    """brisk-bench's output tokens/s, wherever its JSON keeps it."""
    def find(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k in ("output_throughput", "output_tok_s", "output_tokens_per_s") and isinstance(v, (int, float)):
                    return float(v)
            for v in o.values():
                r = find(v)
                if r is not None:
                    return r
        elif isinstance(o, list):
            for v in o:
                r = find(v)
                if r is not None:
                    return r
        return None
    return find(report)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--brisk", default=str(REPO / "build" / "bin" / "brisk"))
    ap.add_argument("--brisk-bench", default=str(REPO / "build" / "bin" / "brisk-bench"))
    ap.add_argument("--llama-bench", default=os.environ.get("LLAMA_BENCH"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-serve", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    load0 = loadavg()
    size = os.path.getsize(a.model)
    rows = []
    for t in [int(x) for x in a.threads.split(",")]:
        row = {"threads": t}
        if a.llama_bench:
            print(f"moe_peer: llama-bench -t {t} ...", file=sys.stderr, flush=True)
            row["peer"] = llama_run(a.llama_bench, a.model, t, a.p, a.n, a.reps)
        print(f"moe_peer: brisk bench -t {t} ...", file=sys.stderr, flush=True)
        row["brisk"] = brisk_run(a.brisk, a.model, t, a.p, a.n, a.reps)
        rows.append(row)
    serving = None
    if not a.no_serve:
        print("moe_peer: brisk serve, 1 and 4 streams ...", file=sys.stderr, flush=True)
        srows, hwm = serve_sweep(a.brisk, a.brisk_bench, a.model, max(int(x) for x in a.threads.split(",")), 64)
        serving = {"rows": srows, "peak_rss": hwm}
    res = {"model": Path(a.model).name, "file_bytes": size, "pp": a.p, "tg": a.n, "reps": a.reps,
           "rows": rows, "serving": serving, "loadavg": {"before": load0, "after": loadavg()}}
    path = bench_meta.write_result("moe-peer", res, a.out)

    cpu, flags = bench_meta.cpu_model_and_flags()
    gb = 1e9
    print(f"{cpu} ({' '.join(flags)}); {Path(a.model).name}, {size / gb:.2f} GB; load {load0} -> {loadavg()}")
    peer = next((r["peer"]["build"] for r in rows if r.get("peer")), None)
    if peer:
        print(f"peer: llama-bench {peer}")
    print(f"\n| threads | peer pp{a.p} / tg{a.n} | brisk pp / tg | pp ratio | tg ratio | bytes/token | "
          f"tg roofline | peak RSS brisk / peer (x file) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    fmt = lambda v: f"{v:.1f}" if v else "-"
    for r in rows:
        b, p = r["brisk"], r.get("peer") or {}
        bp, bt, lp, lt = b.get("pp_tok_s"), b.get("tg_tok_s"), p.get("pp_tok_s"), p.get("tg_tok_s")
        bpt = b.get("weight_bytes")  # the bytes a decode token reads: active parameters only
        peer_rss = f"{p['peak_rss'] / size:.2f}x" if p else "-"
        print(f"| {r['threads']} | {fmt(lp)} / {fmt(lt)} | {fmt(bp)} / {fmt(bt)} | "
              f"{f'{bp / lp:.2f}x' if bp and lp else '-'} | {f'{bt / lt:.2f}x' if bt and lt else '-'} | "
              f"{f'{bpt / gb:.3f} GB' if bpt else '-'} | {fmt(b.get('tg_roofline_tok_s'))} | "
              f"{b['peak_rss'] / size:.2f}x / {peer_rss} |")
    if serving:
        one, four = (output_tok_s(x["report"]) for x in serving["rows"])
        print(f"\nserving (-t {max(r['threads'] for r in rows)}): 1 stream {fmt(one)} output tok/s, 4 streams "
              f"{fmt(four)}: {f'{four / one:.2f}x' if one and four else '-'}; server peak RSS "
              f"{serving['peak_rss'] / size:.2f}x the file")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
