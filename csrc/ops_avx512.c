/* ops_avx512.c: float ops and attention with AVX-512 F/VL/BW, 16 floats a vector.
 * Tails use masked loads and stores, so every element goes through the same
 * vector formula. */
#include "infer_kernels.h"
#include "ops_internal.h"
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>

/* Lanes [0, n) of a 16-lane vector, n <= 16 (all when n >= 16). */
static inline __mmask16 tail_mask(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* exp(x) to about 2 ulp, as exp8 in ops_avx2.c: Cephes polynomial on the reduced
 * argument, then scalef by 2^n.  Below ln(FLT_MIN) (and -inf) gives 0. */
static inline __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.33654f);
    const __mmask16 ok = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_scalef_ps(ok, p, n);
}

static void rmsnorm_avx512(const float *x, const float *weight, float *out, int64_t n, float eps) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_fmadd_ps(x0, x0, a0);
        a1 = _mm512_fmadd_ps(x1, x1, a1);
    }
    for (; i < n; i += 16) {
        __m512 x0 = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        a0 = _mm512_fmadd_ps(x0, x0, a0);
    }
    const double ss = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    const __m512 vr = _mm512_set1_ps((float)(1.0 / sqrt(ss / (double)n + (double)eps)));
    for (i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        __m512 y = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vr);
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(y, _mm512_maskz_loadu_ps(k, weight + i)));
    }
}

static void layernorm_avx512(const float *x, const float *weight, const float *bias, float *out,
                             int64_t n, float eps) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16)
        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
    const __m512 vm = _mm512_set1_ps((float)((double)_mm512_reduce_add_ps(acc) / (double)n));
    acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + i), vm);
        acc = _mm512_fmadd_ps(d, d, acc);
    }
    const double var = _mm512_reduce_add_ps(acc);
    const __m512 vr = _mm512_set1_ps((float)(1.0 / sqrt(var / (double)n + (double)eps)));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        __m512 y = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), vr);
        if (weight) y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(k, weight + i));
        if (bias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(k, bias + i));
        _mm512_mask_storeu_ps(out + i, k, y);
    }
}

static void softmax_avx512(float *x, int64_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 vmax = ninf;
    for (int64_t i = 0; i < n; i += 16)
        vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(ninf, tail_mask(n - i), x + i));
    const float max = _mm512_reduce_max_ps(vmax);
    if (max == -INFINITY) {
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    vmax = _mm512_set1_ps(max);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, k, x + i), vmax));
        _mm512_mask_storeu_ps(x + i, k, e);
        acc = _mm512_add_ps(acc, e);   /* masked-off lanes are exp(-inf) = 0 */
    }
    const __m512 vr = _mm512_set1_ps((float)(1.0 / (double)_mm512_reduce_add_ps(acc)));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vr));
    }
}

static void silu_mul_avx512(const float *gate, const float *up, float *out, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        __m512 g = _mm512_maskz_loadu_ps(k, gate + i);
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, g))));
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, up + i)));
    }
}

static void gelu_mul_avx512(const float *gate, const float *up, float *out, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), m2c = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
    const __m512 c3 = _mm512_set1_ps(0.044715f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        __m512 x = _mm512_maskz_loadu_ps(k, gate + i);
        __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(c3, x), _mm512_mul_ps(x, x), x);
        __m512 g = _mm512_div_ps(x, _mm512_add_ps(one, exp16(_mm512_mul_ps(m2c, inner))));
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, up + i)));
    }
}

static void add_avx512(float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(a + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, a + i),
                                                      _mm512_maskz_loadu_ps(k, b + i)));
    }
}

static void scale_avx512(float *x, float s, int64_t n) {
    const __m512 vs = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vs));
    }
}

static void rope_norm_avx512(float *x, const float *cs, const float *sn, int64_t rot_dim) {
    for (int64_t i = 0; i < rot_dim; i += 16) {
        const __mmask16 k = tail_mask(rot_dim - i);   /* rot_dim is even: pairs stay whole */
        __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        __m512 swapped = _mm512_permute_ps(v, 0xB1);
        __m512 y = _mm512_fmaddsub_ps(v, _mm512_maskz_loadu_ps(k, cs + i),
                                      _mm512_mul_ps(swapped, _mm512_maskz_loadu_ps(k, sn + i)));
        _mm512_mask_storeu_ps(x + i, k, y);
    }
}

static void rope_neox_avx512(float *x, const float *cs, const float *sn, int64_t rot_dim) {
    const int64_t half = rot_dim / 2;
    for (int64_t i = 0; i < half; i += 16) {
        const __mmask16 k = tail_mask(half - i);
        __m512 a = _mm512_maskz_loadu_ps(k, x + i), b = _mm512_maskz_loadu_ps(k, x + half + i);
        __m512 c = _mm512_maskz_loadu_ps(k, cs + i), s = _mm512_maskz_loadu_ps(k, sn + i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
        _mm512_mask_storeu_ps(x + half + i, k, _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
    }
}

/* ---- attention: as in ops_avx2.c (chunked online softmax; each K and V vector
 * loaded once for up to four queries), 16 lanes with a masked last vector of each
 * row. */
static ALWAYS_INLINE __m512 kv_load16(const void *p, int64_t i, __mmask16 k, int f16) {
    if (f16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const infer_half *)p + i));
    return _mm512_maskz_loadu_ps(k, (const float *)p + i);
}

/* The eight horizontal sums of s[0..7] (16 lanes each), in order, as one vector:
 * fold each to 8 lanes, then one tree of hadds. */
static inline __m256 fold16(__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}
static inline __m256 hsum16x8(const __m512 *s) {
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(fold16(s[0]), fold16(s[1])),
                                     _mm256_hadd_ps(fold16(s[2]), fold16(s[3])));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(fold16(s[4]), fold16(s[5])),
                                     _mm256_hadd_ps(fold16(s[6]), fold16(s[7])));
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* s[u * ATTN_CHUNK + j] = qs[u] . k_row(p0 + j) for u < UB (UB <= 4, a constant):
 * RB rows per pass so that at least eight accumulators are in flight. */
static ALWAYS_INLINE void attn_scores(const int UB, const float *qs, int64_t d, const void *k,
                                      int64_t p0, int64_t nb, float *s, int f16, int64_t pf) {
    const int RB = UB == 1 ? 8 : 4;
    int64_t j = 0;
    for (; j + RB <= nb; j += RB) {
        __m512 a[16];
        float sums[16];
        const int64_t r0 = (p0 + j) * d;
        if (pf) attn_prefetch_rows(k, p0 + j + pf, RB, d, f16);
        for (int x = 0; x < 16; x++) a[x] = _mm512_setzero_ps();
        for (int64_t i = 0; i < d; i += 16) {
            const __mmask16 mk = tail_mask(d - i);
            __m512 qv[4];
            for (int u = 0; u < UB; u++) qv[u] = _mm512_maskz_loadu_ps(mk, qs + u * d + i);
            for (int r = 0; r < RB; r++) {
                const __m512 kr = kv_load16(k, r0 + r * d + i, mk, f16);
                for (int u = 0; u < UB; u++) a[u * RB + r] = _mm512_fmadd_ps(qv[u], kr, a[u * RB + r]);
            }
        }
        _mm256_storeu_ps(sums, hsum16x8(a));
        if (UB * RB > 8) _mm256_storeu_ps(sums + 8, hsum16x8(a + 8));
        for (int u = 0; u < UB; u++)
            for (int r = 0; r < RB; r++) s[u * ATTN_CHUNK + j + r] = sums[u * RB + r];
    }
    for (; j < nb; j++) {   /* the rows left over: the same FMA chain and reduction tree */
        const int64_t r = (p0 + j) * d;
        for (int u = 0; u < UB; u++) {
            __m512 a[8];
            for (int x = 0; x < 8; x++) a[x] = _mm512_setzero_ps();
            for (int64_t i = 0; i < d; i += 16) {
                const __mmask16 mk = tail_mask(d - i);
                a[0] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, qs + u * d + i),
                                       kv_load16(k, r + i, mk, f16), a[0]);
            }
            s[u * ATTN_CHUNK + j] = _mm256_cvtss_f32(hsum16x8(a));
        }
    }
}

/* acc[u * d + i] += sum_j w[u * ATTN_CHUNK + j] v_row(p0 + j)[i] for u < UB, over
 * the columns from i on in blocks of NV vectors (the last one masked when mask_tail);
 * returns where it stopped.  UB * NV accumulators stay in registers for the chunk. */
static ALWAYS_INLINE int64_t attn_accumulate_cols(const int UB, const int NV, const int mask_tail,
                                                  float *acc, int64_t d, int64_t i, const void *v,
                                                  int64_t p0, int64_t nb, const float *w, int f16,
                                                  int64_t pf) {
    for (; mask_tail ? i < d : i + 16 * NV <= d; i += 16 * NV) {
        const __mmask16 mk = mask_tail ? tail_mask(d - i) : (__mmask16)0xffff;
        __m512 a[4][8];
        for (int u = 0; u < UB; u++)
            for (int x = 0; x < NV; x++) a[u][x] = _mm512_maskz_loadu_ps(mk, acc + u * d + i + 16 * x);
        for (int64_t j = 0; j < nb; j++) {
            const int64_t r = (p0 + j) * d + i;
            if (pf && i == 0) attn_prefetch_rows(v, p0 + j + pf, 1, d, f16);   /* the first columns' pass */
            __m512 wv[4];
            for (int u = 0; u < UB; u++) wv[u] = _mm512_set1_ps(w[u * ATTN_CHUNK + j]);
            for (int x = 0; x < NV; x++) {
                const __m512 vx = kv_load16(v, r + 16 * x, mk, f16);
                for (int u = 0; u < UB; u++) a[u][x] = _mm512_fmadd_ps(wv[u], vx, a[u][x]);
            }
        }
        for (int u = 0; u < UB; u++)
            for (int x = 0; x < NV; x++) _mm512_mask_storeu_ps(acc + u * d + i + 16 * x, mk, a[u][x]);
    }
    return i;
}

static ALWAYS_INLINE void attn_accumulate(const int UB, float *acc, int64_t d, const void *v,
                                          int64_t p0, int64_t nb, const float *w, int f16, int64_t pf) {
    int64_t i = 0;
    /* 3-4 queries x 4 vectors of accumulators when that is a whole row of 64 in one pass
     * (SmolLM2's heads, from memory: 0.82-0.88x the time, alternated in one process);
     * rows of 256 (Gemma 3's) gained nothing clear from it and keep 8 passes of 2 vectors */
    if (UB <= 2 || d <= 64) i = attn_accumulate_cols(UB, 4, 0, acc, d, i, v, p0, nb, w, f16, pf);
    i = attn_accumulate_cols(UB, 2, 0, acc, d, i, v, p0, nb, w, f16, pf);
    attn_accumulate_cols(UB, 1, 1, acc, d, i, v, p0, nb, w, f16, pf);
}

static float attn_exp_sum(float *s, int64_t nb, float m) {
    const __m512 vm = _mm512_set1_ps(m), ninf = _mm512_set1_ps(-INFINITY);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < nb; j += 16) {
        const __mmask16 km = tail_mask(nb - j);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, km, s + j), vm));
        _mm512_mask_storeu_ps(s + j, km, e);
        sum = _mm512_add_ps(sum, e);   /* masked-off lanes are exp(-inf) = 0 */
    }
    return _mm512_reduce_add_ps(sum);
}

/* vmaxps returns its second operand when either is NaN: a NaN score never wins */
static float attn_max(const float *s, int64_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    for (int64_t j = 0; j < n; j += 16)
        mx = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail_mask(n - j), s + j), mx);
    return _mm512_reduce_max_ps(mx);
}

#define attn_rescale scale_avx512
#define OPS_ISA avx512
#include "ops_attn_loop.h"

void infer_fill_ops_avx512(infer_kernel_table *t) {
    t->rmsnorm = rmsnorm_avx512;
    t->layernorm = layernorm_avx512;
    t->softmax = softmax_avx512;
    t->silu_mul = silu_mul_avx512;
    t->gelu_mul = gelu_mul_avx512;
    t->add = add_avx512;
    t->scale = scale_avx512;
    t->rope_norm = rope_norm_avx512;
    t->rope_neox = rope_neox_avx512;
    t->attn_f32 = attn_f32_avx512;
    t->attn_f16 = attn_f16_avx512;
    t->attn_block_f32 = attn_block_f32_avx512;
    t->attn_block_f16 = attn_block_f16_avx512;
}
#endif
