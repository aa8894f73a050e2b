"""Tensor and DType.

References: the `gguf` package (its type table, byte-shape helper and numpy
quantizers/dequantizers, written independently of our kernels) and
hand-computed values.
"""
from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

from infer.tensor import KERNEL_DTYPES, DType, Tensor

gguf = pytest.importorskip("gguf")
from gguf import quants as gq  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # noqa: E402


# ---- the type table ---------------------------------------------------------------------
def gguf_predates(names) -> str:
    """A skip reason when this gguf release does not know these types (the last
    release for Python 3.9, gguf 0.18, predates NVFP4 and Q1_0), else ""."""
    missing = sorted(set(names) - set(GGMLQuantizationType.__members__))
    return f"gguf {importlib.metadata.version('gguf')} does not know {', '.join(missing)}" if missing else ""


def test_dtype_ids_and_names_match_ggml():
    ref = {t.name: int(t) for t in GGMLQuantizationType}
    ours = {d.name: int(d) for d in DType}
    assert {name: ours.get(name) for name in ref} == ref
    if gguf_predates(ours):
        pytest.skip(gguf_predates(ours) + ": only the types it knows were compared")
    assert ours == ref


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.name)
def test_block_sizes_match_gguf_package(dtype):
    if gguf_predates([dtype.name]):
        pytest.skip(gguf_predates([dtype.name]))
    block, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType(int(dtype))]
    assert dtype.block_size == block
    if dtype == DType.Q8_1:
        # ggml's block_q8_1 is fp16 d + fp16 s + 32 int8 = 36; gguf-py keeps a 40-byte relic
        assert dtype.block_bytes == 36 and nbytes == 40
    else:
        assert dtype.block_bytes == nbytes


def test_parse():
    assert DType.parse("q4_k") is DType.Q4_K and DType.parse("BF16") is DType.BF16
    assert DType.parse(12) is DType.Q4_K and DType.parse(np.int32(8)) is DType.Q8_0
    with pytest.raises(ValueError, match="unknown format 'q9_9'"):
        DType.parse("q9_9")
    with pytest.raises(ValueError, match="unknown ggml type id 4"):
        DType.parse(4)
    with pytest.raises(TypeError, match="got float"):
        DType.parse(2.0)
    assert DType.Q6_K.row_bytes(512) == 420
    with pytest.raises(ValueError, match="not a whole number of Q6_K blocks of 256"):
        DType.Q6_K.row_bytes(576)


def test_kernel_dtypes_are_the_issue_list():
    assert KERNEL_DTYPES == {DType.F32, DType.F16, DType.BF16, DType.Q4_0, DType.Q4_1, DType.Q5_0,
                             DType.Q8_0, DType.Q4_K, DType.Q6_K,
                             # issue 11: the K and 4-bit non-linear formats
                             DType.Q5_1, DType.Q2_K, DType.Q3_K, DType.Q5_K, DType.IQ4_NL, DType.IQ4_XS,
                             # issue 11: the grid and ternary formats
                             DType.IQ2_XXS, DType.IQ2_XS, DType.IQ2_S, DType.IQ3_XXS, DType.IQ3_S,
                             DType.IQ1_S, DType.TQ1_0, DType.TQ2_0,
                             # gpt-oss's experts
                             DType.MXFP4}
    from infer import kernels
    for dtype in KERNEL_DTYPES:  # each one a format the kernels know by name
        assert kernels.TYPE_NAMES[kernels.type_id(int(dtype))] == dtype.name.lower()


# ---- geometry ---------------------------------------------------------------------------
GEOMETRY = [
    (DType.F32, (7,)), (DType.F16, (3, 5)), (DType.Q4_0, (3, 32)), (DType.Q4_1, (2, 3, 96)),
    (DType.Q8_0, (5, 544)), (DType.Q4_K, (2, 1, 3, 256)), (DType.Q6_K, (1, 768)),
    (DType.BF16, (4, 3)), (DType.Q5_0, (9, 64)), (DType.IQ4_XS, (2, 512)),
]


@pytest.mark.parametrize("dtype,shape", GEOMETRY, ids=lambda x: getattr(x, "name", str(x)))
def test_geometry_against_gguf_byte_shape(dtype, shape):
    byte_shape = gq.quant_shape_to_byte_shape(shape, GGMLQuantizationType(int(dtype)))
    data = np.arange(int(np.prod(byte_shape)), dtype=np.uint8) * 7  # distinct-ish bytes
    t = Tensor("w", dtype, shape, data)
    assert t.shape == shape and t.ne == tuple(reversed(shape))
    assert t.n_cols == shape[-1] and t.n_rows == int(np.prod(shape[:-1]))
    assert t.row_bytes == byte_shape[-1] and t.nbytes == data.size
    assert t.block_size == dtype.block_size
    # rows(): zero-copy views of whole rows
    last = t.rows(t.n_rows - 1)
    assert last.shape == (1, t.row_bytes) and np.shares_memory(last, data)
    np.testing.assert_array_equal(t.rows(0, t.n_rows).reshape(-1), data)
    np.testing.assert_array_equal(last[0], data.reshape(-1, byte_shape[-1])[-1])


def test_rows_bounds():
    t = Tensor("w", DType.F32, (3, 4), np.zeros(48, np.uint8))
    assert t.rows(3, 3).shape == (0, 16)
    for i, j in [(-1, 1), (2, 1), (0, 4)]:
        with pytest.raises(IndexError, match=r"outside 0\.\.3 of tensor 'w'"):
            t.rows(i, j)


def test_bad_shapes_and_sizes():
    with pytest.raises(ValueError, match="rows of 100 elements are not a whole number of Q4_K blocks of 256"):
        Tensor("w", DType.Q4_K, (4, 100), b"")
    with pytest.raises(ValueError, match="5 dimensions"):
        Tensor("w", DType.F32, (1, 1, 1, 1, 1), b"\0" * 4)
    with pytest.raises(ValueError, match="must be positive"):
        Tensor("w", DType.F32, (0, 4), b"")
    with pytest.raises(ValueError, match="17 bytes of data, but Q8_0 \\(1, 32\\) needs 34"):
        Tensor("w", DType.Q8_0, (1, 32), b"\0" * 17)
    with pytest.raises(ValueError, match="C-contiguous"):
        Tensor("w", DType.F32, (2,), np.zeros(4, np.float32)[::2])
    with pytest.raises(ValueError, match="not a whole number of Q4_0 blocks"):
        Tensor.quantize(np.zeros((2, 48), np.float32), "q4_0")


def test_strided_bytes_and_non_integer_dimensions_refused():
    # A strided uint8 array passed the contiguity check (only other dtypes were
    # checked) and failed later in the kernels or numpy, naming no tensor; a shape of
    # (2.7, 2) was taken as (2, 2) and True as 1.
    with pytest.raises(ValueError, match="tensor 'w': data must be C-contiguous"):
        Tensor("w", DType.Q4_0, (2, 32), np.zeros(72, np.uint8)[::2])
    for shape in ((2.7, 2), (True, 4), (np.float64(2.0), 2)):
        with pytest.raises(TypeError, match="tensor 'w': shape: expected a sequence of ints"):
            Tensor("w", DType.F32, shape, np.zeros(16, np.uint8))
    assert Tensor("w", DType.F32, (np.int64(2), np.uint8(2)), np.zeros(16, np.uint8)).shape == (2, 2)


def test_views_of_plain_types():
    values = np.array([[1.5, -2.0, 3.25], [0.0, 7.0, -0.5]], np.float32)
    t = Tensor("w", DType.F32, (2, 3), values.tobytes())
    np.testing.assert_array_equal(t.view(), values)
    np.testing.assert_array_equal(t.to_f32(), values)
    np.testing.assert_array_equal(t.to_f16(), values.astype(np.float16))
    assert t.to_f32().flags.writeable and not np.shares_memory(t.to_f32(), t.data)
    i32 = Tensor("i", DType.I32, (3,), np.array([1, -2, 3], np.int32))
    np.testing.assert_array_equal(i32.view(), [1, -2, 3])
    with pytest.raises(TypeError, match="Q4_0 is a block format"):
        Tensor("q", DType.Q4_0, (32,), np.zeros(18, np.uint8)).view()


def test_bf16_decodes_exactly():
    # hand-computed bf16 bit patterns: 1.0, -2.0, 0.15625 (0x3E20), +inf, smallest subnormal
    bits = np.array([0x3F80, 0xC000, 0x3E20, 0x7F80, 0x0001], np.uint16)
    t = Tensor("b", DType.BF16, (5,), bits)
    expected = np.array([1.0, -2.0, 0.15625, np.inf, np.float32(2.0 ** -133)], np.float32)
    np.testing.assert_array_equal(t.to_f32(), expected)
    ref = gq.dequantize(bits.view(np.uint8), GGMLQuantizationType.BF16)
    np.testing.assert_array_equal(t.to_f32(), ref)


def test_dequantize_rows_into_out():
    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    t = Tensor("w", DType.F32, (4, 3), values)
    out = np.empty(6, np.float32)
    got = t.dequantize_rows(1, 3, out=out)
    assert got is out
    np.testing.assert_array_equal(out, values[1:3].reshape(-1))
    np.testing.assert_array_equal(t.dequantize_rows(2), values[2:3])
    with pytest.raises(ValueError, match="float32 array of 6 elements"):
        t.dequantize_rows(1, 3, out=np.empty(5, np.float32))


def test_unsupported_formats_say_so():
    t = Tensor("w", DType.IQ1_M, (256,), np.zeros(56, np.uint8))
    with pytest.raises(NotImplementedError, match="do not convert IQ1_M"):
        t.to_f32()
    with pytest.raises(NotImplementedError, match="do not produce IQ1_M"):
        Tensor.quantize(np.zeros(256, np.float32), DType.IQ1_M)


# ---- conversions through the kernels ---------------------------------------------------------
def kernel_ready(dtype: DType, op: str = "dequantize") -> bool:
    try:
        from infer import kernels
    except ImportError:
        return False
    bs, bb = dtype.block_size, dtype.block_bytes
    try:
        if op == "dequantize":
            kernels.dequantize(np.zeros(bb, np.uint8), int(dtype), np.empty(bs, np.float32))
        else:
            kernels.quantize(np.zeros(bs, np.float32), int(dtype), np.empty(bb, np.uint8))
    except (ValueError, AttributeError):
        return False
    return True


QUANT_TYPES = [DType.Q4_0, DType.Q4_1, DType.Q5_0, DType.Q8_0, DType.Q4_K, DType.Q6_K, DType.F16, DType.BF16]
ROW_BLOCKS = [1, 3, 17]


def random_blocks(dtype: DType, n_rows: int, n_blocks: int, rng) -> np.ndarray:
    """Random valid bytes: random quants, scales set to small finite fp16 values."""
    f32 = rng.standard_normal((n_rows, n_blocks * dtype.block_size)).astype(np.float32)
    if dtype in (DType.Q4_K, DType.Q6_K):
        # gguf-py has no K-quant quantizer: random bytes with the fp16 scales made finite
        raw = rng.integers(0, 256, (n_rows * n_blocks, dtype.block_bytes), dtype=np.uint8)
        d_at = {DType.Q4_K: [0, 2], DType.Q6_K: [208]}[dtype]
        for off in d_at:
            raw[:, off:off + 2] = np.frombuffer(
                rng.uniform(-0.05, 0.05, n_rows * n_blocks).astype(np.float16).tobytes(), np.uint8).reshape(-1, 2)
        return raw.reshape(-1)
    return np.asarray(gq.quantize(f32, GGMLQuantizationType(int(dtype)))).view(np.uint8).reshape(-1)


@pytest.mark.parametrize("dtype", QUANT_TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n_blocks", ROW_BLOCKS)
def test_to_f32_and_f16_match_gguf_dequantize(dtype, n_blocks):
    if dtype.is_quantized and not kernel_ready(dtype):
        pytest.skip(f"kernels for {dtype.name} not built yet")
    rng = np.random.default_rng(int(dtype) * 100 + n_blocks)
    n_rows = 3
    raw = random_blocks(dtype, n_rows, n_blocks, rng)
    shape = (n_rows, n_blocks * dtype.block_size)
    t = Tensor("w", dtype, shape, raw)
    ref = gq.dequantize(raw.reshape(n_rows, -1), GGMLQuantizationType(int(dtype))).astype(np.float32)
    got = t.to_f32()
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(t.to_f16(), ref.astype(np.float16))
    np.testing.assert_allclose(t.dequantize_rows(1, 3), ref[1:3], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [DType.Q4_0, DType.Q4_1, DType.Q5_0, DType.Q8_0, DType.BF16, DType.F16],
                         ids=lambda d: d.name)
@pytest.mark.parametrize("n_blocks", ROW_BLOCKS)
def test_quantize_matches_gguf_quantize(dtype, n_blocks):
    if dtype != DType.F16 and not kernel_ready(dtype, "quantize"):
        pytest.skip(f"kernels for {dtype.name} not built yet")
    rng = np.random.default_rng(7 + n_blocks)
    x = rng.standard_normal((5, n_blocks * dtype.block_size)).astype(np.float32) * 3
    t = Tensor.quantize(x, dtype, name="q")
    assert t.name == "q" and t.shape == x.shape and t.dtype == dtype
    ref = np.asarray(gq.quantize(x, GGMLQuantizationType(int(dtype)))).view(np.uint8).reshape(-1)
    # gguf-py rounds with np.round-like helpers; allow a rare one-step quant difference per block
    mismatch = np.count_nonzero(t.data != ref)
    assert mismatch <= t.nbytes // 200, f"{mismatch} of {t.nbytes} bytes differ"
    np.testing.assert_allclose(t.to_f32(), gq.dequantize(ref.reshape(5, -1), GGMLQuantizationType(int(dtype))),
                               atol=np.abs(x).max() / 7)


@pytest.mark.parametrize("dtype,tol", [(DType.Q4_K, 0.12), (DType.Q6_K, 0.03)], ids=lambda d: getattr(d, "name", ""))
def test_k_quant_round_trip_error(dtype, tol):
    if not kernel_ready(dtype, "quantize") or not kernel_ready(dtype):
        pytest.skip(f"kernels for {dtype.name} not built yet")
    x = np.random.default_rng(3).standard_normal((4, 768)).astype(np.float32)
    t = Tensor.quantize(x, dtype)
    # decode with gguf-py, which shares nothing with our kernels
    ref = gq.dequantize(t.data.reshape(4, -1), GGMLQuantizationType(int(dtype)))
    np.testing.assert_allclose(t.to_f32(), ref, rtol=1e-6, atol=1e-7)
    rms = np.sqrt(np.mean((ref - x) ** 2)) / np.sqrt(np.mean(x ** 2))
    assert rms < tol
