/* quants_scalar.c: the 32-element block formats and f32/f16/bf16, portable C.
 *
 * This file is the oracle the SIMD files are tested against.  Its quantizers are
 * bit-identical to the `gguf` package's numpy quantizers (gguf/quants.py), which
 * follow ggml's quantize_row_*_ref: every intermediate is a float32 operation in the
 * same order, so the compiler must not fuse a multiply and an add into an FMA
 * (x*id + 8.5f rounded twice is not fma(x, id, 8.5f)).
 */
#include "infer_kernels.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define FP16(h) infer_fp16_to_fp32(h)

/* ---- f32 / f16 / bf16 ------------------------------------------------------- */

static void dequantize_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void quantize_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void dequantize_f16(const void *src, float *dst, int64_t n) {
    const infer_half *x = (const infer_half *)src;
    for (int64_t i = 0; i < n; i++) dst[i] = FP16(x[i]);
}

static void quantize_f16(const float *src, void *dst, int64_t n) {
    infer_half *y = (infer_half *)dst;
    for (int64_t i = 0; i < n; i++) y[i] = infer_fp32_to_fp16(src[i]);
}

static void dequantize_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *x = (const uint16_t *)src;
    for (int64_t i = 0; i < n; i++) dst[i] = infer_bf16_to_fp32(x[i]);
}

static void quantize_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *y = (uint16_t *)dst;
    for (int64_t i = 0; i < n; i++) y[i] = infer_fp32_to_bf16(src[i]);
}

/* ---- Q4_0: (nib - 8) * d; qs[j] low nibble = element j, high = element j+16 --- */

static void dequantize_q4_0(const void *src, float *dst, int64_t n) {
    const block_q4_0 *x = (const block_q4_0 *)src;
    for (int64_t b = 0; b < n / QK4_0; b++, dst += QK4_0) {
        const float d = FP16(x[b].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = (float)((x[b].qs[j] & 0x0F) - 8) * d;
            dst[j + 16] = (float)((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

/* The element of largest magnitude, sign kept; the first one on ties (numpy argmax). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        const float a = fabsf(x[j]);
        if (amax < a) { amax = a; max = x[j]; }
    }
    return max;
}

/* float32 truncation toward zero clipped to [0, hi], as numpy's
 * trunc(...).astype(uint8).clip(0, hi) does for the in-range values the quantizers make. */
static inline int trunc_clip(float v, int hi) {
    if (!(v > 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

static void quantize_q4_0(const float *src, void *dst, int64_t n) {
    block_q4_0 *y = (block_q4_0 *)dst;
    for (int64_t b = 0; b < n / QK4_0; b++, src += QK4_0) {
        const float max = signed_absmax(src, QK4_0);
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = infer_fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            float v0 = src[j] * id, v1 = src[j + 16] * id;
            v0 = v0 + 8.5f;
            v1 = v1 + 8.5f;
            y[b].qs[j] = (uint8_t)(trunc_clip(v0, 15) | (trunc_clip(v1, 15) << 4));
        }
    }
}

/* ---- Q4_1: nib * d + m ------------------------------------------------------- */

static void dequantize_q4_1(const void *src, float *dst, int64_t n) {
    const block_q4_1 *x = (const block_q4_1 *)src;
    for (int64_t b = 0; b < n / QK4_1; b++, dst += QK4_1) {
        const float d = FP16(x[b].d), m = FP16(x[b].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            dst[j] = (float)(x[b].qs[j] & 0x0F) * d + m;
            dst[j + 16] = (float)(x[b].qs[j] >> 4) * d + m;
        }
    }
}

static void quantize_q4_1(const float *src, void *dst, int64_t n) {
    block_q4_1 *y = (block_q4_1 *)dst;
    for (int64_t b = 0; b < n / QK4_1; b++, src += QK4_1) {
        float min = src[0], max = src[0];
        for (int j = 1; j < QK4_1; j++) {
            if (src[j] < min) min = src[j];
            if (src[j] > max) max = src[j];
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = infer_fp32_to_fp16(d);
        y[b].m = infer_fp32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            float v0 = src[j] - min, v1 = src[j + 16] - min;
            v0 = v0 * id;
            v1 = v1 * id;
            v0 = v0 + 0.5f;
            v1 = v1 + 0.5f;
            y[b].qs[j] = (uint8_t)(trunc_clip(v0, 15) | (trunc_clip(v1, 15) << 4));
        }
    }
}

/* ---- Q5_0: (q5 - 16) * d; low 4 bits as Q4_0, bit 4 of element j is bit j of qh -- */

static inline uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void dequantize_q5_0(const void *src, float *dst, int64_t n) {
    const block_q5_0 *x = (const block_q5_0 *)src;
    for (int64_t b = 0; b < n / QK5_0; b++, dst += QK5_0) {
        const float d = FP16(x[b].d);
        const uint32_t qh = load_qh(x[b].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int q0 = (x[b].qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
            const int q1 = (x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = (float)(q0 - 16) * d;
            dst[j + 16] = (float)(q1 - 16) * d;
        }
    }
}

static void quantize_q5_0(const float *src, void *dst, int64_t n) {
    block_q5_0 *y = (block_q5_0 *)dst;
    for (int64_t b = 0; b < n / QK5_0; b++, src += QK5_0) {
        const float max = signed_absmax(src, QK5_0);
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[b].d = infer_fp32_to_fp16(d);
        for (int j = 0; j < QK5_0 / 2; j++) {
            float v0 = src[j] * id, v1 = src[j + 16] * id;
            v0 = v0 + 16.5f;
            v1 = v1 + 16.5f;
            const int q0 = trunc_clip(v0, 31), q1 = trunc_clip(v1, 31);
            y[b].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) y[b].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

/* ---- Q5_1: q5 * d + m; low 4 bits as Q4_1, bit 4 of element j is bit j of qh ---- */

static void dequantize_q5_1(const void *src, float *dst, int64_t n) {
    const block_q5_1 *x = (const block_q5_1 *)src;
    for (int64_t b = 0; b < n / QK5_1; b++, dst += QK5_1) {
        const float d = FP16(x[b].d), m = FP16(x[b].m);
        const uint32_t qh = load_qh(x[b].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int q0 = (x[b].qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
            const int q1 = (x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = (float)q0 * d + m;
            dst[j + 16] = (float)q1 * d + m;
        }
    }
}

static void quantize_q5_1(const float *src, void *dst, int64_t n) {
    block_q5_1 *y = (block_q5_1 *)dst;
    for (int64_t b = 0; b < n / QK5_1; b++, src += QK5_1) {
        float min = src[0], max = src[0];
        for (int j = 1; j < QK5_1; j++) {
            if (src[j] < min) min = src[j];
            if (src[j] > max) max = src[j];
        }
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[b].d = infer_fp32_to_fp16(d);
        y[b].m = infer_fp32_to_fp16(min);
        for (int j = 0; j < QK5_1 / 2; j++) {
            float v0 = src[j] - min, v1 = src[j + 16] - min;
            v0 = v0 * id;
            v1 = v1 * id;
            v0 = v0 + 0.5f;
            v1 = v1 + 0.5f;
            const int q0 = trunc_clip(v0, 31), q1 = trunc_clip(v1, 31);
            y[b].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) y[b].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

/* ---- Q8_0 / Q8_1: q * d; Q8_1 also carries s = d * sum(q) ---------------------- */

static void dequantize_q8_0(const void *src, float *dst, int64_t n) {
    const block_q8_0 *x = (const block_q8_0 *)src;
    for (int64_t b = 0; b < n / QK8_0; b++, dst += QK8_0) {
        const float d = FP16(x[b].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = (float)x[b].qs[j] * d;
    }
}

static void dequantize_q8_1(const void *src, float *dst, int64_t n) {
    const block_q8_1 *x = (const block_q8_1 *)src;
    for (int64_t b = 0; b < n / QK8_1; b++, dst += QK8_1) {
        const float d = FP16(x[b].d);
        for (int j = 0; j < QK8_1; j++) dst[j] = (float)x[b].qs[j] * d;
    }
}

/* roundf (half away from zero) of x*id, clamped so that inf/NaN from degenerate
 * scales cannot reach an int conversion. */
static inline int8_t round_q8(float v) {
    if (!(v > -127.5f)) return v != v ? 0 : -127;
    if (!(v < 127.5f)) return 127;
    return (int8_t)roundf(v);
}

/* d = amax / 127, id = 1/d (0 when d is 0): the quantizer shared by Q8_0 and Q8_1. */
static float quantize_block_q8(const float *x, int8_t *qs, int *sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float a = fabsf(x[j]);
        if (amax < a) amax = a;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) qs[j] = round_q8(x[j] * id);
    if (sum) {   /* the bytes' exact sum: Q8_1's s and Q8_0S's sum */
        *sum = 0;
        for (int j = 0; j < 32; j++) *sum += qs[j];
    }
    return d;
}

static void quantize_q8_0(const float *src, void *dst, int64_t n) {
    block_q8_0 *y = (block_q8_0 *)dst;
    for (int64_t b = 0; b < n / QK8_0; b++, src += QK8_0)
        y[b].d = infer_fp32_to_fp16(quantize_block_q8(src, y[b].qs, NULL));
}

/* Q8_0's bytes and scale, and the exact sum of the bytes (the *_R16 kernels). */
static void quantize_q8_0s(const float *src, void *dst, int64_t n) {
    block_q8_0s *y = (block_q8_0s *)dst;
    for (int64_t b = 0; b < n / QK8_0; b++, src += QK8_0) {
        int sum;
        const float d = quantize_block_q8(src, y[b].qs, &sum);
        y[b].d = infer_fp32_to_fp16(d);
        y[b].sum = (int16_t)sum;
    }
}

static void dequantize_q8_0s(const void *src, float *dst, int64_t n) {
    const block_q8_0s *x = (const block_q8_0s *)src;
    for (int64_t b = 0; b < n / QK8_0; b++, dst += QK8_0) {
        const float d = FP16(x[b].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = (float)x[b].qs[j] * d;
    }
}

static void quantize_q8_1(const float *src, void *dst, int64_t n) {
    block_q8_1 *y = (block_q8_1 *)dst;
    for (int64_t b = 0; b < n / QK8_1; b++, src += QK8_1) {
        int sum;
        const float d = quantize_block_q8(src, y[b].qs, &sum);
        y[b].d = infer_fp32_to_fp16(d);
        y[b].s = infer_fp32_to_fp16((float)sum * d);
    }
}

/* ---- dequantize to f16: through f32, one block at a time ----------------------- */

#define DEQUANTIZE_F16(name, block)                                                 \
    static void dequantize_f16_##name(const void *src, infer_half *dst, int64_t n) { \
        float tmp[32];                                                              \
        const uint8_t *s = (const uint8_t *)src;                                    \
        for (int64_t b = 0; b < n / 32; b++, s += sizeof(block), dst += 32) {       \
            dequantize_##name(s, tmp, 32);                                          \
            for (int j = 0; j < 32; j++) dst[j] = infer_fp32_to_fp16(tmp[j]);       \
        }                                                                           \
    }
DEQUANTIZE_F16(q4_0, block_q4_0)
DEQUANTIZE_F16(q4_1, block_q4_1)
DEQUANTIZE_F16(q5_0, block_q5_0)
DEQUANTIZE_F16(q5_1, block_q5_1)
DEQUANTIZE_F16(q8_0, block_q8_0)
DEQUANTIZE_F16(q8_1, block_q8_1)

static void dequantize_f16_f32(const void *src, infer_half *dst, int64_t n) {
    quantize_f16((const float *)src, dst, n);
}

static void dequantize_f16_f16(const void *src, infer_half *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(infer_half));
}

static void dequantize_f16_bf16(const void *src, infer_half *dst, int64_t n) {
    const uint16_t *x = (const uint16_t *)src;
    for (int64_t i = 0; i < n; i++) dst[i] = infer_fp32_to_fp16(infer_bf16_to_fp32(x[i]));
}

/* ---- dot products: weight row . activation row ----------------------------------
 * Float rows use 8 partial sums (the order the SIMD kernels use). */

#define FLOAT_DOT(name, elem_type, to_float)                                          \
    static float name(int64_t n, const void *w, const void *a) {                        \
        const elem_type *x = (const elem_type *)w;                                      \
        const float *y = (const float *)a;                                              \
        float acc[8] = {0};                                                             \
        int64_t i = 0;                                                                  \
        for (; i + 8 <= n; i += 8)                                                      \
            for (int k = 0; k < 8; k++) acc[k] += to_float(x[i + k]) * y[i + k];        \
        for (; i < n; i++) acc[0] += to_float(x[i]) * y[i];                             \
        return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])); \
    }

#define AS_FLOAT(v) (v)
FLOAT_DOT(vec_dot_f32_f32, float, AS_FLOAT)
FLOAT_DOT(vec_dot_f16_f32, infer_half, infer_fp16_to_fp32)
FLOAT_DOT(vec_dot_bf16_f32, uint16_t, infer_bf16_to_fp32)

/* Quantized pairs: the integer sum of each block is exact (int32), then scaled. */

static float vec_dot_q4_0_q8_0(int64_t n, const void *w, const void *a) {
    const block_q4_0 *x = (const block_q4_0 *)w;
    const block_q8_0 *y = (const block_q8_0 *)a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK4_0; b++) {
        int sumi = 0;
        for (int j = 0; j < QK4_0 / 2; j++)
            sumi += ((x[b].qs[j] & 0x0F) - 8) * y[b].qs[j] + ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + 16];
        sum += (float)sumi * (FP16(x[b].d) * FP16(y[b].d));
    }
    return sum;
}

static float vec_dot_q4_1_q8_1(int64_t n, const void *w, const void *a) {
    const block_q4_1 *x = (const block_q4_1 *)w;
    const block_q8_1 *y = (const block_q8_1 *)a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK4_1; b++) {
        int sumi = 0;
        for (int j = 0; j < QK4_1 / 2; j++)
            sumi += (x[b].qs[j] & 0x0F) * y[b].qs[j] + (x[b].qs[j] >> 4) * y[b].qs[j + 16];
        sum += (float)sumi * (FP16(x[b].d) * FP16(y[b].d)) + FP16(x[b].m) * FP16(y[b].s);
    }
    return sum;
}

static float vec_dot_q5_0_q8_0(int64_t n, const void *w, const void *a) {
    const block_q5_0 *x = (const block_q5_0 *)w;
    const block_q8_0 *y = (const block_q8_0 *)a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK5_0; b++) {
        const uint32_t qh = load_qh(x[b].qh);
        int sumi = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int q0 = ((x[b].qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4) - 16;
            const int q1 = ((x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - 16;
            sumi += q0 * y[b].qs[j] + q1 * y[b].qs[j + 16];
        }
        sum += (float)sumi * (FP16(x[b].d) * FP16(y[b].d));
    }
    return sum;
}

/* Σ d·q·a + m·Σ a: the min term from Q8_1's s = d_a * Σ q_a. */
static float vec_dot_q5_1_q8_1(int64_t n, const void *w, const void *a) {
    const block_q5_1 *x = (const block_q5_1 *)w;
    const block_q8_1 *y = (const block_q8_1 *)a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK5_1; b++) {
        const uint32_t qh = load_qh(x[b].qh);
        int sumi = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int q0 = (x[b].qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
            const int q1 = (x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            sumi += q0 * y[b].qs[j] + q1 * y[b].qs[j + 16];
        }
        sum += (float)sumi * (FP16(x[b].d) * FP16(y[b].d)) + FP16(x[b].m) * FP16(y[b].s);
    }
    return sum;
}

static float vec_dot_q8_0_q8_0(int64_t n, const void *w, const void *a) {
    const block_q8_0 *x = (const block_q8_0 *)w;
    const block_q8_0 *y = (const block_q8_0 *)a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[b].qs[j] * y[b].qs[j];
        sum += (float)sumi * (FP16(x[b].d) * FP16(y[b].d));
    }
    return sum;
}

void infer_fill_table_scalar(infer_kernel_table *t) {
    t->dequantize[INFER_TYPE_F32] = dequantize_f32;
    t->dequantize[INFER_TYPE_F16] = dequantize_f16;
    t->dequantize[INFER_TYPE_BF16] = dequantize_bf16;
    t->dequantize[INFER_TYPE_Q4_0] = dequantize_q4_0;
    t->dequantize[INFER_TYPE_Q4_1] = dequantize_q4_1;
    t->dequantize[INFER_TYPE_Q5_0] = dequantize_q5_0;
    t->dequantize[INFER_TYPE_Q5_1] = dequantize_q5_1;
    t->dequantize[INFER_TYPE_Q8_0] = dequantize_q8_0;
    t->dequantize[INFER_TYPE_Q8_1] = dequantize_q8_1;

    t->dequantize_f16[INFER_TYPE_F32] = dequantize_f16_f32;
    t->dequantize_f16[INFER_TYPE_F16] = dequantize_f16_f16;
    t->dequantize_f16[INFER_TYPE_BF16] = dequantize_f16_bf16;
    t->dequantize_f16[INFER_TYPE_Q4_0] = dequantize_f16_q4_0;
    t->dequantize_f16[INFER_TYPE_Q4_1] = dequantize_f16_q4_1;
    t->dequantize_f16[INFER_TYPE_Q5_0] = dequantize_f16_q5_0;
    t->dequantize_f16[INFER_TYPE_Q5_1] = dequantize_f16_q5_1;
    t->dequantize_f16[INFER_TYPE_Q8_0] = dequantize_f16_q8_0;
    t->dequantize_f16[INFER_TYPE_Q8_1] = dequantize_f16_q8_1;

    t->quantize[INFER_TYPE_F32] = quantize_f32;
    t->quantize[INFER_TYPE_F16] = quantize_f16;
    t->quantize[INFER_TYPE_BF16] = quantize_bf16;
    t->quantize[INFER_TYPE_Q4_0] = quantize_q4_0;
    t->quantize[INFER_TYPE_Q4_1] = quantize_q4_1;
    t->quantize[INFER_TYPE_Q5_0] = quantize_q5_0;
    t->quantize[INFER_TYPE_Q5_1] = quantize_q5_1;
    t->quantize[INFER_TYPE_Q8_0] = quantize_q8_0;
    t->quantize[INFER_TYPE_Q8_1] = quantize_q8_1;
    t->quantize[INFER_TYPE_Q8_0S] = quantize_q8_0s;
    t->dequantize[INFER_TYPE_Q8_0S] = dequantize_q8_0s;

    t->vec_dot[INFER_TYPE_F32] = vec_dot_f32_f32;
    t->vec_dot[INFER_TYPE_F16] = vec_dot_f16_f32;
    t->vec_dot[INFER_TYPE_BF16] = vec_dot_bf16_f32;
    t->vec_dot[INFER_TYPE_Q4_0] = vec_dot_q4_0_q8_0;
    t->vec_dot[INFER_TYPE_Q4_1] = vec_dot_q4_1_q8_1;
    t->vec_dot[INFER_TYPE_Q5_0] = vec_dot_q5_0_q8_0;
    t->vec_dot[INFER_TYPE_Q5_1] = vec_dot_q5_1_q8_1;
    t->vec_dot[INFER_TYPE_Q8_0] = vec_dot_q8_0_q8_0;
}
