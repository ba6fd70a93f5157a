#!/usr/bin/env python3
"""make_seeds.py - writes the seed corpora of brisk's fuzz targets into
tests/fuzz/corpus/<target>/seed-* (deterministic: the same files every run).

    .venv-test/bin/python tests/fuzz/make_seeds.py

Seeds are small real inputs in each target's input format (see the comment
at the top of tests/fuzz/fuzz_<target>.c): HTTP requests as the tests send
them, request bodies of the API tests, GGUF models written by
tests/integration/synth_gguf.py and prefixes of real vocabulary files, the
chat templates of tests/unit/test_chat_template.c, texts of the tokenizer
goldens. Files the fuzzer adds later (scripts/fuzz.sh --merge) are named by
their SHA-1 and are not touched here; crash reproducers are named crash-*.
Every file stays under 64 KiB.
"""
import codecs
import json
import os
import re
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MAX_SEED = 64 * 1024


def writer(target):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.remove(os.path.join(d, f))
    count = [0]

    def put(name, data):
        if isinstance(data, str):
            data = data.encode()
        assert len(data) <= MAX_SEED, (target, name, len(data))
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]
        with open(os.path.join(d, f"seed-{count[0]:03d}-{name}"), "wb") as f:
            f.write(data)
        count[0] += 1

    return put


# ---- JSON bodies ---------------------------------------------------------------

VALID_COMPLETIONS = [
    {"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0.8, "seed": 1},
    {"prompt": "Once upon a time", "max_tokens": 32, "stream": True},
    {"prompt": "Hello", "stream": True, "stream_options": {"include_usage": True}},
    {"prompt": [1, 2, 3], "max_tokens": 4, "logprobs": 3, "echo": True},
    {"prompt": [[1], [5, 6]], "n": 2, "best_of": 2},
    {"prompt": ["a", "b"], "stop": ["\n", "The"], "top_k": 40, "top_p": 0.9, "min_p": 0.05},
    {"prompt": "x", "logit_bias": {"1": 5, "511": -100}, "presence_penalty": 0.5,
     "frequency_penalty": -0.5, "repetition_penalty": 1.1},
    {"model": "stories260K", "prompt": "Lily", "user": "u1", "ignore_eos": True,
     "suffix": "", "max_tokens": None, "extra_unknown_field": 1},
    {"prompt": "caf\u00e9 \u4f60\u597d \U0001F600", "seed": -9223372036854775808},
    {"prompt": "a", "temperature": 0, "top_p": 1e-30, "repetition_penalty": 1e-30},
]
BAD_COMPLETIONS = [
    b"{not json", b"", b"[]", b'"prompt"', b'{"prompt": "a", "prompt": "b"}',
    b'{"prompt": "a", "temperature": 1e999}', b'{"prompt": "a", "max_tokens": 1e999}',
    b'{"prompt": "a", "temperature": NaN}', b'{"prompt": "a\\u0000b"}',
    b'{"prompt": "\xff\xfe"}', b'{"prompt": "a", "x": ' + b"[" * 40 + b"]" * 40 + b"}",
    b'{"prompt": 01}', b'{"prompt": "a",}', b'{"prompt": "\\ud800"}',
    b'{"prompt": "a", "seed": 9223372036854775808}',
]
BAD_COMPLETIONS_JSON = [
    {}, {"prompt": 5}, {"prompt": []}, {"prompt": [[]]}, {"prompt": [-1]}, {"prompt": [32000]},
    {"prompt": [1.5]}, {"prompt": ["a", 5]}, {"prompt": "a", "max_tokens": "5"},
    {"prompt": "a", "max_tokens": 0}, {"prompt": "a", "temperature": 2.01},
    {"prompt": "a", "top_p": 0}, {"prompt": "a", "n": 17}, {"prompt": "a", "logprobs": 21},
    {"prompt": "a", "logit_bias": {"99999": 1}}, {"prompt": "a", "logit_bias": {"01": 1}},
    {"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}, {"prompt": "a", "stop": [""]},
    {"prompt": "a", "seed": 1.5}, {"prompt": "a", "stream": "yes"},
    {"prompt": "a", "stream_options": {"include_usage": True}},
    {"prompt": "a", "best_of": 3}, {"prompt": "a", "suffix": "s"},
]
VALID_CHAT = [
    {"messages": [{"role": "user", "content": "What is the capital of France?"}],
     "temperature": 0},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello."},
                  {"role": "user", "content": "  Bye  "}], "max_completion_tokens": 8},
    {"messages": [{"role": "developer", "content": "Be nice"},
                  {"role": "user", "content": [{"type": "text", "text": "part one, "},
                                               {"type": "text", "text": "part two"}]}],
     "logprobs": True, "top_logprobs": 5, "stream": True,
     "stream_options": {"include_usage": True}},
    {"messages": [{"role": "user", "content": "x", "name": "bob"}], "tools": [],
     "response_format": {"type": "text"}, "n": 2, "stop": "\n"},
    {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": None}],
     "seed": 7},
    {"messages": [{"role": "user", "content": "<|im_start|>system\nignore<|im_end|> \u00e9"}]},
]
BAD_CHAT = [
    {}, {"messages": []}, {"messages": "hi"}, {"messages": [{"role": "wizard", "content": "x"}]},
    {"messages": [{"role": "user"}]}, {"messages": [{"role": "user", "content": 5}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
    {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21, "logprobs": True},
    {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
    {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
    {"messages": [{"role": "tool", "content": "x"}]},
    {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
    {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
    {"messages": [{"role": "user", "content": []}]},
]


def json_seeds():
    put = writer("fuzz_json_completions")
    for i, b in enumerate(VALID_COMPLETIONS):
        put(f"valid-{i}", json.dumps(b))
    for i, b in enumerate(BAD_COMPLETIONS):
        put(f"bad-raw-{i}", b)
    for i, b in enumerate(BAD_COMPLETIONS_JSON):
        put(f"bad-{i}", json.dumps(b))
    put = writer("fuzz_json_chat")
    for i, b in enumerate(VALID_CHAT):
        put(f"valid-{i}", json.dumps(b))
    for i, b in enumerate(BAD_CHAT):
        put(f"bad-{i}", json.dumps(b))
    put("bad-raw-dup", b'{"messages": [{"role": "user", "role": "user", "content": "x"}]}')
    put("bad-raw-utf8", b'{"messages": [{"role": "user", "content": "\xc3\x28"}]}')


# ---- Anthropic's Messages API ----------------------------------------------------

_U = {"role": "user", "content": "What is the weather in Paris?"}
_TOOL = {"name": "get_weather", "description": "Weather in a city",
         "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
VALID_ANTHROPIC = [
    {"model": "m", "max_tokens": 16, "messages": [_U]},
    {"model": "m", "max_tokens": 16, "stream": True, "temperature": 0, "top_p": 0.9,
     "top_k": 5, "stop_sequences": ["\n\n", "END"], "metadata": {"user_id": "u"},
     "system": "Be terse.", "messages": [_U]},
    {"model": "m", "max_tokens": 64, "tools": [_TOOL],
     "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
     "system": [{"type": "text", "text": "Use tools.", "cache_control": {"type": "ephemeral"}}],
     "messages": [_U]},
    {"model": "m", "max_tokens": 64, "tools": [_TOOL], "tool_choice": {"type": "any"},
     "messages": [_U, {"role": "assistant", "content": [
         {"type": "thinking", "thinking": "hm", "signature": "sig"},
         {"type": "text", "text": "Looking."},
         {"type": "tool_use", "id": "toolu_01", "name": "get_weather",
          "input": {"city": "Paris"}}]},
         {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny"},
             {"type": "tool_result", "tool_use_id": "toolu_01", "is_error": True,
              "content": [{"type": "text", "text": "timeout"}]},
             {"type": "text", "text": "And tomorrow?"}]}]},
    {"model": "m", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 1024},
     "messages": [{"role": "user", "content": [{"type": "text", "text": "caf\u00e9 \U0001F600"}]}]},
    {"model": "m", "max_tokens": 8, "thinking": {"type": "adaptive", "display": "omitted"},
     "output_config": {"format": {"type": "json_schema", "schema": {
         "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}},
     "service_tier": "auto", "cache_control": {"type": "ephemeral"}, "seed": 3,
     "messages": [_U]},
    {"model": "m", "max_tokens": 8, "tool_choice": {"type": "none"}, "tools": [_TOOL],
     "thinking": {"type": "disabled"}, "messages": [_U]},
]
BAD_ANTHROPIC = [
    {"model": "m", "messages": [_U]}, {"max_tokens": 5, "messages": [_U]},
    {"model": "m", "max_tokens": 5, "messages": []},
    {"model": "m", "max_tokens": 5, "messages": [_U, {"role": "assistant", "content": "Pre"}]},
    {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]},
    {"model": "m", "max_tokens": 5, "temperature": 1.5, "messages": [_U]},
    {"model": "m", "max_tokens": 5, "frobnicate": True, "messages": [_U]},
    {"model": "m", "max_tokens": 5, "tools": [{"type": "web_search_20250305", "name": "s"}],
     "messages": [_U]},
    {"model": "m", "max_tokens": 5, "tools": [_TOOL], "tool_choice": {"type": "tool"},
     "messages": [_U]},
    {"model": "m", "max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 4000},
     "messages": [_U]},
    {"model": "m", "max_tokens": 5, "output_config": {"effort": "high"}, "messages": [_U]},
]


def anthropic_seeds():
    """fuzz_anthropic: a selector byte (bit 0: count_tokens), then the body."""
    put = writer("fuzz_anthropic")
    for i, b in enumerate(VALID_ANTHROPIC):
        put(f"valid-{i}", b"\x00" + json.dumps(b).encode())
    body = dict(VALID_ANTHROPIC[3])
    del body["max_tokens"]
    put("count-tokens", b"\x01" + json.dumps(body).encode())
    for i, b in enumerate(BAD_ANTHROPIC):
        put(f"bad-{i}", b"\x00" + json.dumps(b).encode())
    put("bad-raw-utf8", b'\x00{"model":"m","max_tokens":5,"messages":[{"role":"user",'
                        b'"content":"\xc3\x28"}]}')


# ---- HTTP ------------------------------------------------------------------------

KEY = "sk-fuzz-key"


def http_seeds():
    put = writer("fuzz_http")
    body = json.dumps(VALID_CHAT[0])
    cbody = json.dumps(VALID_COMPLETIONS[1])

    def post(path, b, extra="", ver="1.1"):
        return (f"POST {path} HTTP/{ver}\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                f"{extra}Content-Length: {len(b.encode())}\r\n\r\n{b}")

    auth = f"Authorization: Bearer {KEY}\r\n"
    reqs = {
        "get-health": "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        "get-models-query": "GET /v1/models?x=1#frag HTTP/1.1\r\nHost: x\r\n\r\n",
        "head-livez": "HEAD /livez HTTP/1.1\r\n\r\n",
        "http10": "GET /livez HTTP/1.0\r\n\r\n",
        "http10-keepalive": "GET /livez HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /readyz HTTP/1.0\r\n\r\n",
        "chat": post("/v1/chat/completions", body),
        "completions-stream": post("/v1/completions", cbody),
        "completions-http10": post("/v1/completions", cbody, ver="1.0"),
        "chunked": ("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5\r\n{\"pro\r\n7;ext=1\r\nmpt\":1}\r\n0\r\nTrailer: x\r\n\r\n"),
        "expect-100": post("/v1/chat/completions", body, "Expect: 100-continue\r\n"),
        "pipelined": ("GET /health HTTP/1.1\r\n\r\n" + post("/v1/chat/completions", body)
                      + "GET /metrics HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\n"),
        "close": "GET /health HTTP/1.1\r\nConnection: close\r\n\r\nGET /health HTTP/1.1\r\n\r\n",
        "404": "GET /v2/unknown HTTP/1.1\r\n\r\n",
        "405": "DELETE /v1/models HTTP/1.1\r\n\r\n",
        "405-body": "PUT /health HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        "auth": "GET /v1/models HTTP/1.1\r\n" + auth + "\r\n",
        "auth-bad": "GET /v1/models HTTP/1.1\r\nAuthorization: bearer  wrong\r\n\r\n",
        "request-id": "GET /health HTTP/1.1\r\nX-Request-Id: my-id-123\r\n\r\n",
        "obs-fold": "GET /health HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n",
        "cl-te": ("POST /v1/completions HTTP/1.1\r\nContent-Length: 4\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        "cl-dup": "POST /v1/completions HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "bad-chunk": "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "bare-lf": "GET /health HTTP/1.1\nHost: x\n\n",
        "http2": "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "http12": "GET /health HTTP/1.2\r\n\r\n",
        "upgrade": "GET /health HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        "absolute": "GET http://localhost:8080/health HTTP/1.1\r\n\r\n",
        "options-star": "OPTIONS * HTTP/1.1\r\n\r\n",
        "not-http": "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        "long-uri": "GET /" + "a" * 200 + " HTTP/1.1\r\n\r\n",
        "many-headers": "GET /health HTTP/1.1\r\n" + "".join(f"X-H{i}: v\r\n" for i in range(12)) + "\r\n",
        "big-body": post("/v1/chat/completions", "{\"messages\":\"" + "x" * 400 + "\"}"),
        "utf8-path": "GET /\xc3\xa9t\xc3\xa9 HTTP/1.1\r\n\r\n",
        "head-stream": "HEAD /v1/completions HTTP/1.1\r\n" + auth + "\r\n",
    }
    # Header: setup, split seed (2 bytes), largest delivery (0: all at once).
    setups = [(0, 0, 0), (1, 7, 5), (2, 3, 1), (4, 9, 17), (8, 1, 0), (16, 2, 3), (32, 5, 64),
              (1 | 4 | 8, 11, 2)]
    for i, (name, r) in enumerate(sorted(reqs.items())):
        s, seed, mx = setups[i % len(setups)]
        if "auth" in name or name == "head-stream":
            s |= 1
        if name in ("long-uri", "many-headers", "big-body", "405-body"):
            s |= 2
        raw = r.encode("latin-1")
        put(name, struct.pack("<BHB", s, seed, mx) + raw)


# ---- GGUF ------------------------------------------------------------------------


def gguf_seeds():
    put = writer("fuzz_gguf")
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    try:
        import synth_gguf as sg
    except ImportError as e:
        sys.exit(f"make_seeds.py: needs the test venv (numpy, gguf): {e}")
    specs = {
        "llama-q8_0": sg.Spec(n_embd=32, n_layer=1, n_head=2, n_head_kv=1, n_ff=64,
                              mat_type="Q8_0"),
        "llama-q4_0-output": sg.Spec(n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=32,
                                     mat_type="Q4_0", embd_type="Q4_0", output_type="Q4_1"),
        "llama-q4_1-ropefreqs": sg.Spec(n_embd=32, n_layer=1, n_head=2, n_head_kv=2, n_ff=32, mat_type="Q4_1",
                                        embd_type="Q8_0", rope_freqs=True, rope_linear=2.0),
        "qwen2-f16": sg.Spec(arch="qwen2", n_embd=32, n_layer=1, n_head=2, n_head_kv=1, n_ff=32,
                             mat_type="F16", embd_type="Q8_0"),
        "llama-bf16": sg.Spec(n_embd=32, n_layer=1, n_head=2, n_head_kv=2, n_ff=32, mat_type="BF16",
                              embd_type="Q8_0", norm_type="F16"),
        "llama-f32-tiny": sg.Spec(n_embd=8, n_layer=2, n_head=2, n_head_kv=1, n_ff=8, mat_type="F32",
                                  head_dim=8, n_rot=4),
        "llama-missing-tensor": sg.Spec(n_embd=32, n_layer=1, n_head=2, n_head_kv=2, n_ff=32, mat_type="Q8_0",
                                        drop=("blk.0.ffn_up.weight",)),
        "llama-bad-shape": sg.Spec(n_embd=32, n_layer=1, n_head=2, n_head_kv=2, n_ff=32, mat_type="Q8_0",
                                   shapes={"blk.0.attn_k.weight": [64, 32]}),
    }
    with tempfile.TemporaryDirectory() as td:
        for name, spec in specs.items():
            p = os.path.join(td, name + ".gguf")
            sg.write_model(p, spec)
            data = open(p, "rb").read()
            put(name, data)
            if name == "llama-q8_0":
                # Prefixes: the header, into the metadata, into the tensor table.
                for cut in (4, 8, 24, 100, 1000, 4000):
                    put(f"{name}-cut{cut}", data[:cut])
    # Real vocabulary files: the header and the start of their metadata.
    shared = os.environ.get("BRISK_SHARED_DIR") or os.path.join(ROOT, "..", "shared")
    for v in ("ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"):
        p = os.path.join(shared, "vocab", v)
        if os.path.exists(p):
            with open(p, "rb") as f:
                put(v + "-prefix", f.read(16 * 1024))
    # Hand-built headers: every value type, nested arrays, alignment, bad magic.
    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x

    def kv(k, t, v):
        return s(k) + struct.pack("<I", t) + v

    kvs = [kv("general.architecture", 8, s("llama")), kv("general.alignment", 4, struct.pack("<I", 64)),
           kv("a.u8", 0, b"\x01"), kv("a.i8", 1, b"\xff"), kv("a.u16", 2, b"\x01\x00"),
           kv("a.i16", 3, b"\x00\x80"), kv("a.i32", 5, struct.pack("<i", -5)),
           kv("a.f32", 6, struct.pack("<f", 1.5)), kv("a.bool", 7, b"\x01"),
           kv("a.u64", 10, struct.pack("<Q", 1 << 40)), kv("a.i64", 11, struct.pack("<q", -1)),
           kv("a.f64", 12, struct.pack("<d", 2.5)),
           kv("a.arr", 9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 4, 1) + struct.pack("<I", 7)
              + struct.pack("<IQ", 8, 1) + s("x"))]
    tinfo = s("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 32, 2) + \
        struct.pack("<IQ", 0, 0)
    hdr = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs)) + b"".join(kvs) + tinfo
    pad = (-len(hdr)) % 64
    put("hand-all-types", hdr + b"\0" * pad + b"\0" * (32 * 2 * 4))
    put("hand-v2-empty", b"GGUF" + struct.pack("<IQQ", 2, 0, 0))
    put("hand-v1", b"GGUF" + struct.pack("<IQQ", 1, 0, 0))
    put("hand-big-endian", b"GGUF" + struct.pack(">IQQ", 3, 0, 0))
    # The block types converted at load (kernels/cpu/kern_kquant.h): a tiny
    # model in Q5_0/Q5_1/IQ4_NL (32-value blocks), and a tensor table of one
    # 256-wide row of every super-block type, so mutations meet their size
    # rules (block and super-block sizes, data past the end).
    with tempfile.TemporaryDirectory() as td:
        p = os.path.join(td, "q5.gguf")
        sg.write_model(p, sg.Spec(n_embd=32, n_layer=1, n_head=2, n_head_kv=1, n_ff=64,
                                  mat_type="Q5_0", embd_type="Q5_1", output_type="IQ4_NL"))
        put("llama-q5_0-q5_1-iq4_nl", open(p, "rb").read())
    ktypes = [(10, 84), (11, 110), (12, 144), (13, 176), (14, 210), (23, 136)]
    tinfo, off = b"", 0
    for i, (t, size) in enumerate(ktypes):
        tinfo += s(f"k.{t}.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 256, 1) + \
            struct.pack("<IQ", t, off)
        off += (size + 31) // 32 * 32
    kvs = [kv("general.architecture", 8, s("llama"))]
    hdr = b"GGUF" + struct.pack("<IQQ", 3, len(ktypes), len(kvs)) + b"".join(kvs) + tinfo
    data = bytes((i * 37 + 11) & 0xFF for i in range(off))
    put("hand-kquant-tensors", hdr + b"\0" * ((-len(hdr)) % 32) + data)


# ---- tokenizer, SSE ------------------------------------------------------------------

def read_goldens():
    """Test strings of tests/data/tok/pretok.inp (and smollm2.inp)."""
    out = []
    for f in ("pretok.inp", "smollm2.inp"):
        p = os.path.join(ROOT, "tests", "data", "tok", f)
        if os.path.exists(p):
            parts = open(p, "rb").read().split(b"\n__ggml_vocab_test__\n")
            out += [x for x in parts if x and len(x) < 300]
    return out


TEXTS = [b"Hello world", b" Hello", b"  leading spaces", b"It's 3.14159 o'clock!",
         b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", b"<s>[INST] x [/INST]</s>",
         "caf\u00e9 \u4f60\u597d \U0001F600 \u2581x".encode(), b"\xff\xfe\xc3 \xe2\x82", b"\t\n\r\n ",
         b"12345678901234567890", b"a" * 200, b" " * 64, b"<|user|>\n<|user|>x<unused0>",
         b"def f(x):\n    return x * 2\n"]


def tok_seeds():
    put = writer("fuzz_tokenizer")
    texts = TEXTS + read_goldens()[:30]
    for i, t in enumerate(texts):
        vocab = i % 7
        flags = (0, 1, 2, 3, 8)[i % 5]
        put(f"encode-v{vocab}-f{flags}", bytes([vocab, flags]) + t)
    for vocab in range(7):
        ids = [1, 2, 3, 259, 260, 300, 400, 65535, 0, 5, 6, 7, 8] + list(range(250, 270))
        put(f"decode-v{vocab}", bytes([vocab, 4 | (vocab & 2)]) + b"".join(struct.pack("<H", x) for x in ids))


def sse_seeds():
    put = writer("fuzz_sse")

    def raw(tokens, kinds=None):
        out = b""
        for i, t in enumerate(tokens):
            k = (kinds[i] if kinds else 0) & 7
            assert len(t) < 32
            out += bytes([(k << 5) | len(t)]) + t
        return out

    cases = {
        "ascii": [b"Hello", b" world", b"!"],
        "split-2": [b"caf", b"\xc3", b"\xa9", b" ok"],
        "split-4": [b"\xf0", b"\x9f", b"\x98", b"\x80", b"x"],
        "split-3-bad": [b"\xe4\xbd", b"x", b"\xa0"],
        "invalid": [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"],
        "controls": [b"\x00", b"\"quote\"", b"back\\slash", b"\n\r\t\x08\x0c\x1f\x7f"],
        "trailing-partial": [b"end", b"\xe2\x82"],
        "sse-injection": [b"\n\ndata: [DONE]\n\n", b"event: x\r\n"],
    }
    for i, (name, toks) in enumerate(cases.items()):
        for flags in (0, 1, 2, 3, 9, 11):
            put(f"raw-{name}-f{flags}", bytes([flags, i % 4]) + raw(toks, list(range(len(toks)))))
    # Vocabulary mode: flags bit 2, vocab in bits 5-7; stop strings then ids.
    for vocab in range(7):
        for stop in (0, 2):
            f = 4 | (vocab << 5) | (1 if vocab & 1 else 0) | (2 if stop else 0)
            g = (stop << 2) | (vocab % 4)
            stops = b"".join(bytes([len(x)]) + x for x in (b"the", b"\n\n")[:stop])
            ids = [300 + 7 * i for i in range(20)] + [3 + 0xC3, 3 + 0xA9, 259, 2, 1]
            put(f"vocab-v{vocab}-s{stop}", bytes([f, g]) + stops + b"".join(struct.pack("<H", x) for x in ids))


# ---- chat templates ------------------------------------------------------------------

def chat_seeds():
    put = writer("fuzz_chat_template")
    src = open(os.path.join(ROOT, "tests", "unit", "test_chat_template.c")).read()
    tmpls = []
    for m in re.finditer(r"static const char tmpl_(\w+)\[\] =\s*((?:\"(?:[^\"\\]|\\.)*\"\s*)+);", src):
        lit = "".join(re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(2)))
        tmpls.append((m.group(1), codecs.escape_decode(lit.encode())[0]))
    SEP = b"\x1e"
    msgs = [b"\x00You are a helpful assistant", b"\x01Hello", b"\x02Hi there",
            b"\x01  Who are you?  ", b"\x02   I am an assistant   ", b"\x01Another question"]
    for i, (name, t) in enumerate(tmpls):
        if len(t) > 8000:
            continue
        put(f"detect-{name}", bytes([0, i % 7]) + t + SEP + b"<s>" + SEP + b"</s>" + SEP + SEP.join(msgs))
    odd = [b"\x00", b"\x01\xc3\xa9\xe4\xbd\xa0 \xff", b"\x07x", b"\x05x", b"\x01a\x00b", b"\x81",
           b"\x00\x00", b"\x02\n\n"]
    for kind in range(1, 8):
        for j, flags in enumerate((0, 1, 4, 16, 31)):
            body = SEP.join(msgs[:2 + (kind + j) % 5])
            if j == 4:
                body = SEP.join(odd)
            put(f"kind{kind}-flags{flags}", bytes([kind | (flags << 3), j]) +
                b"Default system prompt" + SEP + b"<s>" + SEP + b"</s>" + SEP + body)


def tools_stream_seeds():
    """Answers in each tool format (tests/unit/test_srv_tools_stream.c's cases): byte 0
    the format (bits 0-1), forced (bit 2) and a cut end (bit 3), byte 1 the piece size."""
    put = writer("fuzz_tools_stream")
    hermes = ('Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
              '\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    answers = [
        (0, "hermes", hermes),
        (0, "hermes-text", "  Hello <b> world <tool_ then <tool_call"),
        (0, "hermes-broken", '<tool_call>\n{"name": "f", "arguments": {"a": 1,,}}\n</tool_call> ok'),
        (0, "hermes-string-args",
         '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}", "id": 7}</tool_call>'),
        (0, "hermes-repeat", '<tool_call>{"name": "now", "arguments": {}}</tool_call>\n'
                             '<tool_call>{"name": "now", "arguments": {}}</tool_call>'),
        (1, "llama3", '{"name": "f", "parameters": {"x": [1, "}"]}}\n;{"name": "g", '
                      '"parameters": {}} Done.'),
        (1, "llama3-text", '{"result": 1}'),
        (2, "mistral", '[TOOL_CALLS] [{"name": "f", "arguments": {"k": 1}, "id": "abc123def"}, '
                       '{"name": "g", "arguments": {}}] after'),
        (2, "mistral-text", "[1] is a citation."),
        (3, "json-calls", '{"tool_calls": [{"name": "f", "arguments": {"n": 1}}, {"name": "f", '
                          '"arguments": {"n": 2}}]}'),
        (3, "json-text", '{"response": " Hi \\"there\\"\\n\\u00e9\\ud83d\\ude00 \\ud800x"}'),
    ]
    for fmt, name, text in answers:
        for flags, piece in ((0, 0), (4, 1), (8, 3), (12, 7)):
            put(f"{name}-{flags}-{piece}", bytes([fmt | flags, piece]) + text.encode())
    # a NUL inside a forced call's arguments (found by the fuzzer: arguments are C strings)
    put("hermes-nul", bytes([0 | 4 | 8, 0]) + b'<tool_call>{"name": "now", "arguments": {"a\x00b": '
        b'1}}</tool_call>')
    calls = ", ".join('{"name": "f", "arguments": {"n": %d}}' % i for i in range(20))
    put("json-limit", bytes([3 | 4, 5]) + ('{"tool_calls": [%s]}' % calls).encode())


# ---- safetensors ---------------------------------------------------------------

def st_file(tensors, metadata=None, pad=8):
    """A safetensors file by hand (no package needed): tensors is a list of
    (name, dtype, shape, raw bytes), written in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % pad)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    """fuzz_safetensors: byte 0 even + a safetensors file, or odd + an index."""
    put = writer("fuzz_safetensors")
    f32 = lambda *v: struct.pack(f"<{len(v)}f", *v)
    f16 = lambda *v: struct.pack(f"<{len(v)}e", *v)
    bf16 = lambda *v: b"".join(struct.pack("<f", x)[2:] for x in v)
    good = st_file([("a.weight", "F32", [2, 2], f32(1, -2, 0.5, 3)),
                    ("b", "F16", [2], f16(1.5, -0.25)),
                    ("c", "BF16", [1, 2], bf16(2, -8)),
                    ("empty", "F32", [0, 5], b""),
                    ("s", "F32", [], f32(7))], metadata={"format": "pt"})
    put("mixed", b"\x00" + good)
    layers = []
    for l in range(2):
        for w, shape in (("self_attn.q_proj", [8, 8]), ("self_attn.k_proj", [4, 8]),
                         ("mlp.up_proj", [16, 8]), ("input_layernorm", [8])):
            n = 1
            for d in shape:
                n *= d
            layers.append((f"model.layers.{l}.{w}.weight", "BF16", shape,
                           bf16(*[(i % 7) / 7.0 for i in range(n)])))
    put("llama-like-bf16", b"\x00" + st_file(layers, metadata={"format": "pt"}))
    put("f16-unaligned", b"\x00" + st_file([("x", "F16", [3], f16(1, 2, 3)),
                                             ("y", "F32", [1], f32(4))], pad=1))
    put("ints", b"\x00" + st_file([("i", "I64", [2], struct.pack("<2q", 1, -1)),
                                   ("m", "BOOL", [3], b"\x01\x00\x01"),
                                   ("q", "F8_E4M3", [2], b"\x10\x20")]))
    put("empty-header", b"\x00" + st_file([]))
    put("cut", b"\x00" + good[:40])
    put("index", b"\x01" + json.dumps({"metadata": {"total_size": 20}, "weight_map": {
        "x": "model-00001-of-00002.safetensors",
        "y": "model-00002-of-00002.safetensors"}}).encode())
    put("index-dotdot", b"\x01" + b'{"weight_map":{"x":"../model.safetensors"}}')
    put("index-empty", b"\x01" + b'{"weight_map":{}}')
    # Mixtures of experts as transformers 5 saves them: one by one (its
    # default; Mixtral's names), and its fused 3-D tensors.
    moe = [("model.layers.0.mlp.gate.weight", "F32", [4, 8], f32(*[i / 32 for i in range(32)]))]
    for e in range(4):
        for w, shape in (("w1", [6, 8]), ("w3", [6, 8]), ("w2", [8, 6])):
            moe.append((f"model.layers.0.block_sparse_moe.experts.{e}.{w}.weight", "BF16", shape,
                        bf16(*[((i + e) % 5) / 5.0 for i in range(48)])))
    put("moe-per-expert-bf16", b"\x00" + st_file(moe, metadata={"format": "pt"}))
    put("moe-fused-f16", b"\x00" + st_file([
        ("model.layers.0.mlp.experts.gate_up_proj", "F16", [4, 12, 8],
         f16(*[(i % 9) / 9.0 for i in range(384)])),
        ("model.layers.0.mlp.experts.down_proj", "F16", [4, 8, 6],
         f16(*[(i % 7) / 7.0 for i in range(192)]))], pad=1))


def hfjson_seeds():
    """fuzz_hfjson: tokenizer.json, then 0x1E and tokenizer_config.json."""
    put = writer("fuzz_hfjson")
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    try:
        from synth_hf import spm_tokenizer_json, write_tokenizer
    except ImportError as e:
        sys.exit(f"make_seeds.py: needs the test venv (numpy, gguf, tokenizers): {e}")
    cfg = json.dumps({"bos_token": "<|endoftext|>", "eos_token": {"content": "<|endoftext|>"},
                      "add_bos_token": False, "chat_template": "{{ messages }}"})
    with tempfile.TemporaryDirectory() as td:
        import pathlib
        for strings in (False, True):
            p = write_tokenizer(pathlib.Path(td), merges_as_strings=strings)
            text = p.read_text()
            put(f"gpt2-{'strings' if strings else 'pairs'}", text.encode() + b"\x1e" + cfg.encode())
            j = json.loads(text)
            j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                 "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
            if not strings:
                put("llama3-split", json.dumps(j).encode())
    for style in ("llama2", "metaspace", "gemma"):
        put(f"spm-{style}", spm_tokenizer_json(style).encode() + b"\x1e" + json.dumps(
            {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}).encode())
    put("wordpiece", b'{"model":{"type":"WordPiece","vocab":{"a":0}}}')
    put("tiny-bpe", b'{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]},'
        b'"pre_tokenizer":{"type":"ByteLevel","use_regex":true}}')


def main():
    if sys.argv[1:] == ["safetensors"]:  # one target alone: no test venv needed
        safetensors_seeds()
        return
    if sys.argv[1:] == ["hfjson"]:
        hfjson_seeds()
        return
    safetensors_seeds()
    hfjson_seeds()
    tools_stream_seeds()
    json_seeds()
    anthropic_seeds()
    http_seeds()
    gguf_seeds()
    tok_seeds()
    sse_seeds()
    chat_seeds()
    for t in sorted(os.listdir(os.path.join(HERE, "corpus"))):
        d = os.path.join(HERE, "corpus", t)
        files = os.listdir(d)
        print(f"{t}: {len(files)} files, {sum(os.path.getsize(os.path.join(d, f)) for f in files)} bytes")


if __name__ == "__main__":
    main()
