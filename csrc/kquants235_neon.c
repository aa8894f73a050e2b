/* kquants235_neon.c: Q2_K, Q3_K and Q5_K dequantize and dot products with Q8_K, AArch64 NEON.
 *
 * Each 16-element sub-block run is one signed 16-lane dot (SDOT in the dotprod build,
 * neon_level.h, else widening multiplies and a pairwise add: |q*a| <= 31*128 keeps two
 * products within int16) into int32x4, multiplied by its sub-block scale and
 * accumulated (vmlaq_n_s32); one horizontal sum per super-block.  Q2_K's and Q5_K's
 * mins come out once per super-block through Q8_K's bsums.  Dequantizers do the
 * scalar file's float operations (d*sc*q exact in f32, then one rounding), so they
 * give the same bits, in f32 or f16 (neon_emit.h); the quantizers are the scalar ones.
 */
#include "infer_kernels.h"
#include "kquants_internal.h"
#include "neon_level.h"

#if defined(__aarch64__) || defined(_M_ARM64)
#include <arm_neon.h>

#include "neon_emit.h"

static inline int32x4_t dot16(int8x16_t a, int8x16_t b) {
#if INFER_NEON_SDOT
    return vdotq_s32(vdupq_n_s32(0), a, b);
#else
    const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b);
    return vpaddlq_s16(p);
#endif
}

/* Bits s..s+width-1 of each byte, by a run-time shift. */
static inline uint8x16_t bits_at(uint8x16_t v, int s, uint8_t mask) {
    return vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)-s)), vdupq_n_u8(mask));
}

static inline int8x16_t s8(uint8x16_t v) { return vreinterpretq_s8_u8(v); }

/* ---- dot products ------------------------------------------------------------ */

static float vec_dot_q2_K_q8_K_neon(int64_t n, const void *w, const void *a) {
    const block_q2_K *x = w;
    const block_q8_K *y = a;
    float sum = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t summ = 0;
        for (int j = 0; j < 16; j++) summ += (x[i].scales[j] >> 4) * y[i].bsums[j];
        const int8_t *q8 = y[i].qs;
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * h), q1 = vld1q_u8(x[i].qs + 32 * h + 16);
            for (int k = 0; k < 4; k++, q8 += 32) {
                const uint8_t *sc = x[i].scales + 8 * h + 2 * k;
                acc = vmlaq_n_s32(acc, dot16(s8(bits_at(q0, 2 * k, 3)), vld1q_s8(q8)), sc[0] & 0xF);
                acc = vmlaq_n_s32(acc, dot16(s8(bits_at(q1, 2 * k, 3)), vld1q_s8(q8 + 16)), sc[1] & 0xF);
            }
        }
        const float d = y[i].d * half_to_float(x[i].d), dmin = y[i].d * half_to_float(x[i].dmin);
        sum += d * (float)vaddvq_s32(acc) - dmin * (float)summ;
    }
    return sum;
}

/* The signed 3-bit values q - 4 of run (h, k): low bits from qs, bit 2 from hmask. */
static inline void q3_K_run(const block_q3_K *b, int h, int k, int8x16_t out[2]) {
    for (int half = 0; half < 2; half++) {
        const uint8x16_t q = vld1q_u8(b->qs + 32 * h + 16 * half);
        const uint8x16_t hb = vld1q_u8(b->hmask + 16 * half);
        const uint8x16_t u = vorrq_u8(bits_at(q, 2 * k, 3), vshlq_n_u8(bits_at(hb, 4 * h + k, 1), 2));
        out[half] = vsubq_s8(s8(u), vdupq_n_s8(4));
    }
}

static float vec_dot_q3_K_q8_K_neon(int64_t n, const void *w, const void *a) {
    const block_q3_K *x = w;
    const block_q8_K *y = a;
    float sum = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        infer_q3_K_unpack_scales(x[i].scales, sc);
        const int8_t *q8 = y[i].qs;
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++, q8 += 32) {
                int8x16_t q[2];
                q3_K_run(&x[i], h, k, q);
                acc = vmlaq_n_s32(acc, dot16(q[0], vld1q_s8(q8)), sc[8 * h + 2 * k]);
                acc = vmlaq_n_s32(acc, dot16(q[1], vld1q_s8(q8 + 16)), sc[8 * h + 2 * k + 1]);
            }
        sum += half_to_float(x[i].d) * y[i].d * (float)vaddvq_s32(acc);
    }
    return sum;
}

/* The 5-bit values of run r (0..7, elements 32r..32r+31) of a Q5_K block. */
static inline void q5_K_run(const block_q5_K *b, int r, int8x16_t out[2]) {
    const int c = r / 2, high = r % 2;
    for (int half = 0; half < 2; half++) {
        const uint8x16_t q = vld1q_u8(b->qs + 32 * c + 16 * half);
        const uint8x16_t hb = vld1q_u8(b->qh + 16 * half);
        const uint8x16_t lo = high ? vshrq_n_u8(q, 4) : vandq_u8(q, vdupq_n_u8(0x0F));
        out[half] = s8(vorrq_u8(lo, vshlq_n_u8(bits_at(hb, r, 1), 4)));
    }
}

static float vec_dot_q5_K_q8_K_neon(int64_t n, const void *w, const void *a) {
    const block_q5_K *x = w;
    const block_q8_K *y = a;
    float sum = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sm[16];
        infer_q4_K_unpack_scales(x[i].scales, sm);
        int32_t summ = 0;
        for (int j = 0; j < 8; j++) summ += sm[8 + j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        const int8_t *q8 = y[i].qs;
        int32x4_t acc = vdupq_n_s32(0);
        for (int r = 0; r < 8; r++, q8 += 32) {
            int8x16_t q[2];
            q5_K_run(&x[i], r, q);
            acc = vmlaq_n_s32(acc, vaddq_s32(dot16(q[0], vld1q_s8(q8)), dot16(q[1], vld1q_s8(q8 + 16))), sm[r]);
        }
        const float d = half_to_float(x[i].d) * y[i].d, dmin = half_to_float(x[i].dmin) * y[i].d;
        sum += d * (float)vaddvq_s32(acc) - dmin * (float)summ;
    }
    return sum;
}

/* ---- dequantizers ------------------------------------------------------------ */

static void dequantize_q2_K(const void *src, void *y, int64_t n, int f16) {
    const block_q2_K *x = src;
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = half_to_float(x[i].d), dmin = half_to_float(x[i].dmin);
        for (int h = 0; h < 2; h++) {
            const uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * h), q1 = vld1q_u8(x[i].qs + 32 * h + 16);
            for (int k = 0; k < 4; k++, at += 32) {
                const uint8_t *sc = x[i].scales + 8 * h + 2 * k;
                emit16_s8(y, at, s8(bits_at(q0, 2 * k, 3)), d * (sc[0] & 0xF), dmin * (sc[0] >> 4), f16);
                emit16_s8(y, at + 16, s8(bits_at(q1, 2 * k, 3)), d * (sc[1] & 0xF), dmin * (sc[1] >> 4), f16);
            }
        }
    }
}

static void dequantize_q3_K(const void *src, void *y, int64_t n, int f16) {
    const block_q3_K *x = src;
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        infer_q3_K_unpack_scales(x[i].scales, sc);
        const float d = half_to_float(x[i].d);
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++, at += 32) {
                int8x16_t q[2];
                q3_K_run(&x[i], h, k, q);
                emit16_s8(y, at, q[0], d * sc[8 * h + 2 * k], 0.f, f16);
                emit16_s8(y, at + 16, q[1], d * sc[8 * h + 2 * k + 1], 0.f, f16);
            }
    }
}

static void dequantize_q5_K(const void *src, void *y, int64_t n, int f16) {
    const block_q5_K *x = src;
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sm[16];
        infer_q4_K_unpack_scales(x[i].scales, sm);
        const float d = half_to_float(x[i].d), dmin = half_to_float(x[i].dmin);
        for (int r = 0; r < 8; r++, at += 32) {
            int8x16_t q[2];
            q5_K_run(&x[i], r, q);
            emit16_s8(y, at, q[0], d * sm[r], dmin * sm[8 + r], f16);
            emit16_s8(y, at + 16, q[1], d * sm[r], dmin * sm[8 + r], f16);
        }
    }
}

KQ_DEQUANTIZERS(dequantize_q2_K_neon, dequantize_f16_q2_K_neon, dequantize_q2_K)
KQ_DEQUANTIZERS(dequantize_q3_K_neon, dequantize_f16_q3_K_neon, dequantize_q3_K)
KQ_DEQUANTIZERS(dequantize_q5_K_neon, dequantize_f16_q5_K_neon, dequantize_q5_K)

void INFER_NEON_NAME(infer_fill_kquants235_neon)(infer_kernel_table *t) {
    t->vec_dot[INFER_TYPE_Q2_K] = vec_dot_q2_K_q8_K_neon;
    t->vec_dot[INFER_TYPE_Q3_K] = vec_dot_q3_K_q8_K_neon;
    t->vec_dot[INFER_TYPE_Q5_K] = vec_dot_q5_K_q8_K_neon;
    t->dequantize[INFER_TYPE_Q2_K] = dequantize_q2_K_neon;
    t->dequantize[INFER_TYPE_Q3_K] = dequantize_q3_K_neon;
    t->dequantize[INFER_TYPE_Q5_K] = dequantize_q5_K_neon;
    t->dequantize_f16[INFER_TYPE_Q2_K] = dequantize_f16_q2_K_neon;
    t->dequantize_f16[INFER_TYPE_Q3_K] = dequantize_f16_q3_K_neon;
    t->dequantize_f16[INFER_TYPE_Q5_K] = dequantize_f16_q5_K_neon;
}
#endif
