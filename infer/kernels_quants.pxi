# Quantized kernels: dequantize, quantize, activation quantization, mat-vec, mat-mul.
#
# Included by kernels.pyx.  Every function takes its output from the caller and
# returns it.  Typed memoryviews are acquired first (the fast path); when that fails,
# _buffer_error says which argument is wrong and why.  All checks run with the GIL
# held, the C call without it.

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_FORMAT

# Buffer-format prefixes that mean native byte order ("<" only on a little-endian host).
cdef str _NATIVE_ORDER = "<=@" if _sys.byteorder == "little" else ">=@!"


cdef str _strip_order(str fmt):
    return fmt.lstrip(_NATIVE_ORDER) if fmt else fmt


cdef _buffer_error(obj, str name, str want, tuple formats, tuple ndims, bint writable):
    """Raise the TypeError/ValueError that explains why obj is not a usable buffer."""
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{name}: expected a {want} buffer (numpy array, bytes, ...), "
                        f"got {type(obj).__name__}") from None
    if _strip_order(mv.format) not in formats:
        raise TypeError(f"{name}: expected {want} elements, got buffer format {mv.format!r}")
    if mv.ndim not in ndims:
        raise ValueError(f"{name}: expected {' or '.join(map(str, ndims))} dimension(s), got {mv.ndim}")
    if not mv.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")
    if writable and mv.readonly:
        raise ValueError(f"{name}: is read-only; an output buffer must be writable")
    raise ValueError(f"{name}: unusable {want} buffer")


cdef const uint8_t[::1] _bytes_in(obj, str name):
    """A read-only uint8 view of a C-contiguous uint8 buffer of any dimension."""
    cdef const uint8_t[::1] v
    try:
        v = obj
        return v
    except (ValueError, TypeError, BufferError):
        pass
    try:
        mv = memoryview(obj)
    except TypeError:
        mv = None
    if mv is not None and _strip_order(mv.format) == "B" and mv.c_contiguous and mv.ndim >= 1:
        v = mv.cast("B")
        return v
    _buffer_error(obj, name, "uint8", ("B",), (1, 2), False)


cdef uint8_t[::1] _bytes_out(obj, str name):
    """A writable uint8 view of a C-contiguous uint8 buffer of any dimension."""
    cdef uint8_t[::1] v
    try:
        v = obj
        return v
    except (ValueError, TypeError, BufferError):
        pass
    try:
        mv = memoryview(obj)
    except TypeError:
        mv = None
    if (mv is not None and not mv.readonly and _strip_order(mv.format) == "B"
            and mv.c_contiguous and mv.ndim >= 1):
        v = mv.cast("B")
        return v
    _buffer_error(obj, name, "uint8", ("B",), (1, 2), True)


cdef const float[::1] _f32_in(obj, str name):
    cdef const float[::1] v
    try:
        v = obj
        return v
    except (ValueError, TypeError, BufferError):
        _buffer_error(obj, name, "float32", ("f",), (1,), False)


cdef float[::1] _f32_out(obj, str name):
    cdef float[::1] v
    try:
        v = obj
        return v
    except (ValueError, TypeError, BufferError):
        _buffer_error(obj, name, "float32", ("f",), (1,), True)


cdef const float[:, ::1] _f32_in_2d(obj, str name):
    cdef const float[:, ::1] v
    try:
        v = obj
        return v
    except (ValueError, TypeError, BufferError):
        _buffer_error(obj, name, "float32", ("f",), (2,), False)


cdef float[:, ::1] _f32_out_2d(obj, str name):
    cdef float[:, ::1] v
    try:
        v = obj
        return v
    except (ValueError, TypeError, BufferError):
        _buffer_error(obj, name, "float32", ("f",), (2,), True)


cdef uint16_t[::1] _f16_out(obj, str name):
    """A writable view of a float16 or uint16 buffer as raw fp16 bits."""
    cdef uint16_t[::1] v
    try:
        v = obj
        return v
    except (ValueError, TypeError, BufferError):
        pass
    try:
        mv = memoryview(obj)
    except TypeError:
        mv = None
    if (mv is not None and not mv.readonly and _strip_order(mv.format) == "e"
            and mv.c_contiguous and mv.ndim == 1):
        v = mv.cast("B").cast("H")
        return v
    _buffer_error(obj, name, "float16 (or uint16)", ("e", "H"), (1,), True)


cdef const infer_kernel_table *_table():
    return infer_kernels()


cdef str _name(int t):
    return TYPE_NAMES.get(t, str(t))


cdef int64_t _whole_blocks(int64_t n_bytes, int t, str name) except -1:
    """Element count of n_bytes of format t; ValueError if not whole blocks."""
    cdef size_t bb = infer_type_block_bytes(t)
    if bb == 0:
        raise ValueError(f"qtype: {_name(t)} has no block layout")
    if n_bytes % bb:
        raise ValueError(f"{name}: {n_bytes} bytes is not a whole number of "
                         f"{_name(t)} blocks of {bb} bytes")
    return (n_bytes // bb) * infer_type_block_size(t)


cdef int64_t _packed_bytes(int64_t n, int t, str name) except -1:
    """Bytes of n elements of format t; ValueError if n is not whole blocks."""
    cdef int bs = infer_type_block_size(t)
    if bs <= 0:
        raise ValueError(f"qtype: {_name(t)} has no block layout")
    if n % bs:
        raise ValueError(f"{name}: {n} elements is not a whole number of "
                         f"{_name(t)} blocks of {bs}")
    cdef int64_t bb = <int64_t>infer_type_block_bytes(t)
    if n // bs > INT64_MAX // bb:   # the product would wrap (to a negative or zero size)
        raise ValueError(f"{name}: {n} elements of {_name(t)} exceed the largest buffer size")
    return (n // bs) * bb


def dequantize(src, qtype, out):
    """Decode whole blocks of format qtype from uint8 src into float32 out; returns out.
    src and out must not overlap (as for every kernel here that reads one buffer
    and writes another)."""
    cdef int t = type_id(qtype)
    cdef infer_dequantize_fn fn = _table().dequantize[t]
    if fn == NULL:
        raise ValueError(f"qtype: no dequantize kernel for {_name(t)}")
    cdef const uint8_t[::1] s = _bytes_in(src, "src")
    cdef float[::1] o = _f32_out(out, "out")
    cdef int64_t n = _whole_blocks(s.shape[0], t, "src")
    if n and _misaligned(&s[0], _type_align(t)):
        s = _aligned_copy(&s[0], s.shape[0])
    if n:
        _check_aligned_out(&o[0], 4, "out")
    if o.shape[0] != n:
        raise ValueError(f"out: expected {n} float32 elements for {s.shape[0]} bytes of "
                         f"{_name(t)}, got {o.shape[0]}")
    if n:
        _check_disjoint(&o[0], n * 4, "out", &s[0], s.shape[0], "src")
        with nogil:
            fn(&s[0], &o[0], n)
    return out


def dequantize_f16(src, qtype, out):
    """Decode whole blocks of format qtype into fp16 out (float16 or uint16); returns out."""
    cdef int t = type_id(qtype)
    cdef infer_dequantize_f16_fn fn = _table().dequantize_f16[t]
    if fn == NULL:
        raise ValueError(f"qtype: no dequantize_f16 kernel for {_name(t)}")
    cdef const uint8_t[::1] s = _bytes_in(src, "src")
    cdef uint16_t[::1] o = _f16_out(out, "out")
    cdef int64_t n = _whole_blocks(s.shape[0], t, "src")
    if n and _misaligned(&s[0], _type_align(t)):
        s = _aligned_copy(&s[0], s.shape[0])
    if n:
        _check_aligned_out(&o[0], 2, "out")
    if o.shape[0] != n:
        raise ValueError(f"out: expected {n} float16 elements for {s.shape[0]} bytes of "
                         f"{_name(t)}, got {o.shape[0]}")
    if n:
        _check_disjoint(&o[0], n * 2, "out", &s[0], s.shape[0], "src")
        with nogil:
            fn(&s[0], <infer_half *>&o[0], n)
    return out


def quantize(src, qtype, out):
    """Encode float32 src (a whole number of blocks) as format qtype into uint8 out; returns out."""
    cdef int t = type_id(qtype)
    cdef infer_quantize_fn fn = _table().quantize[t]
    if fn == NULL:
        raise ValueError(f"qtype: no quantize kernel for {_name(t)}")
    cdef const float[::1] s = _f32_in(src, "src")
    cdef uint8_t[::1] o = _bytes_out(out, "out")
    cdef int64_t nb = _packed_bytes(s.shape[0], t, "src")
    if nb and _misaligned(&s[0], 4):
        s = _aligned_copy(&s[0], s.shape[0] * 4).view(_np.float32)
    if nb:
        _check_aligned_out(&o[0], _type_align(t), "out")
    if o.shape[0] != nb:
        raise ValueError(f"out: expected {nb} bytes for {s.shape[0]} values of {_name(t)}, "
                         f"got {o.shape[0]}")
    if nb:
        _check_disjoint(&o[0], nb, "out", &s[0], s.shape[0] * 4, "src")
        with nogil:
            fn(&s[0], &o[0], s.shape[0])
    return out


cdef int _activation_type(int t) except -1:
    """The vec_dot_type of weight type t, checked against the active table."""
    cdef int vdt = infer_type_vec_dot_type(t)
    if vdt < 0:
        raise ValueError(f"qtype: {_name(t)} is not a weight format")
    cdef const infer_kernel_table *k = _table()
    if k.vec_dot[t] == NULL and k.matmul_r16[t] == NULL:
        raise ValueError(f"qtype: no vec_dot kernel for {_name(t)} in the "
                         f"{k.name.decode()} kernel set")
    if k.quantize[vdt] == NULL:
        raise ValueError(f"qtype: no quantize kernel for activation format {_name(vdt)}")
    return vdt


def activation_bytes(qtype, n, n_tokens=1):
    """Bytes that n_tokens activation rows of n values take in the format weight type
    qtype pairs with (its vec_dot_type); size the buffer of quantize_activations with it."""
    cdef int t = type_id(qtype)
    cdef int vdt = infer_type_vec_dot_type(t)
    if vdt < 0:
        raise ValueError(f"qtype: {_name(t)} is not a weight format")
    count, tokens = _count(n, "n"), _count(n_tokens, "n_tokens")
    # In Python ints: n x bytes per value, and rows x tokens, can wrap an int64.
    if count % infer_type_block_size(vdt):
        raise ValueError(f"n: {count} elements is not a whole number of {_name(vdt)} blocks "
                         f"of {infer_type_block_size(vdt)}")
    row = _buffer_size(count // infer_type_block_size(vdt) * infer_type_block_bytes(vdt), "n")
    return _buffer_size(row * tokens, "n_tokens")


def quantize_activations(x, qtype, buf):
    """Quantize float32 x (n values, or tokens x n) into the activation format of weight
    type qtype, writing activation_bytes(qtype, n, tokens) bytes into uint8 buf; returns buf.
    Quantize once per layer input and reuse buf for every weight that reads it."""
    cdef int t = type_id(qtype)
    cdef int vdt = _activation_type(t)
    cdef const float[:, ::1] x2
    cdef const float[::1] x1
    cdef const float *xp
    cdef int64_t n_tokens, n
    if getattr(x, "ndim", 1) == 2:
        x2 = _f32_in_2d(x, "x")
        n_tokens, n = x2.shape[0], x2.shape[1]
        xp = &x2[0, 0] if n_tokens and n else NULL
    else:
        x1 = _f32_in(x, "x")
        n_tokens, n = 1, x1.shape[0]
        xp = &x1[0] if n else NULL
    cdef uint8_t[::1] b = _bytes_out(buf, "buf")
    cdef int64_t need = _packed_bytes(n, vdt, "x") * n_tokens
    if b.shape[0] != need:
        raise ValueError(f"buf: expected {need} bytes ({n_tokens} x {n} values as "
                         f"{_name(vdt)}), got {b.shape[0]}")
    if need and _misaligned(xp, 4):
        x_copy = _aligned_copy(xp, n_tokens * n * 4).view(_np.float32)
        x1 = x_copy
        xp = &x1[0]
    if need:
        _check_aligned_out(&b[0], _type_align(vdt), "buf")
        _check_disjoint(&b[0], need, "buf", xp, n_tokens * n * 4, "x")
        with nogil:
            infer_quantize_activations(t, xp, n_tokens, n, &b[0])
    return buf


cdef int _get_weights(obj, Py_buffer *buf) except -1:
    """Acquire weights w: a C-contiguous uint8 buffer, 1-D or 2-D (rows x row bytes).
    The raw buffer protocol takes both shapes in one step (a typed memoryview of the
    wrong dimension costs an exception per call on the decode path)."""
    try:
        PyObject_GetBuffer(obj, buf, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    except (TypeError, ValueError, BufferError):
        _buffer_error(obj, "w", "uint8", ("B",), (1, 2), False)
    cdef bint ok = buf.itemsize == 1 and (buf.ndim == 1 or buf.ndim == 2)
    cdef const char *fmt = buf.format
    if ok and fmt != NULL:
        if fmt[0] == b'<' or fmt[0] == b'=' or fmt[0] == b'@':
            fmt += 1
        ok = fmt[0] == b'B' and fmt[1] == 0
    if not ok:
        PyBuffer_Release(buf)
        _buffer_error(obj, "w", "uint8", ("B",), (1, 2), False)
    return 0


cdef object _weights_aligned(Py_buffer *w, int t):
    """None when weights w are aligned for format t, else an aligned copy of them."""
    if not _misaligned(w.buf, _type_align(t)):
        return None
    return _aligned_copy(w.buf, w.len)


cdef int64_t _weight_rows(Py_buffer *w, int t, int64_t n, str x_name) except -1:
    """Row count of weights w (2-D rows x row bytes, or 1-D) whose rows hold n elements."""
    cdef int64_t rb = _packed_bytes(n, t, x_name)
    cdef int64_t rows
    if rb == 0:
        raise ValueError(f"{x_name}: row length must be > 0")
    if _table().matmul_r16[t] != NULL:
        rows = w.shape[0] if w.ndim == 2 else w.len // rb
        if w.len % rb == 0 and rows % 16:
            raise ValueError(f"w: a {_name(t)} matrix is whole groups of 16 rows, got {rows} rows")
    if w.ndim == 2:
        if w.shape[1] != rb:
            raise ValueError(f"w: rows of {w.shape[1]} bytes do not hold {n} values of "
                             f"{_name(t)} ({rb} bytes)")
        return w.shape[0]
    if w.len % rb:
        raise ValueError(f"w: {w.len} bytes is not a whole number of rows of {n} "
                         f"values of {_name(t)} ({rb} bytes each)")
    return w.len // rb


def matvec(w, qtype, x, out):
    """out[r] = row r of weight w (format qtype) . float32 x; returns out.
    w is uint8, 2-D (rows x row bytes) or 1-D; x holds one row's values; out one per row."""
    cdef int t = type_id(qtype)
    _activation_type(t)
    cdef Py_buffer wb
    cdef const float[::1] xv
    cdef float[::1] o
    cdef int64_t n, rows
    cdef size_t rb
    cdef int rc = 0
    cdef const void *wp
    _get_weights(w, &wb)
    try:
        xv = _f32_in(x, "x")
        o = _f32_out(out, "out")
        n = xv.shape[0]
        rows = _weight_rows(&wb, t, n, "x")
        rb = <size_t>_packed_bytes(n, t, "x")
        if o.shape[0] != rows:
            raise ValueError(f"out: expected {rows} float32 elements (one per row of w), got {o.shape[0]}")
        if rows:
            _check_disjoint(&o[0], rows * 4, "out", &xv[0], n * 4, "x")
            _check_disjoint(&o[0], rows * 4, "out", wb.buf, wb.len, "w")
            _check_aligned_out(&o[0], 4, "out")
            if _misaligned(&xv[0], 4):
                xv = _aligned_copy(&xv[0], n * 4).view(_np.float32)
            w_copy = _weights_aligned(&wb, t)
            wp = wb.buf
            if w_copy is not None:
                wp = <const void *><size_t>w_copy.ctypes.data
            with nogil:
                rc = infer_matvec(t, wp, rb, rows, n, &xv[0], &o[0], NULL)
    finally:
        PyBuffer_Release(&wb)
    if rc:
        raise MemoryError("matvec: could not allocate the activation buffer")
    return out


def matmul(w, qtype, X, out):
    """out[t, r] = row r of weight w (format qtype) . X[t]; returns out.
    X is float32 tokens x row length (C-contiguous), out float32 tokens x rows."""
    cdef int t = type_id(qtype)
    _activation_type(t)
    cdef Py_buffer wb
    cdef const float[:, ::1] xv
    cdef float[:, ::1] o
    cdef int64_t n_tokens, n, rows
    cdef size_t rb
    cdef int rc = 0
    cdef const void *wp
    _get_weights(w, &wb)
    try:
        xv = _f32_in_2d(X, "X")
        o = _f32_out_2d(out, "out")
        n_tokens, n = xv.shape[0], xv.shape[1]
        rows = _weight_rows(&wb, t, n, "X")
        rb = <size_t>_packed_bytes(n, t, "X")
        if o.shape[0] != n_tokens or o.shape[1] != rows:
            raise ValueError(f"out: expected shape ({n_tokens}, {rows}), got ({o.shape[0]}, {o.shape[1]})")
        if rows and n_tokens:
            _check_disjoint(&o[0, 0], n_tokens * rows * 4, "out", &xv[0, 0], n_tokens * n * 4, "X")
            _check_disjoint(&o[0, 0], n_tokens * rows * 4, "out", wb.buf, wb.len, "w")
            _check_aligned_out(&o[0, 0], 4, "out")
            if _misaligned(&xv[0, 0], 4):
                xv = _aligned_copy(&xv[0, 0], n_tokens * n * 4).view(_np.float32).reshape(n_tokens, n)
            w_copy = _weights_aligned(&wb, t)
            wp = wb.buf
            if w_copy is not None:
                wp = <const void *><size_t>w_copy.ctypes.data
            with nogil:
                rc = infer_matmul(t, wp, rb, rows, n, &xv[0, 0], n_tokens, &o[0, 0], NULL)
    finally:
        PyBuffer_Release(&wb)
    if rc:
        raise MemoryError("matmul: could not allocate the activation buffer")
    return out


cdef const uint8_t[::1] _activations_in(obj, int vdt, str name):
    """Pre-quantized activations: uint8 bytes, or float32 when the format is f32."""
    dtype = getattr(obj, "dtype", None)
    if vdt == 0 and dtype is not None and dtype.char == "f":
        if not dtype.isnative:
            raise TypeError(f"{name}: expected native byte order float32, got dtype {dtype.str}")
        mv = memoryview(obj)
        if not mv.c_contiguous:
            raise ValueError(f"{name}: must be C-contiguous")
        return mv.cast("B")
    return _bytes_in(obj, name)


def matvec_q(w, qtype, xq, out):
    """As matvec, with x already quantized by quantize_activations(x, qtype, xq)."""
    cdef int t = type_id(qtype)
    cdef int vdt = _activation_type(t)
    cdef Py_buffer wb
    cdef const uint8_t[::1] xv
    cdef float[::1] o
    cdef int64_t n, rows
    cdef size_t rb
    cdef const void *wp
    _get_weights(w, &wb)
    try:
        xv = _activations_in(xq, vdt, "xq")
        o = _f32_out(out, "out")
        n = _whole_blocks(xv.shape[0], vdt, "xq")
        rows = _weight_rows(&wb, t, n, "xq")
        rb = <size_t>_packed_bytes(n, t, "xq")
        if o.shape[0] != rows:
            raise ValueError(f"out: expected {rows} float32 elements (one per row of w), got {o.shape[0]}")
        if rows:
            _check_disjoint(&o[0], rows * 4, "out", &xv[0], xv.shape[0], "xq")
            _check_disjoint(&o[0], rows * 4, "out", wb.buf, wb.len, "w")
            _check_aligned_out(&o[0], 4, "out")
            if _misaligned(&xv[0], _type_align(vdt)):
                xv = _aligned_copy(&xv[0], xv.shape[0])
            w_copy = _weights_aligned(&wb, t)
            wp = wb.buf
            if w_copy is not None:
                wp = <const void *><size_t>w_copy.ctypes.data
            with nogil:
                infer_matvec_q(t, wp, rb, rows, n, &xv[0], &o[0])
    finally:
        PyBuffer_Release(&wb)
    return out


def matmul_q(w, qtype, Xq, out):
    """As matmul, with X already quantized by quantize_activations(X, qtype, Xq);
    the token count is taken from out (tokens x rows)."""
    cdef int t = type_id(qtype)
    cdef int vdt = _activation_type(t)
    cdef Py_buffer wb
    cdef const uint8_t[::1] xv
    cdef float[:, ::1] o
    cdef int64_t n_tokens, n, rows
    cdef size_t rb
    cdef const void *wp
    _get_weights(w, &wb)
    try:
        xv = _activations_in(Xq, vdt, "Xq")
        o = _f32_out_2d(out, "out")
        n_tokens = o.shape[0]
        if n_tokens == 0:
            return out
        if xv.shape[0] % n_tokens:
            raise ValueError(f"Xq: {xv.shape[0]} bytes do not split into {n_tokens} token rows "
                             f"(out has {n_tokens} rows)")
        n = _whole_blocks(xv.shape[0] // n_tokens, vdt, "Xq")
        rows = _weight_rows(&wb, t, n, "Xq")
        rb = <size_t>_packed_bytes(n, t, "Xq")
        if o.shape[1] != rows:
            raise ValueError(f"out: expected {rows} columns (one per row of w), got {o.shape[1]}")
        if rows:
            _check_disjoint(&o[0, 0], n_tokens * rows * 4, "out", &xv[0], xv.shape[0], "Xq")
            _check_disjoint(&o[0, 0], n_tokens * rows * 4, "out", wb.buf, wb.len, "w")
            _check_aligned_out(&o[0, 0], 4, "out")
            if _misaligned(&xv[0], _type_align(vdt)):
                xv = _aligned_copy(&xv[0], xv.shape[0])
            w_copy = _weights_aligned(&wb, t)
            wp = wb.buf
            if w_copy is not None:
                wp = <const void *><size_t>w_copy.ctypes.data
            with nogil:
                infer_matmul_q(t, wp, rb, rows, n, &xv[0], n_tokens, &o[0, 0])
    finally:
        PyBuffer_Release(&wb)
    return out


def repack_type(qtype):
    """The format the active kernel set repacks weights of format qtype into at load
    ("q4_1_r16" for "q4_1" where its kernel is faster), or None: keep the file's rows."""
    cdef int t = type_id(qtype)
    cdef int r = _table().repack_to[t]
    return TYPE_NAMES[r] if r else None


def repack(w, qtype, out=None):
    """Weight rows w (uint8, rows x row bytes, format q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k or iq4_xs, rows a
    multiple of 16) repacked into that format's *_r16 layout (csrc/repack.h, repack_k.h): a new
    uint8 array of the same shape, or ``out`` (C-contiguous uint8 of w's shape, not
    overlapping w), which the kernels multiply as format ``vec_dot_type``-paired
    ``"<qtype>_r16"``.  Returns (array, format name)."""
    cdef int t = type_id(qtype)
    cdef int rt = infer_repack_type(t)
    if rt == 0:
        raise ValueError(f"qtype: {_name(t)} has no repacked format (q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k and iq4_xs have)")
    a = _np.asarray(w)
    if a.dtype != _np.uint8 or a.ndim != 2 or not a.flags.c_contiguous:
        raise ValueError(f"w: expected C-contiguous uint8 rows x row bytes, got {a.dtype} "
                         f"of shape {a.shape}{'' if a.flags.c_contiguous else ', not contiguous'}")
    cdef const uint8_t[:, ::1] src = a
    cdef int64_t rows = src.shape[0], rb = src.shape[1]
    cdef int64_t bb = infer_type_block_bytes(t)
    if rb == 0 or rb % bb:
        raise ValueError(f"w: rows of {rb} bytes are not whole {_name(t)} blocks of {bb} bytes")
    if rows == 0 or rows % 16:
        raise ValueError(f"w: {rows} rows; repacking takes whole groups of 16 rows")
    cdef int64_t cols = rb // bb * infer_type_block_size(t)
    if out is None:
        out = _np.empty((rows, rb), _np.uint8)
    elif (not isinstance(out, _np.ndarray) or out.dtype != _np.uint8 or out.shape != (rows, rb)
          or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError(f"out: expected writable C-contiguous uint8 of shape {(rows, rb)}, got "
                         f"{getattr(out, 'dtype', type(out).__name__)} of shape {getattr(out, 'shape', None)}")
    elif _np.shares_memory(out, a):
        raise ValueError("out: overlaps w")
    cdef uint8_t[:, ::1] dst = out
    cdef int rc
    with nogil:
        rc = infer_repack_r16(t, &src[0, 0], <size_t>rb, rows, cols, &dst[0, 0])
    if rc != 0:
        raise ValueError(f"w: cannot repack {rows} x {cols} {_name(t)}")
    return out, TYPE_NAMES[rt]
