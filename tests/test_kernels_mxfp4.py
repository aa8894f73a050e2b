"""MXFP4 (ggml type 39: gpt-oss's expert weights) against independent references.

References: the `gguf` package's numpy MXFP4 dequantizer and quantizer (ports of ggml's
dequantize_row_mxfp4 / quantize_row_mxfp4_ref), a block decoded by hand from the OCP
microscaling facts, and float64 numpy products of the gguf-dequantized weights with the
Q8_0 activations infer quantized (the format ggml pairs MXFP4 with).  Every kernel test
runs on every kernel set the CPU has (the `isa` fixture) and on awkward block counts.

Tolerances:
- dequantize is exact: e8m0_half(e) * level is a power of two times an integer of at
  most 4 bits, so the float32 bits equal gguf's, subnormal scales (e = 0, 1) and the
  overflow of e = 255 (level 12 times 2^127 is inf) included; dequantize_f16 rounds
  that float32 to nearest even, as numpy's astype does.
- quantize: the bytes equal gguf's.
- mat-vec: |ours - float64| <= 1e-5 * sum|w_i * a_i| (float32 sums of exact int32
  block sums); mat-mul rows equal the mat-vec of their token bit for bit.
"""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants as gq

import infer.kernels as K
from infer.tensor import DType, Tensor

BS, BB = 32, 17
BLOCK_COUNTS = [1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97]
#: E8M0 exponents at the edges of ggml's conversion (scale 2^(e-128) on the doubled
#: levels): the two subnormal scales (e = 0, 1), the first normal, 2^-1 (e = 127), the
#: largest where level 12 stays finite (252: 1.5 * 2^127) and those where levels
#: overflow to inf (253: 8 and 12; 254: 4 and up; 255: 2 and up, level 1 is 2^127)
EDGE_EXPONENTS = [0, 1, 2, 126, 127, 128, 252, 253, 254, 255]
LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float64)


def gguf_dequantize(raw):
    return gq.dequantize(np.asarray(raw, np.uint8).reshape(-1), T.MXFP4).astype(np.float32).reshape(-1)


def random_blocks(n_blocks, seed, exponents=None):
    """n_blocks MXFP4 blocks (flat uint8): every nibble pattern, exponents from the
    list given (default: 2^-8 .. 2^7, where products stay far from the f32 range)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n_blocks, BB), dtype=np.uint8)
    if exponents is None:
        raw[:, 0] = rng.integers(119, 135, n_blocks)
    else:
        raw[:, 0] = np.resize(np.asarray(exponents, np.uint8), n_blocks)
    return raw.reshape(-1)


def quantized(x):
    x = np.ascontiguousarray(x, np.float32).reshape(-1)
    return K.quantize(x, "mxfp4", np.empty(x.size // BS * BB, np.uint8))


# ---- layout and traits -----------------------------------------------------------------------

def test_traits():
    assert (K.block_size("mxfp4"), K.block_bytes("mxfp4"), K.vec_dot_type("mxfp4")) == (32, 17, "q8_0")
    assert K.type_id("MXFP4") == int(DType.MXFP4) == 39
    assert DType.MXFP4.kernel_supported and K.repack_type("mxfp4") is None


def test_block_decoded_by_hand():
    """Element j < 16 is the low nibble of qs[j], element j + 16 its high nibble; a
    nibble is an E2M1 code (sign bit 3; 0, 0.5, 1, 1.5, 2, 3, 4, 6) and the block's
    value is code * 2^(e - 127)."""
    e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    codes = np.array([(3 * j + 5) % 16 for j in range(32)])
    for e in (127, 130, 120, 1, 0):
        raw = np.concatenate([[e], codes[:16] | (codes[16:] << 4)]).astype(np.uint8)
        want = np.array([e2m1[c] * 2.0 ** (e - 127) for c in codes], np.float32)
        got = K.dequantize(raw, "mxfp4", np.empty(32, np.float32))
        np.testing.assert_array_equal(got, want)


# ---- dequantize ------------------------------------------------------------------------------

@pytest.mark.parametrize("n_blocks", BLOCK_COUNTS)
def test_dequantize_matches_gguf_bits(isa, n_blocks):
    raw = random_blocks(n_blocks, n_blocks, exponents=EDGE_EXPONENTS + list(range(100, 160, 7)))
    out = np.full(n_blocks * BS, np.nan, np.float32)
    assert K.dequantize(raw, "mxfp4", out) is out
    with np.errstate(over="ignore"):
        want = gguf_dequantize(raw)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


def test_dequantize_exponent_edges(isa):
    """Each edge exponent with every nibble: subnormal results, and inf at e = 255."""
    nibbles = np.arange(16, dtype=np.uint8)
    raw = np.array([np.concatenate([[e], nibbles | (nibbles[::-1] << 4)]) for e in EDGE_EXPONENTS], np.uint8)
    out = K.dequantize(raw.reshape(-1), "mxfp4", np.empty(raw.shape[0] * BS, np.float32)).reshape(-1, BS)
    with np.errstate(over="ignore"):
        want = gguf_dequantize(raw).reshape(-1, BS)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    assert out[0, 1] == np.float32(2.0 ** -128) and out[1, 1] == np.float32(2.0 ** -127)   # subnormal
    assert out[-1, 1] == np.float32(2.0 ** 127) and np.isposinf(out[-1, 2]) and np.isneginf(out[-1, 15])
    assert np.isposinf(out[-3, 7]) and out[-3, 5] == np.float32(1.5 * 2.0 ** 127) and np.isfinite(out[-4]).all()


@pytest.mark.parametrize("n_blocks", [1, 3, 17, 64])
def test_dequantize_f16_matches_gguf(isa, n_blocks):
    raw = random_blocks(n_blocks, 7 * n_blocks, exponents=[100, 112, 127, 140, 143, 150])
    with np.errstate(over="ignore"):
        want = gguf_dequantize(raw).astype(np.float16)
    out = np.zeros(n_blocks * BS, np.float16)
    assert K.dequantize_f16(raw, "mxfp4", out) is out
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def test_rows_at_odd_offsets_read_in_place():
    """17-byte blocks: the second row of a tensor starts at an odd address.  Tensor
    row reads (embedding lookups) decode it like the gguf package does."""
    raw = random_blocks(3 * 5, 3)
    t = Tensor("token_embd.weight", "mxfp4", (5, 96), raw)
    assert t.rows(1).ctypes.data % 2 == 1
    np.testing.assert_array_equal(t.dequantize_rows(1, 4).reshape(-1), gguf_dequantize(raw[51:204]))
    np.testing.assert_array_equal(t.to_f32().reshape(-1), gguf_dequantize(raw))


# ---- quantize --------------------------------------------------------------------------------

def awkward_values(n_blocks, seed):
    """Each block a different hard case: zero, one outlier, all negative, a power of two
    as the largest value (log2 exact), large and small magnitudes, ties between levels."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_blocks, BS)).astype(np.float32)
    for b in range(n_blocks):
        kind = (b + seed) % 7
        if kind == 0:
            x[b] = 0.0
        elif kind == 1:
            x[b] = 0.0
            x[b, 5] = -7.0
        elif kind == 2:
            x[b] = -np.abs(x[b]) - 0.5
        elif kind == 3:
            x[b, 0] = 4.0                      # amax exactly 2^2: e = 127
            x[b, 1:] = np.clip(x[b, 1:], -3.9, 3.9)
        elif kind == 4:
            x[b] *= np.float32(10.0 ** rng.uniform(-20, 20))
        elif kind == 5:
            x[b] = np.float32(0.25) * rng.integers(-24, 25, BS)   # on and between the levels of e = 125
    return x.reshape(-1)


@pytest.mark.parametrize("n_blocks", BLOCK_COUNTS)
def test_quantize_matches_gguf(isa, n_blocks):
    x = awkward_values(n_blocks, n_blocks)
    want = gq.quantize(x.reshape(-1, BS), T.MXFP4).reshape(-1)
    np.testing.assert_array_equal(quantized(x), want)


def test_round_trip_error():
    """x = 0.1 + 2 cos(i + 0.5) (ggml test-quantize-fns' data): a block's amax lies in
    [2^k, 1.5 * 2^k) with k = 1, its scale is 2^(k-2) on the E2M1 values (0, 0.5, 1, 1.5,
    2, 3, 4, 6), whose widest step below 1.5 * 2^k is 2^k / 4: no error exceeds 2^k / 8."""
    x = (0.1 + 2 * np.cos(np.arange(4096) + 0.5)).astype(np.float32)
    err = np.abs(gguf_dequantize(quantized(x)).astype(np.float64) - x)
    assert err.max() <= 0.25, err.max()
    assert np.sqrt(np.mean(err ** 2)) < 0.15


def test_quantize_out_of_range_blocks_stay_local():
    """A block of infinities or NaNs (and one whose largest value is subnormal, where
    ggml's float-to-uint8 cast is undefined: infer clamps the exponent to 0) leaves its
    neighbours' bytes alone."""
    good = awkward_values(1, 9)
    for bad_values in ([np.inf, -np.inf, np.nan], [3e38, -3e38, 1e-45], [1e-40, -2e-40, 0.0]):
        bad = np.resize(np.array(bad_values, np.float32), BS)
        raw = quantized(np.concatenate([bad, good, bad])).reshape(3, BB)
        np.testing.assert_array_equal(raw[1], quantized(good))
    tiny = quantized(np.resize(np.array([2.0 ** -126, -2.0 ** -127], np.float32), BS))
    assert tiny[0] == 0
    np.testing.assert_array_equal(gguf_dequantize(tiny)[:2], np.float32([2.0 ** -126, -2.0 ** -127]))


# ---- dot products ----------------------------------------------------------------------------

def activations_f64(x):
    """The Q8_0 activations matvec multiplies by, decoded in float64."""
    buf = K.quantize_activations(x, "mxfp4", np.empty(K.activation_bytes("mxfp4", x.size), np.uint8))
    blocks = buf.reshape(-1, 34)
    d = blocks[:, 0:2].copy().view(np.float16)[:, 0].astype(np.float64)
    return (d[:, None] * blocks[:, 2:].view(np.int8)).reshape(-1)


def check_matvec(w_raw, rows, x):
    out = np.full(rows, np.nan, np.float32)
    assert K.matvec(w_raw.reshape(rows, -1), "mxfp4", x, out) is out
    w = gguf_dequantize(w_raw).astype(np.float64).reshape(rows, x.size)
    a = activations_f64(x)
    tol = 1e-5 * (np.abs(w) @ np.abs(a)) + 1e-30
    assert np.all(np.abs(out - w @ a) <= tol), np.max(np.abs(out - w @ a) / tol)
    return out


@pytest.mark.parametrize("n_blocks", BLOCK_COUNTS)
def test_matvec_random_bits(isa, n_blocks):
    rows = 7   # four-row kernels and the remainder both run
    w = random_blocks(rows * n_blocks, 50 + n_blocks)
    x = np.random.default_rng(n_blocks).standard_normal(n_blocks * BS).astype(np.float32)
    check_matvec(w, rows, x)


@pytest.mark.parametrize("n_blocks", [1, 2, 17, 64])
def test_matvec_quantized_weights(isa, n_blocks):
    rows = 5
    w = quantized(np.concatenate([awkward_values(n_blocks, 20 + r) for r in range(rows)]))
    x = awkward_values(n_blocks, 11)
    x[~np.isfinite(x)] = 0
    check_matvec(w, rows, (x / max(1.0, np.abs(x).max())).astype(np.float32))


@pytest.mark.parametrize("n_tokens", [1, 2, 3, 5, 8, 33])
def test_matmul_rows_equal_matvec(isa, n_tokens):
    """The prefill path: every token row is the mat-vec of that token, bit for bit
    (the four-row kernel takes 1..4 tokens at once and must not depend on how many)."""
    rows, n = 9, 768
    w = quantized(np.random.default_rng(5).standard_normal(rows * n).astype(np.float32)).reshape(rows, -1)
    X = np.random.default_rng(n_tokens).standard_normal((n_tokens, n)).astype(np.float32)
    out = np.full((n_tokens, rows), np.nan, np.float32)
    assert K.matmul(w, "mxfp4", X, out) is out
    for t in range(n_tokens):
        np.testing.assert_array_equal(out[t], check_matvec(w.reshape(-1), rows, X[t]))


def test_matvec_extremes(isa):
    """Levels +-12 in every element against +-127 activations: the largest block sums
    (|12 * 127 * 32|) and the offset kernels' level + 12 = 24 stay exact."""
    for nibble in (0x77, 0xFF, 0x7F):
        raw = np.full((3, BB), nibble, np.uint8)
        raw[:, 0] = 127
        x = np.where(np.arange(3 * BS) % 3 == 0, -1.0, 1.0).astype(np.float32)
        check_matvec(raw.reshape(-1), 1, x)
        check_matvec(raw.reshape(-1), 1, -x)


@pytest.mark.parametrize("n_blocks", [1, 3, 17])
def test_matvec_subnormal_scales(isa, n_blocks):
    """E8M0 exponents 0 and 1 (subnormal scales 2^-128, 2^-127) beside 2 and 3, against
    integer activations whose Q8_0 scale is 1: each block's product is exact, so the
    sum is held to 1e-5 of sum|w_i a_i| with no absolute floor (the results are ~1e-34)."""
    rows = 6
    w = random_blocks(rows * n_blocks, 5 * n_blocks, exponents=[0, 1, 2, 3, 1, 0, 3])
    x = np.random.default_rng(n_blocks).integers(-127, 128, n_blocks * BS).astype(np.float32)
    x[::BS] = 127   # every block's largest |x|: d = 1
    out = K.matvec(w.reshape(rows, -1), "mxfp4", x, np.empty(rows, np.float32))
    a = activations_f64(x)
    np.testing.assert_array_equal(a, x)
    wf = gguf_dequantize(w).astype(np.float64).reshape(rows, -1)
    assert np.all(np.abs(out - wf @ a) <= 1e-5 * (np.abs(wf) @ np.abs(a))), (out, wf @ a)
    assert np.abs(out).max() > 0


def test_expert_slice_at_odd_offset(isa):
    """An expert's rows of a stacked tensor (row_slice: a view from an odd byte) are
    multiplied in place, against the reference of those rows."""
    n_expert, rows, n = 3, 5, 96
    w = random_blocks(n_expert * rows * n // BS, 77).reshape(n_expert * rows, -1)
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    expert = w[rows:2 * rows]
    assert expert.ctypes.data % 2 == 1 and not expert.flags.owndata
    check_matvec(expert, rows, x)


# ---- misuse ----------------------------------------------------------------------------------

def test_bad_arguments():
    with pytest.raises(ValueError, match="x"):
        K.matvec(np.zeros(4 * BB, np.uint8), "mxfp4", np.zeros(48, np.float32), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="w"):
        K.matvec(np.zeros(4 * BB + 1, np.uint8), "mxfp4", np.zeros(64, np.float32), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="out"):
        K.matvec(np.zeros(4 * BB, np.uint8), "mxfp4", np.zeros(64, np.float32), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="src"):
        K.quantize(np.zeros(48, np.float32), "mxfp4", np.zeros(2 * BB, np.uint8))
    with pytest.raises(ValueError, match="src"):
        K.dequantize(np.zeros(BB + 1, np.uint8), "mxfp4", np.zeros(BS, np.float32))
    with pytest.raises(ValueError, match="out"):
        K.dequantize(np.zeros(BB, np.uint8), "mxfp4", np.zeros(BS - 1, np.float32))
    with pytest.raises(ValueError, match="out"):
        K.quantize(np.zeros(BS, np.float32), "mxfp4", np.zeros(BB - 1, np.uint8))
    with pytest.raises(ValueError, match="row"):
        Tensor("w", "mxfp4", (2, 48), np.zeros(2 * BB, np.uint8))
