# Checks every entry point shares: buffer overlap and sizes that must not wrap.
#
# Included by kernels.pyx before the kernels.  A kernel that reads one buffer while
# writing another gives wrong numbers when the two share memory, unless it is
# written element by element in place; each entry point says which (the docstrings'
# "may be x"), and _check_disjoint rejects every other overlap.

from libc.stdint cimport INT64_MAX, INT64_MIN
from libc.string cimport memcpy

import operator as _operator
import sys as _sys

cdef Py_ssize_t _PY_SSIZE_T_MAX = _sys.maxsize


cdef int _check_disjoint(const void *a, Py_ssize_t a_bytes, str a_name,
                         const void *b, Py_ssize_t b_bytes, str b_name,
                         bint same_ok=False) except -1:
    """ValueError if [a, a + a_bytes) and [b, b + b_bytes) share a byte, unless
    same_ok and they are exactly the same span (an in-place call)."""
    cdef size_t pa = <size_t>a, pb = <size_t>b
    if a_bytes <= 0 or b_bytes <= 0:
        return 0
    if same_ok and pa == pb and a_bytes == b_bytes:
        return 0
    if pa < pb + <size_t>b_bytes and pb < pa + <size_t>a_bytes:
        how = "must be the same buffer or not overlap" if same_ok else "must not overlap"
        raise ValueError(f"{a_name}: shares memory with {b_name}; the two {how}")
    return 0


cdef object _count(object value, str name):
    """value as a non-negative Python int (no bool, no float); ValueError/TypeError."""
    if isinstance(value, (bool, _np.bool_)):
        raise TypeError(f"{name}: expected an integer, got bool")
    try:
        n = _operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}") from None
    if n < 0:
        raise ValueError(f"{name}: must be >= 0, got {n}")
    return n


cdef int64_t _int64(object value, str name, int64_t lo=INT64_MIN) except? -1:
    """value as a C int64 in [lo, 2**63 - 1]: an integer (no bool, no float: a position
    of 1.5 is a caller's bug, not position 1); TypeError/ValueError naming it."""
    if type(value) is int and lo <= value <= INT64_MAX:   # the common case, fast
        return value
    if isinstance(value, (bool, _np.bool_)):
        raise TypeError(f"{name}: expected an integer, got bool")
    try:
        n = _operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}") from None
    if n < lo:
        raise ValueError(f"{name}: must be >= {lo}, got {n}")
    if n > INT64_MAX:
        raise ValueError(f"{name}: {n} does not fit a 64-bit integer")
    return n


cdef object _buffer_size(object n_bytes, str what):
    """n_bytes (a Python int) if a buffer can be that large; ValueError otherwise."""
    if n_bytes > _PY_SSIZE_T_MAX:
        raise ValueError(f"{what}: {n_bytes} bytes exceed the largest buffer size "
                         f"({_PY_SSIZE_T_MAX})")
    return n_bytes


# ---- alignment ------------------------------------------------------------------------
# The kernels read a format's blocks through its C struct: 2-byte alignment for the
# fp16 scales of every block format (and F16/BF16), 4 for F32 and Q8_K's float scale.
# A GGUF file with general.alignment = 1, or a slice such as buf[1:], can put data at
# an odd address: inputs are then copied to an aligned buffer (correct, slower),
# outputs must be aligned (a copy would not be written back).

cdef int _type_align(int t):
    # MXFP4's 17-byte blocks (csrc/infer_kernels.h) are read bytewise: any address
    return 4 if t == 0 or t == 15 else 1 if t == 39 else 2


cdef inline bint _misaligned(const void *p, int align) noexcept:
    return (<size_t>p) % <size_t>align != 0


cdef object _aligned_copy(const void *p, Py_ssize_t n_bytes):
    """An aligned uint8 numpy copy of n_bytes at p (numpy allocations are 16-aligned)."""
    copy = _np.empty(n_bytes, dtype=_np.uint8)
    cdef uint8_t[::1] c = copy
    if n_bytes:
        memcpy(&c[0], p, n_bytes)
    return copy


cdef int _check_aligned_out(const void *p, int align, str name) except -1:
    if _misaligned(p, align):
        raise ValueError(f"{name}: starts at an address that is not a multiple of {align} "
                         f"(an odd-offset view?); outputs must be aligned to their element type")
    return 0
