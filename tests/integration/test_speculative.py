"""Speculative decoding through `brisk serve` (docs/SPECULATIVE.md): with ngram,
suffix and a draft model, every request gives the tokens, log-probs, texts and
finish reasons it gives without speculation, on SmolLM2 and stories260K:
greedy (bit for bit, log-probs included), seeded sampling with top-p and
penalties, streamed and not, n = 2, a grammar, stop strings, min_tokens, chat
with log-probs, and a KV pool small enough to preempt; the servers did
speculate (vllm:spec_decode_* counters, brisk-bench's acceptance figures);
and the option checks at start: both forms at once, an unknown method, a
draft whose vocabulary differs (named by its first differing token), the
BRISK_ variable."""
import json
import subprocess

import pytest
from conftest import metric_value

SPEC = {
    "ngram": '{"method":"ngram","num_speculative_tokens":6,"prompt_lookup_min":2,"prompt_lookup_max":4}',
    "suffix": '{"method":"suffix","num_speculative_tokens":6}',
}
NAMED = ["--served-model-name", "m", "--chat-template", "chatml"]
# Speculate whatever the batch and the acceptance (the tests are about
# exactness, not the policy).
ALWAYS = ["--spec-max-batch-tokens", "256", "--spec-fixed-length"]

CODE = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
        "def mul(a, b):\n    return a * b\n\n\n")
QUOTE = ("The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy "
         "dog. Repeat the sentence: The quick brown fox")
GRAMMAR = 'root ::= ("yes" | "no") (", " ("yes" | "no"))*'


def requests_for(model):
    """The requests every server answers; each a (path, body)."""
    base = {"model": model}
    return [
        ("/v1/completions", dict(base, prompt=CODE, max_tokens=48, temperature=0, logprobs=2)),
        ("/v1/completions", dict(base, prompt=QUOTE, max_tokens=40, temperature=0)),
        ("/v1/completions", dict(base, prompt=CODE, max_tokens=40, temperature=0.8, top_p=0.9, seed=3,
                                 n=2)),
        ("/v1/completions", dict(base, prompt=QUOTE, max_tokens=40, temperature=0.7, seed=5,
                                 frequency_penalty=0.4, repetition_penalty=1.15, stream=True)),
        ("/v1/completions", dict(base, prompt=QUOTE, max_tokens=40, temperature=0, stop=["lazy", "dog."])),
        ("/v1/completions", dict(base, prompt="Answer: ", max_tokens=24, temperature=0.9, seed=11,
                                 grammar=GRAMMAR)),
        ("/v1/completions", dict(base, prompt=CODE, max_tokens=30, temperature=0, min_tokens=20,
                                 stop_token_ids=[198])),
        ("/v1/chat/completions", dict(base, messages=[{"role": "user", "content": "Repeat: " + QUOTE}],
                                      max_tokens=32, temperature=0.6, seed=7, logprobs=True,
                                      top_logprobs=2)),
    ]


def answer(srv, path, body):
    """The parts of an answer speculation must not change."""
    if body.get("stream"):
        conn, status, headers = srv.stream(path, body)
        assert status == 200
        text, finish = {}, {}
        for ev in conn.iter_sse(headers):
            if ev == "[DONE]":
                break
            for ch in json.loads(ev)["choices"]:
                text[ch["index"]] = text.get(ch["index"], "") + (ch.get("text") or "")
                if ch.get("finish_reason"):
                    finish[ch["index"]] = ch["finish_reason"]
        conn.close()
        return [(text[i], finish.get(i)) for i in sorted(text)]
    r = srv.post(path, body)
    assert r.status == 200, r.body
    out = []
    for ch in sorted(r.json()["choices"], key=lambda c: c["index"]):
        text = ch["text"] if "text" in ch else ch["message"]["content"]
        out.append((text, ch["finish_reason"], json.dumps(ch.get("logprobs"), sort_keys=True)))
    return out


def run_all(srv, model):
    return [answer(srv, p, b) for p, b in requests_for(model)]


def spec_counters(srv):
    s = srv.metrics()
    return (metric_value(s, "vllm:spec_decode_num_draft_tokens_total"),
            metric_value(s, "vllm:spec_decode_num_accepted_tokens_total"))


@pytest.fixture(scope="module")
def stories_want(start_server, stories260k_gguf):
    srv = start_server(stories260k_gguf, *NAMED)
    want = run_all(srv, "m")
    srv.stop()
    return want


@pytest.mark.parametrize("method", ["ngram", "suffix", "draft"])
def test_stories_outputs_unchanged(start_server, stories260k_gguf, stories_want, method, report):
    spec = (["--model-draft", str(stories260k_gguf), "--draft-max", "5"] if method == "draft"
            else ["--speculative-config", SPEC[method]])
    srv = start_server(stories260k_gguf, *NAMED, *spec, *ALWAYS)
    got = run_all(srv, "m")
    for i, (g, w) in enumerate(zip(got, stories_want)):
        body = requests_for("m")[i][1]
        if method == "draft" and body["temperature"] > 0:
            # Rejection sampling keeps the distribution, not the tokens; the
            # same request again gives the same tokens (docs/SPECULATIVE.md).
            assert answer(srv, *requests_for("m")[i]) == g, f"request {i}: not reproduced"
            continue
        assert g == w, f"request {i} ({body}) differs with {method}"
    proposed, accepted = spec_counters(srv)
    assert proposed > 0 and 0 < accepted <= proposed
    report(f"spec stories260K {method}: {accepted:.0f} of {proposed:.0f} proposals kept, "
           f"{len(got)} requests unchanged")
    srv.stop()


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ngram", "suffix", "draft"])
def test_smollm2_outputs_unchanged(start_server, smollm2_path, method, report):
    base = start_server(smollm2_path, *NAMED)
    want = run_all(base, "m")
    base.stop()
    spec = (["--speculative-config",
             json.dumps({"method": "draft_model", "model": str(smollm2_path), "num_speculative_tokens": 4})]
            if method == "draft" else ["--speculative-config", SPEC[method]])
    srv = start_server(smollm2_path, *NAMED, *spec, *ALWAYS)
    got = run_all(srv, "m")
    for i, (g, w) in enumerate(zip(got, want)):
        if method == "draft" and requests_for("m")[i][1]["temperature"] > 0:
            assert answer(srv, *requests_for("m")[i]) == g, f"request {i}: not reproduced"
            continue
        assert g == w, f"request {i} differs with {method}"
    proposed, accepted = spec_counters(srv)
    assert proposed > 0 and accepted > 0
    report(f"spec SmolLM2 {method}: {accepted:.0f} of {proposed:.0f} proposals kept, outputs unchanged")
    srv.stop()


STORIES_BLOCK_BYTES = 5 * 32 * 2 * 2 * 16  # f16 K/V, 16 positions


def test_preemption_with_speculation(start_server, stories260k_gguf):
    """16 sequences in a pool for 4, speculating: preempted, and the same texts."""
    prompts = [f"Once upon a time, {w} went to the park and" for w in
               ["Lily", "Tom", "a dog", "Ben", "the sun", "a cat", "Sue", "a bird"]] * 2

    def run(srv):
        r = srv.post("/v1/completions", {"model": "m", "prompt": prompts, "max_tokens": 100,
                                         "temperature": 0.5, "seed": 9, "ignore_eos": True})
        assert r.status == 200
        return [c["text"] for c in sorted(r.json()["choices"], key=lambda c: c["index"])]

    roomy = start_server(stories260k_gguf, *NAMED, "--max-num-seqs", "16")
    want = run(roomy)
    roomy.stop()
    tight = start_server(stories260k_gguf, *NAMED, "--max-num-seqs", "16",
                         "--kv-cache-bytes", str(28 * STORIES_BLOCK_BYTES),
                         "--speculative-config", SPEC["ngram"], *ALWAYS)
    got = run(tight)
    s = tight.metrics()
    assert metric_value(s, "vllm:num_preemptions_total") > 0
    assert metric_value(s, "vllm:spec_decode_num_accepted_tokens_total") > 0
    assert got == want
    assert metric_value(s, "brisk_kv_cache_blocks", state="used") == 0
    tight.stop()


def test_metrics_and_bench_report(start_server, stories260k_gguf, brisk_bin, tmp_path):
    srv = start_server(stories260k_gguf, *NAMED, "--speculative-config",
                       SPEC["ngram"], *ALWAYS)
    text = srv.metrics_text()
    for name in ["vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_per_pos_total"]:
        assert f"# TYPE {name} counter" in text
    assert 'position="5"' in text and 'position="6"' not in text
    bench = str(brisk_bin.parent / "brisk-bench")  # beside brisk (a folder may hold "/brisk")
    out = tmp_path / "b.json"
    p = subprocess.run([bench, "--base-url", srv.url, "--max-concurrency", "2", "--num-prompts", "4",
                        "--input-len", "32", "--output-len", "48", "--quiet", "--json", str(out),
                        "--extra-body", '{"temperature": 0}'], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    run = json.load(open(out))["runs"][0]
    sd = run["spec_decode"]
    s = srv.metrics()
    assert sd and sd["draft_tokens"] > 0 and 0 <= sd["acceptance_rate"] <= 1
    assert sd["mean_accepted_length"] >= 1
    assert sd["draft_tokens"] <= metric_value(s, "vllm:spec_decode_num_draft_tokens_total")
    assert "Spec decode acceptance rate" in p.stdout
    srv.stop()


def test_option_errors(brisk, stories260k_gguf, smollm2_path, start_server):
    r = brisk.run("serve", "--model", stories260k_gguf, "--speculative-config", SPEC["ngram"],
                  "--model-draft", stories260k_gguf, check=False)
    assert r.returncode == 2 and "give one" in r.err
    r = brisk.run("serve", "--model", stories260k_gguf, "--speculative-config",
                  '{"method":"eagle3","num_speculative_tokens":3}', check=False)
    assert r.returncode == 2 and "eagle3" in r.err and "not implemented" in r.err
    r = brisk.run("serve", "--model", stories260k_gguf, "--speculative-config",
                  '{"method":"ngram","num_speculative_tokens":3,"disable_by_batch_size":2}', check=False)
    assert r.returncode == 2 and "disable_by_batch_size" in r.err
    r = brisk.run("serve", "--model", stories260k_gguf, "--draft-max", "4", check=False)
    assert r.returncode == 2 and "--model-draft" in r.err
    # A draft of another vocabulary: refused at load, naming the first token that differs.
    srv = start_server(smollm2_path, "--model-draft", stories260k_gguf, wait_ready=False)
    rc = srv.wait(60)
    assert rc != 0
    assert "differs from the target's at token" in srv.log()
    # The environment form is the same option.
    r = brisk.run("serve", "--model", stories260k_gguf, check=False,
                  env={"BRISK_SPECULATIVE_CONFIG": '{"method":"eagle3","num_speculative_tokens":3}'})
    assert r.returncode == 2 and "eagle3" in r.err


@pytest.mark.parametrize("family", ["gemma3", "llama-swa"])
def test_sliding_windows(start_server, tmp_path, family):
    """Synthetic models with windows, 4-position blocks (the window release
    runs every few steps): the model as its own draft (every greedy proposal
    kept, every block boundary crossed) and suffix, against no speculation."""
    from synth_gguf import Spec, write_model
    spec = {"gemma3": Spec(arch="gemma3", n_head=4, n_head_kv=1, head_dim=64, rope_base=1e6,
                           sliding_window=8, swa_pattern=2, seed=24),
            "llama-swa": Spec(n_head_kv=2, sliding_window=6, seed=26)}[family]
    path = write_model(tmp_path / f"{family}.gguf", spec)
    common = ["--served-model-name", "m", "--block-size", "4", "--ctx", "256", "--max-num-seqs", "4",
              "--max-num-batched-tokens", "32"]
    prompts = ["one two three four five six seven eight one two three four", "a b c a b c a b c"]

    def run(srv):
        out = []
        for p in prompts:
            for body in ({"max_tokens": 60, "temperature": 0, "logprobs": 1},
                         {"max_tokens": 60, "temperature": 0.8, "seed": 4, "n": 2}):
                r = srv.post("/v1/completions", dict(body, model="m", prompt=p, ignore_eos=True))
                assert r.status == 200, r.body
                out.append([(c["text"], json.dumps(c.get("logprobs"))) for c in r.json()["choices"]])
        return out

    base = start_server(path, *common)
    want = run(base)
    base.stop()
    for extra in (["--model-draft", str(path), "--draft-max", "5"],
                  ["--speculative-config", SPEC["suffix"]]):
        srv = start_server(path, *common, *extra, *ALWAYS)
        got = run(srv)
        if extra[0] == "--model-draft":  # sampled runs differ by design: greedy ones only
            got, want_cmp = got[0::2], want[0::2]
        else:
            want_cmp = want
        assert got == want_cmp, f"{family} with {extra[0]}"
        s = srv.metrics()
        assert metric_value(s, "brisk_kv_cache_window_released_blocks_total") > 0
        assert metric_value(s, "brisk_kv_cache_blocks", state="used") == 0
        if extra[0] == "--model-draft":
            assert metric_value(s, "vllm:spec_decode_num_accepted_tokens_total") > 0
        srv.stop()


@pytest.mark.exhaustive
def test_gemma3_270m(start_server, report):
    """The real Gemma 3 270M (its windows released, a 262K vocabulary): ngram and
    suffix outputs unchanged (skipped without the file: scripts/fetch-model.sh
    gemma3-270m)."""
    import os
    from pathlib import Path
    cache = Path(os.environ.get("BRISK_CACHE_DIR") or Path.home() / ".cache" / "brisk")
    path = cache / "models" / "gemma-3-270m-q4_k_m.gguf"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    base = start_server(path, *NAMED[:2])
    want = run_all(base, "m")
    base.stop()
    for method in ("ngram", "suffix"):
        srv = start_server(path, *NAMED[:2], "--speculative-config", SPEC[method], *ALWAYS)
        assert run_all(srv, "m") == want, method
        proposed, accepted = spec_counters(srv)
        report(f"spec Gemma 3 270M {method}: {accepted:.0f} of {proposed:.0f} kept, outputs unchanged")
        srv.stop()


def test_step_trace_counts_proposals(start_server, stories260k_gguf, tmp_path):
    """--step-trace with speculation: each line's tokens are its decode rows,
    prefill and proposals; over the run, sampled adds up to the completion
    tokens and decode_rows to them less one per request and less the kept
    proposals."""
    trace = tmp_path / "steps.jsonl"
    srv = start_server(stories260k_gguf, *NAMED, "--speculative-config", SPEC["suffix"], *ALWAYS,
                       "--step-trace", str(trace))
    done = 0
    for p in ["Once upon a time", QUOTE]:
        r = srv.post("/v1/completions", {"model": "m", "prompt": p, "max_tokens": 60, "temperature": 0,
                                         "ignore_eos": True})
        done += r.json()["usage"]["completion_tokens"]
    srv.stop()
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    for ln in lines:
        assert ln["tokens"] == ln["decode_rows"] + ln["prefill_tokens"] + ln["spec_proposed"], ln
        assert 0 <= ln["spec_accepted"] <= ln["spec_proposed"]
    acc = sum(ln["spec_accepted"] for ln in lines)
    assert sum(ln["spec_proposed"] for ln in lines) > 0 and acc > 0
    assert sum(ln["sampled"] for ln in lines) == done
    assert sum(ln["decode_rows"] for ln in lines) == done - 2 - acc
