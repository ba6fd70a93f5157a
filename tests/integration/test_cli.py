"""The command line itself: version, tokenize, usage errors and hostile model files."""

import re
import struct

import pytest

# ---- --version and usage ---------------------------------------------------------


def test_version(brisk):
    r = brisk.run("--version")
    lines = r.stdout.splitlines()
    version_re = r"^brisk \d+\.\d+\.\d+\S* \(commit ([0-9a-f]{7,40}(-dirty)?|unknown)\)$"
    assert re.match(version_re, lines[0]), lines
    backends = [ln for ln in lines if ln.startswith("backends:")]
    assert backends, r.stdout
    assert re.search(r"\bcpu\(", backends[0]), backends[0]


@pytest.mark.parametrize("args", [
    [],
    ["frobnicate"],
    ["generate", "--no-such-flag"],
    ["tokenize", "--no-such-flag", "x"],
])
def test_usage_errors_exit_2(brisk, args):
    r = brisk.run(*args, check=False)
    assert r.returncode == 2, (r.returncode, r.err)
    assert "usage" in r.err.lower(), r.err


# ---- the option table: --help everywhere, BRISK_<NAME> from the environment ---------


@pytest.mark.parametrize("cmd, flags", [
    ("serve", ["--model", "--port", "--max-num-seqs", "--api-key-file", "--max-write-queue-bytes"]),
    ("generate", ["--model", "--prompt", "--n-predict", "--temp", "--dump-logits"]),
    ("bench", ["--model", "--n-prompt", "--n-gen", "--reps", "--kv-cache-dtype"]),
    ("tokenize", ["--model", "--text", "--special", "--no-bos"]),
    ("convert-llama2c", ["--model", "--tokenizer", "--out"]),
])
def test_every_subcommand_has_help(brisk, cmd, flags):
    r = brisk.run(cmd, "--help")
    out = r.stdout.decode() if isinstance(r.stdout, bytes) else r.stdout
    assert out.startswith("usage: brisk " + cmd), out[:200]
    for f in flags:
        assert f in out, (cmd, f)
    assert "BRISK_<NAME>" in out


def generated_tokens(r):
    m = re.search(r"generated (\d+) tokens", r.err)
    assert m, r.err
    return int(m.group(1))


def test_options_from_the_environment(brisk, stories260k_gguf):
    args = ("generate", "--model", stories260k_gguf, "--temp", "0", "--prompt", "Once")
    assert generated_tokens(brisk.run(*args, env={"BRISK_N_PREDICT": "3", "BRISK_IGNORE_EOS": "1"})) == 3
    # The command line wins over the environment.
    assert generated_tokens(brisk.run(*args, "-n", "5", env={"BRISK_N_PREDICT": "3",
                                                            "BRISK_IGNORE_EOS": "1"})) == 5
    # Greedy text is the same whether a value came from a flag or a variable.
    flag = brisk.run(*args, "-n", "6", "--ignore-eos").stdout
    var = brisk.run(*args, env={"BRISK_N_PREDICT": "6", "BRISK_IGNORE_EOS": "true"}).stdout
    assert flag == var


@pytest.mark.parametrize("cmd, env, needle", [
    ("serve", {"BRISK_PORT": "abc"}, "BRISK_PORT"),
    ("serve", {"BRISK_MAX_NUM_SEQS": "0"}, "BRISK_MAX_NUM_SEQS"),
    ("serve", {"BRISK_WEIGHTS": "q3"}, "BRISK_WEIGHTS: 'q3' is not one of auto, f32, f16, int8"),
    ("generate", {"BRISK_IGNORE_EOS": "maybe"}, "BRISK_IGNORE_EOS"),
    ("bench", {"BRISK_REPS": "-1"}, "BRISK_REPS"),
])
def test_bad_environment_values_exit_2(brisk, cmd, env, needle):
    r = brisk.run(cmd, check=False, env=env)
    assert r.returncode == 2, (r.returncode, r.err)
    assert needle in r.err, r.err


# ---- tokenize ----------------------------------------------------------------


def test_tokenize_smollm2(brisk, smollm2_path):
    # GPT-2 byte-level BPE: "Hello" "," "Ġworld" "!"; SmolLM2 adds no BOS.
    assert brisk.tokenize(smollm2_path, "Hello, world!") == [19556, 28, 905, 17]


def test_tokenize_special(brisk, smollm2_path):
    text = "<|im_start|>user\n"
    assert brisk.tokenize(smollm2_path, text, "--special") == [1, 4093, 198]
    # Without --special the control token is plain text and never id 1.
    plain = brisk.tokenize(smollm2_path, text)
    assert 1 not in plain and len(plain) > 3


def test_tokenize_empty(brisk, smollm2_path):
    assert brisk.tokenize(smollm2_path, "") == []


# ---- hostile model files ---------------------------------------------------------


def gguf_header(n_tensors, n_kv):
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def hostile_files(tmp_path, stories):
    """(name, path) of model files brisk must refuse cleanly."""
    files = []

    def add(name, data):
        p = tmp_path / name
        p.write_bytes(data)
        files.append((name, p))

    add("empty", b"")
    add("random", bytes((i * 2654435761 >> 7) & 0xFF for i in range(4096)))
    add("bad-magic", b"GGUX" + stories.read_bytes()[4:4096])
    add("bad-version", b"GGUF" + struct.pack("<I", 99) + stories.read_bytes()[8:4096])
    add("huge-tensor-count", gguf_header(1 << 62, 0))
    add("huge-kv-count", gguf_header(0, 1 << 62))
    # one KV whose key string claims 2^63 bytes
    add("huge-string", gguf_header(0, 1) + struct.pack("<Q", 1 << 63) + b"abc")
    data = stories.read_bytes()
    for n in (4, 8, 16, 24, 40, 100, 1000, 4096, len(data) // 2, len(data) - 1):
        add(f"truncated-{n}", data[:n])
    files.append(("missing", tmp_path / "does-not-exist.gguf"))
    d = tmp_path / "a-directory.gguf"
    d.mkdir()
    files.append(("directory", d))
    return files


@pytest.mark.parametrize("cmd", ["generate", "tokenize"])
def test_hostile_model_files(brisk, stories260k_gguf, tmp_path, cmd):
    failures = []
    for name, path in hostile_files(tmp_path, stories260k_gguf):
        if cmd == "generate":
            args = ["generate", "--model", path, "--prompt", "hi", "-n", "4"]
        else:
            args = ["tokenize", "--model", path, "--text", "hi"]
        r = brisk.run(*args, check=False, timeout=30)
        lines = r.err_lines()
        if r.returncode <= 0:
            failures.append(f"{name}: exit {r.returncode}")
        elif len(lines) != 1 or not lines[0].startswith("brisk: error"):
            failures.append(f"{name}: want one 'brisk: error...' line on stderr, got {lines!r}")
    assert not failures, "\n".join(failures)
