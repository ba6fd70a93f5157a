#!/usr/bin/env python3
"""gpu_validate.py - validates a bench/gpu.sh run's structured outputs with
jsonschema, on a machine that has it (the GPU machine has no package registry),
and writes the verdict into the run's summary.json.

    .venv-test/bin/python bench/gpu_validate.py OUTDIR

OUTDIR is the run's output folder: structured.jsonl (one line per request of
bench/gpu_check.py structured: the schema, the API, the finish reason and the
text) and summary.json (bench/gpu_report.py's). Every output that ended with
"stop" must parse as JSON and validate against its schema; outputs cut at
max_tokens are counted, not validated; at least half of each API's outputs
must have ended with "stop" (the CPU tests' rule, test_structured.py).

summary.json gets issue33.item3.structured_validation (the counts and the
first failures) and item 3's verdict is recomputed with it; until this has
run, item 3 says "pending validation". Prints one line per API; exit 0 when
every output validates, 1 otherwise, 2 when the files are missing.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_report import item_status  # noqa: E402  (one rule for an item's status)

try:
    import jsonschema
except ImportError:
    jsonschema = None


def jsonschema_version():
    import importlib.metadata
    try:
        return importlib.metadata.version("jsonschema")
    except importlib.metadata.PackageNotFoundError:
        return None


def validate(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    res = {"file": os.path.basename(path), "jsonschema": jsonschema_version(),
           "apis": {}}
    ok = bool(rows)
    for api in sorted({r["api"] for r in rows}):
        rs = [r for r in rows if r["api"] == api]
        bad, valid, stops = [], 0, 0
        for r in rs:
            if r.get("error") or r.get("finish_reason") != "stop":
                continue
            stops += 1
            try:
                jsonschema.validate(json.loads(r["text"]), r["schema"])
                valid += 1
            except (ValueError, jsonschema.ValidationError, jsonschema.SchemaError) as e:
                bad.append({"i": r["i"], "text": (r["text"] or "")[:200],
                            "error": str(e).splitlines()[0][:300]})
        a = {"requests": len(rs), "stop": stops, "valid": valid, "invalid": bad[:10],
             "n_invalid": len(bad), "errors": sum(bool(r.get("error")) for r in rs)}
        a["passed"] = not bad and not a["errors"] and 2 * stops >= len(rs)
        ok &= a["passed"]
        res["apis"][api] = a
        print(f"gpu_validate: {api}: {valid} of {stops} finished outputs validate "
              f"({len(rs)} requests, {a['errors']} failed): {'ok' if a['passed'] else 'FAIL'}")
        for b in bad[:3]:
            print(f"gpu_validate:   schema {b['i']}: {b['error']}: {b['text']!r}")
    res["passed"] = ok
    return res


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = sys.argv[1]
    jl, sj = os.path.join(out, "structured.jsonl"), os.path.join(out, "summary.json")
    if not os.path.exists(jl) or not os.path.exists(sj):
        print(f"gpu_validate: {out} has no structured.jsonl or summary.json", file=sys.stderr)
        return 2
    if jsonschema is None:
        print("gpu_validate: the jsonschema package is missing (.venv-test has it)", file=sys.stderr)
        return 2
    res = validate(jl)
    s = json.load(open(sj))
    item3 = s.setdefault("issue33", {}).setdefault("item3", {})
    item3["structured_validation"] = res
    # Item 3 passes when every part the run judged passed and the outputs validate.
    parts = item3.get("parts", {})
    parts["structured_valid"] = res["passed"]
    item3["parts"] = parts
    item3["status"] = item_status(parts)
    with open(sj, "w") as f:
        json.dump(s, f, indent=1)
    print(f"gpu_validate: item 3 (embeddings, structured outputs, the 64-stream pair): "
          f"{item3['status']} {parts}")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
