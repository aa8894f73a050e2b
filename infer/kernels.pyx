# cython: language_level=3
"""infer.kernels: the C kernels as typed-memoryview functions.

Every entry point checks dtype, length, contiguity and output size with the GIL
held, then releases the GIL for the C call.  Buffers are passed in by the caller
(``out=``); nothing on the hot path allocates.
"""
from libc.stdint cimport int64_t, uint8_t, uint16_t, int8_t
from infer._ckernels cimport *

import os

# Format names as users write them (case-insensitive) -> ggml type ids.
TYPE_IDS = {
    "f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q8_0": 8, "q8_1": 9,
    "q4_k": 12, "q6_k": 14, "q8_k": 15, "bf16": 30,
    "q5_1": 7, "q2_k": 10, "q3_k": 11, "q5_k": 13, "iq4_nl": 20, "iq4_xs": 23,
}
TYPE_NAMES = {v: k for k, v in TYPE_IDS.items()}


cpdef int type_id(qtype) except -1:
    """The ggml type id of a format name ("q4_1", any case), an int id, or an enum member."""
    if isinstance(qtype, str):
        key = qtype.lower()
        if key not in TYPE_IDS:
            raise ValueError(f"qtype: unknown format {qtype!r}; known: {', '.join(sorted(TYPE_IDS))}")
        return TYPE_IDS[key]
    try:
        value = int(qtype)
    except (TypeError, ValueError):
        raise TypeError(f"qtype: expected a format name or type id, got {type(qtype).__name__}") from None
    if value not in TYPE_NAMES:
        raise ValueError(f"qtype: unsupported type id {value}")
    return value


def block_size(qtype):
    """Elements per block of a format (1 for f32/f16/bf16)."""
    return infer_type_block_size(type_id(qtype))


def block_bytes(qtype):
    """Bytes per block of a format."""
    return infer_type_block_bytes(type_id(qtype))


def row_bytes(qtype, int64_t n):
    """Bytes of one row of n elements; ValueError if n is not a whole number of blocks."""
    cdef int t = type_id(qtype)
    cdef int bs = infer_type_block_size(t)
    if n < 0 or n % bs:
        raise ValueError(f"n: {n} elements is not a whole number of {TYPE_NAMES[t]} blocks of {bs}")
    return (n // bs) * infer_type_block_bytes(t)


def vec_dot_type(qtype):
    """Name of the activation format that a weight format's dot product pairs with."""
    cdef int t = infer_type_vec_dot_type(type_id(qtype))
    if t < 0:
        raise ValueError(f"qtype: {qtype!r} is not a weight format")
    return TYPE_NAMES[t]


def capabilities():
    """What this CPU can run and which kernel set is active."""
    cdef unsigned mask = infer_isa_available()
    available = [infer_isa_name(i).decode() for i in range(INFER_ISA_COUNT) if mask & (1u << i)]
    return {
        "active": infer_isa_name(infer_isa_active()).decode(),
        "available": available,
        "num_threads": infer_get_num_threads(),
        "forced": os.environ.get("INFER_ISA") or None,
    }


def set_isa(name):
    """Switch the active kernel set (for tests and benchmarks); ValueError if unavailable."""
    cdef int i
    for i in range(INFER_ISA_COUNT):
        if infer_isa_name(i).decode() == name:
            if infer_set_isa(i) != 0:
                raise ValueError(f"isa: {name!r} is not available on this CPU")
            return
    raise ValueError(f"isa: unknown kernel set {name!r}")


def set_num_threads(int n):
    """Number of threads the kernels use (>= 1)."""
    if n < 1:
        raise ValueError(f"n: thread count must be >= 1, got {n}")
    infer_set_num_threads(n)


def get_num_threads():
    return infer_get_num_threads()


include "kernels_quants.pxi"
include "kernels_ops.pxi"
include "kernels_decode.pxi"
include "kernels_llama.pxi"
include "kernels_gemma3.pxi"
