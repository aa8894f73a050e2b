# cython: language_level=3
"""Native helpers of infer.gguf, which has a pure-Python fallback for each.

- `read_strings`: fast decoding of GGUF string arrays (vocabularies of 50k-260k
  tokens).  Every length is checked against the buffer before any byte is touched.
- `fd_size`: an open file's size, read with the GIL held.
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


cdef extern from *:
    """
    #include <sys/types.h>
    #include <sys/stat.h>
    #ifdef _WIN32
    static long long infer_fd_size(int fd) { struct _stat64 st; return _fstat64(fd, &st) ? -1 : (long long)st.st_size; }
    #else
    static long long infer_fd_size(int fd) { struct stat st; return fstat(fd, &st) ? -1 : (long long)st.st_size; }
    #endif
    """
    long long infer_fd_size(int fd)


def fd_size(int fd):
    """The size of the open file ``fd``, or -1 if fstat fails (the caller then asks
    os.fstat for the error).

    The GIL stays held: one fstat is about a microsecond, while os.fstat releases
    the GIL and must win it back, behind whichever threads took it meanwhile (the
    serving scheduler's check before each step waited 0.2 ms on average, 2 ms at
    worst, behind the request threads it had just woken)."""
    return infer_fd_size(fd)
