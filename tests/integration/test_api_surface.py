"""The API surface beyond chat and completions, against the real binary: /v1/models/{id},
/version, HEAD on the probes, vLLM's /tokenize and /detokenize, the Responses API with the
official openai SDK, CORS (--allowed-origins), usage.prompt_tokens_details.cached_tokens,
and the conformance fixes: presence/frequency penalties on the output only, streamed echo
with logprobs, no end-of-sequence entry in chat logprobs, non-HTTP request lines, fresh
random response ids. Generations under grammars on SmolLM2, and the longer ones, are
marked slow: they crawl under the sanitizers, whose pass leaves them to the Release
run."""
import json
import re
import uuid

import openai
import pytest

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1"
PARIS = "Say Paris. The capital of France is"


@pytest.fixture(scope="module")
def smol(smollm2_server):
    return smollm2_server


# ---- models, version, probes -----------------------------------------------------------

def test_models_retrieve(smol):
    c = smol.client()
    m = c.models.retrieve(SMOLLM2)
    assert m.id == SMOLLM2 and m.object == "model" and m.owned_by == "brisk"
    listed = c.models.list().data[0]
    assert listed.id == m.id and listed.created == m.created
    with pytest.raises(openai.NotFoundError) as e:
        c.models.retrieve("gpt-4o")
    assert e.value.body["code"] == "model_not_found"
    # Percent-escaped ids are decoded; an escaped NUL is not a name.
    name = SMOLLM2.replace(".", "%2E")
    assert smol.request("GET", f"/v1/models/{name}").json()["id"] == SMOLLM2
    assert smol.request("GET", "/v1/models/a%00b").status == 404
    assert smol.request("GET", "/v1/models/").status == 404


def test_version_and_head_probes(smol):
    r = smol.request("GET", "/version")
    assert r.status == 200 and re.fullmatch(r"\d+\.\d+\.\d+", r.json()["version"])
    for path in ("/health", "/livez", "/readyz", "/metrics", "/version"):
        get = smol.request("GET", path)
        head = smol.request("HEAD", path)
        assert head.status == get.status == 200, path
        assert head.body == b"" and int(head.headers["content-length"]) > 0, path
    r = smol.request("POST", "/health", {})
    assert r.status == 405 and r.headers["allow"] == "GET, HEAD"


# ---- tokenize / detokenize ---------------------------------------------------------------

def test_tokenize_prompt_matches_completions(smol):
    text = "The quick brown fox jumps over the lazy dog. Ünïcödé 🦊"
    t = smol.post("/tokenize", {"model": SMOLLM2, "prompt": text, "return_token_strs": True})
    assert t.status == 200, t.text
    body = t.json()
    assert body["count"] == len(body["tokens"]) > 5 and body["max_model_len"] == 4096
    assert "".join(body["token_strs"]).encode("utf-8", "surrogatepass")  # strings, one per id
    assert len(body["token_strs"]) == body["count"]
    c = smol.post("/v1/completions", {"prompt": text, "max_tokens": 1, "temperature": 0}).json()
    assert c["usage"]["prompt_tokens"] == body["count"]
    # The same ids as a token prompt give the same first token.
    c2 = smol.post("/v1/completions", {"prompt": body["tokens"], "max_tokens": 1,
                                       "temperature": 0}).json()
    assert c2["choices"][0]["text"] == c["choices"][0]["text"]
    d = smol.post("/detokenize", {"model": SMOLLM2, "tokens": body["tokens"]})
    assert d.status == 200 and d.json()["prompt"] == text
    no_tokens = smol.post("/detokenize", {"tokens": []}).json()
    assert no_tokens == {"prompt": ""}
    plain = smol.post("/tokenize", {"prompt": "hi"}).json()
    assert "token_strs" not in plain


def test_tokenize_special_tokens(smol):
    # SmolLM2 adds no BOS; <|im_start|> in text is the control token, as in prompts.
    t = smol.post("/tokenize", {"prompt": "<|im_start|>user", "return_token_strs": True}).json()
    assert t["token_strs"][0] == "<|im_start|>" and t["tokens"][0] == 1
    off = smol.post("/tokenize", {"prompt": "hi", "add_special_tokens": False}).json()
    on = smol.post("/tokenize", {"prompt": "hi", "add_special_tokens": True}).json()
    assert off["tokens"] == on["tokens"]  # no BOS for this vocabulary either way


def test_tokenize_chat_matches_chat_usage(smol):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    t = smol.post("/tokenize", {"messages": msgs}).json()
    c = smol.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 1}).json()
    assert t["count"] == c["usage"]["prompt_tokens"]
    text = smol.post("/detokenize", {"tokens": t["tokens"]}).json()["prompt"]
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("path,body,param", [
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"prompt": 5}, "prompt"),
    ("/tokenize", {"prompt": "a", "messages": []}, "prompt"),
    ("/tokenize", {"prompt": "a", "return_token_strs": "yes"}, "return_token_strs"),
    ("/tokenize", {"messages": "hi"}, "messages"),
    ("/tokenize", {"messages": [{"role": "user", "content": "a"}],
                   "add_generation_prompt": False}, "add_generation_prompt"),
    ("/detokenize", {}, "tokens"),
    ("/detokenize", {"tokens": [1, -1]}, "tokens[1]"),
    ("/detokenize", {"tokens": [1, 1e9]}, "tokens[1]"),
    ("/detokenize", {"tokens": [1.5]}, "tokens[0]"),
    ("/detokenize", {"tokens": "1 2"}, "tokens"),
])
def test_tokenize_errors(smol, path, body, param):
    r = smol.post(path, body)
    assert r.status == 400, r.text
    assert r.json()["error"]["param"] == param


def test_tokenize_wrong_model(smol):
    r = smol.post("/tokenize", {"model": "other", "prompt": "a"})
    assert r.status == 404 and r.json()["error"]["code"] == "model_not_found"


# ---- conformance fixes -------------------------------------------------------------------

def first_token(smol, **kw):
    r = smol.post("/v1/completions", {"prompt": PARIS, "max_tokens": 1, "temperature": 0, **kw})
    assert r.status == 200, r.text
    return r.json()["choices"][0]["text"]


def test_penalties_count_the_output_only(smol):
    assert first_token(smol) == " Paris"
    # "Paris" is in the prompt: presence and frequency penalties must not see it.
    assert first_token(smol, presence_penalty=2) == " Paris"
    assert first_token(smol, frequency_penalty=2) == " Paris"


@pytest.mark.slow
def test_penalties_act_on_the_output(smol):
    # A long greedy answer repeats less.
    base = {"prompt": "List the days of the week: Monday, Tuesday,", "max_tokens": 48,
            "temperature": 0}
    plain = smol.post("/v1/completions", base).json()["choices"][0]["text"]
    pen = smol.post("/v1/completions", {**base, "frequency_penalty": 2}).json()
    assert pen["choices"][0]["text"] != plain


def test_streamed_echo_logprobs_equal_whole(smol):
    body = {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "echo": True,
            "logprobs": 2}
    whole = smol.post("/v1/completions", body).json()["choices"][0]
    conn, status, headers = smol.stream("/v1/completions", {**body, "stream": True})
    assert status == 200
    text, toks, lps, tops, offs = "", [], [], [], []
    for ev in conn.iter_sse(headers):
        if ev == "[DONE]":
            break
        ch = json.loads(ev)["choices"][0]
        text += ch["text"]
        if ch["logprobs"]:
            toks += ch["logprobs"]["tokens"]
            lps += ch["logprobs"]["token_logprobs"]
            tops += ch["logprobs"]["top_logprobs"]
            offs += ch["logprobs"]["text_offset"]
    conn.close()
    want = whole["logprobs"]
    assert text == whole["text"]
    assert toks == want["tokens"] and lps == want["token_logprobs"]
    assert tops == want["top_logprobs"] and offs == want["text_offset"]
    assert lps[0] is None and all(isinstance(x, float) for x in lps[1:])
    assert "".join(toks) == text


@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_chat_logprobs_leave_out_eos(smol):
    c = smol.client()
    kw = dict(model=SMOLLM2, messages=[{"role": "user", "content": "Say OK."}], max_tokens=40,
              temperature=0, logprobs=True, top_logprobs=1)
    r = c.chat.completions.create(**kw)
    assert r.choices[0].finish_reason == "stop"
    toks = [t.token for t in r.choices[0].logprobs.content]
    assert "<|im_end|>" not in toks and "".join(toks) == r.choices[0].message.content
    streamed, content = [], ""
    for ch in c.chat.completions.create(stream=True, **kw):
        if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
            streamed += [t.token for t in ch.choices[0].logprobs.content]
        if ch.choices and ch.choices[0].delta.content:
            content += ch.choices[0].delta.content
    assert streamed == toks and content == r.choices[0].message.content


def test_non_http_request_lines(smol):
    for line in (b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n", b"GET / ICE/1.0\r\n\r\n"):
        conn = smol.raw()
        conn.send(line)
        status, _, headers = conn.read_head()
        assert status == 400 and headers["connection"] == "close"
        conn.close()


@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_response_ids_are_fresh(smol):
    ids = set()
    for _ in range(3):
        r = smol.post("/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
                      headers={"X-Request-Id": "same-id"})
        assert r.headers["x-request-id"] == "same-id"
        rid = r.json()["id"]
        assert re.fullmatch(r"chatcmpl-[A-Za-z0-9]{29}", rid) and "same-id" not in rid
        ids.add(rid)
    r = smol.post("/v1/completions", {"prompt": "a", "max_tokens": 1})
    assert re.fullmatch(r"cmpl-[A-Za-z0-9]{29}", r.json()["id"])
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
    ids.add(r.json()["id"])
    assert len(ids) == 4


@pytest.mark.slow
def test_cached_tokens(smol):
    # A fresh system prompt long enough for several KV blocks (16 positions each).
    sys = f"Session {uuid.uuid4()}. " + "You answer questions about the weather. " * 8
    msgs = [{"role": "system", "content": sys}, {"role": "user", "content": "Hi"}]
    c = smol.client()
    first = c.chat.completions.create(model=SMOLLM2, messages=msgs, max_tokens=1)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    second = c.chat.completions.create(model=SMOLLM2, messages=msgs, max_tokens=1)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 64 <= cached < second.usage.prompt_tokens and cached % 16 == 0
    s = list(c.chat.completions.create(model=SMOLLM2, messages=msgs, max_tokens=1, stream=True,
                                       stream_options={"include_usage": True}))
    assert s[-1].usage.prompt_tokens_details.cached_tokens == cached
    r = [c.completions.create(model=SMOLLM2, prompt=sys, max_tokens=1) for _ in range(2)]
    assert r[0].usage.prompt_tokens_details.cached_tokens == 0
    assert r[1].usage.prompt_tokens_details.cached_tokens >= 64


# ---- CORS ----------------------------------------------------------------------------------

def test_cors_off_by_default(smol):
    r = smol.request("OPTIONS", "/v1/chat/completions",
                     headers={"Origin": "http://localhost:3000",
                              "Access-Control-Request-Method": "POST"})
    assert r.status == 405 and "access-control-allow-origin" not in r.headers
    r = smol.request("GET", "/health", headers={"Origin": "http://localhost:3000"})
    assert "access-control-allow-origin" not in r.headers


def test_cors_allowed_origins(start_server, stories260k_gguf):
    srv = start_server(stories260k_gguf, "--allowed-origins", "http://localhost:3000,https://x.io",
                       api_key="k-cors")
    try:
        pre = {"Origin": "https://x.io", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type",
               "Authorization": None}
        r = srv.request("OPTIONS", "/v1/completions", headers=pre)
        assert r.status == 204, r.text
        assert r.headers["access-control-allow-origin"] == "https://x.io"
        assert r.headers["access-control-allow-methods"] == "POST"
        assert r.headers["access-control-allow-headers"] == "authorization, content-type"
        r = srv.request("OPTIONS", "/v1/completions", headers={**pre, "Origin": "https://y.io"})
        assert r.status == 403 and r.json()["error"]["code"] == "cors_origin_not_allowed"
        r = srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 2},
                     headers={"Origin": "http://localhost:3000"})
        assert r.status == 200
        assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert r.headers["vary"] == "Origin"
        exposed = [h.strip().lower() for h in r.headers["access-control-expose-headers"].split(",")]
        for h in ("x-request-id", "retry-after", "retry-after-ms",
                  "x-ratelimit-remaining-requests", "x-ratelimit-reset-tokens"):
            assert h in exposed
        r = srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 2},
                     headers={"Origin": "http://localhost:3000", "Authorization": None})
        assert r.status == 401 and r.headers["access-control-allow-origin"]
    finally:
        srv.stop()


# ---- the Responses API ---------------------------------------------------------------------

@pytest.mark.slow  # tens of seconds under ASan; the Release pass runs it
def test_responses_text(smol):
    c = smol.client()
    r = c.responses.create(model=SMOLLM2, input="What is the capital of France?",
                           instructions="Answer in one sentence.", max_output_tokens=24,
                           temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert "Paris" in r.output_text and r.output[0].type == "message"
    assert r.output[0].content[0].type == "output_text"
    assert r.instructions == "Answer in one sentence." and r.max_output_tokens == 24
    # The same as chat with the instructions as a system message.
    ch = c.chat.completions.create(model=SMOLLM2, max_tokens=24, temperature=0, messages=[
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "What is the capital of France?"}])
    assert ch.choices[0].message.content == r.output_text
    assert r.usage.input_tokens == ch.usage.prompt_tokens
    assert r.usage.output_tokens == ch.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    short = c.responses.create(model=SMOLLM2, input="Tell me a long story.",
                               max_output_tokens=3, temperature=0)
    assert short.status == "incomplete"
    assert short.incomplete_details.reason == "max_output_tokens"


def test_responses_stream_events(smol):
    c = smol.client()
    kw = dict(model=SMOLLM2, input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is 2+2?"}]}], max_output_tokens=80,
        temperature=0)
    whole = c.responses.create(**kw)
    # The SDK's stream helper wants response.completed (not .incomplete) at the end.
    assert whole.status == "completed"
    events = list(c.responses.create(stream=True, **kw))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == events[-1].response.output_text
    with c.responses.stream(**kw) as st:
        for _ in st:
            pass
        final = st.get_final_response()
    assert final.output_text == whole.output_text


@pytest.mark.parametrize("body,param", [
    ({"input": "hi", "previous_response_id": "resp_x"}, "previous_response_id"),
    ({"input": "hi", "background": True}, "background"),
    ({"input": "hi", "include": ["message.output_text.logprobs"]}, "include"),
    ({"input": "hi", "top_logprobs": 3}, "top_logprobs"),
    ({"input": "hi", "truncation": "auto"}, "truncation"),
    ({"input": "hi", "reasoning": {"effort": "high"}}, "reasoning"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0]"),
    ({"input": [{"type": "web_search_call"}]}, "input[0]"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"input": "hi", "max_output_tokens": -1}, "max_output_tokens"),
    ({"input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format"),
    ({"input": "hi", "mirostat": 2}, "mirostat"),
    ({"input": "hi", "n": 2}, "n"),
    ({"input": "hi", "logprobs": True}, "logprobs"),
    ({"input": "hi", "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools[0]"),
    ({}, "input"),
    ({"input": 7}, "input"),
])
def test_responses_errors(smol, body, param):
    r = smol.post("/v1/responses", body)
    assert r.status == 400, r.text
    assert r.json()["error"]["param"] == param


@pytest.mark.parametrize("field", ["temperature", "top_p", "max_output_tokens"])
def test_responses_non_finite_number(smol, field):
    """1e999 parses as an infinity, which the translation into a chat request printed as
    null ("not given"): it must be refused, naming the field."""
    body = f'{{"input": "hi", "{field}": 1e999}}'.encode()
    r = smol.post("/v1/responses", body, headers={"Content-Type": "application/json"})
    assert r.status == 400, r.text
    assert r.json()["error"]["param"] == field


@pytest.mark.parametrize("body,param,field,chat_field", [
    ({"input": "hi", "max_output_tokens": -1}, "max_output_tokens", "'max_output_tokens'",
     "max_tokens"),
    ({"input": "hi", "max_output_tokens": 100000}, "max_output_tokens", "max_output_tokens",
     "max_tokens"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": 5}}},
     "text.format", "'text.format'", "response_format"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": "required",
      "text": {"format": {"type": "json_object"}}}, "text.format", "'text.format'",
     "response_format"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": 5}]},
     "tools[0]", "'tools[0].parameters'", "function"),
    ({"input": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
        {"type": "output_text", "text": 5}]}]}, "input[1]", "", "messages"),
])
def test_responses_error_messages(smol, body, param, field, chat_field):
    """Bug 4: a Responses error's message names the Responses field, as its param does,
    not the chat field the request was translated to (checked before parsing, while
    parsing, and when the prompt meets the context)."""
    r = smol.post("/v1/responses", body)
    assert r.status == 400, r.text
    e = r.json()["error"]
    assert e["param"] == param and field in e["message"], e
    assert chat_field not in e["message"], e


@pytest.mark.slow
def test_responses_structured_and_tools(smol):
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str

    c = smol.client()
    p = c.responses.parse(model=SMOLLM2, input="Give a city as JSON.", text_format=City,
                          temperature=0, max_output_tokens=80)
    assert isinstance(p.output_parsed, City)
    tools = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"], "additionalProperties": False}}]
    ask = "What is the weather in Paris?"
    r = c.responses.create(model=SMOLLM2, input=ask, tools=tools, tool_choice="required",
                           temperature=0, parallel_tool_calls=False)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert set(json.loads(calls[0].arguments)) == {"city"}
    assert calls[0].call_id.startswith("call_") and calls[0].id.startswith("fc_")
    with c.responses.stream(model=SMOLLM2, input=ask, tools=tools, tool_choice="required",
                            temperature=0, parallel_tool_calls=False) as st:
        types = [e.type for e in st]
        final = st.get_final_response()
    assert "response.function_call_arguments.delta" in types
    assert [(o.name, o.arguments) for o in final.output if o.type == "function_call"] == \
        [(calls[0].name, calls[0].arguments)]
    # The result goes back as input items; the model answers in text.
    r2 = c.responses.create(model=SMOLLM2, tools=tools, temperature=0, max_output_tokens=30,
                            input=[{"role": "user", "content": ask},
                                   {"type": "function_call", "call_id": calls[0].call_id,
                                    "name": calls[0].name, "arguments": calls[0].arguments},
                                   {"type": "function_call_output",
                                    "call_id": calls[0].call_id, "output": "sunny, 21 C"}])
    assert r2.status in ("completed", "incomplete") and r2.output[0].type == "message"


# ---- /v1/embeddings ------------------------------------------------------------------------

EMB_TEXTS = ["Once upon a time there was a little girl.", "The dog ran to the park",
             "Lily and Tom played with a red ball in the garden all day long."]


@pytest.fixture(scope="module")
def emb_servers(start_server, stories260k_gguf):
    """stories260K with --embeddings: last-token pooling (the default for a model whose
    GGUF names none) and mean pooling, the second with a batch budget of 8 tokens, so
    prompts are cut into chunks, and a KV pool of 6 blocks, so inputs wait for each other."""
    last = start_server(stories260k_gguf, "--embeddings")
    mean = start_server(stories260k_gguf, "--embeddings", "--pooling", "mean",
                        "--max-num-batched-tokens", "8", "--max-num-seqs", "4",
                        "--kv-cache-bytes", "64K")
    yield last, mean
    last.stop()
    mean.stop()


def embed(srv, inp, **kw):
    r = srv.post("/v1/embeddings", {"input": inp, **kw})
    assert r.status == 200, r.text
    return r.json()


def test_embeddings_match_the_reference(emb_servers, stories260k_gguf, reference):
    import numpy as np
    last, mean = emb_servers
    m = reference.Model(str(stories260k_gguf))
    for srv, pool in ((last, "last"), (mean, "mean")):
        toks = [srv.post("/tokenize", {"prompt": t}).json()["tokens"] for t in EMB_TEXTS]
        got = embed(srv, EMB_TEXTS)
        assert [d["index"] for d in got["data"]] == [0, 1, 2]
        assert got["usage"]["prompt_tokens"] == sum(map(len, toks))
        for d, ids in zip(got["data"], toks):
            h = reference.forward(m, ids, hidden=True)
            want = h[-1] if pool == "last" else h.mean(axis=0)
            want = want / np.linalg.norm(want)
            v = np.array(d["embedding"])
            # The K/V cache holds f16 (the default): about 1e-4 of rounding.
            assert abs(np.linalg.norm(v) - 1) < 1e-5
            assert np.abs(v - want).max() < 1e-3 and v @ want > 0.99999, (pool, v @ want)
        # Unnormalised: the pooled state itself; token-id inputs equal text inputs.
        raw = embed(srv, [toks[0]], normalize=False)["data"][0]["embedding"]
        h = reference.forward(m, toks[0], hidden=True)
        want = h[-1] if pool == "last" else h.mean(axis=0)
        assert np.abs(np.array(raw) - want).max() < 1e-3 * max(1.0, np.abs(want).max())
        assert embed(srv, toks[0])["data"][0]["embedding"] == got["data"][0]["embedding"]


def test_embeddings_batched_equal_alone(emb_servers):
    import concurrent.futures as cf
    _, mean = emb_servers
    alone = [embed(mean, t)["data"][0]["embedding"] for t in EMB_TEXTS]
    # Many at once: chunked, batched with each other, most of them waiting.
    with cf.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(embed, mean, EMB_TEXTS * 4) for _ in range(4)]
        for f in futs:
            data = f.result()["data"]
            assert [d["embedding"] for d in data] == alone * 4


def test_embeddings_base64_and_sdk(emb_servers):
    import base64
    import numpy as np
    last, _ = emb_servers
    f = embed(last, EMB_TEXTS[0])["data"][0]["embedding"]
    b = embed(last, EMB_TEXTS[0], encoding_format="base64")["data"][0]["embedding"]
    assert np.array_equal(np.frombuffer(base64.b64decode(b), dtype="<f4"),
                          np.array(f, dtype=np.float32))
    c = last.client()
    r = c.embeddings.create(model=c.models.list().data[0].id, input=EMB_TEXTS)
    assert len(r.data) == 3 and r.data[0].embedding == pytest.approx(f, abs=1e-7)
    assert r.usage.prompt_tokens == r.usage.total_tokens > 0


@pytest.mark.parametrize("body,param", [
    ({}, "input"),
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": ["a", ""]}, "input[1]"),
    ({"input": [[1, 2], [1, 100000]]}, "input[1]"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "a", "dimensions": 8}, "dimensions"),
    ({"input": "a", "dimensions": 0}, "dimensions"),
    ({"input": "a", "embd_normalize": 1}, "embd_normalize"),
    ({"input": "a", "truncate_prompt_tokens": 4}, "truncate_prompt_tokens"),
    ({"input": ["a"] * 2049}, "input"),
    ({"input": "a" * 3000}, "input"),
])
def test_embeddings_errors(emb_servers, body, param):
    last, _ = emb_servers
    r = last.post("/v1/embeddings", body)
    assert r.status == 400, r.text
    assert r.json()["error"]["param"] == param


def test_embeddings_off_by_default(smol):
    r = smol.post("/v1/embeddings", {"input": "hello"})
    assert r.status == 501 and r.json()["error"]["code"] == "embeddings_disabled"
