"""Tool calls streamed as they are generated, in every tool format, and tool answers that
their budget cuts or that loop (issue 36, bug 1), on synthetic models (random weights, the
300-token byte-level vocabulary) with each format's chat template: ChatML (the
Hermes/Qwen <tool_call> blocks), Llama 3 (JSON objects), Mistral ([TOOL_CALLS] and a JSON
list) and Gemma 3's, which has no tool format of its own and takes the generic JSON one
({"tool_calls": [...]} or {"response": ...}).

For each format and tool_choice the same request is sent three times with one seed: whole,
streamed through the openai SDK, and streamed as raw SSE; the streamed calls must equal the
whole answer's exactly (the same arguments text once the fragments are joined, ids of the
same form), and so must the content and finish_reason. A call's first delta carries its
index, id, type, name and empty arguments, the fragments after it only the index and
arguments, and calls open in order of index. SmolLM2's own tool tests are in
test_tools.py; the real Gemma 3 270M's in test_gemma3_270m.py (exhaustive tier)."""
import json

import jsonschema
import pytest

from synth_gguf import Spec, write_model
from tool_answers import ask_all_ways
# Token ids of the synthetic vocabulary: the byte tokens are their byte's value; then 40
# merges and the control tokens <|endoftext|>, <|im_start|>, <|im_end|>, <|pad|>.
TOK_CLOSE_BRACKET = ord("]")
TOK_EOS = (296, 298)
# Whitespace the grammar allows but does not require, biased away: calls come out compact
# and the same call twice the same text.
NO_WS = {str(ord(c)): -100 for c in " \t\n\r"}

QWEN2 = Spec(arch="qwen2", n_head_kv=2, rope_base=1e6, mat_type="Q8_0", seed=21)
GEMMA3 = Spec(arch="gemma3", n_head=4, n_head_kv=1, head_dim=64, rope_base=1e6,
              sliding_window=8, swa_pattern=2, seed=24)
TEMPLATES = {
    "hermes": ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>"
               "\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    "llama3": ("{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>"
               "\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"),
    "mistral": ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] "
                "{{ m['content'] }}[/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}"
                "{% endfor %}"),
    "json": None,  # Gemma 3's template, chosen by architecture
}
FAMILY = {"hermes": "chatml", "llama3": "llama3", "mistral": "mistral", "json": "gemma"}

PARAMS = {"type": "object", "properties": {"n": {"type": "integer"},
                                           "tag": {"enum": ["x", "y"]}},
          "required": ["n", "tag"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": PARAMS}},
         {"type": "function", "function": {"name": "g", "parameters": {
             "type": "object", "properties": {"s": {"type": "string", "maxLength": 12}},
             "required": ["s"], "additionalProperties": False}}}]
NOW = [{"type": "function", "function": {"name": "now", "parameters": {
    "type": "object", "properties": {}, "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def servers(start_server, tmp_path_factory):
    """One server per tool format, started when first asked for."""
    root = tmp_path_factory.mktemp("tools")
    running = {}

    def get(fmt):
        if fmt not in running:
            spec = GEMMA3 if fmt == "json" else QWEN2
            path = write_model(root / f"{fmt}.gguf", spec, chat_template=TEMPLATES[fmt])
            srv = start_server(path)
            assert f"{FAMILY[fmt]}" in srv.log(), srv.log()[-2000:]
            running[fmt] = srv
        return running[fmt]

    yield get
    for srv in running.values():
        srv.stop()


def model_of(srv):
    return srv.request("GET", "/v1/models").json()["data"][0]["id"]


CHOICES = {
    "required": {"tool_choice": "required"},
    "named": {"tool_choice": {"type": "function", "function": {"name": "g"}},
              "parallel_tool_calls": False},
    "auto": {"tool_choice": "auto"},
}


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral", "json"])
@pytest.mark.parametrize("choice", ["required", "named", "auto"])
@pytest.mark.parametrize("seed", [1, 2])
def test_stream_equals_whole(servers, fmt, choice, seed):
    srv = servers(fmt)
    body = dict(model=model_of(srv), messages=ASK, tools=TOOLS, max_tokens=200, temperature=1,
                seed=seed, **CHOICES[choice])
    w = ask_all_ways(srv, body)
    forced = choice != "auto" or fmt == "json"
    if forced:
        # A grammar holds the answer: calls that follow their schemas, or (the generic
        # format's auto) a text answer; never the format's markup as content.
        if w["calls"]:
            assert w["finish"] in ("tool_calls", "length") and w["content"] is None, w
        else:
            assert choice == "auto" or w["finish"] == "length", w
        for i, (_, name, args) in enumerate(w["calls"]):
            cut = w["finish"] == "length" and i == len(w["calls"]) - 1
            if not cut:
                schema = PARAMS if name == "f" else TOOLS[1]["function"]["parameters"]
                jsonschema.validate(json.loads(args), schema)
        for mark in ("<tool_call>", "tool_calls", "[TOOL_CALLS]", '"name"'):
            assert mark not in (w["content"] or ""), w
    if choice == "named":
        assert len(w["calls"]) <= 1 and all(c[1] == "g" for c in w["calls"]), w


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral", "json"])
@pytest.mark.parametrize("max_tokens", [6, 14, 22])
def test_cut_by_budget(servers, fmt, max_tokens):
    """Bug 1: a forced answer cut by max_tokens says "length", keeps the call it was
    writing (truncated, as OpenAI returns it) once its name was written, and never
    returns the format's markup as content; streamed, the same."""
    srv = servers(fmt)
    body = dict(model=model_of(srv), messages=ASK, tools=TOOLS, tool_choice="required",
                max_tokens=max_tokens, temperature=1, seed=3)
    w = ask_all_ways(srv, body)
    assert w["finish"] == "length", w
    assert not w["content"], w  # null with calls, "" without
    for _, name, args in w["calls"]:
        assert name in ("f", "g") and (args == "" or args.startswith("{")), w


@pytest.mark.parametrize("fmt", ["hermes", "json"])
def test_repeated_call_ends_the_list(servers, fmt):
    """Bug 1: a model that would repeat one call to the end of its budget (the end of the
    list and of the answer biased away) gets the call once and finish "tool_calls"; before,
    the generic format returned no call at all, the markup as content, and "length", and
    the Hermes format every repeat, with the cut one's markup as content."""
    srv = servers(fmt)
    if fmt == "hermes":  # the end biased away; the "\n" that separates calls less so
        bias = dict(NO_WS, **{str(t): -100 for t in TOK_EOS}, **{str(ord("\n")): -20})
    else:
        bias = dict(NO_WS, **{str(TOK_CLOSE_BRACKET): -100})
    body = dict(model=model_of(srv), messages=ASK, tools=NOW, tool_choice="required",
                max_tokens=400, temperature=0, logit_bias=bias)
    w = ask_all_ways(srv, body)
    assert w["finish"] == "tool_calls" and w["content"] is None, w
    assert [c[1:] for c in w["calls"]] == [("now", "{}")], w
    usage = srv.post("/v1/chat/completions", body).json()["usage"]
    assert usage["completion_tokens"] < body["max_tokens"], usage


def test_call_list_bounded(servers):
    """Bug 1: the list that cannot close (its "]" biased away) ends at SRV_TOOLS_MAX_CALLS
    calls or at a repeated one, whichever comes first: distinct, valid calls and finish
    "tool_calls", not a budget spent on calls that are all thrown away."""
    srv = servers("json")
    tags = [chr(ord("a") + i) for i in range(20)]
    tools = [{"type": "function", "function": {"name": "t", "parameters": {
        "type": "object", "properties": {"k": {"enum": tags}}, "required": ["k"],
        "additionalProperties": False}}}]
    body = dict(model=model_of(srv), messages=ASK, tools=tools, tool_choice="required",
                max_tokens=600, temperature=1, seed=6,
                logit_bias=dict(NO_WS, **{str(TOK_CLOSE_BRACKET): -100}))
    w = ask_all_ways(srv, body)
    assert w["finish"] == "tool_calls" and w["content"] is None, w
    args = [c[2] for c in w["calls"]]
    assert 1 <= len(args) <= 16 and len(set(args)) == len(args), w
    for a in args:
        assert json.loads(a)["k"] in tags


def test_responses_stream_calls(servers):
    """/v1/responses streams a call as it is written: its item announced with its name,
    then function_call_arguments.delta events that join into the arguments of the done
    event, the item and the final response - the same as the answer not streamed."""
    srv = servers("json")
    body = dict(model=model_of(srv), input="hi", tools=[
        {"type": "function", "name": "g", "parameters": TOOLS[1]["function"]["parameters"]}],
        tool_choice="required", temperature=1, seed=7, max_output_tokens=200)
    r = srv.post("/v1/responses", body)
    assert r.status == 200, r.text
    want = [(o["name"], o["arguments"]) for o in r.json()["output"]
            if o["type"] == "function_call"]
    assert want and r.json()["status"] == "completed"
    conn, status, headers = srv.stream("/v1/responses", dict(body, stream=True))
    events = [json.loads(d) for d in conn.iter_sse(headers)]
    conn.close()
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [a["item"]["name"] for a in added] == [n for n, _ in want]
    assert all(a["item"]["arguments"] == "" for a in added)
    for k, (name, args) in enumerate(want):
        deltas = [e["delta"] for e in events
                  if e["type"] == "response.function_call_arguments.delta"
                  and e["output_index"] == k]
        assert len(deltas) > 1, "the arguments come as they are written, not at the end"
        assert "".join(deltas) == args
        done = [e for e in events if e["type"] == "response.function_call_arguments.done"
                and e["output_index"] == k]
        assert done[0]["arguments"] == args and done[0]["name"] == name
    final = events[-1]
    assert final["type"] == "response.completed"
    assert [(o["name"], o["arguments"]) for o in final["response"]["output"]] == want
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_responses_cut_items_incomplete(servers):
    """Bug 1 and 4 on /v1/responses: a forced answer cut by max_output_tokens is an
    incomplete response whose items are incomplete too, and no message carries markup."""
    srv = servers("json")
    body = dict(model=model_of(srv), input="hi", tools=[
        {"type": "function", "name": "g", "parameters": TOOLS[1]["function"]["parameters"]}],
        tool_choice="required", temperature=1, seed=7, max_output_tokens=30)
    r = srv.post("/v1/responses", body).json()
    assert r["status"] == "incomplete", r
    # The call was cut after its name: kept, truncated; nothing else.
    assert r["output"] and all(o["status"] == "incomplete" for o in r["output"]), r
    assert [o["type"] for o in r["output"]] == ["function_call"], r
    conn, status, headers = srv.stream("/v1/responses", dict(body, stream=True))
    events = [json.loads(d) for d in conn.iter_sse(headers)]
    conn.close()
    assert events[-1]["type"] == "response.incomplete"
    assert [o["arguments"] for o in events[-1]["response"]["output"]] == \
        [o["arguments"] for o in r["output"]]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done and all(i["status"] == "incomplete" for i in done), done
