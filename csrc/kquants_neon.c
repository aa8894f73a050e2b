/* kquants_neon.c: Q4_K and Q6_K dequantize and dot products with Q8_K, AArch64 NEON.
 *
 * Dot products use SDOT (vdotq_s32) in the dotprod build (neon_level.h), else widening
 * multiplies (vmull_s8) and pairwise accumulation.  Each 16-byte dot lands in an
 * int32x4 that is multiplied by its sub-block scale and accumulated (vmlaq_n_s32);
 * one horizontal sum per super-block.  The offsets (Q4_K's min, Q6_K's -32) come out
 * once per super-block through Q8_K's bsums.  Dequantizers do the scalar file's
 * float operations (products exact in f32), so they give the same bits.
 * Q8_K's quantizer (once per mat-vec input) gives the scalar one's bytes; the weight
 * quantizers are the scalar ones.
 */
#include "infer_kernels.h"
#include "kquants_internal.h"
#include "neon_level.h"

#if defined(__aarch64__) || defined(_M_ARM64)
#include <arm_neon.h>
#include <math.h>

#include "neon_emit.h"

/* Σ a·b over 16 int8 lanes, as four int32 partial sums. */
static inline int32x4_t dot16(int8x16_t a, int8x16_t b) {
#if INFER_NEON_SDOT
    return vdotq_s32(vdupq_n_s32(0), a, b);
#else
    /* |a·b| <= 63*128 here, so two products fit an int16 lane */
    const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b);
    return vpaddlq_s16(p);
#endif
}

/* ---- Q4_K ------------------------------------------------------------------- */

static float infer_vec_dot_q4_K_q8_K_neon(int64_t n, const void *w, const void *a) {
    const block_q4_K *x = w;
    const block_q8_K *y = a;
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = half_to_float(x[i].d) * y[i].d;
        const float dmin = half_to_float(x[i].dmin) * y[i].d;
        uint8_t sm[16];
        infer_q4_K_unpack_scales(x[i].scales, sm);

        /* Σ_j m_j·(bsums[2j] + bsums[2j+1]) */
        const int16x8_t bs = vpaddq_s16(vld1q_s16(y[i].bsums), vld1q_s16(y[i].bsums + 8));
        const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm + 8)));
        const int32x4_t pm = vmlal_high_s16(vmull_s16(vget_low_s16(bs), vget_low_s16(mins)), bs, mins);
        const int32_t summ = vaddvq_s32(pm);

        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int j = 0; j < QK_K / 64; j++, q4 += 32, q8 += 64) {
            const uint8x16_t q0 = vld1q_u8(q4), q1 = vld1q_u8(q4 + 16);
            const int8x16_t l0 = vreinterpretq_s8_u8(vandq_u8(q0, low4));
            const int8x16_t l1 = vreinterpretq_s8_u8(vandq_u8(q1, low4));
            const int8x16_t h0 = vreinterpretq_s8_u8(vshrq_n_u8(q0, 4));
            const int8x16_t h1 = vreinterpretq_s8_u8(vshrq_n_u8(q1, 4));
            const int32x4_t p_lo = vaddq_s32(dot16(l0, vld1q_s8(q8)), dot16(l1, vld1q_s8(q8 + 16)));
            const int32x4_t p_hi = vaddq_s32(dot16(h0, vld1q_s8(q8 + 32)), dot16(h1, vld1q_s8(q8 + 48)));
            sumi = vmlaq_n_s32(sumi, p_lo, sm[2 * j]);
            sumi = vmlaq_n_s32(sumi, p_hi, sm[2 * j + 1]);
        }
        sum += d * (float)vaddvq_s32(sumi) - dmin * (float)summ;
    }
    return sum;
}

static inline void dequantize_q4_K(const block_q4_K *x, void *dst, int64_t n, int f16) {
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sm[16];
        infer_q4_K_unpack_scales(x[i].scales, sm);
        const float d = half_to_float(x[i].d), dmin = half_to_float(x[i].dmin);
        for (int j = 0; j < QK_K / 64; j++, at += 64) {
            const float d1 = d * sm[2 * j], m1 = dmin * sm[8 + 2 * j];
            const float d2 = d * sm[2 * j + 1], m2 = dmin * sm[8 + 2 * j + 1];
            for (int h = 0; h < 2; h++) {
                const uint8x16_t q = vld1q_u8(x[i].qs + 32 * j + 16 * h);
                emit16_u8(dst, at + 16 * h, vandq_u8(q, low4), d1, m1, f16);
                emit16_u8(dst, at + 32 + 16 * h, vshrq_n_u8(q, 4), d2, m2, f16);
            }
        }
    }
}

static void infer_dequantize_q4_K_neon(const void *src, float *dst, int64_t n) {
    dequantize_q4_K(src, dst, n, 0);
}

static void infer_dequantize_f16_q4_K_neon(const void *src, infer_half *dst, int64_t n) {
    dequantize_q4_K(src, dst, n, 1);
}

/* ---- Q6_K ------------------------------------------------------------------- */

/* Unsigned 6-bit values of one 128-element half, 16 per vector: q[2k+s] holds
 * elements 32k+16s..32k+16s+15.  Run k takes its low 4 bits from ql[32*(k&1)..]
 * (low nibble for k < 2, high for k >= 2) and its top 2 bits from bits 2k..2k+1 of qh. */
static inline void unpack_q6_K_half(const uint8_t *ql, const uint8_t *qh, int8x16_t q[8]) {
    const uint8x16_t low4 = vdupq_n_u8(0x0F), low2 = vdupq_n_u8(0x03);
    for (int s = 0; s < 2; s++) {
        const uint8x16_t l0 = vld1q_u8(ql + 16 * s), l1 = vld1q_u8(ql + 32 + 16 * s);
        const uint8x16_t h = vld1q_u8(qh + 16 * s);
        /* vsli: (top << 4) | (low & 0x0F) */
        q[0 + s] = vreinterpretq_s8_u8(vsliq_n_u8(vandq_u8(l0, low4), vandq_u8(h, low2), 4));
        q[2 + s] = vreinterpretq_s8_u8(vsliq_n_u8(vandq_u8(l1, low4), vandq_u8(vshrq_n_u8(h, 2), low2), 4));
        q[4 + s] = vreinterpretq_s8_u8(vsliq_n_u8(vshrq_n_u8(l0, 4), vandq_u8(vshrq_n_u8(h, 4), low2), 4));
        q[6 + s] = vreinterpretq_s8_u8(vsliq_n_u8(vshrq_n_u8(l1, 4), vshrq_n_u8(h, 6), 4));
    }
}

/* Σ_j sc_j·Σ (q-32)·a = Σ_j sc_j·Σ q·a - 32·Σ_j sc_j·bsums_j */
static float infer_vec_dot_q6_K_q8_K_neon(int64_t n, const void *w, const void *a) {
    const block_q6_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = half_to_float(x[i].d) * y[i].d;
        const int8x16_t sc = vld1q_s8(x[i].scales);
        const int16x8_t sc0 = vmovl_s8(vget_low_s8(sc)), sc1 = vmovl_high_s8(sc);
        const int16x8_t bs0 = vld1q_s16(y[i].bsums), bs1 = vld1q_s16(y[i].bsums + 8);
        int32x4_t off = vmull_s16(vget_low_s16(sc0), vget_low_s16(bs0));
        off = vmlal_high_s16(off, sc0, bs0);
        off = vmlal_s16(off, vget_low_s16(sc1), vget_low_s16(bs1));
        off = vmlal_high_s16(off, sc1, bs1);

        int32x4_t sumi = vdupq_n_s32(0);
        for (int h = 0; h < QK_K / 128; h++) {
            int8x16_t q[8];
            unpack_q6_K_half(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
            const int8_t *q8 = y[i].qs + 128 * h;
            const int8_t *s = x[i].scales + 8 * h;
            for (int j = 0; j < 8; j++)  /* sub-block j of the half: elements 16j.. */
                sumi = vmlaq_n_s32(sumi, dot16(q[j], vld1q_s8(q8 + 16 * j)), s[j]);
        }
        sumi = vsubq_s32(sumi, vshlq_n_s32(off, 5));
        sum += d * (float)vaddvq_s32(sumi);
    }
    return sum;
}

static inline void dequantize_q6_K(const block_q6_K *x, void *dst, int64_t n, int f16) {
    const int8x16_t m32 = vdupq_n_s8(32);
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = half_to_float(x[i].d);
        for (int h = 0; h < QK_K / 128; h++) {
            int8x16_t q[8];
            unpack_q6_K_half(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
            for (int j = 0; j < 8; j++, at += 16) {
                const float32x4_t ds = vdupq_n_f32(d * x[i].scales[8 * h + j]);
                const int8x16_t v = vsubq_s8(q[j], m32);
                const int16x8_t w[2] = {vmovl_s8(vget_low_s8(v)), vmovl_high_s8(v)};
                for (int k = 0; k < 2; k++) {
                    const float32x4_t a = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w[k])));
                    const float32x4_t b = vcvtq_f32_s32(vmovl_high_s16(w[k]));
                    store8(dst, at + 8 * k, vmulq_f32(ds, a), vmulq_f32(ds, b), f16);
                }
            }
        }
    }
}

static void infer_dequantize_q6_K_neon(const void *src, float *dst, int64_t n) {
    dequantize_q6_K(src, dst, n, 0);
}

static void infer_dequantize_f16_q6_K_neon(const void *src, infer_half *dst, int64_t n) {
    dequantize_q6_K(src, dst, n, 1);
}

/* ---- Q8_K ------------------------------------------------------------------- */

/* quantize_row_q8_K_ref: max = the first element of largest |x| (sign kept),
 * q = nearest_int(-127/max * x) (vcvtnq rounds to nearest even, as nearest_int),
 * bsums = sums of 16.  Same bytes as the scalar quantizer. */
static void infer_quantize_q8_K_neon(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        /* FMAXNM skips NaN as the scalar `ax > amax` does (FMAX would return NaN, and
         * the search below would never find it): amax is one of the |x[at]|, or 0. */
        float32x4_t vmax = vdupq_n_f32(0);
        for (int k = 0; k < QK_K / 4; k++) vmax = vmaxnmq_f32(vmax, vabsq_f32(vld1q_f32(x + 4 * k)));
        const float amax = vmaxnmvq_f32(vmax);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int at = 0;
        while (fabsf(x[at]) != amax) at++;
        const float iscale = -127.f / x[at];
        for (int g = 0; g < QK_K / 16; g++) {
            int16x8_t h[2];
            for (int s = 0; s < 2; s++) {
                const float *xs = x + 16 * g + 8 * s;
                const int32x4_t v0 = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(xs), iscale));
                const int32x4_t v1 = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(xs + 4), iscale));
                h[s] = vcombine_s16(vqmovn_s32(v0), vqmovn_s32(v1));   /* |v| <= 127: exact */
            }
            vst1q_s8(y[i].qs + 16 * g, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
            y[i].bsums[g] = vaddvq_s16(vaddq_s16(h[0], h[1]));         /* |sum| <= 2032 */
        }
        y[i].d = 1 / iscale;
    }
}

void INFER_NEON_NAME(infer_fill_kquants_neon)(infer_kernel_table *t) {
    t->dequantize[INFER_TYPE_Q4_K] = infer_dequantize_q4_K_neon;
    t->dequantize_f16[INFER_TYPE_Q4_K] = infer_dequantize_f16_q4_K_neon;
    t->vec_dot[INFER_TYPE_Q4_K] = infer_vec_dot_q4_K_q8_K_neon;
    t->dequantize[INFER_TYPE_Q6_K] = infer_dequantize_q6_K_neon;
    t->dequantize_f16[INFER_TYPE_Q6_K] = infer_dequantize_f16_q6_K_neon;
    t->vec_dot[INFER_TYPE_Q6_K] = infer_vec_dot_q6_K_q8_K_neon;
    t->quantize[INFER_TYPE_Q8_K] = infer_quantize_q8_K_neon;
}
#endif
