#!/usr/bin/env python3
"""spec_bench.py - speculative decoding on the CPU, with and without, side by
side in one run (issue 37's targets), a table on stdout and JSON in
bench/results/<date>-<host>-spec-bench.json (machine, CPU and flags, commit,
date, load average).

    .venv-test/bin/python bench/spec_bench.py [--quick] [--streams 1,4,16] [--rounds 2]
                                              [--no-draft | --draft-only] [--out FILE]

Workloads, three kinds:
  input-grounded  code_edit (rename a function in a given C file, output the
                  file), quote_summary (summarise a given text quoting it),
                  json_extract (an invoice's fields as JSON); temperature 0
  open chat       open_chat: stories and explanations, temperature 0.7, seeded
  agent loop      agent_loop: a JSON tool-calling agent, three turns a stream,
                  each turn's history the previous ones (temperature 0)
each at 1, 4 and 16 concurrent streams (a stream runs its requests one after
another), served by SmolLM2-135M (the Q4_1 file) with no speculation, ngram
and suffix, the servers up together and the configurations interleaved
round by round (the machine is shared: a ratio is the median over the rounds
of the run against the baseline's run of the same round; 16 streams answer at
most 64 tokens);
Gemma 3 270M the same when its file is in the model cache. Draft-model
pairs (bench/make_draft_pair.py's files): SmolLM2 Q4_0 proposing for F16
and for F32, one stream, code_edit and open_chat. Per cell: output tokens/s,
the ratio to no speculation, the acceptance rate and mean accepted length
(vllm:spec_decode_*), and output tokens per engine step.

--measure-threshold: the compute-bound point instead (the policy's CPU
threshold and cost, scheduler/spec.h): `brisk bench` prefill of N tokens for
N in 1..64, interleaved rounds, best of each: the step time against its
tokens."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_meta  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("BRISK_CACHE_DIR", Path.home() / ".cache" / "brisk")) / "models"
SPEC = {
    "ngram": '{"method":"ngram","num_speculative_tokens":8,"prompt_lookup_min":2,"prompt_lookup_max":5}',
    "suffix": '{"method":"suffix","num_speculative_tokens":8}',
}

# ---- servers -------------------------------------------------------------------------


class Server:
    def __init__(self, brisk, model, args, name):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"spec-bench-{name}-", suffix=".log", delete=False)
        argv = [brisk, "serve", "--model", str(model), "--port", "0", "--served-model-name", "m"] + args
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = None
        for _ in range(1200):
            text = Path(self.log.name).read_text(errors="replace")
            m = re.search(r"listening on (http://\S+)", text)
            if m:
                self.url = m.group(1)
            if self.url:
                try:
                    urllib.request.urlopen(self.url + "/health", timeout=2)
                    return
                except Exception:
                    pass
            if self.proc.poll() is not None:
                raise SystemExit(f"spec_bench: server {name} exited:\n{text[-2000:]}")
            time.sleep(0.1)
        raise SystemExit(f"spec_bench: server {name} did not start")

    def post_stream(self, path, body):
        """Streams one request: (completion tokens, time of the first token, time of the end)."""
        body = dict(body, stream=True, stream_options={"include_usage": True})
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t_first = usage = None
        with urllib.request.urlopen(req, timeout=900) as r:
            for line in r:
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                ev = json.loads(data)
                if ev.get("usage"):
                    usage = ev["usage"]
                for ch in ev.get("choices") or []:
                    piece = ch.get("text") or (ch.get("delta") or {}).get("content")
                    if piece and t_first is None:
                        t_first = time.perf_counter()
        return usage["completion_tokens"], t_first, time.perf_counter()

    def metrics(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r"^([a-z_:]+)\{[^}]*\} ([0-9.e+-]+)$", line)
            if m and "position=" not in line:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
        return out

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.unlink(self.log.name)


# ---- workloads: each gives a stream's requests ---------------------------------------

def c_files():
    # 30 lines to 2,800 bytes (~800 tokens): a prompt that fits the context
    # with its answer, and a prefill that does not drown the decode.
    files = [p for d in ("scheduler", "common", "kv", "cli") for p in sorted((REPO / d).glob("*.c"))
             if len(p.read_text().splitlines()) >= 30 and len(p.read_bytes()) <= 2800]
    return files


def code_edit(i):
    files = c_files()
    src = files[i % len(files)].read_text()
    names = re.findall(r"^(?:static )?(?:int|void|double|size_t|const char \*|long) \*?(\w+)\(", src, re.M)
    old = names[0] if names else "main"
    msg = (f"Here is a C file:\n\n```c\n{src}```\n\nRename the function {old} to {old}_v2 everywhere "
           f"and output the whole file, otherwise unchanged.")
    return [("/v1/chat/completions", {"messages": [{"role": "user", "content": msg}], "max_tokens": 160,
                                      "temperature": 0})]


def doc_sections():
    out = []
    for p in sorted((REPO / "docs").glob("*.md")):
        for para in p.read_text().split("\n\n"):
            words = para.split()
            if 120 <= len(words) <= 260 and not para.lstrip().startswith(("|", "```", "#")):
                out.append(para)
    return out


def quote_summary(i):
    secs = doc_sections()
    text = secs[(i * 7) % len(secs)]
    msg = ("Summarise the following text in a few sentences. Quote its key sentences word for word, "
           f"in quotation marks.\n\n{text}")
    return [("/v1/chat/completions", {"messages": [{"role": "user", "content": msg}], "max_tokens": 128,
                                      "temperature": 0})]


def json_extract(i):
    names = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov",
             "Donald Knuth", "Frances Allen", "Ken Thompson"]
    items = [("keyboard", 2, 49.9), ("monitor", 1, 219.0), ("mouse", 3, 19.5), ("cable", 5, 4.25),
             ("laptop stand", 1, 35.0), ("webcam", 2, 64.0)]
    pick = [items[(i + k) % len(items)] for k in range(3 + i % 3)]
    lines = "\n".join(f"  {q} x {n} at ${p:.2f} each = ${q * p:.2f}" for n, q, p in pick)
    total = sum(q * p for _, q, p in pick)
    doc = (f"INVOICE No. {1000 + i}\nDate: 2026-0{1 + i % 9}-{10 + i % 18}\nCustomer: {names[i % len(names)]}\n"
           f"Address: {12 + i} Long Street, Cambridge\nItems:\n{lines}\nTotal due: ${total:.2f}\n"
           "Payment within 30 days.")
    msg = ("Extract from this invoice, as a JSON object, the fields customer, date, total and items "
           f"(each with name, quantity and price):\n\n{doc}")
    return [("/v1/chat/completions", {"messages": [{"role": "user", "content": msg}], "max_tokens": 128,
                                      "temperature": 0})]


def open_chat(i):
    asks = ["Write a short story about a robot who learns to paint.", "Explain how a rainbow forms.",
            "What should I pack for a weekend hiking trip?", "Describe the water cycle to a child.",
            "Give me three ideas for a birthday party.", "Why do cats purr?",
            "Write a poem about the sea at night.", "How do airplanes stay in the air?"]
    return [("/v1/chat/completions", {"messages": [{"role": "user", "content": asks[i % len(asks)]}],
                                      "max_tokens": 128, "temperature": 0.7, "seed": 100 + i})]


AGENT_SYSTEM = ("You are a coding agent. To act, answer with exactly one JSON object: "
                '{"tool": NAME, "args": {...}}. Tools: list_files {"dir": PATH}, read_file {"path": PATH}, '
                'run_tests {"target": NAME}. After each result, call the next tool.')


def agent_loop(i):
    reqs, hist = [], [{"role": "system", "content": AGENT_SYSTEM},
                      {"role": "user", "content": f"Fix the failing test in module m{i % 5}."}]
    for t in range(3):
        msgs = list(hist)
        reqs.append(("/v1/chat/completions", {"messages": msgs, "max_tokens": 64, "temperature": 0}))
        call = ('{"tool": "read_file", "args": {"path": "src/m%d/part%d.c"}}' % (i % 5, t))
        hist += [{"role": "assistant", "content": call},
                 {"role": "user", "content": f"Result: file src/m{i % 5}/part{t}.c has 120 lines; "
                                             f"the test t{t} fails at line {40 + t}."}]
    return reqs


WORKLOADS = [("input-grounded", "code_edit", code_edit), ("input-grounded", "quote_summary", quote_summary),
             ("input-grounded", "json_extract", json_extract), ("open chat", "open_chat", open_chat),
             ("agent loop", "agent_loop", agent_loop)]

# ---- one measurement -------------------------------------------------------------------


def measure(srv, workload, streams):
    """One level: `streams` streams at once, each running its requests in
    turn. tok_s: output tokens over the wall time (vLLM's output throughput,
    prefill included); decode_tok_s: the streams' decode rates summed (tokens
    after the first over the time after the first token: what speculation
    speeds up)."""
    m0 = srv.metrics()
    toks = [0] * streams
    dec = [[0, 0.0] for _ in range(streams)]  # per stream: tokens after the first, their time
    errs = []

    def stream(k):
        try:
            for path, body in workload(k):
                if streams >= 16:  # 16 streams on 2 cores: shorter answers, the same shape
                    body = dict(body, max_tokens=min(body["max_tokens"], 64))
                n, t_first, t_end = srv.post_stream(path, dict(body, model="m"))
                toks[k] += n
                if t_first is not None and n > 1:
                    dec[k][0] += n - 1
                    dec[k][1] += t_end - t_first
        except Exception as e:  # a failed request fails the bench, loudly
            errs.append(repr(e))

    t0 = time.perf_counter()
    th = [threading.Thread(target=stream, args=(k,)) for k in range(streams)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    if errs:
        raise SystemExit(f"spec_bench: {srv.name}: {errs[0]}")
    m1 = srv.metrics()
    d = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in m1}
    drafts = d.get("vllm:spec_decode_num_drafts_total", 0.0)
    dt = d.get("vllm:spec_decode_num_draft_tokens_total", 0.0)
    acc = d.get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
    steps = d.get("brisk_engine_steps_total", 0.0)
    cpu = d.get("process_cpu_seconds_total", 0.0)
    return {"tokens": sum(toks), "wall_s": wall, "tok_s": sum(toks) / wall,
            "decode_tok_s": sum(d[0] / d[1] for d in dec if d[1] > 0),
            # the server's CPU time per output token: less sensitive than the wall
            # clock to what else the shared machine runs
            "tok_per_cpu_s": sum(toks) / cpu if cpu > 0 else None,
            "acceptance": acc / dt if dt else None,
            "mean_accepted_len": 1 + acc / drafts if drafts else None,
            "tokens_per_step": d.get("vllm:generation_tokens_total", 0.0) / steps if steps else None}


def compare(servers, workloads, streams_list, rounds, log):
    """servers: {config: Server}; the first is the baseline. Returns the cells."""
    cells = []
    names = list(servers)
    for kind, wname, wl in workloads:
        for streams in streams_list:
            runs = {c: [] for c in names}
            # Rounds in a rotating order; a configuration's ratio is the median
            # over the rounds of its run against the baseline's run of the same
            # round (close in time, so under about the same load from the
            # shared machine), its figures the best round's.
            for r in range(rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for cfg in order:
                    runs[cfg].append(measure(servers[cfg], wl, streams))

            def med(v):
                v = sorted(v)
                return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2

            def paired(c, key):
                v = [x[key] / y[key] for x, y in zip(runs[c], runs[names[0]]) if x[key] and y[key]]
                return med(v) if v else None

            configs = {}
            for c in names:
                best = max(runs[c], key=lambda x: x["tok_s"])
                configs[c] = dict(best, ratio=paired(c, "tok_s"), decode_ratio=paired(c, "decode_tok_s"),
                                  cpu_ratio=paired(c, "tok_per_cpu_s"),
                                  rounds=[{k: x[k] for k in ("tok_s", "decode_tok_s", "tok_per_cpu_s")}
                                          for x in runs[c]])
            cell = {"kind": kind, "workload": wname, "streams": streams, "configs": configs}
            cells.append(cell)
            log(cell)
    return cells


def fmt_cell(cell):
    parts = [f"{cell['workload']:<14} {cell['streams']:>3}"]
    for c, v in cell["configs"].items():
        a = f" acc {v['acceptance']:.2f}" if v["acceptance"] is not None else ""
        parts.append(f"{c} {v['tok_s']:6.1f} tok/s {v['ratio']:.2f}x, decode {v['decode_tok_s']:6.1f} "
                     f"{v['decode_ratio'] or 0:.2f}x, cpu {v['cpu_ratio'] or 0:.2f}x "
                     f"({v['tokens_per_step'] or 0:.2f}/step{a})")
    return " | ".join(parts)


def loadavg():
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


# ---- the compute-bound threshold -----------------------------------------------------

def measure_threshold(brisk, model, threads, rounds):
    sizes = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    best = {}
    for _ in range(rounds):
        for n in sizes:
            p = subprocess.run([brisk, "bench", "--model", str(model), "-p", str(n), "-n", "0", "--reps", "5",
                                "--threads", str(threads)], capture_output=True, text=True)
            if p.returncode:
                raise SystemExit(p.stderr[-2000:])
            tps = json.loads(p.stdout)["pp_tok_s"]
            t = n / tps
            best[n] = min(best.get(n, t), t)
    t1 = best[1]
    rows = [{"tokens": n, "step_ms": best[n] * 1e3, "vs_one_token": best[n] / t1,
             "marginal_cost": (best[n] - t1) / ((n - 1) * t1) if n > 1 else None} for n in sizes]
    return rows


def main():
    import signal
    # A SIGTERM stops the servers too (the finally blocks run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--brisk", default=str(REPO / "build" / "bin" / "brisk"))
    ap.add_argument("--model", default=str(CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="1 round, 1 and 4 streams, no draft pairs")
    ap.add_argument("--no-draft", action="store_true")
    ap.add_argument("--draft-only", action="store_true", help="the draft-model pairs alone")
    ap.add_argument("--measure-threshold", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    load0 = loadavg()
    if a.measure_threshold:
        rows = measure_threshold(a.brisk, a.model, a.threads, a.rounds)
        for r in rows:
            print(f"{r['tokens']:>3} tokens: {r['step_ms']:7.2f} ms, {r['vs_one_token']:.2f}x a one-token step"
                  + (f", marginal {r['marginal_cost']:.3f} of it a token" if r["marginal_cost"] else ""))
        path = bench_meta.write_result("spec-threshold", {"model": Path(a.model).name, "threads": a.threads,
                                                           "rows": rows, "loadavg": [load0, loadavg()]}, a.out)
        print(f"spec_bench: {path}")
        return
    streams = [1, 4] if a.quick else [int(x) for x in a.streams.split(",")]
    rounds = 1 if a.quick else a.rounds
    common = ["--threads", str(a.threads), "--max-num-seqs", "16", "--ctx", "2048", "--kv-cache-bytes", "512M"]
    results = {"models": [], "draft_pairs": []}

    def log(cell):
        print(fmt_cell(cell), flush=True)

    models = [("SmolLM2-135M Q4_1", Path(a.model))]
    gemma = sorted(CACHE.glob("gemma-3-270m*.gguf")) + sorted(CACHE.glob("*gemma*3*270*.gguf"))
    if gemma:
        models.append(("Gemma 3 270M", gemma[0]))
    else:
        results["gemma"] = "not in the model cache: not measured"
    for label, path in [] if a.draft_only else models:
        print(f"== {label} ({path.name}): none, ngram, suffix", flush=True)
        servers = {"none": Server(a.brisk, path, common, "none")}
        for m in ("ngram", "suffix"):
            servers[m] = Server(a.brisk, path, common + ["--speculative-config", SPEC[m]], m)
        try:
            # Gemma's steps are slower (a 262K vocabulary): one round fewer.
            cells = compare(servers, WORKLOADS, streams, rounds if path == Path(a.model) else max(2, rounds - 1),
                            log)
        finally:
            for s in servers.values():
                s.stop()
        results["models"].append({"model": label, "file": path.name, "cells": cells})
    pairs = [("F16", CACHE / "SmolLM2-135M-Instruct.F16.gguf"), ("F32", CACHE / "SmolLM2-135M-Instruct.F32.gguf")]
    draft = CACHE / "SmolLM2-135M-Instruct.Q4_0.gguf"
    if not a.quick and not a.no_draft and draft.exists():
        for tgt, path in pairs:
            if not path.exists():
                continue
            print(f"== draft pair: SmolLM2 Q4_0 proposing for {tgt}", flush=True)
            dargs = common + ["--model-draft", str(draft), "--draft-max", "8"]
            # "draft": the policy's choice (it proposes when the measured cost
            # pays); "fixed": 8 proposals every step, the acceptance and the
            # cost of drafting whatever it pays.
            servers = {"none": Server(a.brisk, path, common, f"{tgt}-none"),
                       "draft": Server(a.brisk, path, dargs, f"{tgt}-draft"),
                       "fixed": Server(a.brisk, path, dargs + ["--spec-fixed-length"], f"{tgt}-fixed")}
            try:
                cells = compare(servers, [WORKLOADS[0], WORKLOADS[3]], [1], max(2, rounds - 1), log)
            finally:
                for s in servers.values():
                    s.stop()
            results["draft_pairs"].append({"target": f"SmolLM2 {tgt}", "draft": "SmolLM2 Q4_0", "cells": cells})
    elif not draft.exists():
        results["draft_pairs_note"] = "bench/make_draft_pair.py's files are missing: not measured"
    results["loadavg"] = {"before": load0, "after": loadavg()}
    results["threads"] = a.threads
    path = bench_meta.write_result("spec-bench", results, a.out)
    print(f"spec_bench: load average before {load0}, after {loadavg()}; {path}")


if __name__ == "__main__":
    main()
