"""Helpers shared by tests/deploy/test_manifests.py and test_images.py.

Environment (as for tests/integration):
  BRISK_BIN             binary under test (default <repo>/build/bin/brisk)
  BRISK_SMOLLM2         path to SmolLM2-135M-Instruct.Q4_1.gguf (default: the
                        fetch-model.sh cache, ${BRISK_CACHE_DIR:-~/.cache/brisk}/models)
  BRISK_REQUIRE_MODELS  1: a missing binary, model or tool fails instead of skipping
"""

import http.client
import os
import re
import shutil
import sys
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOLLM2_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
LISTEN_RE = re.compile(r"listening on http://(\[[^\]]+\]|[^\s:/]+):(\d+)")


def missing(msg):
    if os.environ.get("BRISK_REQUIRE_MODELS") == "1":
        pytest.fail(msg + " (BRISK_REQUIRE_MODELS=1)", pytrace=False)
    pytest.skip(msg)


def brisk_bin():
    path = Path(os.environ.get("BRISK_BIN") or REPO / "build" / "bin" / "brisk")
    if not os.access(path, os.X_OK):
        missing(f"brisk binary not found at {path}; run scripts/build.sh")
    return path


def smollm2_path():
    env = os.environ.get("BRISK_SMOLLM2")
    if env:
        path = Path(env)
    else:
        cache = Path(os.environ.get("BRISK_CACHE_DIR") or Path.home() / ".cache" / "brisk")
        path = cache / "models" / SMOLLM2_NAME
    if not path.is_file():
        missing(f"{SMOLLM2_NAME} not found at {path}; run scripts/fetch-model.sh")
    return path


def tool(name):
    """Path of a command on PATH (kubectl) or beside this interpreter (yamllint, hadolint)."""
    beside = Path(sys.executable).parent / name
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if not found:
        missing(f"{name} not found; run scripts/install-deps.sh and the venv setup of scripts/test.sh")
    return found


def serve_help():
    """The long options `brisk serve --help` documents, e.g. {'--model', '--port', ...}."""
    r = subprocess.run([str(brisk_bin()), "serve", "--help"], capture_output=True, text=True, timeout=30)
    text = r.stdout + r.stderr
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
    assert "--model" in flags and "--port" in flags, f"unexpected serve --help output:\n{text}"
    return flags


def get(port, path, headers=None, timeout=5):
    """(status, body) of GET http://127.0.0.1:port/path."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


class Serve:
    """`brisk serve ARGS` started from the given argv (which must listen on
    127.0.0.1 port 0), waited for until /health is 200, killed on stop()."""

    def __init__(self, argv, log_path):
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.proc = None
        self.port = None

    def log(self):
        return self.log_path.read_bytes().decode("utf-8", errors="replace")

    def start(self, timeout=60):
        with open(self.log_path, "wb") as log_f:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log_f,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while self.port is None:
            m = LISTEN_RE.search(self.log())
            if m:
                self.port = int(m.group(2))
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"brisk serve did not listen: {' '.join(self.argv)}\n{self.log()[-4000:]}",
                            pytrace=False)
            else:
                time.sleep(0.02)
        while True:
            try:
                if get(self.port, "/health")[0] == 200:
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"/health not 200 within {timeout} s:\n{self.log()[-4000:]}", pytrace=False)
            time.sleep(0.05)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
