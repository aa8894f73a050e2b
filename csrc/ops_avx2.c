/* ops_avx2.c: float ops and attention with AVX2 + FMA + F16C, 8 floats a vector.
 * Tails (n % 8) run the scalar formula. */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* exp(x) to about 2 ulp: x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial in r
 * (Cephes expf coefficients), then 2^n added to the exponent field.  Inputs below
 * ln(FLT_MIN) (including -inf) give 0; inputs above 88 give exp(88). */
static inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  /* ln2 split in two */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static void rmsnorm_avx2(const float *x, const float *weight, float *out, int64_t n, float eps) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(x0, x0, a0);
        a1 = _mm256_fmadd_ps(x1, x1, a1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 x0 = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(x0, x0, a0);
    }
    double ss = hsum8(_mm256_add_ps(a0, a1));
    for (; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    const __m256 vr = _mm256_set1_ps(r);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vr),
                                                _mm256_loadu_ps(weight + i)));
    for (; i < n; i++) out[i] = x[i] * r * weight[i];
}

static void layernorm_avx2(const float *x, const float *weight, const float *bias, float *out,
                           int64_t n, float eps) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + i));
    double sum = hsum8(acc);
    for (; i < n; i++) sum += x[i];
    const float mean = (float)(sum / (double)n);
    const __m256 vm = _mm256_set1_ps(mean);
    acc = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
        acc = _mm256_fmadd_ps(d, d, acc);
    }
    double var = hsum8(acc);
    for (; i < n; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
    const float r = (float)(1.0 / sqrt(var / (double)n + (double)eps));
    const __m256 vr = _mm256_set1_ps(r);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 y = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
        if (weight) y = _mm256_mul_ps(y, _mm256_loadu_ps(weight + i));
        if (bias) y = _mm256_add_ps(y, _mm256_loadu_ps(bias + i));
        _mm256_storeu_ps(out + i, y);
    }
    for (; i < n; i++) {
        float y = (x[i] - mean) * r;
        if (weight) y *= weight[i];
        if (bias) y += bias[i];
        out[i] = y;
    }
}

static void softmax_avx2(float *x, int64_t n) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float max = hmax8(vmax);
    for (; i < n; i++) max = x[i] > max ? x[i] : max;
    if (max == -INFINITY) {
        for (i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    vmax = _mm256_set1_ps(max);
    __m256 acc = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    double sum = hsum8(acc);
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float r = (float)(1.0 / sum);
    const __m256 vr = _mm256_set1_ps(r);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vr));
    for (; i < n; i++) x[i] *= r;
}

/* silu(x) = x / (1 + exp(-x)) */
static void silu_mul_avx2(const float *gate, const float *up, float *out, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, g))));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* gelu_tanh(x) = x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) */
static void gelu_mul_avx2(const float *gate, const float *up, float *out, int64_t n) {
    const float c = 0.7978845608028654f;
    const __m256 one = _mm256_set1_ps(1.0f), m2c = _mm256_set1_ps(-2.0f * c);
    const __m256 k = _mm256_set1_ps(0.044715f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(gate + i);
        __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(k, x), _mm256_mul_ps(x, x), x);
        __m256 e = exp8(_mm256_mul_ps(m2c, inner));
        __m256 g = _mm256_div_ps(x, _mm256_add_ps(one, e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        float x = gate[i];
        float z2 = 2.0f * c * (x + 0.044715f * x * x * x);
        out[i] = x / (1.0f + expf(-z2)) * up[i];
    }
}

static void add_avx2(float *a, const float *b, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) a[i] += b[i];
}

static void scale_avx2(float *x, float s, int64_t n) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++) x[i] *= s;
}

/* Adjacent pairs: even lanes x0 c - x1 s, odd lanes x1 c + x0 s; fmaddsub does
 * the sign per lane once x is pair-swapped. */
static void rope_norm_avx2(float *x, const float *cs, const float *sn, int64_t rot_dim) {
    int64_t i = 0;
    for (; i + 8 <= rot_dim; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 swapped = _mm256_permute_ps(v, 0xB1);
        _mm256_storeu_ps(x + i, _mm256_fmaddsub_ps(v, _mm256_loadu_ps(cs + i),
                                                   _mm256_mul_ps(swapped, _mm256_loadu_ps(sn + i))));
    }
    for (; i < rot_dim; i += 2) {
        float x0 = x[i], x1 = x[i + 1];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + 1] = x0 * sn[i] + x1 * cs[i];
    }
}

static void rope_neox_avx2(float *x, const float *cs, const float *sn, int64_t rot_dim) {
    const int64_t half = rot_dim / 2;
    int64_t i = 0;
    for (; i + 8 <= half; i += 8) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + half + i);
        __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
        _mm256_storeu_ps(x + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(x + half + i, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
    }
    for (; i < half; i++) {
        float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + half] = x0 * sn[i] + x1 * cs[i];
    }
}

/* ---- attention -------------------------------------------------------------------
 * Online softmax over chunks of ATTN_CHUNK positions: scores of the chunk, one
 * rescale of the accumulator if the running max grew, then the weighted V rows,
 * four at a time so each accumulator vector is loaded and stored once per four.
 * Rows of K are read four at a time against one load of q. */
#define ATTN_CHUNK 64

#if defined(_MSC_VER)
#define ALWAYS_INLINE __forceinline
#else
#define ALWAYS_INLINE inline __attribute__((always_inline))
#endif

/* Cache elements i..i+7 (or i) of a row block stored as F32 or F16 bits; f16 is a
 * constant at every call site, so each kernel below compiles without the branch. */
static ALWAYS_INLINE __m256 kv_load8(const void *p, int64_t i, int f16) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const infer_half *)p + i)));
    return _mm256_loadu_ps((const float *)p + i);
}
static ALWAYS_INLINE float kv_load1(const void *p, int64_t i, int f16) {
    return f16 ? _cvtsh_ss(((const infer_half *)p)[i]) : ((const float *)p)[i];
}

/* The eight horizontal sums of s0..s7, in order, as one vector. */
static inline __m256 hsum8x8(__m256 s0, __m256 s1, __m256 s2, __m256 s3, __m256 s4, __m256 s5,
                             __m256 s6, __m256 s7) {
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(s4, s5), _mm256_hadd_ps(s6, s7));
    /* t0 = [s0..s3 low halves | s0..s3 high halves], t1 likewise for s4..s7 */
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* s[j] = qs . k_row(j) for the nb rows of a chunk starting at element offset base;
 * eight rows per pass so that one tree of hadds reduces all eight. */
static ALWAYS_INLINE void attn_scores(const float *qs, const void *k, int64_t base, int64_t nb,
                                      int64_t d, float *s, int f16) {
    const int64_t d8 = d & ~(int64_t)7;
    int64_t j = 0;
    for (; j + 8 <= nb; j += 8) {
        __m256 a[8];
        const int64_t r = base + j * d;
        for (int u = 0; u < 8; u++) a[u] = _mm256_setzero_ps();
        for (int64_t i = 0; i < d8; i += 8) {
            const __m256 qv = _mm256_loadu_ps(qs + i);
            for (int u = 0; u < 8; u++) a[u] = _mm256_fmadd_ps(qv, kv_load8(k, r + u * d + i, f16), a[u]);
        }
        _mm256_storeu_ps(s + j, hsum8x8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]));
        for (int64_t i = d8; i < d; i++)
            for (int u = 0; u < 8; u++) s[j + u] += qs[i] * kv_load1(k, r + u * d + i, f16);
    }
    for (; j < nb; j++) {
        __m256 s0 = _mm256_setzero_ps();
        const int64_t r = base + j * d;
        for (int64_t i = 0; i < d8; i += 8)
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qs + i), kv_load8(k, r + i, f16), s0);
        s[j] = hsum8(s0);
        for (int64_t i = d8; i < d; i++) s[j] += qs[i] * kv_load1(k, r + i, f16);
    }
}

/* acc += sum_j w[j] v_row(j), four rows per pass over acc. */
static ALWAYS_INLINE void attn_accumulate(float *acc, const void *v, int64_t base, int64_t nb,
                                          int64_t d, const float *w, int f16) {
    const int64_t d8 = d & ~(int64_t)7;
    int64_t j = 0;
    for (; j + 4 <= nb; j += 4) {
        const __m256 w0 = _mm256_set1_ps(w[j]), w1 = _mm256_set1_ps(w[j + 1]);
        const __m256 w2 = _mm256_set1_ps(w[j + 2]), w3 = _mm256_set1_ps(w[j + 3]);
        const int64_t r = base + j * d;
        for (int64_t i = 0; i < d8; i += 8) {
            __m256 a = _mm256_loadu_ps(acc + i);
            a = _mm256_fmadd_ps(w0, kv_load8(v, r + i, f16), a);
            a = _mm256_fmadd_ps(w1, kv_load8(v, r + d + i, f16), a);
            a = _mm256_fmadd_ps(w2, kv_load8(v, r + 2 * d + i, f16), a);
            a = _mm256_fmadd_ps(w3, kv_load8(v, r + 3 * d + i, f16), a);
            _mm256_storeu_ps(acc + i, a);
        }
        for (int64_t i = d8; i < d; i++)
            for (int u = 0; u < 4; u++) acc[i] += w[j + u] * kv_load1(v, r + u * d + i, f16);
    }
    for (; j < nb; j++) {
        const __m256 w0 = _mm256_set1_ps(w[j]);
        const int64_t r = base + j * d;
        for (int64_t i = 0; i < d8; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(w0, kv_load8(v, r + i, f16),
                                                      _mm256_loadu_ps(acc + i)));
        for (int64_t i = d8; i < d; i++) acc[i] += w[j] * kv_load1(v, r + i, f16);
    }
}

static ALWAYS_INLINE void attn_avx2(const float *q, const void *k, const void *v, int64_t n_pos,
                                    int64_t d, float scale, float *out, int f16) {
    float qs[INFER_ATTN_MAX_HEAD_DIM], acc[INFER_ATTN_MAX_HEAD_DIM], s[ATTN_CHUNK];
    for (int64_t i = 0; i < d; i++) { qs[i] = q[i] * scale; acc[i] = 0.0f; }
    float m = -INFINITY, l = 0.0f;
    for (int64_t p0 = 0; p0 < n_pos; p0 += ATTN_CHUNK) {
        const int64_t nb = n_pos - p0 < ATTN_CHUNK ? n_pos - p0 : ATTN_CHUNK;
        attn_scores(qs, k, p0 * d, nb, d, s, f16);
        float cmax = -INFINITY;
        for (int64_t j = 0; j < nb; j++) cmax = s[j] > cmax ? s[j] : cmax;
        if (cmax == -INFINITY) continue;
        if (cmax > m) {
            const float c = expf(m - cmax);  /* 0 on the first chunk */
            l *= c;
            scale_avx2(acc, c, d);
            m = cmax;
        }
        const __m256 vm = _mm256_set1_ps(m);
        int64_t j = 0;
        for (; j + 8 <= nb; j += 8)
            _mm256_storeu_ps(s + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm)));
        for (; j < nb; j++) s[j] = expf(s[j] - m);
        for (j = 0; j < nb; j++) l += s[j];
        attn_accumulate(acc, v, p0 * d, nb, d, s, f16);
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t i = 0; i < d; i++) out[i] = acc[i] * inv;
}

static void attn_f32_avx2(const float *q, const void *k, const void *v, int64_t n_pos,
                          int64_t d, float scale, float *out) {
    attn_avx2(q, k, v, n_pos, d, scale, out, 0);
}

static void attn_f16_avx2(const float *q, const void *k, const void *v, int64_t n_pos,
                          int64_t d, float scale, float *out) {
    attn_avx2(q, k, v, n_pos, d, scale, out, 1);
}

void infer_fill_ops_avx2(infer_kernel_table *t) {
    t->rmsnorm = rmsnorm_avx2;
    t->layernorm = layernorm_avx2;
    t->softmax = softmax_avx2;
    t->silu_mul = silu_mul_avx2;
    t->gelu_mul = gelu_mul_avx2;
    t->add = add_avx2;
    t->scale = scale_avx2;
    t->rope_norm = rope_norm_avx2;
    t->rope_neox = rope_neox_avx2;
    t->attn_f32 = attn_f32_avx2;
    t->attn_f16 = attn_f16_avx2;
}
#endif
