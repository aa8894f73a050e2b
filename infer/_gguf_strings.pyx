# cython: language_level=3
"""Fast decoding of GGUF string arrays (vocabularies of 50k-260k tokens).

Used by infer.gguf when built; infer.gguf has a pure-Python loop doing the same.
Every length is checked against the buffer before any byte is touched.
"""
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF


def read_strings(const unsigned char[::1] buf, Py_ssize_t pos, Py_ssize_t count):
    """Decode ``count`` GGUF strings (u64 little-endian length, then UTF-8 bytes) from ``pos``.

    Returns ``(strings, end)`` on success, or ``(i, at, n)`` for the first string
    that does not fit: its index, the byte offset of its length field, and that
    length (-1 when the file ends inside the length itself).  Bytes that are not
    UTF-8 are kept as surrogates (``surrogateescape``).
    """
    cdef Py_ssize_t size = buf.shape[0]
    cdef Py_ssize_t i, k
    cdef unsigned long long n
    if pos < 0 or pos > size or count < 0 or count > (size - pos) // 8:
        raise ValueError(f"count: {count} strings cannot fit in {size - pos} bytes")
    out = PyList_New(count)
    for i in range(count):
        if size - pos < 8:
            return _error(out, i, pos, -1)
        n = 0
        for k in range(8):  # little-endian on any host
            n |= (<unsigned long long>buf[pos + k]) << (8 * k)
        if n > <unsigned long long>(size - pos - 8):
            return _error(out, i, pos, n)
        s = PyUnicode_DecodeUTF8(<const char *>&buf[pos + 8], <Py_ssize_t>n, "surrogateescape")
        Py_INCREF(s)  # PyList_SET_ITEM steals a reference
        PyList_SET_ITEM(out, i, s)
        pos += 8 + <Py_ssize_t>n
    return out, pos


cdef tuple _error(list out, Py_ssize_t i, Py_ssize_t pos, object n):
    # The unset slots of a PyList_New list are NULL: fill them before it is freed.
    cdef Py_ssize_t j
    for j in range(i, len(out)):
        Py_INCREF(None)
        PyList_SET_ITEM(out, j, None)
    return i, pos, n
