"""Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS against independent references.

References: the `gguf` package's numpy dequantizers (all six) and its Q5_1 quantizer;
ggml's own quantizer output on fixed inputs, recorded by scripts/record_ggml_quants.py
into tests/data/ggml_quantized.npz; float64 numpy dot products of the dequantized
weights and activations.  Every test runs on every kernel set the CPU has (the `isa`
fixture) and on awkward block counts.

Tolerances:
- dequantize is exact: every d*sc*q (or d*(ls-32)*kvalue) is exact in float32 (at most
  24 significant bits), so only a final "+ m" / "- dmin*m" rounds, the same way on both
  sides.  dequantize_f16 is then exact too (both round to nearest even).
- quantize: the bytes equal gguf's (Q5_1) and ggml's (all six) exactly.
- mat-vec: |ours - float64| <= 1e-5 * sum|w_i*a_i| (float32 sums of exact int32 block sums).
"""
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants as gq

import _quant_blocks as quant_blocks
import infer.kernels as K
from _quant_blocks import gguf_dequantize

# name -> (elements per block, bytes per block, byte offsets of fp16 scale fields, activation)
FORMATS = {
    "q5_1": (32, 24, (0, 2), "q8_1"),
    "q2_k": (256, 84, (80, 82), "q8_k"),
    "q3_k": (256, 110, (108,), "q8_k"),
    "q5_k": (256, 176, (0, 2), "q8_k"),
    "iq4_nl": (32, 18, (0,), "q8_0"),
    "iq4_xs": (256, 136, (0,), "q8_k"),
}
NAMES = list(FORMATS)
BLOCK_COUNTS = {32: [1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97], 256: [1, 2, 3, 7, 16, 17]}
CASES = [(f, nb) for f in NAMES for nb in BLOCK_COUNTS[FORMATS[f][0]]]
DATA = Path(__file__).resolve().parent / "data" / "ggml_quantized.npz"


def random_blocks(fmt, n_blocks, seed):
    """Any bit pattern in quants and sub-block scales, with finite fp16 super-scales."""
    return quant_blocks.random_blocks(FORMATS[fmt][1], FORMATS[fmt][2], n_blocks, seed)


def awkward_values(fmt, n_blocks, seed):
    """n_blocks blocks of float32 values; each block a different hard case."""
    return quant_blocks.awkward_values(n_blocks, FORMATS[fmt][0], seed, kinds=6)


def quantized(x, fmt):
    bs, bb = FORMATS[fmt][:2]
    return K.quantize(np.ascontiguousarray(x, np.float32).reshape(-1), fmt,
                      np.empty(x.size // bs * bb, np.uint8))


# ---- dequantize ------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt,n_blocks", CASES)
def test_dequantize_random_bits_matches_gguf(isa, fmt, n_blocks):
    raw = random_blocks(fmt, n_blocks, n_blocks)
    out = np.full(n_blocks * FORMATS[fmt][0], np.nan, np.float32)
    assert K.dequantize(raw, fmt, out) is out
    np.testing.assert_array_equal(out, gguf_dequantize(raw, fmt))


@pytest.mark.parametrize("fmt,n_blocks", CASES)
def test_dequantize_f16_matches_gguf(isa, fmt, n_blocks):
    raw = random_blocks(fmt, n_blocks, 7 * n_blocks)
    want = gguf_dequantize(raw, fmt).astype(np.float16)
    out = np.zeros(n_blocks * FORMATS[fmt][0], np.float16)
    assert K.dequantize_f16(raw, fmt, out) is out
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("fmt", ["q2_k", "q5_k"])
def test_dequantize_zero_scales_give_positive_zero(isa, fmt):
    """By hand: d < 0, dmin < 0 and every sub-block scale and min 0 make each element
    (d*0)*q - dmin*0 = (-0) - (-0) = +0, in f32 and f16 (the sign bit clear)."""
    bb, scale_offsets = FORMATS[fmt][1], FORMATS[fmt][2]
    raw = np.random.default_rng(3).integers(0, 256, 2 * bb, dtype=np.uint8).reshape(2, bb)
    scales = slice(0, 16) if fmt == "q2_k" else slice(4, 16)
    raw[:, scales] = 0
    for offset, value in zip(scale_offsets, (-1.5, -0.25)):
        raw[:, offset:offset + 2] = np.array([value], np.float16).view(np.uint8)
    raw = raw.reshape(-1)
    out32 = K.dequantize(raw, fmt, np.full(512, np.nan, np.float32))
    out16 = K.dequantize_f16(raw, fmt, np.full(512, np.nan, np.float16))
    assert not out32.view(np.uint32).any() and not out16.view(np.uint16).any()


def test_q3_k_layout_by_hand():
    """One Q3_K block from the layout facts: q = low 2 bits (bits 2k of qs[32h + l] for
    element 128h + 32k + l) minus 4 unless bit (i/32) of hmask[i%32] is set; scale j
    = 6 bits (nibble of scales[j % 8], high for j >= 8; top bits at 2*(j/4) of
    scales[8 + j%4]) minus 32."""
    q = (np.arange(256) * 5) % 8 - 4                     # the signed 3-bit value of element i
    sc = (np.arange(16) * 11) % 64 - 32
    u = q + 4
    qs = np.zeros(64, np.uint8)
    hmask = np.zeros(32, np.uint8)
    for i in range(256):
        h, r = divmod(i, 128)
        k, lane = divmod(r, 32)
        qs[32 * h + lane] |= (u[i] & 3) << (2 * k)
        if u[i] & 4:
            hmask[i % 32] |= 1 << (i // 32)
    s = np.zeros(12, np.uint8)
    for j in range(16):
        v = sc[j] + 32
        s[j % 8] |= (v & 0xF) << (4 * (j // 8))
        s[8 + j % 4] |= (v >> 4) << (2 * (j // 4))
    raw = np.concatenate([hmask, qs, s, np.array([0.5], np.float16).view(np.uint8)])
    out = np.empty(256, np.float32)
    K.dequantize(raw, "q3_k", out)
    np.testing.assert_array_equal(out, (0.5 * np.repeat(sc, 16) * q).astype(np.float32))


# ---- quantize --------------------------------------------------------------------------------

@pytest.mark.parametrize("n_blocks", BLOCK_COUNTS[32])
def test_q5_1_quantize_matches_gguf(isa, n_blocks):
    x = awkward_values("q5_1", n_blocks, n_blocks)
    want = gq.quantize(x.reshape(-1, 32), T.Q5_1).reshape(-1)
    np.testing.assert_array_equal(quantized(x, "q5_1"), want)


@pytest.fixture(scope="module")
def ggml_recorded():
    from reference.ggml_inputs import ggml_test_inputs
    try:
        inputs = ggml_test_inputs()
    except FileNotFoundError as e:   # the SmolLM2 package is absent
        pytest.skip(str(e))
    with np.load(DATA) as data:
        yield inputs, {k: data[k] for k in data.files}


@pytest.mark.parametrize("source", ["random", "smollm2"])
@pytest.mark.parametrize("fmt", NAMES)
def test_quantize_matches_ggml_bytes(isa, ggml_recorded, fmt, source):
    """ggml's quantize_row_*_ref / quantize_iq4_* (no imatrix) made these bytes."""
    inputs, recorded = ggml_recorded
    ours = quantized(inputs[source], fmt)
    want = recorded[f"{source}/{fmt}"]
    bb = FORMATS[fmt][1]
    same = np.all(ours.reshape(-1, bb) == want.reshape(-1, bb), axis=1)
    assert same.all(), f"{(~same).sum()} of {same.size} blocks differ, first at {np.argmin(same)}"


@pytest.mark.parametrize("offset", [0.0, 0.5, 100.0])
@pytest.mark.parametrize("fmt", NAMES)
def test_round_trip_error_on_ggml_synthetic_data(isa, fmt, offset):
    """ggml test-quantize-fns: x_i = 0.1 + 2 cos(i + offset), 4096 values; its bounds:
    0.0075 for 2-bit formats, 0.0040 for 3-bit, 0.002 otherwise (sqrt(sum err²)/n)."""
    x = (0.1 + 2 * np.cos(np.arange(4096) + offset)).astype(np.float32)
    raw = quantized(x, fmt)
    ours = K.dequantize(raw, fmt, np.empty(x.size, np.float32))
    np.testing.assert_array_equal(ours, gguf_dequantize(raw, fmt))
    err = np.sqrt(np.sum((ours.astype(np.float64) - x) ** 2)) / x.size
    assert err <= {"q2_k": 0.0075, "q3_k": 0.0040}.get(fmt, 0.002)


@pytest.mark.parametrize("fmt,n_blocks", CASES)
def test_quantize_awkward_values(isa, fmt, n_blocks):
    x = awkward_values(fmt, n_blocks, n_blocks)
    raw = quantized(x, fmt)
    bs = FORMATS[fmt][0]
    decoded = gguf_dequantize(raw, fmt).astype(np.float64).reshape(n_blocks, bs)
    blocks = x.astype(np.float64).reshape(n_blocks, bs)
    for b in range(n_blocks):
        amax = np.abs(blocks[b]).max()
        if amax == 0:
            assert not decoded[b].any()
            continue
        rel = np.sqrt(np.mean((decoded[b] - blocks[b]) ** 2)) / amax
        # a step is at most 2*amax/levels; Q2_K's 4 levels with 4-bit scales are coarse
        assert rel < {"q2_k": 0.25, "q3_k": 0.12}.get(fmt, 0.05), (b, rel)
    K.set_isa("scalar")
    try:
        np.testing.assert_array_equal(quantized(x, fmt), raw)
    finally:
        K.set_isa(isa)


@pytest.mark.parametrize("fmt", NAMES)
def test_quantize_non_finite_block_stays_local(isa, fmt):
    bs = FORMATS[fmt][0]
    good = awkward_values(fmt, 1, 2)
    for bad_values in ([np.inf, -np.inf, np.nan], [3e38, -3e38, 1e-45]):
        bad = np.resize(np.array(bad_values, np.float32), bs)
        raw = quantized(np.concatenate([bad, good, bad]), fmt).reshape(3, -1)
        np.testing.assert_array_equal(raw[1], quantized(good, fmt))


# ---- dot products through matvec -------------------------------------------------------------

def activations_f64(x, fmt):
    """The quantized activations matvec multiplies by, decoded in float64, and for
    Q8_1 each block's stored s (fp16 of d*sum(q))."""
    act = FORMATS[fmt][3]
    buf = K.quantize_activations(x, fmt, np.empty(K.activation_bytes(fmt, x.size), np.uint8))
    if act == "q8_k":
        blocks = buf.reshape(-1, 292)
        d = blocks[:, 0:4].copy().view(np.float32)[:, 0].astype(np.float64)
        return (d[:, None] * blocks[:, 4:260].view(np.int8)).reshape(-1), None
    blocks = buf.reshape(-1, 36 if act == "q8_1" else 34)
    d = blocks[:, 0:2].copy().view(np.float16)[:, 0].astype(np.float64)
    s = blocks[:, 2:4].copy().view(np.float16)[:, 0].astype(np.float64) if act == "q8_1" else None
    return (d[:, None] * blocks[:, -32:].view(np.int8)).reshape(-1), s


def check_matvec(w_raw, fmt, rows, x):
    out = np.full(rows, np.nan, np.float32)
    assert K.matvec(w_raw.reshape(rows, -1), fmt, x, out) is out
    w = gguf_dequantize(w_raw, fmt).astype(np.float64).reshape(rows, x.size)
    a, s = activations_f64(x, fmt)
    want = w @ a
    if s is not None:
        # Q5_1's min term is m * s, as the format defines it: w - m = d*q exactly
        m = w_raw.reshape(rows, -1, 24)[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
        want = (w - np.repeat(m, 32, axis=1)) @ a + m @ s
    tol = 1e-5 * (np.abs(w) @ np.abs(a)) + 1e-30
    assert np.all(np.abs(out - want) <= tol), np.max(np.abs(out - want) / tol)


@pytest.mark.parametrize("fmt,n_blocks", CASES)
def test_matvec_quantized_weights(isa, fmt, n_blocks):
    rows = 5
    x = awkward_values(fmt, n_blocks, 11)
    w = np.concatenate([awkward_values(fmt, n_blocks, 20 + r) for r in range(rows)])
    check_matvec(quantized(w, fmt), fmt, rows, x)


@pytest.mark.parametrize("fmt,n_blocks", CASES)
def test_matvec_random_bits(isa, fmt, n_blocks):
    rows = 6   # more than four: the four-row kernels and the remainder both run
    w = np.concatenate([random_blocks(fmt, n_blocks, 50 + r) for r in range(rows)])
    x = np.random.default_rng(n_blocks).standard_normal(n_blocks * FORMATS[fmt][0]).astype(np.float32)
    check_matvec(w, fmt, rows, x)


@pytest.mark.parametrize("n_tokens", [1, 3, 33])
@pytest.mark.parametrize("fmt", NAMES)
def test_matmul_tokens(isa, fmt, n_tokens):
    """The prefill path: every token row is the mat-vec of that token."""
    rows, n = 6, 768
    w = quantized(np.random.default_rng(5).standard_normal(rows * n).astype(np.float32), fmt)
    X = np.random.default_rng(n_tokens).standard_normal((n_tokens, n)).astype(np.float32)
    out = np.full((n_tokens, rows), np.nan, np.float32)
    assert K.matmul(w.reshape(rows, -1), fmt, X, out) is out
    for t in range(n_tokens):
        single = K.matvec(w.reshape(rows, -1), fmt, X[t], np.empty(rows, np.float32))
        np.testing.assert_array_equal(out[t], single)
    check_matvec(w, fmt, rows, X[n_tokens - 1])


@pytest.mark.parametrize("fmt", NAMES)
def test_matvec_extremes(isa, fmt):
    """Largest quants and scales against +-127 activations: no int16 lane overflows."""
    bs, bb, halves, _ = FORMATS[fmt]
    n_blocks = 3
    raw = np.full((n_blocks, bb), 0xFF, np.uint8)
    for off in halves:
        raw[:, off:off + 2] = np.array([1.0], np.float16).view(np.uint8)
    raw[1, bb // 2:bb // 2 + 8] = 0x00
    x = np.where(np.arange(n_blocks * bs) % 3 == 0, -1.0, 1.0).astype(np.float32)
    check_matvec(raw.reshape(-1), fmt, 1, x)
    check_matvec(raw.reshape(-1), fmt, 1, -x)


# ---- misuse ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", NAMES)
def test_rows_not_whole_blocks(fmt):
    bs, bb = FORMATS[fmt][:2]
    n = bs * 2 + bs // 4 if bs == 256 else 48    # SmolLM2's 576 for the K types
    with pytest.raises(ValueError, match="x"):
        K.matvec(np.zeros(4 * bb, np.uint8), fmt, np.zeros(n, np.float32), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="src"):
        K.quantize(np.zeros(n, np.float32), fmt, np.zeros(3 * bb, np.uint8))
    with pytest.raises(ValueError, match="src"):
        K.dequantize(np.zeros(bb + 1, np.uint8), fmt, np.zeros(bs, np.float32))
    with pytest.raises(ValueError, match="out"):
        K.dequantize(np.zeros(bb, np.uint8), fmt, np.zeros(bs - 1, np.float32))
