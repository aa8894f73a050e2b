"""The K formats Q4_K, Q6_K (weights) and Q8_K (activations) against independent references.

References: the `gguf` package's numpy dequantizers for Q4_K and Q6_K (it has no
K-quant quantizers), numpy decoders and a float32 numpy re-derivation of ggml's
quantize_row_q8_K_ref written here from the block layouts, and float64 numpy dot
products.  Every test runs on every kernel set the CPU has (the `isa` fixture) and on
awkward super-block counts; the real Q4_K/Q6_K weights of Gemma 3 270M are checked too
when its packages are installed.

Tolerances:
- dequantize is exact: d*sc*q - dmin*m is computed exactly in float32 by both sides
  (d has 11 significant bits, sc/m 6 or 8, q 4 or 6), so only the final subtraction
  rounds, and it rounds the same way everywhere.  dequantize_f16 is then exact too
  (both round to nearest even).
- mat-vec: |ours - float64 reference| <= 1e-5 * sum|w_i*a_i| (float32 accumulation of
  per-super-block int32 sums).
"""
import numpy as np
import pytest

import _quant_blocks as quant_blocks
import infer.kernels as K
from _quant_blocks import gguf_dequantize

QK_K = 256
FORMATS = ["q4_k", "q6_k"]
BLOCK_BYTES = {"q4_k": 144, "q6_k": 210, "q8_k": 292}
SUPER_BLOCKS = [1, 2, 3, 7, 16, 17]
# ggml's test-quantize-fns bound for 4-bit and wider formats, on sqrt(sum err^2)/n
MAX_ROUND_TRIP_ERROR = 0.002


def awkward_values(n_blocks, seed):
    return quant_blocks.awkward_values(n_blocks, QK_K, seed)


def random_blocks(fmt, n_blocks, seed):
    """Any bit pattern in the payload (scales, quants) with finite fp16 super-scales."""
    if fmt == "q4_k":
        return quant_blocks.random_blocks(BLOCK_BYTES[fmt], (0, 2), n_blocks, seed)       # d, dmin
    return quant_blocks.random_blocks(BLOCK_BYTES[fmt], (208,), n_blocks, seed, (-4, 0))  # d


def quantized(x, fmt):
    out = np.empty(x.size // QK_K * BLOCK_BYTES[fmt], np.uint8)
    return K.quantize(x, fmt, out)


# ---- dequantize ------------------------------------------------------------------------------

@pytest.mark.parametrize("n_blocks", SUPER_BLOCKS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_random_bits_matches_gguf(isa, fmt, n_blocks):
    raw = random_blocks(fmt, n_blocks, n_blocks)
    out = np.full(n_blocks * QK_K, np.nan, np.float32)
    assert K.dequantize(raw, fmt, out) is out
    np.testing.assert_array_equal(out, gguf_dequantize(raw, fmt))


@pytest.mark.parametrize("n_blocks", SUPER_BLOCKS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_f16_matches_gguf(isa, fmt, n_blocks):
    raw = random_blocks(fmt, n_blocks, 7 * n_blocks)
    want = gguf_dequantize(raw, fmt).astype(np.float16)   # numpy rounds to nearest even
    out = np.zeros(n_blocks * QK_K, np.float16)
    assert K.dequantize_f16(raw, fmt, out) is out
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def test_q6_k_layout_by_hand():
    """One Q6_K block built from the layout facts: element 32k+l of each half takes
    ql[l + 32*(k&1)] >> 4*(k>>1) as its low bits and (qh[l] >> 2k) & 3 as its top bits."""
    q = np.arange(QK_K) % 64                       # the 6-bit value of element i
    ql = np.zeros(128, np.uint8)
    qh = np.zeros(64, np.uint8)
    for i in range(QK_K):
        half, r = divmod(i, 128)
        k, lane = divmod(r, 32)
        ql[64 * half + lane + 32 * (k & 1)] |= (q[i] & 0xF) << (4 * (k >> 1))
        qh[32 * half + lane] |= (q[i] >> 4) << (2 * k)
    scales = np.clip(np.arange(-8, 8) * 16, -128, 127).astype(np.int8)
    raw = np.concatenate([ql, qh, scales.view(np.uint8), np.array([0.5], np.float16).view(np.uint8)])
    want = 0.5 * np.repeat(scales.astype(np.float64), 16) * (q - 32)
    out = np.empty(QK_K, np.float32)
    K.dequantize(raw, "q6_k", out)
    np.testing.assert_array_equal(out, want.astype(np.float32))


def test_q4_k_layout_by_hand():
    """One Q4_K block from the layout facts: 6-bit sc/m of sub-block j (j < 4: low 6 bits
    of bytes j and j+4; j >= 4: nibbles of byte j+4 plus bits 6..7 of bytes j-4 and j),
    element 32j+l in the low (even j) or high (odd j) nibble of qs[32*(j//2) + l]."""
    sc = np.array([1, 17, 33, 63, 5, 40, 62, 0])
    mn = np.array([63, 2, 31, 8, 60, 0, 47, 21])
    s = np.zeros(12, np.uint8)
    for j in range(8):
        if j < 4:
            s[j] |= sc[j]
            s[j + 4] |= mn[j]
        else:
            s[j + 4] |= (sc[j] & 0xF) | ((mn[j] & 0xF) << 4)
            s[j - 4] |= (sc[j] >> 4) << 6
            s[j] |= (mn[j] >> 4) << 6
    q = (np.arange(QK_K) * 7) % 16
    qs = np.zeros(128, np.uint8)
    for i in range(QK_K):
        j, lane = divmod(i, 32)
        qs[32 * (j // 2) + lane] |= q[i] << (4 * (j % 2))
    d, dmin = 0.25, 0.125
    raw = np.concatenate([np.array([d, dmin], np.float16).view(np.uint8), s, qs])
    want = d * np.repeat(sc, 32) * q - dmin * np.repeat(mn, 32)
    out = np.empty(QK_K, np.float32)
    K.dequantize(raw, "q4_k", out)
    np.testing.assert_array_equal(out, want.astype(np.float32))


# ---- quantize --------------------------------------------------------------------------------

@pytest.mark.parametrize("offset", [0.0, 0.5, 100.0])
@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_error_on_ggml_synthetic_data(isa, fmt, offset):
    """ggml test-quantize-fns: x_i = 0.1 + 2 cos(i + offset), 4096 values."""
    x = (0.1 + 2 * np.cos(np.arange(4096) + offset)).astype(np.float32)
    raw = quantized(x, fmt)
    ours = K.dequantize(raw, fmt, np.empty(x.size, np.float32))
    np.testing.assert_array_equal(ours, gguf_dequantize(raw, fmt))
    err = np.sqrt(np.sum((ours.astype(np.float64) - x) ** 2)) / x.size
    assert err <= MAX_ROUND_TRIP_ERROR


@pytest.mark.parametrize("n_blocks", SUPER_BLOCKS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_quantize_awkward_values(isa, fmt, n_blocks):
    x = awkward_values(n_blocks, n_blocks)
    raw = quantized(x, fmt)
    decoded = gguf_dequantize(raw, fmt).astype(np.float64).reshape(n_blocks, QK_K)
    blocks = x.astype(np.float64).reshape(n_blocks, QK_K)
    for b in range(n_blocks):
        amax = np.abs(blocks[b]).max()
        if amax == 0:
            assert not decoded[b].any()
            continue
        rel = np.sqrt(np.mean((decoded[b] - blocks[b]) ** 2)) / amax
        if amax < 0.25:
            # the fp16 super-scale is subnormal here (Q6_K: d ~ amax/4096): coarse, not wrong
            assert rel < 0.5, (b, rel)
            continue
        # uniform rounding error is step/sqrt(12); Q4_K's step is at most 2*amax/15
        # (0.0385*amax), Q6_K's amax/32 (0.009*amax); some slack for the 6/8-bit scales
        assert rel < (0.05 if fmt == "q4_k" else 0.012), (b, rel)
    # Every kernel set quantizes to the same bytes.
    K.set_isa("scalar")
    try:
        np.testing.assert_array_equal(quantized(x, fmt), raw)
    finally:
        K.set_isa(isa)


@pytest.mark.parametrize("fmt", FORMATS + ["q8_k"])
def test_quantize_non_finite_super_block_stays_local(isa, fmt):
    """inf, nan and huge values are garbage in, but memory-safe, and leave the other
    super-blocks of the row untouched (each super-block is quantized on its own)."""
    good = awkward_values(1, 4)
    for bad_values in ([np.inf, -np.inf, np.nan], [3e38, -3e38, 1e-45]):
        bad = np.resize(np.array(bad_values, np.float32), QK_K)
        x = np.concatenate([bad, good, bad]).astype(np.float32)
        raw = quantized(x, fmt).reshape(3, -1)
        np.testing.assert_array_equal(raw[1], quantized(good, fmt))


# ---- Q8_K activations ------------------------------------------------------------------------

def parse_q8_k(raw):
    blocks = np.asarray(raw, np.uint8).reshape(-1, BLOCK_BYTES["q8_k"])
    d = blocks[:, 0:4].copy().view(np.float32)[:, 0]
    qs = blocks[:, 4:260].copy().view(np.int8)
    bsums = blocks[:, 260:292].copy().view(np.int16)
    return d, qs, bsums


def q8_k_by_ggml_rule(x):
    """quantize_row_q8_K_ref in float32 numpy: max = the first element of largest |x|,
    iscale = -127/max, q = min(127, nearest_int(iscale*x)) (ties to even), d = 1/iscale."""
    blocks = x.reshape(-1, QK_K).astype(np.float32)
    d = np.zeros(len(blocks), np.float32)
    qs = np.zeros(blocks.shape, np.int8)
    for b, v in enumerate(blocks):
        amax_at = int(np.argmax(np.abs(v)))
        if v[amax_at] == 0:
            continue
        iscale = np.float32(-127.0) / v[amax_at]
        qs[b] = np.minimum(127, np.rint(iscale * v)).astype(np.int8)
        d[b] = np.float32(1.0) / iscale
    return d, qs


@pytest.mark.parametrize("n_blocks", SUPER_BLOCKS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_q8_k_activations(isa, fmt, n_blocks):
    x = awkward_values(n_blocks, 3 + n_blocks)
    x[:QK_K][[10, 20]] = [-5.0, 5.0]     # equal |x| of both signs: the first one sets the sign
    buf = np.empty(K.activation_bytes(fmt, x.size), np.uint8)
    assert buf.size == n_blocks * BLOCK_BYTES["q8_k"]
    K.quantize_activations(x, fmt, buf)
    d, qs, bsums = parse_q8_k(buf)
    want_d, want_qs = q8_k_by_ggml_rule(x)
    np.testing.assert_array_equal(d, want_d)
    np.testing.assert_array_equal(qs, want_qs)
    np.testing.assert_array_equal(bsums, qs.astype(np.int64).reshape(n_blocks, 16, 16).sum(-1))
    # float64: each value within half a step of x
    decoded = d.astype(np.float64)[:, None] * qs
    step = np.abs(d.astype(np.float64))[:, None]
    assert np.all(np.abs(decoded - x.reshape(n_blocks, QK_K)) <= (0.5 + 1e-5) * step + 1e-30)
    # and the dequantize kernel reads the format the same way
    out = np.empty(x.size, np.float32)
    K.dequantize(buf, "q8_k", out)
    np.testing.assert_array_equal(out, (d[:, None] * qs.astype(np.float32)).reshape(-1))


# ---- dot products through matvec -------------------------------------------------------------

def check_matvec(w_raw, fmt, rows, x):
    n = x.size
    out = np.full(rows, np.nan, np.float32)
    assert K.matvec(w_raw.reshape(rows, -1), fmt, x, out) is out
    w = gguf_dequantize(w_raw, fmt).astype(np.float64).reshape(rows, n)
    buf = np.empty(K.activation_bytes(fmt, n), np.uint8)
    d, qs, _ = parse_q8_k(K.quantize_activations(x, fmt, buf))
    a = (d.astype(np.float64)[:, None] * qs).reshape(-1)
    want = w @ a
    tol = 1e-5 * (np.abs(w) @ np.abs(a)) + 1e-30
    assert np.all(np.abs(out - want) <= tol), np.max(np.abs(out - want) / tol)


@pytest.mark.parametrize("n_blocks", SUPER_BLOCKS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_matvec_quantized_weights(isa, fmt, n_blocks):
    rows = 5
    x = awkward_values(n_blocks, 11)
    w = np.concatenate([awkward_values(n_blocks, 20 + r) for r in range(rows)])
    check_matvec(quantized(w, fmt), fmt, rows, x)


@pytest.mark.parametrize("n_blocks", SUPER_BLOCKS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_matvec_random_bits(isa, fmt, n_blocks):
    rows = 3
    w = np.concatenate([random_blocks(fmt, n_blocks, 50 + r) for r in range(rows)])
    x = np.random.default_rng(n_blocks).standard_normal(n_blocks * QK_K).astype(np.float32)
    check_matvec(w, fmt, rows, x)


@pytest.mark.parametrize("n_tokens", [1, 3, 33])
@pytest.mark.parametrize("fmt", FORMATS)
def test_matmul_tokens(isa, fmt, n_tokens):
    """The prefill path: every token row is the mat-vec of that token."""
    rows, n_blocks = 6, 3
    w = quantized(awkward_values(rows * n_blocks, 5), fmt)
    X = np.random.default_rng(n_tokens).standard_normal((n_tokens, n_blocks * QK_K)).astype(np.float32)
    out = np.full((n_tokens, rows), np.nan, np.float32)
    assert K.matmul(w.reshape(rows, -1), fmt, X, out) is out
    for t in range(n_tokens):
        single = K.matvec(w.reshape(rows, -1), fmt, X[t], np.empty(rows, np.float32))
        np.testing.assert_array_equal(out[t], single)
    check_matvec(w, fmt, rows, X[n_tokens - 1])


@pytest.mark.parametrize("fmt", FORMATS)
def test_matvec_extremes(isa, fmt):
    """Largest quants and scales against +-127 activations: no int16 lane overflows."""
    n_blocks = 3
    raw = np.full((n_blocks, BLOCK_BYTES[fmt]), 0xFF, np.uint8)   # q = 15 / 63, sc = m = 63
    if fmt == "q4_k":
        raw[:, 0:4] = np.array([1.0, 1.0], np.float16).view(np.uint8)
    else:
        raw[:, 192:208] = 0x80                                     # scales -128
        raw[:, 208:210] = np.array([1.0], np.float16).view(np.uint8)
    if fmt == "q4_k":
        raw[1, 16:80] = 0x00                                       # q = 0 in half of block 1
    else:
        raw[1, 0:64] = 0x00                                        # q = 0..3 (-32..-29) in part
        raw[1, 128:160] = 0x00
    x = np.where(np.arange(n_blocks * QK_K) % 3 == 0, -1.0, 1.0).astype(np.float32)
    check_matvec(raw.reshape(-1), fmt, 1, x)
    check_matvec(raw.reshape(-1), fmt, 1, -x)


# ---- real weights -----------------------------------------------------------------------------

GEMMA3_TENSORS = ["blk.0.attn_output.weight", "blk.0.ffn_down.weight", "blk.2.ffn_down.weight"]


@pytest.fixture(scope="module")
def gemma3():
    """Gemma 3 270M Q4_K_M (Q4_K and Q6_K weights); skipped when its packages are absent."""
    from infer import gguf
    try:
        path = gguf.gemma3_model_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    with gguf.GGUFFile(path) as f:
        yield {name: f.tensors[name] for name in GEMMA3_TENSORS}


@pytest.mark.parametrize("name", GEMMA3_TENSORS)
def test_gemma3_weights(isa, gemma3, name):
    tensor = gemma3[name]
    fmt = tensor.dtype.name.lower()
    assert fmt in FORMATS
    raw = np.ascontiguousarray(tensor.rows(0, tensor.n_rows))
    out = np.empty(tensor.n_rows * tensor.n_cols, np.float32)
    K.dequantize(raw, fmt, out)
    np.testing.assert_array_equal(out, gguf_dequantize(raw, fmt))
    x = np.random.default_rng(0).standard_normal(tensor.n_cols).astype(np.float32)
    check_matvec(raw.reshape(-1), fmt, tensor.n_rows, x)


@pytest.mark.parametrize("name", GEMMA3_TENSORS)
def test_requantizing_llama_cpp_weights(gemma3, name):
    """llama.cpp's own quantizer made these bytes.  Decoded and quantized again by ours,
    the values lie on a grid our search should find again, with the same 6-bit scales,
    mins, fp16 super-scales and packing: for Q4_K the same bytes come back.  (It checks
    the encoding end to end, not the breadth of the search: the grid is found early.)
    Q6_K's search lands some super-blocks on an equally good neighbour; most come back."""
    tensor = gemma3[name]
    fmt = tensor.dtype.name.lower()
    raw = np.ascontiguousarray(tensor.rows(0, tensor.n_rows)).reshape(-1)
    again = quantized(gguf_dequantize(raw, fmt), fmt)
    bb = BLOCK_BYTES[fmt]
    identical = np.mean(np.all(raw.reshape(-1, bb) == again.reshape(-1, bb), axis=1))
    assert identical >= (0.99 if fmt == "q4_k" else 0.8), identical


# ---- misuse ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_not_whole_super_blocks(fmt):
    n = 576                      # SmolLM2's width: 2.25 super-blocks
    with pytest.raises(ValueError, match="x"):
        K.matvec(np.zeros(4 * BLOCK_BYTES[fmt], np.uint8), fmt, np.zeros(n, np.float32),
                 np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="src"):
        K.quantize(np.zeros(n, np.float32), fmt, np.zeros(3 * BLOCK_BYTES[fmt], np.uint8))
    with pytest.raises(ValueError, match="src"):
        K.dequantize(np.zeros(BLOCK_BYTES[fmt] + 1, np.uint8), fmt, np.zeros(QK_K, np.float32))
    with pytest.raises(ValueError, match="out"):
        K.dequantize(np.zeros(BLOCK_BYTES[fmt], np.uint8), fmt, np.zeros(QK_K - 1, np.float32))


def test_q8_k_is_not_a_weight_format():
    with pytest.raises(ValueError, match="qtype"):
        K.matvec(np.zeros(292, np.uint8), "q8_k", np.zeros(QK_K, np.float32), np.zeros(1, np.float32))
