# What the fused decode step (kernels_block.pxi) binds: the weight-matrix
# description of csrc/decode_jobs.h and the helpers that bind arrays.
from libc.stdint cimport uint8_t

cdef extern from "decode_jobs.h" nogil:
    ctypedef struct infer_decode_matrix:
        const uint8_t *data
        int type
        int act_type
        int64_t rows
        int64_t cols
        size_t row_bytes
    size_t infer_decode_act_bytes(int64_t n, int64_t n_tokens) noexcept


cdef infer_decode_matrix _decode_matrix(object w, list keep) except *:
    """w: (data as uint8 rows, qtype, act_type, rows, cols)."""
    cdef const uint8_t[:, ::1] d = w[0]
    cdef infer_decode_matrix m
    m.type = type_id(w[1])
    m.act_type = type_id(w[2])
    m.rows = w[3]
    m.cols = w[4]
    if d.shape[0] != m.rows:
        raise ValueError(f"matrix: data has {d.shape[0]} rows, expected {m.rows}")
    m.row_bytes = d.shape[1]
    if <int64_t>m.row_bytes != row_bytes(m.type, m.cols):
        raise ValueError(f"matrix: {m.row_bytes} bytes per row do not hold {m.cols} values of {TYPE_NAMES[m.type]}")
    m.data = &d[0, 0]
    keep.append(w[0])
    return m


cdef const float *_decode_vector(object a, int64_t n, list keep) except NULL:
    cdef const float[::1] v = a
    if v.shape[0] != n:
        raise ValueError(f"vector: expected {n} values, got {v.shape[0]}")
    keep.append(a)
    return &v[0]


cdef float *_decode_buffer(object a, list keep) except NULL:
    cdef float[::1] v = a.reshape(-1)
    keep.append(a)
    return &v[0]
