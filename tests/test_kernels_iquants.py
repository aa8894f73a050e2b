"""The grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and the ternary TQ1_0,
TQ2_0 against independent references.

References: the `gguf` package's numpy dequantizers (they carry their own copies of
ggml's grids) and float64 numpy dot products.  There are no quantizers for these formats
here (llama.cpp needs an importance matrix for most of them), so the weights are random
blocks: any byte pattern is a valid block (every index, sign and scale field selects
something), with a finite fp16 super-scale written in.  TQ1_0 and TQ2_0 are also taken
from the gguf package's own quantizer.  Every test runs on every kernel set the CPU has
(the `isa` fixture) and on awkward super-block counts.

Tolerances:
- dequantize is exact: d * ls * grid * c has at most 22 significant bits (d 11, the
  scale 5, the grid value 6; c is a power of two), so every order of the products gives
  the same float32, and the same fp16 after rounding to nearest even.
- mat-vec: |ours - float64 reference| <= 1e-5 * sum|w_i*a_i| (float32 accumulation of
  per-super-block int32 sums).
"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants as gq

import _quant_blocks as quant_blocks
import infer.kernels as K
from _quant_blocks import gguf_dequantize
from infer.tensor import DType, Tensor

QK_K = 256
ROOT = Path(__file__).resolve().parent.parent
FORMATS = ["iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "tq1_0", "tq2_0"]
GGUF_TYPE = {f: T[f.upper()] for f in FORMATS}
BLOCK_BYTES = {"iq2_xxs": 66, "iq2_xs": 74, "iq2_s": 82, "iq3_xxs": 98, "iq3_s": 110,
               "iq1_s": 50, "tq1_0": 54, "tq2_0": 66, "q8_k": 292}
# Byte offset of the fp16 super-scale d (ggml-common.h: first, except in the TQ formats).
D_OFFSET = {"tq1_0": 52, "tq2_0": 64}
SUPER_BLOCKS = [1, 2, 3, 7, 15, 16, 17]


def random_blocks(fmt, n_blocks, seed, max_scale=1.0):
    """Any bit pattern in the payload with a finite fp16 super-scale, seven orders of
    magnitude apart from block to block (down to fp16 subnormals), either sign."""
    return quant_blocks.random_blocks(BLOCK_BYTES[fmt], (D_OFFSET.get(fmt, 0),), n_blocks, seed,
                                      (-7, 0), max_scale)


def test_grid_tables_are_those_of_the_gguf_package():
    """csrc/iquants_grids.c is what scripts/gen_iquants_grids.py writes from gguf.quants."""
    script = ROOT / "scripts" / "gen_iquants_grids.py"
    if not script.exists():   # scripts/sanitize.sh and the installed-wheel run copy no scripts/
        pytest.skip("not in a source checkout")
    proc = subprocess.run([sys.executable, str(script), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_block_sizes_are_ggml_s():
    for fmt in FORMATS:
        assert K.block_size(fmt) == QK_K
        assert K.block_bytes(fmt) == BLOCK_BYTES[fmt] == gq.GGML_QUANT_SIZES[GGUF_TYPE[fmt]][1]
        assert K.vec_dot_type(fmt) == "q8_k"
        assert DType[fmt.upper()].kernel_supported


# ---- dequantize ------------------------------------------------------------------------------

@pytest.mark.parametrize("n_blocks", SUPER_BLOCKS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_random_bits_matches_gguf(isa, fmt, n_blocks):
    raw = random_blocks(fmt, n_blocks, n_blocks)
    out = np.full(n_blocks * QK_K, np.nan, np.float32)
    assert K.dequantize(raw, fmt, out) is out
    np.testing.assert_array_equal(out, gguf_dequantize(raw, fmt))


@pytest.mark.parametrize("n_blocks", [1, 3, 17])
@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_f16_matches_gguf(isa, fmt, n_blocks):
    raw = random_blocks(fmt, n_blocks, 7 * n_blocks)
    want = gguf_dequantize(raw, fmt).astype(np.float16)   # numpy rounds to nearest even
    out = np.zeros(n_blocks * QK_K, np.float16)
    assert K.dequantize_f16(raw, fmt, out) is out
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("fmt", ["tq1_0", "tq2_0"])
def test_ternary_from_the_gguf_quantizer(isa, fmt):
    """Values in {-1, 0, 1} times a per-row scale survive the gguf package's quantizer
    and our dequantizer unchanged (TQ1_0's base-3 packing included)."""
    rng = np.random.default_rng(3)
    x = (rng.integers(-1, 2, (5, 3 * QK_K)) * np.float16(0.375)).astype(np.float32)
    x[:, 0] = 0.375                          # every super-block has |x| = d somewhere
    for b in range(15):
        x.reshape(-1, QK_K)[b, 1:] *= (b % 3) != 1   # some all-but-one-zero blocks
    raw = np.asarray(gq.quantize(x, GGUF_TYPE[fmt])).reshape(-1)
    out = np.empty(x.size, np.float32)
    K.dequantize(raw, fmt, out)
    np.testing.assert_array_equal(out, x.reshape(-1))


def test_iq1_s_layout_by_hand():
    """One IQ1_S block from the layout facts: index qs[4ib+l] | bits 3l.. of qh[ib] << 8,
    scale 2*((qh >> 12) & 7) + 1, bit 15 of qh the sign of the 1/8 shift."""
    gq.IQ1_S.init_grid()
    grid = np.asarray(gq.IQ1_S.grid).reshape(2048, 8)   # -1, 0, 1
    qs = np.arange(32, dtype=np.uint8) * 7
    qh = np.array([(s << 12) | (((ib * 3) & 7) << 3) | (ib & 7) | (0x8000 if ib % 2 else 0)
                   for ib, s in enumerate([0, 1, 2, 3, 4, 5, 6, 7])], np.uint16)
    d = np.float16(0.5)
    raw = np.concatenate([np.array([d]).view(np.uint8), qs, qh.view(np.uint8)])
    want = np.empty(QK_K)
    for ib in range(8):
        ls = 2 * ((int(qh[ib]) >> 12) & 7) + 1
        delta = -0.125 if qh[ib] & 0x8000 else 0.125
        for point in range(4):
            index = int(qs[4 * ib + point]) | (((int(qh[ib]) >> (3 * point)) & 7) << 8)
            at = 32 * ib + 8 * point
            want[at:at + 8] = float(d) * ls * (grid[index] + delta)
    out = np.empty(QK_K, np.float32)
    K.dequantize(raw, "iq1_s", out)
    np.testing.assert_array_equal(out, want.astype(np.float32))


# ---- dot products through matvec and matmul --------------------------------------------------

def parse_q8_k(raw):
    blocks = np.asarray(raw, np.uint8).reshape(-1, BLOCK_BYTES["q8_k"])
    d = blocks[:, 0:4].copy().view(np.float32)[:, 0]
    qs = blocks[:, 4:260].copy().view(np.int8)
    return d, qs


def check_matvec(w_raw, fmt, rows, x):
    n = x.size
    out = np.full(rows, np.nan, np.float32)
    assert K.matvec(w_raw.reshape(rows, -1), fmt, x, out) is out
    w = gguf_dequantize(w_raw, fmt).astype(np.float64).reshape(rows, n)
    buf = np.empty(K.activation_bytes(fmt, n), np.uint8)
    d, qs = parse_q8_k(K.quantize_activations(x, fmt, buf))
    a = (d.astype(np.float64)[:, None] * qs).reshape(-1)
    want = w @ a
    tol = 1e-5 * (np.abs(w) @ np.abs(a)) + 1e-30
    assert np.all(np.abs(out - want) <= tol), np.max(np.abs(out - want) / tol)
    return out


@pytest.mark.parametrize("n_blocks", SUPER_BLOCKS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_matvec_random_bits(isa, fmt, n_blocks):
    rows = 3
    w = np.concatenate([random_blocks(fmt, n_blocks, 50 + r) for r in range(rows)])
    x = np.random.default_rng(n_blocks).standard_normal(n_blocks * QK_K).astype(np.float32)
    check_matvec(w, fmt, rows, x)


@pytest.mark.parametrize("rows", [1, 4, 5, 17])
@pytest.mark.parametrize("fmt", FORMATS)
def test_matvec_row_counts(isa, fmt, rows):
    n_blocks = 2
    w = np.concatenate([random_blocks(fmt, n_blocks, 90 + r) for r in range(rows)])
    x = np.random.default_rng(rows).standard_normal(n_blocks * QK_K).astype(np.float32)
    check_matvec(w, fmt, rows, x)


@pytest.mark.parametrize("n_tokens", [1, 3, 5, 33])
@pytest.mark.parametrize("fmt", FORMATS)
def test_matmul_tokens(isa, fmt, n_tokens):
    """The prefill path: every token row is the mat-vec of that token."""
    rows, n_blocks = 6, 3
    w = random_blocks(fmt, rows * n_blocks, 5)
    X = np.random.default_rng(n_tokens).standard_normal((n_tokens, n_blocks * QK_K)).astype(np.float32)
    out = np.full((n_tokens, rows), np.nan, np.float32)
    assert K.matmul(w.reshape(rows, -1), fmt, X, out) is out
    for t in range(n_tokens):
        single = check_matvec(w, fmt, rows, X[t])
        np.testing.assert_allclose(out[t], single, rtol=1e-6, atol=1e-6 * np.abs(single).max())


@pytest.mark.parametrize("fmt", FORMATS)
def test_matvec_extremes(isa, fmt):
    """Largest indices, scales and signs against +-127 activations: no int16 lane of a
    SIMD kernel overflows or saturates."""
    n_blocks = 3
    for fill in (0xFF, 0x00, 0xAA):
        raw = np.full((n_blocks, BLOCK_BYTES[fmt]), fill, np.uint8)
        at = D_OFFSET.get(fmt, 0)
        raw[:, at:at + 2] = np.array([1.0], np.float16).view(np.uint8)
        x = np.where(np.arange(n_blocks * QK_K) % 3 == 0, -1.0, 1.0).astype(np.float32)
        check_matvec(raw.reshape(-1), fmt, 1, x)
        check_matvec(raw.reshape(-1), fmt, 1, -x)
        check_matvec(raw.reshape(-1), fmt, 1, np.ones_like(x))


@pytest.mark.parametrize("fmt", FORMATS)
def test_tensor_to_f32(fmt):
    raw = random_blocks(fmt, 4, 2)
    t = Tensor("w", fmt, (2, 2 * QK_K), raw)
    np.testing.assert_array_equal(t.to_f32(), gguf_dequantize(raw, fmt).reshape(2, -1))


# ---- misuse ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_no_quantizer_is_a_clear_error(fmt):
    with pytest.raises(ValueError, match=f"no quantize kernel for {fmt}"):
        K.quantize(np.zeros(QK_K, np.float32), fmt, np.zeros(BLOCK_BYTES[fmt], np.uint8))
    with pytest.raises(ValueError, match=f"no quantize kernel for {fmt}"):
        Tensor.quantize(np.zeros((1, QK_K), np.float32), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_not_whole_super_blocks(fmt):
    n = 576                      # SmolLM2's width: 2.25 super-blocks
    with pytest.raises(ValueError, match="x"):
        K.matvec(np.zeros(4 * BLOCK_BYTES[fmt], np.uint8), fmt, np.zeros(n, np.float32),
                 np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="src"):
        K.dequantize(np.zeros(BLOCK_BYTES[fmt] + 1, np.uint8), fmt, np.zeros(QK_K, np.float32))
    with pytest.raises(ValueError, match="out"):
        K.dequantize(np.zeros(BLOCK_BYTES[fmt], np.uint8), fmt, np.zeros(QK_K - 1, np.float32))
