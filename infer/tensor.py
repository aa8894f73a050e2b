"""Tensor: one weight as a typed view of raw GGUF bytes.

Shape convention.  GGUF (like ggml) lists dimensions fastest-varying first:
``ne = (ne0, ne1, ...)`` where ``ne0`` is the length of one contiguous row.
`Tensor.shape` is the reverse, the order numpy and PyTorch users expect: rows
first, ``shape[-1] == ne[0]``.  A Llama ``ffn_down.weight`` with
``ne = (1536, 576)`` has ``shape == (576, 1536)``: 576 rows of 1536 elements,
so ``W @ x`` takes an ``x`` of 1536 elements.

Quantized formats store each row as whole blocks of ``block_size`` elements
(32 for Q4_0/Q4_1/Q5_0/Q8_0, 256 for the K-quants), so a row must be a whole
number of blocks; ``row_bytes`` is then ``ne0 / block_size * block_bytes``.
"""
from __future__ import annotations

import math
import operator
from enum import IntEnum
from typing import Any, Optional, Sequence, Union

import numpy as np
from numpy.typing import NDArray

MAX_DIMS = 4


class DType(IntEnum):
    """Tensor formats, numbered as ggml numbers them (these ids are what GGUF stores).

    Every ggml format is listed so that any GGUF file can be opened and
    described; `DType.kernel_supported` tells which ones the kernels convert.
    """

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41

    @classmethod
    def parse(cls, value: Union[str, int, "DType"]) -> "DType":
        """A DType from a name ("q4_k", any case), a ggml id or a DType; ValueError otherwise."""
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                raise ValueError(f"dtype: unknown format {value!r}") from None
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            try:
                return cls(int(value))
            except ValueError:
                raise ValueError(f"dtype: unknown ggml type id {int(value)}") from None
        raise TypeError(f"dtype: expected a format name or ggml type id, got {type(value).__name__}")

    @property
    def block_size(self) -> int:
        """Elements per block (1 for the plain float and integer formats)."""
        return _TRAITS[self][0]

    @property
    def block_bytes(self) -> int:
        """Bytes per block."""
        return _TRAITS[self][1]

    @property
    def is_quantized(self) -> bool:
        return self.block_size > 1

    @property
    def kernel_supported(self) -> bool:
        """True if infer.kernels can dequantize this format and multiply by it (and
        quantize to it, except the IQ and TQ formats: those need an importance matrix)."""
        return self in KERNEL_DTYPES

    def row_bytes(self, n: int) -> int:
        """Bytes of a row of ``n`` elements; ValueError unless n is a whole number of blocks."""
        bs = self.block_size
        if n < 0 or n % bs:
            raise ValueError(
                f"row of {n} elements is not a whole number of {self.name} blocks of {bs} elements")
        return n // bs * self.block_bytes


# (elements per block, bytes per block), from ggml's type traits.  Q8_1 is 36
# bytes (fp16 d and s); gguf-py still lists an older 40-byte layout.
_TRAITS = {
    DType.F32: (1, 4), DType.F16: (1, 2), DType.BF16: (1, 2), DType.F64: (1, 8),
    DType.I8: (1, 1), DType.I16: (1, 2), DType.I32: (1, 4), DType.I64: (1, 8),
    DType.Q4_0: (32, 18), DType.Q4_1: (32, 20), DType.Q5_0: (32, 22), DType.Q5_1: (32, 24),
    DType.Q8_0: (32, 34), DType.Q8_1: (32, 36),
    DType.Q2_K: (256, 84), DType.Q3_K: (256, 110), DType.Q4_K: (256, 144),
    DType.Q5_K: (256, 176), DType.Q6_K: (256, 210), DType.Q8_K: (256, 292),
    DType.IQ2_XXS: (256, 66), DType.IQ2_XS: (256, 74), DType.IQ3_XXS: (256, 98),
    DType.IQ1_S: (256, 50), DType.IQ4_NL: (32, 18), DType.IQ3_S: (256, 110),
    DType.IQ2_S: (256, 82), DType.IQ4_XS: (256, 136), DType.IQ1_M: (256, 56),
    DType.TQ1_0: (256, 54), DType.TQ2_0: (256, 66), DType.MXFP4: (32, 17),
    DType.NVFP4: (64, 36), DType.Q1_0: (128, 18),
}

#: Formats the kernels convert to and from float32.
KERNEL_DTYPES = frozenset({
    DType.F32, DType.F16, DType.BF16, DType.Q4_0, DType.Q4_1, DType.Q5_0,
    DType.Q8_0, DType.Q4_K, DType.Q6_K,
    DType.Q5_1, DType.Q2_K, DType.Q3_K, DType.Q5_K, DType.IQ4_NL, DType.IQ4_XS,
    DType.IQ2_XXS, DType.IQ2_XS, DType.IQ2_S, DType.IQ3_XXS, DType.IQ3_S, DType.IQ1_S,
    DType.TQ1_0, DType.TQ2_0, DType.MXFP4,
})



def supported_formats() -> str:
    """The formats the kernels convert, as a readable list ("F32, F16, Q4_0, ...")."""
    return ", ".join(d.name for d in sorted(KERNEL_DTYPES))


def unsupported_format_message(name: str, dtype: DType) -> str:
    """What a load says of a tensor in a format the kernels do not compute with."""
    return (f"{name}: tensor type {dtype.name} ({int(dtype)}) is not supported; "
            f"supported: {supported_formats()}")


# Formats whose elements numpy can view directly (little-endian).
_NUMPY_DTYPES: dict[DType, np.dtype[Any]] = {
    DType.F32: np.dtype("<f4"), DType.F16: np.dtype("<f2"), DType.F64: np.dtype("<f8"),
    DType.I8: np.dtype("i1"), DType.I16: np.dtype("<i2"), DType.I32: np.dtype("<i4"),
    DType.I64: np.dtype("<i8"), DType.BF16: np.dtype("<u2"),
}

Shape = tuple[int, ...]


def check_shape(shape: Sequence[int], dtype: DType, what: str = "shape") -> Shape:
    """Validate a numpy-order shape for ``dtype``; returns it as a tuple of ints."""
    try:
        # operator.index, not int(): a dimension of 2.7 (or True) is a caller's bug, not 2
        if any(isinstance(d, (bool, np.bool_)) for d in shape):
            raise TypeError
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"{what}: expected a sequence of ints, got {shape!r}") from None
    if not 1 <= len(dims) <= MAX_DIMS:
        raise ValueError(f"{what}: {len(dims)} dimensions; tensors have 1 to {MAX_DIMS}")
    if any(d <= 0 for d in dims):
        raise ValueError(f"{what}: dimensions must be positive, got {dims}")
    if dims[-1] % dtype.block_size:
        raise ValueError(
            f"{what}: rows of {dims[-1]} elements are not a whole number of "
            f"{dtype.name} blocks of {dtype.block_size} elements")
    return dims


class Tensor:
    """A named tensor: format, shape and its raw bytes (usually a read-only view of a file map).

    ``data`` is a flat uint8 array of exactly ``nbytes`` bytes.  Nothing is copied
    on construction; `to_f32` / `to_f16` convert through the kernels.
    """

    __slots__ = ("name", "dtype", "shape", "data")

    def __init__(self, name: str, dtype: Union[DType, str, int], shape: Sequence[int], data: Any) -> None:
        self.name = str(name)
        self.dtype = DType.parse(dtype)
        self.shape: Shape = check_shape(shape, self.dtype, f"tensor {self.name!r}: shape")
        arr = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
        # a strided 1-D uint8 array too: rows(), view() and the kernels take the bytes as packed
        if not arr.flags.c_contiguous:
            raise ValueError(f"tensor {self.name!r}: data must be C-contiguous")
        if arr.dtype != np.uint8 or arr.ndim != 1:
            arr = arr.reshape(-1).view(np.uint8)
        if arr.size != self.nbytes:
            raise ValueError(
                f"tensor {self.name!r}: {arr.size} bytes of data, but {self.dtype.name} "
                f"{self.shape} needs {self.nbytes}")
        self.data: NDArray[Any] = arr

    # ---- geometry -------------------------------------------------------------
    @property
    def ne(self) -> Shape:
        """Dimensions in GGUF order (fastest-varying first): ``tuple(reversed(shape))``."""
        return tuple(reversed(self.shape))

    @property
    def n_cols(self) -> int:
        """Elements per row (GGUF ``ne[0]``)."""
        return self.shape[-1]

    @property
    def n_rows(self) -> int:
        """Number of rows: the product of all dimensions but the last."""
        return math.prod(self.shape[:-1])

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def block_size(self) -> int:
        return self.dtype.block_size

    @property
    def row_bytes(self) -> int:
        return self.dtype.row_bytes(self.n_cols)

    @property
    def nbytes(self) -> int:
        return self.n_rows * self.row_bytes

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.dtype.name}, shape={self.shape})"

    # ---- views ------------------------------------------------------------------
    def rows(self, i: int, j: Optional[int] = None) -> NDArray[Any]:
        """Rows ``i`` to ``j`` (exclusive; ``j=None`` means ``i+1``) as a zero-copy
        uint8 view of shape ``(j - i, row_bytes)``."""
        if j is None:
            j = i + 1
        if not 0 <= i <= j <= self.n_rows:
            raise IndexError(f"rows: [{i}, {j}) is outside 0..{self.n_rows} of tensor {self.name!r}")
        rb = self.row_bytes
        return self.data[i * rb:j * rb].reshape(j - i, rb)

    def view(self) -> NDArray[Any]:
        """Zero-copy typed view for plain formats (F32, F16, F64, I8..I64; BF16 as uint16 bits)."""
        np_dtype = _NUMPY_DTYPES.get(self.dtype)
        if np_dtype is None:
            raise TypeError(f"view: {self.dtype.name} is a block format; use to_f32() or rows()")
        return self.data.view(np_dtype).reshape(self.shape)

    # ---- conversions ----------------------------------------------------------
    def to_f32(self) -> NDArray[Any]:
        """A new float32 array of ``shape``, dequantized by the kernels."""
        return self.dequantize_rows(0, self.n_rows).reshape(self.shape)

    def to_f16(self) -> NDArray[Any]:
        """A new float16 array of ``shape``, dequantized by the kernels."""
        out = np.empty(self.shape, dtype=np.float16)
        flat = out.reshape(-1)
        if not self.dtype.is_quantized:
            # exact to float32, then IEEE round-to-nearest-even, as the kernels do
            flat[:] = self.dequantize_rows(0, self.n_rows).reshape(-1)
        else:
            self._check_kernel_format()
            from . import kernels

            kernels.dequantize_f16(self.data, int(self.dtype), flat)
        return out

    def dequantize_rows(self, i: int, j: Optional[int] = None, out: Optional[NDArray[Any]] = None) -> NDArray[Any]:
        """Rows ``i`` to ``j`` (``j=None``: just row ``i``) as float32 of shape ``(j - i, n_cols)``.

        ``out``, if given, must be a C-contiguous float32 array of that many
        elements; it is filled and returned (no allocation: embedding lookups).
        """
        src = self.rows(i, j)
        n = src.shape[0] * self.n_cols
        if out is None:
            out = np.empty((src.shape[0], self.n_cols), dtype=np.float32)
        elif out.dtype != np.float32 or out.size != n or not out.flags.c_contiguous:
            raise ValueError(f"out: expected a C-contiguous float32 array of {n} elements")
        flat = out.reshape(-1)
        if self.dtype == DType.BF16:
            # bf16 -> f32 is exact: the 16 bits are the top half of the float32
            flat.view(np.uint32)[:] = src.reshape(-1).view("<u2").astype(np.uint32) << 16
        elif self.dtype in _NUMPY_DTYPES:
            flat[:] = src.reshape(-1).view(_NUMPY_DTYPES[self.dtype])
        else:
            self._check_kernel_format()
            from . import kernels

            kernels.dequantize(src.reshape(-1), int(self.dtype), flat)
        return out

    def _check_kernel_format(self) -> None:
        if not self.dtype.kernel_supported:
            raise NotImplementedError(
                f"tensor {self.name!r}: infer's kernels do not convert {self.dtype.name}")

    @classmethod
    def quantize(cls, array: Any, dtype: Union[DType, str, int], name: str = "") -> "Tensor":
        """A new tensor holding ``array`` (any float array, rows last) encoded as ``dtype``."""
        dt = DType.parse(dtype)
        src = np.ascontiguousarray(array, dtype=np.float32)
        shape = check_shape(src.shape, dt, "array shape")
        out = np.empty(math.prod(shape[:-1]) * dt.row_bytes(shape[-1]), dtype=np.uint8)
        encode_f32(src.reshape(-1), dt, out)
        return cls(name, dt, shape, out)


def encode_f32(src: NDArray[Any], dtype: DType, out: NDArray[Any]) -> None:
    """Encode flat float32 ``src`` (whole blocks) as ``dtype`` into the uint8 array ``out``."""
    if dtype == DType.F32:
        out.view(np.float32)[:] = src
    elif dtype == DType.F16:
        out.view(np.float16)[:] = src  # IEEE round-to-nearest-even, as F16C does
    elif dtype.kernel_supported:
        from . import kernels

        kernels.quantize(src, int(dtype), out)
    else:
        raise NotImplementedError(f"quantize: infer's kernels do not produce {dtype.name}")
