"""--dummy-weights: real shapes with seeded random weights (as vLLM's dummy load format),
through generate, bench and serve, and the usage errors around it."""

import json

import pytest


def test_generate_is_seeded_and_deterministic(brisk):
    args = ["generate", "--dummy-weights", "stories110m", "--weights", "int8", "--threads", "2",
            "--prompt", "hello world", "-n", "8", "--temp", "0", "--ignore-eos"]
    a = brisk.run(*args, timeout=120)
    b = brisk.run(*args, timeout=120)
    assert a.stdout == b.stdout and a.stdout.strip(), (a.stdout, b.stdout)
    assert "dummy stories110m" in a.err, a.err


@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_bench_reports_the_shape(brisk):
    r = brisk.run("bench", "--dummy-weights", "stories110m", "--weights", "int8", "-p", "32", "-n", "8",
                  "--reps", "1", timeout=180)
    row = json.loads(r.stdout.strip().splitlines()[-1])
    assert row["model"] == "dummy-stories110m" and row["weights"] == "int8", row
    # 12 layers of 7,079,424 + 32000 x 768 tied + 768: llama2.c's stories110M
    assert row["n_params"] == 109529856, row
    assert row["pp_tok_s"] > 0 and row["tg_tok_s"] > 0, row


def test_serve_dummy_model(start_server):
    srv = start_server(None, "--dummy-weights", "smollm2-135m", "--weights", "int8", "--ctx", "256",
                       timeout=120)
    try:
        models = srv.request("GET", "/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["smollm2-135m"], models
        r = srv.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 8,
                                         "temperature": 0, "ignore_eos": True})
        assert r.status == 200, r.text
        body = r.json()
        assert body["usage"]["completion_tokens"] == 8, body
        assert body["usage"]["prompt_tokens"] > 1, body
        assert isinstance(body["choices"][0]["text"], str), body
    finally:
        srv.stop()


@pytest.mark.parametrize("args, msg", [
    (["generate", "--dummy-weights", "gpt-5"], "known: llama-3-8b"),
    (["generate", "--dummy-weights", "stories110m", "--model", "x.gguf"], "exclude each other"),
    (["generate", "--tokenizer", "x.gguf", "--model", "x.gguf"], "only goes with --dummy-weights"),
    (["serve", "--dummy-weights", "nope"], "unknown configuration"),
    (["bench", "--dummy-weights", "nope"], "unknown configuration"),
])
def test_usage_errors(brisk, args, msg):
    r = brisk.run(*args, check=False)
    assert r.returncode == 2, (r.returncode, r.err)
    assert msg in r.err and len(r.err.strip().splitlines()) >= 1, r.err


# Generating 1.1-2.6 billion random weights takes tens of seconds on 2 cores.
@pytest.mark.slow
@pytest.mark.parametrize("shape, n_vocab", [("gemma2-2b", 256000), ("mistral-7b-4l", 32000)])
def test_windowed_shapes_run_on_the_cpu(brisk, tmp_path, shape, n_vocab):
    """The shapes the GPU check adds (Gemma 2 2B whole; Mistral 7B's widths in 4 layers,
    a window on every layer) load and run the CPU's forward pass: finite logits of the
    shape's vocabulary with a spread."""
    import numpy as np
    dump = tmp_path / "logits.f32"
    r = brisk.run("generate", "--dummy-weights", shape, "--weights", "int8", "--prompt",
                  "hello world", "-n", "2", "--temp", "0", "--ignore-eos",
                  "--dump-logits", str(dump), timeout=300)
    assert f"dummy {shape}" in r.err and r.stdout.strip(), (r.stdout, r.err[-2000:])
    lg = np.fromfile(dump, dtype=np.float32)
    assert lg.size > 0 and lg.size % n_vocab == 0, lg.size
    lg = lg.reshape(-1, n_vocab)
    assert np.isfinite(lg).all() and (lg.std(axis=1) > 0.1).all(), lg.std(axis=1)
