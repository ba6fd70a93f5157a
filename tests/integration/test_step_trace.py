"""--step-trace against the real binary (stories260K): one JSON line per engine step with
every documented field, and the lines add up to what the requests sent and got: without
prefix caching the prefill tokens sum to the prompt tokens, the decode rows to the
completion tokens less one per request (a request's first token comes from its prompt's
last row, its last token is never fed back), the sampled rows to the completion tokens,
the constrained rows to the grammar's tokens plus min_tokens' banned rows, the log-prob
rows to that request's tokens; each step's tokens are its decode rows plus its prefill
tokens, within --max-num-batched-tokens. The lines reach the file when the engine goes
idle (while the server runs) and nothing is lost at shutdown. Also the start-up error for
a path that cannot be opened, on the command line and as BRISK_STEP_TRACE. About 2 s."""
import json
import time
from concurrent.futures import ThreadPoolExecutor

FIELDS = {
    "step": int, "t": float, "wall_ms": float, "sched_ms": float, "forward_ms": float,
    "mask_ms": float, "sample_ms": float, "host_ms": float, "gap_ms": float, "tokens": int,
    "decode_rows": int, "prefill_tokens": int, "prefill_chunks": int, "sampled": int,
    "constrained": int, "logprob_rows": int, "parked": int, "unparked": int,
    "admitted": int, "preempted": int,
    "running": int, "waiting": int, "kv_blocks_used": int, "kv_blocks_total": int,
    "pass": str, "spec_proposed": int, "spec_accepted": int, "spec_seqs": int,
}
BATCH = 24
LONG = "Once upon a time there was a little girl who liked to play in the park. " * 3
SENTENCE = r'root ::= "Once" " upon" [a-z ]{1,40} "."'


def read_lines(path):
    if not path.exists():
        return []
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), "a partial line"
    return [json.loads(ln) for ln in data.decode().splitlines()]


def test_step_trace_adds_up(start_server, stories260k_gguf, tmp_path):
    trace = tmp_path / "steps.jsonl"
    srv = start_server(stories260k_gguf, "--step-trace", trace, "--no-prefix-caching",
                       "--max-num-batched-tokens", BATCH, "--max-num-seqs", 4)
    reqs = [
        {"prompt": LONG, "max_tokens": 12, "temperature": 0, "ignore_eos": True},
        {"prompt": "Once", "max_tokens": 20, "temperature": 0.8, "seed": 1, "ignore_eos": True},
        {"prompt": "Once", "max_tokens": 30, "temperature": 0, "grammar": SENTENCE},
        {"prompt": "The cat", "max_tokens": 6, "temperature": 0, "logprobs": 2,
         "ignore_eos": True},
        {"prompt": "Lily", "max_tokens": 8, "temperature": 0.7, "seed": 3, "min_tokens": 5},
    ]
    with ThreadPoolExecutor(len(reqs)) as pool:
        resps = list(pool.map(lambda b: srv.post("/v1/completions", b), reqs))
    usage = []
    for r in resps:
        assert r.status == 200, r.body
        usage.append(r.json()["usage"])
    prompt = sum(u["prompt_tokens"] for u in usage)
    completion = sum(u["completion_tokens"] for u in usage)
    assert usage[4]["completion_tokens"] >= 5  # min_tokens

    # The engine writes its lines out when it goes idle: no shutdown needed.
    deadline = time.monotonic() + 10 * srv.slow
    lines = read_lines(trace)
    while sum(ln["sampled"] for ln in lines) < completion:
        assert time.monotonic() < deadline, f"{len(lines)} lines, not all steps traced"
        time.sleep(0.05)
        lines = read_lines(trace)

    assert lines and [ln["step"] for ln in lines] == list(range(1, len(lines) + 1))
    for ln in lines:
        assert set(ln) == set(FIELDS), ln
        for k, typ in FIELDS.items():
            assert isinstance(ln[k], (int, float) if typ is float else typ), (k, ln)
        assert ln["tokens"] == ln["decode_rows"] + ln["prefill_tokens"] and ln["tokens"] <= BATCH
        assert (ln["prefill_chunks"] > 0) == (ln["prefill_tokens"] > 0)
        assert ln["prefill_chunks"] <= ln["prefill_tokens"]
        assert ln["constrained"] <= ln["sampled"] and ln["logprob_rows"] <= ln["sampled"]
        assert ln["unparked"] <= ln["constrained"]
        assert ln["parked"] <= ln["decode_rows"] + ln["prefill_chunks"]
        assert ln["pass"] == "eager"  # the CPU backend
        assert 0 <= ln["kv_blocks_used"] <= ln["kv_blocks_total"]
        assert ln["wall_ms"] >= ln["forward_ms"] >= 0 and ln["wall_ms"] >= ln["sched_ms"] >= 0
        assert min(ln["mask_ms"], ln["sample_ms"], ln["host_ms"], ln["gap_ms"]) >= 0
    ts = [ln["t"] for ln in lines]
    assert ts == sorted(ts) and ts[0] >= 0

    assert sum(ln["prefill_tokens"] for ln in lines) == prompt
    assert sum(ln["decode_rows"] for ln in lines) == completion - len(reqs)
    assert sum(ln["sampled"] for ln in lines) == completion
    assert sum(ln["constrained"] for ln in lines) == usage[2]["completion_tokens"] + 5
    assert sum(ln["logprob_rows"] for ln in lines) == usage[3]["completion_tokens"]
    assert sum(ln["parked"] for ln in lines) == sum(ln["unparked"] for ln in lines)
    assert sum(ln["admitted"] for ln in lines) == len(reqs)
    # The long prompt took several chunks.
    assert usage[0]["prompt_tokens"] > 2 * BATCH
    assert sum(1 for ln in lines if ln["prefill_tokens"] > 0) >= 3

    srv.stop()  # nothing lost or added at shutdown
    assert read_lines(trace) == lines


def test_step_trace_start_errors(brisk, stories260k_gguf, tmp_path):
    bad = tmp_path / "missing-dir" / "steps.jsonl"
    for args, env in (((["--step-trace", bad]), None), ([], {"BRISK_STEP_TRACE": str(bad)})):
        r = brisk.run("serve", "--model", stories260k_gguf, "--port", "0", *args, env=env,
                      check=False, timeout=30)
        assert r.returncode == 1 and "step trace: cannot open" in r.err and "missing-dir" in r.err
