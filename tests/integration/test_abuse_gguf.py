"""Hostile model files against `brisk generate` (issue 7): a corpus generated
from the real stories260K GGUF -- a wrong type for every metadata key the
loader reads, missing keys, out-of-range and overflowing dimensions, bad
alignments, huge string and array lengths, broken tensor tables, cuts and
seeded bit flips.

Every file must be refused with one `brisk: error: ...` line on stderr and a
non-zero exit (bit flips may also load and run: exit 0), never a signal or a
sanitizer report, and with bounded memory: each run's peak RSS (from wait4) at
most RSS_MARGIN above the intact model's run, and for the non-sanitized build
an address-space limit of 1 GiB (ulimit -v) as well.

The exhaustive part -- every cut of the header and tensor table, thousands of
flips -- runs in-process in tests/unit/test_model_hostile.c (ctest), where a
case costs microseconds instead of a process; the slow-marked test below does
it through the binary.
"""

import os
import random
import signal
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
from conftest import SANITIZER_MARKERS

RSS_MARGIN_KIB = 64 << 10   # over the intact model's peak RSS
ADDRESS_SPACE = 1 << 30     # RLIMIT_AS for the non-sanitized binary
TIMEOUT_S = 60

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}


# ---- a small GGUF reader and writer ---------------------------------------------------


@dataclass
class Tensor:
    name: bytes
    dims: list
    type: int
    offset: int
    at: int = 0  # where its record starts in the original file


@dataclass
class Gguf:
    version: int
    kvs: list          # [(key bytes, type, raw value bytes)]
    tensors: list      # [Tensor]
    data: bytes        # the data section (from the aligned data offset)
    data_off: int
    kv_at: list = field(default_factory=list)  # where each kv starts in the original

    def kv(self, key):
        for k, t, v in self.kvs:
            if k == key.encode():
                return t, v
        raise KeyError(key)


def value_len(b, at, t):
    if t in SCALAR_FMT:
        return struct.calcsize(SCALAR_FMT[t])
    if t == STR:
        return 8 + struct.unpack_from("<Q", b, at)[0]
    assert t == ARR
    et, n = struct.unpack_from("<IQ", b, at)
    p = at + 12
    for _ in range(n):
        p += value_len(b, p, et)
    return p - at


def parse(b):
    assert b[:4] == b"GGUF"
    version, n_t, n_kv = struct.unpack_from("<IQQ", b, 4)
    p, kvs, kv_at = 24, [], []
    for _ in range(n_kv):
        kv_at.append(p)
        (kl,) = struct.unpack_from("<Q", b, p)
        key = b[p + 8:p + 8 + kl]
        p += 8 + kl
        (t,) = struct.unpack_from("<I", b, p)
        p += 4
        n = value_len(b, p, t)
        kvs.append((key, t, b[p:p + n]))
        p += n
    tensors = []
    for _ in range(n_t):
        at = p
        (nl,) = struct.unpack_from("<Q", b, p)
        name = b[p + 8:p + 8 + nl]
        p += 8 + nl
        (nd,) = struct.unpack_from("<I", b, p)
        dims = list(struct.unpack_from(f"<{nd}Q", b, p + 4))
        p += 4 + 8 * nd
        tt, off = struct.unpack_from("<IQ", b, p)
        p += 12
        tensors.append(Tensor(name, dims, tt, off, at))
    data_off = (p + 31) // 32 * 32
    return Gguf(version, kvs, tensors, b[data_off:], data_off, kv_at)


def s(text):
    raw = text if isinstance(text, bytes) else text.encode()
    return struct.pack("<Q", len(raw)) + raw


def val(t, v):
    """(type, raw bytes) of a value."""
    if t == STR:
        return STR, s(v)
    return t, struct.pack(SCALAR_FMT[t], v)


def arr(et, items):
    body = b"".join(val(et, x)[1] for x in items)
    return ARR, struct.pack("<IQ", et, len(items)) + body


def build(g, kvs=None, tensors=None, n_kv=None, n_tensors=None, align=32, raw_tail=None):
    kvs = g.kvs if kvs is None else kvs
    tensors = g.tensors if tensors is None else tensors
    out = bytearray(b"GGUF" + struct.pack("<IQQ", g.version,
                                          len(tensors) if n_tensors is None else n_tensors,
                                          len(kvs) if n_kv is None else n_kv))
    for k, t, v in kvs:
        out += s(k) + struct.pack("<I", t) + v
    for tn in tensors:
        out += s(tn.name) + struct.pack("<I", len(tn.dims))
        out += struct.pack(f"<{len(tn.dims)}Q", *tn.dims) + struct.pack("<IQ", tn.type, tn.offset)
    if raw_tail is not None:
        return bytes(out) + raw_tail
    while len(out) % align:
        out.append(0)
    return bytes(out) + g.data


def with_kv(g, key, t, v):
    """g's file with key set to (t, v): replaced in place, or appended."""
    key = key.encode()
    kvs = [(k, tt, vv) for k, tt, vv in g.kvs]
    for i, (k, _, _) in enumerate(kvs):
        if k == key:
            kvs[i] = (k, t, v)
            return build(g, kvs)
    return build(g, kvs + [(key, t, v)])


def without_kv(g, key):
    return build(g, [kv for kv in g.kvs if kv[0] != key.encode()])


def with_tensor(g, i, **changes):
    ts = [Tensor(t.name, list(t.dims), t.type, t.offset) for t in g.tensors]
    for k, v in changes.items():
        setattr(ts[i], k, v)
    return build(g, tensors=ts)


# ---- the corpus ---------------------------------------------------------------------------

# The keys the loader reads (models/model.c, models/tokenizer.c, models/gguf.c)
# for a llama model with a SentencePiece vocabulary, by the type it expects.
STR_KEYS = ["general.architecture", "general.name", "llama.rope.scaling.type",
            "tokenizer.ggml.model", "tokenizer.chat_template"]
U32_KEYS = ["llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
            "llama.attention.head_count", "llama.attention.head_count_kv", "llama.context_length",
            "llama.attention.key_length", "llama.rope.dimension_count", "general.alignment"]
F32_KEYS = ["llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon",
            "llama.rope.scaling.factor", "llama.rope.scale_linear"]
ID_KEYS = ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
           "tokenizer.ggml.eot_token_id", "tokenizer.ggml.unknown_token_id",
           "tokenizer.ggml.padding_token_id"]
BOOL_KEYS = ["tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix"]

WRONG = {
    "str": [val(U32, 7), val(F32, 1.0), arr(STR, ["llama"]), val(BOOL, 1)],
    # (Other integer types holding a value that fits are read as u32.)
    "u32": [val(STR, "64"), val(F32, 64.0), val(I32, -64), val(U64, 1 << 40), arr(U32, [64]),
            val(BOOL, 1)],
    "f32": [val(STR, "1e-5"), val(U32, 1), val(I64, 1), arr(F32, [1.0]), val(BOOL, 1)],
    "id": [val(STR, "1"), val(F32, 1.0), arr(U32, [1]), arr(STR, ["1"])],
    "bool": [val(STR, "true"), val(F32, 1.0), val(U8, 2), arr(BOOL, [1])],
}


def corpus(stories):
    """[(name, bytes, must_refuse)] from the stories260K GGUF."""
    b = stories
    g = parse(b)
    out = []

    def add(name, data, refuse=True):
        out.append((name, data, refuse))

    def kinds():
        for k in STR_KEYS:
            yield k, "str"
        for k in U32_KEYS:
            yield k, "u32"
        for k in F32_KEYS:
            yield k, "f32"
        for k in ID_KEYS:
            yield k, "id"
        for k in BOOL_KEYS:
            yield k, "bool"

    # A wrong type for every key the loader reads.
    for key, kind in kinds():
        for i, (t, v) in enumerate(WRONG[kind]):
            gg = g
            if key == "llama.rope.scaling.factor":  # read only with linear scaling
                gg = parse(with_kv(g, "llama.rope.scaling.type", *val(STR, "linear")))
            add(f"type-{key}-{i}", with_kv(gg, key, t, v))
    for key, bad in (("tokenizer.ggml.tokens", [arr(U32, [1] * 512), arr(F32, [0.0] * 512),
                                                val(STR, "a"), arr(ARR, [])]),
                     ("tokenizer.ggml.scores", [arr(STR, ["x"] * 512), arr(I32, [0] * 512),
                                                arr(F64, [0.0] * 512), val(F32, 0.0)]),
                     ("tokenizer.ggml.token_type", [arr(F32, [1.0] * 512), arr(STR, ["1"] * 512),
                                                    val(I32, 1), arr(I32, [1] * 511)])):
        for i, (t, v) in enumerate(bad):
            add(f"type-{key}-{i}", with_kv(g, key, t, v))

    # Required keys missing.
    for key in ("general.architecture", "llama.block_count", "llama.embedding_length",
                "llama.feed_forward_length", "llama.attention.head_count",
                "tokenizer.ggml.model", "tokenizer.ggml.tokens"):
        add(f"missing-{key}", without_kv(g, key))

    # Values out of range, and dimensions that overflow or disagree.
    for key, values in (("llama.block_count", [0, 6, 1 << 24, (1 << 24) + 1, 0xFFFFFFFF]),
                        ("llama.embedding_length", [0, 63, 1 << 24, 0xFFFFFFFF]),
                        ("llama.feed_forward_length", [0, 171, 1 << 24]),
                        ("llama.attention.head_count", [0, 3, 7, 1 << 24]),
                        ("llama.attention.head_count_kv", [0, 3, 16, 0xFFFFFFFF]),
                        ("llama.attention.key_length", [0, 7, 1 << 24, 0xFFFFFFFF]),
                        ("llama.rope.dimension_count", [0xFFFFFFFF, 3, 1 << 24]),
                        ("llama.context_length", [0, (1 << 24) + 1, 0xFFFFFFFF])):
        for v in values:
            add(f"range-{key}-{v}", with_kv(g, key, *val(U32, v)))
    for key in ("llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"):
        for v in (0.0, -1.0, float("nan"), float("inf"), float("-inf")):
            add(f"range-{key}-{v}", with_kv(g, key, *val(F32, v)))
    add("range-rope-scaling-type", with_kv(g, "llama.rope.scaling.type", *val(STR, "yarn")))
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.unknown_token_id"):
        for t, v in ((U32, 512), (U64, 1 << 40), (I32, -2), (I64, -(1 << 62))):
            add(f"range-{key}-{v}", with_kv(g, key, *val(t, v)))
    # Each key in range, their products not (an int overflow before the fix).
    big = parse(with_kv(g, "llama.embedding_length", *val(U32, 1 << 24)))
    big = parse(with_kv(big, "llama.attention.head_count", *val(U32, 1 << 24)))
    big = parse(with_kv(big, "llama.attention.head_count_kv", *val(U32, 1 << 24)))
    add("range-heads-times-key-length", with_kv(big, "llama.attention.key_length",
                                                *val(U32, 1 << 24)))
    add("range-architecture-empty", with_kv(g, "general.architecture", *val(STR, "")))
    add("range-architecture-gpt9", with_kv(g, "general.architecture", *val(STR, "gpt9\n\x1b[2J")))
    add("range-tokenizer-model", with_kv(g, "tokenizer.ggml.model", *val(STR, "bert")))
    add("range-gpt2-without-merges", with_kv(g, "tokenizer.ggml.model", *val(STR, "gpt2")))
    add("range-token-type-99", with_kv(g, "tokenizer.ggml.token_type", *arr(I32, [99] * 512)))
    add("range-score-nan", with_kv(g, "tokenizer.ggml.scores",
                                   *arr(F32, [float("nan")] + [0.0] * 511)))
    add("range-no-tokens", with_kv(g, "tokenizer.ggml.tokens", *arr(STR, [])))
    add("range-tokens-fewer-than-scores", with_kv(g, "tokenizer.ggml.tokens",
                                                  *arr(STR, ["a", "b"])))

    # Alignment: zero, not a power of two, huge; and wrong types.
    for v in (0, 3, 24, 1 << 30, 1 << 31, 0xFFFFFFFF):
        add(f"align-{v}", with_kv(g, "general.alignment", *val(U32, v)))
    for t, v in ((U64, 32), (STR, "32"), (I32, 32), (F32, 32.0), (U8, 32)):
        add(f"align-type-{t}", with_kv(g, "general.alignment", *val(t, v)))

    # Huge lengths and counts in the raw header.
    hdr = b[:24]
    kv0 = g.kv_at[0]
    add("len-n-tensors", b"GGUF" + struct.pack("<IQQ", 3, 1 << 62, len(g.kvs)) + b[24:])
    add("len-n-kv", b"GGUF" + struct.pack("<IQQ", 3, len(g.tensors), 1 << 63) + b[24:])
    add("len-n-kv-one-more", b"GGUF" + struct.pack("<IQQ", 3, len(g.tensors),
                                                   len(g.kvs) + 1) + b[24:])
    add("len-n-tensors-one-more", b"GGUF" + struct.pack("<IQQ", 3, len(g.tensors) + 1,
                                                        len(g.kvs)) + b[24:])
    add("len-key", hdr + struct.pack("<Q", 1 << 63) + b[kv0 + 8:])
    add("len-key-past-end", hdr + struct.pack("<Q", len(b)) + b[kv0 + 8:])
    _, v_arch = g.kv("general.architecture")
    add("len-string", with_kv(g, "general.architecture", STR,
                              struct.pack("<Q", 1 << 62) + v_arch[8:]))
    _, v_tok = g.kv("tokenizer.ggml.tokens")
    add("len-tokens-count", with_kv(g, "tokenizer.ggml.tokens", ARR,
                                    struct.pack("<IQ", STR, 1 << 61) + v_tok[12:]))
    add("len-tokens-count-plus-one", with_kv(g, "tokenizer.ggml.tokens", ARR,
                                             struct.pack("<IQ", STR, 513) + v_tok[12:]))
    add("len-first-token", with_kv(g, "tokenizer.ggml.tokens", ARR,
                                   v_tok[:12] + struct.pack("<Q", 1 << 40) + v_tok[20:]))
    _, v_sc = g.kv("tokenizer.ggml.scores")
    add("len-scores-count", with_kv(g, "tokenizer.ggml.scores", ARR,
                                    struct.pack("<IQ", F32, 1 << 62) + v_sc[12:]))
    add("len-array-type", with_kv(g, "tokenizer.ggml.scores", ARR,
                                  struct.pack("<IQ", 77, 512) + v_sc[12:]))
    add("len-value-type", with_kv(g, "general.name", 0x80000000, b"\0" * 8))

    # The tensor table.
    emb = 0
    assert g.tensors[emb].name == b"token_embd.weight"
    for name, ch in (("dims-huge", dict(dims=[64, 1 << 62])),
                     ("dims-product-overflow", dict(dims=[1 << 32, 1 << 32])),
                     ("dims-2^64-1", dict(dims=[64, (1 << 64) - 1])),
                     ("dims-zero", dict(dims=[64, 0])),
                     ("dims-fewer-rows", dict(dims=[64, 256])),
                     ("dims-swapped", dict(dims=[512, 64])),
                     ("dims-none", dict(dims=[])),
                     ("dims-five", dict(dims=[64, 512, 1, 1, 1])),
                     ("type-99", dict(type=99)),
                     ("type-q4_k-rows-not-superblocks", dict(type=12)),
                     ("type-iq4_xs-rows-not-superblocks", dict(type=23)),
                     ("type-q5_1-rows-not-blocks", dict(type=7, dims=[48, 512])),
                     ("type-q6_k-data-past-end", dict(type=14, dims=[256, 1 << 20])),
                     ("type-q8_0-rows-not-blocks", dict(type=8, dims=[48, 512])),
                     ("offset-unaligned", dict(offset=4)),
                     ("offset-huge", dict(offset=1 << 63)),
                     ("offset-past-end", dict(offset=len(g.data))),
                     ("offset-overlaps", dict(offset=g.tensors[1].offset)),
                     ("name-duplicate", dict(name=g.tensors[1].name)),
                     ("name-empty", dict(name=b"")),
                     ("name-missing", dict(name=b"token_embd.weightX"))):
        add(f"tensor-{name}", with_tensor(g, emb, **ch))
    q = next(i for i, t in enumerate(g.tensors) if t.name == b"blk.0.attn_q.weight")
    add("tensor-q-shape", with_tensor(g, q, dims=[64, 32]))
    # F16 over the same shape: half the bytes, still inside the data, so a
    # well-formed file brisk must run (on garbage weights).
    add("tensor-q-type", with_tensor(g, q, type=1), refuse=False)
    # Q5_0 and IQ4_NL (32-value blocks) over the same shape: fewer bytes,
    # well-formed, converted at load and run on garbage.
    add("tensor-q-type-q5_0", with_tensor(g, q, type=6), refuse=False)
    add("tensor-q-type-iq4_nl", with_tensor(g, q, type=20), refuse=False)
    add("tensor-name-length", b[:g.tensors[q].at] + struct.pack("<Q", 1 << 40)
        + b[g.tensors[q].at + 8:])
    add("tensor-ndims-huge", b[:g.tensors[q].at + 8 + len(g.tensors[q].name)]
        + struct.pack("<I", 0xFFFFFFFF) + b[g.tensors[q].at + 12 + len(g.tensors[q].name):])
    add("tensor-table-only", build(g, raw_tail=b""))

    # Cuts (a sample: test_model_hostile.c makes every one): the fixed header
    # byte by byte, at every kv and some tensor records, around the data
    # offset, a few in the data.
    cuts = set(range(0, 25))
    for at in g.kv_at + [t.at for t in g.tensors[::8]]:
        cuts |= {at, at + 9}
    cuts |= {g.data_off - 1, g.data_off, g.data_off + 1, len(b) - 1}
    cuts |= {g.data_off + (len(b) - g.data_off) * k // 4 for k in range(1, 4)}
    for n in sorted(cuts):
        add(f"cut-{n}", b[:n])

    # Seeded bit flips: refused or run, never a crash.
    rng = random.Random(20261121)
    for i in range(30):
        at = rng.randrange(g.data_off if i < 24 else len(b))
        flipped = bytearray(b)
        flipped[at] ^= 1 << rng.randrange(8)
        add(f"flip-{at}", bytes(flipped), refuse=False)
    return out


# ---- running brisk on a file ---------------------------------------------------------------


@dataclass
class Run:
    name: str
    returncode: int
    err: str
    maxrss_kib: int


# brisk is started by this small wrapper, not by pytest itself: a child's peak
# RSS (wait4's ru_maxrss) includes the image of the process it was forked
# from, which for pytest is hundreds of MB. The wrapper also sets the
# address-space limit between fork and exec.
WRAPPER = r"""
import os, resource, sys
out, limit, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
pid = os.fork()
if pid == 0:
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.execv(argv[0], argv)
_, status, ru = os.wait4(pid, 0)
with open(out, "w") as f:
    f.write("%d %d" % (os.waitstatus_to_exitcode(status), ru.ru_maxrss))
"""


def run_generate(brisk, path, name, sanitized):
    argv = [brisk.path, "generate", "--model", str(path), "--prompt", "Once", "-n", "4",
            "--threads", "1", "--temp", "0"]
    err_path, res_path = f"{path}.err", f"{path}.res"
    # ASan reserves terabytes of address space for its shadow: no limit there.
    limit = 0 if sanitized else ADDRESS_SPACE
    with open(err_path, "wb") as ef:
        p = subprocess.Popen([sys.executable, "-S", "-c", WRAPPER, res_path, str(limit)] + argv,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=ef,
                             start_new_session=True)
    try:
        p.wait(TIMEOUT_S * brisk.slow_factor)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        pytest.fail(f"{name}: brisk generate ran past {TIMEOUT_S * brisk.slow_factor:.0f} s")
    with open(err_path, "rb") as ef:
        err = ef.read().decode("utf-8", errors="replace")
    with open(res_path) as rf:
        code, maxrss = (int(x) for x in rf.read().split())
    os.unlink(err_path)
    os.unlink(res_path)
    return Run(name, code, err, maxrss)


def judge(run, must_refuse, rss_limit):
    """'' when the run is acceptable, else what is wrong."""
    lines = [ln for ln in run.err.splitlines() if ln.strip()]
    if any(m in run.err for m in SANITIZER_MARKERS):
        return f"sanitizer report:\n{run.err[-3000:]}"
    if run.returncode < 0:
        return f"killed by signal {-run.returncode}"
    if run.maxrss_kib > rss_limit:
        return f"peak RSS {run.maxrss_kib} KiB over {rss_limit} KiB"
    if run.returncode == 0:
        return "loaded a file it must refuse" if must_refuse else ""
    errors = [ln for ln in lines if ln.startswith("brisk: error")]
    if len(errors) != 1 or len([ln for ln in lines if "error" in ln.lower()]) != 1:
        return f"want one 'brisk: error...' line, got {lines!r}"
    return ""


def run_corpus(brisk, files, tmp_path, report, label):
    sanitized = brisk.slow_factor > 1
    intact = [f for f in files if f[0] == "intact"][0]
    p0 = tmp_path / "intact.gguf"
    p0.write_bytes(intact[1])
    base = run_generate(brisk, p0, "intact", sanitized)
    assert base.returncode == 0, f"the intact model must run:\n{base.err[-2000:]}"
    rss_limit = base.maxrss_kib + RSS_MARGIN_KIB

    def one(item):
        i, (name, data, refuse) = item
        path = tmp_path / f"case-{i}.gguf"
        path.write_bytes(data)
        try:
            return name, refuse, run_generate(brisk, path, name, sanitized)
        finally:
            path.unlink()

    failures, refused, ran, peak = [], 0, 0, 0
    with ThreadPoolExecutor(max_workers=2) as ex:
        for name, refuse, run in ex.map(one, enumerate(f for f in files if f[0] != "intact")):
            problem = judge(run, refuse, rss_limit)
            if problem:
                failures.append(f"{name}: {problem}")
            refused += run.returncode > 0
            ran += run.returncode == 0
            peak = max(peak, run.maxrss_kib)
    report(f"abuse: {label}: {refused} refused, {ran} loaded and ran; peak RSS "
           f"{peak} KiB, intact model {base.maxrss_kib} KiB")
    assert not failures, f"{len(failures)} of {len(files) - 1} files:\n" + "\n".join(failures[:30])


@pytest.fixture(scope="module")
def stories_bytes(stories260k_gguf):
    return stories260k_gguf.read_bytes()


def test_parser_round_trip(stories_bytes):
    """The test's own GGUF writer reproduces the file byte for byte (so every
    case differs from the real model only where it means to)."""
    assert build(parse(stories_bytes)) == stories_bytes


def sanitizer_subset(files):
    """Under ASan a run costs ~0.25 s (its runtime's start), not 10 ms: one
    wrong type per key and every other one of the other structured cases (a
    fixed choice); the cuts and flips run in-process under ASan in
    test_model_hostile.c instead."""
    seen, out, k = set(), [], 0
    for f in files:
        name = f[0]
        if name.startswith(("cut-", "flip-")):
            continue
        if name.startswith("type-"):
            key = name.rsplit("-", 1)[0]
            if key not in seen:
                out.append(f)
            seen.add(key)
            continue
        if name == "intact" or name == "range-heads-times-key-length" or k % 2 == 0:
            out.append(f)
        k += 1
    return out


def test_hostile_corpus(brisk, stories_bytes, tmp_path, report):
    files = [("intact", stories_bytes, False)] + corpus(stories_bytes)
    assert len(files) > 250
    if brisk.slow_factor > 1:
        files = sanitizer_subset(files)
    run_corpus(brisk, files, tmp_path, report, f"{len(files) - 1} hostile GGUF files")


def test_refusals_name_the_problem(brisk, stories_bytes, tmp_path):
    """A few messages, read by eye once: they say what is wrong and where."""
    g = parse(stories_bytes)
    cases = [("general.name wrong type", with_kv(g, "general.name", *val(U32, 7)),
              "general.name"),
             ("rope scaling type wrong type", with_kv(g, "llama.rope.scaling.type", *val(U32, 1)),
              "llama.rope.scaling.type"),
             ("chat template wrong type", with_kv(g, "tokenizer.chat_template", *val(F32, 1.0)),
              "tokenizer.chat_template"),
             ("block_count string", with_kv(g, "llama.block_count", *val(STR, "5")),
              "llama.block_count"),
             ("alignment 3", with_kv(g, "general.alignment", *val(U32, 3)), "alignment")]
    for what, data, want in cases:
        p = tmp_path / "m.gguf"
        p.write_bytes(data)
        r = run_generate(brisk, p, what, brisk.slow_factor > 1)
        assert r.returncode == 1 and want in r.err, f"{what}: exit {r.returncode}: {r.err!r}"


# Not in CI: about 4 minutes of the 15-minute budget, for what ctest's
# test_model_hostile already checks in-process (every cut, 3,400 mutations)
# in the Release, ASan and TSan builds; test_hostile_corpus runs 366 of these
# files through the binary in CI.
@pytest.mark.exhaustive
def test_every_cut_and_many_flips(brisk, stories_bytes, tmp_path, report):
    """Every cut of the header and tensor table and 500 more bit flips, through
    the binary (~15,000 runs: several minutes on 2 cores in Release)."""
    g = parse(stories_bytes)
    files = [("intact", stories_bytes, False)]
    files += [(f"cut-{n}", stories_bytes[:n], True) for n in range(g.data_off + 1)]
    rng = random.Random(7)
    for _ in range(500):
        at = rng.randrange(g.data_off)
        b = bytearray(stories_bytes)
        b[at] ^= 1 << rng.randrange(8)
        files.append((f"flip-{at}", bytes(b), False))
    run_corpus(brisk, files, tmp_path, report, "every cut and 500 flips")
