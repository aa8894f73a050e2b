# Float ops: norms, RoPE, activations, softmax, attention over a KV cache.
#
# Arrays are numpy arrays, C-contiguous, float32 (a KV cache may also be uint16:
# F16 bits).  Outputs are passed in; each entry point checks every shape with the
# GIL held, then releases it for the C call.  Rows run along the last axis.
import numpy as _np

from libc.math cimport sqrt
from libc.stdint cimport INT64_MAX


cdef object _check_f32(object a, str name, bint writable=False):
    if not isinstance(a, _np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray of float32, got {type(a).__name__}")
    if a.dtype != _np.float32:
        raise TypeError(f"{name}: expected dtype float32, got {a.dtype}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name}: must be writable")
    if not a.flags.aligned:
        raise ValueError(f"{name}: must be aligned to its 4-byte elements (an odd-offset view?)")
    if a.ndim < 1:
        raise ValueError(f"{name}: must have at least one dimension")
    return a


cdef object _check_cache(object a, str name, bint writable=False):
    """A KV cache [n_kv_heads, n_ctx, head_dim]; returns its ggml type id (F32 or F16)."""
    if not isinstance(a, _np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray (float32, or uint16 holding F16), "
                        f"got {type(a).__name__}")
    if a.dtype == _np.float32:
        kv_type = 0
    elif a.dtype == _np.uint16:
        kv_type = 1
    else:
        raise TypeError(f"{name}: expected dtype float32 or uint16 (F16 bits), got {a.dtype}")
    if a.ndim != 3:
        raise ValueError(f"{name}: expected shape (n_kv_heads, n_ctx, head_dim), got {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name}: must be writable")
    if not a.flags.aligned:
        raise ValueError(f"{name}: must be aligned to its elements (an odd-offset view?)")
    return kv_type


cdef int64_t _row_len(object x, str name) except -1:
    cdef int64_t n = x.shape[x.ndim - 1]
    if n < 1:
        raise ValueError(f"{name}: rows must not be empty, got shape {x.shape}")
    return n


cdef _check_eps(float eps):
    if not eps >= 0:
        raise ValueError(f"eps: must be >= 0, got {eps}")


cdef _same_shape(object a, str a_name, object ref, str ref_name):
    if a.shape != ref.shape:
        raise ValueError(f"{a_name}: shape {a.shape} does not match {ref_name} {ref.shape}")


def rmsnorm(x, weight, out, float eps=1e-5):
    """out = x / sqrt(mean(x**2) + eps) * weight, per row of the last axis.

    x: float32 (..., n); weight: float32 (n,); out: float32 of x's shape (may be x).
    Gemma GGUFs store their norm weights with the +1 already added, so they pass
    straight in.  Many rows share the thread pool.
    """
    _check_f32(x, "x")
    _check_f32(weight, "weight")
    _check_f32(out, "out", True)
    _check_eps(eps)
    cdef int64_t n = _row_len(x, "x")
    if weight.shape != (n,):
        raise ValueError(f"weight: expected shape ({n},), got {weight.shape}")
    _same_shape(out, "out", x, "x")
    cdef int64_t rows = x.size // n
    if rows == 0:
        return out
    cdef const float[::1] xv = x.reshape(-1)
    cdef const float[::1] wv = weight
    cdef float[::1] ov = out.reshape(-1)
    _check_disjoint(&ov[0], rows * n * 4, "out", &xv[0], rows * n * 4, "x", True)
    _check_disjoint(&ov[0], rows * n * 4, "out", &wv[0], n * 4, "weight")
    with nogil:
        infer_rmsnorm_rows(&xv[0], &wv[0], &ov[0], rows, n, eps)
    return out


def layernorm(x, weight, bias, out, float eps=1e-5):
    """out = (x - mean) / sqrt(var + eps) * weight + bias, per row of the last axis.

    x: float32 (..., n); weight, bias: float32 (n,) or None (1 and 0); out: float32
    of x's shape (may be x).  var is the biased (population) variance.
    """
    _check_f32(x, "x")
    _check_f32(out, "out", True)
    _check_eps(eps)
    cdef int64_t n = _row_len(x, "x")
    _same_shape(out, "out", x, "x")
    cdef const float *wp = NULL
    cdef const float *bp = NULL
    cdef const float[::1] wv
    cdef const float[::1] bv
    if weight is not None:
        _check_f32(weight, "weight")
        if weight.shape != (n,):
            raise ValueError(f"weight: expected shape ({n},), got {weight.shape}")
        wv = weight
        wp = &wv[0]
    if bias is not None:
        _check_f32(bias, "bias")
        if bias.shape != (n,):
            raise ValueError(f"bias: expected shape ({n},), got {bias.shape}")
        bv = bias
        bp = &bv[0]
    cdef int64_t rows = x.size // n
    if rows == 0:
        return out
    cdef const float[::1] xv = x.reshape(-1)
    cdef float[::1] ov = out.reshape(-1)
    _check_disjoint(&ov[0], rows * n * 4, "out", &xv[0], rows * n * 4, "x", True)
    _check_disjoint(&ov[0], rows * n * 4, "out", wp, n * 4 if wp else 0, "weight")
    _check_disjoint(&ov[0], rows * n * 4, "out", bp, n * 4 if bp else 0, "bias")
    with nogil:
        infer_layernorm_rows(&xv[0], wp, bp, &ov[0], rows, n, eps)
    return out


def softmax(x):
    """In place: each row of the last axis becomes its softmax.

    x: float32 (..., n).  -inf entries get probability 0; a row that is all -inf
    becomes all zeros; a row holding a NaN becomes all NaN (as numpy).
    """
    _check_f32(x, "x", True)
    cdef int64_t n = _row_len(x, "x")
    cdef int64_t rows = x.size // n
    if rows == 0:
        return x
    cdef float[::1] xv = x.reshape(-1)
    with nogil:
        infer_softmax_rows(&xv[0], rows, n)
    return x


cdef _glu(gate, up, out, int gelu):
    _check_f32(gate, "gate")
    _check_f32(up, "up")
    _check_f32(out, "out", True)
    _same_shape(up, "up", gate, "gate")
    _same_shape(out, "out", gate, "gate")
    cdef int64_t n = gate.size
    if n == 0:
        return out
    cdef const float[::1] gv = gate.reshape(-1)
    cdef const float[::1] uv = up.reshape(-1)
    cdef float[::1] ov = out.reshape(-1)
    _check_disjoint(&ov[0], n * 4, "out", &gv[0], n * 4, "gate", True)
    _check_disjoint(&ov[0], n * 4, "out", &uv[0], n * 4, "up", True)
    with nogil:
        infer_glu(gelu, &gv[0], &uv[0], &ov[0], n)
    return out


def silu_mul(gate, up, out):
    """out = silu(gate) * up = gate / (1 + exp(-gate)) * up (SwiGLU).

    gate, up, out: float32 of one shape; out may be gate or up.
    """
    return _glu(gate, up, out, False)


def gelu_mul(gate, up, out):
    """out = gelu(gate) * up with GELU's tanh approximation (GeGLU):
    gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3))).

    gate, up, out: float32 of one shape; out may be gate or up.
    """
    return _glu(gate, up, out, True)


def swiglu_oai_mul(gate, up, out):
    """out = g / (1 + exp(-1.702 g)) * (u + 1) with g = min(gate, 7) and
    u = clamp(up, -7, 7): gpt-oss's clamped SwiGLU (ggml's swiglu_oai as llama.cpp
    calls it).  gate, up, out: float32 of one shape; out may be gate or up.
    """
    return _glu(gate, up, out, INFER_GLU_SWIGLU_OAI)


def add(a, b):
    """In place a += b.  a, b: float32 of one shape; b may be a itself, but not a
    part of it shifted (a[1:] += a[:-1] is rejected: it would read what it wrote)."""
    _check_f32(a, "a", True)
    _check_f32(b, "b")
    _same_shape(b, "b", a, "a")
    cdef int64_t n = a.size
    if n == 0:
        return a
    cdef float[::1] av = a.reshape(-1)
    cdef const float[::1] bv = b.reshape(-1)
    cdef infer_add_fn fn = infer_kernels().add
    _check_disjoint(&av[0], n * 4, "a", &bv[0], n * 4, "b", True)
    with nogil:
        fn(&av[0], &bv[0], n)
    return a


def scale(x, float s):
    """In place x *= s.  x: float32."""
    _check_f32(x, "x", True)
    cdef int64_t n = x.size
    if n == 0:
        return x
    cdef float[::1] xv = x.reshape(-1)
    cdef infer_scale_fn fn = infer_kernels().scale
    with nogil:
        fn(&xv[0], s, n)
    return x


def rope(x, pos0=0, float freq_base=10000.0, *, bint neox=False, rot_dim=None,
         float freq_scale=1.0, positions=None, freq_factors=None, float attn_factor=1.0):
    """Rotary position embedding, in place on x: float32 (n_tokens, n_heads, head_dim).

    Token t sits at position pos0 + t, or positions[t] when positions (integers,
    shape (n_tokens,)) is given; pos0 must then be 0.  Pair i of a head turns by
    pos * freq_scale * freq_base**(-2i/rot_dim) / freq_factors[i] (freq_factors:
    None, or float32 of rot_dim/2 positive values: llama3 / LongRoPE factors), and
    the rotated values are scaled by attn_factor.  neox=False pairs (2i, 2i+1)
    (GGUF `llama`, whose Q/K rows the converter permuted); neox=True pairs
    (i, i + rot_dim/2) (gemma3, qwen2).  rot_dim (even, <= head_dim; default
    head_dim) leaves elements from rot_dim on untouched.
    """
    cdef int64_t p0 = _int64(pos0, "pos0")
    _check_f32(x, "x", True)
    if x.ndim != 3:
        raise ValueError(f"x: expected shape (n_tokens, n_heads, head_dim), got {x.shape}")
    cdef int64_t n_tokens = x.shape[0], n_heads = x.shape[1], head_dim = x.shape[2]
    if head_dim < 2 or head_dim > INFER_ATTN_MAX_HEAD_DIM:
        raise ValueError(f"x: head_dim must be in [2, {INFER_ATTN_MAX_HEAD_DIM}], got {head_dim}")
    cdef int64_t rd = head_dim if rot_dim is None else _int64(rot_dim, "rot_dim")
    if rd < 2 or rd > head_dim or rd % 2:
        got = rot_dim if rot_dim is not None else f"{rd} (the default, head_dim)"
        raise ValueError(f"rot_dim: must be even and in [2, head_dim={head_dim}], got {got}")
    if not freq_base > 0:
        raise ValueError(f"freq_base: must be > 0, got {freq_base}")
    cdef const float[::1] fv
    cdef const float *fp = NULL
    if freq_factors is not None:
        fv = _f32_in(freq_factors, "freq_factors")
        if fv.shape[0] != rd // 2:
            raise ValueError(f"freq_factors: expected {rd // 2} values (rot_dim / 2), got {fv.shape[0]}")
        if not _np.all(_np.asarray(fv) > 0):
            raise ValueError("freq_factors: every factor must be > 0")
        fp = &fv[0]
    cdef const int64_t[::1] pv
    cdef const int64_t *pp = NULL
    if positions is not None:
        if p0 != 0:
            raise ValueError("pos0: must be 0 when positions is given")
        pa = _np.asarray(positions)
        if pa.dtype.kind not in "iu":
            raise TypeError(f"positions: expected integers, got dtype {pa.dtype}")
        if pa.shape != (n_tokens,):
            raise ValueError(f"positions: expected shape ({n_tokens},), got {pa.shape}")
        pa = _np.ascontiguousarray(pa, dtype=_np.int64)
        if n_tokens:
            pv = pa
            pp = &pv[0]
    if n_tokens and p0 > INT64_MAX - (n_tokens - 1):
        raise ValueError(f"pos0: {pos0} + {n_tokens} tokens overflows a 64-bit position")
    if n_tokens == 0 or n_heads == 0:
        return x
    cdef float[::1] xv = x.reshape(-1)
    cdef int rc
    with nogil:
        rc = infer_rope(&xv[0], n_tokens, n_heads, head_dim, rd, pp, p0, freq_base,
                        freq_scale, fp, attn_factor, neox)
    if rc != 0:
        raise ValueError("rope: arguments rejected by the kernel")
    return x


def attention(q, k_cache, v_cache, pos0, out, scale=None, window=0, float softcap=0.0, sinks=None):
    """Causal attention of query tokens over one layer's KV cache; returns out.

    q: float32 (n_tokens, n_heads, head_dim), token t at position pos0 + t.
    k_cache, v_cache: (n_kv_heads, n_ctx, head_dim), both float32 or both uint16
    (F16 bits), holding positions 0 .. pos0 + n_tokens - 1 already (kv_store first).
    Query head h reads KV head h // (n_heads // n_kv_heads).  Token t attends to
    positions [lo, pos0 + t] with lo = max(0, pos0 + t - window + 1) if window > 0
    (a sliding window), else 0.  scale multiplies q.k (default 1/sqrt(head_dim)).
    softcap > 0 caps each scaled score s to softcap * tanh(s / softcap) (Gemma 2).
    out: float32 of q's shape (may be q).  Runs on the thread pool.
    sinks: None, or float32 (n_heads,): head h's learned sink logit joins each of its
    softmax denominators (gpt-oss: out = sum_p e^(s_p) v_p / (e^sink + sum_p e^(s_p))).
    """
    cdef int64_t p0 = _int64(pos0, "pos0"), win = _int64(window, "window")
    _check_f32(q, "q")
    _check_f32(out, "out", True)
    kv_type = _check_cache(k_cache, "k_cache")
    v_type = _check_cache(v_cache, "v_cache")
    if q.ndim != 3:
        raise ValueError(f"q: expected shape (n_tokens, n_heads, head_dim), got {q.shape}")
    _same_shape(out, "out", q, "q")
    if v_type != kv_type:
        raise TypeError(f"v_cache: dtype {v_cache.dtype} differs from k_cache's {k_cache.dtype}")
    _same_shape(v_cache, "v_cache", k_cache, "k_cache")
    cdef int64_t n_tokens = q.shape[0], n_heads = q.shape[1], head_dim = q.shape[2]
    cdef int64_t n_kv_heads = k_cache.shape[0], n_ctx = k_cache.shape[1]
    if k_cache.shape[2] != head_dim:
        raise ValueError(f"k_cache: head_dim {k_cache.shape[2]} differs from q's {head_dim}")
    if head_dim < 1 or head_dim > INFER_ATTN_MAX_HEAD_DIM:
        raise ValueError(f"q: head_dim must be in [1, {INFER_ATTN_MAX_HEAD_DIM}], got {head_dim}")
    if n_heads < 1 or n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"k_cache: {n_kv_heads} KV heads do not divide q's {n_heads} heads")
    if p0 < 0:
        raise ValueError(f"pos0: must be >= 0, got {pos0}")
    # n_ctx - pos0 cannot overflow (both >= 0); pos0 + n_tokens can.
    if n_tokens > n_ctx - p0:
        raise ValueError(f"pos0: {n_tokens} positions from {pos0} exceed the cache's "
                         f"n_ctx={n_ctx}")
    if win < 0:
        raise ValueError(f"window: must be >= 0 (0 = no window), got {window}")
    if not softcap >= 0:
        raise ValueError(f"softcap: must be >= 0 (0 = off), got {softcap}")
    cdef float sc = 1.0 / sqrt(<double>head_dim) if scale is None else scale
    if n_tokens == 0:
        return out
    cdef const float[::1] qv = q.reshape(-1)
    cdef float[::1] ov = out.reshape(-1)
    cdef const float[::1] kf
    cdef const float[::1] vf
    cdef const uint16_t[::1] kh
    cdef const uint16_t[::1] vh
    cdef const void *kp
    cdef const void *vp
    if kv_type == 0:
        kf = k_cache.reshape(-1)
        vf = v_cache.reshape(-1)
        kp = &kf[0]
        vp = &vf[0]
    else:
        kh = k_cache.reshape(-1)
        vh = v_cache.reshape(-1)
        kp = &kh[0]
        vp = &vh[0]
    cdef const float[::1] sv
    cdef const float *sp = NULL
    if sinks is not None:
        _check_f32(sinks, "sinks")
        if sinks.shape != (n_heads,):
            raise ValueError(f"sinks: expected shape ({n_heads},) (one per query head), got {sinks.shape}")
        sv = sinks
        sp = &sv[0]
    cdef Py_ssize_t cache_bytes = k_cache.nbytes, out_bytes = n_tokens * n_heads * head_dim * 4
    _check_disjoint(&ov[0], out_bytes, "out", &qv[0], out_bytes, "q", True)
    _check_disjoint(&ov[0], out_bytes, "out", kp, cache_bytes, "k_cache")
    _check_disjoint(&ov[0], out_bytes, "out", vp, cache_bytes, "v_cache")
    cdef int t = kv_type, rc
    with nogil:
        rc = infer_attention_sinks(&qv[0], kp, vp, t, n_tokens, n_heads, n_kv_heads, head_dim,
                                   n_ctx, p0, win, sc, softcap, sp, &ov[0])
    if rc != 0:
        raise ValueError("attention: arguments rejected by the kernel")
    return out


def kv_store(x, cache, pos0):
    """Write x: float32 (n_tokens, n_kv_heads, head_dim) into cache: (n_kv_heads,
    n_ctx, head_dim) float32, or uint16 (F16 bits, rounded to nearest even), at
    positions pos0 .. pos0 + n_tokens - 1.
    """
    cdef int64_t p0 = _int64(pos0, "pos0")
    _check_f32(x, "x")
    kv_type = _check_cache(cache, "cache", True)
    if x.ndim != 3:
        raise ValueError(f"x: expected shape (n_tokens, n_kv_heads, head_dim), got {x.shape}")
    cdef int64_t n_tokens = x.shape[0], n_kv_heads = x.shape[1], head_dim = x.shape[2]
    cdef int64_t n_ctx = cache.shape[1]
    if cache.shape[0] != n_kv_heads or cache.shape[2] != head_dim:
        raise ValueError(f"cache: shape {cache.shape} does not hold x's {n_kv_heads} heads "
                         f"of {head_dim}")
    if p0 < 0:
        raise ValueError(f"pos0: must be >= 0, got {pos0}")
    # n_ctx - pos0 cannot overflow (both >= 0); pos0 + n_tokens can.
    if n_tokens > n_ctx - p0:
        raise ValueError(f"pos0: {n_tokens} positions from {pos0} exceed the cache's "
                         f"n_ctx={n_ctx}")
    if x.size == 0:
        return cache
    cdef const float[::1] xv = x.reshape(-1)
    cdef float[::1] cf
    cdef uint16_t[::1] ch
    cdef void *cp
    if kv_type == 0:
        cf = cache.reshape(-1)
        cp = &cf[0]
    else:
        ch = cache.reshape(-1)
        cp = &ch[0]
    _check_disjoint(cp, cache.nbytes, "cache", &xv[0], x.nbytes, "x")
    cdef int t = kv_type, rc
    with nogil:
        rc = infer_kv_store(&xv[0], cp, t, n_tokens, n_kv_heads, head_dim, n_ctx, p0)
    if rc != 0:
        raise ValueError("kv_store: arguments rejected by the kernel")
    return cache


def gated_delta_net(q, k, v, g, beta, state, out, scale=None):
    """The gated DeltaNet recurrence over n_tokens tokens (Qwen3.5's linear
    attention; llama.cpp's ggml_gated_delta_net); updates state, returns out.

    q, k: float32 (n_tokens, n_k_heads, d), L2-normalised by the caller.
    v: float32 (n_tokens, n_v_heads, d), n_v_heads a multiple of n_k_heads; value
    head h reads q/k head h % n_k_heads.  g, beta: float32 (n_tokens, n_v_heads):
    the log of each token's decay and its write strength.  state: float32
    (n_v_heads, d, d), state[h, i, j] = S_h[i, j] (key i, value j), updated in place.  Per token and
    head: S *= exp(g); S += k (beta (v - S^T k))^T; out = scale S^T q.  scale:
    default 1/sqrt(d).  out: float32 of v's shape.  Runs on the thread pool.
    """
    for a, name in ((q, "q"), (k, "k"), (v, "v"), (g, "g"), (beta, "beta")):
        _check_f32(a, name)
    _check_f32(state, "state", True)
    _check_f32(out, "out", True)
    if q.ndim != 3:
        raise ValueError(f"q: expected shape (n_tokens, n_k_heads, d), got {q.shape}")
    _same_shape(k, "k", q, "q")
    if v.ndim != 3 or v.shape[0] != q.shape[0] or v.shape[2] != q.shape[2]:
        raise ValueError(f"v: expected shape ({q.shape[0]}, n_v_heads, {q.shape[2]}), got {v.shape}")
    _same_shape(out, "out", v, "v")
    cdef int64_t n_tokens = q.shape[0], n_k = q.shape[1], d = q.shape[2], n_v = v.shape[1]
    if n_k < 1 or n_v < 1 or n_v % n_k:
        raise ValueError(f"v: {n_v} value heads are not a multiple of {n_k} key heads")
    if d < 1 or d > INFER_DELTA_NET_MAX_STATE:
        raise ValueError(f"q: d must be in [1, {INFER_DELTA_NET_MAX_STATE}], got {d}")
    for a, name in ((g, "g"), (beta, "beta")):
        if a.shape != (n_tokens, n_v):
            raise ValueError(f"{name}: expected shape ({n_tokens}, {n_v}), got {a.shape}")
    if state.shape != (n_v, d, d):
        raise ValueError(f"state: expected shape ({n_v}, {d}, {d}), got {state.shape}")
    cdef double sc = 1.0 / sqrt(<double>d) if scale is None else float(scale)
    if not (sc == sc and abs(sc) < 1e30):
        raise ValueError(f"scale: must be finite, got {scale}")
    if n_tokens == 0:
        return out
    cdef const float[::1] qv = q.reshape(-1)
    cdef const float[::1] kv = k.reshape(-1)
    cdef const float[::1] vv = v.reshape(-1)
    cdef const float[::1] gv = g.reshape(-1)
    cdef const float[::1] bv = beta.reshape(-1)
    cdef float[::1] sv = state.reshape(-1)
    cdef float[::1] ov = out.reshape(-1)
    _check_disjoint(&sv[0], state.nbytes, "state", &ov[0], out.nbytes, "out")
    for a, name in ((q, "q"), (k, "k"), (v, "v"), (g, "g"), (beta, "beta")):
        _check_disjoint(&sv[0], state.nbytes, "state", <const void *><size_t>a.ctypes.data, a.nbytes, name)
        _check_disjoint(&ov[0], out.nbytes, "out", <const void *><size_t>a.ctypes.data, a.nbytes, name)
    cdef float fsc = <float>sc
    cdef int rc
    with nogil:
        rc = infer_gated_delta_net(&qv[0], &kv[0], &vv[0], &gv[0], &bv[0], &sv[0], &ov[0],
                                   n_tokens, n_k, n_v, d, fsc)
    if rc != 0:
        raise ValueError("gated_delta_net: arguments rejected by the kernel")
    return out


def mamba2_scan(xbc, dt, a, d_skip, state, y, int64_t d_state, int64_t n_groups):
    """The Mamba2 selective scan over n_tokens tokens (Granite 4.0-H; llama.cpp's
    ggml_ssm_scan with a scalar decay per head plus the D skip); updates state,
    returns y.

    xbc: float32 (n_tokens, d_inner + 2 * n_groups * d_state), per token the
    convolved x (n_heads heads of head_dim), then B and C (n_groups x d_state each).
    dt: float32 (n_tokens, n_heads), after the softplus.  a, d_skip: float32
    (n_heads,): A (= -exp(A_log)) and D.  state: float32 (n_heads, head_dim,
    d_state), updated in place.  y: float32 (n_tokens, d_inner).  Head h reads
    group h // (n_heads / n_groups); per token S = S exp(dt a) + (x dt) B^T and
    y = S C + d_skip x.  Runs on the thread pool.
    """
    for arr, name in ((xbc, "xbc"), (dt, "dt"), (a, "a"), (d_skip, "d_skip")):
        _check_f32(arr, name)
    _check_f32(state, "state", True)
    _check_f32(y, "y", True)
    if state.ndim != 3:
        raise ValueError(f"state: expected shape (n_heads, head_dim, d_state), got {state.shape}")
    cdef int64_t n_heads = state.shape[0], head_dim = state.shape[1], ds = state.shape[2]
    cdef int64_t ng = n_groups
    if d_state != ds or ds < 1 or head_dim < 1 or n_heads < 1:
        raise ValueError(f"state: shape {state.shape} does not hold d_state={d_state}")
    if ng < 1 or n_heads % ng:
        raise ValueError(f"n_groups: {n_groups} does not divide {n_heads} heads")
    if xbc.ndim != 2 or xbc.shape[1] != n_heads * head_dim + 2 * ng * ds:
        raise ValueError(f"xbc: expected shape (n_tokens, {n_heads * head_dim + 2 * ng * ds}), got {xbc.shape}")
    cdef int64_t n_tokens = xbc.shape[0]
    if dt.shape != (n_tokens, n_heads):
        raise ValueError(f"dt: expected shape ({n_tokens}, {n_heads}), got {dt.shape}")
    for arr, name in ((a, "a"), (d_skip, "d_skip")):
        if arr.shape != (n_heads,):
            raise ValueError(f"{name}: expected shape ({n_heads},), got {arr.shape}")
    if y.shape != (n_tokens, n_heads * head_dim):
        raise ValueError(f"y: expected shape ({n_tokens}, {n_heads * head_dim}), got {y.shape}")
    if n_tokens == 0:
        return y
    cdef const float[::1] xv = xbc.reshape(-1)
    cdef const float[::1] dv = dt.reshape(-1)
    cdef const float[::1] av = a.reshape(-1)
    cdef const float[::1] sk = d_skip.reshape(-1)
    cdef float[::1] sv = state.reshape(-1)
    cdef float[::1] yv = y.reshape(-1)
    _check_disjoint(&sv[0], state.nbytes, "state", &yv[0], y.nbytes, "y")
    for arr, name in ((xbc, "xbc"), (dt, "dt"), (a, "a"), (d_skip, "d_skip")):
        _check_disjoint(&sv[0], state.nbytes, "state", <const void *><size_t>arr.ctypes.data, arr.nbytes, name)
        _check_disjoint(&yv[0], y.nbytes, "y", <const void *><size_t>arr.ctypes.data, arr.nbytes, name)
    cdef int rc
    with nogil:
        rc = infer_mamba2_scan(&xv[0], &dv[0], &av[0], &sk[0], &sv[0], &yv[0], n_tokens, n_heads, head_dim, ds, ng)
    if rc != 0:
        raise ValueError("mamba2_scan: arguments rejected by the kernel")
    return y
