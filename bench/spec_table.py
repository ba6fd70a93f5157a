#!/usr/bin/env python3
"""spec_table.py - bench/spec_bench.py's JSON as the Markdown tables of
docs/SPECULATIVE.md.

    python3 bench/spec_table.py bench/results/<date>-<host>-spec-bench.json

Per cell and configuration: output tokens/s (the best round) and the ratios to
no speculation (median over the rounds of the paired runs): output tokens/s
(wall clock, prefill included), decode tokens/s (after the first token), and
output tokens per CPU-second of the server (the least disturbed by a shared
machine); output tokens per engine step; the acceptance rate."""
import json
import sys


def fmt(x, spec="{:.2f}"):
    return "—" if x is None else spec.format(x)


def rows(cells, names):
    out = []
    for c in cells:
        for n in names:
            v = c["configs"].get(n)
            if not v:
                continue
            out.append(f"| {c['workload']} | {c['streams']} | {n} | {v['tok_s']:.1f} | {fmt(v['ratio'])}x | "
                       f"{fmt(v['decode_ratio'])}x | {fmt(v['cpu_ratio'])}x | {fmt(v['tokens_per_step'])} | "
                       f"{fmt(v['acceptance'])} |")
    return out


def main():
    d = json.load(open(sys.argv[1]))
    head = ("| workload | streams | config | output tok/s | output ratio | decode ratio | CPU ratio | "
            "tokens/step | acceptance |\n|---|---:|---|---:|---:|---:|---:|---:|---:|")
    print(f"{d['date']}, commit {d['commit'][:12]}, {d['cpu']} ({', '.join(d['cpu_flags'])}), "
          f"{d.get('threads', 2)} threads, load average before {d['loadavg']['before']}, "
          f"after {d['loadavg']['after']}\n")
    for m in d["models"]:
        print(f"**{m['model']}** ({m['file']})\n")
        print(head)
        print("\n".join(rows(m["cells"], ["none", "ngram", "suffix"])))
        print()
    for p in d.get("draft_pairs", []):
        print(f"**{p['draft']} proposing for {p['target']}**\n")
        print(head)
        print("\n".join(rows(p["cells"], ["none", "draft", "fixed"])))
        print()


if __name__ == "__main__":
    main()
