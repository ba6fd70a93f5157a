"""Continuous batching over the paged KV cache, through `brisk serve`:
a KV pool sized for 4 sequences running 16 concurrent requests (preemptions,
outputs unchanged), prefix caching of a repeated 512-token system prompt
(time to first token and hit counters), and 100 streaming clients that
disconnect mid-generation (KV usage back to idle)."""
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import metric_value

STORIES = "stories260K"
# stories260K: 5 layers x 32 K/V values x 2 x 2 bytes (f16, the default) x 16 positions per block
STORIES_BLOCK_BYTES = 5 * 32 * 2 * 2 * 16


def prompts16():
    words = ["Lily", "Tom", "a dog", "the sun", "a big tree", "Ben", "the park", "a red ball"]
    return [f"Once upon a time, {words[i % 8]} " + "and " * (i % 5) + "went" for i in range(16)]


def run16(srv):
    # One request carrying the 16 prompts: the server queues all 16 sequences at
    # once, so they run together however fast the machine is (16 separate
    # clients could be staggered past a 100-token generation and never meet).
    r = srv.client().completions.create(model=STORIES, prompt=prompts16(), max_tokens=100, temperature=0,
                                        extra_body={"ignore_eos": True})
    assert len(r.choices) == 16
    return [(c.text, c.finish_reason) for c in sorted(r.choices, key=lambda c: c.index)]


def test_small_kv_pool_preempts_and_keeps_outputs(start_server, stories260k_gguf, report):
    roomy = start_server(stories260k_gguf, "--max-num-seqs", "16")
    want = run16(roomy)
    assert metric_value(roomy.metrics(), "vllm:num_preemptions_total") == 0
    roomy.stop()
    # 7 blocks hold one sequence (prompt + 100 tokens): a pool of 28 holds 4.
    tight = start_server(stories260k_gguf, "--max-num-seqs", "16",
                         "--kv-cache-bytes", str(28 * STORIES_BLOCK_BYTES))
    got = run16(tight)
    s = tight.metrics()
    assert metric_value(s, "brisk_kv_cache_blocks", state="total") == 28
    preemptions = metric_value(s, "vllm:num_preemptions_total")
    assert preemptions > 0
    assert got == want  # every request's text is unchanged by preemption
    assert all(f == "length" for _, f in got)
    report(f"sched: 16 requests in a 4-sequence KV pool: {preemptions:.0f} preemptions, outputs identical")
    tight.stop()


def first_token_time(client, messages):
    t0 = time.perf_counter()
    stream = client.chat.completions.create(model="m", messages=messages, max_tokens=4, temperature=0,
                                            stream=True)
    ttft = None
    for ch in stream:
        if ttft is None and ch.choices and ch.choices[0].delta.content:
            ttft = time.perf_counter() - t0
    assert ttft is not None
    return ttft


# slow: a 520-token SmolLM2 prefill takes ~14 s under ASan; the Release suite
# runs it, and the prefix cache's code is under ASan in test_kv_cache.
@pytest.mark.slow
def test_repeated_system_prompt_hits_prefix_cache(start_server, smollm2_path, brisk, report):
    srv = start_server(smollm2_path, "--served-model-name", "m")
    system = " ".join(f"Rule {i}: answer briefly and politely." for i in range(53))
    n_sys = len(brisk.tokenize(smollm2_path, system))
    assert n_sys >= 512, n_sys
    client = srv.client()
    s0 = srv.metrics()
    first = first_token_time(client, [{"role": "system", "content": system},
                                      {"role": "user", "content": "What is the capital of France?"}])
    s1 = srv.metrics()
    second = first_token_time(client, [{"role": "system", "content": system},
                                       {"role": "user", "content": "Name a colour."}])
    s2 = srv.metrics()
    hits1 = metric_value(s1, "vllm:prefix_cache_hits_total") - metric_value(s0, "vllm:prefix_cache_hits_total")
    hits2 = metric_value(s2, "vllm:prefix_cache_hits_total") - metric_value(s1, "vllm:prefix_cache_hits_total")
    queries2 = (metric_value(s2, "vllm:prefix_cache_queries_total")
                - metric_value(s1, "vllm:prefix_cache_queries_total"))
    assert hits1 == 0
    assert hits2 >= n_sys - 16 and hits2 % 16 == 0, (hits2, n_sys)
    assert queries2 > hits2
    report(f"sched: {n_sys}-token system prompt: TTFT {first * 1000:.0f} ms, then {second * 1000:.0f} ms "
           f"({second / first:.0%}) with {hits2:.0f} prefix-cache hit tokens")
    assert second <= 0.25 * first, (first, second)
    srv.stop()


def kv_used(srv):
    return metric_value(srv.metrics(), "brisk_kv_cache_blocks", state="used")


def test_100_streams_disconnect_frees_kv(start_server, stories260k_gguf, report):
    srv = start_server(stories260k_gguf, "--max-num-seqs", "128")
    idle_usage = metric_value(srv.metrics(), "vllm:kv_cache_usage_perc")
    assert idle_usage == 0 and kv_used(srv) == 0
    conns = []
    try:
        for i in range(100):
            conn, status, headers = srv.stream("/v1/completions", {
                "model": STORIES, "prompt": f"Once upon a time {i}", "max_tokens": 400, "stream": True,
                "ignore_eos": True, "temperature": 0.8, "seed": i})
            assert status == 200
            conns.append((conn, conn.iter_sse(headers)))
        for conn, events in conns:  # every stream is generating
            for _ in range(2):
                assert next(events) != "[DONE]"
        busy = kv_used(srv)
        assert busy > 0
        running = metric_value(srv.metrics(), "vllm:num_requests_running")
    finally:
        for conn, _ in conns:
            conn.close()
    deadline = time.monotonic() + 10 * srv.slow
    while (kv_used(srv) != 0 or metric_value(srv.metrics(), "vllm:num_requests_running") != 0) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    s = srv.metrics()
    assert metric_value(s, "brisk_kv_cache_blocks", state="used") == 0
    assert metric_value(s, "vllm:kv_cache_usage_perc") == idle_usage
    assert metric_value(s, "vllm:num_requests_running") == 0
    assert metric_value(s, "vllm:request_success_total", finished_reason="abort") == 100
    report(f"sched: 100 streams ({running:.0f} running, {busy:.0f} KV blocks) disconnected: KV back to idle")
    srv.stop()


def test_n_choices_share_prompt_blocks(start_server, stories260k_gguf):
    srv = start_server(stories260k_gguf)
    client = srv.client()
    prompt = "Once upon a time, there was a little girl who liked to play in the garden with her dog"
    many = client.completions.create(model=STORIES, prompt=prompt, n=4, max_tokens=30, temperature=0.9, seed=5)
    for j, c in enumerate(many.choices):
        solo = client.completions.create(model=STORIES, prompt=prompt, max_tokens=30, temperature=0.9,
                                         seed=5 + j)
        assert c.text == solo.choices[0].text, j
    assert kv_used(srv) == 0
    srv.stop()


def cpu_seconds(pid):
    """utime + stime of every thread of pid, in seconds."""
    import os
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_engine_does_not_spin(start_server, stories260k_gguf):
    srv = start_server(stories260k_gguf)
    client = srv.client()
    client.completions.create(model=STORIES, prompt="Once", max_tokens=20)  # engine has run
    time.sleep(0.3)
    c0 = cpu_seconds(srv.proc.pid)
    time.sleep(2.0)
    idle = cpu_seconds(srv.proc.pid) - c0
    assert idle < 0.1, f"{idle:.2f} s of CPU in 2 s idle: something spins"
    srv.stop()


@pytest.mark.parametrize("args", [
    ["--kv-cache-dtype", "f8"], ["--kv-cache-bytes", "12Q"], ["--kv-cache-bytes", "-5"],
    ["--kv-cache-bytes", "0"], ["--block-size", "0"], ["--block-size", "2000"],
])
def test_kv_flags_rejected(brisk, stories260k_gguf, args):
    r = brisk.run("serve", "--model", stories260k_gguf, "--port", "0", *args, check=False)
    assert r.returncode == 2, r.err
    lines = r.err_lines()
    assert len(lines) == 1 and args[0] in lines[0], lines


@pytest.mark.parametrize("dtype", [None, "f16", "f32"])
def test_kv_flags_size_the_pool(start_server, stories260k_gguf, dtype):
    # a 16-position block of stories260K: 10 KiB in f16 (the default), 20 KiB in f32;
    # 1 MiB -> 102 or 51 blocks
    args = ["--kv-cache-bytes", "1M", "--block-size", "16"] + (["--kv-cache-dtype", dtype] if dtype else [])
    srv = start_server(stories260k_gguf, *args)
    s = srv.metrics()
    per_block = STORIES_BLOCK_BYTES * (2 if dtype == "f32" else 1)
    assert metric_value(s, "brisk_kv_cache_blocks", state="total") == (1 << 20) // per_block
    assert ("f32" if dtype == "f32" else "f16") in srv.log()
    r = srv.client().completions.create(model=STORIES, prompt=[1], max_tokens=200, temperature=0)
    assert r.choices[0].text.startswith("Once upon a time, there was a little girl named Lily.")
    srv.stop()
