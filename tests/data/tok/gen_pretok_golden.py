#!/usr/bin/env python3
"""Regenerates pretok.inp and pretok_<kind>.out: how each pre-tokenizer rule
set cuts test strings into words, computed with the original regular
expressions (from the tokenizer.json files of GPT-2, Llama-3, Qwen2 and
SmolLM2) by the `regex` module, an engine independent of brisk's
hand-written matchers.

    /tmp/venv-tok/bin/pip install regex
    /tmp/venv-tok/bin/python tests/data/tok/gen_pretok_golden.py

Each .out line lists the words of one string as byte offset:length pairs.
"""
import os

import regex

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
          r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")

TESTS = [
    "Hello world", " Hello  world ", "", " ", "  ", "\t", "\n", "\n\n", " \n \n ", "\r\n\r\nx",
    "I'm you're he'll they'd we've it's don't", "I'M YOU'RE HE'LL THEY'D WE'VE IT'S DON'T",
    "'s 'S 'Re 'LL \u017fs '\u017f", "it'\u017f IT'S it'Ll x'VE", "'''quoted'''", "12345678", "1 22 333 4444 55555",
    "3.14 -2e10 1,000", "x\u00b2 \u0661\u0662\u0663 \u2166", "a1b2c3", " 1 a", "word  1",
    "  leading and trailing  ", "tabs\t\tand\tnewlines\n\n  x", "line\n    indented\n\tx\r\n",
    "!!!??? ... --- ***", "(a) [b] {c} <d>", "\"quoted\" 'single'", "foo.bar(baz);\n",
    "def f(x):\n    return x ** 2  \n", "<|im_start|>user\nHi<|im_end|>",
    "Caf\u00e9 na\u00efve \u00c5ngstr\u00f6m", "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\U0001F600\U0001F44D\U0001F3FD \u2764\ufe0f x\U0001F680y", "e\u0301 combining",
    "nbsp\u00a0here\u2003em\u3000ideo", " \u00a0 x", "A\u200dB zero\u200bwidth", "$100 vs \u20ac20",
    "\u00bd \u00be \u2153", "CamelCase snake_case kebab-case", "https://x.y/z?q=1&r=2#f",
    "a \n b", "a \r\n b", "x  \n\n  y", ".\n\n", "..\r\n\r\n ok",
]


def split_re(pat, s, base=0):
    out = []
    pos = 0
    for m in regex.finditer(pat, s):
        assert m.start() == pos, (s, m.start(), pos)  # the expressions cover every char
        out.append((m.start() + base, m.end() - m.start()))
        pos = m.end()
    assert pos == len(s)
    return out


def split_smollm(s):
    out = []
    for m in regex.finditer(r"\p{N}|[^\p{N}]+", s):
        piece = m.group(0)
        if regex.fullmatch(r"\p{N}", piece):
            out.append((m.start(), 1))
        else:
            out.extend(split_re(GPT2, piece, m.start()))
    return out


def to_bytes(s, spans):
    # character spans -> UTF-8 byte spans
    b = [len(s[:i].encode()) for i in range(len(s) + 1)]
    return " ".join("%d:%d" % (b[a], b[a + n] - b[a]) for a, n in spans)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "pretok.inp"), "wb") as f:
        for s in TESTS:
            f.write(s.encode() + b"\n__ggml_vocab_test__\n")
    kinds = {
        "gpt2": lambda s: split_re(GPT2, s),
        "llama3": lambda s: split_re(LLAMA3, s),
        "qwen2": lambda s: split_re(QWEN2, s),
        "smollm": split_smollm,
    }
    for name, fn in kinds.items():
        with open(os.path.join(here, "pretok_%s.out" % name), "w") as f:
            for s in TESTS:
                f.write(to_bytes(s, fn(s)) + "\n")
    print("wrote %d strings x %d rule sets" % (len(TESTS), len(kinds)))


if __name__ == "__main__":
    main()
