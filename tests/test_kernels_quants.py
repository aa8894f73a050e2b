"""infer.kernels quantized kernels against independent references.

References: the `gguf` package's numpy quantizers and dequantizers (bit-exact), and
float64 numpy decoders written here from the block layouts in
/work/shared/reference/ggml-facts.md.  Every test runs on every kernel set the CPU has
(the `isa` fixture) and on awkward block counts.
"""
import threading

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants as gq

import infer.kernels as K

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")

BLOCK_COUNTS = [1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97]
WEIGHT_FORMATS = ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q8_0"]
GGUF_QUANTIZED = ["q8_0", "q4_0", "q4_1", "q5_0", "bf16", "f16"]
BLOCK = {"f32": 1, "f16": 1, "bf16": 1, "q4_0": 32, "q4_1": 32, "q5_0": 32, "q8_0": 32, "q8_1": 32}
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "q4_0": 18, "q4_1": 20, "q5_0": 22, "q8_0": 34, "q8_1": 36}
# Float formats are tested on the same element counts as the block formats.
ELEMS_PER_COUNT = 32


def gguf_type(name):
    return T[name.upper()]


def awkward_values(n_blocks, seed):
    """n_blocks x 32 float32 values: each block a different hard case for quantizers."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_blocks, 32)).astype(np.float32)
    for b in range(n_blocks):
        kind = (b + seed) % 9
        if kind == 0:
            x[b] = 0.0                                      # d = 0 -> id = 0
        elif kind == 1:
            x[b] *= np.float32(10.0 ** rng.uniform(-30, 30))  # extreme (finite) scales
        elif kind == 2:
            x[b] = np.arange(-16, 16) + 0.5                 # exact ties for Q8_0 (amax 15.5)
            x[b, 0] = -127.0                                # d = 1 -> x*id = k + .5
        elif kind == 3:
            x[b] = rng.integers(-8, 8, 32)                  # Q4_0/Q5_0 with d = 1: x + 8.5 ties
            x[b, 5] = -8.0
        elif kind == 4:
            x[b] = rng.integers(0, 15, 32) + 0.5            # Q4_1 with d = 1: (x-min)*1 + .5
            x[b, 0], x[b, 1] = 0.0, 15.0
        elif kind == 5:
            x[b, :] = 3.0                                   # constant block
            x[b, 7] = -3.0                                  # +/- amax: the first one wins
        elif kind == 6:
            x[b] = np.float32(1e-3) * rng.standard_normal(32)
            x[b, 31] = -x[b].__abs__().max() * 2            # largest element last
        elif kind == 7:
            x[b] = np.float32(6.0e4) * rng.standard_normal(32)  # near the fp16 limit
    return x.reshape(-1)


# ---- quantize: bit-identical to gguf ---------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("count", BLOCK_COUNTS)
@pytest.mark.parametrize("fmt", GGUF_QUANTIZED)
def test_quantize_matches_gguf(isa, fmt, count, seed):
    x = awkward_values(count, seed)
    want = gq.quantize(x, gguf_type(fmt)).view(np.uint8).reshape(-1)
    out = np.full(want.size, 0xAB, np.uint8)
    assert K.quantize(x, fmt, out) is out
    np.testing.assert_array_equal(out, want)


ACTIVATION_BLOCKS = {"q8_0": (32, 34), "q8_1": (32, 36), "q8_0s": (32, 36), "q8_k": (256, 292)}


@pytest.mark.parametrize("fmt", sorted(ACTIVATION_BLOCKS))
def test_activation_blocks_quantize_alone(isa, fmt):
    """The fused decode step quantizes the down product's input piece by piece, as the
    gate/up chunks finish (csrc/transformer_block.c): every activation format must give
    a run of blocks the same bytes alone as within the whole row (pieces cut at random
    block boundaries, so a SIMD quantizer's group of blocks starts anywhere)."""
    qb, nbytes = ACTIVATION_BLOCKS[fmt]
    n_blocks = 37
    x = awkward_values(n_blocks * qb // 32, 7)   # 32-value blocks of awkward values
    whole = np.empty(n_blocks * nbytes, np.uint8)
    K.quantize(x, fmt, whole)
    rng = np.random.default_rng(1)
    for _ in range(20):
        cuts = np.sort(rng.choice(np.arange(1, n_blocks), size=int(rng.integers(1, 6)), replace=False))
        pieces = []
        for lo, hi in zip([0, *cuts], [*cuts, n_blocks]):
            part = np.empty((hi - lo) * nbytes, np.uint8)
            K.quantize(np.ascontiguousarray(x[lo * qb:hi * qb]), fmt, part)
            pieces.append(part)
        np.testing.assert_array_equal(np.concatenate(pieces), whole, err_msg=f"cuts {cuts}")


def ref_quantize_q8_1(x):
    """ggml quantize_row_q8_1_ref in numpy: float32 d = amax/127, q = roundf(x*id),
    s = fp16(float32(sum q) * d)."""
    blocks = x.reshape(-1, 32).astype(np.float32)
    out = np.zeros((blocks.shape[0], 36), np.uint8)
    for b, v in enumerate(blocks):
        d = np.float32(np.abs(v).max()) / np.float32(127)
        idv = np.float32(1) / d if d != 0 else np.float32(0)
        p = (v * idv).astype(np.float64)                    # the float32 product, exactly
        q = (np.sign(p) * np.floor(np.abs(p) + 0.5)).astype(np.int8)  # half away from zero
        s = np.float32(int(q.astype(np.int32).sum())) * d
        out[b, 0:2] = np.array([d], np.float16).view(np.uint8)
        out[b, 2:4] = np.array([s], np.float16).view(np.uint8)
        out[b, 4:] = q.view(np.uint8)
    return out.reshape(-1)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("count", BLOCK_COUNTS)
def test_quantize_q8_1_matches_ggml_rule(isa, count, seed):
    x = awkward_values(count, seed)
    # Keep s finite in fp16: the extreme-scale blocks overflow it, which is not a rule.
    x = np.clip(x, -1e3, 1e3).astype(np.float32)
    want = ref_quantize_q8_1(x)
    out = np.empty(want.size, np.uint8)
    K.quantize(x, "q8_1", out)
    np.testing.assert_array_equal(out, want)


# ---- dequantize: bit-identical to gguf / the layout -----------------------------------------

def random_blocks(fmt, count, seed):
    """Valid encoded data: random payload bits, finite random fp16 scales."""
    rng = np.random.default_rng(seed + 1000)
    n = count * ELEMS_PER_COUNT
    if fmt == "f32":
        return rng.standard_normal(n).astype(np.float32).view(np.uint8)
    if fmt == "f16":
        return rng.standard_normal(n).astype(np.float16).view(np.uint8)
    if fmt == "bf16":
        return rng.integers(0, 1 << 16, n, dtype=np.uint16).view(np.uint8)  # any bits, NaN too
    raw = rng.integers(0, 256, (count, BYTES[fmt]), dtype=np.uint8)
    n_scales = 2 if fmt in ("q4_1", "q8_1") else 1
    scales = (rng.standard_normal((count, n_scales)) * 10.0 ** rng.uniform(-4, 2, (count, 1)))
    raw[:, : 2 * n_scales] = scales.astype(np.float16).view(np.uint8)
    return raw.reshape(-1)


def ref_dequantize_q8_1(raw):
    b = raw.reshape(-1, 36)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
    return (b[:, 4:].copy().view(np.int8).astype(np.float32) * d).reshape(-1)


def reference_dequantize(fmt, raw):
    if fmt == "q8_1":
        return ref_dequantize_q8_1(raw)
    if fmt == "bf16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(gq.dequantize(raw, gguf_type(fmt)), np.float32).reshape(-1)


@pytest.mark.parametrize("count", BLOCK_COUNTS)
@pytest.mark.parametrize("fmt", WEIGHT_FORMATS + ["q8_1"])
def test_dequantize_matches_reference(isa, fmt, count):
    raw = random_blocks(fmt, count, count)
    want = reference_dequantize(fmt, raw)
    out = np.full(want.size, np.nan, np.float32)
    assert K.dequantize(raw, fmt, out) is out
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("count", BLOCK_COUNTS)
@pytest.mark.parametrize("fmt", WEIGHT_FORMATS + ["q8_1"])
def test_dequantize_f16_matches_reference(isa, fmt, count):
    raw = random_blocks(fmt, count, count + 7)
    want = reference_dequantize(fmt, raw)
    with np.errstate(over="ignore", invalid="ignore"):
        want16 = want.astype(np.float16)
    out = np.zeros(want.size, np.float16)
    assert K.dequantize_f16(raw, fmt, out) is out
    finite = np.isfinite(want16)
    np.testing.assert_array_equal(out.view(np.uint16)[finite], want16.view(np.uint16)[finite])
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want16))
    # uint16 output receives the same bits
    bits = np.zeros(want.size, np.uint16)
    K.dequantize_f16(raw, fmt, bits)
    np.testing.assert_array_equal(bits, out.view(np.uint16))


def test_dequantize_accepts_read_only_sources():
    x = awkward_values(5, 3)
    raw = gq.quantize(x, T.Q4_1).view(np.uint8).reshape(-1)
    want = np.empty(x.size, np.float32)
    K.dequantize(raw, "q4_1", want)
    ro = raw.copy()
    ro.flags.writeable = False
    for src in (bytes(raw), ro, memoryview(bytes(raw)), raw.reshape(5, 20)):
        out = np.empty(x.size, np.float32)
        K.dequantize(src, "Q4_1", out)
        np.testing.assert_array_equal(out, want)
    out = np.empty(x.size, np.float32)
    K.dequantize(raw, T.Q4_1, out)      # IntEnum
    np.testing.assert_array_equal(out, want)
    K.dequantize(raw, 3, out)           # plain id
    np.testing.assert_array_equal(out, want)


# ---- dot products: matvec / matmul ----------------------------------------------------------

def decode_activations(fmt, xq, n):
    """float64 values and (for q8_1) per-block s of an activation buffer of n values."""
    if fmt == "f32":
        return xq.view(np.float32).astype(np.float64), None
    b = xq.reshape(-1, BYTES[fmt])
    d = b[:, 0:2].copy().view(np.float16).astype(np.float64)
    off = 4 if fmt == "q8_1" else 2
    vals = (b[:, off:].copy().view(np.int8).astype(np.float64) * d).reshape(-1)
    s = b[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(-1) if fmt == "q8_1" else None
    return vals, s


def reference_matvec(fmt, w_raw, rows, n, xq, act):
    """float64: dequantized weights . dequantized activations.  Q4_1's min term uses
    the activation's stored s (fp16 of d*sum(q)), which is what the format defines."""
    w = reference_dequantize(fmt, w_raw).astype(np.float64).reshape(rows, n)
    a, s = decode_activations(act, xq, n)
    if fmt != "q4_1":
        return w @ a
    wb = w_raw.reshape(rows, n // 32, 20)
    d = wb[:, :, 0:2].copy().view(np.float16).astype(np.float64)[..., 0]
    m = wb[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
    scaled = (w - np.repeat(m, 32, axis=1)) @ a     # sum of d*nib*y; w - m = d*nib exactly
    del d
    return scaled + m @ s


def make_weights(fmt, rows, n, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, n)).astype(np.float32)
    w[:, ::7] *= 3
    return w, gq.quantize(w, gguf_type(fmt)).view(np.uint8).reshape(rows, -1)


@pytest.mark.parametrize("count", BLOCK_COUNTS)
@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_matvec_against_float64(isa, fmt, count):
    n, rows = count * 32, 1 + count % 5 * 7          # 1..29 rows
    w_f, w = make_weights(fmt, rows, n, count)
    x = awkward_values(count, count + 1)
    x = np.clip(x, -50, 50).astype(np.float32)       # activations as a model makes them
    act = K.vec_dot_type(fmt)

    xq = np.empty(K.activation_bytes(fmt, n), np.uint8)
    assert K.quantize_activations(x, fmt, xq) is xq
    if act == "q8_0":
        np.testing.assert_array_equal(xq, gq.quantize(x, T.Q8_0).view(np.uint8).reshape(-1))
    elif act == "q8_1":
        np.testing.assert_array_equal(xq, ref_quantize_q8_1(x))
    else:
        np.testing.assert_array_equal(xq.view(np.float32), x)

    out_q = np.full(rows, np.nan, np.float32)
    assert K.matvec_q(w, fmt, xq, out_q) is out_q
    out = np.full(rows, np.nan, np.float32)
    assert K.matvec(w.reshape(-1), fmt, x, out) is out
    np.testing.assert_array_equal(out, out_q)

    # Tight: against the same dequantized operands in float64.  The kernels sum each
    # block's integer products exactly, then accumulate blocks in float32, so the error
    # is a few float32 roundings per term: <= 3e-5 * sum |w_i * y_i|.
    ref = reference_matvec(fmt, w.reshape(-1), rows, n, xq, act)
    wd = reference_dequantize(fmt, w.reshape(-1)).astype(np.float64).reshape(rows, n)
    a, _ = decode_activations(act, xq, n)
    mag = np.abs(wd) @ np.abs(a)
    np.testing.assert_array_less(np.abs(out - ref), 3e-5 * mag + 1e-30)

    # Loose: against the float activations.  Q8 rounding moves each y_i by at most
    # amax(block)/254, the fp16 scale by 2^-11 relative; Q4_1's s adds |m|*32*amax*2^-11.
    x64 = x.astype(np.float64)
    ref_x = wd @ x64
    if act == "f32":
        bound = 3e-5 * (np.abs(wd) @ np.abs(x64))
    else:
        amax = np.repeat(np.abs(x64).reshape(-1, 32).max(axis=1), 32)
        bound = np.abs(wd) @ (amax * (0.5 / 127 + 2.0 ** -10)) + 3e-5 * mag
        if fmt == "q4_1":
            m = w.reshape(rows, -1, 20)[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
            bound += np.abs(m) @ (amax[::32] * 32 * 2.0 ** -10)
    np.testing.assert_array_less(np.abs(out - ref_x), bound + 1e-30)


@pytest.mark.parametrize("tokens", [1, 2, 5, 33, 70])
@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_matmul_against_float64(isa, fmt, tokens):
    count = 3 + tokens % 4
    n, rows = count * 32, 37
    _, w = make_weights(fmt, rows, n, tokens)
    rng = np.random.default_rng(tokens)
    X = rng.standard_normal((tokens, n)).astype(np.float32)
    out = np.full((tokens, rows), np.nan, np.float32)
    assert K.matmul(w, fmt, X, out) is out

    Xq = np.empty(K.activation_bytes(fmt, n, tokens), np.uint8)
    K.quantize_activations(X, fmt, Xq)
    out_q = np.full((tokens, rows), np.nan, np.float32)
    assert K.matmul_q(w, fmt, Xq, out_q) is out_q
    np.testing.assert_array_equal(out, out_q)

    act = K.vec_dot_type(fmt)
    row_bytes = K.activation_bytes(fmt, n)
    for t in range(tokens):
        xq_t = Xq[t * row_bytes:(t + 1) * row_bytes]
        ref = reference_matvec(fmt, w.reshape(-1), rows, n, xq_t, act)
        wd = reference_dequantize(fmt, w.reshape(-1)).astype(np.float64).reshape(rows, n)
        a, _ = decode_activations(act, xq_t, n)
        np.testing.assert_array_less(np.abs(out[t] - ref), 3e-5 * (np.abs(wd) @ np.abs(a)) + 1e-30)
        # each token's row equals the single-token mat-vec bit for bit
        one = np.empty(rows, np.float32)
        K.matvec_q(w, fmt, xq_t, one)
        np.testing.assert_array_equal(out[t], one)


@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q8_0", "f16"])
def test_threads_give_identical_results(isa, fmt):
    rows, n, tokens = 300, 576, 3
    _, w = make_weights(fmt, rows, n, 5)
    X = np.random.default_rng(9).standard_normal((tokens, n)).astype(np.float32)
    before = K.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 3):
            K.set_num_threads(threads)
            out = np.empty((tokens, rows), np.float32)
            K.matmul(w, fmt, X, out)
            v = np.empty(rows, np.float32)
            K.matvec(w, fmt, X[1], v)
            np.testing.assert_array_equal(v, out[1])
            results.append(out)
    finally:
        K.set_num_threads(before)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_concurrent_callers_from_python_threads():
    rows, n = 256, 576
    _, w = make_weights("q4_1", rows, n, 11)
    xs = np.random.default_rng(3).standard_normal((8, n)).astype(np.float32)
    want = np.empty((8, rows), np.float32)
    K.matmul(w, "q4_1", xs, want)
    errors = []

    def worker(i):
        out = np.empty(rows, np.float32)
        for _ in range(30):
            K.matvec(w, "q4_1", xs[i], out)
            if not np.array_equal(out, want[i]):
                errors.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---- misuse ---------------------------------------------------------------------------------

def q41(count=2):
    x = awkward_values(count, 0)
    return x, gq.quantize(x, T.Q4_1).view(np.uint8).reshape(-1)


def test_unknown_qtype():
    x, raw = q41()
    out = np.empty(x.size, np.float32)
    with pytest.raises(ValueError, match="^qtype:"):
        K.dequantize(raw, "q9_9", out)
    with pytest.raises(ValueError, match="^qtype:"):
        K.dequantize(raw, 123, out)
    with pytest.raises(TypeError, match="^qtype:"):
        K.dequantize(raw, 1.5j, out)
    with pytest.raises(ValueError, match="^qtype:"):
        K.matvec(raw, "q8_1", x[:32], np.empty(1, np.float32))   # not a weight format


def test_wrong_dtypes():
    x, raw = q41()
    out = np.empty(x.size, np.float32)
    with pytest.raises(TypeError, match="^src:"):
        K.dequantize(raw.view(np.int8), "q4_1", out)
    with pytest.raises(TypeError, match="^out:"):
        K.dequantize(raw, "q4_1", np.empty(x.size, np.float64))
    with pytest.raises(TypeError, match="^src:"):
        K.quantize(x.astype(np.float64), "q4_1", np.empty(raw.size, np.uint8))
    with pytest.raises(TypeError, match="^out:"):
        K.dequantize_f16(raw, "q4_1", np.empty(x.size, np.float32))
    with pytest.raises(TypeError, match="^src:"):
        K.dequantize([1, 2, 3], "q4_1", out)
    with pytest.raises(TypeError, match="^x:"):
        K.matvec(raw, "q4_1", x.astype(np.float64), np.empty(1, np.float32))


def test_non_contiguous():
    x, raw = q41(4)
    with pytest.raises(ValueError, match="^src:"):
        K.dequantize(np.repeat(raw, 2)[::2], "q4_1", np.empty(x.size, np.float32))
    with pytest.raises(ValueError, match="^out:"):
        K.dequantize(raw, "q4_1", np.empty(2 * x.size, np.float32)[::2])
    with pytest.raises(ValueError, match="^src:"):
        K.quantize(np.repeat(x, 2)[::2], "q4_1", np.empty(raw.size, np.uint8))
    w = raw.reshape(4, 20)
    with pytest.raises(ValueError, match="^x:"):
        K.matvec(w, "q4_1", np.repeat(x[:32], 2)[::2], np.empty(4, np.float32))
    X = np.zeros((64, 3), np.float32).T
    with pytest.raises(ValueError, match="^X:"):
        K.matmul(w, "q4_1", X[:, :32], np.empty((3, 4), np.float32))


def test_wrong_lengths():
    x, raw = q41(3)
    with pytest.raises(ValueError, match="^src:"):
        K.dequantize(raw[:-1], "q4_1", np.empty(x.size, np.float32))
    with pytest.raises(ValueError, match="^out:"):
        K.dequantize(raw, "q4_1", np.empty(x.size - 1, np.float32))
    with pytest.raises(ValueError, match="^out:"):
        K.dequantize_f16(raw, "q4_1", np.empty(x.size - 32, np.float16))
    with pytest.raises(ValueError, match="^src:"):
        K.quantize(x[:-3], "q4_1", np.empty(raw.size, np.uint8))
    with pytest.raises(ValueError, match="^out:"):
        K.quantize(x, "q4_1", np.empty(raw.size - 1, np.uint8))
    with pytest.raises(ValueError, match="^n:"):
        K.activation_bytes("q4_1", 33)


def test_read_only_outputs():
    x, raw = q41()
    out = np.empty(x.size, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="^out:.*read-only"):
        K.dequantize(raw, "q4_1", out)
    with pytest.raises(ValueError, match="^out:.*read-only"):
        K.quantize(x, "q4_1", bytes(raw.size))
    f16 = np.empty(x.size, np.float16)
    f16.flags.writeable = False
    with pytest.raises(ValueError, match="^out:.*read-only"):
        K.dequantize_f16(raw, "q4_1", f16)
    with pytest.raises(ValueError, match="^buf:.*read-only"):
        K.quantize_activations(x, "q4_1", bytes(K.activation_bytes("q4_1", x.size)))


def test_mismatched_matvec_shapes():
    rows, n = 6, 64
    _, w = make_weights("q8_0", rows, n, 1)
    x = np.ones(n, np.float32)
    with pytest.raises(ValueError, match="^out:"):
        K.matvec(w, "q8_0", x, np.empty(rows - 1, np.float32))
    with pytest.raises(ValueError, match="^w:"):
        K.matvec(w, "q8_0", np.ones(96, np.float32), np.empty(rows, np.float32))
    with pytest.raises(ValueError, match="^w:"):
        K.matvec(w.reshape(-1)[:-34], "q8_0", np.ones(96, np.float32), np.empty(rows, np.float32))
    with pytest.raises(ValueError, match="^x:"):
        K.matvec(w, "q8_0", np.ones(40, np.float32), np.empty(rows, np.float32))
    X = np.ones((3, n), np.float32)
    with pytest.raises(ValueError, match="^out:"):
        K.matmul(w, "q8_0", X, np.empty((3, rows + 1), np.float32))
    with pytest.raises(ValueError, match="^out:"):
        K.matmul(w, "q8_0", X, np.empty((2, rows), np.float32))
    with pytest.raises(ValueError, match="^X:"):
        K.matmul(w, "q8_0", x, np.empty((1, rows), np.float32))
    xq = np.empty(K.activation_bytes("q8_0", n), np.uint8)
    K.quantize_activations(x, "q8_0", xq)
    with pytest.raises(ValueError, match="^xq:"):
        K.matvec_q(w, "q8_0", xq[:-1], np.empty(rows, np.float32))
    with pytest.raises(ValueError, match="^buf:"):
        K.quantize_activations(X, "q8_0", xq)
    with pytest.raises(ValueError, match="^Xq:"):
        K.matmul_q(w, "q8_0", xq[:-2], np.empty((2, rows), np.float32))


def test_missing_kernel_is_a_value_error():
    # Q8_K (activations only) has no f16 dequantizer: the table entry is NULL.
    with pytest.raises(ValueError, match="^qtype: no dequantize_f16 kernel for q8_k"):
        K.dequantize_f16(np.zeros(292, np.uint8), "q8_k", np.empty(256, np.float16))


def test_matvec_accepts_read_only_weights(tmp_path):
    rows, n = 9, 96
    _, w = make_weights("q4_1", rows, n, 2)
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    want = np.empty(rows, np.float32)
    K.matvec(w, "q4_1", x, want)
    path = tmp_path / "w.bin"
    w.tofile(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r", shape=w.shape)
    ro = w.copy()
    ro.flags.writeable = False
    for src in (mapped, ro, bytes(w), memoryview(bytes(w)), w.reshape(-1)):
        out = np.empty(rows, np.float32)
        K.matvec(src, "q4_1", x, out)
        np.testing.assert_array_equal(out, want)
    del mapped


def test_bad_weight_buffers():
    rows, n = 4, 64
    _, w = make_weights("q8_0", rows, n, 1)
    x = np.ones(n, np.float32)
    out = np.empty(rows, np.float32)
    wide = np.zeros((rows, 2 * w.shape[1]), np.uint8)
    wide[:, : w.shape[1]] = w
    with pytest.raises(ValueError, match="^w:"):
        K.matvec(wide[:, : w.shape[1]], "q8_0", x, out)          # rows not contiguous
    with pytest.raises(TypeError, match="^w:"):
        K.matvec(w.view(np.int8), "q8_0", x, out)
    with pytest.raises(TypeError, match="^w:"):
        K.matvec(w.reshape(-1).view(np.uint16), "q8_0", x, out)
    with pytest.raises(ValueError, match="^w:"):
        K.matvec(w.reshape(2, 2, -1), "q8_0", x, out)
    with pytest.raises(TypeError, match="^w:"):
        K.matvec(None, "q8_0", x, out)


def test_c_matmul_rows_computes_only_its_range(isa):
    """infer_matmul_rows (C API for fused callers) against the Python mat-mul."""
    import ctypes

    lib = ctypes.CDLL(K.__file__)
    f = lib.infer_matmul_rows
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64,
                  ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
    rows, n, tokens = 23, 96, 3
    for fmt in ("q4_1", "q8_0", "f16"):
        _, w = make_weights(fmt, rows, n, 4)
        X = np.random.default_rng(2).standard_normal((tokens, n)).astype(np.float32)
        want = np.empty((tokens, rows), np.float32)
        K.matmul(w, fmt, X, want)
        Xq = np.empty(K.activation_bytes(fmt, n, tokens), np.uint8)
        K.quantize_activations(X, fmt, Xq)
        stride = rows + 5
        out = np.full((tokens, stride), -7.0, np.float32)
        r0, r1 = 3, 18
        rc = f(K.type_id(fmt), w.ctypes.data, w.shape[1], n, r0, r1, Xq.ctypes.data, tokens,
               out.ctypes.data, stride)
        assert rc == 0
        # Rows are grouped by four from r0, so a row may take the one-row kernel here and
        # the four-row kernel in the full product: equal up to float32 summation order.
        np.testing.assert_allclose(out[:, r0:r1], want[:, r0:r1], rtol=1e-5, atol=1e-5)
        assert (out[:, :r0] == -7.0).all() and (out[:, r1:] == -7.0).all()
    assert f(5, w.ctypes.data, 0, n, 0, 1, Xq.ctypes.data, 1, out.ctypes.data, 1) == -1


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
# Forking a process with live worker threads is what this test is about; Python 3.12+
# warns about exactly that.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_pool_works_in_a_forked_child():
    import os

    rows, n = 512, 576
    _, w = make_weights("q8_0", rows, n, 6)
    x = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    before = K.get_num_threads()
    K.set_num_threads(2)
    try:
        want = np.empty(rows, np.float32)
        K.matvec(w, "q8_0", x, want)           # starts the parent's worker
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:                            # child: the pool must not wait for ghosts
            out = np.empty(rows, np.float32)
            K.matvec(w, "q8_0", x, out)
            os.write(wfd, b"1" if np.array_equal(out, want) else b"0")
            os._exit(0)
        os.close(wfd)
        import select
        ready, _, _ = select.select([r], [], [], 30)
        if not ready:                           # a child stuck waiting for the parent's workers
            os.kill(pid, 9)
        got = os.read(r, 1) if ready else b"timeout"
        os.waitpid(pid, 0)
        assert got == b"1"
    finally:
        K.set_num_threads(before)


NESTED_SCRIPT = r"""
import ctypes, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import infer.kernels as K
from gguf import quants as gq, GGMLQuantizationType as T
lib = ctypes.CDLL(K.__file__)
rows, n = 512, 576
w = gq.quantize(np.random.default_rng(0).standard_normal((rows, n)).astype(np.float32), T.Q8_0)
w = np.ascontiguousarray(w.view(np.uint8).reshape(rows, -1))
x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
want = np.empty(rows, np.float32)
K.matvec(w, "q8_0", x, want)
outs = np.zeros((4, rows), np.float32)
lib.infer_matvec.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64,
                             ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)

def share(arg, ith, nth):   # a task that calls a threaded kernel: must run it inline
    lib.infer_matvec(8, w.ctypes.data, w.shape[1], rows, n, x.ctypes.data, outs[ith].ctypes.data, None)
    lib.infer_set_num_threads(2)
    lib.infer_get_num_threads()

task = TASK(share)
lib.infer_parallel_run.argtypes = [TASK, ctypes.c_void_p]
K.set_num_threads(2)
for _ in range(20):
    lib.infer_parallel_run(task, None)
nth = K.get_num_threads()
assert all(np.array_equal(outs[i], want) for i in range(nth)), "wrong result"
print("ok")
"""


def test_kernels_called_inside_a_pool_task_run_inline():
    """A fused caller runs kernels from inside infer_parallel_run: the nested mat-vec
    must run on that thread, and thread-count calls must not wait for the pool's lock."""
    import subprocess
    import sys

    from under_test import IMPORT_ROOT
    r = subprocess.run([sys.executable, "-c", NESTED_SCRIPT, IMPORT_ROOT], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_sizes_do_not_wrap():
    # The products are taken in Python ints: 2**62 f32 values are 2**64 bytes, not 0.
    with pytest.raises(ValueError, match="^n:"):
        K.row_bytes("f32", 2**62)
    with pytest.raises(ValueError, match="^n_tokens:"):
        K.activation_bytes("q4_0", 256, 2**60)
    assert K.row_bytes("q4_0", 2**40) == 2**40 // 32 * 18
    assert K.activation_bytes("q4_0", 256, 2**20) == 8 * 34 * 2**20
    with pytest.raises(TypeError, match="^n:"):
        K.row_bytes("f32", 1.5)
    with pytest.raises(ValueError, match="^n:"):
        K.row_bytes("f32", -4)
    # n alone can wrap too: 2**62 f32 activations are 2**64 bytes (was 0), and
    # 2**63 - 32 q8_0 values 34/32 of that (was negative)
    for fmt, n in (("f32", 2**62), ("q4_0", 2**63 - 32), ("q4_0", 2**63), ("q4_k", 2**64)):
        with pytest.raises(ValueError, match="^n: .* exceed the largest buffer size"):
            K.activation_bytes(fmt, n)
    for bad in (32.0, True):   # as row_bytes: no floats, no bools
        with pytest.raises(TypeError, match="^n:"):
            K.activation_bytes("q4_0", bad)
        with pytest.raises(TypeError, match="^n_tokens:"):
            K.activation_bytes("q4_0", 32, bad)
    assert K.activation_bytes("q4_0", np.int64(64), np.uint8(3)) == 3 * 2 * 34


@pytest.mark.parametrize("bad", [True, False, np.bool_(True), 3.0, "3"])
def test_type_id_takes_no_bools_or_floats(bad):
    with pytest.raises((TypeError, ValueError), match="^qtype:"):
        K.type_id(bad)
    assert K.type_id(np.int64(3)) == 3 and K.type_id(T.Q4_1) == 3


def test_overlapping_buffers_rejected():
    x, raw = q41(4)
    # In-place dequantize: the output's floats overwrite blocks not yet read.
    buf = np.zeros(x.size * 4, np.uint8)
    buf[:raw.size] = raw
    with pytest.raises(ValueError, match="^out: shares memory with src"):
        K.dequantize(buf[:raw.size], "q4_1", buf.view(np.float32))
    with pytest.raises(ValueError, match="^out: shares memory with src"):
        K.quantize(buf.view(np.float32), "q4_1", buf[:raw.size])
    with pytest.raises(ValueError, match="^out: shares memory with src"):
        K.dequantize_f16(buf[:raw.size], "q4_1", buf[:x.size * 2].view(np.float16))
    xa = np.zeros(64 + 4, np.float32)
    with pytest.raises(ValueError, match="^buf: shares memory with x"):
        K.quantize_activations(xa[:64], "q4_1", xa.view(np.uint8)[:K.activation_bytes("q4_1", 64)])
    w = raw.reshape(4, 20)  # 4 rows of one block
    xs = np.ones(36, np.float32)
    with pytest.raises(ValueError, match="^out: shares memory with x"):
        K.matvec(w, "q4_1", xs[:32], xs[30:34])
    wf = np.zeros(8 * 32 * 4, np.uint8)
    with pytest.raises(ValueError, match="^out: shares memory with w"):
        K.matvec(wf, "f32", np.ones(32, np.float32), wf[:32].view(np.float32))
    X = np.ones((2, 34), np.float32)
    with pytest.raises(ValueError, match="^out: shares memory with X"):
        K.matmul(w, "q4_1", X.reshape(-1)[:64].reshape(2, 32), X.reshape(-1)[60:68].reshape(2, 4))
    xq = np.zeros(K.activation_bytes("q4_1", 32) + 16, np.uint8)
    with pytest.raises(ValueError, match="^out: shares memory with xq"):
        K.matvec_q(w, "q4_1", xq[:36], xq[:16].view(np.float32))
    # Disjoint buffers still work and match the reference.
    out = np.empty(x.size, np.float32)
    np.testing.assert_array_equal(K.dequantize(raw, "q4_1", out), gq.dequantize(raw, T.Q4_1))


def test_big_endian_floats_rejected():
    x = np.ones(32, np.float32)
    w = np.zeros((2, 32 * 4), np.uint8)
    with pytest.raises(TypeError, match="^Xq:.*byte order"):
        K.matmul_q(w, "f32", x.astype(">f4").reshape(1, 32), np.zeros((1, 2), np.float32))
    with pytest.raises(TypeError, match="^xq:.*byte order"):
        K.matvec_q(w, "f32", x.astype(">f4"), np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="^x:"):
        K.matvec(w, "f32", x.astype(">f4"), np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="^src:"):
        K.quantize(x.astype(">f4"), "q4_1", np.zeros(20, np.uint8))
    with pytest.raises(TypeError, match="^out:"):
        K.dequantize(np.zeros(20, np.uint8), "q4_1", np.zeros(32, ">f4"))


def test_strided_float_activations_rejected_by_name():
    # f32 activations taken as floats: a strided view failed in memoryview.cast with
    # a message that named no argument
    w = np.zeros((2, 32 * 4), np.uint8)
    x = np.ones((2, 64), np.float32)
    with pytest.raises(ValueError, match="^xq: must be C-contiguous"):
        K.matvec_q(w, "f32", x[0, ::2], np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="^Xq: must be C-contiguous"):
        K.matmul_q(w, "f32", x[:, ::2], np.zeros((2, 2), np.float32))


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_odd_offsets_are_read_correctly(fmt):
    # buf[1:] and general.alignment = 1 put blocks at odd addresses, where the C
    # structs cannot be read (UBSan: misaligned access); inputs are copied to an
    # aligned buffer first, so the numbers are those of an aligned call.
    x = awkward_values(3, 5).reshape(-1)
    nb = K.row_bytes(fmt, x.size)
    raw = K.quantize(x, fmt, np.empty(nb, np.uint8))
    odd = np.empty(nb + 1, np.uint8)[1:]
    odd[:] = raw
    want = gq.dequantize(raw, gguf_type(fmt)).reshape(-1) if fmt in GGUF_QUANTIZED else \
        K.dequantize(raw, fmt, np.empty(x.size, np.float32))
    np.testing.assert_array_equal(K.dequantize(odd, fmt, np.empty(x.size, np.float32)), want)
    xs = np.empty(x.size * 4 + 1, np.uint8)[1:].view(np.float32)   # an unaligned float32 array
    xs[:] = x
    np.testing.assert_array_equal(K.quantize(xs, fmt, np.empty(nb, np.uint8)), raw)
    w_odd = np.empty(2 * nb + 1, np.uint8)[1:]
    w_odd[:nb] = raw
    w_odd[nb:] = raw
    ref = K.matvec(np.concatenate([raw, raw]).reshape(2, nb), fmt, x, np.empty(2, np.float32))
    np.testing.assert_array_equal(K.matvec(w_odd.reshape(2, nb), fmt, xs, np.empty(2, np.float32)), ref)
    np.testing.assert_array_equal(
        K.matmul(w_odd.reshape(2, nb), fmt, xs.reshape(1, -1), np.empty((1, 2), np.float32)), ref[None])
    with pytest.raises(ValueError, match="^out: starts at an address"):
        K.dequantize(raw, fmt, np.empty(x.size * 4 + 1, np.uint8)[1:].view(np.float32))


def test_ops_reject_unaligned_arrays():
    x = np.empty(65 * 4 + 1, np.uint8)[1:].view(np.float32)
    x[:] = 1.0
    with pytest.raises(ValueError, match="^x: must be aligned"):
        K.softmax(x)
