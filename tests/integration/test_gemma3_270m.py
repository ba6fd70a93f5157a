"""The real Gemma 3 270M Q4_K_M file (scripts/fetch-model.sh gemma3-270m; 253 MB):
greedy continuations against ik_llama.cpp's and chat through `brisk serve`.

Marked exhaustive (left out of CI: the file is a 253 MB download); skipped when the
file is not in the cache. Run by hand:
    scripts/fetch-model.sh gemma3-270m
    .venv-test/bin/python -m pytest tests/integration/test_gemma3_270m.py -m exhaustive

The expected continuations are ik_llama.cpp's (llama-cli, greedy, on this file
requantized to F32 by its llama-quantize), recorded by bench/peer_greedy.py in
bench/results/2026-11-26-zen4-vm-peer-greedy-gemma3-270m-ik-f32.json; brisk matched all
8 there at --weights auto and f32."""
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME = "gemma-3-270m-q4_k_m.gguf"
RECORD = ROOT / "bench" / "results" / "2026-11-26-zen4-vm-peer-greedy-gemma3-270m-ik-f32.json"

pytestmark = pytest.mark.exhaustive


@pytest.fixture(scope="module")
def gemma_path():
    cache = Path(os.environ.get("BRISK_CACHE_DIR") or Path.home() / ".cache" / "brisk")
    path = cache / "models" / NAME
    if not path.is_file():
        pytest.skip(f"{NAME} not found at {path}; run scripts/fetch-model.sh gemma3-270m")
    return path


def _rows():
    return json.loads(RECORD.read_text())["rows"]


@pytest.mark.parametrize("row", _rows()[:4], ids=lambda r: r["prompt"][:24])
def test_greedy_matches_ik_llama(brisk, gemma_path, row):
    got = brisk.generate(gemma_path, row["prompt"], "-n", "32", "--temp", "0", "--ignore-eos")
    assert got == row["peer"], (row["prompt"], got, row["peer"])


def test_serve_chats(start_server, gemma_path):
    srv = start_server(gemma_path)
    try:
        assert "using the gemma template of architecture gemma3" in srv.log()
        r = srv.request("POST", "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "What is the capital of France?"}],
                         "max_tokens": 16, "temperature": 0})
        assert r.status == 200, r.body
        msg = r.json()["choices"][0]["message"]["content"]
        assert msg.strip(), r.body
        m = srv.request("GET", "/v1/models").json()["data"][0]
        assert m.get("file_type") == "Q4_K_M", m
    finally:
        srv.stop()
