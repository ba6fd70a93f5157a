"""The README's Serving block works as written: every curl one-liner in it is
run against `brisk serve` on SmolLM2 (the default model), with the README's
localhost:8080 pointed at the test server's ephemeral port."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def serving_commands():
    text = README.read_text()
    m = re.search(r"^## Serving\n.*?^```sh\n(.*?)^```", text, re.S | re.M)
    assert m, "README.md has no ```sh block under '## Serving'"
    cmds, cur = [], ""
    for line in m.group(1).splitlines():
        line = line.split("  #")[0].rstrip() if not cur else line.rstrip()
        if not cur and not line.startswith("curl "):
            continue
        cur += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            cmds.append(cur)
            cur = ""
    return cmds


def test_readme_has_the_endpoints():
    cmds = " ".join(serving_commands())
    for path in ["/health", "/v1/models", "/v1/chat/completions", "/v1/completions", "/metrics"]:
        assert path in cmds, path


@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_readme_curl_one_liners(smollm2_server):
    if not shutil.which("curl"):
        pytest.fail("curl is missing: scripts/install-deps.sh installs it")
    addr = f"{smollm2_server.host}:{smollm2_server.port}"
    cmds = serving_commands()
    assert len(cmds) >= 6, cmds
    for cmd in cmds:
        run = cmd.replace("localhost:8080", addr)
        assert run != cmd, cmd
        # --fail-with-body: an HTTP error fails curl (a pipe's status is its last
        # command's; the output checks below catch a failed curl there)
        run = run + " --fail-with-body" if "|" not in run else run.replace(" | ", " --fail-with-body | ", 1)
        p = subprocess.run(["bash", "-c", run], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (cmd, p.stdout, p.stderr)
        out = p.stdout
        assert out.strip(), cmd
        if "/metrics" in cmd:
            assert re.search(r"^vllm:\w+(\{[^}]*\})? \S+$", out, re.M), out
        elif '"stream":true' in cmd:
            events = [ln[6:] for ln in out.splitlines() if ln.startswith("data: ")]
            assert events[-1] == "[DONE]", out
            text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
            assert len(text) > 0
        else:
            body = json.loads(out)
            if "/chat/" in cmd:
                assert "Paris" in body["choices"][0]["message"]["content"], body
            elif "/v1/completions" in cmd:
                assert body["choices"][0]["text"] and body["usage"]["completion_tokens"] == 32, body
            elif "/v1/models" in cmd:
                assert body["data"][0]["id"], body
            elif "/health" in cmd:
                pass
