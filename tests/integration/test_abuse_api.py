"""Abuse of the OpenAI API of `brisk serve` (issue 7): every invalid field and
range of /v1/completions and /v1/chat/completions, non-finite and huge numbers
in every numeric field, huge n / stop / logit_bias / prompt lists, deep
nesting, NUL and invalid UTF-8, wrong content types, empty and non-object
bodies.

Each must get a 4xx with an OpenAI error body, within 50 ms (Release; scaled
by the sanitizer slow-down), measured per request on a warm keep-alive
connection, and without engine work: the engine's token and request counters
on /metrics do not move.

stories260K serves both endpoints (started with --chat-template chatml so that
chat requests get past the template check to the validation under test).
"""

import json
import time

import pytest
from conftest import metric_value

BUDGET_S = 0.050  # per request, Release; times the build's slow factor
N_VOCAB = 512     # stories260K
CTX = 512

# The engine's counters: none may move while invalid requests are answered.
ENGINE_COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                   "vllm:request_success_total", "vllm:e2e_request_latency_seconds_count",
                   "vllm:request_prompt_tokens_count", "brisk_engine_steps_total",
                   "brisk_engine_batch_tokens_total")


@pytest.fixture(scope="module")
def srv(start_server, stories260k_gguf):
    s = start_server(stories260k_gguf, "--chat-template", "chatml")
    yield s
    s.stop()


class Api:
    """One warm keep-alive connection; every request timed."""

    def __init__(self, srv):
        self.srv = srv
        self.conn = None
        self.slowest = (0.0, "")

    def post(self, path, body, ctype="application/json", what=""):
        if self.conn is None:
            self.conn = self.srv.raw(timeout=30)
            self.conn.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # warm it
            assert self.conn.read_response().status == 200
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\n"
        if ctype is not None:
            head += f"Content-Type: {ctype}\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        # Timed from the moment the request has left (a 4 MiB body takes a
        # few ms to write) to the whole answer.
        self.conn.send(head.encode() + body)
        t0 = time.perf_counter()
        r = self.conn.read_response()
        dt = time.perf_counter() - t0
        if r.headers.get("connection", "").lower() == "close":
            self.conn.close()
            self.conn = None
        return r, dt

    def close(self):
        if self.conn:
            self.conn.close()


@pytest.fixture(scope="module")
def api(srv, report):
    a = Api(srv)
    yield a
    a.close()
    report(f"abuse: slowest refused API request {a.slowest[0] * 1e3:.1f} ms ({a.slowest[1]})")


def engine_counters(srv):
    s = srv.metrics()
    return {name: metric_value(s, name) for name in ENGINE_COUNTERS}


def check_refused(srv, api, path, body, param=None, status=400, ctype="application/json",
                  what=""):
    """body (bytes) is refused with `status` and an OpenAI error naming `param`
    (None: any), fast, with no engine work."""
    before = engine_counters(srv)
    # The fastest of up to three tries: the build machine is shared, and a
    # stall of the test process is not the server being slow.
    for _ in range(3):
        r, dt = api.post(path, body, ctype, what)
        if dt < BUDGET_S * srv.slow or r.status != status:
            break
    api.slowest = max(api.slowest, (dt, what))
    assert r.status == status, f"{what}: {r.status} {r.body[:300]!r}"
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"] and "\n" not in err["message"]
    assert err["type"] == "invalid_request_error", err
    if param is not None:
        assert err["param"] == param, f"{what}: {err}"
    assert dt < BUDGET_S * srv.slow, f"{what}: answered in {dt * 1e3:.1f} ms"
    after = engine_counters(srv)
    assert after == before, f"{what}: engine counters moved: {before} -> {after}"
    gauges = srv.metrics()
    assert metric_value(gauges, "vllm:num_requests_running") == 0
    assert metric_value(gauges, "vllm:num_requests_waiting") == 0
    return err


def raw(obj_or_text):
    return obj_or_text if isinstance(obj_or_text, bytes) else json.dumps(obj_or_text).encode()


CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "hi"}]


def cmpl(**kw):
    return dict({"prompt": "Once", "max_tokens": 4}, **kw)


def chat(**kw):
    return dict({"messages": MSGS, "max_tokens": 4}, **kw)


# ---- non-finite and huge numbers in every numeric field ---------------------------------
#
# Written as raw JSON: NaN and Infinity are not JSON at all (a parse error, no
# param); the others parse and must fail the field's own check.

NOT_JSON_NUMBERS = ["NaN", "Infinity", "-Infinity", "nan", "inf", "+1", "01", "1.", ".5", "0x10"]
HUGE_NUMBERS = ["1e999", "-1e999", "1e20", "-1e20", "10000000000000000000",
                "-10000000000000000000", "18446744073709551616",
                "123456789012345678901234567890", "1.5e300", "-1.5e300"]

# (endpoint, field): every number the API reads. "logit_bias" is a value in
# the map, "prompt" a token id.
NUMERIC = [(CMPL, f) for f in ("max_tokens", "temperature", "top_p", "top_k", "min_p", "n",
                               "seed", "presence_penalty", "frequency_penalty",
                               "repetition_penalty", "logprobs", "best_of", "logit_bias",
                               "prompt")]
NUMERIC += [(CHAT, f) for f in ("max_tokens", "max_completion_tokens", "temperature", "top_p",
                                "top_k", "min_p", "n", "seed", "presence_penalty",
                                "frequency_penalty", "repetition_penalty", "top_logprobs",
                                "logprobs", "logit_bias")]


def with_number(path, field, literal):
    base = json.dumps(cmpl() if path == CMPL else chat())[:-1]
    if field == "logit_bias":
        return f'{base}, "logit_bias": {{"5": {literal}}}}}'.encode()
    if field == "prompt":
        return f'{{"max_tokens": 4, "prompt": [1, {literal}]}}'.encode()
    if field == "top_logprobs":
        return f'{base}, "logprobs": true, "top_logprobs": {literal}}}'.encode()
    return f'{base}, "{field}": {literal}}}'.encode()


@pytest.mark.parametrize("path,field", NUMERIC, ids=[f"{p[4:]}-{f}" for p, f in NUMERIC])
def test_huge_and_non_finite_numbers(srv, api, path, field):
    for lit in HUGE_NUMBERS:
        check_refused(srv, api, path, with_number(path, field, lit), param=field,
                      what=f"{field}={lit}")
    for lit in NOT_JSON_NUMBERS:
        err = check_refused(srv, api, path, with_number(path, field, lit), what=f"{field}={lit}")
        assert err["param"] is None and "JSON" in err["message"], err


# ---- every invalid field and range -------------------------------------------------------

BAD_COMPLETIONS = [
    # (body, param)
    (cmpl(prompt=None), "prompt"),
    (cmpl(prompt=True), "prompt"),
    (cmpl(prompt={"text": "a"}), "prompt"),
    (cmpl(prompt=""), "prompt"),
    (cmpl(prompt=[""]), "prompt"),
    (cmpl(prompt=["a", ""]), "prompt"),
    (cmpl(prompt=[[1], "a"]), "prompt"),
    (cmpl(prompt=[[1], []]), "prompt"),
    (cmpl(prompt=[[1], [N_VOCAB]]), "prompt"),
    (cmpl(prompt=[1, "a"]), "prompt"),
    (cmpl(prompt=[1, None]), "prompt"),
    (cmpl(prompt=[1, True]), "prompt"),
    (cmpl(prompt=[1, -0.5]), "prompt"),
    (cmpl(prompt=["a"] * 65), "prompt"),
    (cmpl(prompt=[[1]] * 65), "prompt"),
    (cmpl(prompt=[[[1]]]), "prompt"),
    (cmpl(max_tokens=True), "max_tokens"),
    (cmpl(max_tokens=[4]), "max_tokens"),
    (cmpl(max_tokens=2147483648), "max_tokens"),
    (cmpl(temperature=True), "temperature"),
    (cmpl(temperature=-1e-9), "temperature"),
    (cmpl(top_p=-0.0), "top_p"),
    (cmpl(top_p=1.0000001), "top_p"),
    (cmpl(top_k=-2), "top_k"),
    (cmpl(top_k=1.5), "top_k"),
    (cmpl(top_k=2147483648), "top_k"),
    (cmpl(min_p=-0.01), "min_p"),
    (cmpl(min_p=1.01), "min_p"),
    (cmpl(n=True), "n"),
    (cmpl(n=17), "n"),
    (cmpl(n=-1), "n"),
    (cmpl(n=1000000), "n"),
    (cmpl(n=2147483647), "n"),
    (cmpl(seed="1"), "seed"),
    (cmpl(seed=[1]), "seed"),
    (cmpl(seed=2.5), "seed"),
    (cmpl(presence_penalty=2.5), "presence_penalty"),
    (cmpl(presence_penalty="0"), "presence_penalty"),
    (cmpl(frequency_penalty=2.01), "frequency_penalty"),
    (cmpl(repetition_penalty=0), "repetition_penalty"),
    (cmpl(repetition_penalty=-1), "repetition_penalty"),
    (cmpl(repetition_penalty=10.5), "repetition_penalty"),
    (cmpl(logprobs=True), "logprobs"),
    (cmpl(logprobs=1.5), "logprobs"),
    (cmpl(logprobs=21), "logprobs"),
    (cmpl(echo="yes"), "echo"),
    (cmpl(echo=1), "echo"),
    (cmpl(best_of=2), "best_of"),
    (cmpl(best_of=0), "best_of"),
    (cmpl(suffix="tail"), "suffix"),
    (cmpl(suffix=5), "suffix"),
    (cmpl(stream="true"), "stream"),
    (cmpl(stream=1), "stream"),
    (cmpl(stream_options={"include_usage": True}), "stream_options"),
    (cmpl(stream=True, stream_options=[1]), "stream_options"),
    (cmpl(stream=True, stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    (cmpl(user=5), "user"),
    (cmpl(user=["u"]), "user"),
    (cmpl(ignore_eos="yes"), "ignore_eos"),
    (cmpl(model=7), "model"),
    (cmpl(stop=""), "stop"),
    (cmpl(stop=[""]), "stop"),
    (cmpl(stop=[1]), "stop"),
    (cmpl(stop=[None]), "stop"),
    (cmpl(stop={"a": 1}), "stop"),
    (cmpl(stop=["x" * 1025]), "stop"),
    (cmpl(stop="x" * 100000), "stop"),
    (cmpl(stop=["s"] * 5), "stop"),
    (cmpl(stop=["s%d" % i for i in range(1000)]), "stop"),
    (cmpl(logit_bias=[]), "logit_bias"),
    (cmpl(logit_bias="1:5"), "logit_bias"),
    (cmpl(logit_bias={"-1": 1}), "logit_bias"),
    (cmpl(logit_bias={"01": 1}), "logit_bias"),
    (cmpl(logit_bias={" 1": 1}), "logit_bias"),
    (cmpl(logit_bias={"1.0": 1}), "logit_bias"),
    (cmpl(logit_bias={"": 1}), "logit_bias"),
    (cmpl(logit_bias={"99999999999": 1}), "logit_bias"),
    (cmpl(logit_bias={str(N_VOCAB): 1}), "logit_bias"),
    (cmpl(logit_bias={"1": "5"}), "logit_bias"),
    (cmpl(logit_bias={"1": None}), "logit_bias"),
    (cmpl(logit_bias={"1": {"v": 1}}), "logit_bias"),
    (cmpl(logit_bias={"1": -100.5}), "logit_bias"),
    (cmpl(logit_bias={str(i): 1 for i in range(1025)}), "logit_bias"),
    # vLLM's stop fields and llama.cpp's n_predict.
    (cmpl(min_tokens=-1), "min_tokens"),
    (cmpl(min_tokens=1.5), "min_tokens"),
    (cmpl(max_tokens=4, min_tokens=5), "min_tokens"),
    (cmpl(stop_token_ids=5), "stop_token_ids"),
    (cmpl(stop_token_ids=[-1]), "stop_token_ids"),
    (cmpl(stop_token_ids=[N_VOCAB]), "stop_token_ids"),
    (cmpl(stop_token_ids=["1"]), "stop_token_ids"),
    (cmpl(stop_token_ids=list(range(1025))), "stop_token_ids"),
    (cmpl(include_stop_str_in_output=1), "include_stop_str_in_output"),
    (cmpl(n_predict=0), "n_predict"),
    (cmpl(n_predict=-2), "n_predict"),
    (cmpl(n_predict=5, max_tokens=4), "n_predict"),
    # Fields that change the output elsewhere and are not implemented here:
    # refused by name, never silently ignored (their neutral values pass).
    (cmpl(guided_json={"type": "object", "propertyNames": {"maxLength": 1}}), "guided_json"),
    (cmpl(guided_regex="(a)\\1"), "guided_regex"),
    (cmpl(structured_outputs={"regex": "(a"}), "structured_outputs"),
    (cmpl(grammar="root ::= foo"), "grammar"),
    (cmpl(json_schema={"type": "string", "not": {"const": "a"}}), "json_schema"),
    (cmpl(response_format={"type": "json_schema"}), "response_format"),
    (cmpl(bad_words=["x"]), "bad_words"),
    (cmpl(allowed_token_ids=[1, 2]), "allowed_token_ids"),
    (cmpl(prompt_logprobs=1), "prompt_logprobs"),
    (cmpl(use_beam_search=True), "use_beam_search"),
    (cmpl(typical_p=0.5), "typical_p"),
    (cmpl(mirostat=2), "mirostat"),
    (cmpl(dry_multiplier=0.8), "dry_multiplier"),
    (cmpl(xtc_probability=0.5), "xtc_probability"),
    (cmpl(tfs_z=0.9), "tfs_z"),
    (cmpl(repeat_penalty=1.1), "repeat_penalty"),
    (cmpl(n_probs=3), "n_probs"),
    (cmpl(samplers=["top_k"]), "samplers"),
    (cmpl(skip_special_tokens=False), "skip_special_tokens"),
    (cmpl(add_special_tokens=False), "add_special_tokens"),
    (cmpl(truncate_prompt_tokens=8), "truncate_prompt_tokens"),
    # Valid alone, too many together: checked before any engine work.
    (cmpl(prompt=["a"] * 16, n=16), "n"),
    (cmpl(prompt=[1] * (CTX + 10)), "max_tokens"),
    (cmpl(max_tokens=2147483647), "max_tokens"),
]

BAD_CHAT = [
    ({"max_tokens": 4}, "messages"),
    (chat(messages=None), "messages"),
    (chat(messages={}), "messages"),
    (chat(messages="hi"), "messages"),
    (chat(messages=[]), "messages"),
    (chat(messages=MSGS * 1025), "messages"),
    (chat(messages=["hi"]), "messages[0]"),
    (chat(messages=[None]), "messages[0]"),
    (chat(messages=[{"content": "x"}]), "messages[0].role"),
    (chat(messages=[{"role": 5, "content": "x"}]), "messages[0].role"),
    (chat(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role"),
    (chat(messages=[{"role": "tool", "content": "x"}]), "messages[0].tool_call_id"),
    (chat(messages=[{"role": "function", "content": "x"}]), "messages[0].role"),
    (chat(messages=[{"role": "USER", "content": "x"}]), "messages[0].role"),
    (chat(messages=MSGS + [{"role": "user"}]), "messages[1].content"),
    (chat(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
    (chat(messages=[{"role": "user", "content": {"text": "x"}}]), "messages[0].content"),
    (chat(messages=[{"role": "user", "content": []}]), "messages[0].content"),
    (chat(messages=[{"role": "user", "content": [5]}]), "messages[0].content"),
    (chat(messages=[{"role": "user", "content": [{"text": "x"}]}]), "messages[0].content"),
    (chat(messages=[{"role": "user", "content": [{"type": 5, "text": "x"}]}]),
     "messages[0].content"),
    (chat(messages=[{"role": "user", "content": [{"type": "text"}]}]), "messages[0].content"),
    (chat(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]),
     "messages[0].content"),
    (chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
     "messages[0].content"),
    (chat(messages=[{"role": "user", "content": "x", "name": 5}]), "messages[0].name"),
    (chat(max_completion_tokens=0), "max_completion_tokens"),
    (chat(max_completion_tokens=-1), "max_completion_tokens"),
    (chat(max_completion_tokens="4"), "max_completion_tokens"),
    (chat(logprobs=1), "logprobs"),
    (chat(logprobs="true"), "logprobs"),
    (chat(top_logprobs=5), "top_logprobs"),
    (chat(logprobs=True, top_logprobs=21), "top_logprobs"),
    (chat(logprobs=True, top_logprobs=-1), "top_logprobs"),
    (chat(tools=[{"type": "function", "function": {"name": "f g"}}]), "tools[0]"),
    (chat(tools="f"), "tools"),
    (chat(functions=[{"name": "f"}]), "functions"),
    (chat(response_format={"type": "json_schema",
                           "json_schema": {"schema": {"type": "string", "not": {"const": "a"}}}}),
     "response_format"),
    (chat(response_format="text"), "response_format"),
    (chat(response_format={}), "response_format"),
    (chat(n=17), "n"),
    (chat(guided_choice=[]), "guided_choice"),
    (chat(tool_choice="required"), "tool_choice"),
    (chat(continue_final_message=True), "continue_final_message"),
    (chat(add_generation_prompt=False), "add_generation_prompt"),
    (chat(echo=True), "echo"),
    (chat(chat_template="{{ x }}"), "chat_template"),
    (chat(reasoning_effort="high"), "reasoning_effort"),
    (chat(min_tokens=3, max_completion_tokens=2), "min_tokens"),
    (chat(temperature=2.5), "temperature"),
    (chat(stop=["a", "b", "c", "d", "e"]), "stop"),
    (chat(stream=True, stream_options="x"), "stream_options"),
    (chat(logit_bias={"abc": 1}), "logit_bias"),
    (chat(max_tokens=CTX), "max_tokens"),
]


@pytest.mark.parametrize("body,param", BAD_COMPLETIONS,
                         ids=[str(i) for i in range(len(BAD_COMPLETIONS))])
def test_completions_fields(srv, api, body, param):
    check_refused(srv, api, CMPL, raw(body), param=param, what=json.dumps(body)[:80])


@pytest.mark.parametrize("body,param", BAD_CHAT, ids=[str(i) for i in range(len(BAD_CHAT))])
def test_chat_fields(srv, api, body, param):
    check_refused(srv, api, CHAT, raw(body), param=param, what=json.dumps(body)[:80])


def test_unknown_model_is_404(srv, api):
    for path, body in ((CMPL, cmpl(model="gpt-17")), (CHAT, chat(model="")),
                       (CMPL, cmpl(model="stories260K\u00e9"))):
        err = check_refused(srv, api, path, raw(body), param="model", status=404, what="model")
        assert err["code"] == "model_not_found", err


# ---- big bodies: huge lists, many values, deep nesting ------------------------------------

BIG_BODIES = [
    # (id, path, body, param)
    ("logit-bias-100k", CMPL, raw(cmpl(logit_bias={str(i): 1 for i in range(100000)})), None),
    ("logit-bias-4k-in-vocab-range", CMPL,
     raw(cmpl(logit_bias={str(i % N_VOCAB) + "0" * (i // N_VOCAB): 1 for i in range(4000)})),
     None),
    ("stop-100k", CMPL, raw(cmpl(stop=["s%d" % i for i in range(100000)])), None),
    ("prompt-2m-token-ids", CMPL, b'{"prompt":[' + b",".join([b"1"] * 2000000) + b"]}", None),
    ("prompt-1m-lists", CMPL, b'{"prompt":[' + b",".join([b"[1]"] * 1000000) + b"]}", None),
    ("prompt-100k-strings", CMPL, raw(cmpl(prompt=["a"] * 100000)), None),
    # Refused from their length alone: tokenizing 4 MB would take ~0.7 s.
    ("prompt-4mib-text", CMPL, raw(cmpl(prompt="a " * ((2 << 20) - 64))), "prompt"),
    ("prompt-64-texts", CMPL, raw(cmpl(prompt=["a " * 30000] * 64)), "prompt"),
    ("chat-4mib-text", CHAT,
     raw(chat(messages=[{"role": "user", "content": "a " * ((2 << 20) - 64)}])), "messages"),
    ("messages-100k", CHAT, raw(chat(messages=MSGS * 100000)), None),
    ("content-parts-100k", CHAT,
     raw(chat(messages=[{"role": "user", "content": [{"type": "text", "text": "x"}] * 100000}])),
     None),
    ("unknown-keys-200k", CMPL, b'{"prompt":"a",' + b",".join(b'"k%d":1' % i
                                                             for i in range(200000)) + b"}", None),
    ("nulls-800k", CMPL, b'{"prompt":"a","x":[' + b",".join([b"null"] * 800000) + b"]}", None),
    ("brackets-100k", CMPL, b"[" * 100000, None),
    ("braces-100k", CMPL, b'{"a":' * 100000, None),
    ("nested-in-field-33", CMPL, b'{"prompt":"a","x":' + b"[" * 32 + b"]" * 32 + b"}", None),
    ("nested-prompt-40", CMPL, b'{"prompt":' + b"[" * 40 + b"1" + b"]" * 40 + b"}", None),
    ("duplicate-keys-deep", CMPL,
     b'{"prompt":"a","x":{"y":{"z":[{"k":1,"k":2}]}}}', None),
]


@pytest.mark.parametrize("path,body,param", [b[1:] for b in BIG_BODIES],
                         ids=[b[0] for b in BIG_BODIES])
def test_big_and_deep_bodies(srv, api, path, body, param):
    assert len(body) <= 4 << 20, len(body)
    check_refused(srv, api, path, body, param=param, what=f"{len(body)}-byte body")


# ---- NUL and invalid UTF-8 ------------------------------------------------------------------

BAD_STRINGS = [
    ("escaped-nul", rb"a\u0000b"),
    ("raw-nul", b"a\x00b"),
    ("raw-ff", b"a\xffb"),
    ("raw-fe", b"\xfe"),
    ("overlong-nul", b"a\xc0\x80b"),
    ("overlong-slash", b"\xe0\x80\xaf"),
    ("raw-high-surrogate", b"\xed\xa0\x80"),
    ("raw-low-surrogate", b"\xed\xbf\xbf"),
    ("beyond-u10ffff", b"\xf4\x90\x80\x80"),
    ("f5-lead", b"\xf5\x80\x80\x80"),
    ("truncated-3", b"a\xe2\x82"),
    ("truncated-at-end", b"\xe2"),
    ("lone-continuation", b"\x80"),
    ("lone-high-escape", rb"\ud800"),
    ("lone-low-escape", rb"\udc00"),
    ("high-then-letter", rb"\ud800x"),
    ("high-then-non-low", rb"\ud800\u0041"),
    ("two-highs", rb"\udbff\udbff"),
    ("bad-escape", rb"\x41"),
    ("short-u-escape", rb"\u12"),
    ("raw-control", b"a\x01b"),
    ("raw-newline", b"a\nb"),
]

# Where a string goes: every place a string is read, and a key.
STRING_SLOTS = {
    "prompt": (CMPL, lambda s: b'{"prompt":"' + s + b'"}'),
    "prompt-list": (CMPL, lambda s: b'{"prompt":["ok","' + s + b'"]}'),
    "stop": (CMPL, lambda s: b'{"prompt":"a","stop":["' + s + b'"]}'),
    "model": (CMPL, lambda s: b'{"prompt":"a","model":"' + s + b'"}'),
    "user": (CMPL, lambda s: b'{"prompt":"a","user":"' + s + b'"}'),
    "logit-bias-key": (CMPL, lambda s: b'{"prompt":"a","logit_bias":{"' + s + b'":1}}'),
    "unknown-key": (CMPL, lambda s: b'{"prompt":"a","' + s + b'":1}'),
    "content": (CHAT, lambda s: b'{"messages":[{"role":"user","content":"' + s + b'"}]}'),
    "content-part": (CHAT, lambda s: b'{"messages":[{"role":"user","content":[{"type":"text",'
                     b'"text":"' + s + b'"}]}]}'),
    "role": (CHAT, lambda s: b'{"messages":[{"role":"' + s + b'","content":"x"}]}'),
    "name": (CHAT, lambda s: b'{"messages":[{"role":"user","content":"x","name":"' + s + b'"}]}'),
}


@pytest.mark.parametrize("slot", list(STRING_SLOTS))
def test_nul_and_invalid_utf8(srv, api, slot):
    path, make = STRING_SLOTS[slot]
    for name, s in BAD_STRINGS:
        err = check_refused(srv, api, path, make(s), what=f"{slot}: {name}")
        assert err["param"] is None, err


def test_bytes_outside_strings(srv, api):
    for body in (b'\xef\xbb\xbf{"prompt":"a"}',  # a UTF-8 byte order mark
                 b'{"prompt":"a"}\x00',
                 b'{"prompt":"a",\xff"n":1}',
                 b'{"prompt":"a"}\n{"prompt":"b"}',
                 b'{"prompt":"a"} trailing',
                 b'{"prompt":"a",}',
                 b"{'prompt':'a'}",
                 b'{"prompt":"a" "n":1}',
                 b'{"prompt":"a","prompt":"a"}'):
        err = check_refused(srv, api, CMPL, body, what=repr(body[:30]))
        assert err["param"] in (None, "prompt"), err


# ---- content types, empty bodies, bodies that are not objects -------------------------------


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", "application/jsonl",
                                   "application/json-patch+json", "application/jsonx; q=1",
                                   "json", "application/xml", "", "*/*"])
@pytest.mark.parametrize("path", [CMPL, CHAT])
def test_wrong_content_type(srv, api, path, ctype):
    body = raw(cmpl() if path == CMPL else chat())  # a body that is valid otherwise
    err = check_refused(srv, api, path, body, ctype=ctype, what=f"Content-Type {ctype!r}")
    assert "Content-Type" in err["message"], err


@pytest.mark.parametrize("ctype", [None, "application/json", "application/json; charset=utf-8",
                                   "APPLICATION/JSON"])
@pytest.mark.parametrize("body", [b"", b"   \r\n\t ", b"null", b"true", b"0", b"-1.5", b'"x"',
                                  b"[]", b"[{}]", b'[{"prompt":"a"}]', b"{", b"}", b'{"prompt"',
                                  b'{"prompt":'])
def test_empty_and_non_object_bodies(srv, api, ctype, body):
    """A missing Content-Type is read as JSON (as FastAPI, behind vLLM, does);
    either way these bodies are refused."""
    for path in (CMPL, CHAT):
        check_refused(srv, api, path, body, ctype=ctype, what=f"{body[:20]!r} as {ctype}")


def test_valid_requests_still_served(srv, api):
    """The control: the same connection serves a valid request of each endpoint,
    and the engine counters move for them."""
    before = engine_counters(srv)
    r, _ = api.post(CMPL, raw(cmpl(prompt=[1], temperature=0)), what="valid completion")
    assert r.status == 200, r.body
    r, _ = api.post(CHAT, raw(chat(temperature=0)), ctype=None, what="valid chat")
    assert r.status == 200, r.body
    after = engine_counters(srv)
    assert after["vllm:generation_tokens_total"] == before["vllm:generation_tokens_total"] + 8
    assert after["vllm:request_success_total"] == before["vllm:request_success_total"] + 2
