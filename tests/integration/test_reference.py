"""brisk's logits against the float64 NumPy reference (tests/reference/llama_ref.py).

SmolLM2-135M-Instruct (Q4_1) on a fixed English prompt of about 128 tokens:
brisk evaluates the prompt in one batched forward pass and dumps the logits of
every position; the reference does the same in float64 from the same quantized
weights. Per position we take the relative L2 error ||l - ref|| / ||ref|| and
whether the argmax agrees.

Bounds: f32 weights differ from the reference only by float32 arithmetic
(1e-4); f16 re-rounds every weight to half precision (1e-2; about 1.5e-3 is
typical) and int8 re-rounds weights and activations (2e-2). Greedy top-1 must
agree on at least 99% of positions for all three.
"""

import numpy as np
import pytest


# Numbers against the reference: the Release pass (pytest.ini).
pytestmark = pytest.mark.reference

PROMPT = (
    "The old lighthouse stood at the edge of the cliff, its white paint peeling after decades of "
    "salt wind and winter storms. Every evening, the keeper climbed the narrow spiral staircase, "
    "one hundred and twelve steps, to light the lamp that warned fishing boats away from the "
    "rocks below. He kept a logbook in which he wrote the weather, the ships he had seen, and "
    "small notes about the birds that nested under the gallery. When the harbour authority "
    "finally installed an automatic light, he was told his work was no longer needed, but he "
    "still climbed the stairs each night, just to watch the beam sweep across the dark water. "
    "He smiled."
)
N_POS = 128  # positions compared: the prompt is 128 tokens

BOUNDS = {"f32": 1e-4, "f16": 1e-2, "int8": 2e-2}
MIN_TOP1 = 0.99


@pytest.fixture(scope="session")
def prompt_tokens(brisk, smollm2_path):
    toks = brisk.tokenize(smollm2_path, PROMPT)
    assert len(toks) >= N_POS, f"prompt has {len(toks)} tokens, want >= {N_POS}"
    return toks


@pytest.fixture(scope="session")
def ref_logits(reference, smollm2_path, prompt_tokens):
    """float64 [n_tokens, n_vocab], computed once per session (~10 s)."""
    m = reference.Model(str(smollm2_path))
    return reference.forward(m, prompt_tokens)


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["f32", "f16", "int8"])
def test_logits_match_reference(brisk, smollm2_path, prompt_tokens, ref_logits, weights,
                                tmp_path, report, record_property):
    dump = tmp_path / f"logits-{weights}.f32"
    brisk.run("generate", "--model", smollm2_path, "--prompt", PROMPT, "--weights", weights,
              "--temp", "0", "-n", "0", "--dump-logits", dump, timeout=120)
    n, vocab = ref_logits.shape
    got = np.fromfile(dump, dtype="<f4")
    assert got.size == n * vocab, f"want [{n}][{vocab}] floats, got {got.size}"
    got = got.reshape(n, vocab).astype(np.float64)[:N_POS]
    ref = ref_logits[:N_POS]
    assert np.isfinite(got).all()

    rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
    top1 = float(np.mean(got.argmax(axis=1) == ref.argmax(axis=1)))
    worst = int(rel.argmax())
    line = (f"reference {weights:>4}: max rel L2 {rel.max():.3e} (pos {worst}), "
            f"mean {rel.mean():.3e}, top-1 agreement {top1 * 100:.1f}% over {N_POS} positions")
    report(line)
    record_property(f"{weights}_max_rel_l2", float(rel.max()))
    record_property(f"{weights}_top1", top1)

    assert rel.max() <= BOUNDS[weights], line
    assert top1 >= MIN_TOP1, line
