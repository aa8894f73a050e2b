# cython: language_level=3
"""infer.kernels: the C kernels as typed-memoryview functions.

Every entry point checks dtype, length, contiguity and output size with the GIL
held, then releases the GIL for the C call.  Buffers are passed in by the caller
(``out=``); nothing on the hot path allocates.
"""
from libc.stdint cimport int64_t, uint8_t, uint16_t, int8_t
from infer._ckernels cimport *

import os

import numpy as _np

# Format names as users write them (case-insensitive) -> ggml type ids.
TYPE_IDS = {
    "f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q8_0": 8, "q8_1": 9,
    "q4_k": 12, "q6_k": 14, "q8_k": 15, "bf16": 30,
    "q5_1": 7, "q2_k": 10, "q3_k": 11, "q5_k": 13, "iq4_nl": 20, "iq4_xs": 23,
    "iq2_xxs": 16, "iq2_xs": 17, "iq3_xxs": 18, "iq1_s": 19, "iq3_s": 21, "iq2_s": 22,
    "tq1_0": 34, "tq2_0": 35, "mxfp4": 39,
    # infer's own: weights repacked at load in groups of 16 rows (csrc/repack.h),
    # and the activation format three of them pair with
    "q4_0_r16": 56, "q4_1_r16": 57, "q8_0_r16": 58, "q8_0s": 59, "q5_0_r16": 60, "q5_1_r16": 65,
    "iq4_nl_r16": 66,
    "q4_k_r16": 61, "q6_k_r16": 62, "q5_k_r16": 63, "iq4_xs_r16": 64, "q3_k_r16": 67,
    "q2_k_r16": 68,   # csrc/repack_k.h
}
TYPE_NAMES = {v: k for k, v in TYPE_IDS.items()}


cpdef int type_id(qtype) except -1:
    """The ggml type id of a format name ("q4_1", any case), an int id, or an enum member."""
    if isinstance(qtype, str):
        key = qtype.lower()
        if key not in TYPE_IDS:
            raise ValueError(f"qtype: unknown format {qtype!r}; known: {', '.join(sorted(TYPE_IDS))}")
        return TYPE_IDS[key]
    # operator.index, not int(): True, 1.5 and "1" are not type ids.
    try:
        if isinstance(qtype, (bool, _np.bool_)):
            raise TypeError
        value = _operator.index(qtype)
    except TypeError:
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


def row_bytes(qtype, n):
    """Bytes of one row of n elements; ValueError if n is not a whole number of blocks
    (or the row could not be a buffer)."""
    cdef int t = type_id(qtype)
    cdef int bs = infer_type_block_size(t)
    count = _count(n, "n")
    if count % bs:
        raise ValueError(f"n: {count} elements is not a whole number of {TYPE_NAMES[t]} blocks of {bs}")
    return _buffer_size((count // bs) * infer_type_block_bytes(t), "n")


def vec_dot_type(qtype):
    """Name of the activation format that a weight format's dot product pairs with."""
    cdef int t = infer_type_vec_dot_type(type_id(qtype))
    if t < 0:
        raise ValueError(f"qtype: {qtype!r} is not a weight format")
    return TYPE_NAMES[t]


def _isa_names():
    return [infer_isa_name(i).decode() for i in range(INFER_ISA_COUNT)]


def _available_isas():
    cdef unsigned mask = infer_isa_available()
    return [infer_isa_name(i).decode() for i in range(INFER_ISA_COUNT) if mask & (1u << i)]


def _forced_isa():
    """The kernel set INFER_ISA selects, or None when it is unset or was ignored."""
    env = os.environ.get("INFER_ISA") or None
    return env if env in _available_isas() else None


def capabilities():
    """What this CPU can run and which kernel set is active.  ``forced`` is the set
    INFER_ISA chose, None when it is unset or names a set this CPU cannot run."""
    return {
        "active": infer_isa_name(infer_isa_active()).decode(),
        "available": _available_isas(),
        "num_threads": infer_get_num_threads(),
        "forced": _forced_isa(),
    }


def _warn_about_environment():
    """Say on stderr (warnings) when INFER_ISA or INFER_NUM_THREADS is not used as written."""
    import warnings

    def warn(message):
        # No Python frame to point at (this runs at import): name the module.
        warnings.warn_explicit(message, RuntimeWarning, "infer.kernels", 0)

    env = os.environ.get("INFER_ISA")
    if env:
        active = infer_isa_name(infer_isa_active()).decode()
        if env not in _isa_names():
            warn(f"INFER_ISA={env!r} is not a kernel set (valid: "
                 f"{', '.join(_isa_names())}); using {active}")
        elif env not in _available_isas():
            warn(f"INFER_ISA={env!r}: this CPU cannot run it (it can run "
                 f"{', '.join(_available_isas())}); using {active}")
    env = os.environ.get("INFER_NUM_THREADS")
    if env and env.strip():
        n = infer_get_num_threads()
        text = env.strip()
        if not (text.isdigit() and int(text) >= 1):
            warn(f"INFER_NUM_THREADS={env!r} is not a whole number >= 1; ignored, "
                 f"using {n} threads")
        elif int(text) > n:
            warn(f"INFER_NUM_THREADS={env!r} is above the thread pool's limit; "
                 f"using {n} threads")


def set_isa(name):
    """Switch the active kernel set (for tests and benchmarks); ValueError if unavailable."""
    cdef int i
    for i in range(INFER_ISA_COUNT):
        if infer_isa_name(i).decode() == name:
            if infer_set_isa(i) != 0:
                raise ValueError(f"isa: {name!r} is not available on this CPU")
            return
    raise ValueError(f"isa: unknown kernel set {name!r}")


def set_num_threads(n):
    """Number of threads the kernels use (>= 1; above the pool's limit, the limit
    with a warning)."""
    if isinstance(n, (bool, _np.bool_)):
        raise TypeError("n: expected an integer, got bool")
    try:
        n = _operator.index(n)
    except TypeError:
        raise TypeError(f"n: expected an integer, got {type(n).__name__}") from None
    if n < 1:   # not _count: -1 is refused for being below 1, not below 0
        raise ValueError(f"n: thread count must be >= 1, got {n}")
    infer_set_num_threads(<int>min(n, 1 << 30))
    cdef int got = infer_get_num_threads()
    if got < n:
        import warnings

        warnings.warn(f"n: {n} threads is above the thread pool's limit; using {got}",
                      RuntimeWarning, 2)


def get_num_threads():
    return infer_get_num_threads()


include "kernels_checks.pxi"
include "kernels_quants.pxi"
include "kernels_ops.pxi"
include "kernels_decode.pxi"
include "kernels_block.pxi"

_warn_about_environment()
