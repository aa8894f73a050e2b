/* ops_neon.c: float ops and attention with AArch64 Advanced SIMD, 4 floats a vector.
 * Tails (n % 4) run the scalar formula.  Checked against the scalar table under
 * qemu-aarch64 by the self-test (csrc/selftest, tests/test_selftest.py). */
#include "infer_kernels.h"
#include "ops_internal.h"
#include "neon_level.h"
#if defined(__aarch64__) || defined(_M_ARM64)
#include <arm_neon.h>
#include <math.h>

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

/* ---- attention: as in ops_avx2.c (chunked online softmax; each K and V vector
 * loaded once for up to four queries, accumulators in registers across a chunk),
 * 4 lanes. */
static ALWAYS_INLINE float32x4_t kv_load4(const void *p, int64_t i, int f16) {
    if (f16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p + i)));
    return vld1q_f32((const float *)p + i);
}
static ALWAYS_INLINE float kv_load1(const void *p, int64_t i, int f16) {
    return f16 ? infer_fp16_to_fp32(((const infer_half *)p)[i]) : ((const float *)p)[i];
}

/* a * b + c with one rounding, as an intrinsic (MSVC's headers may lack fmaf). */
static ALWAYS_INLINE float fused_madd(float a, float b, float c) {
    return vget_lane_f32(vfma_n_f32(vdup_n_f32(c), vdup_n_f32(a), b), 0);
}

/* s[u * ATTN_CHUNK + j] = qs[u] . k_row(p0 + j) for u < UB (UB <= 4, a constant).
 * RB = 8 / UB rows per pass: eight accumulators (independent FMA chains) whatever
 * the number of queries.  pf (rows to prefetch ahead, ops_internal.h) is taken and
 * not used: the prefetch was measured on x86 only. */
static ALWAYS_INLINE void attn_scores(const int UB, const float *qs, int64_t d, const void *k,
                                      int64_t p0, int64_t nb, float *s, int f16, int64_t pf) {
    (void)pf;
    const int RB = UB == 1 ? 8 : UB == 2 ? 4 : 2;
    const int64_t d4 = d & ~(int64_t)3;
    int64_t j = 0;
    for (; j + RB <= nb; j += RB) {
        float32x4_t a[8];
        float sums[8];
        const int64_t r0 = (p0 + j) * d;
        for (int x = 0; x < 8; x++) a[x] = vdupq_n_f32(0.0f);
        for (int64_t i = 0; i < d4; i += 4) {
            float32x4_t qv[4];
            for (int u = 0; u < UB; u++) qv[u] = vld1q_f32(qs + u * d + i);
            for (int r = 0; r < RB; r++) {
                const float32x4_t kr = kv_load4(k, r0 + r * d + i, f16);
                for (int u = 0; u < UB; u++) a[u * RB + r] = vfmaq_f32(a[u * RB + r], qv[u], kr);
            }
        }
        /* pairwise adds: lane x of each result is the sum of a[x] (a[x + 4]) */
        vst1q_f32(sums, vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3])));
        vst1q_f32(sums + 4, vpaddq_f32(vpaddq_f32(a[4], a[5]), vpaddq_f32(a[6], a[7])));
        for (int u = 0; u < UB; u++)
            for (int r = 0; r < RB; r++) {
                float sum = sums[u * RB + r];
                for (int64_t i = d4; i < d; i++) sum = fused_madd(qs[u * d + i], kv_load1(k, r0 + r * d + i, f16), sum);
                s[u * ATTN_CHUNK + j + r] = sum;
            }
    }
    for (; j < nb; j++) {
        const int64_t r0 = (p0 + j) * d;
        for (int u = 0; u < UB; u++) {
            float32x4_t a0 = vdupq_n_f32(0.0f);
            const float32x4_t z = a0;
            for (int64_t i = 0; i < d4; i += 4)
                a0 = vfmaq_f32(a0, vld1q_f32(qs + u * d + i), kv_load4(k, r0 + i, f16));
            /* the rows left over: the pairwise adds of the rows in passes */
            float s0 = vgetq_lane_f32(vpaddq_f32(vpaddq_f32(a0, z), z), 0);
            for (int64_t i = d4; i < d; i++) s0 = fused_madd(qs[u * d + i], kv_load1(k, r0 + i, f16), s0);
            s[u * ATTN_CHUNK + j] = s0;
        }
    }
}

/* acc[u * d + i] += sum_j w[u * ATTN_CHUNK + j] v_row(p0 + j)[i] for u < UB, over
 * the columns from i on in blocks of NV vectors; returns where it stopped.  UB * NV
 * accumulators stay in registers for the whole chunk. */
static ALWAYS_INLINE int64_t attn_accumulate_cols(const int UB, const int NV, float *acc, int64_t d,
                                                  int64_t i, const void *v, int64_t p0, int64_t nb,
                                                  const float *w, int f16) {
    for (; i + 4 * NV <= d; i += 4 * NV) {
        float32x4_t a[4][8];
        for (int u = 0; u < UB; u++)
            for (int x = 0; x < NV; x++) a[u][x] = vld1q_f32(acc + u * d + i + 4 * x);
        for (int64_t j = 0; j < nb; j++) {
            const int64_t r = (p0 + j) * d + i;
            for (int x = 0; x < NV; x++) {
                const float32x4_t vx = kv_load4(v, r + 4 * x, f16);
                for (int u = 0; u < UB; u++) a[u][x] = vfmaq_n_f32(a[u][x], vx, w[u * ATTN_CHUNK + j]);
            }
        }
        for (int u = 0; u < UB; u++)
            for (int x = 0; x < NV; x++) vst1q_f32(acc + u * d + i + 4 * x, a[u][x]);
    }
    return i;
}

/* The scalar tails use fused_madd, one fused rounding whatever the compiler's
 * -ffp-contract: clang (zig cc) contracted them in some inlined copies only, so a
 * query's bits depended on how many queries shared the call. */
static ALWAYS_INLINE void attn_accumulate(const int UB, float *acc, int64_t d, const void *v,
                                          int64_t p0, int64_t nb, const float *w, int f16, int64_t pf) {
    (void)pf;
    int64_t i = 0;
    if (UB == 1) i = attn_accumulate_cols(UB, 8, acc, d, i, v, p0, nb, w, f16);
    if (UB <= 2) i = attn_accumulate_cols(UB, 4, acc, d, i, v, p0, nb, w, f16);
    i = attn_accumulate_cols(UB, 2, acc, d, i, v, p0, nb, w, f16);
    i = attn_accumulate_cols(UB, 1, acc, d, i, v, p0, nb, w, f16);
    for (; i < d; i++)
        for (int64_t j = 0; j < nb; j++)
            for (int u = 0; u < UB; u++)
                acc[u * d + i] = fused_madd(w[u * ATTN_CHUNK + j], kv_load1(v, (p0 + j) * d + i, f16), acc[u * d + i]);
}

/* Padded to whole vectors with -inf, as in ops_avx2.c, so that the sum does not
 * depend on the chunk's row count (the other queries of the call). */
static float attn_exp_sum(float *s, int64_t nb, float m) {
    const float32x4_t vm = vdupq_n_f32(m);
    float32x4_t sum = vdupq_n_f32(0.0f);
    for (int64_t j = nb; j % 4; j++) s[j] = -INFINITY;
    for (int64_t j = 0; j < nb; j += 4) {
        const float32x4_t e = exp4(vsubq_f32(vld1q_f32(s + j), vm));
        vst1q_f32(s + j, e);
        sum = vaddq_f32(sum, e);
    }
    return vaddvq_f32(sum);
}

/* vmaxnm (IEEE maxNum) returns the other operand when one is NaN: a NaN score never wins */
static float attn_max(const float *s, int64_t n) {
    float32x4_t mx = vdupq_n_f32(-INFINITY);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) mx = vmaxnmq_f32(vld1q_f32(s + j), mx);
    float m = vmaxnmvq_f32(mx);
    for (; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}

#define attn_rescale scale_neon
#define OPS_ISA neon
#include "ops_attn_loop.h"

void INFER_NEON_NAME(infer_fill_ops_neon)(infer_kernel_table *t) {
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
    t->attn_block_f32 = attn_block_f32_neon;
    t->attn_block_f16 = attn_block_f16_neon;
}
#endif
