"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) driven by the
official `anthropic` SDK against the real brisk: create and the stream helpers (text_stream,
get_final_message) give the chat endpoint's greedy answer, stop reasons (end_turn,
max_tokens, stop_sequence with the sequence, tool_use), usage with prefix-cache reads,
count_tokens equal to what a request is charged, a tools round trip (a forced tool, then its
tool_result, then the answer) streamed and not, the SDK's exception classes for brisk's
errors in Anthropic's error shape, x-api-key authentication, and on a second server
(stories260K) per-key limits and the audit line. SmolLM2 with a few tokens per answer: about
10 s on 2 cores."""
import json
import os
import time

import pytest

anthropic = pytest.importorskip("anthropic")

KEY = "sk-anthropic-test"
Q = "What is the capital of France?"
GREEDY = {"temperature": 0}  # the SDK no longer lists temperature: extra_body carries it
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


@pytest.fixture(scope="module")
def srv(start_server, smollm2_path):
    s = start_server(smollm2_path, api_key=KEY)
    s.model_name = os.path.basename(str(smollm2_path))[:-len(".gguf")]
    yield s
    s.stop()


def client(s, key=KEY, **kw):
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout", 120 * s.slow)
    return anthropic.Anthropic(base_url=s.url, api_key=key, **kw)


def create(s, **kw):
    kw.setdefault("model", s.model_name)
    kw.setdefault("max_tokens", 12)
    kw.setdefault("messages", [{"role": "user", "content": Q}])
    kw.setdefault("extra_body", GREEDY)
    return client(s).messages.create(**kw)


def text_of(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


def sse_events(s, body):
    """(event name, data) pairs of a raw /v1/messages stream."""
    conn = s.raw(60)
    data = json.dumps(body).encode()
    conn.send(f"POST /v1/messages HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
              f"x-api-key: {KEY}\r\nanthropic-version: 2023-06-01\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    status, _, headers = conn.read_head()
    assert status == 200 and headers["content-type"] == "text/event-stream"
    raw = b"".join(conn.iter_body(headers)).decode()
    conn.close()
    out = []
    for block in raw.split("\n\n"):
        if not block:
            continue
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: ")
        out.append((lines[0][7:], json.loads(lines[1][6:])))
    return out


@pytest.mark.slow
def test_create_equals_chat(srv):
    """A message and a chat completion of the same conversation, greedy: the same text, the
    same prompt tokens (input + cache reads), and Anthropic's message shape."""
    msg = create(srv, system="You are a geography expert.")
    chat = srv.client(api_key=KEY).chat.completions.create(
        model=srv.model_name, max_tokens=12, temperature=0,
        messages=[{"role": "system", "content": "You are a geography expert."},
                  {"role": "user", "content": Q}])
    assert msg.type == "message" and msg.role == "assistant" and msg.model == srv.model_name
    assert msg.id.startswith("msg_") and len(msg.id) == 4 + 24
    assert [b.type for b in msg.content] == ["text"]
    assert text_of(msg) == chat.choices[0].message.content
    assert msg.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[
        chat.choices[0].finish_reason] and msg.stop_sequence is None
    u = msg.usage
    assert u.input_tokens + u.cache_read_input_tokens == chat.usage.prompt_tokens
    assert u.cache_creation_input_tokens == 0
    assert u.output_tokens == chat.usage.completion_tokens
    # Asked again, the prompt is in the prefix cache: Anthropic counts it as cache reads.
    again = create(srv, system="You are a geography expert.")
    assert again.usage.cache_read_input_tokens > 0
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens == \
        chat.usage.prompt_tokens
    assert text_of(again) == text_of(msg)


def test_stream_helpers(srv):
    """messages.stream: text_stream, get_final_message and the whole text agree with create."""
    whole = create(srv)
    with client(srv).messages.stream(model=srv.model_name, max_tokens=12, extra_body=GREEDY,
                                     messages=[{"role": "user", "content": Q}]) as st:
        pieces = list(st.text_stream)
        final = st.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == text_of(whole) == text_of(final)
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == \
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens


def test_stream_events(srv):
    """The raw events, as Anthropic sends them: an `event:` line naming each data's type,
    message_start, ping, one text block started, filled and stopped, message_delta with the
    stop and usage, message_stop."""
    ev = sse_events(srv, {"model": srv.model_name, "max_tokens": 5, "stream": True,
                          "messages": [{"role": "user", "content": Q}], **GREEDY})
    for name, data in ev:
        assert data["type"] == name
    names = [n for n, _ in ev]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    start = ev[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["id"].startswith("msg_")
    assert ev[2][1] == {"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}}
    assert all(d["index"] == 0 and d["delta"]["type"] == "text_delta" for _, d in ev[3:-3])
    delta = ev[-2][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 5


def test_max_tokens_and_stop_sequences(srv):
    """max_tokens ends with stop_reason max_tokens; a stop sequence with stop_sequence and the
    matched string (the second one given here), the text cut before it, streamed or not."""
    cut = create(srv, max_tokens=3)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
    full = create(srv, max_tokens=16)
    text = text_of(full)
    word = text.split()[2]
    stops = ["\u00a7never\u00a7", word]
    msg = create(srv, max_tokens=16, stop_sequences=stops)
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == word, msg
    assert text_of(msg) == text[:text.index(word)]
    with client(srv).messages.stream(model=srv.model_name, max_tokens=16, extra_body=GREEDY,
                                     stop_sequences=stops,
                                     messages=[{"role": "user", "content": Q}]) as st:
        final = st.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == word
    assert text_of(final) == text_of(msg)


@pytest.mark.slow
def test_count_tokens(srv):
    """count_tokens counts what the same request is charged: system, messages and tools as
    the generation renders them (input_tokens + cache reads)."""
    c = client(srv)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    plain = c.messages.count_tokens(model=srv.model_name, messages=msgs, system="Be brief.")
    with_tools = c.messages.count_tokens(model=srv.model_name, messages=msgs, system="Be brief.",
                                         tools=[WEATHER])
    assert 0 < plain.input_tokens < with_tools.input_tokens
    for tools, count in (([], plain), ([WEATHER], with_tools)):
        msg = create(srv, messages=msgs, system="Be brief.", max_tokens=2,
                     **({"tools": tools} if tools else {}))
        assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == count.input_tokens


@pytest.mark.slow
def test_tools_round_trip(srv):
    """A forced tool (tool_choice tool, one call): a tool_use block with a toolu_ id and the
    input its schema asks for, stop_reason tool_use; streamed, the same call arrives as
    input_json_delta fragments while it is generated; the tool_result sent back gets an answer in text."""
    c = client(srv)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    choice = {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}
    msg = c.messages.create(model=srv.model_name, max_tokens=40, tools=[WEATHER],
                            tool_choice=choice, messages=msgs, extra_body=GREEDY)
    assert msg.stop_reason == "tool_use", msg
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather"
    assert uses[0].id.startswith("toolu_") and isinstance(uses[0].input.get("city"), str)

    with c.messages.stream(model=srv.model_name, max_tokens=40, tools=[WEATHER],
                           tool_choice=choice, messages=msgs, extra_body=GREEDY) as st:
        kinds = [e.type for e in st]
        final = st.get_final_message()
    # The input streams as the model writes it: several input_json_delta events.
    assert kinds.count("input_json") > 1 and final.stop_reason == "tool_use", kinds
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == \
        [(uses[0].name, uses[0].input)]

    # any: some tool, held to its schema by the grammar.
    anyc = c.messages.create(model=srv.model_name, max_tokens=40, tools=[WEATHER],
                             tool_choice={"type": "any", "disable_parallel_tool_use": True},
                             messages=msgs, extra_body=GREEDY)
    assert anyc.stop_reason == "tool_use" and anyc.content[-1].type == "tool_use"

    history = msgs + [{"role": "assistant", "content": msg.content},
                      {"role": "user", "content": [
                          {"type": "tool_result", "tool_use_id": uses[0].id,
                           "content": [{"type": "text", "text": "Sunny, 21 C"}]}]}]
    answer = c.messages.create(model=srv.model_name, max_tokens=12, tools=[WEATHER],
                               messages=history, extra_body=GREEDY)
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert answer.content and answer.content[0].type == "text" and text_of(answer)
    # The result is in the prompt: counting it sees more tokens than without it.
    n_with = c.messages.count_tokens(model=srv.model_name, tools=[WEATHER], messages=history)
    n_err = c.messages.count_tokens(model=srv.model_name, tools=[WEATHER], messages=history[:2] + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                      "content": "Sunny, 21 C", "is_error": True}]}])
    assert n_err.input_tokens > n_with.input_tokens  # "Error: " says it failed


def test_errors_raise_sdk_classes(srv):
    """brisk's 4xx in Anthropic's shape: the SDK raises its classes, with the field named."""
    c = client(srv)

    def body_error(e):
        assert e.body["type"] == "error", e.body
        return e.body["error"]

    with pytest.raises(anthropic.BadRequestError) as ei:
        c.post("/v1/messages", cast_to=object,
               body={"model": srv.model_name, "messages": [{"role": "user", "content": Q}]})
    err = body_error(ei.value)
    assert err["type"] == "invalid_request_error" and err["message"].startswith("max_tokens:")
    with pytest.raises(anthropic.BadRequestError) as ei:
        create(srv, extra_body={"frobnicate": True})
    assert body_error(ei.value)["message"].startswith("frobnicate: Extra inputs")
    with pytest.raises(anthropic.BadRequestError) as ei:
        create(srv, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}}]}])
    assert "image" in body_error(ei.value)["message"]
    with pytest.raises(anthropic.BadRequestError) as ei:
        create(srv, max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024})
    assert body_error(ei.value)["message"].startswith("thinking:")
    with pytest.raises(anthropic.BadRequestError) as ei:
        create(srv, messages=[{"role": "user", "content": Q},
                              {"role": "assistant", "content": "Paris is"}])
    assert "prefill" in body_error(ei.value)["message"]
    with pytest.raises(anthropic.NotFoundError) as ei:
        create(srv, model="claude-opus-9")
    assert body_error(ei.value)["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError):
        client(srv).messages.count_tokens(model=srv.model_name, messages=[])
    # Keys: x-api-key as the SDK sends it; a wrong or missing one is a 401.
    with pytest.raises(anthropic.AuthenticationError) as ei:
        client(srv, key="sk-wrong").messages.create(
            model=srv.model_name, max_tokens=2, messages=[{"role": "user", "content": Q}])
    assert body_error(ei.value)["type"] == "authentication_error"
    r = srv.request("POST", "/v1/messages", {"model": srv.model_name, "max_tokens": 2,
                                             "messages": [{"role": "user", "content": Q}]},
                    headers={"Authorization": None})
    assert r.status == 401 and r.json()["error"]["type"] == "authentication_error"
    # The anthropic-version and anthropic-beta headers are accepted.
    r = srv.request("POST", "/v1/messages", {"model": srv.model_name, "max_tokens": 2,
                                             "messages": [{"role": "user", "content": Q}]},
                    headers={"Authorization": None, "x-api-key": KEY,
                             "anthropic-version": "2023-06-01",
                             "anthropic-beta": "prompt-caching-2024-07-31"})
    assert r.status == 200 and r.json()["type"] == "message"
    # The OpenAI endpoints keep their own error shape.
    r = srv.request("POST", "/v1/chat/completions", {"messages": []})
    assert r.status == 400 and "message" in r.json()["error"] and "type" not in r.json()


# ---- quotas and the audit log (stories260K, ChatML forced) ----------------------------

ALICE, BOB = "sk-alice-anth", "sk-bob-anth"


@pytest.fixture(scope="module")
def ops(start_server, stories260k_gguf, tmp_path_factory):
    d = tmp_path_factory.mktemp("anth-ops")
    (d / "keys").write_text(f"alice {ALICE}\nbob {BOB}\n")
    (d / "limits").write_text("bob rpm=2 window=60\n")
    log = d / "audit.log"
    s = start_server(stories260k_gguf, "--api-key-file", d / "keys", "--limits-file",
                     d / "limits", "--audit-log", log, "--audit-log-content",
                     "--audit-log-flush-ms", "20", "--chat-template", "chatml")
    s.model_name = "stories260K"
    yield s, log
    s.stop()


def audit_line(path, request_id, s, timeout=5.0):
    deadline = time.monotonic() + timeout * s.slow
    while True:
        if os.path.exists(path):
            for ln in open(path, encoding="utf-8").read().splitlines():
                rec = json.loads(ln)
                if rec["request_id"] == request_id:
                    return rec
        s.check_alive()
        assert time.monotonic() < deadline, f"no audit line for {request_id}"
        time.sleep(0.05)


def test_quota(ops):
    """A key's request limit holds on /v1/messages as on the other endpoints: the third
    request in the window is a 429 that the SDK raises as RateLimitError, with Anthropic's
    rate_limit_error type and the Retry-After headers; another key is not affected."""
    s, _ = ops
    bob = client(s, key=BOB)
    kw = {"model": "stories260K", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    for _ in range(2):
        assert bob.messages.create(**kw).type == "message"
    with pytest.raises(anthropic.RateLimitError) as ei:
        bob.messages.create(**kw)
    e = ei.value
    assert e.status_code == 429 and e.body["error"]["type"] == "rate_limit_error"
    assert int(e.response.headers["retry-after"]) >= 1
    assert e.response.headers["x-ratelimit-remaining-requests"] == "0"
    assert client(s, key=ALICE).messages.create(**kw).type == "message"


def test_audit_line(ops):
    """One audit line per /v1/messages request, streamed or not, with the endpoint, the
    key's id, the tokens, the finish and (with --audit-log-content) the messages and text."""
    s, log = ops
    c = client(s, key=ALICE)
    kw = {"model": "stories260K", "max_tokens": 5, "system": "Tell a story.",
          "messages": [{"role": "user", "content": "Once upon a time"}], "extra_body": GREEDY}
    raw = c.messages.with_raw_response.create(extra_headers={"X-Request-Id": "anth-audit-1"},
                                              **kw)
    msg = raw.parse()
    ln = audit_line(log, "anth-audit-1", s)
    assert ln["endpoint"] == "/v1/messages" and ln["status"] == 200
    assert ln["api_key_id"] == "alice" and ln["model"] == "stories260K"
    assert ln["prompt_tokens"] == msg.usage.input_tokens + msg.usage.cache_read_input_tokens
    assert ln["completion_tokens"] == msg.usage.output_tokens
    assert ln["finish"] == {"max_tokens": "length", "end_turn": "stop"}[msg.stop_reason]
    assert ln["messages"] == [{"role": "system", "content": "Tell a story."},
                              {"role": "user", "content": "Once upon a time"}]
    assert ln["completion"] == text_of(msg)
    with c.messages.stream(extra_headers={"X-Request-Id": "anth-audit-2"}, **kw) as st:
        streamed = st.get_final_text()
    ln = audit_line(log, "anth-audit-2", s)
    assert ln["endpoint"] == "/v1/messages" and ln["completion"] == streamed
    with pytest.raises(anthropic.BadRequestError):
        c.messages.create(extra_headers={"X-Request-Id": "anth-audit-3"},
                          **{**kw, "messages": []})
    ln = audit_line(log, "anth-audit-3", s)
    assert ln["endpoint"] == "/v1/messages" and ln["status"] == 400
