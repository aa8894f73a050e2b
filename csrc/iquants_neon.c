/* iquants_neon.c: the IQ and TQ formats' dot products with Q8_K and dequantizers,
 * AArch64 NEON.
 *
 * Every format is unpacked 32 elements at a time into signed int8 weights (grid points
 * loaded by index, times their +1/-1 signs; IQ1_S as 8g +- 1; TQ as q - 1; all within
 * |w| <= 62) and two sub-block scales, as iquants_scalar.c decodes them; then SDOT in the
 * dotprod build (neon_level.h), else widening multiplies and pairwise adds (a pair of
 * products is below 2^15).  TQ1_0's base-3 digit k of a byte b is (b*3^k mod 256)*3 >> 8,
 * with byte multiplies.  Dequantizers produce the scalar file's exact values.
 */
#include "infer_kernels.h"
#include "iquants_grids.h"
#include "neon_level.h"

#if defined(__aarch64__) || defined(_M_ARM64)
#include <arm_neon.h>
#include <string.h>

#include "neon_emit.h"

/* Σ a·b over 16 int8 lanes, as four int32 partial sums. */
static inline int32x4_t dot16(int8x16_t a, int8x16_t b) {
#if INFER_NEON_SDOT
    return vdotq_s32(vdupq_n_s32(0), a, b);
#else
    const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b);
    return vpaddlq_s16(p);
#endif
}

static inline uint8x16_t two_points(uint64_t p0, uint64_t p1) {
    return vcombine_u8(vcreate_u8(p0), vcreate_u8(p1));
}

/* Two 8-element sign patterns (ksigns indices) as +1/-1 bytes. */
static inline int8x16_t signs_from_indices(unsigned k0, unsigned k1) {
    return vreinterpretq_s8_u64(vcombine_u64(vcreate_u64(infer_ksigns64_iq2xs[k0]),
                                             vcreate_u64(infer_ksigns64_iq2xs[k1])));
}

/* Stored sign bits of 16 elements (bit j of byte k: element 8k+j negative) as +1/-1. */
static inline int8x16_t signs_from_bits(uint8_t b0, uint8_t b1) {
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bits = vld1q_u8(bit);
    const uint8x16_t v = vcombine_u8(vdup_n_u8(b0), vdup_n_u8(b1));
    const uint8x16_t neg = vtstq_u8(v, bits);   /* 0xFF where the bit is set */
    return vreinterpretq_s8_u8(vorrq_u8(neg, vdupq_n_u8(1)));
}

static inline int8x16_t apply(uint8x16_t mag, int8x16_t sign) {
    return vmulq_s8(vreinterpretq_s8_u8(mag), sign);
}

/* Digit k (most significant first) of each byte, minus 1. */
static inline int8x16_t trits(uint8x16_t b, uint8x16_t pow3) {
    const uint8x16_t q = vmulq_u8(b, pow3);                 /* mod 256 */
    const uint8x8_t three = vdup_n_u8(3);
    const uint8x16_t t = vcombine_u8(vshrn_n_u16(vmull_u8(vget_low_u8(q), three), 8),
                                     vshrn_n_u16(vmull_high_u8(q, vdupq_n_u8(3)), 8));
    return vsubq_s8(vreinterpretq_s8_u8(t), vdupq_n_s8(1));
}

/* Elements 32r..32r+31 of a block as signed weights w[0..1] (16 each) and the scales
 * of the two halves.  `type` is a constant wherever this is inlined. */
INFER_ALWAYS_INLINE void unpack32(int type, const uint8_t *blk, int r,
                                                           int8x16_t w[2], int *ls1, int *ls2) {
    *ls1 = *ls2 = 1;
    switch (type) {
    case INFER_TYPE_IQ2_XXS: {
        const block_iq2_xxs *x = (const block_iq2_xxs *)blk;
        uint8_t idx[4];
        uint32_t s;
        memcpy(idx, x->qs + 4 * r, 4);
        memcpy(&s, x->qs + 4 * r + 2, 4);
        const uint64_t *g = infer_iq2xxs_grid;
        w[0] = apply(two_points(g[idx[0]], g[idx[1]]), signs_from_indices(s & 127, (s >> 7) & 127));
        w[1] = apply(two_points(g[idx[2]], g[idx[3]]), signs_from_indices((s >> 14) & 127, (s >> 21) & 127));
        *ls1 = *ls2 = (int)(2 * (s >> 28) + 1);
        break;
    }
    case INFER_TYPE_IQ2_XS: {
        const block_iq2_xs *x = (const block_iq2_xs *)blk;
        uint16_t v[4];
        memcpy(v, x->qs + 4 * r, 8);
        const uint64_t *g = infer_iq2xs_grid;
        w[0] = apply(two_points(g[v[0] & 511], g[v[1] & 511]), signs_from_indices(v[0] >> 9, v[1] >> 9));
        w[1] = apply(two_points(g[v[2] & 511], g[v[3] & 511]), signs_from_indices(v[2] >> 9, v[3] >> 9));
        *ls1 = 2 * (x->scales[r] & 15) + 1;
        *ls2 = 2 * (x->scales[r] >> 4) + 1;
        break;
    }
    case INFER_TYPE_IQ2_S: {
        const block_iq2_s *x = (const block_iq2_s *)blk;
        const uint8_t *q = x->qs + 4 * r, *sg = x->qs + QK_K / 8 + 4 * r;
        const int h = x->qh[r];
        const uint64_t *g = infer_iq2s_grid;
        w[0] = apply(two_points(g[q[0] | ((h << 8) & 0x300)], g[q[1] | ((h << 6) & 0x300)]),
                     signs_from_bits(sg[0], sg[1]));
        w[1] = apply(two_points(g[q[2] | ((h << 4) & 0x300)], g[q[3] | ((h << 2) & 0x300)]),
                     signs_from_bits(sg[2], sg[3]));
        *ls1 = 2 * (x->scales[r] & 15) + 1;
        *ls2 = 2 * (x->scales[r] >> 4) + 1;
        break;
    }
    case INFER_TYPE_IQ3_XXS: {
        const block_iq3_xxs *x = (const block_iq3_xxs *)blk;
        const uint8_t *q = x->qs + 8 * r;
        const uint32_t *g = infer_iq3xxs_grid;
        uint32_t s;
        memcpy(&s, x->qs + QK_K / 4 + 4 * r, 4);
        for (int k = 0; k < 2; k++) {
            const uint32_t p[4] = {g[q[4 * k]], g[q[4 * k + 1]], g[q[4 * k + 2]], g[q[4 * k + 3]]};
            w[k] = apply(vreinterpretq_u8_u32(vld1q_u32(p)),
                         signs_from_indices((s >> (14 * k)) & 127, (s >> (14 * k + 7)) & 127));
        }
        *ls1 = *ls2 = (int)(2 * (s >> 28) + 1);
        break;
    }
    case INFER_TYPE_IQ3_S: {
        const block_iq3_s *x = (const block_iq3_s *)blk;
        const uint8_t *q = x->qs + 8 * r, *sg = x->signs + 4 * r;
        const int h = x->qh[r];
        const uint32_t *g = infer_iq3s_grid;
        for (int k = 0; k < 2; k++) {
            uint32_t p[4];
            for (int j = 0; j < 4; j++) p[j] = g[q[4 * k + j] | (((h >> (4 * k + j)) & 1) << 8)];
            w[k] = apply(vreinterpretq_u8_u32(vld1q_u32(p)), signs_from_bits(sg[2 * k], sg[2 * k + 1]));
        }
        *ls1 = *ls2 = 2 * ((x->scales[r / 2] >> (4 * (r & 1))) & 15) + 1;
        break;
    }
    case INFER_TYPE_IQ1_S: {
        const block_iq1_s *x = (const block_iq1_s *)blk;
        const uint8_t *q = x->qs + 4 * r;
        const int h = x->qh[r];
        const uint64_t *g = infer_iq1s_grid;
        const int8x16_t shift = vdupq_n_s8(h & 0x8000 ? -1 : 1);
        const uint8x16_t p0 = two_points(g[q[0] | ((h << 8) & 0x700)], g[q[1] | ((h << 5) & 0x700)]);
        const uint8x16_t p1 = two_points(g[q[2] | ((h << 2) & 0x700)], g[q[3] | ((h >> 1) & 0x700)]);
        w[0] = vaddq_s8(vshlq_n_s8(vreinterpretq_s8_u8(p0), 3), shift);
        w[1] = vaddq_s8(vshlq_n_s8(vreinterpretq_s8_u8(p1), 3), shift);
        *ls1 = *ls2 = 2 * ((h >> 12) & 7) + 1;
        break;
    }
    case INFER_TYPE_TQ1_0: {
        /* runs 0..4: digit r of qs[0..31]; runs 5, 6: digits 0..3 of qs[32..47], 16
         * elements each; run 7: digit 4 of qs[32..47], then digit k of qh[j] at 4k+j */
        const block_tq1_0 *x = (const block_tq1_0 *)blk;
        static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
        static const uint8_t qh_pow3[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
        if (r < 5) {
            const uint8x16_t p = vdupq_n_u8(pow3[r]);
            w[0] = trits(vld1q_u8(x->qs), p);
            w[1] = trits(vld1q_u8(x->qs + 16), p);
        } else if (r < 7) {
            const uint8x16_t b = vld1q_u8(x->qs + 32);
            w[0] = trits(b, vdupq_n_u8(pow3[2 * (r - 5)]));
            w[1] = trits(b, vdupq_n_u8(pow3[2 * (r - 5) + 1]));
        } else {
            uint32_t qh;
            memcpy(&qh, x->qh, 4);
            w[0] = trits(vld1q_u8(x->qs + 32), vdupq_n_u8(81));
            w[1] = trits(vreinterpretq_u8_u32(vdupq_n_u32(qh)), vld1q_u8(qh_pow3));
        }
        break;
    }
    default: {   /* INFER_TYPE_TQ2_0: run r = 4h + k, bits 2k.. of qs[32h..32h+31] */
        const block_tq2_0 *x = (const block_tq2_0 *)blk;
        const int h = r / 4, k = r % 4;
        const uint8x16_t m3 = vdupq_n_u8(3);
        const int8x16_t one = vdupq_n_s8(1);
        const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * k));   /* vshl by a negative count: right */
        for (int s = 0; s < 2; s++) {
            const uint8x16_t b = vld1q_u8(x->qs + 32 * h + 16 * s);
            w[s] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshlq_u8(b, sh), m3)), one);
        }
        break;
    }
    }
}

/* d * c: element = d * c * ls * w (c as in iquants_scalar.c). */
INFER_ALWAYS_INLINE float factor(int type, const uint8_t *blk) {
    switch (type) {
    case INFER_TYPE_TQ1_0: return infer_fp16_to_fp32(((const block_tq1_0 *)blk)->d);
    case INFER_TYPE_TQ2_0: return infer_fp16_to_fp32(((const block_tq2_0 *)blk)->d);
    case INFER_TYPE_IQ3_S: return infer_fp16_to_fp32(*(const infer_half *)blk);
    case INFER_TYPE_IQ3_XXS: return infer_fp16_to_fp32(*(const infer_half *)blk) * 0.25f;
    default: return infer_fp16_to_fp32(*(const infer_half *)blk) * 0.125f;
    }
}

INFER_ALWAYS_INLINE float vec_dot(int type, size_t block_bytes, int64_t n,
                                                           const void *w, const void *a) {
    const uint8_t *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++, x += block_bytes) {
        const int8_t *q8 = y[i].qs;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int r = 0; r < QK_K / 32; r++, q8 += 32) {
            int8x16_t v[2];
            int ls1, ls2;
            unpack32(type, x, r, v, &ls1, &ls2);
            sumi = vmlaq_n_s32(sumi, dot16(v[0], vld1q_s8(q8)), ls1);
            sumi = vmlaq_n_s32(sumi, dot16(v[1], vld1q_s8(q8 + 16)), ls2);
        }
        sum += factor(type, x) * y[i].d * (float)vaddvq_s32(sumi);
    }
    return sum;
}

INFER_ALWAYS_INLINE void dequantize(int type, size_t block_bytes,
                                                             const void *src, void *dst, int64_t n,
                                                             int f16) {
    const uint8_t *x = src;
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++, x += block_bytes) {
        const float dc = factor(type, x);
        for (int r = 0; r < QK_K / 32; r++, at += 32) {
            int8x16_t v[2];
            int ls1, ls2;
            unpack32(type, x, r, v, &ls1, &ls2);
            emit16_s8(dst, at, v[0], dc * ls1, 0.f, f16);
            emit16_s8(dst, at + 16, v[1], dc * ls2, 0.f, f16);
        }
    }
}

#define IQ_FORMAT(TYPE, name, block)                                                          \
    static float infer_vec_dot_##name##_q8_K_neon(int64_t n, const void *w, const void *a) {   \
        return vec_dot(TYPE, sizeof(block), n, w, a);                                         \
    }                                                                                         \
    static void infer_dequantize_##name##_neon(const void *src, float *y, int64_t n) {        \
        dequantize(TYPE, sizeof(block), src, y, n, 0);                                        \
    }                                                                                         \
    static void infer_dequantize_f16_##name##_neon(const void *src, infer_half *y, int64_t n) { \
        dequantize(TYPE, sizeof(block), src, y, n, 1);                                        \
    }
INFER_IQUANTS_FORMATS(IQ_FORMAT)
#undef IQ_FORMAT

void INFER_NEON_NAME(infer_fill_iquants_neon)(infer_kernel_table *t) {
#define FILL(TYPE, name, block) INFER_IQUANTS_FILL(t, neon, TYPE, name);
    INFER_IQUANTS_FORMATS(FILL)
#undef FILL
}
#endif
