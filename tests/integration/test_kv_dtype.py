"""KV-cache dtypes through the real binary (--kv-cache-dtype, issue 38): a dtype the
device cannot run, or whose 32-value groups do not fit the model's heads, is refused at
start with one line naming the device (never silently replaced); a quantized cache is
named in the start-up line, /version and /metrics (vllm:cache_config_info), sized by its
real bytes per block, and keeps what the engine guarantees: the same text alone, in a
batch and under preemption, prefix-cache hits, n > 1 choices equal to their solo runs."""
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import metric_value

# SmolLM2-135M: 30 layers, 3 KV heads of 64; a 16-position block of K and V is
# 30 x 2 x the layer-block (kern_kv.h): f16 16 x 192 x 2, q8_0 16 x (192 + 12),
# q4_0 16 x (96 + 12) bytes.
SMOL_BLOCK = {"f16": 30 * 2 * 6144, "q8_0": 30 * 2 * 3264, "q4_0": 30 * 2 * 1728}


def one_line_error(r):
    lines = r.err_lines()
    assert r.returncode == 1, (r.returncode, lines)
    return lines[-1]


@pytest.mark.parametrize("dtype", ["int8", "fp8", "fp8_e4m3"])
def test_cuda_dtypes_refused_on_the_cpu(brisk, stories260k_gguf, dtype):
    """int8 and fp8 have CUDA kernels only: the CPU refuses them and says which
    device and what it runs (brisk serve, generate and bench alike)."""
    for cmd in (["serve", "--port", "0"], ["generate", "-n", "2", "--prompt", "Once"],
                ["bench", "-p", "8", "-n", "2", "--reps", "1"]):
        r = brisk.run(*cmd, "--model", stories260k_gguf, "--kv-cache-dtype", dtype, check=False,
                      timeout=60)
        line = one_line_error(r)
        assert "--kv-cache-dtype" in line and "the cpu device cannot run it" in line, line
        assert "f32, f16, q8_0, q4_0" in line, line


def test_auto_device_is_named(brisk, stories260k_gguf):
    """With --device auto the refusal comes after the device is chosen and names it."""
    r = brisk.run("generate", "--model", stories260k_gguf, "--device", "auto", "--kv-cache-dtype", "fp8",
                  "-n", "2", "--prompt", "Once", check=False, timeout=60)
    line = one_line_error(r)
    # No GPU here: auto chose the CPU. On a GPU machine it chooses CUDA, which runs
    # fp8 but not stories260K's heads of 8 (a multiple of 16 is needed).
    assert ("chosen by --device auto" in line and "cpu" in line) or "multiple of 16" in line, line


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
def test_groups_must_fit_the_heads(brisk, stories260k_gguf, dtype):
    """stories260K's heads are 8 values: no 32-value group fits; refused, not replaced."""
    r = brisk.run("serve", "--model", stories260k_gguf, "--port", "0", "--kv-cache-dtype", dtype,
                  check=False, timeout=60)
    line = one_line_error(r)
    assert f"--kv-cache-dtype {dtype} needs a head size that is a multiple of 32" in line, line
    assert "is 8" in line, line


def prompts8():
    words = ["France", "a cat", "the sea", "music", "winter", "a robot", "bread", "the moon"]
    return [f"Write one sentence about {w}." + " Please." * (i % 3) for i, w in enumerate(words)]


def run8(srv):
    # One request of 8 prompts: the server queues all 8 at once, so they share steps.
    r = srv.client().completions.create(model="m", prompt=prompts8(), max_tokens=48, temperature=0,
                                        extra_body={"ignore_eos": True})
    return [c.text for c in sorted(r.choices, key=lambda c: c.index)]


# slow: SmolLM2 servers with 8 concurrent prompts; the Release suite runs them, and the
# quantized cache's code is under ASan in test_kern_kv, test_kv_cache, test_model and
# test_engine (unit tests), and in the synthetic models' window-release test.
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
def test_quantized_cache_in_the_server(start_server, smollm2_path, dtype, report):
    """SmolLM2 (heads of 64) with a quantized cache: named in the start-up line, /version
    and /metrics, the pool counted in the dtype's bytes; the 8 prompts give the same text
    alone, together and in a pool so small they preempt one another; a repeated prompt
    hits the prefix cache; n = 3 seeded choices equal their solo runs (forks share the
    prompt's blocks, the partial one copied on write)."""
    srv = start_server(smollm2_path, "--served-model-name", "m", "--max-num-seqs", "8",
                       "--kv-cache-dtype", dtype, "--kv-cache-bytes", "64M")
    try:
        assert re.search(rf"KV cache [0-9.]+ MB {dtype} = ", srv.log()), srv.log()[-1500:]
        assert json.loads(srv.request("GET", "/version").body)["kv_cache_dtype"] == dtype
        s = srv.metrics()
        total = metric_value(s, "brisk_kv_cache_blocks", state="total")
        assert total == (64 << 20) // SMOL_BLOCK[dtype], total
        assert metric_value(s, "vllm:cache_config_info", block_size="16", cache_dtype=dtype,
                            enable_prefix_caching="True", num_gpu_blocks=str(int(total))) == 1
        client = srv.client()
        solo = []
        for p in prompts8():
            r = client.completions.create(model="m", prompt=p, max_tokens=48, temperature=0,
                                          extra_body={"ignore_eos": True})
            solo.append(r.choices[0].text)
        assert run8(srv) == solo  # batch invariance: the same bits at every batch size
        h0 = metric_value(srv.metrics(), "vllm:prefix_cache_hits_total")
        again = client.completions.create(model="m", prompt=prompts8()[0] * 4, max_tokens=8,
                                          temperature=0)
        twice = client.completions.create(model="m", prompt=prompts8()[0] * 4, max_tokens=8,
                                          temperature=0)
        assert again.choices[0].text == twice.choices[0].text
        assert metric_value(srv.metrics(), "vllm:prefix_cache_hits_total") >= h0 + 16
        prompt = "Once upon a time, in a small village by the sea, there lived"
        many = client.completions.create(model="m", prompt=prompt, n=3, max_tokens=24, temperature=0.9,
                                         seed=11)
        for j, c in enumerate(many.choices):
            one = client.completions.create(model="m", prompt=prompt, max_tokens=24, temperature=0.9,
                                            seed=11 + j)
            assert c.text == one.choices[0].text, j
    finally:
        srv.stop()
    # A pool of 12 blocks: one sequence needs up to 5 (a ~20-token prompt + 48), so the
    # 8 preempt one another; the texts do not change.
    tight = start_server(smollm2_path, "--served-model-name", "m", "--max-num-seqs", "8",
                         "--kv-cache-dtype", dtype, "--kv-cache-bytes", str(12 * SMOL_BLOCK[dtype]))
    try:
        got = run8(tight)
        preemptions = metric_value(tight.metrics(), "vllm:num_preemptions_total")
        assert preemptions > 0
        assert got == solo
        report(f"kv {dtype}: 8 SmolLM2 prompts alone = batched = under {preemptions:.0f} preemptions; "
               "prefix hits and n=3 forks as solo runs")
    finally:
        tight.stop()


@pytest.mark.slow
def test_generate_with_a_quantized_cache(brisk, smollm2_path):
    """brisk generate takes the dtype too: greedy text of q8_0 starts as f16's on a
    plain prompt (its logits move by ~1e-2), and a chunked prompt gives the same as one
    pass (batch invariance through the tool)."""
    args = ["--model", smollm2_path, "--prompt", "The capital of France is", "-n", "12", "--temp", "0"]
    f16 = brisk.run("generate", *args, "--kv-cache-dtype", "f16").out
    q8 = brisk.run("generate", *args, "--kv-cache-dtype", "q8_0").out
    assert q8[:20] == f16[:20], (q8, f16)


@pytest.mark.slow
def test_bench_depth(brisk, smollm2_path):
    """brisk bench --depth: decode after a filled context, the dtype and the KV bytes per
    position in its JSON (bench/kv_quant.py reads them)."""
    r = brisk.run("bench", "--model", smollm2_path, "-p", "0", "-n", "4", "--depth", "40", "--reps", "1",
                  "--kv-cache-dtype", "q4_0", timeout=120)
    j = json.loads(r.out)
    assert j["depth"] == 40 and j["kv_dtype"] == "q4_0" and j["tg_tok_s"] > 0
    assert j["kv_bytes_per_pos"] == SMOL_BLOCK["q4_0"] / 16
    assert 0 < j["tg_roofline_kv_tok_s"] < j["tg_roofline_tok_s"]


@pytest.mark.slow
def test_threads_agree(start_server, smollm2_path):
    """Concurrent clients on a q8_0 cache get what they get alone (the engine mixes
    their steps; the bits do not depend on it)."""
    srv = start_server(smollm2_path, "--served-model-name", "m", "--kv-cache-dtype", "q8_0")
    try:
        client = srv.client()

        def one(p):
            return client.completions.create(model="m", prompt=p, max_tokens=24, temperature=0,
                                              extra_body={"ignore_eos": True}).choices[0].text
        alone = [one(p) for p in prompts8()[:4]]
        with ThreadPoolExecutor(4) as ex:
            together = list(ex.map(one, prompts8()[:4]))
        assert together == alone
    finally:
        srv.stop()
