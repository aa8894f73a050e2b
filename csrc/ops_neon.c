/* ops_neon.c: float ops and attention with AArch64 Advanced SIMD, 4 floats a vector.
 * Tails (n % 4) run the scalar formula.  Checked against the scalar table under
 * qemu-aarch64 by tests/c/ops_neon_check.c (tests/test_kernels_ops_neon.py). */
#include "infer_kernels.h"
#if defined(__aarch64__) || defined(_M_ARM64)
#include <arm_neon.h>
#include <math.h>

#if defined(_MSC_VER)
#define ALWAYS_INLINE __forceinline
#else
#define ALWAYS_INLINE inline __attribute__((always_inline))
#endif

/* exp(x) to about 2 ulp, as exp8 in ops_avx2.c: Cephes polynomial on the reduced
 * argument, 2^n built in the exponent field.  Below ln(FLT_MIN) (and -inf) gives 0. */
static inline float32x4_t exp4(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-87.33654f);
    const uint32x4_t ok = vcgeq_f32(x, lo);
    x = vminq_f32(vmaxq_f32(x, lo), vdupq_n_f32(88.0f));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(y), ok));
}

static void rmsnorm_neon(const float *x, const float *weight, float *out, int64_t n, float eps) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t x0 = vld1q_f32(x + i), x1 = vld1q_f32(x + i + 4);
        a0 = vfmaq_f32(a0, x0, x0);
        a1 = vfmaq_f32(a1, x1, x1);
    }
    for (; i + 4 <= n; i += 4) {
        float32x4_t x0 = vld1q_f32(x + i);
        a0 = vfmaq_f32(a0, x0, x0);
    }
    double ss = vaddvq_f32(vaddq_f32(a0, a1));
    for (; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (i = 0; i + 4 <= n; i += 4)
        vst1q_f32(out + i, vmulq_f32(vmulq_n_f32(vld1q_f32(x + i), r), vld1q_f32(weight + i)));
    for (; i < n; i++) out[i] = x[i] * r * weight[i];
}

static void layernorm_neon(const float *x, const float *weight, const float *bias, float *out,
                           int64_t n, float eps) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) acc = vaddq_f32(acc, vld1q_f32(x + i));
    double sum = vaddvq_f32(acc);
    for (; i < n; i++) sum += x[i];
    const float mean = (float)(sum / (double)n);
    const float32x4_t vm = vdupq_n_f32(mean);
    acc = vdupq_n_f32(0.0f);
    for (i = 0; i + 4 <= n; i += 4) {
        float32x4_t d = vsubq_f32(vld1q_f32(x + i), vm);
        acc = vfmaq_f32(acc, d, d);
    }
    double var = vaddvq_f32(acc);
    for (; i < n; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
    const float r = (float)(1.0 / sqrt(var / (double)n + (double)eps));
    for (i = 0; i + 4 <= n; i += 4) {
        float32x4_t y = vmulq_n_f32(vsubq_f32(vld1q_f32(x + i), vm), r);
        if (weight) y = vmulq_f32(y, vld1q_f32(weight + i));
        if (bias) y = vaddq_f32(y, vld1q_f32(bias + i));
        vst1q_f32(out + i, y);
    }
    for (; i < n; i++) {
        float y = (x[i] - mean) * r;
        if (weight) y *= weight[i];
        if (bias) y += bias[i];
        out[i] = y;
    }
}

static void softmax_neon(float *x, int64_t n) {
    float32x4_t vmax = vdupq_n_f32(-INFINITY);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vmax = vmaxq_f32(vmax, vld1q_f32(x + i));
    float max = vmaxvq_f32(vmax);
    for (; i < n; i++) max = x[i] > max ? x[i] : max;
    if (max == -INFINITY) {
        for (i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    vmax = vdupq_n_f32(max);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (i = 0; i + 4 <= n; i += 4) {
        float32x4_t e = exp4(vsubq_f32(vld1q_f32(x + i), vmax));
        vst1q_f32(x + i, e);
        acc = vaddq_f32(acc, e);
    }
    double sum = vaddvq_f32(acc);
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float r = (float)(1.0 / sum);
    for (i = 0; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_n_f32(vld1q_f32(x + i), r));
    for (; i < n; i++) x[i] *= r;
}

static void silu_mul_neon(const float *gate, const float *up, float *out, int64_t n) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t g = vld1q_f32(gate + i);
        float32x4_t s = vdivq_f32(g, vaddq_f32(one, exp4(vnegq_f32(g))));
        vst1q_f32(out + i, vmulq_f32(s, vld1q_f32(up + i)));
    }
    for (; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static void gelu_mul_neon(const float *gate, const float *up, float *out, int64_t n) {
    const float c = 0.7978845608028654f;
    const float32x4_t one = vdupq_n_f32(1.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t x = vld1q_f32(gate + i);
        float32x4_t inner = vfmaq_f32(x, vmulq_n_f32(x, 0.044715f), vmulq_f32(x, x));
        float32x4_t e = exp4(vmulq_n_f32(inner, -2.0f * c));
        vst1q_f32(out + i, vmulq_f32(vdivq_f32(x, vaddq_f32(one, e)), vld1q_f32(up + i)));
    }
    for (; i < n; i++) {
        float x = gate[i];
        float z2 = 2.0f * c * (x + 0.044715f * x * x * x);
        out[i] = x / (1.0f + expf(-z2)) * up[i];
    }
}

static void add_neon(float *a, const float *b, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(a + i, vaddq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
    for (; i < n; i++) a[i] += b[i];
}

static void scale_neon(float *x, float s, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_n_f32(vld1q_f32(x + i), s));
    for (; i < n; i++) x[i] *= s;
}

/* Adjacent pairs: vld2q splits even and odd elements (cs and sn repeat each value
 * twice, so their even lanes are the per-pair values). */
static void rope_norm_neon(float *x, const float *cs, const float *sn, int64_t rot_dim) {
    int64_t i = 0;
    for (; i + 8 <= rot_dim; i += 8) {
        float32x4x2_t v = vld2q_f32(x + i);
        const float32x4_t c = vld2q_f32(cs + i).val[0], s = vld2q_f32(sn + i).val[0];
        float32x4x2_t y;
        y.val[0] = vfmsq_f32(vmulq_f32(v.val[0], c), v.val[1], s);
        y.val[1] = vfmaq_f32(vmulq_f32(v.val[1], c), v.val[0], s);
        vst2q_f32(x + i, y);
    }
    for (; i < rot_dim; i += 2) {
        float x0 = x[i], x1 = x[i + 1];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + 1] = x0 * sn[i] + x1 * cs[i];
    }
}

static void rope_neox_neon(float *x, const float *cs, const float *sn, int64_t rot_dim) {
    const int64_t half = rot_dim / 2;
    int64_t i = 0;
    for (; i + 4 <= half; i += 4) {
        float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + half + i);
        float32x4_t c = vld1q_f32(cs + i), s = vld1q_f32(sn + i);
        vst1q_f32(x + i, vfmsq_f32(vmulq_f32(a, c), b, s));
        vst1q_f32(x + half + i, vfmaq_f32(vmulq_f32(b, c), a, s));
    }
    for (; i < half; i++) {
        float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + half] = x0 * sn[i] + x1 * cs[i];
    }
}

/* ---- attention: as in ops_avx2.c (chunked online softmax, K and V rows four at
 * a time), 4 lanes. */
#define ATTN_CHUNK 64

static ALWAYS_INLINE float32x4_t kv_load4(const void *p, int64_t i, int f16) {
    if (f16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p + i)));
    return vld1q_f32((const float *)p + i);
}
static ALWAYS_INLINE float kv_load1(const void *p, int64_t i, int f16) {
    return f16 ? infer_fp16_to_fp32(((const infer_half *)p)[i]) : ((const float *)p)[i];
}

static ALWAYS_INLINE void attn_scores(const float *qs, const void *k, int64_t base, int64_t nb,
                                      int64_t d, float *s, int f16) {
    const int64_t d4 = d & ~(int64_t)3;
    int64_t j = 0;
    for (; j + 4 <= nb; j += 4) {
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
        const int64_t r = base + j * d;
        for (int64_t i = 0; i < d4; i += 4) {
            const float32x4_t qv = vld1q_f32(qs + i);
            a0 = vfmaq_f32(a0, qv, kv_load4(k, r + i, f16));
            a1 = vfmaq_f32(a1, qv, kv_load4(k, r + d + i, f16));
            a2 = vfmaq_f32(a2, qv, kv_load4(k, r + 2 * d + i, f16));
            a3 = vfmaq_f32(a3, qv, kv_load4(k, r + 3 * d + i, f16));
        }
        /* pairwise adds: lane u of the result is the sum of a_u */
        vst1q_f32(s + j, vpaddq_f32(vpaddq_f32(a0, a1), vpaddq_f32(a2, a3)));
        for (int64_t i = d4; i < d; i++)
            for (int u = 0; u < 4; u++) s[j + u] += qs[i] * kv_load1(k, r + u * d + i, f16);
    }
    for (; j < nb; j++) {
        float32x4_t a0 = vdupq_n_f32(0.0f);
        const int64_t r = base + j * d;
        for (int64_t i = 0; i < d4; i += 4) a0 = vfmaq_f32(a0, vld1q_f32(qs + i), kv_load4(k, r + i, f16));
        s[j] = vaddvq_f32(a0);
        for (int64_t i = d4; i < d; i++) s[j] += qs[i] * kv_load1(k, r + i, f16);
    }
}

static ALWAYS_INLINE void attn_accumulate(float *acc, const void *v, int64_t base, int64_t nb,
                                          int64_t d, const float *w, int f16) {
    const int64_t d4 = d & ~(int64_t)3;
    int64_t j = 0;
    for (; j + 4 <= nb; j += 4) {
        const int64_t r = base + j * d;
        for (int64_t i = 0; i < d4; i += 4) {
            float32x4_t a = vld1q_f32(acc + i);
            a = vfmaq_n_f32(a, kv_load4(v, r + i, f16), w[j]);
            a = vfmaq_n_f32(a, kv_load4(v, r + d + i, f16), w[j + 1]);
            a = vfmaq_n_f32(a, kv_load4(v, r + 2 * d + i, f16), w[j + 2]);
            a = vfmaq_n_f32(a, kv_load4(v, r + 3 * d + i, f16), w[j + 3]);
            vst1q_f32(acc + i, a);
        }
        for (int64_t i = d4; i < d; i++)
            for (int u = 0; u < 4; u++) acc[i] += w[j + u] * kv_load1(v, r + u * d + i, f16);
    }
    for (; j < nb; j++) {
        const int64_t r = base + j * d;
        for (int64_t i = 0; i < d4; i += 4)
            vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), kv_load4(v, r + i, f16), w[j]));
        for (int64_t i = d4; i < d; i++) acc[i] += w[j] * kv_load1(v, r + i, f16);
    }
}

/* One query over cache rows [lo, hi] (the query rows of a work item are not yet
 * blocked together on NEON as they are on x86). */
static ALWAYS_INLINE void attn_one_neon(const float *q, float *out, int64_t lo, int64_t hi,
                                        const void *k, const void *v, int64_t d, float scale,
                                        float *ml, int f16) {
    float qs[INFER_ATTN_MAX_HEAD_DIM], acc[INFER_ATTN_MAX_HEAD_DIM], s[ATTN_CHUNK];
    for (int64_t i = 0; i < d; i++) { qs[i] = q[i] * scale; acc[i] = 0.0f; }
    float m = -INFINITY, l = 0.0f;
    for (int64_t p0 = lo; p0 <= hi; p0 += ATTN_CHUNK) {
        const int64_t nb = hi + 1 - p0 < ATTN_CHUNK ? hi + 1 - p0 : ATTN_CHUNK;
        attn_scores(qs, k, p0 * d, nb, d, s, f16);
        float cmax = -INFINITY;
        for (int64_t j = 0; j < nb; j++) cmax = s[j] > cmax ? s[j] : cmax;
        if (cmax == -INFINITY) continue;
        if (cmax > m) {
            const float c = expf(m - cmax);  /* 0 on the first chunk */
            l *= c;
            scale_neon(acc, c, d);
            m = cmax;
        }
        const float32x4_t vm = vdupq_n_f32(m);
        int64_t j = 0;
        for (; j + 4 <= nb; j += 4) vst1q_f32(s + j, exp4(vsubq_f32(vld1q_f32(s + j), vm)));
        for (; j < nb; j++) s[j] = expf(s[j] - m);
        for (j = 0; j < nb; j++) l += s[j];
        attn_accumulate(acc, v, p0 * d, nb, d, s, f16);
    }
    if (ml) { ml[0] = m; ml[1] = l; }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t i = 0; i < d; i++) out[i] = acc[i] * inv;
}

static void attn_f32_neon(int64_t n_q, const float *const *q, float *const *out,
                          const int64_t *lo, const int64_t *hi, const void *k, const void *v,
                          int64_t d, float scale, float *ml) {
    for (int64_t u = 0; u < n_q; u++)
        attn_one_neon(q[u], out[u], lo[u], hi[u], k, v, d, scale, ml ? ml + 2 * u : NULL, 0);
}

static void attn_f16_neon(int64_t n_q, const float *const *q, float *const *out,
                          const int64_t *lo, const int64_t *hi, const void *k, const void *v,
                          int64_t d, float scale, float *ml) {
    for (int64_t u = 0; u < n_q; u++)
        attn_one_neon(q[u], out[u], lo[u], hi[u], k, v, d, scale, ml ? ml + 2 * u : NULL, 1);
}

void infer_fill_ops_neon(infer_kernel_table *t) {
    t->rmsnorm = rmsnorm_neon;
    t->layernorm = layernorm_neon;
    t->softmax = softmax_neon;
    t->silu_mul = silu_mul_neon;
    t->gelu_mul = gelu_mul_neon;
    t->add = add_neon;
    t->scale = scale_neon;
    t->rope_norm = rope_norm_neon;
    t->rope_neox = rope_neox_neon;
    t->attn_f32 = attn_f32_neon;
    t->attn_f16 = attn_f16_neon;
}
#endif
