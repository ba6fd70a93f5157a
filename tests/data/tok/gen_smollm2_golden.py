#!/usr/bin/env python3
"""Regenerates smollm2.inp / smollm2.out: golden tokenizations of the SmolLM2
vocabulary by an independent reference, Hugging Face `tokenizers`.

    python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install tokenizers gguf numpy
    /tmp/venv-tok/bin/python tests/data/tok/gen_smollm2_golden.py \
        ~/.cache/brisk/models/SmolLM2-135M-Instruct.Q4_1.gguf

The tokenizer is rebuilt from the GGUF's vocabulary and merges with the
pre-tokenizer of SmolLM2's tokenizer.json: Digits(individual_digits) then
ByteLevel (the GPT-2 expression, no prefix space). Control tokens are added
as special tokens but not matched in the text (encode_special_tokens), which
is what brisk does without TOK_PARSE_SPECIAL.

Format (as llama.cpp's ggml-vocab-*.gguf.inp/.out): every string followed by
a line "__ggml_vocab_test__"; one line of space-separated ids per string.
"""
import os
import sys

from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

TESTS = [
    "Hello world",
    " Hello world",
    "Hello, world! How are you today?",
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "\n\n\n",
    "line one\nline two\r\nline three",
    "multiple   spaces    between words  ",
    "tabs\tand\t\ttabs",
    "I'm sure you're right, they'll say it's what we'd do, I've seen it.",
    "DON'T SHOUT, IT'S RUDE",
    "12345",
    "3.14159 and 2.71828",
    "Call 555-0123 or +1 (800) 555 0199 before 10:30pm on 2024-12-31.",
    "The year 1999 had 365 days; 100,000,000 is big.",
    "x1 = y2 + z33 * 4444",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "int main(void) { printf(\"%d\\n\", 42); return 0; }",
    "for (i = 0; i < 10; i++) {\n\tsum += a[i];\n}",
    "<html><body class=\"main\">Text &amp; more</body></html>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
    "\u00c0 bient\u00f4t, \u00e7a va tr\u00e8s bien !",
    "\u4f60\u597d\u4e16\u754c\uff0c\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03ba\u03b5\u03af\u03bc\u03b5\u03bd\u03bf",
    "\U0001F600 \U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \u2764\ufe0f",
    "emoji\U0001F680in the middle",
    "mixed: English, \u4e2d\u6587, \u0639\u0631\u0628\u064a, 123, and \U0001F389!",
    "Arabic digits \u0661\u0662\u0663 and superscript x\u00b2",
    "<|im_start|>user\nHi<|im_end|>",
    "    indented\n        more indented",
    "trailing spaces   \n",
    "a\u00a0non-breaking\u2003em-space",
    "!!!??? ... --- ***",
    "CamelCaseIdentifier snake_case_name kebab-case-name",
    "https://example.com/path?query=1&x=y#frag",
    "bytes without a token: ..\x04.. a\x06b\x1d",
]


def arr_str(r, key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
        "~/.cache/brisk/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    r = GGUFReader(path)
    tokens = arr_str(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in arr_str(r, "tokenizer.ggml.merges")]
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]

    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    tok.encode_special_tokens = True

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "smollm2.inp"), "wb") as fi, \
         open(os.path.join(here, "smollm2.out"), "wb") as fo:
        for s in TESTS:
            ids = tok.encode(s, add_special_tokens=False).ids
            if not any(c in s for c in "\x04\x06\x1d"):  # bytes SmolLM2 has no token for
                assert tok.decode(ids, skip_special_tokens=False) == s, s
            fi.write(s.encode("utf-8") + b"\n__ggml_vocab_test__\n")
            fo.write((" " + " ".join(str(i) for i in ids) + "\n").encode())
    print("wrote %d tests" % len(TESTS))


if __name__ == "__main__":
    main()
