"""--device cpu|cuda|auto: flag checks, AUTO falling back to the CPU where there is no
GPU (the output unchanged), and a clean refusal of --device cuda without one. On a
GPU machine the CUDA paths are tested by build/tests/test_cuda_model and bench/gpu.sh;
here the refusal tests skip."""

import subprocess

import pytest

from test_stories260k import LILY_GOLDEN, LILY_PROMPT, LILY_IDS, LILY_STEPS


def has_gpu(brisk):
    line = [ln for ln in brisk.run("--version").stdout.splitlines() if ln.startswith("backends:")][0]
    return "cuda(" in line and "no device" not in line


@pytest.mark.parametrize("args,needle", [
    (["--device", "gpu"], "--device"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
])
def test_serve_flag_errors(brisk, stories260k_gguf, args, needle):
    r = brisk.run("serve", "--model", stories260k_gguf, "--port", "0", *args, check=False)
    assert r.returncode == 2, (r.returncode, r.err)
    assert needle in r.err, r.err


def test_generate_device_flag_error(brisk, stories260k_gguf):
    r = brisk.run("generate", "--model", stories260k_gguf, "--device", "tpu", check=False)
    assert r.returncode == 2 and "--device" in r.err, r.err


def test_generate_auto_is_cpu_without_gpu(brisk, stories260k_gguf):
    if has_gpu(brisk):
        pytest.skip("a GPU is present: auto picks CUDA (bench/gpu.sh tests that)")
    n_gen = LILY_STEPS - (len(LILY_IDS) - 1)
    r = brisk.run("generate", "--model", stories260k_gguf, "--prompt", LILY_PROMPT, "--temp", "0",
                  "-n", n_gen, "--device", "auto")
    assert LILY_PROMPT + r.stdout == LILY_GOLDEN
    assert "device auto: cpu" in r.err, r.err


@pytest.mark.parametrize("cmd", ["generate", "bench"])
def test_cuda_refused_without_gpu(brisk, stories260k_gguf, cmd):
    if has_gpu(brisk):
        pytest.skip("a GPU is present")
    extra = ["-p", "8", "-n", "4", "--reps", "1"] if cmd == "bench" else ["-n", "4"]
    r = brisk.run(cmd, "--model", stories260k_gguf, "--device", "cuda", *extra, check=False)
    assert r.returncode == 1, (r.returncode, r.err)
    assert "no CUDA device" in r.err or "built without CUDA" in r.err, r.err


def test_serve_cuda_refused_without_gpu(brisk, stories260k_gguf):
    if has_gpu(brisk):
        pytest.skip("a GPU is present")
    p = subprocess.run([brisk.path, "serve", "--model", stories260k_gguf, "--port", "0",
                        "--device", "cuda"], capture_output=True, timeout=60 * brisk.slow_factor,
                       stdin=subprocess.DEVNULL)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 1, (p.returncode, err[-2000:])
    assert "cannot load the model" in err and ("no CUDA device" in err or "built without CUDA" in err), err


def test_serve_auto_logs_device(start_server, stories260k_gguf, brisk):
    if has_gpu(brisk):
        pytest.skip("a GPU is present")
    srv = start_server(stories260k_gguf, "--device", "auto")
    r = srv.post("/v1/completions", {"prompt": LILY_PROMPT, "max_tokens": 8, "temperature": 0})
    assert r.status == 200, r.body
    log = srv.log()
    assert "device auto: cpu" in log and "engine: device cpu" in log, log[-3000:]
