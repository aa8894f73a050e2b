"""Float ops and attention against float64 numpy references, on every ISA path.

The references below are written from the formulas, independently of csrc/: they
share no code with the kernels.  Tolerances are stated per op: float32 kernels
against float64 references.
"""
import numpy as np
import pytest

from infer import kernels as K

SIZES = [1, 7, 15, 16, 17, 33, 64, 65, 576, 1000]


def rng(seed):
    return np.random.default_rng(seed)


# ---- float64 references --------------------------------------------------------

def rmsnorm_ref(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layernorm_ref(x, w, b, eps):
    x = x.astype(np.float64)
    mu = x.mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def softmax_ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def silu_ref(g):
    g = g.astype(np.float64)
    return g / (1.0 + np.exp(-g))


def gelu_tanh_ref(g):
    g = g.astype(np.float64)
    return 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3)))


def rope_ref(x, positions, base, neox, rot_dim, freq_scale=1.0, factors=None, attn_factor=1.0):
    """Rotate each head's pairs by angle pos * freq_scale * base^(-2i/rot_dim) / factors[i],
    scaling by attn_factor (ggml's rope with ext_factor 0)."""
    y = x.astype(np.float64).copy()
    half = rot_dim // 2
    i = np.arange(half, dtype=np.float64)
    ff = np.ones(half) if factors is None else np.asarray(factors, np.float64)
    theta = (np.asarray(positions, dtype=np.float64)[:, None] * freq_scale
              * base ** (-2.0 * i / rot_dim) / ff)       # (tokens, half)
    c = attn_factor * np.cos(theta)[:, None, :]
    s = attn_factor * np.sin(theta)[:, None, :]
    if neox:
        a = y[..., :half].copy()
        b = y[..., half:rot_dim].copy()
    else:
        a = y[..., 0:rot_dim:2].copy()
        b = y[..., 1:rot_dim:2].copy()
    ra, rb = a * c - b * s, a * s + b * c
    if neox:
        y[..., :half], y[..., half:rot_dim] = ra, rb
    else:
        y[..., 0:rot_dim:2], y[..., 1:rot_dim:2] = ra, rb
    return y


def cache_values(cache):
    return (cache.view(np.float16) if cache.dtype == np.uint16 else cache).astype(np.float64)


def attention_ref(q, k_cache, v_cache, pos0, scale, window, softcap=0.0):
    n_tokens, n_heads, d = q.shape
    n_kv = k_cache.shape[0]
    kf, vf = cache_values(k_cache), cache_values(v_cache)
    out = np.zeros(q.shape, dtype=np.float64)
    for t in range(n_tokens):
        p = pos0 + t
        lo = max(0, p - window + 1) if window > 0 else 0
        for h in range(n_heads):
            kv = h // (n_heads // n_kv)
            scores = kf[kv, lo:p + 1] @ q[t, h].astype(np.float64) * scale
            if softcap:
                scores = softcap * np.tanh(scores / softcap)
            w = np.exp(scores - scores.max())
            out[t, h] = (w / w.sum()) @ vf[kv, lo:p + 1]
    return out


# ---- norms ------------------------------------------------------------------------

@pytest.mark.parametrize("n", SIZES)
def test_rmsnorm(isa, n):
    r = rng(n)
    x = (r.standard_normal((3, n)) * 3).astype(np.float32)
    w = r.standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    K.rmsnorm(x, w, out, 1e-5)
    np.testing.assert_allclose(out, rmsnorm_ref(x, w, 1e-5), rtol=2e-6, atol=2e-6)
    # 1-D rows and in place
    x1 = x[1].copy()
    K.rmsnorm(x1, w, x1, 1e-6)
    np.testing.assert_allclose(x1, rmsnorm_ref(x[1], w, 1e-6), rtol=2e-6, atol=2e-6)


def test_rmsnorm_eps_dominates(isa):
    # all-zero row: output is exactly 0; tiny row: eps matters
    x = np.zeros((2, 33), np.float32)
    x[1] = 1e-4
    w = np.ones(33, np.float32)
    out = np.empty_like(x)
    K.rmsnorm(x, w, out, 1e-6)
    np.testing.assert_array_equal(out[0], 0)
    np.testing.assert_allclose(out[1], rmsnorm_ref(x[1], w, 1e-6), rtol=2e-6)


@pytest.mark.parametrize("n", SIZES)
def test_layernorm(isa, n):
    r = rng(100 + n)
    x = (r.standard_normal((4, n)) * 2 + 5).astype(np.float32)  # offset mean
    w = r.standard_normal(n).astype(np.float32)
    b = r.standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    for ww, bb in [(w, b), (w, None), (None, b), (None, None)]:
        K.layernorm(x, ww, bb, out, 1e-5)
        ref = layernorm_ref(x, ww, bb, 1e-5)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


# ---- softmax, activations, elementwise ----------------------------------------------

@pytest.mark.parametrize("n", SIZES)
def test_softmax(isa, n):
    r = rng(200 + n)
    x = (r.standard_normal((3, n)) * 10).astype(np.float32)
    x[1] += 1000.0                       # large values: must not overflow
    ref = softmax_ref(x)
    K.softmax(x)
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-7)


def test_softmax_neg_inf(isa):
    x = np.full((3, 37), -np.inf, np.float32)
    x[0, [0, 5, 36]] = [1.0, 2.0, 3.0]
    x[1, :20] = np.linspace(-3, 3, 20)
    ref0, ref1 = softmax_ref(x[0]), softmax_ref(x[1])
    K.softmax(x)
    np.testing.assert_allclose(x[0], ref0, rtol=1e-5, atol=0)
    np.testing.assert_allclose(x[1], ref1, rtol=1e-5, atol=0)
    assert (x[0][np.isnan(ref0) | (ref0 == 0)] == 0).all()
    np.testing.assert_array_equal(x[2], 0)   # all -inf: zeros, documented


@pytest.mark.parametrize("n", [1, 3, 8, 17, 64, 100])
def test_softmax_nan_row_is_nan(isa, n):
    """As numpy: a row holding a NaN is all NaN, on every ISA (AVX-512 dropped the NaN
    and gave the other entries finite probabilities; scalar gave NaN, or zeros for an
    all-NaN row); rows without NaN are untouched by it."""
    x = rng(250 + n).standard_normal((4, n)).astype(np.float32)
    x[0, 0] = np.nan
    x[1, -1] = np.nan
    x[2] = np.nan
    with np.errstate(invalid="ignore"):
        ref = softmax_ref(x)
    K.softmax(x)
    assert np.isnan(x[:3]).all()
    np.testing.assert_allclose(x[3], ref[3], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("which", ["silu", "gelu"])
def test_glu(isa, n, which):
    r = rng(300 + n)
    g = (r.standard_normal(n) * 4).astype(np.float32)
    g[: min(n, 4)] = [-100.0, 100.0, -9.0, 0.0][: min(n, 4)]   # saturated ends
    u = r.standard_normal(n).astype(np.float32)
    out = np.empty_like(g)
    fn, ref = (K.silu_mul, silu_ref) if which == "silu" else (K.gelu_mul, gelu_tanh_ref)
    fn(g, u, out)
    np.testing.assert_allclose(out, ref(g) * u, rtol=1e-5, atol=1e-6)
    # 2-D and out aliasing gate
    g2 = g.reshape(1, n).copy()
    fn(g2, u.reshape(1, n), g2)
    np.testing.assert_allclose(g2[0], ref(g) * u, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", SIZES)
def test_add_scale(isa, n):
    r = rng(400 + n)
    a = r.standard_normal(n).astype(np.float32)
    b = r.standard_normal(n).astype(np.float32)
    expect = a.astype(np.float64) + b
    K.add(a, b)
    np.testing.assert_allclose(a, expect, rtol=1e-6, atol=1e-7)
    K.scale(a, -0.375)
    np.testing.assert_allclose(a, expect * -0.375, rtol=1e-6, atol=1e-7)


# ---- RoPE ---------------------------------------------------------------------------

@pytest.mark.parametrize("head_dim", [64, 80, 128, 256])
@pytest.mark.parametrize("neox", [False, True])
def test_rope(isa, head_dim, neox):
    r = rng(head_dim + neox)
    x = r.standard_normal((5, 3, head_dim)).astype(np.float32)
    ref = rope_ref(x, np.arange(5) + 17, 10000.0, neox, head_dim)
    K.rope(x, 17, 10000.0, neox=neox)
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("neox", [False, True])
def test_rope_long_run(isa, neox):
    # 300 consecutive positions far out: the angle recurrence between re-seeds
    # must stay as accurate as direct angles (the positions= path).
    r = rng(21 + neox)
    x = r.standard_normal((300, 2, 64)).astype(np.float32)
    ref = rope_ref(x, np.arange(300) + 30000, 500000.0, neox, 64)
    y = x.copy()
    K.rope(x, 30000, 500000.0, neox=neox)
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=2e-6)
    K.rope(y, freq_base=500000.0, neox=neox, positions=np.arange(300) + 30000)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("neox", [False, True])
def test_rope_partial_positions_scale(isa, neox):
    r = rng(7 + neox)
    x = r.standard_normal((4, 2, 80)).astype(np.float32)
    positions = np.array([0, 3, 4095, 100000])
    ref = rope_ref(x, positions, 100000.0, neox, 32, freq_scale=0.25)
    before = x.copy()
    K.rope(x, freq_base=100000.0, neox=neox, rot_dim=32, freq_scale=0.25,
           positions=positions.astype(np.int32))
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(x[..., 32:], before[..., 32:])   # past rot_dim: untouched


@pytest.mark.parametrize("neox", [False, True])
def test_rope_frequency_factors_and_attn_factor(isa, neox):
    """llama3 / LongRoPE per-pair divisors and YaRN's magnitude factor."""
    r = rng(17 + neox)
    x = r.standard_normal((5, 3, 64)).astype(np.float32)
    factors = np.exp(r.uniform(0.0, 3.0, 32)).astype(np.float32)
    ref = rope_ref(x, np.arange(5) + 700, 500000.0, neox, 64, freq_scale=0.5, factors=factors,
                   attn_factor=1.2)
    K.rope(x, 700, 500000.0, neox=neox, freq_scale=0.5, freq_factors=factors, attn_factor=1.2)
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="freq_factors"):
        K.rope(x, 0, freq_factors=factors[:31])
    with pytest.raises(ValueError, match="freq_factors"):
        K.rope(x, 0, freq_factors=np.zeros(32, np.float32))


def test_rope_orderings_differ_and_position_zero_is_identity(isa):
    x = rng(9).standard_normal((1, 1, 64)).astype(np.float32)
    y = x.copy()
    K.rope(y, 0)
    np.testing.assert_array_equal(y, x)
    a, b = x.copy(), x.copy()
    K.rope(a, 5)
    K.rope(b, 5, neox=True)
    assert np.abs(a - b).max() > 0.1


def test_rope_hand_case(isa):
    # head_dim 4, position 1, base 10000: pair 0 turns 1 radian, pair 1 turns 0.01
    x = np.array([[[1.0, 0.0, 0.0, 1.0]]], np.float32)
    K.rope(x, 1, 10000.0)
    np.testing.assert_allclose(x[0, 0], [np.cos(1), np.sin(1), -np.sin(0.01), np.cos(0.01)],
                               rtol=1e-6, atol=1e-7)


# ---- KV store and attention ------------------------------------------------------------

def make_cache(r, n_kv, n_ctx, d, f16):
    c = r.standard_normal((n_kv, n_ctx, d)).astype(np.float32)
    return c.astype(np.float16).view(np.uint16) if f16 else c


@pytest.mark.parametrize("f16", [False, True])
def test_kv_store(isa, f16):
    r = rng(11)
    cache = make_cache(r, 3, 20, 64, f16)
    before = cache.copy()
    x = (r.standard_normal((4, 3, 64)) * 100).astype(np.float32)
    x[0, 0, :3] = [65520.0, 1e-8, -3e-5]      # overflow to inf, subnormal, rounding
    K.kv_store(x, cache, 7)
    expect = x.transpose(1, 0, 2)
    if f16:
        with np.errstate(over="ignore"):      # 65520 rounds to inf, as in the kernel
            expect = expect.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(cache[:, 7:11], expect)
    np.testing.assert_array_equal(cache[:, :7], before[:, :7])
    np.testing.assert_array_equal(cache[:, 11:], before[:, 11:])


@pytest.mark.parametrize("head_dim", [64, 80, 128, 256])
@pytest.mark.parametrize("group", [1, 3, 4])
@pytest.mark.parametrize("f16", [False, True])
def test_attention_decode(isa, head_dim, group, f16):
    r = rng(head_dim * 10 + group + f16)
    n_kv, n_ctx = 2, 150
    k = make_cache(r, n_kv, n_ctx, head_dim, f16)
    v = make_cache(r, n_kv, n_ctx, head_dim, f16)
    q = (r.standard_normal((1, n_kv * group, head_dim)) * 0.5).astype(np.float32)
    out = np.empty_like(q)
    for pos in (0, 1, 63, 64, 65, 149):
        K.attention(q, k, v, pos, out)
        ref = attention_ref(q, k, v, pos, 1.0 / np.sqrt(head_dim), 0)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5, err_msg=f"pos {pos}")


@pytest.mark.parametrize("f16", [False, True])
@pytest.mark.parametrize("window", [0, 1, 5, 64, 100])
def test_attention_prefill_causal_window(isa, f16, window):
    r = rng(window + f16)
    n_kv, group, d, n_ctx, pos0, n_tokens = 3, 3, 64, 200, 40, 33
    k = make_cache(r, n_kv, n_ctx, d, f16)
    v = make_cache(r, n_kv, n_ctx, d, f16)
    q = r.standard_normal((n_tokens, n_kv * group, d)).astype(np.float32)
    out = np.empty_like(q)
    K.attention(q, k, v, pos0, out, scale=0.3, window=window)
    ref = attention_ref(q, k, v, pos0, 0.3, window)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("f16", [False, True])
@pytest.mark.parametrize("n_tokens", [1, 9])
def test_attention_softcap(isa, f16, n_tokens):
    """Gemma 2's attention logit soft-capping: scores of several units capped at 2."""
    r = rng(50 + f16 + n_tokens)
    n_kv, group, d, n_ctx, pos0 = 2, 2, 32, 64, 40
    k = make_cache(r, n_kv, n_ctx, d, f16)
    v = make_cache(r, n_kv, n_ctx, d, f16)
    q = r.standard_normal((n_tokens, n_kv * group, d)).astype(np.float32)
    out = np.empty_like(q)
    K.attention(q, k, v, pos0, out, scale=0.8, window=20, softcap=2.0)
    ref = attention_ref(q, k, v, pos0, 0.8, 20, softcap=2.0)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert np.abs(ref - attention_ref(q, k, v, pos0, 0.8, 20)).max() > 0.05  # the cap matters
    with pytest.raises(ValueError, match="softcap"):
        K.attention(q, k, v, pos0, out, softcap=-1.0)


def test_attention_future_positions_ignored(isa):
    # Garbage (huge values, NaN) past the last position must not leak in.
    r = rng(5)
    k = r.standard_normal((1, 16, 64)).astype(np.float32)
    v = r.standard_normal((1, 16, 64)).astype(np.float32)
    q = r.standard_normal((4, 2, 64)).astype(np.float32)
    k2, v2 = k.copy(), v.copy()
    k2[:, 6:] = np.nan
    v2[:, 6:] = 1e30
    out = np.empty_like(q)
    K.attention(q, k2, v2, 2, out)
    np.testing.assert_allclose(out, attention_ref(q, k, v, 2, 0.125, 0), rtol=1e-4, atol=1e-5)


def test_attention_position_zero_returns_v0(isa):
    r = rng(6)
    k = r.standard_normal((1, 8, 80)).astype(np.float32)
    v = r.standard_normal((1, 8, 80)).astype(np.float32)
    q = (r.standard_normal((1, 4, 80)) * 50).astype(np.float32)
    out = np.empty_like(q)
    K.attention(q, k, v, 0, out)
    np.testing.assert_allclose(out[0], np.broadcast_to(v[0, 0], (4, 80)), rtol=1e-6)


@pytest.mark.parametrize("n_tokens", [1, 7])
@pytest.mark.parametrize("threads", [1, 2])
def test_attention_out_aliases_q_and_threads(isa, n_tokens, threads):
    # 1 token over 3 KV heads on 2 threads: the driver splits to one query row per
    # work item; otherwise the query heads of a KV head go together.
    r = rng(8)
    k = make_cache(r, 3, 64, 64, True)
    v = make_cache(r, 3, 64, 64, True)
    q = r.standard_normal((n_tokens, 9, 64)).astype(np.float32)
    ref = attention_ref(q, k, v, 50, 0.125, 16)
    prev = K.get_num_threads()
    try:
        K.set_num_threads(threads)
        K.attention(q, k, v, 50, q, window=16)
    finally:
        K.set_num_threads(prev)
    np.testing.assert_allclose(q, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("window", [0, 700])
@pytest.mark.parametrize("f16", [False, True])
def test_attention_decode_split_over_threads(isa, window, f16):
    # One token over 3 KV heads on 2 threads with a long span: the driver splits the
    # positions in two ranges and merges them by their softmax sums.
    r = rng(31 + window + f16)
    k = make_cache(r, 3, 1200, 64, f16)
    v = make_cache(r, 3, 1200, 64, f16)
    q = r.standard_normal((1, 9, 64)).astype(np.float32)
    out = np.empty_like(q)
    prev = K.get_num_threads()
    try:
        K.set_num_threads(2)
        K.attention(q, k, v, 1100, out, window=window)
    finally:
        K.set_num_threads(prev)
    np.testing.assert_allclose(out, attention_ref(q, k, v, 1100, 0.125, window),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("f16", [False, True])
@pytest.mark.parametrize("window", [0, 5, 70])
@pytest.mark.parametrize("shape", [(3, 3, 64), (1, 4, 256)])   # SmolLM2's, Gemma 3's heads
def test_attention_rows_do_not_depend_on_the_batch(isa, f16, window, shape):
    """A query row's result is the same bits whatever other rows share the call: the
    rows of one prefill equal a prefill continuing a held prefix (any split) and one
    token at a time.  (AVX2 once summed a chunk's scores and exponentials in an order
    set by the call's longest row, so a held-prefix prefill moved SmolLM2's logits by
    up to 0.86 after 30 layers of Q8 rounding.)"""
    n_kv, group, d = shape
    r = rng(window + 7 * f16 + d)
    n_ctx, pos0, n = 300, 3, 140        # rows over 2-3 chunks of 64 positions
    k = make_cache(r, n_kv, n_ctx, d, f16)
    v = make_cache(r, n_kv, n_ctx, d, f16)
    q = (r.standard_normal((n, n_kv * group, d)) * 0.6).astype(np.float32)
    whole = np.empty_like(q)
    K.attention(q, k, v, pos0, whole, window=window)
    np.testing.assert_allclose(whole, attention_ref(q, k, v, pos0, 1 / np.sqrt(d), window),
                               rtol=1e-4, atol=1e-5)
    for cuts in ([1], [3], [4, 9], [61, 62, 66], [100, 139], list(range(1, 12))):
        got = np.empty_like(q)
        for a, b in zip([0] + cuts, cuts + [n]):
            K.attention(q[a:b], k, v, pos0 + a, got[a:b], window=window)
        np.testing.assert_array_equal(got, whole, err_msg=f"rows cut at {cuts}")


def test_store_then_attend_matches_reference(isa):
    # The llama loop: store K/V of each new token, then attend; F16 cache.
    r = rng(12)
    n_kv, n_heads, d, n_ctx = 3, 9, 64, 40
    kc = np.zeros((n_kv, n_ctx, d), np.uint16)
    vc = np.zeros((n_kv, n_ctx, d), np.uint16)
    ks = r.standard_normal((n_ctx, n_kv, d)).astype(np.float32)
    vs = r.standard_normal((n_ctx, n_kv, d)).astype(np.float32)
    qs = r.standard_normal((n_ctx, n_heads, d)).astype(np.float32)
    K.kv_store(ks[:13], kc, 0)
    K.kv_store(vs[:13], vc, 0)
    out = np.empty((13, n_heads, d), np.float32)
    K.attention(qs[:13], kc, vc, 0, out)
    k16 = ks.transpose(1, 0, 2).astype(np.float16).view(np.uint16)
    v16 = vs.transpose(1, 0, 2).astype(np.float16).view(np.uint16)
    np.testing.assert_allclose(out, attention_ref(qs[:13], k16, v16, 0, 0.125, 0),
                               rtol=1e-4, atol=1e-5)
    for pos in range(13, 16):
        K.kv_store(ks[pos:pos + 1], kc, pos)
        K.kv_store(vs[pos:pos + 1], vc, pos)
        o1 = np.empty((1, n_heads, d), np.float32)
        K.attention(qs[pos:pos + 1], kc, vc, pos, o1)
        np.testing.assert_allclose(o1, attention_ref(qs[pos:pos + 1], k16, v16, pos, 0.125, 0),
                                   rtol=1e-4, atol=1e-5)


# ---- misuse -------------------------------------------------------------------------

def test_misuse_elementwise():
    x = np.ones((2, 8), np.float32)
    w = np.ones(8, np.float32)
    with pytest.raises(TypeError, match="x"):
        K.rmsnorm(x.astype(np.float64), w, x)
    with pytest.raises(TypeError, match="x"):
        K.rmsnorm([1.0, 2.0], w, x)
    with pytest.raises(ValueError, match="weight"):
        K.rmsnorm(x, np.ones(7, np.float32), x)
    with pytest.raises(ValueError, match="out"):
        K.rmsnorm(x, w, np.ones((2, 9), np.float32))
    with pytest.raises(ValueError, match="x"):
        K.rmsnorm(np.ones((4, 8), np.float32)[::2], w, x)
    ro = np.ones((2, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        K.rmsnorm(x, w, ro)
    with pytest.raises(ValueError, match="eps"):
        K.rmsnorm(x, w, x, -1e-5)
    with pytest.raises(ValueError, match="eps"):
        K.layernorm(x, None, None, x, float("nan"))
    with pytest.raises(ValueError, match="bias"):
        K.layernorm(x, None, np.ones(3, np.float32), x)
    with pytest.raises(ValueError, match="x"):
        K.softmax(np.ones((2, 0), np.float32))
    with pytest.raises(ValueError, match="x"):
        K.softmax(ro)
    with pytest.raises(ValueError, match="up"):
        K.silu_mul(x, np.ones(16, np.float32), x)
    with pytest.raises(TypeError, match="gate"):
        K.gelu_mul(x.astype(np.float16), x, x)
    with pytest.raises(ValueError, match="b"):
        K.add(x, np.ones(8, np.float32))


def test_misuse_rope():
    x = np.ones((2, 3, 64), np.float32)
    with pytest.raises(ValueError, match="x"):
        K.rope(np.ones((2, 64), np.float32), 0)
    with pytest.raises(ValueError, match="rot_dim"):
        K.rope(x, 0, rot_dim=63)
    with pytest.raises(ValueError, match="rot_dim"):
        K.rope(x, 0, rot_dim=66)
    with pytest.raises(ValueError, match=r"rot_dim: .* got 63 \(the default, head_dim\)"):
        K.rope(np.ones((2, 3, 63), np.float32), 0)
    with pytest.raises(ValueError, match="freq_base"):
        K.rope(x, 0, 0.0)
    with pytest.raises(ValueError, match="positions"):
        K.rope(x, positions=np.arange(3))
    with pytest.raises(TypeError, match="positions"):
        K.rope(x, positions=np.zeros(2))
    with pytest.raises(ValueError, match="pos0"):
        K.rope(x, 1, positions=np.arange(2))


def test_misuse_attention_and_store():
    q = np.ones((2, 6, 64), np.float32)
    k = np.ones((2, 10, 64), np.float32)
    out = np.empty_like(q)
    with pytest.raises(ValueError, match="pos0"):
        K.attention(q, k, k, 9, out)                    # 9 + 2 > 10
    with pytest.raises(ValueError, match="pos0"):
        K.attention(q, k, k, -1, out)
    with pytest.raises(ValueError, match="k_cache"):
        K.attention(np.ones((2, 5, 64), np.float32), k, k, 0, np.empty((2, 5, 64), np.float32))
    with pytest.raises(ValueError, match="head_dim"):
        K.attention(q, np.ones((2, 10, 32), np.float32), np.ones((2, 10, 32), np.float32), 0, out)
    with pytest.raises(TypeError, match="v_cache"):
        K.attention(q, k, k.astype(np.float16).view(np.uint16), 0, out)
    with pytest.raises(TypeError, match="k_cache"):
        K.attention(q, k.astype(np.float64), k, 0, out)
    with pytest.raises(ValueError, match="v_cache"):
        K.attention(q, k, np.ones((2, 11, 64), np.float32), 0, out)
    with pytest.raises(ValueError, match="out"):
        K.attention(q, k, k, 0, np.empty((2, 6, 32), np.float32))
    with pytest.raises(ValueError, match="window"):
        K.attention(q, k, k, 0, out, window=-1)
    with pytest.raises(ValueError, match="k_cache"):
        K.attention(q, np.ones((2, 10, 128), np.float32)[:, :, :64], k, 0, out)
    with pytest.raises(ValueError, match="q"):
        K.attention(np.ones((2, 6, 2000), np.float32), np.ones((2, 10, 2000), np.float32),
                    np.ones((2, 10, 2000), np.float32), 0, np.empty((2, 6, 2000), np.float32))
    x = np.ones((3, 2, 64), np.float32)
    with pytest.raises(ValueError, match="pos0"):
        K.kv_store(x, k, 8)
    with pytest.raises(ValueError, match="cache"):
        K.kv_store(x, np.ones((3, 10, 64), np.float32), 0)
    with pytest.raises(TypeError, match="cache"):
        K.kv_store(x, np.ones((2, 10, 64), np.float16), 0)
    ro = np.ones((2, 10, 64), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="cache"):
        K.kv_store(x, ro, 0)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_many_rows_on_the_pool(isa, threads):
    # Large enough to be split between threads (rows, and ranges of elementwise ops
    # that do not fall on the 64-element grain).
    r = rng(40 + threads)
    x = r.standard_normal((64, 577)).astype(np.float32)
    w = r.standard_normal(577).astype(np.float32)
    b = r.standard_normal(577).astype(np.float32)
    g = (r.standard_normal((33, 1537)) * 3).astype(np.float32)
    u = r.standard_normal((33, 1537)).astype(np.float32)
    prev = K.get_num_threads()
    try:
        K.set_num_threads(threads)
        out = np.empty_like(x)
        K.rmsnorm(x, w, out, 1e-5)
        np.testing.assert_allclose(out, rmsnorm_ref(x, w, 1e-5), rtol=2e-6, atol=2e-6)
        K.layernorm(x, w, b, out, 1e-5)
        np.testing.assert_allclose(out, layernorm_ref(x, w, b, 1e-5), rtol=1e-5, atol=1e-5)
        sm = x * 5
        K.softmax(sm)
        np.testing.assert_allclose(sm, softmax_ref(x * 5), rtol=1e-5, atol=1e-7)
        h = np.empty_like(g)
        K.silu_mul(g, u, h)
        np.testing.assert_allclose(h, silu_ref(g) * u, rtol=1e-5, atol=1e-6)
        K.gelu_mul(g, u, h)
        np.testing.assert_allclose(h, gelu_tanh_ref(g) * u, rtol=1e-5, atol=1e-6)
    finally:
        K.set_num_threads(prev)


def test_misuse_positions_that_overflow():
    # pos0 + n_tokens wraps int64: every check is written so that it cannot.
    big = 2**63 - 1
    x = np.ones((2, 2, 64), np.float32)
    cache = np.zeros((2, 16, 64), np.float32)
    with pytest.raises(ValueError, match="pos0"):
        K.kv_store(x, cache, big)
    assert not cache.any()
    with pytest.raises(ValueError, match="pos0"):
        K.attention(x, cache, cache, big, np.empty_like(x))
    with pytest.raises(ValueError, match="pos0"):
        K.rope(x.copy(), big)
    for call in (lambda: K.kv_store(x, cache, 2**63), lambda: K.rope(x.copy(), 2**63),
                 lambda: K.attention(x, cache, cache, 2**64, np.empty_like(x))):
        with pytest.raises(ValueError, match="^pos0: .* does not fit a 64-bit integer"):
            call()


@pytest.mark.parametrize("bad", [1.5, 2.0, True, np.float32(1.0), "1"])
def test_misuse_positions_that_are_not_integers(bad):
    """A position, window or rot_dim of 1.5 was truncated to 1 (and True taken as 1):
    a caller's bug run silently at another position."""
    x = np.ones((2, 2, 8), np.float32)
    cache = np.zeros((2, 16, 8), np.float32)
    with pytest.raises(TypeError, match="^pos0: expected an integer"):
        K.kv_store(x, cache, bad)
    assert not cache.any()
    with pytest.raises(TypeError, match="^pos0: expected an integer"):
        K.attention(x, cache, cache, bad, np.empty_like(x))
    with pytest.raises(TypeError, match="^window: expected an integer"):
        K.attention(x, cache, cache, 0, np.empty_like(x), window=bad)
    with pytest.raises(TypeError, match="^pos0: expected an integer"):
        K.rope(x, bad)
    with pytest.raises(TypeError, match="^rot_dim: expected an integer"):
        K.rope(x, rot_dim=bad)
    assert (x == 1).all()
    # numpy integers are integers
    K.kv_store(x, cache, np.int64(3))
    K.attention(x, cache, cache, np.uint8(3), np.empty_like(x), window=np.int32(2))
    K.rope(x, pos0=np.int16(-2), rot_dim=np.int64(4))


def test_misuse_overlapping_buffers():
    # A kernel that reads one buffer while writing another gives wrong numbers when
    # they overlap; only the documented in-place calls (the same buffer) are taken.
    a = np.arange(10, dtype=np.float32)
    with pytest.raises(ValueError, match="^a: shares memory with b"):
        K.add(a[1:], a[:-1])
    np.testing.assert_array_equal(a, np.arange(10))
    np.testing.assert_array_equal(K.add(a, a), 2 * np.arange(10))   # the same buffer: fine
    x = rng(0).standard_normal((4, 64)).astype(np.float32)
    w = np.ones(64, np.float32)
    buf = np.concatenate([x.reshape(-1), np.zeros(64, np.float32)])
    with pytest.raises(ValueError, match="^out:"):
        K.rmsnorm(buf[:256].reshape(4, 64), w, buf[64:].reshape(4, 64))
    with pytest.raises(ValueError, match="^out: shares memory with weight"):
        K.rmsnorm(w.reshape(1, 64), w, w.reshape(1, 64))
    expect = rmsnorm_ref(x, w, 1e-5)
    np.testing.assert_allclose(K.rmsnorm(x, w, x), expect, rtol=1e-5, atol=1e-6)  # in place
    with pytest.raises(ValueError, match="^out:"):
        K.silu_mul(buf[:128], buf[64:192], buf[32:160])
    q = np.ones((2, 2, 64), np.float32)
    cache = np.zeros((2, 16, 64), np.float32)
    with pytest.raises(ValueError, match="^out: shares memory with k_cache"):
        K.attention(q, cache, cache.copy(), 0, cache[0, :4].reshape(2, 2, 64))
    with pytest.raises(ValueError, match="^cache: shares memory with x"):
        K.kv_store(cache[0, 4:6].reshape(2, 1, 64), cache[:1], 0)


def _kernels_in_subprocess(env, code="import infer.kernels as K; print(K.capabilities())"):
    import os
    import subprocess
    import sys

    full = {k: v for k, v in os.environ.items() if k not in ("INFER_ISA", "INFER_NUM_THREADS")}
    full.update(env)
    r = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return eval(r.stdout), r.stderr


def test_environment_is_checked_and_reported():
    caps, err = _kernels_in_subprocess({"INFER_ISA": "avx9"})
    assert "INFER_ISA='avx9' is not a kernel set" in err and "scalar, avx2, avx512, neon" in err
    assert caps["forced"] is None and caps["active"] == K.capabilities()["available"][-1]
    missing = [n for n in ("avx512", "neon", "avx2") if n not in K.capabilities()["available"]]
    caps, err = _kernels_in_subprocess({"INFER_ISA": missing[0]})
    assert "this CPU cannot run it" in err and caps["forced"] is None
    caps, err = _kernels_in_subprocess({"INFER_ISA": "scalar"})
    assert err == "" and caps["forced"] == "scalar" and caps["active"] == "scalar"
    default, _ = _kernels_in_subprocess({})
    caps, err = _kernels_in_subprocess({"INFER_NUM_THREADS": "1e3"})  # atoi read it as 1
    assert "INFER_NUM_THREADS='1e3' is not a whole number >= 1; ignored" in err
    assert caps["num_threads"] == default["num_threads"]
    caps, err = _kernels_in_subprocess({"INFER_NUM_THREADS": "3"})
    assert err == "" and caps["num_threads"] == 3
    caps, err = _kernels_in_subprocess({"INFER_NUM_THREADS": "100000"})
    assert "above the thread pool's limit" in err and caps["num_threads"] == 256


def test_thread_counts_are_integers_and_the_cap_warns():
    before = K.get_num_threads()
    try:
        with pytest.warns(RuntimeWarning, match="limit"):
            K.set_num_threads(1000)
        assert K.get_num_threads() == 256
        with pytest.raises(TypeError):
            K.set_num_threads(1.5)
        with pytest.raises(TypeError):
            K.set_num_threads(True)
        for bad in (0, -1, -2**70):   # -1 said "must be >= 0"
            with pytest.raises(ValueError, match=f"^n: thread count must be >= 1, got {bad}$"):
                K.set_num_threads(bad)
    finally:
        K.set_num_threads(before)
