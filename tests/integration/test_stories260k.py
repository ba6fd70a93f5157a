"""stories260K (llama2.c's tiny TinyStories model) against its published goldens.

The goldens in shared/models/README.md come from llama2.c's own run.c. There a
"step" is one forward pass: from BOS alone at position 0, 200 steps produce 200
tokens, i.e. `brisk generate -n 200` on the empty prompt (= BOS alone). With a
prompt of P tokens (BOS included) and 64 total steps, the first P-1 steps only
feed the prompt, so 64 - (P-1) tokens are generated.
"""

import numpy as np

GOLDEN_IDS = [int(t) for t in """
403 407 261 378 432 383 286 261 376 298 315 421 395 317 426 338 401 396 267 337 410 408 419 292
411 322 265 282 295 433 426 385 328 432 358 394 261 370 432 352 266 268 388 426 338 391 266 267
337 335 312 432 398 312 286 267 414 270 333 415 426 13 438 310 439 419 357 336 432 313 438 310
432 278 316 439 419 298 414 267 265 282 295 433 426 436 317 286 296 418 269 279 292 416 439 413
409 416 327 263 415 294 267 400 426 338 336 432 313 442 391 267 337 335 364 420 268 388 432 398
359 280 303 439 413 272 417 264 312 426 436 13 438 310 286 296 418 269 279 292 416 439 413 409
416 327 263 415 294 267 400 426 338 336 432 313 442 439 423 262 304 420 422 432 317 426 359 279
292 416 439 413 409 416 327 263 415 294 267 400 426 436 13 438 310 279 292 416 439 413 391 267
281 421 427 311 357 432 384 358
""".split()]

# The README's text block; its "465 bytes" counts the code block's final
# newline: the text itself is 464 bytes and ends without one.
GOLDEN_TEXT = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. "
    "She said, \"I want to play with your ball, but I can't find it.\"\n"
    "Lily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what "
    "to do.\"\n"
    "Lily didn't want to help her mom, so she"
).encode()

LILY_PROMPT = "Lily had a cat"
# llama2.c's encoder: BOS, then the text with a leading space, merged by score:
# <s> " Lily" " had" " a" " c" "at".
LILY_IDS = [1, 317, 381, 261, 280, 294]
LILY_GOLDEN = (
    "Lily had a cat named Max. Max loved to play with his toys. One day, Max's mom told her that "
    "it was time to go to the park. Max was very happy and didn't want to play with"
)
LILY_STEPS = 64


def test_golden_constants():
    assert len(GOLDEN_IDS) == 200
    assert len(GOLDEN_TEXT) == 464


def test_golden_from_bos(brisk, stories260k_gguf):
    out = brisk.run("generate", "--model", stories260k_gguf, "--prompt", "", "--temp", "0",
                    "-n", "200").out
    assert out == GOLDEN_TEXT


def test_golden_lily(brisk, stories260k_gguf):
    n_gen = LILY_STEPS - (len(LILY_IDS) - 1)
    out = brisk.generate(stories260k_gguf, LILY_PROMPT, "--temp", "0", "-n", n_gen)
    assert LILY_PROMPT + out == LILY_GOLDEN


def test_tokenize_lily(brisk, stories260k_gguf):
    assert brisk.tokenize(stories260k_gguf, LILY_PROMPT) == LILY_IDS
    assert brisk.tokenize(stories260k_gguf, LILY_PROMPT, "--no-bos") == LILY_IDS[1:]


def test_tokenize_golden_text(brisk, stories260k_gguf):
    # The golden text happens to re-encode to exactly the ids that produced it.
    assert brisk.tokenize(stories260k_gguf, GOLDEN_TEXT.decode()) == [1] + GOLDEN_IDS


def test_golden_ids_batched_prompt(brisk, stories260k_gguf, tmp_path):
    """The golden ids through the batched prompt pass: every position's argmax is the next id."""
    dump = tmp_path / "logits.f32"
    brisk.run("generate", "--model", stories260k_gguf, "--prompt", GOLDEN_TEXT.decode(),
              "--temp", "0", "-n", "0", "--dump-logits", dump)
    logits = np.fromfile(dump, dtype="<f4")
    assert logits.size == 201 * 512, f"want [201][512] logits, got {logits.size} floats"
    pred = logits.reshape(201, 512).argmax(axis=1)
    assert pred[:200].tolist() == GOLDEN_IDS


def test_reference_reproduces_golden(reference, stories260k_gguf):
    """The float64 reference on brisk's conversion: validates both against llama2.c."""
    m = reference.Model(str(stories260k_gguf))
    assert reference.greedy(m, [1], 200)[1:] == GOLDEN_IDS
    lily = reference.greedy(m, LILY_IDS, LILY_STEPS - (len(LILY_IDS) - 1))
    assert lily[: len(LILY_IDS)] == LILY_IDS
