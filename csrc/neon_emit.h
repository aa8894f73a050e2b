/* neon_emit.h: what the AArch64 NEON dequantizers share: fp16 scalar loads and the
 * store of 16 quants as d*q - m in f32 or f16.
 *
 * d*q - m is computed as the scalar files do (a product, then a subtraction: no FMA)
 * so the values carry the scalar bits; f16 output then rounds to nearest even, as
 * infer_fp32_to_fp16 does.  Included by the *_neon.c files only (inside their
 * __aarch64__ guard, after arm_neon.h).
 */
#ifndef INFER_NEON_EMIT_H
#define INFER_NEON_EMIT_H

#include <arm_neon.h>
#include <stdint.h>

#include "infer_kernels.h"

static inline float half_to_float(infer_half h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* Eight values out at element `at`, as f32 or f16. */
static inline void store8(void *dst, int64_t at, float32x4_t v0, float32x4_t v1, int f16) {
    if (f16) {
        /* Stored as u16 lanes: no __fp16 pointer, which MSVC's arm_neon.h lacks. */
        vst1_u16((uint16_t *)dst + at, vreinterpret_u16_f16(vcvt_f16_f32(v0)));
        vst1_u16((uint16_t *)dst + at + 4, vreinterpret_u16_f16(vcvt_f16_f32(v1)));
    } else {
        vst1q_f32((float *)dst + at, v0);
        vst1q_f32((float *)dst + at + 4, v1);
    }
}

/* 16 unsigned bytes q -> d*q - m */
static inline void emit16_u8(void *dst, int64_t at, uint8x16_t q, float d, float m, int f16) {
    const float32x4_t dv = vdupq_n_f32(d), mv = vdupq_n_f32(m);
    const uint16x8_t w[2] = {vmovl_u8(vget_low_u8(q)), vmovl_high_u8(q)};
    for (int k = 0; k < 2; k++) {
        const float32x4_t a = vcvtq_f32_u32(vmovl_u16(vget_low_u16(w[k])));
        const float32x4_t b = vcvtq_f32_u32(vmovl_high_u16(w[k]));
        store8(dst, at + 8 * k, vsubq_f32(vmulq_f32(dv, a), mv), vsubq_f32(vmulq_f32(dv, b), mv), f16);
    }
}

/* 16 signed bytes q -> d*q - m.  Always subtracted: m is -0.f when a negative dmin
 * meets a zero min, and -0 - (-0) is +0 where skipping would leave -0. */
static inline void emit16_s8(void *dst, int64_t at, int8x16_t q, float d, float m, int f16) {
    const float32x4_t dv = vdupq_n_f32(d), mv = vdupq_n_f32(m);
    const int16x8_t w[2] = {vmovl_s8(vget_low_s8(q)), vmovl_high_s8(q)};
    for (int k = 0; k < 2; k++) {
        const float32x4_t a = vmulq_f32(dv, vcvtq_f32_s32(vmovl_s16(vget_low_s16(w[k]))));
        const float32x4_t b = vmulq_f32(dv, vcvtq_f32_s32(vmovl_high_s16(w[k])));
        store8(dst, at + 8 * k, vsubq_f32(a, mv), vsubq_f32(b, mv), f16);
    }
}

#endif
