"""`brisk serve`'s OpenAI API through the official `openai` client (and raw
HTTP where the exact bytes matter): completions, chat, streaming, sampling
determinism, log-probs, usage and error shapes.

stories260K (tiny, fast, with published goldens) serves most tests; SmolLM2
serves chat. Both servers are shared by the whole module.
"""

import asyncio
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from test_chat import CHAT_PROMPT
from test_stories260k import GOLDEN_TEXT, LILY_GOLDEN, LILY_IDS, LILY_PROMPT

GOLDEN = GOLDEN_TEXT.decode()
STORIES = "stories260K"  # served name: the GGUF's basename without .gguf
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1"
STORIES_CTX = 512  # stories260K's seq_len
LILY_CONT = LILY_GOLDEN[len(LILY_PROMPT):]
LILY_N_GEN = 64 - (len(LILY_IDS) - 1)  # the golden's 64 steps less the prompt's

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QUESTION = "What is the capital of France?"
FRANCE = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def stories(stories_server):
    return stories_server.client()


@pytest.fixture(scope="module")
def smol(smollm2_server):
    return smollm2_server.client()


def golden(client, **kw):
    """The greedy completion of BOS alone: must be GOLDEN's first max_tokens tokens."""
    kw.setdefault("max_tokens", 200)
    extra = {"ignore_eos": True, **kw.pop("extra_body", {})}
    return client.completions.create(model=STORIES, prompt=[1], temperature=0,
                                     extra_body=extra, **kw)


def counts(usage):
    """A usage's token counts without prompt_tokens_details: how many prompt tokens the
    prefix cache served depends on which requests ran before (other tests share the
    server), so equal requests are compared on their counts only."""
    return (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)


def check_error_body(r, status=400):
    """An OpenAI error response: JSON {"error": {message, type, param, code}}."""
    assert r.status == status, (r.status, r.body)
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err
    return err


# ---- models ----------------------------------------------------------------------


def test_models_list(stories, stories_server):
    models = stories.models.list().data
    assert [m.id for m in models] == [STORIES]
    assert models[0].object == "model"
    r = stories_server.request("GET", "/v1/models")
    assert r.status == 200 and r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["object"] == "list"
    assert body["data"][0].get("max_model_len", STORIES_CTX) == STORIES_CTX
    # The file's type as llama.cpp names it (convert-llama2c writes all F32).
    assert body["data"][0]["file_type"] == "F32"


# ---- completions: prompts, goldens, usage ----------------------------------------


def test_golden_from_bos(stories):
    r = golden(stories)
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.text == GOLDEN
    assert c.index == 0 and c.finish_reason == "length"
    assert r.usage.prompt_tokens == 1 and r.usage.completion_tokens == 200
    assert r.usage.total_tokens == 201
    assert r.object == "text_completion" and r.model == STORIES and r.id


def test_string_prompt_golden_and_usage(stories, brisk, stories260k_gguf):
    r = stories.completions.create(model=STORIES, prompt=LILY_PROMPT, temperature=0,
                                   max_tokens=LILY_N_GEN)
    assert r.choices[0].text == LILY_CONT
    assert r.choices[0].finish_reason == "length"
    n_prompt = len(brisk.tokenize(stories260k_gguf, LILY_PROMPT))  # BOS included
    assert r.usage.prompt_tokens == n_prompt == len(LILY_IDS)
    assert r.usage.completion_tokens == LILY_N_GEN


def test_token_id_prompt_equals_text_prompt(stories):
    r = stories.completions.create(model=STORIES, prompt=LILY_IDS, temperature=0,
                                   max_tokens=LILY_N_GEN)
    assert r.choices[0].text == LILY_CONT
    assert r.usage.prompt_tokens == len(LILY_IDS)


def test_model_may_be_omitted(stories_server):
    r = stories_server.post("/v1/completions", {"prompt": [1], "max_tokens": 20,
                                                "temperature": 0})
    assert r.status == 200, r.body
    body = r.json()
    assert GOLDEN.startswith(body["choices"][0]["text"]) and body["choices"][0]["text"]
    assert body["model"] == STORIES


def test_default_max_tokens_is_16(stories):
    r = stories.completions.create(model=STORIES, prompt=LILY_PROMPT, temperature=0)
    assert r.usage.completion_tokens == 16
    assert r.choices[0].finish_reason == "length"
    assert LILY_CONT.startswith(r.choices[0].text)


def test_list_of_prompts_is_prompt_major(stories, brisk, stories260k_gguf):
    prompts = [LILY_PROMPT, "Once upon a time", "The dog"]
    solo = [stories.completions.create(model=STORIES, prompt=p, temperature=0,
                                       max_tokens=12).choices[0].text for p in prompts]
    assert len(set(solo)) == 3, solo  # else the order below would prove nothing
    r = stories.completions.create(model=STORIES, prompt=prompts, temperature=0, max_tokens=12)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [c.text for c in r.choices] == solo
    assert r.usage.prompt_tokens == sum(len(brisk.tokenize(stories260k_gguf, p))
                                        for p in prompts)
    assert r.usage.completion_tokens == 36

    r = stories.completions.create(model=STORIES, prompt=prompts, n=2, temperature=0,
                                   max_tokens=12)
    assert sorted(c.index for c in r.choices) == list(range(6))
    by_index = {c.index: c.text for c in r.choices}
    # choice index = prompt * n + j
    assert [by_index[i] for i in range(6)] == [t for t in solo for _ in range(2)]


def test_list_of_token_id_lists(stories):
    r = stories.completions.create(model=STORIES, prompt=[[1], LILY_IDS], temperature=0,
                                   max_tokens=30)
    texts = {c.index: c.text for c in r.choices}
    assert GOLDEN.startswith(texts[0]) and len(texts[0]) > 50
    assert LILY_CONT.startswith(texts[1]) and len(texts[1]) > 50
    assert r.usage.prompt_tokens == 1 + len(LILY_IDS)
    assert r.usage.completion_tokens == 60


# ---- stop sequences and lengths ------------------------------------------------


@pytest.mark.parametrize("stop", [
    "le gi",           # spans " little" | " girl": the output ends inside a token
    ["zebra", "park."],
    "\nLily's mom",
    "Once",            # at the very start: empty text
])
def test_stop_sequences(stories, stop):
    r = golden(stories, stop=stop)
    stops = [stop] if isinstance(stop, str) else stop
    first = min(GOLDEN.index(s) for s in stops if s in GOLDEN)
    c = r.choices[0]
    assert c.text == GOLDEN[:first]
    assert c.finish_reason == "stop"
    assert r.usage.completion_tokens < 200
    # The same through the stream: held-back text must never leak past the stop.
    chunks = list(golden(stories, stop=stop, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == GOLDEN[:first]
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"


def test_stop_never_matching(stories):
    r = golden(stories, max_tokens=25, stop=["qqq", "xyzzy"])
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 25
    assert GOLDEN.startswith(r.choices[0].text)


@pytest.mark.parametrize("max_tokens", [1, 5, 37])
def test_max_tokens_finish_length(stories, max_tokens):
    r = golden(stories, max_tokens=max_tokens)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == max_tokens
    assert GOLDEN.startswith(r.choices[0].text) and r.choices[0].text


def test_context_length_exceeded(stories):
    with pytest.raises(openai.BadRequestError) as ei:
        stories.completions.create(model=STORIES, prompt=LILY_IDS, max_tokens=700)
    e = ei.value
    assert e.status_code == 400 and e.code == "context_length_exceeded"
    msg = e.body["message"] if isinstance(e.body, dict) else str(e)
    assert str(STORIES_CTX) in msg, msg
    assert "706" in msg or "700" in msg, msg


def test_fits_the_context_exactly(stories):
    r = golden(stories, max_tokens=STORIES_CTX - 1)
    assert r.usage.completion_tokens == STORIES_CTX - 1
    assert r.choices[0].text.startswith(GOLDEN)


# ---- sampling and determinism ------------------------------------------------------


def sampled(client, seed, n=1, stream=False, **kw):
    return client.completions.create(model=STORIES, prompt=LILY_PROMPT, temperature=1.0,
                                     max_tokens=24, seed=seed, n=n, stream=stream,
                                     extra_body={"ignore_eos": True}, **kw)


def test_n_choices_with_seed(stories):
    r = sampled(stories, 1234, n=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    texts = [c.text for c in sorted(r.choices, key=lambda c: c.index)]
    # Three identical samples of 24 tokens at temperature 1: the choices share one stream.
    assert len(set(texts)) > 1, texts
    again = sampled(stories, 1234, n=3)
    assert [c.text for c in sorted(again.choices, key=lambda c: c.index)] == texts
    assert r.usage.completion_tokens == 72


def test_seed_reproducible_and_seeds_differ(stories):
    a = sampled(stories, 7).choices[0].text
    assert sampled(stories, 7).choices[0].text == a
    others = {sampled(stories, s).choices[0].text for s in (8, 9, 10)}
    assert others != {a}, "the seed is ignored"


def test_temperature_zero_ignores_seed(stories):
    a = golden(stories, max_tokens=40, seed=1).choices[0].text
    b = golden(stories, max_tokens=40, seed=2).choices[0].text
    assert a == b and GOLDEN.startswith(a)


def test_concurrent_requests_match_solo(stories):
    """Batch invariance: greedy and seeded outputs do not depend on what else runs."""
    seeded_solo = sampled(stories, 99).choices[0].text

    def one(i):
        if i % 2:
            return "golden", golden(stories).choices[0].text
        return "seeded", sampled(stories, 99).choices[0].text

    with ThreadPoolExecutor(12) as ex:
        results = list(ex.map(one, range(12)))
    for kind, text in results:
        assert text == (GOLDEN if kind == "golden" else seeded_solo), (kind, text)


# ---- logprobs and echo --------------------------------------------------------------


def test_logprobs_shapes_and_greedy_argmax(stories):
    r = golden(stories, max_tokens=20, logprobs=5)
    c = r.choices[0]
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 20
    assert len(lp.text_offset) == 20
    assert "".join(lp.tokens) == c.text == GOLDEN[:len(c.text)]
    assert lp.text_offset[0] == 0
    for i in range(19):
        assert lp.text_offset[i + 1] == lp.text_offset[i] + len(lp.tokens[i].encode())
    for tok, tlp, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert tlp <= 0.0
        assert 1 <= len(top) <= 5, top
        assert all(v <= 0.0 for v in top.values())
        assert sum(2.718281828459045 ** v for v in top.values()) <= 1.0 + 1e-4
        # greedy: the chosen token is the most likely one
        assert tok in top, (tok, top)
        assert abs(top[tok] - tlp) < 1e-4
        assert abs(max(top.values()) - tlp) < 1e-4


def test_logprobs_zero_gives_chosen_only(stories):
    r = golden(stories, max_tokens=6, logprobs=0)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 6 and all(v <= 0 for v in lp.token_logprobs)
    # no alternatives: each entry is empty or holds the chosen token alone
    for tok, top in zip(lp.tokens, lp.top_logprobs or [None] * 6):
        assert not top or list(top) == [tok], (tok, top)


def test_echo(stories):
    plain = stories.completions.create(model=STORIES, prompt=LILY_PROMPT, temperature=0,
                                       max_tokens=8)
    r = stories.completions.create(model=STORIES, prompt=LILY_PROMPT, temperature=0,
                                   max_tokens=8, echo=True)
    assert r.choices[0].text == LILY_PROMPT + plain.choices[0].text
    assert counts(r.usage) == counts(plain.usage)


def test_echo_with_logprobs(stories):
    r = stories.completions.create(model=STORIES, prompt=LILY_PROMPT, temperature=0,
                                   max_tokens=8, echo=True, logprobs=2)
    lp = r.choices[0].logprobs
    n = r.usage.prompt_tokens + r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == n
    assert lp.token_logprobs[0] is None
    assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:])
    assert r.choices[0].text.startswith(LILY_PROMPT)
    assert lp.text_offset == sorted(lp.text_offset)
    # BOS is shown but adds no text; every other token's string sits at its offset
    assert lp.tokens[0] == "<s>" and lp.text_offset[0] == 0
    text = r.choices[0].text.encode()
    for tok, off in zip(lp.tokens[1:], lp.text_offset[1:]):
        assert text[off:off + len(tok.encode())] == tok.encode(), (tok, off)
    assert "".join(lp.tokens[1:]) == r.choices[0].text


@pytest.mark.parametrize("prompt", [[1], LILY_PROMPT])  # BOS alone; a text
def test_stream_logprobs_match_text(stories, prompt):
    kw = dict(model=STORIES, prompt=prompt, temperature=0, max_tokens=24, logprobs=1)
    whole = stories.completions.create(**kw)
    toks, offs, text = [], [], ""
    for ch in stories.completions.create(stream=True, **kw):
        for c in ch.choices:
            text += c.text
            if c.logprobs:
                toks += c.logprobs.tokens
                offs += c.logprobs.text_offset
    assert text == whole.choices[0].text
    assert toks == whole.choices[0].logprobs.tokens
    assert offs == whole.choices[0].logprobs.text_offset
    assert "".join(toks) == text


# ---- streaming ----------------------------------------------------------------------


def joined(chunks, index=0):
    return "".join(c.text for ch in chunks for c in ch.choices if c.index == index)


def test_stream_equals_non_stream_greedy(stories):
    chunks = list(golden(stories, stream=True))
    assert len(chunks) >= 10  # tokens arrive as they are made, not in one piece
    assert joined(chunks) == GOLDEN
    finishes = [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]
    assert finishes == ["length"]
    assert all(ch.usage is None for ch in chunks)
    assert all(ch.object == "text_completion" for ch in chunks)
    assert len({ch.id for ch in chunks}) == 1


def test_stream_equals_non_stream_seeded(stories):
    whole = stories.completions.create(model=STORIES, prompt=LILY_PROMPT, temperature=0.8,
                                       max_tokens=40, seed=4242,
                                       extra_body={"ignore_eos": True})
    chunks = list(stories.completions.create(model=STORIES, prompt=LILY_PROMPT,
                                             temperature=0.8, max_tokens=40, seed=4242,
                                             stream=True, extra_body={"ignore_eos": True}))
    assert joined(chunks) == whole.choices[0].text


def test_stream_several_prompts_and_choices(stories):
    prompts = [LILY_PROMPT, "The dog"]
    whole = stories.completions.create(model=STORIES, prompt=prompts, n=2, temperature=0.9,
                                       seed=5, max_tokens=16)
    chunks = list(stories.completions.create(model=STORIES, prompt=prompts, n=2,
                                             temperature=0.9, seed=5, max_tokens=16,
                                             stream=True))
    for c in whole.choices:
        assert joined(chunks, c.index) == c.text, c.index
    finished = sorted(c.index for ch in chunks for c in ch.choices if c.finish_reason)
    assert finished == [0, 1, 2, 3]


def test_stream_include_usage(stories):
    whole = golden(stories, max_tokens=30)
    chunks = list(golden(stories, max_tokens=30, stream=True,
                         stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (1, 30)
    assert counts(last.usage) == counts(whole.usage)
    assert all(ch.usage is None for ch in chunks[:-1])
    assert joined(chunks) == whole.choices[0].text


def test_stream_async_client(stories_server):
    async def main():
        client = stories_server.async_client()
        try:
            async def one(prompt):
                stream = await client.completions.create(
                    model=STORIES, prompt=prompt, temperature=0, max_tokens=200, stream=True,
                    extra_body={"ignore_eos": True})
                return "".join([c.text async for ch in stream for c in ch.choices])

            return await asyncio.gather(*(one([1]) for _ in range(4)))
        finally:
            await client.close()

    assert asyncio.run(main()) == [GOLDEN] * 4


def test_raw_sse_framing(stories_server):
    conn, status, headers = stories_server.stream(
        "/v1/completions", {"prompt": [1], "max_tokens": 10, "temperature": 0, "stream": True})
    try:
        assert status == 200
        assert headers["content-type"].startswith("text/event-stream"), headers
        events = list(conn.iter_sse(headers))
    finally:
        conn.close()
    assert events[-1] == "[DONE]"
    payloads = [json.loads(e) for e in events[:-1]]
    assert "".join(c["text"] for p in payloads for c in p["choices"]) == golden(
        stories_server.client(), max_tokens=10).choices[0].text


# ---- chat (SmolLM2) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def paris(brisk, smollm2_path):
    """What `brisk generate` answers to the same ChatML prompt, greedily."""
    return brisk.generate(smollm2_path, CHAT_PROMPT, "--special", "--temp", "0", "-n", "64")


def test_chat_paris(smol, brisk, smollm2_path, paris, report):
    r = smol.chat.completions.create(model=SMOLLM2, messages=FRANCE, temperature=0,
                                     max_tokens=64)
    c = r.choices[0]
    report(f"chat via server (greedy): {c.message.content!r}")
    assert "Paris" in c.message.content
    assert c.message.role == "assistant"
    assert c.finish_reason == "stop"
    assert r.object == "chat.completion" and r.model == SMOLLM2
    # The server's ChatML rendering is the prompt test_chat.py writes by hand.
    assert r.usage.prompt_tokens == len(brisk.tokenize(smollm2_path, CHAT_PROMPT, "--special"))
    assert c.message.content == paris


def test_chat_content_parts(smol):
    plain = smol.chat.completions.create(model=SMOLLM2, messages=FRANCE, temperature=0,
                                         max_tokens=64)
    parts = [{"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
             {"role": "user", "content": [{"type": "text", "text": "What is the capital"},
                                          {"type": "text", "text": " of France?"}]}]
    r = smol.chat.completions.create(model=SMOLLM2, messages=parts, temperature=0,
                                     max_tokens=64)
    assert r.choices[0].message.content == plain.choices[0].message.content
    assert counts(r.usage) == counts(plain.usage)


def test_chat_stream(smol):
    whole = smol.chat.completions.create(model=SMOLLM2, messages=FRANCE, temperature=0,
                                         max_tokens=64)
    chunks = list(smol.chat.completions.create(model=SMOLLM2, messages=FRANCE, temperature=0,
                                               max_tokens=64, stream=True,
                                               stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    text = "".join(c.delta.content or "" for ch in chunks for c in ch.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and counts(chunks[-1].usage) == counts(whole.usage)


def test_chat_multi_turn(smol):
    msgs = FRANCE + [{"role": "assistant", "content": "The capital of France is Paris."},
                     {"role": "user", "content": "And of Italy?"}]
    r = smol.chat.completions.create(model=SMOLLM2, messages=msgs, temperature=0, max_tokens=48)
    assert r.usage.prompt_tokens > 50
    assert r.choices[0].message.content


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_chat_length_limit(smol, field):
    r = smol.chat.completions.create(model=SMOLLM2, messages=FRANCE, temperature=0,
                                     **{field: 3})
    assert r.usage.completion_tokens == 3
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content


def test_chat_logprobs(smol):
    r = smol.chat.completions.create(model=SMOLLM2, messages=FRANCE, temperature=0,
                                     max_tokens=64, logprobs=True, top_logprobs=3)
    c = r.choices[0]
    entries = c.logprobs.content
    assert entries and len(entries) in (r.usage.completion_tokens, r.usage.completion_tokens - 1)
    text = c.message.content
    assert "".join(e.token for e in entries)[:len(text)] == text
    assert bytes(b for e in entries for b in e.bytes)[:len(text.encode())] == text.encode()
    for e in entries:
        assert e.logprob <= 0.0
        assert len(e.top_logprobs) == 3
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert e.top_logprobs[0].token == e.token  # greedy
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4


def test_chat_without_logprobs_has_none(smol):
    r = smol.chat.completions.create(model=SMOLLM2, messages=FRANCE, temperature=0,
                                     max_tokens=4)
    assert r.choices[0].logprobs is None


@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_chat_seeded_n(smol):
    kw = dict(model=SMOLLM2, messages=[{"role": "user", "content": "Tell me a story."}],
              temperature=1.0, max_tokens=16, n=2, seed=31)
    a = smol.chat.completions.create(**kw)
    b = smol.chat.completions.create(**kw)
    ta = [c.message.content for c in sorted(a.choices, key=lambda c: c.index)]
    assert ta == [c.message.content for c in sorted(b.choices, key=lambda c: c.index)]
    assert len(ta) == 2


# ---- errors -------------------------------------------------------------------------


def test_unknown_model_404(stories):
    with pytest.raises(openai.NotFoundError) as ei:
        stories.completions.create(model="gpt-17", prompt="x", max_tokens=1)
    assert ei.value.status_code == 404 and ei.value.code == "model_not_found"


def test_client_bad_request(stories):
    with pytest.raises(openai.BadRequestError) as ei:
        stories.completions.create(model=STORIES, prompt="x", temperature=3)
    assert ei.value.status_code == 400
    assert ei.value.param == "temperature"
    assert ei.value.type == "invalid_request_error"


def test_too_many_choices_400_and_server_up(stories_server):
    """prompts x n over 128 is a 400, and the server lives on (it used to crash
    freeing the request after answering)."""
    for stream in (False, True):
        r = stories_server.post("/v1/completions", {"prompt": ["a"] * 9, "n": 16, "max_tokens": 2,
                                                    "stream": stream})
        assert r.status == 400, r.body
        assert r.json()["error"]["param"] == "n"
    r = stories_server.post("/v1/completions", {"prompt": ["a"] * 8, "n": 16, "max_tokens": 1})
    assert r.status == 200 and len(r.json()["choices"]) == 128


def test_chat_bad_request(smol):
    with pytest.raises(openai.BadRequestError) as ei:
        smol.chat.completions.create(model=SMOLLM2, messages=[], max_tokens=1)
    assert ei.value.status_code == 400


BAD_COMPLETIONS = [
    # (raw body, the param the error should name, or None for "any")
    (b"{not json", None),
    (b"", None),
    (b"[]", None),
    (b'"prompt"', None),
    (b'{"prompt": "a", "prompt": "b"}', "prompt"),
    (b'{"prompt": "a", "temperature": 1e999}', "temperature"),
    (b'{"prompt": "a", "max_tokens": 1e999}', "max_tokens"),
    (b'{"prompt": "a", "temperature": NaN}', None),
    ({}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [[]]}, "prompt"),
    ({"prompt": [-1]}, "prompt"),
    ({"prompt": [512]}, "prompt"),
    ({"prompt": [1.5]}, "prompt"),
    ({"prompt": ["a", 5]}, "prompt"),
    ({"prompt": "a", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "a", "max_tokens": -1}, "max_tokens"),
    ({"prompt": "a", "max_tokens": 2.5}, "max_tokens"),
    ({"prompt": "a", "temperature": -0.1}, "temperature"),
    ({"prompt": "a", "temperature": 2.01}, "temperature"),
    ({"prompt": "a", "temperature": "hot"}, "temperature"),
    ({"prompt": "a", "top_p": 0}, "top_p"),
    ({"prompt": "a", "top_p": 1.5}, "top_p"),
    ({"prompt": "a", "n": 17}, "n"),
    ({"prompt": "a", "n": 0}, "n"),
    ({"prompt": "a", "logprobs": 21}, "logprobs"),
    ({"prompt": "a", "logprobs": -1}, "logprobs"),
    ({"prompt": "a", "logit_bias": {"99999": 1}}, "logit_bias"),
    ({"prompt": "a", "logit_bias": {"512": 1}}, "logit_bias"),
    ({"prompt": "a", "logit_bias": {"abc": 1}}, "logit_bias"),
    ({"prompt": "a", "logit_bias": {"5": 101}}, "logit_bias"),
    ({"prompt": "a", "logit_bias": [1, 2]}, "logit_bias"),
    ({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": "a", "stop": 5}, "stop"),
    ({"prompt": "a", "seed": 1.5}, "seed"),
    ({"prompt": "a", "stream": "yes"}, "stream"),
    ({"prompt": "a", "presence_penalty": 3}, "presence_penalty"),
    ({"prompt": "a", "frequency_penalty": -2.5}, "frequency_penalty"),
    ({"prompt": "a", "top_k": "x"}, "top_k"),
    ({"prompt": "a", "min_p": 1.5}, "min_p"),
    ({"prompt": "a", "model": 5}, "model"),
    ({"prompt": "a\u0000b"}, None),
]


@pytest.mark.parametrize("body,param", BAD_COMPLETIONS,
                         ids=[str(i) for i in range(len(BAD_COMPLETIONS))])
def test_completions_validation(stories_server, body, param):
    r = stories_server.post("/v1/completions", body,
                            headers={"Content-Type": "application/json"})
    err = check_error_body(r)
    assert err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param, err


BAD_CHAT = [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, None),
    ({"messages": [{"role": "user"}]}, None),
    ({"messages": [{"role": "user", "content": 5}]}, None),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     None),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21, "logprobs": True},
     "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
     "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 17}, "n"),
]


@pytest.mark.parametrize("body,param", BAD_CHAT, ids=[str(i) for i in range(len(BAD_CHAT))])
def test_chat_validation(smollm2_server, body, param):
    err = check_error_body(smollm2_server.post("/v1/chat/completions", body))
    if param is not None:
        assert err["param"] == param, err


def test_context_length_error_shape(stories_server):
    r = stories_server.post("/v1/completions", {"prompt": [1] * 500, "max_tokens": 100})
    err = check_error_body(r)
    assert err["code"] == "context_length_exceeded"
    assert "512" in err["message"] and ("600" in err["message"] or "100" in err["message"])


def test_random_hostile_bodies_never_5xx(stories_server):
    """Random mixes of valid and invalid values: 200 or 400, never 5xx or a crash."""
    rng = random.Random(20240601)
    pools = {
        "prompt": ["Lily", "", [1], [1, 2, 3], [[1], [5, 6]], ["a", "b"], [], [[]], 7, None,
                   {"x": 1}, [600], ["a", [1]], "\u00e9\ud7ff", [True]],
        "max_tokens": [1, 3, 0, -5, "3", None, 2.0, True, [], 10 ** 20, float("inf")],
        "temperature": [0, 0.7, 2, 2.5, -1, "0", None, float("nan"), 1e-30],
        "top_p": [1, 0.5, 0, -0.1, 1.01, None, "x"],
        "top_k": [0, 1, 40, -1, -7, 10 ** 12, "4", None],
        "min_p": [0, 0.1, 1, 1.1, -0.5, None],
        "n": [1, 2, 0, 17, -1, "2", None, 1.5],
        "stop": ["x", ["a", "b"], [], [""], ["a"] * 5, 3, None, "\n", ["x" * 2000]],
        "seed": [0, -1, 2 ** 63 - 1, 2 ** 64, 1.5, "1", None],
        "logprobs": [0, 3, 20, 21, -1, True, None],
        "echo": [True, False, 1, None],
        "logit_bias": [{}, {"1": 5}, {"1": 500}, {"-1": 1}, {"x": 1}, [], None, {"511": -100}],
        "presence_penalty": [0, 2, 2.1, -3, None],
        "repetition_penalty": [1, 0, -1, 1.2, 11, None],
        "stream": [False, None, 0],
        "ignore_eos": [True, False, "yes", None],
        "user": ["u", 5, None],
        "extra_unknown_field": [1, "x", None],
    }
    for _ in range(100):
        body = {k: rng.choice(v) for k, v in pools.items() if rng.random() < 0.35}
        if rng.random() < 0.9:
            body.setdefault("prompt", "Lily")
        data = json.dumps(body)  # NaN/Infinity are written as bare words: invalid JSON
        if rng.random() < 0.1:
            data = data[:rng.randrange(len(data) + 1)]  # truncated
        r = stories_server.post("/v1/completions", data.encode(),
                                headers={"Content-Type": "application/json"})
        assert r.status in (200, 400), (r.status, data, r.body)
        if r.status == 400:
            check_error_body(r)
        else:
            assert r.json()["choices"], data
    for _ in range(30):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        r = stories_server.post("/v1/completions", blob,
                                headers={"Content-Type": "application/json"})
        check_error_body(r)
    stories_server.check_alive()


@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_chat_template_flag(start_server, smollm2_path, paris):
    srv = start_server(smollm2_path, "--chat-template", "chatml", "--served-model-name", "smol")
    try:
        r = srv.client().chat.completions.create(model="smol", messages=FRANCE, temperature=0,
                                                 max_tokens=64)
        assert r.choices[0].message.content == paris
        n_chatml = r.usage.prompt_tokens
    finally:
        srv.stop()
    srv = start_server(smollm2_path, "--chat-template", "zephyr")
    try:
        r = srv.client().chat.completions.create(model=SMOLLM2, messages=FRANCE, temperature=0,
                                                 max_tokens=4)
        assert r.usage.prompt_tokens != n_chatml  # another template renders other text
    finally:
        srv.stop()


# ---- many clients at once ------------------------------------------------------------


@pytest.mark.slow
def test_200_concurrent_streams(start_server, smollm2_path, report):
    """200 streaming clients at once on SmolLM2: every stream completes, and each
    greedy text equals the text of the same request made alone."""
    srv = start_server(smollm2_path, "--max-queued-requests", "1024", "--max-connections",
                       "1024")
    prompts = ["Once upon a time", "The capital of France is", "def fibonacci(n):",
               "My favourite colour is"]
    kw = dict(model=SMOLLM2, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    client = srv.client()
    solo = [client.completions.create(prompt=p, **kw).choices[0].text for p in prompts]

    async def main():
        aclient = srv.async_client()

        async def one(i):
            stream = await aclient.completions.create(prompt=prompts[i % 4], stream=True, **kw)
            text, finishes = "", []
            async for ch in stream:
                for c in ch.choices:
                    text += c.text
                    if c.finish_reason:
                        finishes.append(c.finish_reason)
            return i, text, finishes

        try:
            return await asyncio.gather(*(one(i) for i in range(200)), return_exceptions=True)
        finally:
            await aclient.close()

    t0 = time.monotonic()
    results = asyncio.run(main())
    dt = time.monotonic() - t0
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} of 200 streams failed, e.g. {errors[:3]!r}"
    for i, text, finishes in results:
        assert text == solo[i % 4], (i, text, solo[i % 4])
        assert finishes == ["length"], (i, finishes)
    report(f"serve: 200 concurrent streams of 8 tokens (SmolLM2) in {dt:.1f} s")
    assert srv.wait_gauges(0, 0) == (0, 0)
    srv.stop()


# ---- vLLM's stop fields, llama.cpp's n_predict, and fields refused by name ---------

EOS = 2  # stories260K's </s>


def test_min_tokens_holds_back_eos(stories):
    """EOS biased to win at once: without min_tokens the output ends at the first step;
    with min_tokens 5 the first five tokens cannot be EOS (vLLM's rule), then it ends."""
    bias = {"logit_bias": {str(EOS): 100}}
    r = stories.completions.create(model=STORIES, prompt=[1], max_tokens=20, temperature=0,
                                   extra_body=bias)
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 1
    assert r.choices[0].text == ""
    r = stories.completions.create(model=STORIES, prompt=[1], max_tokens=20, temperature=0,
                                   extra_body={**bias, "min_tokens": 5})
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 6, r
    assert GOLDEN.startswith(r.choices[0].text) and r.choices[0].text
    # Stop strings are not looked for before min_tokens either.
    r = golden(stories, max_tokens=20, stop="Once", extra_body={"min_tokens": 3})
    assert r.choices[0].text.startswith("Once") and r.usage.completion_tokens > 3


def test_stop_token_ids(stories):
    """A stop_token_ids token ends the output with finish "stop", its text kept; with
    min_tokens it is barred until then. Token 400 is forced by logit_bias."""
    x = {"logit_bias": {"400": 100}, "ignore_eos": True}
    forced = stories.completions.create(model=STORIES, prompt=[1], max_tokens=1, temperature=0,
                                        extra_body=x).choices[0].text
    r = stories.completions.create(model=STORIES, prompt=[1], max_tokens=12, temperature=0,
                                   extra_body={**x, "stop_token_ids": [7, 400]})
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 1
    assert r.choices[0].text == forced and forced
    r = stories.completions.create(model=STORIES, prompt=[1], max_tokens=12, temperature=0,
                                   extra_body={**x, "stop_token_ids": [400], "min_tokens": 3})
    three = golden(stories, max_tokens=3).choices[0].text
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 4, r
    # (from BOS the forced piece loses its leading space, SentencePiece's rule)
    assert r.choices[0].text in (three + forced, three + " " + forced), (r.choices[0].text, three)


@pytest.mark.parametrize("stream", [False, True])
def test_include_stop_str_in_output(stories, stream):
    stop = "le gi"
    want = GOLDEN[:GOLDEN.index(stop) + len(stop)]
    r = golden(stories, stop=stop, stream=stream, extra_body={"include_stop_str_in_output": True})
    text = ("".join(ch.choices[0].text for ch in r if ch.choices) if stream
            else r.choices[0].text)
    assert text == want


def test_n_predict_is_max_tokens(stories):
    r = golden(stories, max_tokens=None, extra_body={"ignore_eos": True, "n_predict": 7})
    assert r.usage.completion_tokens == 7 and r.choices[0].finish_reason == "length"


def test_neutral_values_of_refused_fields_pass(stories, smol):
    """Fields brisk refuses when they would change the output pass with their neutral
    values (clients send defaults), and the output is the same."""
    neutral = {"typical_p": 1, "mirostat": 0, "dry_multiplier": 0, "xtc_probability": 0,
               "tfs_z": 1, "repeat_penalty": 1, "n_probs": 0, "bad_words": [], "grammar": "",
               "use_beam_search": False, "skip_special_tokens": True, "guided_json": None}
    a = golden(stories, max_tokens=10).choices[0].text
    b = golden(stories, max_tokens=10, extra_body=neutral).choices[0].text
    assert a == b
    c = smol.chat.completions.create(model=SMOLLM2, messages=FRANCE, max_tokens=4, temperature=0,
                                     extra_body={"add_generation_prompt": True,
                                                 "continue_final_message": False,
                                                 "tool_choice": "none"})
    assert c.choices[0].message.content
