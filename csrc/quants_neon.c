/* quants_neon.c: the 32-element block formats and f32/f16/bf16 rows, AArch64 NEON.
 *
 * Integer dot products use SDOT (vdotq_s32) in the dotprod build (neon_level.h) and
 * widening multiplies with pairwise adds in the baseline ARMv8.0 build; both give
 * the exact int32 sum of each block.  Quantizers round like the scalar ones (roundf:
 * half away from zero = FCVTAS), so Q8_0/Q8_1 activations are bit-identical.
 */
#include "infer_kernels.h"
#include "neon_level.h"

#if defined(__aarch64__) || defined(_M_ARM64)
#include <arm_neon.h>
#include <string.h>

static inline float fp16_to_f32(infer_half h) {
#if defined(__GNUC__) || defined(__clang__)
    __fp16 v;   /* one FCVT instead of a call */
    memcpy(&v, &h, sizeof v);
    return (float)v;
#else
    return infer_fp16_to_fp32(h);
#endif
}

/* Sum of a[i]*b[i] over 16 int8 lanes, added into acc (lane grouping unspecified:
 * callers only ever use the total). */
static inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if INFER_NEON_SDOT
    return vdotq_s32(acc, a, b);
#else
    /* |a*b| <= 128*128 fits int16; pairwise-add into int32 before any further sum. */
    int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    int16x8_t hi = vmull_high_s8(a, b);
    return vpadalq_s16(vpadalq_s16(acc, lo), hi);
#endif
}

/* Stores d * v for the 16 int8 lanes of v into dst[0..16). */
static inline void store_scaled_s8(float *dst, int8x16_t v, float32x4_t d) {
    int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
    vst1q_f32(dst + 0, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
    vst1q_f32(dst + 4, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
    vst1q_f32(dst + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
    vst1q_f32(dst + 12, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
}

/* Q4_0 / Q4_1 nibbles: byte j holds element j (low) and element j+16 (high). */
static inline void unpack_nibbles(const uint8_t qs[16], int8x16_t *lo, int8x16_t *hi) {
    uint8x16_t q = vld1q_u8(qs);
    *lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F)));
    *hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
}

/* Q5_0: the 5-bit values minus 16.  Bit 4 of element j is bit j of the
 * little-endian uint32 qh; lanes test one bit of one qh byte each. */
static inline void unpack_q5_0(const block_q5_0 *x, int8x16_t *lo, int8x16_t *hi) {
    static const uint8_t bit_of_lane[16] = {1, 2, 4, 8, 16, 32, 64, 128,
                                            1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bits = vld1q_u8(bit_of_lane), b4 = vdupq_n_u8(0x10);
    uint8x16_t q = vld1q_u8(x->qs);
    uint8x16_t h_lo = vcombine_u8(vdup_n_u8(x->qh[0]), vdup_n_u8(x->qh[1]));
    uint8x16_t h_hi = vcombine_u8(vdup_n_u8(x->qh[2]), vdup_n_u8(x->qh[3]));
    uint8x16_t v_lo = vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), vandq_u8(vtstq_u8(h_lo, bits), b4));
    uint8x16_t v_hi = vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(vtstq_u8(h_hi, bits), b4));
    *lo = vsubq_s8(vreinterpretq_s8_u8(v_lo), vdupq_n_s8(16));
    *hi = vsubq_s8(vreinterpretq_s8_u8(v_hi), vdupq_n_s8(16));
}

/* Q5_1: the 5-bit values 0..31 (bits as Q5_0's); the min is added as m_w * s_a. */
static inline void unpack_q5_1(const block_q5_1 *x, int8x16_t *lo, int8x16_t *hi) {
    static const uint8_t bit_of_lane[16] = {1, 2, 4, 8, 16, 32, 64, 128,
                                            1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bits = vld1q_u8(bit_of_lane), b4 = vdupq_n_u8(0x10);
    uint8x16_t q = vld1q_u8(x->qs);
    uint8x16_t h_lo = vcombine_u8(vdup_n_u8(x->qh[0]), vdup_n_u8(x->qh[1]));
    uint8x16_t h_hi = vcombine_u8(vdup_n_u8(x->qh[2]), vdup_n_u8(x->qh[3]));
    *lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), vandq_u8(vtstq_u8(h_lo, bits), b4)));
    *hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(vtstq_u8(h_hi, bits), b4)));
}

/* ---- dequantize ------------------------------------------------------------- */

static void dequantize_q4_0_neon(const void *src, float *dst, int64_t n) {
    const block_q4_0 *x = (const block_q4_0 *)src;
    for (int64_t b = 0; b < n / QK4_0; b++, dst += QK4_0) {
        const float32x4_t d = vdupq_n_f32(fp16_to_f32(x[b].d));
        int8x16_t lo, hi;
        unpack_nibbles(x[b].qs, &lo, &hi);
        store_scaled_s8(dst, vsubq_s8(lo, vdupq_n_s8(8)), d);
        store_scaled_s8(dst + 16, vsubq_s8(hi, vdupq_n_s8(8)), d);
    }
}

/* nib * d + m, rounded twice like the scalar reference (no FMA). */
static inline void store_q4_1(float *dst, int8x16_t v, float32x4_t d, float32x4_t m) {
    int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
    float32x4_t f[4] = {
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), vcvtq_f32_s32(vmovl_high_s16(lo)),
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), vcvtq_f32_s32(vmovl_high_s16(hi))};
    for (int k = 0; k < 4; k++) vst1q_f32(dst + 4 * k, vaddq_f32(vmulq_f32(f[k], d), m));
}

static void dequantize_q4_1_neon(const void *src, float *dst, int64_t n) {
    const block_q4_1 *x = (const block_q4_1 *)src;
    for (int64_t b = 0; b < n / QK4_1; b++, dst += QK4_1) {
        const float32x4_t d = vdupq_n_f32(fp16_to_f32(x[b].d));
        const float32x4_t m = vdupq_n_f32(fp16_to_f32(x[b].m));
        int8x16_t lo, hi;
        unpack_nibbles(x[b].qs, &lo, &hi);
        store_q4_1(dst, lo, d, m);
        store_q4_1(dst + 16, hi, d, m);
    }
}

static void dequantize_q5_0_neon(const void *src, float *dst, int64_t n) {
    const block_q5_0 *x = (const block_q5_0 *)src;
    for (int64_t b = 0; b < n / QK5_0; b++, dst += QK5_0) {
        const float32x4_t d = vdupq_n_f32(fp16_to_f32(x[b].d));
        int8x16_t lo, hi;
        unpack_q5_0(&x[b], &lo, &hi);
        store_scaled_s8(dst, lo, d);
        store_scaled_s8(dst + 16, hi, d);
    }
}

static void dequantize_q5_1_neon(const void *src, float *dst, int64_t n) {
    const block_q5_1 *x = (const block_q5_1 *)src;
    for (int64_t b = 0; b < n / QK5_1; b++, dst += QK5_1) {
        const float32x4_t d = vdupq_n_f32(fp16_to_f32(x[b].d));
        const float32x4_t m = vdupq_n_f32(fp16_to_f32(x[b].m));
        int8x16_t lo, hi;
        unpack_q5_1(&x[b], &lo, &hi);
        store_q4_1(dst, lo, d, m);
        store_q4_1(dst + 16, hi, d, m);
    }
}

static void dequantize_q8_0_neon(const void *src, float *dst, int64_t n) {
    const block_q8_0 *x = (const block_q8_0 *)src;
    for (int64_t b = 0; b < n / QK8_0; b++, dst += QK8_0) {
        const float32x4_t d = vdupq_n_f32(fp16_to_f32(x[b].d));
        store_scaled_s8(dst, vld1q_s8(x[b].qs), d);
        store_scaled_s8(dst + 16, vld1q_s8(x[b].qs + 16), d);
    }
}

/* f16 -> f32 is exact, so FCVTL matches the scalar conversion bit for bit. */
static void dequantize_f16_neon(const void *src, float *dst, int64_t n) {
    const infer_half *x = (const infer_half *)src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(x + i));
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i < n; i++) dst[i] = fp16_to_f32(x[i]);
}

/* bf16 is the top half of an f32. */
static void dequantize_bf16_neon(const void *src, float *dst, int64_t n) {
    const uint16_t *x = (const uint16_t *)src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16(x + i);
        vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
        vst1q_f32(dst + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
    }
    for (; i < n; i++) dst[i] = infer_bf16_to_fp32(x[i]);
}

/* ---- quantize activations: Q8_0 and Q8_1 ---------------------------------------- */

/* One block of 32: d = amax/127, q = roundf(x/d) clamped to [-127, 127] (the clamp
 * only matters for inf/NaN input; FCVTAS maps NaN to 0 as the scalar code does).
 * Returns d; *sum gets the sum of the quants. */
static inline float quantize_block_q8_neon(const float *x, int8_t *qs, int *sum) {
    float32x4_t v[8], amax = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        amax = vmaxq_f32(amax, vabsq_f32(v[k]));
    }
    const float d = vmaxvq_f32(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int16x8_t h[4];
    for (int k = 0; k < 4; k++) {
        int32x4_t a = vcvtaq_s32_f32(vmulq_n_f32(v[2 * k], id));
        int32x4_t b = vcvtaq_s32_f32(vmulq_n_f32(v[2 * k + 1], id));
        h[k] = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
        h[k] = vmaxq_s16(vminq_s16(h[k], vdupq_n_s16(127)), vdupq_n_s16(-127));
    }
    vst1q_s8(qs, vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1])));
    vst1q_s8(qs + 16, vcombine_s8(vmovn_s16(h[2]), vmovn_s16(h[3])));
    *sum = vaddvq_s32(vpaddlq_s16(vaddq_s16(vaddq_s16(h[0], h[1]), vaddq_s16(h[2], h[3]))));
    return d;
}

static void quantize_q8_0_neon(const float *src, void *dst, int64_t n) {
    block_q8_0 *y = (block_q8_0 *)dst;
    int sum;
    for (int64_t b = 0; b < n / QK8_0; b++, src += QK8_0)
        y[b].d = infer_fp32_to_fp16(quantize_block_q8_neon(src, y[b].qs, &sum));
}

static void quantize_q8_1_neon(const float *src, void *dst, int64_t n) {
    block_q8_1 *y = (block_q8_1 *)dst;
    int sum;
    for (int64_t b = 0; b < n / QK8_1; b++, src += QK8_1) {
        const float d = quantize_block_q8_neon(src, y[b].qs, &sum);
        y[b].d = infer_fp32_to_fp16(d);
        y[b].s = infer_fp32_to_fp16((float)sum * d);   /* from the unrounded d, as ggml */
    }
}

/* ---- dot products ------------------------------------------------------------------
 * Quantized pairs: the exact int32 sum of one weight block times one Q8 block (in
 * four lanes, whose total is what counts), then acc += sum * (d_w * d_a) in float
 * lanes.  One helper per weight format serves both the one-row and four-row kernels. */

/* A weight block as two int8x16 halves (elements 0..15, 16..31) that multiply the
 * Q8 block's halves directly. */
typedef struct { int8x16_t lo, hi; } wquants;

static inline wquants wq_q4_0(const block_q4_0 *x) {
    wquants q;
    unpack_nibbles(x->qs, &q.lo, &q.hi);
    q.lo = vsubq_s8(q.lo, vdupq_n_s8(8));
    q.hi = vsubq_s8(q.hi, vdupq_n_s8(8));
    return q;
}

/* Q4_1's nibbles unsigned: the min is added separately as m_w * s_a. */
static inline wquants wq_q4_1(const block_q4_1 *x) {
    wquants q;
    unpack_nibbles(x->qs, &q.lo, &q.hi);
    return q;
}

static inline wquants wq_q5_0(const block_q5_0 *x) {
    wquants q;
    unpack_q5_0(x, &q.lo, &q.hi);
    return q;
}

static inline wquants wq_q5_1(const block_q5_1 *x) {
    wquants q;
    unpack_q5_1(x, &q.lo, &q.hi);
    return q;
}

static inline wquants wq_q8_0(const block_q8_0 *x) {
    wquants q = {vld1q_s8(x->qs), vld1q_s8(x->qs + 16)};
    return q;
}

static inline int32x4_t block_dot(wquants q, int8x16_t y0, int8x16_t y1) {
    return dot_s8(dot_s8(vdupq_n_s32(0), q.lo, y0), q.hi, y1);
}

/* The Q4_1 . Q8_1 min term of a block pair, d_w*d_a*sum(nib*q) being the rest. */
#define MIN_TERM_Q4_1(xb, yb) (fp16_to_f32((xb).m) * fp16_to_f32((yb).s))
#define NO_MIN_TERM(xb, yb) 0.0f

/* One row: two blocks per iteration keep two independent FMA chains in flight. */
#define QUANT_DOT(name, wblock, ablock, unpack, min_term)                                \
    static float name(int64_t n, const void *w, const void *a) {                      \
        const wblock *x = (const wblock *)w;                                           \
        const ablock *y = (const ablock *)a;                                           \
        const int64_t nb = n / 32;                                                     \
        float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);                \
        float mins = 0.0f;                                                             \
        int64_t b = 0;                                                                 \
        for (; b + 2 <= nb; b += 2) {                                                  \
            int32x4_t p0 = block_dot(unpack(&x[b]), vld1q_s8(y[b].qs), vld1q_s8(y[b].qs + 16)); \
            int32x4_t p1 = block_dot(unpack(&x[b + 1]), vld1q_s8(y[b + 1].qs),          \
                                     vld1q_s8(y[b + 1].qs + 16));                        \
            acc0 = vmlaq_n_f32(acc0, vcvtq_f32_s32(p0),                                 \
                               fp16_to_f32(x[b].d) * fp16_to_f32(y[b].d));               \
            acc1 = vmlaq_n_f32(acc1, vcvtq_f32_s32(p1),                                 \
                               fp16_to_f32(x[b + 1].d) * fp16_to_f32(y[b + 1].d));       \
            mins += min_term(x[b], y[b]) + min_term(x[b + 1], y[b + 1]);               \
        }                                                                              \
        for (; b < nb; b++) {                                                          \
            int32x4_t p0 = block_dot(unpack(&x[b]), vld1q_s8(y[b].qs), vld1q_s8(y[b].qs + 16)); \
            acc0 = vmlaq_n_f32(acc0, vcvtq_f32_s32(p0),                                 \
                               fp16_to_f32(x[b].d) * fp16_to_f32(y[b].d));               \
            mins += min_term(x[b], y[b]);                                              \
        }                                                                              \
        return vaddvq_f32(vaddq_f32(acc0, acc1)) + mins;                               \
    }

/* Four rows row_bytes apart against one activation row (mat-vec uses it when set):
 * each activation block is loaded and its scale converted once for four rows. */
#define QUANT_DOT_4(name, wblock, ablock, unpack, min_term)                              \
    static void name(int64_t n, const void *w, size_t row_bytes, const void *a,        \
                     float *out) {                                                     \
        const ablock *y = (const ablock *)a;                                           \
        const wblock *x[4];                                                            \
        for (int k = 0; k < 4; k++)                                                    \
            x[k] = (const wblock *)((const uint8_t *)w + (size_t)k * row_bytes);      \
        float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),   \
                              vdupq_n_f32(0.0f)};                                      \
        float32x4_t mins = vdupq_n_f32(0.0f);                                          \
        for (int64_t b = 0; b < n / 32; b++) {                                          \
            const int8x16_t y0 = vld1q_s8(y[b].qs), y1 = vld1q_s8(y[b].qs + 16);        \
            const float dy = fp16_to_f32(y[b].d);                                      \
            float m[4];                                                                \
            for (int k = 0; k < 4; k++) {                                              \
                acc[k] = vmlaq_n_f32(acc[k], vcvtq_f32_s32(block_dot(unpack(&x[k][b]), y0, y1)), \
                                     fp16_to_f32(x[k][b].d) * dy);                     \
                m[k] = min_term(x[k][b], y[b]);                                        \
            }                                                                          \
            mins = vaddq_f32(mins, vld1q_f32(m));                                      \
        }                                                                              \
        /* Pairwise adds transpose the four accumulators: lane k = total of acc[k]. */ \
        const float32x4_t sums = vpaddq_f32(vpaddq_f32(acc[0], acc[1]),                \
                                            vpaddq_f32(acc[2], acc[3]));               \
        vst1q_f32(out, vaddq_f32(sums, mins));                                         \
    }

/* Four weight rows (row_bytes apart) times four activation rows (a_stride apart),
 * out[t * out_stride + k] (mat-mul uses it): each weight block is unpacked once
 * for four tokens, each activation block loaded once for four rows; 16 float
 * accumulators stay in registers. */
#define QUANT_DOT_4X4(name, wblock, ablock, unpack, min_term)                          \
    static void name(int64_t n, const void *w, size_t row_bytes, const void *a,        \
                     size_t a_stride, float *out, size_t out_stride) {                 \
        const wblock *x[4];                                                            \
        const ablock *y[4];                                                            \
        for (int k = 0; k < 4; k++) {                                                  \
            x[k] = (const wblock *)((const uint8_t *)w + (size_t)k * row_bytes);      \
            y[k] = (const ablock *)((const uint8_t *)a + (size_t)k * a_stride);       \
        }                                                                              \
        float32x4_t acc[4][4]; /* [token][row] */                                      \
        float mins[4][4];                                                              \
        for (int t = 0; t < 4; t++)                                                    \
            for (int k = 0; k < 4; k++) {                                              \
                acc[t][k] = vdupq_n_f32(0.0f);                                         \
                mins[t][k] = 0.0f;                                                     \
            }                                                                          \
        for (int64_t b = 0; b < n / 32; b++) {                                          \
            int8x16_t y0[4], y1[4];                                                    \
            float dy[4];                                                               \
            for (int t = 0; t < 4; t++) {                                              \
                y0[t] = vld1q_s8(y[t][b].qs);                                          \
                y1[t] = vld1q_s8(y[t][b].qs + 16);                                     \
                dy[t] = fp16_to_f32(y[t][b].d);                                        \
            }                                                                          \
            for (int k = 0; k < 4; k++) {                                              \
                const wquants q = unpack(&x[k][b]);                                    \
                const float dx = fp16_to_f32(x[k][b].d);                               \
                for (int t = 0; t < 4; t++) {                                          \
                    acc[t][k] = vmlaq_n_f32(acc[t][k], vcvtq_f32_s32(block_dot(q, y0[t], y1[t])), \
                                            dx * dy[t]);                               \
                    mins[t][k] += min_term(x[k][b], y[t][b]);                          \
                }                                                                      \
            }                                                                          \
        }                                                                              \
        for (int t = 0; t < 4; t++) {                                                  \
            const float32x4_t sums = vpaddq_f32(vpaddq_f32(acc[t][0], acc[t][1]),      \
                                                vpaddq_f32(acc[t][2], acc[t][3]));     \
            vst1q_f32(out + (size_t)t * out_stride, vaddq_f32(sums, vld1q_f32(mins[t]))); \
        }                                                                              \
    }

QUANT_DOT(vec_dot_q4_0_q8_0_neon, block_q4_0, block_q8_0, wq_q4_0, NO_MIN_TERM)
QUANT_DOT(vec_dot_q4_1_q8_1_neon, block_q4_1, block_q8_1, wq_q4_1, MIN_TERM_Q4_1)
QUANT_DOT(vec_dot_q5_0_q8_0_neon, block_q5_0, block_q8_0, wq_q5_0, NO_MIN_TERM)
QUANT_DOT(vec_dot_q8_0_q8_0_neon, block_q8_0, block_q8_0, wq_q8_0, NO_MIN_TERM)
QUANT_DOT(vec_dot_q5_1_q8_1_neon, block_q5_1, block_q8_1, wq_q5_1, MIN_TERM_Q4_1)
QUANT_DOT_4(vec_dot_4_q5_1_q8_1_neon, block_q5_1, block_q8_1, wq_q5_1, MIN_TERM_Q4_1)
QUANT_DOT_4X4(vec_dot_4x4_q5_1_q8_1_neon, block_q5_1, block_q8_1, wq_q5_1, MIN_TERM_Q4_1)
QUANT_DOT_4(vec_dot_4_q4_0_q8_0_neon, block_q4_0, block_q8_0, wq_q4_0, NO_MIN_TERM)
QUANT_DOT_4(vec_dot_4_q4_1_q8_1_neon, block_q4_1, block_q8_1, wq_q4_1, MIN_TERM_Q4_1)
QUANT_DOT_4(vec_dot_4_q5_0_q8_0_neon, block_q5_0, block_q8_0, wq_q5_0, NO_MIN_TERM)
QUANT_DOT_4(vec_dot_4_q8_0_q8_0_neon, block_q8_0, block_q8_0, wq_q8_0, NO_MIN_TERM)
QUANT_DOT_4X4(vec_dot_4x4_q4_0_q8_0_neon, block_q4_0, block_q8_0, wq_q4_0, NO_MIN_TERM)
QUANT_DOT_4X4(vec_dot_4x4_q4_1_q8_1_neon, block_q4_1, block_q8_1, wq_q4_1, MIN_TERM_Q4_1)
QUANT_DOT_4X4(vec_dot_4x4_q5_0_q8_0_neon, block_q5_0, block_q8_0, wq_q5_0, NO_MIN_TERM)
QUANT_DOT_4X4(vec_dot_4x4_q8_0_q8_0_neon, block_q8_0, block_q8_0, wq_q8_0, NO_MIN_TERM)

/* Float rows against f32 activations: 16 products per iteration in four FMA chains. */
#define FLOAT_DOT(name, load4, load1)                                                      \
    static float name(int64_t n, const void *w, const void *a) {                     \
        const float *y = (const float *)a;                                           \
        float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),  \
                              vdupq_n_f32(0.0f)};                                    \
        int64_t i = 0;                                                                \
        for (; i + 16 <= n; i += 16)                                                  \
            for (int k = 0; k < 4; k++)                                               \
                acc[k] = vfmaq_f32(acc[k], load4(w, i + 4 * k), vld1q_f32(y + i + 4 * k)); \
        for (; i + 4 <= n; i += 4) acc[0] = vfmaq_f32(acc[0], load4(w, i), vld1q_f32(y + i)); \
        float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]))); \
        for (; i < n; i++) sum += load1(w, i) * y[i];                                   \
        return sum;                                                                   \
    }

static inline float32x4_t load4_f32(const void *w, int64_t i) {
    return vld1q_f32((const float *)w + i);
}
static inline float32x4_t load4_f16(const void *w, int64_t i) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const infer_half *)w + i)));
}
static inline float32x4_t load4_bf16(const void *w, int64_t i) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)w + i), 16));
}

static inline float load1_f32(const void *w, int64_t i) { return ((const float *)w)[i]; }
static inline float load1_f16(const void *w, int64_t i) {
    return fp16_to_f32(((const infer_half *)w)[i]);
}
static inline float load1_bf16(const void *w, int64_t i) {
    return infer_bf16_to_fp32(((const uint16_t *)w)[i]);
}

FLOAT_DOT(vec_dot_f32_f32_neon, load4_f32, load1_f32)
FLOAT_DOT(vec_dot_f16_f32_neon, load4_f16, load1_f16)
FLOAT_DOT(vec_dot_bf16_f32_neon, load4_bf16, load1_bf16)

void INFER_NEON_NAME(infer_fill_table_neon)(infer_kernel_table *t) {
    t->dequantize[INFER_TYPE_F16] = dequantize_f16_neon;
    t->dequantize[INFER_TYPE_BF16] = dequantize_bf16_neon;
    t->dequantize[INFER_TYPE_Q4_0] = dequantize_q4_0_neon;
    t->dequantize[INFER_TYPE_Q4_1] = dequantize_q4_1_neon;
    t->dequantize[INFER_TYPE_Q5_0] = dequantize_q5_0_neon;
    t->dequantize[INFER_TYPE_Q8_0] = dequantize_q8_0_neon;
    t->dequantize[INFER_TYPE_Q5_1] = dequantize_q5_1_neon;
    t->vec_dot[INFER_TYPE_Q5_1] = vec_dot_q5_1_q8_1_neon;
    t->vec_dot_4[INFER_TYPE_Q5_1] = vec_dot_4_q5_1_q8_1_neon;
    t->vec_dot_4x4[INFER_TYPE_Q5_1] = vec_dot_4x4_q5_1_q8_1_neon;

    t->quantize[INFER_TYPE_Q8_0] = quantize_q8_0_neon;
    t->quantize[INFER_TYPE_Q8_1] = quantize_q8_1_neon;

    t->vec_dot[INFER_TYPE_F32] = vec_dot_f32_f32_neon;
    t->vec_dot[INFER_TYPE_F16] = vec_dot_f16_f32_neon;
    t->vec_dot[INFER_TYPE_BF16] = vec_dot_bf16_f32_neon;
    t->vec_dot[INFER_TYPE_Q4_0] = vec_dot_q4_0_q8_0_neon;
    t->vec_dot[INFER_TYPE_Q4_1] = vec_dot_q4_1_q8_1_neon;
    t->vec_dot[INFER_TYPE_Q5_0] = vec_dot_q5_0_q8_0_neon;
    t->vec_dot[INFER_TYPE_Q8_0] = vec_dot_q8_0_q8_0_neon;

    t->vec_dot_4[INFER_TYPE_Q4_0] = vec_dot_4_q4_0_q8_0_neon;
    t->vec_dot_4[INFER_TYPE_Q4_1] = vec_dot_4_q4_1_q8_1_neon;
    t->vec_dot_4[INFER_TYPE_Q5_0] = vec_dot_4_q5_0_q8_0_neon;
    t->vec_dot_4[INFER_TYPE_Q8_0] = vec_dot_4_q8_0_q8_0_neon;

    t->vec_dot_4x4[INFER_TYPE_Q4_0] = vec_dot_4x4_q4_0_q8_0_neon;
    t->vec_dot_4x4[INFER_TYPE_Q4_1] = vec_dot_4x4_q4_1_q8_1_neon;
    t->vec_dot_4x4[INFER_TYPE_Q5_0] = vec_dot_4x4_q5_0_q8_0_neon;
    t->vec_dot_4x4[INFER_TYPE_Q8_0] = vec_dot_4x4_q8_0_q8_0_neon;
}
#endif
