/* ops_avx2.c: float ops and attention with AVX2 + FMA + F16C, 8 floats a vector.
 * Tails (n % 8) run the scalar formula. */
#include "infer_kernels.h"
#include "ops_internal.h"
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
 * Online softmax over chunks of ATTN_CHUNK positions.  Per chunk: the scores of
 * every query row (each K vector loaded and converted once for up to four
 * queries), then per query a rescale of its accumulator if its running max grew
 * and the exponentials, then the weighted V rows (each V vector loaded once for up
 * to four queries, accumulators in registers across the chunk). */

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
static inline __m256 hsum8x8(const __m256 *s) {
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(s[0], s[1]), _mm256_hadd_ps(s[2], s[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(s[4], s[5]), _mm256_hadd_ps(s[6], s[7]));
    /* t0 = [s0..s3 low halves | s0..s3 high halves], t1 likewise for s4..s7 */
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* s[u * ATTN_CHUNK + j] = qs[u] . k_row(p0 + j) for u < UB (UB <= 4, a constant).
 * RB = 8 / UB rows per pass: eight accumulators (independent FMA chains) whatever
 * the number of queries, reduced together by one hadd tree. */
static ALWAYS_INLINE void attn_scores(const int UB, const float *qs, int64_t d, const void *k,
                                      int64_t p0, int64_t nb, float *s, int f16, int64_t pf) {
    const int RB = UB == 1 ? 8 : UB == 2 ? 4 : 2;
    const int64_t d8 = d & ~(int64_t)7;
    int64_t j = 0;
    for (; j + RB <= nb; j += RB) {
        __m256 a[8];
        float sums[8];
        const int64_t r0 = (p0 + j) * d;
        if (pf) attn_prefetch_rows(k, p0 + j + pf, RB, d, f16);
        for (int x = 0; x < 8; x++) a[x] = _mm256_setzero_ps();
        for (int64_t i = 0; i < d8; i += 8) {
            __m256 qv[4];
            for (int u = 0; u < UB; u++) qv[u] = _mm256_loadu_ps(qs + u * d + i);
            for (int r = 0; r < RB; r++) {
                const __m256 kr = kv_load8(k, r0 + r * d + i, f16);
                for (int u = 0; u < UB; u++) a[u * RB + r] = _mm256_fmadd_ps(qv[u], kr, a[u * RB + r]);
            }
        }
        _mm256_storeu_ps(sums, hsum8x8(a));
        for (int u = 0; u < UB; u++)
            for (int r = 0; r < RB; r++) {
                float sum = sums[u * RB + r];
                for (int64_t i = d8; i < d; i++) sum += qs[u * d + i] * kv_load1(k, r0 + r * d + i, f16);
                s[u * ATTN_CHUNK + j + r] = sum;
            }
    }
    for (; j < nb; j++) {   /* the rows left over: the same FMA chain and hadd tree */
        const int64_t r0 = (p0 + j) * d;
        for (int u = 0; u < UB; u++) {
            __m256 a[8];
            for (int x = 0; x < 8; x++) a[x] = _mm256_setzero_ps();
            for (int64_t i = 0; i < d8; i += 8)
                a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(qs + u * d + i), kv_load8(k, r0 + i, f16), a[0]);
            float s0 = _mm256_cvtss_f32(hsum8x8(a));
            for (int64_t i = d8; i < d; i++) s0 += qs[u * d + i] * kv_load1(k, r0 + i, f16);
            s[u * ATTN_CHUNK + j] = s0;
        }
    }
}

/* acc[u * d + i] += sum_j w[u * ATTN_CHUNK + j] v_row(p0 + j)[i] for u < UB, over
 * the columns from i on in blocks of NV vectors; returns where it stopped.  The
 * accumulators stay in registers for the whole chunk, so NV is chosen to keep
 * UB * NV independent FMA chains in flight. */
static ALWAYS_INLINE int64_t attn_accumulate_cols(const int UB, const int NV, float *acc, int64_t d,
                                                  int64_t i, const void *v, int64_t p0, int64_t nb,
                                                  const float *w, int f16, int64_t pf) {
    for (; i + 8 * NV <= d; i += 8 * NV) {
        __m256 a[4][8];
        for (int u = 0; u < UB; u++)
            for (int x = 0; x < NV; x++) a[u][x] = _mm256_loadu_ps(acc + u * d + i + 8 * x);
        for (int64_t j = 0; j < nb; j++) {
            const int64_t r = (p0 + j) * d + i;
            if (pf && i == 0) attn_prefetch_rows(v, p0 + j + pf, 1, d, f16);   /* the first columns' pass */
            __m256 wv[4];
            for (int u = 0; u < UB; u++) wv[u] = _mm256_broadcast_ss(w + u * ATTN_CHUNK + j);
            for (int x = 0; x < NV; x++) {
                const __m256 vx = kv_load8(v, r + 8 * x, f16);
                for (int u = 0; u < UB; u++) a[u][x] = _mm256_fmadd_ps(wv[u], vx, a[u][x]);
            }
        }
        for (int u = 0; u < UB; u++)
            for (int x = 0; x < NV; x++) _mm256_storeu_ps(acc + u * d + i + 8 * x, a[u][x]);
    }
    return i;
}

static ALWAYS_INLINE void attn_accumulate(const int UB, float *acc, int64_t d, const void *v,
                                          int64_t p0, int64_t nb, const float *w, int f16, int64_t pf) {
    int64_t i = 0;
    if (UB == 1) i = attn_accumulate_cols(UB, 8, acc, d, i, v, p0, nb, w, f16, pf);
    if (UB <= 2) i = attn_accumulate_cols(UB, 4, acc, d, i, v, p0, nb, w, f16, pf);
    i = attn_accumulate_cols(UB, 2, acc, d, i, v, p0, nb, w, f16, pf);
    i = attn_accumulate_cols(UB, 1, acc, d, i, v, p0, nb, w, f16, pf);
    for (; i < d; i++)
        for (int64_t j = 0; j < nb; j++)
            for (int u = 0; u < UB; u++)
                acc[u * d + i] += w[u * ATTN_CHUNK + j] * kv_load1(v, (p0 + j) * d + i, f16);
}

/* The chunk padded to whole vectors with -inf (exp 0; s has ATTN_CHUNK floats), so
 * that position j always lands in lane j % 8 through exp8: the sum does not depend
 * on how many rows the chunk has, i.e. on the other queries of the call. */
static float attn_exp_sum(float *s, int64_t nb, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = nb; j % 8; j++) s[j] = -INFINITY;
    for (int64_t j = 0; j < nb; j += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    return hsum8(sum);
}

/* vmaxps returns its second operand when either is NaN: a NaN score never wins */
static float attn_max(const float *s, int64_t n) {
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) mx = _mm256_max_ps(_mm256_loadu_ps(s + j), mx);
    float lanes[8], m = -INFINITY;
    _mm256_storeu_ps(lanes, mx);
    for (int i = 0; i < 8; i++) m = lanes[i] > m ? lanes[i] : m;
    for (; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}

#define attn_rescale scale_avx2
#define OPS_ISA avx2
#include "ops_attn_loop.h"

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
    t->attn_block_f32 = attn_block_f32_avx2;
    t->attn_block_f16 = attn_block_f16_avx2;
}
#endif
