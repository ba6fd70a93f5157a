"""brisk on Hugging Face folders (--model DIR): tiny random folders of every
architecture brisk reads (tests/integration/synth_hf.py: numpy +
safetensors, F32 and BF16, a tokenizers-built tokenizer.json), against the
float64 reference run on the GGUF of the same values, written the way
llama.cpp's converter writes it.

  - logits: --weights f32 and auto within the f32 bound (BF16 folders hold
    values F16 represents exactly: auto's BF16 -> F16 is lossless), f16 within
    the f16 bound; and the folder's logits equal, bit for bit, those of the
    GGUF the converter would make of it (the same numbers by two paths);
  - greedy text equal to the reference's;
  - tokenizer.json: brisk's ids equal the `tokenizers` package's on mixed
    text, with merges in the pair form and in the string form;
  - refusals: an unknown architecture (naming the supported ones), an
    unknown pre-tokenizer regex (named), an unknown tensor, a broken
    safetensors header, a missing tokenizer.json, each one line;
  - --model DIR/config.json is the same model;
  - mixtures of experts (issue 40): Qwen3-MoE, Mixtral and OLMoE folders
    (8 experts, top 2; OLMoE also top 8), each in both layouts transformers 5
    writes (the experts one by one, Mixtral's under block_sparse_moe; and
    the fused mlp.experts.gate_up_proj / down_proj, "-fused"), through the
    same logits, GGUF-equality and greedy checks with the same bounds as the
    GGUF MoE tests (test_moe.py), and F16 folders of them at f32 and auto;
    the seeds keep every top-2 decision of the prompt at least
    MOE_MIN_MARGIN from a tie in the F32 folder (f16 rounding moves router
    logits by <= 0.004) and MOE_GREEDY_MARGIN in the BF16 folder's greedy
    text (test_moe_routing_margins); a sharded folder with a layer's experts
    in both shards is the same model; broken MoE folders (an expert missing
    or past the config's count, a fused tensor of the wrong shape, top-k
    beyond the expert count, shared experts, dense layers) are refused with
    one line;
  - the server chats on a folder with the openai client, using the
    folder's chat template.
torch and transformers are not needed (bench/hf_folder_check.py compares
transformers-written folders with transformers' own forward).
"""

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("safetensors", reason="needs safetensors (pip install -r tests/requirements.txt)")
pytest.importorskip("tokenizers", reason="needs tokenizers (pip install -r tests/requirements.txt)")

from synth_gguf import N_VOCAB, VOCAB, Spec, make_tensors, write_model  # noqa: E402
from synth_hf import write_folder, write_tokenizer  # noqa: E402

pytestmark = pytest.mark.reference

# One model per Hugging Face architecture; Mistral is a llama folder with a window.
MODELS = {
    "llama": (Spec(n_head_kv=2, seed=61), None),
    "mistral": (Spec(n_head_kv=2, sliding_window=6, seed=62), "MistralForCausalLM"),
    "qwen2": (Spec(arch="qwen2", n_head=4, n_head_kv=2, rope_base=1e6, output_type="F32",
                   seed=63), None),
    "qwen3": (Spec(arch="qwen3", n_head=4, n_head_kv=2, head_dim=64, rope_base=1e6,
                   output_type="F32", seed=64), None),
    "gemma2": (Spec(arch="gemma2", n_head=4, n_head_kv=2, head_dim=32, sliding_window=8,
                    attn_softcap=1.5, final_softcap=5.0, seed=65), None),
    "gemma3": (Spec(arch="gemma3", n_head=4, n_head_kv=1, head_dim=64, rope_base=1e6,
                    sliding_window=8, swa_pattern=2, seed=66), None),
    "phi3": (Spec(arch="phi3", n_head_kv=4, seed=67), None),
    # Phi-3.5's LongRoPE: factor lists and attention_factor in rope_scaling.
    "phi3-longrope": (Spec(arch="phi3", n_head=4, n_head_kv=2, rope_orig_ctx=16,
                           rope_attn_factor=1.19, seed=69), None),
    "llama-rope-linear": (Spec(n_head_kv=2, rope_linear=4.0, seed=68), None),
}
# Mixtures of experts, as test_moe.py's models (8 experts, top 2 or 8).
MOE_MODELS = {
    "qwen3moe": (Spec(arch="qwen3moe", n_head=4, n_head_kv=2, head_dim=64, rope_base=1e6,
                      n_ff=192, n_ff_exp=64, n_expert=8, n_expert_used=2, output_type="F32",
                      seed=115), None),
    "mixtral": (Spec(n_head_kv=2, n_ff=64, n_expert=8, n_expert_used=2, seed=335),
                "MixtralForCausalLM"),
    "olmoe": (Spec(arch="olmoe", n_ff=64, n_expert=8, n_expert_used=2, output_type="F32",
                   seed=302), None),
    "olmoe-top8": (Spec(arch="olmoe", n_ff=64, n_expert=8, n_expert_used=8, output_type="F32",
                        seed=203), None),
}
for _name, _m in list(MOE_MODELS.items()):
    MODELS[_name] = _m
    MODELS[_name + "-fused"] = _m
MOE_NAMES = [n for n in MODELS if n.split("-")[0] in MOE_MODELS]
MOE_MIN_MARGIN = 0.03
MOE_GREEDY_MARGIN = 2e-3
DTYPES = ("F32", "BF16")
PROMPT_IDS = [int(t) for t in np.random.default_rng(2025).integers(0, N_VOCAB, 24)]
N_GEN = 16
# As test_synthetic_models.py: float32 rounding over two layers (measured
# ~1e-6); f16 re-rounds every weight (2^-11 relative).
BOUND = {"f32": 1e-4, "auto": 1e-4, "f16": 1e-2}

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


class Folders:
    def __init__(self, root, reference):
        self.root, self.ref = root, reference
        self._made, self._logits = {}, {}

    def get(self, name, dtype):
        """(folder, reference gguf) of the model, written once."""
        key = (name, dtype)
        if key not in self._made:
            spec, hf_arch = MODELS[name]
            folder = self.root / f"{name}-{dtype}"
            layout = "fused" if name.endswith("-fused") else "per-expert"
            vals = write_folder(folder, spec, make_tensors(spec), dtype=dtype, hf_arch=hf_arch,
                                chat_template=CHATML, moe_layout=layout)
            gg = write_model(self.root / f"{name}-{dtype}.gguf", spec, tensors=vals)
            self._made[key] = (folder, gg)
        return self._made[key]

    def logits(self, name, dtype):
        key = (name, dtype)
        if key not in self._logits:
            m = self.ref.Model(str(self.get(name, dtype)[1]))
            self._logits[key] = (m, self.ref.forward(m, PROMPT_IDS))
        return self._logits[key]


@pytest.fixture(scope="module")
def folders(tmp_path_factory, reference):
    return Folders(tmp_path_factory.mktemp("hf"), reference)


def brisk_logits(brisk, path, weights, dump):
    brisk.run("generate", "--model", path, "--prompt-ids", " ".join(map(str, PROMPT_IDS)),
              "-n", "0", "--temp", "0", "--weights", weights, "--dump-logits", dump)
    got = np.fromfile(dump, dtype="<f4")
    assert got.size == len(PROMPT_IDS) * N_VOCAB
    return got.reshape(len(PROMPT_IDS), N_VOCAB)


@pytest.mark.parametrize("weights", ["f32", "auto", "f16"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MODELS))
def test_folder_logits_match_reference(brisk, folders, name, dtype, weights, tmp_path, report):
    _, ref = folders.logits(name, dtype)
    folder, _ = folders.get(name, dtype)
    got = brisk_logits(brisk, folder, weights, tmp_path / "l.f32").astype(np.float64)
    rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
    line = f"hf folder {name:>18} {dtype:>4} {weights:>4}: max rel L2 {rel.max():.2e}"
    report(line)
    assert rel.max() <= BOUND[weights], line
    if weights != "f16":
        assert (got.argmax(axis=1) == ref.argmax(axis=1)).all(), line


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MODELS))
def test_folder_equals_converted_gguf(brisk, folders, name, dtype, tmp_path):
    """The folder and the GGUF llama.cpp's converter would write from it are
    one model: the same logits, bit for bit, under every --weights. The GGUF
    holds the folder's values in F32 (a BF16 value is exact in F32), so it
    takes the same format: auto makes a BF16 folder F16, as --weights f16
    makes the GGUF; f16 and int8 convert the same values by the two paths
    (the folder's from its unaligned safetensors bytes, q/k rows permuted as
    they are read)."""
    folder, gg = folders.get(name, dtype)
    for weights in ("f32", "auto", "f16", "int8"):
        a = brisk_logits(brisk, folder, weights, tmp_path / "a.f32")
        gw = "f16" if weights == "auto" and dtype == "BF16" else weights
        b = brisk_logits(brisk, gg, gw, tmp_path / "b.f32")
        assert np.array_equal(a, b), (name, dtype, weights, float(np.abs(a - b).max()))


@pytest.mark.parametrize("name", list(MODELS))
def test_folder_greedy_matches_reference(brisk, folders, name):
    m, _ = folders.logits(name, "BF16")
    folder, _ = folders.get(name, "BF16")
    ids = folders.ref.greedy(m, PROMPT_IDS, N_GEN)[len(PROMPT_IDS):]
    r = brisk.run("generate", "--model", folder, "--prompt-ids", " ".join(map(str, PROMPT_IDS)),
                  "-n", N_GEN, "--temp", "0", "--ignore-eos", "--weights", "f32")
    want = VOCAB.decode(ids).decode("utf-8", errors="replace")
    assert r.out.decode("utf-8", errors="strict") == want, f"reference ids {ids}"


@pytest.mark.parametrize("name", [n for n in MOE_MODELS if MOE_MODELS[n][0].n_expert_used < 8])
def test_moe_routing_margins(folders, name, report):
    """Guards the lossy comparisons of the top-2 MoE folders, as test_moe.py
    does for its files: no top-2 decision of the prompt within MOE_MIN_MARGIN
    of a tie in the F32 folder (its f16 run), nor of the BF16 folder's
    greedy text within MOE_GREEDY_MARGIN; most experts are used."""
    ref = folders.ref

    def routing(dtype, ids):
        m = ref.Model(str(folders.get(name, dtype)[1]))
        m.routing = []
        ref.forward(m, ids)
        return m.routing

    def margin(rec):
        gaps = [np.inf]
        for _, logits, idx, _ in rec:
            s = -np.sort(-logits, axis=1)
            gaps.append(float((s[:, idx.shape[1] - 1] - s[:, idx.shape[1]]).min()))
        return min(gaps)

    rec = routing("F32", PROMPT_IDS)
    m, _ = folders.logits(name, "BF16")
    ids = ref.greedy(m, PROMPT_IDS, N_GEN)
    m_prompt, m_greedy = margin(rec), margin(routing("BF16", ids))
    used = [len(np.unique(idx)) for _, _, idx, _ in rec]
    report(f"hf folder moe {name:>9}: routing margin {m_prompt:.3f} (F32 prompt), "
           f"{m_greedy:.4f} (BF16 greedy); experts used per layer {used}")
    assert m_prompt >= MOE_MIN_MARGIN, f"seed gives a near-tie in the prompt's routing: {m_prompt}"
    assert m_greedy >= MOE_GREEDY_MARGIN, f"seed gives a near-tie in the greedy text: {m_greedy}"
    assert min(used) >= 5, used


@pytest.mark.parametrize("weights", ["f32", "auto"])
@pytest.mark.parametrize("name", MOE_NAMES)
def test_moe_f16_folder_matches_reference(brisk, folders, name, weights, tmp_path, report):
    """An F16 folder of experts (the third float dtype): F16 stacks converted to
    f32, or kept as stored (auto), within the f32 bound of the reference on
    the same values."""
    _, ref = folders.logits(name, "F16")
    folder, _ = folders.get(name, "F16")
    got = brisk_logits(brisk, folder, weights, tmp_path / "l.f32").astype(np.float64)
    rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
    line = f"hf folder {name:>18}  F16 {weights:>4}: max rel L2 {rel.max():.2e}"
    report(line)
    assert rel.max() <= BOUND[weights], line
    assert (got.argmax(axis=1) == ref.argmax(axis=1)).all(), line


def test_moe_layouts_are_one_model(brisk, folders, tmp_path):
    """The experts one by one and transformers 5's fused tensors of the same
    values give the same logits, bit for bit."""
    for name in MOE_MODELS:
        a = brisk_logits(brisk, folders.get(name, "BF16")[0], "f32", tmp_path / "a.f32")
        b = brisk_logits(brisk, folders.get(name + "-fused", "BF16")[0], "f32", tmp_path / "b.f32")
        assert np.array_equal(a, b), name


@pytest.mark.parametrize("name", ["qwen3moe", "mixtral-fused"])
def test_moe_sharded_folder(brisk, folders, tmp_path, name):
    """A sharded folder (model.safetensors.index.json), as large MoE checkpoints
    come, with a layer's experts split across two shards: the same logits, bit
    for bit, as the single file."""
    from safetensors.numpy import load_file, save_file

    src, _ = folders.get(name, "F32")
    d = tmp_path / "sharded"
    shutil.copytree(src, d)
    t = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    names = sorted(t)
    shards = [names[0::2], names[1::2]]  # alternate tensors: every layer in both shards
    weight_map = {}
    for i, part in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({k: t[k] for k in part}, str(d / fn), metadata={"format": "pt"})
        weight_map.update({k: fn for k in part})
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": sum(v.nbytes for v in t.values())},
         "weight_map": weight_map}))
    experts = [k for k in names if ".experts." in k and k.startswith("model.layers.0.")]
    assert {weight_map[k] for k in experts} == set(weight_map.values())
    for weights in ("f32", "int8"):
        a = brisk_logits(brisk, src, weights, tmp_path / "a.f32")
        b = brisk_logits(brisk, d, weights, tmp_path / "b.f32")
        assert np.array_equal(a, b), (name, weights)


def test_moe_refusals(brisk, folders, tmp_path):
    from safetensors.numpy import load_file, save_file

    def copy(src_name, case, edit_cfg=None, edit_tensors=None):
        src, _ = folders.get(src_name, "F32")
        d = tmp_path / case
        shutil.copytree(src, d)
        if edit_cfg:
            cfg = json.loads((d / "config.json").read_text())
            edit_cfg(cfg)
            (d / "config.json").write_text(json.dumps(cfg))
        if edit_tensors:
            t = load_file(str(d / "model.safetensors"))
            edit_tensors(t)
            save_file(t, str(d / "model.safetensors"))
        return d

    _refused(brisk, copy("qwen3moe", "missing", edit_tensors=lambda t: t.pop(
        "model.layers.1.mlp.experts.5.up_proj.weight")),
        "layer 1 has no up matrix for expert 5 (of 8)")
    _refused(brisk, copy("mixtral", "extra", edit_tensors=lambda t: t.__setitem__(
        "model.layers.0.block_sparse_moe.experts.8.w2.weight",
        t["model.layers.0.block_sparse_moe.experts.0.w2.weight"])),
        "is expert 8, but config.json has 8 experts")
    _refused(brisk, copy("olmoe", "count", edit_cfg=lambda c: c.update(num_experts=6)),
             "is expert 6, but config.json has 6 experts")
    _refused(brisk, copy("olmoe-fused", "fused-shape", edit_tensors=lambda t: t.__setitem__(
        "model.layers.0.mlp.experts.down_proj",
        t["model.layers.0.mlp.experts.down_proj"][:, :, :32].copy())),
        "layer 0's fused experts have shapes")
    _refused(brisk, copy("qwen3moe", "topk", edit_cfg=lambda c: c.update(num_experts_per_tok=9)),
             "num_experts_per_tok 9 is not in [1, 8 experts]")
    _refused(brisk, copy("qwen3moe", "shared", edit_cfg=lambda c: c.update(
        shared_expert_intermediate_size=64)), "shared experts are not supported")
    _refused(brisk, copy("qwen3moe", "sparse-step", edit_cfg=lambda c: c.update(
        decoder_sparse_step=2)), "dense MLP layers among the experts")


def test_config_json_path_is_the_folder(brisk, folders, tmp_path):
    folder, _ = folders.get("qwen2", "F32")
    a = brisk_logits(brisk, folder, "f32", tmp_path / "a.f32")
    b = brisk_logits(brisk, folder / "config.json", "f32", tmp_path / "b.f32")
    assert np.array_equal(a, b)


TEXTS = ["the cat and in", "Hello, world! 123 4567", "  two  spaces\n\nnewlines\ttab",
         "héllo wörld — ünïcode 日本語 😀", "x<|im_start|>y<|endoftext|>",
         "def f(x):\n    return x + 1\n", ""]


@pytest.mark.parametrize("strings", [False, True], ids=["merges-pairs", "merges-strings"])
def test_tokenizer_json_equals_tokenizers(brisk, folders, tmp_path, strings):
    from tokenizers import Tokenizer

    folder, _ = folders.get("llama", "F32")
    if strings:
        folder2 = tmp_path / "strings"
        shutil.copytree(folder, folder2)
        write_tokenizer(folder2, merges_as_strings=True)
        assert isinstance(json.loads((folder2 / "tokenizer.json").read_text())["model"]["merges"][0], str)
        folder = folder2
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    for text in TEXTS:
        want = tok.encode(text, add_special_tokens=False).ids
        got = brisk.tokenize(folder, text, "--special", "--no-bos") if text else []
        assert got == want, (text, got, want)


def _refused(brisk, path, needle):
    r = brisk.run("generate", "--model", path, "--prompt-ids", "1 2 3", "-n", "1", check=False)
    lines = r.err_lines()
    assert r.returncode == 1, f"exit {r.returncode}; stderr {lines!r}"
    assert len(lines) == 1 and lines[0].startswith("brisk: error: "), lines
    assert needle in lines[0], lines
    return lines[0]


def test_refusals(brisk, folders, tmp_path):
    src, _ = folders.get("llama", "F32")

    def copy(name):
        d = tmp_path / name
        shutil.copytree(src, d)
        return d

    d = copy("arch")
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["MambaForCausalLM"]
    (d / "config.json").write_text(json.dumps(cfg))
    line = _refused(brisk, d, "unsupported architecture 'MambaForCausalLM'")
    for a in ("LlamaForCausalLM", "Qwen3ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM"):
        assert a in line

    d = copy("regex")
    tj = json.loads((d / "tokenizer.json").read_text())
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "[a-z]+|\\s+"}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    (d / "tokenizer.json").write_text(json.dumps(tj))
    _refused(brisk, d, "pre-tokenizer regex '[a-z]+|\\s+'")

    lsrc, _ = folders.get("phi3-longrope", "F32")
    for case, edit, needle in [
            ("short-list", lambda c: c["rope_scaling"]["long_factor"].pop(),
             "'long_factor' is not a list of"),
            ("bad-factor", lambda c: c["rope_scaling"]["short_factor"].__setitem__(0, -1.0),
             "'short_factor'[0] is not a positive number"),
            ("no-orig", lambda c: c.pop("original_max_position_embeddings"),
             "longrope without original_max_position_embeddings")]:
        d = tmp_path / f"longrope-{case}"
        shutil.copytree(lsrc, d)
        cfg = json.loads((d / "config.json").read_text())
        edit(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
        _refused(brisk, d, needle)

    d = copy("wordpiece")
    tj["model"]["type"] = "WordPiece"
    (d / "tokenizer.json").write_text(json.dumps(tj))
    _refused(brisk, d, "model type 'WordPiece' is not supported")

    d = copy("notok")
    (d / "tokenizer.json").unlink()
    _refused(brisk, d, "tokenizer.json")

    d = copy("header")
    raw = bytearray((d / "model.safetensors").read_bytes())
    raw[0:8] = (len(raw)).to_bytes(8, "little")
    (d / "model.safetensors").write_bytes(bytes(raw))
    _refused(brisk, d, "safetensors: header of")

    d = copy("tensor")
    (d / "model.safetensors").unlink()
    from synth_hf import write_safetensors
    write_safetensors(d / "model.safetensors",
                      {"model.layers.0.self_attn.rotary_pos.weight": np.zeros(4, np.float32)},
                      "F32")
    _refused(brisk, d, "is not one brisk reads for LlamaForCausalLM")


def test_server_chats_on_a_folder(start_server, folders):
    folder, _ = folders.get("qwen3", "BF16")
    srv = start_server(str(folder) + "/config.json")
    try:
        c = srv.client(api_key="x")
        served = c.models.list().data[0].id
        assert served == folder.name  # the folder's name, given as DIR/config.json
        r = c.chat.completions.create(model=served, messages=[{"role": "user", "content": "hi"}],
                                      max_tokens=4, temperature=0)
        assert r.choices[0].finish_reason in ("length", "stop")
        # The folder's ChatML template: 'hi' in it is 9 tokens of this vocabulary.
        rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        assert r.usage.prompt_tokens == len(srv_tokens(folder, rendered))
    finally:
        srv.stop()


def srv_tokens(folder, text):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(folder / "tokenizer.json")).encode(
        text, add_special_tokens=False).ids


@pytest.mark.parametrize("style", ["llama2", "metaspace", "gemma", "gemma-split"])
def test_spm_style_tokenizer_json_equals_tokenizers(brisk, folders, tmp_path, style):
    """SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Gemma
    layouts): brisk's ids equal the `tokenizers` package's, unknown
    characters as <0xXX> bytes."""
    from tokenizers import Tokenizer

    from synth_hf import spm_tokenizer_json

    src, _ = folders.get("llama", "F32")
    d = tmp_path / style
    d.mkdir()
    shutil.copy(src / "config.json", d / "config.json")
    (d / "tokenizer.json").write_text(spm_tokenizer_json(style))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}))
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    for text in TEXTS[:-1] + ["the cat sat on the mat", " leading space", "hello  world"]:
        want = tok.encode(text, add_special_tokens=False).ids
        got = brisk.tokenize(d, text, "--no-bos")
        assert got == want, (style, text, got, want)
    # add_bos_token: BOS first by default.
    assert brisk.tokenize(d, "the cat")[0] == 1


def test_generation_config_defaults(brisk, start_server, folders, tmp_path):
    """generation_config.json's sampling fields fill what a request leaves
    out (--generation-config auto, the default), /v1/models says which
    defaults are in force, and its eos ids end a generation; vllm keeps
    brisk's neutral defaults."""
    src, _ = folders.get("qwen3", "BF16")
    m, _ = folders.logits("qwen3", "BF16")
    greedy = folders.ref.greedy(m, PROMPT_IDS, 8)[len(PROMPT_IDS):]
    d = tmp_path / "gen"
    shutil.copytree(src, d)
    # temperature 0: greedy unless a request asks otherwise; a token of the
    # greedy continuation (the first after the start not seen before) is an eos id.
    cut = next(i for i in range(1, len(greedy)) if greedy[i] not in greedy[:i])
    stop_id = greedy[cut]
    (d / "generation_config.json").write_text(json.dumps(
        {"do_sample": False, "temperature": 0.0, "top_k": 7, "top_p": 0.5,
         "repetition_penalty": 1.0, "eos_token_id": [VOCAB.eos, stop_id]}))
    srv = start_server(d)
    try:
        r = srv.request("GET", "/v1/models")
        gd = r.json()["data"][0]["generation_defaults"]
        assert gd == {"source": "generation_config", "temperature": 0, "top_p": 0.5,
                      "top_k": 7, "min_p": 0, "repetition_penalty": 1}, gd
        body = {"prompt": PROMPT_IDS, "max_tokens": 8}
        outs = set()
        for _ in range(3):
            r = srv.request("POST", "/v1/completions", body)
            assert r.status == 200, r.body
            c = r.json()["choices"][0]
            outs.add(c["text"])
            assert c["finish_reason"] == "stop"
        assert outs == {VOCAB.decode(greedy[:cut]).decode("utf-8", errors="replace")}
    finally:
        srv.stop()
    srv = start_server(d, "--generation-config", "vllm")
    try:
        gd = srv.request("GET", "/v1/models").json()["data"][0]["generation_defaults"]
        assert gd["source"] == "brisk" and gd["temperature"] == 1 and gd["top_k"] == -1, gd
    finally:
        srv.stop()
    # A value out of range is refused, naming the file.
    (d / "generation_config.json").write_text(json.dumps({"top_p": 1.5}))
    _refused(brisk, d, "generation_config.json: 'top_p'")


LLAMA3_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
             "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN2_RE = LLAMA3_RE.replace("\\p{N}{1,3}", "\\p{N}")


@pytest.mark.parametrize("pre", ["llama3", "qwen2", "smollm"])
def test_byte_level_pre_tokenizers_equal_tokenizers(brisk, folders, tmp_path, pre):
    """The Split expressions brisk recognises (Llama 3's, with ignore_merges
    as its files set it; Qwen 2's) and SmolLM's Digits + ByteLevel: brisk's
    hand-written pre-tokenizers give the `tokenizers` package's ids."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    from synth_gguf import CONTROL

    src, _ = folders.get("llama", "F32")
    d = tmp_path / pre
    d.mkdir()
    shutil.copy(src / "config.json", d / "config.json")
    vocab = {t: i for i, t in enumerate(VOCAB.tokens)}
    merges = [tuple(m.split(" ")) for m in VOCAB.merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=pre == "llama3"))
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pre == "smollm")
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), bl])
    else:
        split = pre_tokenizers.Split(Regex(LLAMA3_RE if pre == "llama3" else QWEN2_RE),
                                     behavior="isolated", invert=False)
        tok.pre_tokenizer = pre_tokenizers.Sequence([split, bl])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(c, special=True, normalized=False) for c in CONTROL])
    tok.save(str(d / "tokenizer.json"))
    texts = TEXTS[:-1] + ["I'M here, you'LL see 12345678 it's", "a\r\n\r\n  b   \n c",
                          "x=1;y+=22 // 333!!!"]
    for text in texts:
        want = tok.encode(text, add_special_tokens=False).ids
        got = brisk.tokenize(d, text, "--special", "--no-bos")
        assert got == want, (pre, text, got, want)
