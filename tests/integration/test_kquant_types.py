"""The block types brisk reads from files and converts at load (Q5_0, Q5_1,
Q2_K..Q6_K, IQ4_NL, IQ4_XS; kernels/cpu/kern_kquant.h), checked block by
block against an independent implementation: the gguf package's NumPy
dequantizers.

  - brisk's C reference (kern_dequantize_row) gives exactly gguf's floats on
    random blocks: every code and sub-block scale byte uniform, the fp16
    block scales random finite values of either sign over 2^-14..2^8.
  - The load-time conversion into the form the kernels run (build/tests/
    kq_dequant --convert) gives exactly those floats for Q5_0 -> Q8_0,
    Q5_1 -> Q8_0M and IQ4_NL -> Q8_0; with the block scales rounded to fp16
    for Q4_K -> Q4_1, Q5_K -> Q8_0M and IQ4_XS -> Q8_0 (error per 32 values
    <= 2^-8 of the block's largest magnitude); and requantized to Q8_0 for
    Q2_K, Q3_K and Q6_K (error <= 1/254 + 2^-10 of the block's largest
    magnitude: Q8_0's half step plus the fp16 rounding of its scale times
    127 steps).
"""

import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize


# Numbers against the reference: the Release pass (pytest.ini).
pytestmark = pytest.mark.reference

QT = gguf.GGMLQuantizationType
TYPES = ["Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"]
# Byte offsets of each type's fp16 fields (d, and dmin or m where present).
FP16_FIELDS = {
    "Q5_0": (0,), "Q5_1": (0, 2), "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2),
    "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,), "IQ4_XS": (0,),
}
EXACT = {"Q5_0", "Q5_1", "IQ4_NL"}
SCALES_FP16 = {"Q4_K", "Q5_K", "IQ4_XS"}
REQUANTIZED = {"Q2_K", "Q3_K", "Q6_K"}
N_BLOCKS = 512


@pytest.fixture(scope="module")
def kq_dequant(brisk_bin):
    path = Path(brisk_bin).parent.parent / "tests" / "kq_dequant"
    if not path.is_file():
        pytest.fail(f"{path} not built (scripts/build.sh builds it)", pytrace=False)
    return path


def random_blocks(name, rng, lo_exp=-14, hi_exp=8):
    qt = QT[name]
    bs, ts = gguf.GGML_QUANT_SIZES[qt]
    raw = rng.integers(0, 256, size=(N_BLOCKS, ts), dtype=np.uint8)
    for off in FP16_FIELDS[name]:
        mag = 2.0 ** rng.uniform(lo_exp, hi_exp, N_BLOCKS)
        sign = rng.choice([-1.0, 1.0], N_BLOCKS)
        raw[:, off:off + 2] = (sign * mag).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw, bs


def run_tool(tool, name, raw, bs, *args):
    n = raw.shape[0] * bs
    r = subprocess.run([str(tool), str(int(QT[name])), str(n), *args], input=raw.tobytes(),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    got = np.frombuffer(r.stdout, dtype="<f4")
    assert got.size == n
    return got


@pytest.mark.parametrize("name", TYPES)
def test_reference_equals_gguf(kq_dequant, name, report):
    rng = np.random.default_rng(list(QT.__members__).index(name))
    raw, bs = random_blocks(name, rng)
    want = dequantize(raw, QT[name]).reshape(-1).astype(np.float32)
    got = run_tool(kq_dequant, name, raw, bs)
    assert np.isfinite(want).all()
    bad = np.flatnonzero(got != want)
    report(f"kquant {name:>6}: reference vs gguf on {raw.shape[0]} random blocks: "
           f"{bad.size} of {got.size} values differ")
    assert bad.size == 0, f"first at {bad[0]}: brisk {got[bad[0]]!r}, gguf {want[bad[0]]!r}"


@pytest.mark.parametrize("name", ["Q6_K", "Q3_K", "Q5_K", "IQ4_XS"])
def test_x8_conversion_within_bound(kq_dequant, name, report):
    """What the CPU backend runs in its row-interleaved form: Q6_K and Q3_K as
    Q6_0S (the two 16-value scales in fp16 per 32 values, codes exact), Q5_K
    as Q5_1 (d * sc and -dmin * m in fp16), IQ4_XS as IQ4_NL (d * (ls - 32)
    in fp16): error per 32 values <= 2^-8 of the block's largest magnitude
    (fp16's rounding of a scale, 2^-11, of a min up to 3 times the largest
    value, and a block's magnitude can come from the other 16-value half)."""
    rng = np.random.default_rng(200 + list(QT.__members__).index(name))
    raw, bs = random_blocks(name, rng, lo_exp=-12, hi_exp=-4)
    want = dequantize(raw, QT[name]).reshape(-1, 32).astype(np.float64)
    got = run_tool(kq_dequant, name, raw, bs, "--x8").reshape(-1, 32).astype(np.float64)
    err = np.abs(got - want).max(axis=1)
    ratio = float((err / np.maximum(np.abs(want).max(axis=1), 1e-30)).max())
    report(f"kquant {name:>6}: X8 conversion, max error per 32 values {ratio:.2e} of the block's "
           f"largest magnitude")
    assert ratio <= 2.0 ** -8, ratio


@pytest.mark.parametrize("name", TYPES)
def test_conversion_within_bound(kq_dequant, name, report):
    # Scales as in real files (small positive d, dmin), so that d * sub-scale
    # stays in fp16's normal range.
    rng = np.random.default_rng(100 + list(QT.__members__).index(name))
    raw, bs = random_blocks(name, rng, lo_exp=-12, hi_exp=-4)
    want = dequantize(raw, QT[name]).reshape(-1, 32).astype(np.float64)
    got = run_tool(kq_dequant, name, raw, bs, "--convert").reshape(-1, 32).astype(np.float64)
    err = np.abs(got - want).max(axis=1)
    amax = np.abs(want).max(axis=1)
    ratio = float((err / np.maximum(amax, 1e-30)).max())
    report(f"kquant {name:>6}: load conversion, max error per 32 values {ratio:.2e} of the "
           f"block's largest magnitude")
    if name in EXACT:
        assert (err == 0).all(), ratio
    elif name in SCALES_FP16:
        assert ratio <= 2.0 ** -8, ratio
    else:
        assert name in REQUANTIZED
        assert ratio <= 1 / 254 + 2.0 ** -10, ratio
