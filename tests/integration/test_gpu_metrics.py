"""GPU metrics on GET /metrics through NVML (`--gpu-metrics`, server/srv_gpu.c).

brisk loads NVML with dlopen; here it loads build/tests/libfake_nvml.so
(tests/tools/fake_nvml.c) through $BRISK_NVML_LIB, which answers from the file
$FAKE_NVML_FILE, so the tests set GPU values and failures and change them while
the real `brisk serve` runs. test_real_nvml runs against the machine's own
libnvidia-ml.so.1 and skips where there is none.
"""

import ctypes
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import parse_prometheus

GPU_FAMILIES = ["brisk_gpu_memory_used_bytes", "brisk_gpu_memory_total_bytes",
                "brisk_gpu_utilization_ratio", "brisk_gpu_memory_utilization_ratio"]


@pytest.fixture(scope="module")
def fake_nvml(brisk):
    lib = Path(brisk.path).resolve().parent.parent / "tests" / "libfake_nvml.so"
    if not lib.is_file():
        pytest.fail(f"{lib} not built (CMake target fake_nvml)")
    return lib


def random_gpus(rng, n):
    gpus = []
    for i in range(n):
        total = rng.randint(8, 141) << 30
        gpus.append({"name": f"NVIDIA Fake {i} \"{rng.randint(10, 99)}GB\"",
                     "uuid": f"GPU-{rng.getrandbits(64):016x}", "total": total,
                     "used": rng.randint(1, total), "util": rng.randint(1, 100),
                     "memutil": rng.randint(1, 100)})
    return gpus


def write_cfg(path, gpus, extra=""):
    lines = [f"count {len(gpus)}"]
    for i, g in enumerate(gpus):
        lines += [f"{k}.{i} {g[k]}" for k in ("name", "uuid", "total", "used", "util", "memutil")]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n" + extra)
    tmp.replace(path)  # atomic: brisk's sampler may be reading it


def gpu_samples(text):
    return [(n, lab, v) for n, lab, v in parse_prometheus(text) if n.startswith("brisk_gpu_")]


def value(samples, name, gpu=None):
    vals = [v for n, lab, v in samples if n == name and (gpu is None or lab.get("gpu") == str(gpu))]
    assert len(vals) <= 1, (name, gpu, vals)
    return vals[0] if vals else None


def wait_for(srv, pred, timeout=10.0):
    """Polls /metrics until pred(samples) is true; returns the last samples."""
    deadline = time.monotonic() + timeout * srv.slow
    while True:
        s = gpu_samples(srv.metrics_text())
        if pred(s) or time.monotonic() > deadline:
            return s
        time.sleep(0.05)


def test_fake_gpus(start_server, stories260k_gguf, fake_nvml, tmp_path, monkeypatch):
    rng = random.Random(8)
    cfg, down = tmp_path / "nvml.cfg", tmp_path / "nvml.down"
    gpus = random_gpus(rng, 2)
    write_cfg(cfg, gpus)
    monkeypatch.setenv("BRISK_NVML_LIB", str(fake_nvml))
    monkeypatch.setenv("FAKE_NVML_FILE", str(cfg))
    monkeypatch.setenv("FAKE_NVML_SHUTDOWN_FILE", str(down))
    srv = start_server(stories260k_gguf, "--gpu-metrics", "on", "--gpu-metrics-interval", "0.1")
    assert "GPU metrics: on" in srv.log() and "2 GPUs" in srv.log(), srv.log()
    s = gpu_samples(srv.metrics_text())
    for i, g in enumerate(gpus):
        assert value(s, "brisk_gpu_memory_used_bytes", i) == g["used"]
        assert value(s, "brisk_gpu_memory_total_bytes", i) == g["total"]
        assert value(s, "brisk_gpu_utilization_ratio", i) == pytest.approx(g["util"] / 100)
        assert value(s, "brisk_gpu_memory_utilization_ratio", i) == pytest.approx(
            g["memutil"] / 100)
        info = [lab for n, lab, v in s if n == "brisk_gpu_info" and lab["gpu"] == str(i)]
        assert len(info) == 1 and info[0]["uuid"] == g["uuid"], info
        assert info[0]["name"] == g["name"].replace('"', '\\"'), info  # escaped in the text
        assert info[0]["model_name"] == "stories260K"
    assert value(s, "brisk_gpu_metrics_errors_total") == 0

    # promtool: the whole exposition, vLLM's ':' names aside, lints clean.
    promtool = shutil.which("promtool")
    if promtool:
        text = srv.metrics_text().replace("vllm:", "vllm_")
        p = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=60)
        assert p.returncode == 0 and not (p.stdout + p.stderr).strip(), p.stdout + p.stderr

    # New values reach /metrics within a few intervals.
    gpus[1]["used"] = rng.randint(1, gpus[1]["total"])
    gpus[0]["util"] = rng.randint(1, 100)
    write_cfg(cfg, gpus)
    s = wait_for(srv, lambda s: value(s, "brisk_gpu_memory_used_bytes", 1) == gpus[1]["used"])
    assert value(s, "brisk_gpu_memory_used_bytes", 1) == gpus[1]["used"]
    assert value(s, "brisk_gpu_utilization_ratio", 0) == pytest.approx(gpus[0]["util"] / 100)

    # GPU 1 falls off the bus mid-run: its memory and utilisation go, errors
    # count, GPU 0 and the server carry on.
    write_cfg(cfg, gpus, "mem_rc.1 15\nutil_rc.1 15\n")
    s = wait_for(srv, lambda s: value(s, "brisk_gpu_memory_used_bytes", 1) is None)
    assert value(s, "brisk_gpu_memory_used_bytes", 1) is None
    assert value(s, "brisk_gpu_utilization_ratio", 1) is None
    assert value(s, "brisk_gpu_memory_used_bytes", 0) == gpus[0]["used"]
    errors = value(s, "brisk_gpu_metrics_errors_total")
    assert errors >= 2 and errors % 2 == 0, errors
    assert srv.request("GET", "/health").status == 200
    assert "GPU 1: nvmlDeviceGetMemoryInfo failed: NVML error 15" in srv.log(), srv.log()

    # Nonsense from the library: refused and counted, never rendered.
    write_cfg(cfg, gpus, "used.0 99999999999999999\ntotal.0 4096\nutil.0 4000000000\n"
                         "count 4294967295\n")
    s = wait_for(srv, lambda s: value(s, "brisk_gpu_memory_used_bytes", 0) is None)
    assert value(s, "brisk_gpu_memory_used_bytes", 0) is None
    assert value(s, "brisk_gpu_utilization_ratio", 0) is None
    assert value(s, "brisk_gpu_metrics_errors_total") > errors
    assert "more than 64 GPUs" in srv.log()
    assert srv.request("GET", "/health").status == 200

    # Healthy again: everything is back.
    write_cfg(cfg, gpus)
    s = wait_for(srv, lambda s: value(s, "brisk_gpu_memory_used_bytes", 0) == gpus[0]["used"])
    assert value(s, "brisk_gpu_memory_used_bytes", 0) == gpus[0]["used"]
    assert value(s, "brisk_gpu_memory_used_bytes", 1) == gpus[1]["used"]
    srv.stop()
    assert down.read_text() == "shutdown\n"  # nvmlShutdown at exit


@pytest.mark.slow  # ~4 s of stall and shutdown wait; test_srv_gpu covers the stall in every build
def test_stalled_nvml(start_server, stories260k_gguf, fake_nvml, tmp_path, monkeypatch):
    """An NVML call that hangs stalls only the sampler: /metrics answers at once, the
    per-GPU values go stale (left out) after 3 intervals + 1 s, and SIGTERM still
    exits 0 after waiting 2 s for the sampler."""
    cfg = tmp_path / "nvml.cfg"
    gpus = random_gpus(random.Random(9), 1)
    write_cfg(cfg, gpus)
    monkeypatch.setenv("BRISK_NVML_LIB", str(fake_nvml))
    monkeypatch.setenv("FAKE_NVML_FILE", str(cfg))
    srv = start_server(stories260k_gguf, "--gpu-metrics-interval", "0.1")  # auto
    assert "GPU metrics: on" in srv.log(), srv.log()
    assert value(gpu_samples(srv.metrics_text()), "brisk_gpu_memory_used_bytes", 0) == \
        gpus[0]["used"]
    write_cfg(cfg, gpus, "stall_ms 8000\n")
    time.sleep(0.3)
    t0 = time.monotonic()
    srv.metrics_text()
    assert time.monotonic() - t0 < 0.5 * srv.slow
    s = wait_for(srv, lambda s: value(s, "brisk_gpu_memory_used_bytes", 0) is None, timeout=4)
    assert value(s, "brisk_gpu_memory_used_bytes", 0) is None
    assert value(s, "brisk_gpu_metrics_errors_total") == 0  # nothing failed: it is late
    t0 = time.monotonic()
    srv.stop(timeout=6)
    assert time.monotonic() - t0 < 6 * srv.slow
    assert "the sampler is stuck in an NVML call; leaving it" in srv.log(), srv.log()


def test_on_without_nvml_fails_at_start(brisk, stories260k_gguf, monkeypatch):
    monkeypatch.setenv("BRISK_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
    r = brisk.run("serve", "--model", stories260k_gguf, "--port", "0", "--gpu-metrics", "on",
                  timeout=30, check=False)
    assert r.returncode == 1, (r.returncode, r.err)
    assert "--gpu-metrics on: cannot load /nonexistent/libnvidia-ml.so.1" in r.err, r.err
    assert "listening" not in r.err


def test_on_with_no_gpu_fails_at_start(brisk, stories260k_gguf, fake_nvml, tmp_path, monkeypatch):
    cfg = tmp_path / "nvml.cfg"
    write_cfg(cfg, [])
    monkeypatch.setenv("BRISK_NVML_LIB", str(fake_nvml))
    monkeypatch.setenv("FAKE_NVML_FILE", str(cfg))
    r = brisk.run("serve", "--model", stories260k_gguf, "--port", "0", "--gpu-metrics", "on",
                  timeout=30, check=False)
    assert r.returncode == 1 and "sees no GPU" in r.err, (r.returncode, r.err)


@pytest.mark.parametrize("mode, lib", [("auto", "missing"), ("off", "fake")])
def test_no_gpu_metrics(start_server, stories260k_gguf, fake_nvml, tmp_path, monkeypatch, mode,
                        lib):
    """auto without NVML and off with a working one: no brisk_gpu_ family at all."""
    cfg = tmp_path / "nvml.cfg"
    write_cfg(cfg, random_gpus(random.Random(10), 1))
    monkeypatch.setenv("FAKE_NVML_FILE", str(cfg))
    monkeypatch.setenv("BRISK_NVML_LIB",
                       str(fake_nvml) if lib == "fake" else "/nonexistent/libnvidia-ml.so.1")
    srv = start_server(stories260k_gguf, "--gpu-metrics", mode)
    assert "brisk_gpu_" not in srv.metrics_text()
    assert f"GPU metrics: off ({'auto: cannot load' if mode == 'auto' else '--gpu-metrics off'}" \
        in srv.log(), srv.log()
    srv.stop()


def test_bad_flag_values(brisk):
    r = brisk.run("serve", "--gpu-metrics", "yes", check=False)
    assert r.returncode == 2 and "--gpu-metrics: 'yes' is not one of auto, on, off" in r.err
    r = brisk.run("serve", "--gpu-metrics-interval", "0", check=False)
    assert r.returncode == 2 and "--gpu-metrics-interval" in r.err, r.err


def test_real_nvml(start_server, stories260k_gguf, monkeypatch):
    """The machine's own NVML, when it has one (the GPU machines): plausible
    values for every GPU NVML reports."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        pytest.skip(f"libnvidia-ml.so.1 cannot be loaded here ({e}): no NVIDIA driver")
    count = ctypes.c_uint(0)
    if nvml.nvmlInit_v2() != 0 or nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 \
            or count.value == 0:
        pytest.skip("NVML loads but reports no GPU")
    nvml.nvmlShutdown()
    monkeypatch.delenv("BRISK_NVML_LIB", raising=False)
    srv = start_server(stories260k_gguf, "--gpu-metrics", "on", "--gpu-metrics-interval", "0.5")
    s = gpu_samples(srv.metrics_text())
    n = min(count.value, 64)
    for i in range(n):
        total = value(s, "brisk_gpu_memory_total_bytes", i)
        used = value(s, "brisk_gpu_memory_used_bytes", i)
        assert total is not None and total >= 1 << 30, (i, total)
        assert used is not None and 0 <= used <= total, (i, used, total)
        for f in ("brisk_gpu_utilization_ratio", "brisk_gpu_memory_utilization_ratio"):
            v = value(s, f, i)  # absent in MIG mode (NVML: not supported)
            assert v is None or 0.0 <= v <= 1.0, (f, i, v)
        info = [lab for name, lab, v in s if name == "brisk_gpu_info" and lab["gpu"] == str(i)]
        assert len(info) == 1 and info[0]["uuid"].startswith(("GPU-", "MIG-")), info
        assert info[0]["name"], info
    assert value(s, "brisk_gpu_metrics_errors_total") == 0
    srv.stop()
