/* iq4_neon.c: IQ4_NL and MXFP4 (with Q8_0) and IQ4_XS (with Q8_K) dequantize and dot products,
 * AArch64 NEON.
 *
 * A nibble becomes its level with one vqtbl1q_s8 into kvalues_iq4nl.  Dots use SDOT in
 * the dotprod build (neon_level.h), else widening multiplies and a pairwise add (two
 * products of at most 127*127 fit int16).  Dequantizers do the scalar file's float
 * operations (d*ls*kvalue exact in f32), so they give the same bits, in f32 or f16
 * (neon_emit.h); the quantizers are the scalar ones.
 */
#include "infer_kernels.h"
#include "kquants_internal.h"
#include "neon_level.h"

#if defined(__aarch64__) || defined(_M_ARM64)
#include <arm_neon.h>

#include "neon_emit.h"

static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if INFER_NEON_SDOT
    return vdotq_s32(acc, a, b);
#else
    const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b);
    return vpadalq_s16(acc, p);
#endif
}

/* The levels of one 16-byte nibble run: elements 0..15 and 16..31. */
static inline void levels32(int8x16_t table, const uint8_t *qs, int8x16_t out[2]) {
    const uint8x16_t q = vld1q_u8(qs);
    out[0] = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0F)));
    out[1] = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
}

static inline int iq4_xs_scale(const block_iq4_xs *b, int j) {
    return (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
}

static float vec_dot_iq4_nl_q8_0_neon(int64_t n, const void *w, const void *a) {
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    const int8x16_t table = vld1q_s8(infer_kvalues_iq4nl);
    float32x4_t acc = vdupq_n_f32(0.f);
    for (int64_t b = 0; b < n / QK4_NL; b++) {
        int8x16_t q[2];
        levels32(table, x[b].qs, q);
        const int32x4_t p = dot16(dot16(vdupq_n_s32(0), q[0], vld1q_s8(y[b].qs)), q[1], vld1q_s8(y[b].qs + 16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), half_to_float(x[b].d) * half_to_float(y[b].d));
    }
    return vaddvq_f32(acc);
}

/* MXFP4: IQ4_NL's steps with kvalues_mxfp4 and the E8M0 scale. */
static float vec_dot_mxfp4_q8_0_neon(int64_t n, const void *w, const void *a) {
    const block_mxfp4 *x = w;
    const block_q8_0 *y = a;
    const int8x16_t table = vld1q_s8(infer_kvalues_mxfp4);
    float32x4_t acc = vdupq_n_f32(0.f);
    for (int64_t b = 0; b < n / QK_MXFP4; b++) {
        int8x16_t q[2];
        levels32(table, x[b].qs, q);
        const int32x4_t p = dot16(dot16(vdupq_n_s32(0), q[0], vld1q_s8(y[b].qs)), q[1], vld1q_s8(y[b].qs + 16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), infer_e8m0_half(x[b].e) * half_to_float(y[b].d));
    }
    return vaddvq_f32(acc);
}

static float vec_dot_iq4_xs_q8_K_neon(int64_t n, const void *w, const void *a) {
    const block_iq4_xs *x = w;
    const block_q8_K *y = a;
    const int8x16_t table = vld1q_s8(infer_kvalues_iq4nl);
    float sum = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int8x16_t q[2];
            levels32(table, x[i].qs + 16 * ib, q);
            const int8_t *q8 = y[i].qs + 32 * ib;
            const int32x4_t p = dot16(dot16(vdupq_n_s32(0), q[0], vld1q_s8(q8)), q[1], vld1q_s8(q8 + 16));
            acc = vmlaq_n_s32(acc, p, iq4_xs_scale(&x[i], ib));
        }
        sum += half_to_float(x[i].d) * y[i].d * (float)vaddvq_s32(acc);
    }
    return sum;
}

static void dequantize_iq4_nl(const void *src, void *y, int64_t n, int f16) {
    const block_iq4_nl *x = src;
    const int8x16_t table = vld1q_s8(infer_kvalues_iq4nl);
    for (int64_t b = 0; b < n / QK4_NL; b++) {
        int8x16_t q[2];
        levels32(table, x[b].qs, q);
        emit16_s8(y, 32 * b, q[0], half_to_float(x[b].d), 0.f, f16);
        emit16_s8(y, 32 * b + 16, q[1], half_to_float(x[b].d), 0.f, f16);
    }
}

static void dequantize_mxfp4(const void *src, void *y, int64_t n, int f16) {
    const block_mxfp4 *x = src;
    const int8x16_t table = vld1q_s8(infer_kvalues_mxfp4);
    for (int64_t b = 0; b < n / QK_MXFP4; b++) {
        int8x16_t q[2];
        levels32(table, x[b].qs, q);
        const float d = infer_e8m0_half(x[b].e);
        emit16_s8(y, 32 * b, q[0], d, 0.f, f16);
        emit16_s8(y, 32 * b + 16, q[1], d, 0.f, f16);
    }
}

static void dequantize_iq4_xs(const void *src, void *y, int64_t n, int f16) {
    const block_iq4_xs *x = src;
    const int8x16_t table = vld1q_s8(infer_kvalues_iq4nl);
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = half_to_float(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++, at += 32) {
            int8x16_t q[2];
            levels32(table, x[i].qs + 16 * ib, q);
            const float dl = d * iq4_xs_scale(&x[i], ib);
            emit16_s8(y, at, q[0], dl, 0.f, f16);
            emit16_s8(y, at + 16, q[1], dl, 0.f, f16);
        }
    }
}

KQ_DEQUANTIZERS(dequantize_iq4_nl_neon, dequantize_f16_iq4_nl_neon, dequantize_iq4_nl)
KQ_DEQUANTIZERS(dequantize_iq4_xs_neon, dequantize_f16_iq4_xs_neon, dequantize_iq4_xs)
KQ_DEQUANTIZERS(dequantize_mxfp4_neon, dequantize_f16_mxfp4_neon, dequantize_mxfp4)

void INFER_NEON_NAME(infer_fill_iq4_neon)(infer_kernel_table *t) {
    t->vec_dot[INFER_TYPE_IQ4_NL] = vec_dot_iq4_nl_q8_0_neon;
    t->vec_dot[INFER_TYPE_IQ4_XS] = vec_dot_iq4_xs_q8_K_neon;
    t->dequantize[INFER_TYPE_IQ4_NL] = dequantize_iq4_nl_neon;
    t->dequantize[INFER_TYPE_IQ4_XS] = dequantize_iq4_xs_neon;
    t->dequantize_f16[INFER_TYPE_IQ4_NL] = dequantize_f16_iq4_nl_neon;
    t->dequantize_f16[INFER_TYPE_IQ4_XS] = dequantize_f16_iq4_xs_neon;
    t->vec_dot[INFER_TYPE_MXFP4] = vec_dot_mxfp4_q8_0_neon;
    t->dequantize[INFER_TYPE_MXFP4] = dequantize_mxfp4_neon;
    t->dequantize_f16[INFER_TYPE_MXFP4] = dequantize_f16_mxfp4_neon;
}
#endif
