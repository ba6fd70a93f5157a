"""Shared fixtures for the integration suite: every test starts the real binary.

Environment:
  BRISK_BIN             binary under test (default <repo>/build/bin/brisk)
  BRISK_SHARED_DIR      folder holding models/stories260K.bin (default <repo>/../shared)
  BRISK_CACHE_DIR       fetch-model.sh's cache (default ~/.cache/brisk)
  BRISK_SMOLLM2         explicit path to SmolLM2-135M-Instruct.Q4_1.gguf
  BRISK_REQUIRE_MODELS  1: a missing binary or model fails the run instead of
                        skipping (scripts/test.sh sets it, so CI never passes
                        by skipping everything)
"""

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOLLM2_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Figures (error norms, agreement rates) that tests want shown at the end of
# the run; collected here and printed by pytest_terminal_summary.
_REPORT = []


def _missing(msg):
    if os.environ.get("BRISK_REQUIRE_MODELS") == "1":
        pytest.fail(msg + " (BRISK_REQUIRE_MODELS=1)", pytrace=False)
    pytest.skip(msg)


def pytest_terminal_summary(terminalreporter):
    if _REPORT:
        terminalreporter.section("brisk figures")
        for line in _REPORT:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def report():
    """report(line): show a figure in the terminal summary of this run."""

    def add(line):
        _REPORT.append(line)
        print(line)

    return add


# ---- running the binary -----------------------------------------------------

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer",
                     "SUMMARY: AddressSanitizer", "SUMMARY: UndefinedBehaviorSanitizer",
                     "Sanitizer has encountered a fatal error")


@dataclass
class Result:
    args: list
    returncode: int
    out: bytes  # raw stdout: generated text may hold any bytes
    err: str

    @property
    def stdout(self):
        return self.out.decode("utf-8", errors="replace")

    def err_lines(self):
        return [line for line in self.err.splitlines() if line.strip()]


class Brisk:
    """The binary under test. run() fails the test on a crash or sanitizer report."""

    def __init__(self, path):
        self.path = str(path)
        # Sanitized builds run several times slower.
        self.slow_factor = 4.0 if ("asan" in self.path or "tsan" in self.path) else 1.0

    def run(self, *args, timeout=60, check=True, input=None):
        argv = [self.path] + [str(a) for a in args]
        stdin = None if input is not None else subprocess.DEVNULL
        try:
            p = subprocess.run(argv, capture_output=True, timeout=timeout * self.slow_factor,
                               input=input, stdin=stdin)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"timed out after {e.timeout:.0f} s: {' '.join(argv)}", pytrace=False)
        r = Result(argv, p.returncode, p.stdout, p.stderr.decode("utf-8", errors="replace"))
        tail = r.err[-6000:]
        if any(m in r.err for m in SANITIZER_MARKERS):
            pytest.fail(f"sanitizer report from {' '.join(argv)}:\n{tail}", pytrace=False)
        if r.returncode < 0:
            pytest.fail(f"killed by signal {-r.returncode}: {' '.join(argv)}\n{tail}",
                        pytrace=False)
        if check and r.returncode != 0:
            pytest.fail(f"exit {r.returncode}: {' '.join(argv)}\n{tail}", pytrace=False)
        return r

    def generate(self, model, prompt, *args, **kw):
        """Continuation text (str) of a generate run."""
        return self.run("generate", "--model", model, "--prompt", prompt, *args, **kw).stdout

    def tokenize(self, model, text, *args):
        r = self.run("tokenize", "--model", model, "--text", text, *args)
        return [int(t) for t in r.stdout.split()]


@pytest.fixture(scope="session")
def brisk_bin():
    path = Path(os.environ.get("BRISK_BIN") or REPO / "build" / "bin" / "brisk")
    if not (path.is_file() and os.access(path, os.X_OK)):
        _missing(f"brisk binary not found at {path}; build it with scripts/build.sh "
                 "or point BRISK_BIN at it")
    return path


@pytest.fixture(scope="session")
def brisk(brisk_bin):
    return Brisk(brisk_bin)


# ---- models -----------------------------------------------------------------


@pytest.fixture(scope="session")
def shared_dir():
    d = Path(os.environ.get("BRISK_SHARED_DIR") or REPO.parent / "shared")
    if not (d / "models" / "stories260K.bin").is_file():
        _missing(f"shared models not found in {d}/models; set BRISK_SHARED_DIR")
    return d


@pytest.fixture(scope="session")
def smollm2_path():
    env = os.environ.get("BRISK_SMOLLM2")
    if env:
        path = Path(env)
    else:
        cache = Path(os.environ.get("BRISK_CACHE_DIR") or Path.home() / ".cache" / "brisk")
        path = cache / "models" / SMOLLM2_NAME
    if not path.is_file():
        _missing(f"{SMOLLM2_NAME} not found at {path}; run scripts/fetch-model.sh")
    return path


@pytest.fixture(scope="session")
def stories260k_gguf(brisk, shared_dir, tmp_path_factory):
    """stories260K converted to GGUF by `brisk convert-llama2c` (once per session)."""
    out = tmp_path_factory.mktemp("stories") / "stories260K.gguf"
    m = shared_dir / "models"
    brisk.run("convert-llama2c", "--model", m / "stories260K.bin", "--tokenizer",
              m / "tok512.bin", "--out", out, timeout=60)
    assert out.is_file() and out.stat().st_size > 1_000_000
    return out


@pytest.fixture(scope="session")
def reference():
    """The float64 NumPy reference module (tests/reference/llama_ref.py)."""
    sys.path.insert(0, str(REPO / "tests" / "reference"))
    try:
        import llama_ref
    finally:
        sys.path.pop(0)
    return llama_ref
