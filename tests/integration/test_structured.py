"""Grammar-constrained decoding through `brisk serve`: llama.cpp's `grammar`, vLLM's
`guided_choice` / `guided_grammar` / `structured_outputs` and OpenAI's
`response_format: json_object`, on stories260K (its byte-fallback vocabulary can spell
anything) and SmolLM2; through n > 1 forks, streaming, and preemption in a small KV
pool; hostile grammars refused with a 400 naming the field."""
import json
import re

import openai
import pytest
from conftest import metric_value

STORIES = "stories260K"
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1"
STORIES_BLOCK_BYTES = 5 * 32 * 2 * 2 * 16  # see test_server_sched.py
SENTENCE = r'root ::= "Once" " upon" [a-z ]{1,40} "."'
SENTENCE_RE = re.compile(r"Once upon[a-z ]{1,40}\.")


@pytest.fixture(scope="module")
def stories(stories_server):
    return stories_server.client()


@pytest.fixture(scope="module")
def smol(smollm2_server):
    return smollm2_server.client()


def cmpl(client, **extra):
    kw = {k: extra.pop(k) for k in ("max_tokens", "temperature", "seed", "n", "stream")
          if k in extra}
    kw.setdefault("max_tokens", 60)
    kw.setdefault("temperature", 0)
    return client.completions.create(model=STORIES, prompt="Once", extra_body=extra, **kw)


@pytest.mark.parametrize("seed", range(6))
def test_guided_choice_sampled(stories, seed):
    """Sampled at temperature 1, the output is always one of the choices, and whole."""
    choices = ["yes", "no", "maybe later", "\u00e9t\u00e9"]
    r = cmpl(stories, temperature=1, seed=seed, guided_choice=choices)
    c = r.choices[0]
    assert c.text in choices and c.finish_reason == "stop", c


def test_choice_n_forks(stories):
    """n = 4 choices share the prompt's KV blocks (forks); each has its own grammar state."""
    r = cmpl(stories, temperature=1, seed=5, n=4,
             structured_outputs={"choice": ["alpha", "beta", "gamma"]})
    assert len(r.choices) == 4
    assert all(c.text in ("alpha", "beta", "gamma") and c.finish_reason == "stop"
               for c in r.choices), r.choices


@pytest.mark.parametrize("field", ["grammar", "guided_grammar"])
def test_gbnf_grammar(stories, field):
    r = cmpl(stories, temperature=1, seed=11, **{field: SENTENCE})
    c = r.choices[0]
    assert SENTENCE_RE.fullmatch(c.text) and c.finish_reason == "stop", c.text


def test_stream_equals_non_stream(stories):
    want = cmpl(stories, grammar=SENTENCE).choices[0].text
    chunks = list(cmpl(stories, grammar=SENTENCE, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == want
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"


def test_length_is_reported(stories):
    """A grammar that needs more than max_tokens ends with finish "length"."""
    r = cmpl(stories, max_tokens=3, grammar=r'root ::= [a-z]{50} "."')
    assert r.choices[0].finish_reason == "length" and re.fullmatch(r"[a-z]*", r.choices[0].text)


@pytest.mark.parametrize("temperature,seed", [(0, 0), (1, 1), (1, 2), (1, 3)])
def test_json_object_chat(smol, temperature, seed):
    """response_format json_object: an output that ends with "stop" parses as a JSON
    object; one cut by max_tokens says "length"."""
    r = smol.chat.completions.create(
        model=SMOLLM2, messages=[{"role": "user", "content": "Describe a cat as JSON."}],
        response_format={"type": "json_object"}, max_tokens=300, temperature=temperature,
        seed=seed)
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict), c.message.content
    else:
        assert c.finish_reason == "length"


def test_choice_chat_greedy(smol):
    r = smol.chat.completions.create(
        model=SMOLLM2, max_tokens=10, temperature=0,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        extra_body={"guided_choice": ["Paris", "London", "Berlin"]})
    # (greedy picks the best allowed first token: not always the unconstrained answer)
    assert r.choices[0].message.content in ("Paris", "London", "Berlin")
    assert r.choices[0].finish_reason == "stop"


def test_grammar_through_preemption(start_server, stories260k_gguf):
    """Six constrained sequences queued together (one request of six prompts) in a pool
    that holds fewer at once: preempted ones are recomputed with their grammar state
    kept, and the greedy outputs equal solo runs."""
    grammar = r'root ::= "Once" ( " " [a-z]{2,8} ){16,24} "."'
    pattern = re.compile(r"Once( [a-z]{2,8}){16,24}\.")
    prompts = [f"Once upon a time {w}" for w in ("Lily", "Tom", "Sue", "Ben", "Max", "Ann")]

    def run(srv):
        r = srv.client().completions.create(model=STORIES, prompt=prompts, max_tokens=120,
                                            temperature=0, extra_body={"grammar": grammar})
        return [(c.text, c.finish_reason) for c in sorted(r.choices, key=lambda c: c.index)]

    solo_srv = start_server(stories260k_gguf, "--max-num-seqs", "1")
    solo = run(solo_srv)
    solo_srv.stop()
    tight = start_server(stories260k_gguf, "--max-num-seqs", "6", "--kv-cache-bytes",
                         str(10 * STORIES_BLOCK_BYTES))
    got = run(tight)
    preemptions = metric_value(tight.metrics(), "vllm:num_preemptions_total")
    tight.stop()
    assert preemptions > 0
    assert got == solo
    assert all(pattern.fullmatch(t) and f == "stop" for t, f in got), got


@pytest.mark.parametrize("body,param,needle", [
    ({"grammar": "root ::= root \"a\""}, "grammar", "left-recursive"),
    ({"grammar": "root ::= \"a"}, "grammar", "unterminated"),
    ({"guided_grammar": "x ::= \"a\""}, "guided_grammar", "no 'root'"),
    ({"grammar": "root ::= \"a\"{5000}"}, "grammar", "above 1000"),
    ({"grammar": 5}, "grammar", "must be a string"),
    ({"guided_choice": []}, "guided_choice", "1 to 256"),
    ({"guided_choice": ["a", ""]}, "guided_choice", "non-empty"),
    ({"guided_choice": "a"}, "guided_choice", "1 to 256"),
    ({"structured_outputs": {"json": {"type": "object"}}}, "structured_outputs", "not supported"),
    ({"structured_outputs": {"regex": "a+"}}, "structured_outputs", "not supported"),
    ({"structured_outputs": 3}, "structured_outputs", "must be an object"),
    ({"grammar": "root ::= \"a\"", "guided_choice": ["a"]}, "guided_choice", "give one"),
    ({"response_format": {"type": "json_schema", "json_schema": {}}}, "response_format",
     "json_schema"),
    ({"guided_json": {"type": "object"}}, "guided_json", "not supported"),
])
def test_bad_constraints_400(stories_server, body, param, needle):
    r = stories_server.request("POST", "/v1/completions",
                               {"prompt": "Once", "max_tokens": 4, **body})
    assert r.status == 400, r.body
    err = r.json()["error"]
    assert err["param"] == param and needle in err["message"], err


def test_grammar_cache_by_text(stories):
    """The same constraint twice compiles once (a second request is served from the
    cache) - and a different one is another grammar."""
    a = cmpl(stories, temperature=1, seed=3, guided_choice=["x1", "x2"]).choices[0].text
    b = cmpl(stories, temperature=1, seed=3, guided_choice=["x1", "x2"]).choices[0].text
    c = cmpl(stories, temperature=1, seed=3, guided_choice=["y1", "y2"]).choices[0].text
    assert a == b and a in ("x1", "x2") and c in ("y1", "y2")


def test_openai_client_choice_error(stories):
    with pytest.raises(openai.BadRequestError) as ei:
        cmpl(stories, grammar="root ::= nothing")
    assert ei.value.code == "invalid_grammar"
