"""Real Hugging Face folders made from the SmolLM2 and Gemma 3 270M GGUFs (slow
tier): brisk on the folder against brisk on the GGUF it was made from.

  - numpy: the GGUF undone into a folder with numpy alone
    (bench/hf_folder_check.gguf_to_folder: names, q/k rows back to
    rotate-half, tokenizer.json built by the `tokenizers` package from the
    GGUF's 49,152-token vocabulary and SmolLM's pre-tokenizer): the same
    logits with --weights f32 (the Q4_1 blocks dequantized twice, by the gguf
    package and by brisk), greedy text identical, and the tokenizer from
    tokenizer.json equal to the GGUF's and to the `tokenizers` package's on
    a corpus of multilingual text, emoji, code and whitespace runs;
  - transformers: from_pretrained(gguf_file=...) + save_pretrained (float32),
    an independent writer, for SmolLM2 and for Gemma 3 270M (a SentencePiece
    tokenizer, norms stored as w rather than w + 1, Q4_K_M blocks
    dequantized by transformers); needs torch and transformers and skips
    with a message without them (they stay out of CI's install).
"""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="needs tokenizers (pip install -r tests/requirements.txt)")
pytest.importorskip("safetensors", reason="needs safetensors (pip install -r tests/requirements.txt)")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "bench"))
import hf_folder_check as hc  # noqa: E402

pytestmark = pytest.mark.slow


def _logits(brisk, model, ids, dump):
    brisk.run("generate", "--model", model, "--prompt-ids", " ".join(map(str, ids)), "-n", "0",
              "--temp", "0", "--weights", "f32", "--dump-logits", dump, timeout=120)
    return np.fromfile(dump, dtype="<f4").astype(np.float64)


def _golden_texts():
    """The texts of ../shared/vocab's tokenizer goldens (llama.cpp's test
    inputs, separated by __ggml_vocab_test__ lines), deduplicated."""
    d = Path(os.environ.get("BRISK_SHARED_DIR") or Path(__file__).resolve().parents[3] / "shared")
    texts = []
    for inp in sorted((d / "vocab").glob("*.inp")):
        for t in inp.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n"):
            if t and t not in texts:
                texts.append(t)
    return texts


def _check(brisk, gguf, folder, tmp_path, bound, report, label):
    from tokenizers import Tokenizer

    ids = brisk.tokenize(gguf, hc.PROMPT)
    a = _logits(brisk, folder, ids, tmp_path / "a.f32")
    b = _logits(brisk, gguf, ids, tmp_path / "b.f32")
    rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    report(f"hf real folder {label}: logits rel L2 {rel:.2e} vs the GGUF (bound {bound:.0e})")
    assert rel <= bound
    texts = [brisk.generate(m, hc.PROMPT, "-n", "24", "--temp", "0", "--weights", "f32",
                            timeout=120) for m in (folder, gguf)]
    assert texts[0] == texts[1]
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    goldens = _golden_texts()
    report(f"hf real folder {label}: tokenizer on {len(hc.CORPUS)} corpus texts and "
           f"{len(goldens)} golden inputs")
    for text in hc.CORPUS + goldens:
        f_ids = brisk.tokenize(folder, text, "--no-bos", "--special")
        assert f_ids == brisk.tokenize(gguf, text, "--no-bos", "--special"), text
        assert f_ids == tok.encode(text, add_special_tokens=False).ids, text


def test_numpy_folder_equals_gguf(brisk, smollm2_path, tmp_path, report):
    folder = hc.gguf_to_folder(smollm2_path, tmp_path / "numpy")
    _check(brisk, smollm2_path, folder, tmp_path, 1e-5, report, "numpy")


def test_transformers_folder_equals_gguf(brisk, smollm2_path, tmp_path, report):
    pytest.importorskip("torch", reason="torch and transformers are not installed (they stay "
                        "out of CI: pip install torch transformers to run this check)")
    pytest.importorskip("transformers", reason="transformers is not installed")
    folder = hc.transformers_folder(smollm2_path, tmp_path / "transformers")
    # transformers dequantizes to float32 and save_pretrained keeps it: the f16 bound.
    _check(brisk, smollm2_path, Path(folder), tmp_path, 1e-2, report, "transformers")


GEMMA3 = "gemma-3-270m-q4_k_m.gguf"


def test_transformers_gemma3_folder_equals_gguf(brisk, tmp_path, report):
    pytest.importorskip("torch", reason="torch and transformers are not installed (they stay "
                        "out of CI: pip install torch transformers to run this check)")
    pytest.importorskip("transformers", reason="transformers is not installed")
    cache = Path(os.environ.get("BRISK_CACHE_DIR") or Path.home() / ".cache" / "brisk")
    gguf = cache / "models" / GEMMA3
    if not gguf.is_file():
        pytest.skip(f"{GEMMA3} not found at {gguf}; run scripts/fetch-model.sh gemma3-270m")
    folder = hc.transformers_folder(gguf, tmp_path / "transformers-gemma3")
    _check(brisk, gguf, Path(folder), tmp_path, 1e-2, report, "transformers gemma3")
