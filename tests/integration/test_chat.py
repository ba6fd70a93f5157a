"""SmolLM2-135M-Instruct as a chat model: a factual answer and seeded sampling."""

import pytest

CHAT_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
STORY_PROMPT = (
    "<|im_start|>user\nWrite one sentence about a dog.<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_capital_of_france(brisk, smollm2_path, report):
    out = brisk.generate(smollm2_path, CHAT_PROMPT, "--special", "--temp", "0", "-n", "32")
    report(f"chat (greedy): {out.strip()!r}")
    assert "Paris" in out


def sample(brisk, model, seed):
    return brisk.generate(model, STORY_PROMPT, "--special", "--temp", "0.8", "--seed", seed,
                          "-n", "24", "--ignore-eos")


@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_seeded_sampling_is_reproducible(brisk, smollm2_path):
    assert sample(brisk, smollm2_path, 1234) == sample(brisk, smollm2_path, 1234)


@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_different_seeds_differ(brisk, smollm2_path):
    outs = {sample(brisk, smollm2_path, s) for s in (1, 2, 3)}
    # 24 tokens at temperature 0.8: three identical samples would mean the seed is ignored.
    assert len(outs) > 1, outs
