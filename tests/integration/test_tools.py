"""Tool calling through `brisk serve` with the official openai client: tools and
tool_choice (none, auto, required, a named function), parallel_tool_calls, calls and
results in the history, streamed tool-call deltas, answers their budget cuts or that loop,
and the errors. SmolLM2's ChatML template takes the Hermes/Qwen format (<tool_call>
blocks); every format, streamed, is tested on synthetic models in test_tools_stream.py. The
SmolLM2 generations are marked slow: masks over its 49,152 tokens crawl under the
sanitizers, so the ASan run leaves them to the Release run."""
import json

import jsonschema
import openai
import pytest

from tool_answers import ask_all_ways

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                             "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather",
                                           "description": "The weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "a + b",
                                           "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def smol(smollm2_server):
    return smollm2_server.client()


def chat(client, **kw):
    kw.setdefault("max_tokens", 120)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=SMOLLM2, messages=kw.pop("messages", ASK),
                                          tools=kw.pop("tools", TOOLS), **kw)


def check_calls(calls, names=None):
    assert calls, "no tool calls"
    for t in calls:
        assert t.type == "function" and t.id.startswith("call_") and len(t.id) == 29, t
        assert t.function.name in (names or SCHEMAS), t
        jsonschema.validate(json.loads(t.function.arguments), SCHEMAS[t.function.name])


@pytest.mark.slow
@pytest.mark.parametrize("temperature,seed", [(0, 0), (1, 1), (1, 2)])
def test_required(smol, temperature, seed):
    r = chat(smol, tool_choice="required", temperature=temperature, seed=seed)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None, c
    check_calls(c.message.tool_calls)
    assert len({t.id for t in c.message.tool_calls}) == len(c.message.tool_calls)


@pytest.mark.slow
def test_named_and_not_parallel(smol):
    r = chat(smol, tool_choice={"type": "function", "function": {"name": "add"}},
             parallel_tool_calls=False)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1
    check_calls(c.message.tool_calls, names={"add"})


# A function without properties, as the issue reporting bug 1 had it: any object, and a
# strict one whose arguments can only be {}.
NOW = {"type": "function", "function": {"name": "now", "description": "The current time",
                                        "parameters": {"type": "object", "properties": {}}}}
NOW_STRICT = {"type": "function", "function": {
    "name": "now", "description": "The current time",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}}
WHAT_TIME = [{"role": "user", "content": "What time is it?"}]


@pytest.mark.slow
@pytest.mark.parametrize("max_tokens", [60, 120])
def test_required_cut_by_budget(smollm2_server, max_tokens):
    """Bug 1 as reported: the budget cuts the call SmolLM2 writes; the answer says
    "length", keeps the call (its arguments truncated, as OpenAI returns them) and never
    returns the <tool_call> markup as content; streamed, the same."""
    body = dict(model=SMOLLM2, messages=WHAT_TIME, tools=[NOW], tool_choice="required",
                max_tokens=max_tokens, temperature=0)
    w = ask_all_ways(smollm2_server, body)
    assert w["finish"] == "length" and w["content"] is None, w
    assert w["calls"] and all(c[1] == "now" for c in w["calls"]), w


@pytest.mark.slow
def test_required_repeat_ends(smollm2_server):
    """Bug 1: SmolLM2 repeats a call without arguments until its budget runs out; the
    repeat ends the list: one call, finish "tool_calls", no content."""
    body = dict(model=SMOLLM2, messages=WHAT_TIME, tools=[NOW_STRICT], tool_choice="required",
                max_tokens=120, temperature=0)
    w = ask_all_ways(smollm2_server, body)
    assert w["finish"] == "tool_calls" and w["content"] is None, w
    assert [(c[1], json.loads(c[2])) for c in w["calls"]] == [("now", {})], w


@pytest.mark.slow
@pytest.mark.parametrize("kw", [{"tool_choice": "required"},
                                {"tool_choice": "auto"},
                                {"tool_choice": {"type": "function", "function": {"name": "add"}},
                                 "parallel_tool_calls": False}],
                         ids=["required", "auto", "named"])
def test_stream_equals_whole(smollm2_server, kw):
    """The calls streamed as they are written equal the whole answer's: the same
    arguments text, ids of the same form, the same content and finish."""
    ask_all_ways(smollm2_server, dict(model=SMOLLM2, messages=ASK, tools=TOOLS, max_tokens=120,
                                      temperature=0, **kw))


@pytest.mark.slow
def test_streamed_calls(smol):
    """id, type and name come first for each call, then its arguments; no content;
    finish "tool_calls"; the same calls as the non-streamed answer."""
    want = chat(smol, tool_choice="required").choices[0].message.tool_calls
    calls, finish, content = {}, None, ""
    for ch in chat(smol, tool_choice="required", stream=True):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        for t in d.tool_calls or []:
            e = calls.setdefault(t.index, {"id": None, "name": None, "args": ""})
            if t.id:
                assert e["id"] is None and t.function.name and not e["args"], t
                e["id"], e["name"] = t.id, t.function.name
            else:
                assert e["id"] is not None, "arguments before the id and name"
            e["args"] += t.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == ""
    assert [(e["name"], json.loads(e["args"])) for _, e in sorted(calls.items())] == \
        [(t.function.name, json.loads(t.function.arguments)) for t in want]


@pytest.mark.slow
def test_two_turn_conversation(smol):
    """A call forced by the grammar, its result sent back as a tool message, then an
    answer (auto: text or another call, both well-formed)."""
    r = chat(smol, tool_choice={"type": "function", "function": {"name": "get_weather"}},
             parallel_tool_calls=False)
    call = r.choices[0].message.tool_calls[0]
    history = ASK + [r.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id,
                      "content": json.dumps({"temperature": 18, "sky": "sunny"})}]
    r2 = chat(smol, messages=history, max_tokens=60)
    c = r2.choices[0]
    assert c.finish_reason in ("stop", "length", "tool_calls"), c
    if c.finish_reason == "tool_calls":
        check_calls(c.message.tool_calls)
    else:
        assert isinstance(c.message.content, str) and c.message.content
    # the history's call and result reach the prompt
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens + 20


@pytest.mark.slow
def test_auto_and_none(smol):
    r = chat(smol, tool_choice="auto")
    c = r.choices[0]
    if c.finish_reason == "tool_calls":
        check_calls(c.message.tool_calls)
    else:
        assert c.message.tool_calls is None and c.message.content
    r_none = chat(smol, tool_choice="none", max_tokens=8)
    assert r_none.choices[0].message.tool_calls is None
    # "none": the tools are not in the prompt
    assert r_none.usage.prompt_tokens < r.usage.prompt_tokens


@pytest.mark.parametrize("kw,param", [
    ({"tools": [{"type": "function"}]}, "tools[0]"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0]"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "not": {"const": "a"}}}}}}]},
     "tools[0]"),
    ({"tools": TOOLS + [TOOLS[0]]}, "tools"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [], "tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{oops"}}]}]},
     "messages[1].tool_calls"),
    ({"messages": ASK + [{"role": "tool", "tool_call_id": 5, "content": "x"}]},
     "messages[1].tool_call_id"),
    ({"messages": ASK + [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[1]"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
])
def test_tool_errors_400(smol, kw, param):
    with pytest.raises(openai.BadRequestError) as ei:
        chat(smol, **kw)
    assert ei.value.body["param"] == param, ei.value.body
