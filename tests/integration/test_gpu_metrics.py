"""GPU metrics on GET /metrics through NVML (`--gpu-metrics`, server/ops/srv_gpu.c).

brisk loads NVML with dlopen; here it loads build/tests/libfake_nvml.so
(tests/tools/fake_nvml.c) through $BRISK_NVML_LIB, which answers from the file
$FAKE_NVML_FILE, so the tests set GPU values and failures and change them while
the real `brisk serve` runs. test_real_nvml runs against the machine's own
libnvidia-ml.so.1 and skips where there is none; where nvidia-smi is there too
it compares the thermal and power readings with `nvidia-smi --query-gpu`.
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
# Thermal and power families: (family, fake key, scale from the fake's unit).
THERMAL = [("brisk_gpu_temperature_celsius", "temp", 1),
           ("brisk_gpu_power_draw_watts", "power", 1e-3),
           ("brisk_gpu_power_limit_watts", "power_limit", 1e-3),
           ("brisk_gpu_sm_clock_hertz", "sm_clock", 1e6),
           ("brisk_gpu_sm_clock_max_hertz", "sm_clock_max", 1e6)]
# NVML's clock event (throttle) reason bits and brisk's `reason` label values
# (nvidia-smi's clocks_event_reasons.<name> fields).
REASONS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
           "hw_slowdown": 0x8, "sync_boost": 0x10, "sw_thermal_slowdown": 0x20,
           "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80,
           "display_clock_setting": 0x100}
FAKE_KEYS = ("name", "uuid", "total", "used", "util", "memutil", "temp", "power", "power_limit",
             "sm_clock", "sm_clock_max", "reasons")


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
                     "memutil": rng.randint(1, 100), "temp": rng.randint(25, 90),
                     "power": rng.randint(50_000, 700_000), "power_limit": rng.randint(300, 700) * 1000,
                     "sm_clock": rng.randint(210, 1980), "sm_clock_max": rng.randint(1400, 2100),
                     "reasons": rng.getrandbits(9)})
    return gpus


def write_cfg(path, gpus, extra=""):
    lines = [f"count {len(gpus)}"]
    for i, g in enumerate(gpus):
        lines += [f"{k}.{i} {g[k]}" for k in FAKE_KEYS if k in g]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n" + extra)
    tmp.replace(path)  # atomic: brisk's sampler may be reading it


def gpu_samples(text):
    return [(n, lab, v) for n, lab, v in parse_prometheus(text) if n.startswith("brisk_gpu_")]


def value(samples, name, gpu=None):
    vals = [v for n, lab, v in samples if n == name and (gpu is None or lab.get("gpu") == str(gpu))]
    assert len(vals) <= 1, (name, gpu, vals)
    return vals[0] if vals else None


def reasons_of(samples, gpu):
    """{reason: value} of brisk_gpu_clock_throttle_reason for one GPU."""
    return {lab["reason"]: v for n, lab, v in samples
            if n == "brisk_gpu_clock_throttle_reason" and lab.get("gpu") == str(gpu)}


def check_thermal(samples, i, g):
    for family, key, scale in THERMAL:
        assert value(samples, family, i) == pytest.approx(g[key] * scale, rel=1e-12), (family, i)
    want = {name: float(bool(g["reasons"] & bit)) for name, bit in REASONS.items()}
    want["other"] = float(bool(g["reasons"] & ~0x1ff))
    assert reasons_of(samples, i) == want, (i, hex(g["reasons"]))


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
        check_thermal(s, i, g)
    assert value(s, "brisk_gpu_metrics_errors_total") == 0
    text = srv.metrics_text()
    for family, _, _ in THERMAL + [("brisk_gpu_clock_throttle_reason", None, None)]:
        assert f"# TYPE {family} gauge\n" in text and f"# HELP {family} " in text, family

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

    # Thermal readings: GPU 0 now hot and throttling (a bit NVML may add later
    # shows as reason="other"); GPU 1's driver offers no temperature or reasons
    # (not supported: left out, not counted).
    gpus[0].update(temp=93, power=699_999, reasons=0x60 | 0x4 | 0x800)
    write_cfg(cfg, gpus, "temp_rc.1 3\nreasons_rc.1 3\n")
    s = wait_for(srv, lambda s: value(s, "brisk_gpu_temperature_celsius", 0) == 93
                 and value(s, "brisk_gpu_temperature_celsius", 1) is None)
    check_thermal(s, 0, gpus[0])
    assert reasons_of(s, 0)["other"] == 1 and reasons_of(s, 0)["hw_thermal_slowdown"] == 1
    assert value(s, "brisk_gpu_temperature_celsius", 1) is None and reasons_of(s, 1) == {}
    assert value(s, "brisk_gpu_power_draw_watts", 1) == pytest.approx(gpus[1]["power"] / 1000)
    assert value(s, "brisk_gpu_metrics_errors_total") == 0

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
                         "temp.0 4294967295\npower.0 20000000\nsm_clock.0 10001\n"
                         "count 4294967295\n")
    s = wait_for(srv, lambda s: value(s, "brisk_gpu_memory_used_bytes", 0) is None)
    assert value(s, "brisk_gpu_memory_used_bytes", 0) is None
    assert value(s, "brisk_gpu_utilization_ratio", 0) is None
    for family in ("brisk_gpu_temperature_celsius", "brisk_gpu_power_draw_watts",
                   "brisk_gpu_sm_clock_hertz"):
        assert value(s, family, 0) is None, family
    assert value(s, "brisk_gpu_power_limit_watts", 0) == pytest.approx(
        gpus[0]["power_limit"] / 1000)
    assert reasons_of(s, 0)["hw_thermal_slowdown"] == 1
    # 62 handles past the 2 devices; GPU 0's memory, utilisation, temperature,
    # power and clock: one failed read each per sample (the first one logged).
    assert "(67 failed reads this sample" in srv.log(), srv.log()
    assert value(s, "brisk_gpu_metrics_errors_total") > errors
    assert "more than 64 GPUs" in srv.log()
    assert srv.request("GET", "/health").status == 200

    # Healthy again: everything is back.
    write_cfg(cfg, gpus)
    s = wait_for(srv, lambda s: value(s, "brisk_gpu_memory_used_bytes", 0) == gpus[0]["used"])
    assert value(s, "brisk_gpu_memory_used_bytes", 0) == gpus[0]["used"]
    assert value(s, "brisk_gpu_memory_used_bytes", 1) == gpus[1]["used"]
    check_thermal(s, 0, gpus[0])
    check_thermal(s, 1, gpus[1])
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
        # Thermal and power: each may be unsupported (left out), else plausible.
        temp = value(s, "brisk_gpu_temperature_celsius", i)
        assert temp is None or 0 <= temp <= 200, (i, temp)
        power = value(s, "brisk_gpu_power_draw_watts", i)
        limit = value(s, "brisk_gpu_power_limit_watts", i)
        assert power is None or 0 <= power <= 10_000, (i, power)
        assert limit is None or 0 < limit <= 10_000, (i, limit)
        clock = value(s, "brisk_gpu_sm_clock_hertz", i)
        clock_max = value(s, "brisk_gpu_sm_clock_max_hertz", i)
        assert clock is None or 0 <= clock <= 10e9, (i, clock)
        assert clock_max is None or 0 < clock_max <= 10e9, (i, clock_max)
        reasons = reasons_of(s, i)
        assert not reasons or (set(reasons) == set(REASONS) | {"other"}
                               and set(reasons.values()) <= {0.0, 1.0}), (i, reasons)
    assert value(s, "brisk_gpu_metrics_errors_total") == 0
    compare_nvidia_smi(s, n)
    srv.stop()


SMI_FIELDS = ["uuid", "temperature.gpu", "power.draw", "enforced.power.limit", "clocks.sm",
              "clocks.max.sm"]


def nvidia_smi_query(fields):
    """Rows of `nvidia-smi --query-gpu=FIELDS`, or None when a field is unknown."""
    p = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(fields),
                        "--format=csv,noheader,nounits"], capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        return None
    return [[c.strip() for c in line.split(",")] for line in p.stdout.strip().splitlines()]


def compare_nvidia_smi(samples, n):
    """brisk's thermal and power readings against nvidia-smi's, read right
    after the scrape (NVML underneath both): the limits and maximum clock
    exactly, the temperature within 3 C, the power within 20 % or 25 W, and
    the slowdown reasons (which stay off on a healthy GPU) equal. The current
    clock moves with load, so it is only checked against the maximum."""
    if not shutil.which("nvidia-smi"):
        return
    rows = nvidia_smi_query(SMI_FIELDS + ["clocks_event_reasons.active"]) or \
        nvidia_smi_query(SMI_FIELDS + ["clocks_throttle_reasons.active"])
    assert rows, "nvidia-smi --query-gpu failed"
    by_uuid = {r[0]: r[1:] for r in rows}
    for i in range(n):
        uuid = [lab for name, lab, v in samples
                if name == "brisk_gpu_info" and lab["gpu"] == str(i)][0]["uuid"]
        if uuid not in by_uuid:
            continue  # a MIG device: nvidia-smi lists the parent GPU
        temp, power, limit, clock, clock_max, mask = by_uuid[uuid]

        def num(x):
            try:
                return float(x)
            except ValueError:  # "[N/A]", "[Not Supported]"
                return None

        got = value(samples, "brisk_gpu_temperature_celsius", i)
        if num(temp) is not None and got is not None:
            assert abs(got - num(temp)) <= 3, ("temperature.gpu", i, got, temp)
        got = value(samples, "brisk_gpu_power_draw_watts", i)
        if num(power) is not None and got is not None:
            assert abs(got - num(power)) <= max(25, 0.2 * num(power)), ("power.draw", i, got, power)
        got = value(samples, "brisk_gpu_power_limit_watts", i)
        if num(limit) is not None and got is not None:
            assert abs(got - num(limit)) <= 0.5, ("enforced.power.limit", i, got, limit)
        got = value(samples, "brisk_gpu_sm_clock_max_hertz", i)
        if num(clock_max) is not None and got is not None:
            assert got == num(clock_max) * 1e6, ("clocks.max.sm", i, got, clock_max)
            cur = value(samples, "brisk_gpu_sm_clock_hertz", i)
            assert cur is None or cur <= got, ("clocks.sm", i, cur, got)
        reasons = reasons_of(samples, i)
        if reasons and mask.startswith("0x"):
            steady = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                      "hw_power_brake_slowdown")
            for r in steady:
                assert reasons[r] == float(bool(int(mask, 16) & REASONS[r])), (r, i, mask)
