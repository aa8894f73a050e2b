/* iq4_scalar.c: the non-linear 4-bit formats IQ4_NL (blocks of 32, paired with Q8_0)
 * and IQ4_XS (super-blocks of 256, paired with Q8_K), and MXFP4 (blocks of 32 with a
 * power-of-two scale, paired with Q8_0), portable C: the oracle of
 * iq4_{avx2,avx512,neon}.c.
 *
 * A nibble indexes kvalues_iq4nl, 16 int8 levels (ggml-common.h), placed as Q4_0's
 * nibbles: in each 32 elements, element l < 16 is the low nibble of qs[l], element
 * l + 16 the high one.  IQ4_NL: element = d * kvalues[nibble].  IQ4_XS: 8 sub-blocks
 * of 32 with 6-bit scales ls (low 4 bits in scales_l, two sub-blocks a byte, top
 * two at bits 2j..2j+1 of scales_h): element = d * (ls - 32) * kvalues[nibble].
 * The products are exact in f32 (11+6+7 significant bits).
 *
 * Quantizers are ggml's quantize_iq4_nl / quantize_iq4_xs with no importance matrix
 * (quantize_row_iq4_nl_impl, weights x², 15 trial scales around -max/127), as
 * llama-quantize runs them when none is given; float operations in ggml's order.
 */
#include "infer_kernels.h"
#include "kquants_internal.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define FP16(h) infer_fp16_to_fp32(h)

/* kvalues_iq4nl of ggml-common.h. */
const int8_t infer_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1, 13, 25, 38, 53, 69, 89, 113};
#define KV infer_kvalues_iq4nl

/* Trial scales tried either side of the first guess (ggml's ntry for quantize_iq4_*). */
#define NTRY 7

/* Index of the level nearest x (ties go to the upper level), by bisection. */
static inline int best_index(float x) {
    if (x <= KV[0]) return 0;
    if (x >= KV[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < KV[mav]) mu = mav;
        else ml = mav;
    }
    return x - KV[mu - 1] < KV[mu] - x ? mu - 1 : mu;
}

/* One block of 32: the scale that best fits x² -weighted levels, trying
 * (itry + kv[0]) / max for itry in -NTRY..NTRY after the least-squares refit of the
 * first guess.  L receives the level indices of the first guess. */
static float fit_block(const float *xb, uint8_t *L) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        float ax = fabsf(xb[j]);
        if (ax > amax) { amax = ax; max = xb[j]; }
    }
    if (amax < GROUP_MAX_EPS) return 0.f;
    float d = -max / KV[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        float al = id * xb[j];
        int l = best_index(al);
        L[j] = (uint8_t)l;
        float q = KV[l], w = xb[j] * xb[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -NTRY; itry <= NTRY; itry++) {
        id = (itry + KV[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float al = id * xb[j];
            int l = best_index(al);
            float q = KV[l], w = xb[j] * xb[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void pack_nibbles(const uint8_t *L, uint8_t *qs, int n) {
    for (int i = 0; i < n / 32; i++)
        for (int j = 0; j < 16; j++) qs[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

/* ---- IQ4_NL ------------------------------------------------------------------ */

static void quantize_iq4_nl(const float *x, void *dst, int64_t n) {
    block_iq4_nl *y = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / QK4_NL; i++, x += QK4_NL) {
        const float d = fit_block(x, L);
        y[i].d = infer_fp32_to_fp16(d);
        /* levels against the unrounded scale, as ggml does for one-block super-blocks */
        const float id = d ? 1 / d : 0;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)best_index(id * x[j]);
        pack_nibbles(L, y[i].qs, 32);
    }
}

static void dequantize_iq4_nl(const void *src, float *y, int64_t n) {
    const block_iq4_nl *x = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * KV[x[i].qs[j] & 0xF];
            y[j + 16] = d * KV[x[i].qs[j] >> 4];
        }
    }
}

static float vec_dot_iq4_nl_q8_0(int64_t n, const void *w, const void *a) {
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += KV[x[i].qs[j] & 0xF] * y[i].qs[j] + KV[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        sum += (FP16(x[i].d) * FP16(y[i].d)) * (float)sumi;
    }
    return sum;
}

/* ---- IQ4_XS ------------------------------------------------------------------ */

static inline int iq4_xs_scale(const block_iq4_xs *b, int j) {
    return (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
}

static void quantize_iq4_xs(const float *x, void *dst, int64_t n) {
    block_iq4_xs *y = dst;
    uint8_t L[QK_K];
    float scales[QK_K / 32];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            scales[ib] = fit_block(x + 32 * ib, L + 32 * ib);
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        /* The largest scale maps to ls - 32 = -32; d may be -0 (ggml keeps it). */
        const float d = -max_scale / 32;
        y[i].d = infer_fp32_to_fp16(d);
        const float id = d ? 1 / d : 0.f;
        uint16_t scales_h = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int l = nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)best_index(idl * x[32 * ib + j]);
            l += 32;
            if (ib % 2 == 0) y[i].scales_l[ib / 2] = (uint8_t)(l & 0xF);
            else y[i].scales_l[ib / 2] |= (uint8_t)((l & 0xF) << 4);
            scales_h |= (uint16_t)((l >> 4) << (2 * ib));
        }
        y[i].scales_h = scales_h;
        pack_nibbles(L, y[i].qs, QK_K);
    }
}

static void dequantize_iq4_xs(const void *src, float *y, int64_t n) {
    const block_iq4_xs *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = FP16(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < QK_K / 32; ib++, y += 32, qs += 16) {
            const float dl = d * iq4_xs_scale(&x[i], ib);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * KV[qs[j] & 0xF];
                y[j + 16] = dl * KV[qs[j] >> 4];
            }
        }
    }
}

static float vec_dot_iq4_xs_q8_K(int64_t n, const void *w, const void *a) {
    const block_iq4_xs *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *qs = x[i].qs;
        const int8_t *q8 = y[i].qs;
        int32_t sumi = 0;
        for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, q8 += 32) {
            int32_t s = 0;
            for (int j = 0; j < 16; j++) s += KV[qs[j] & 0xF] * q8[j] + KV[qs[j] >> 4] * q8[j + 16];
            sumi += iq4_xs_scale(&x[i], ib) * s;
        }
        sum += FP16(x[i].d) * y[i].d * (float)sumi;
    }
    return sum;
}

/* ---- MXFP4 -------------------------------------------------------------------
 * A nibble indexes kvalues_mxfp4 (E2M1 doubled: 0, 0.5, ..., 6 as 0, 1, ..., 12, the
 * high bit the sign), placed as Q4_0's nibbles; element = e8m0_half(e) * level, exact
 * in f32 unless it leaves the f32 range (e = 255 with level 12 is inf, as in ggml). */

const int8_t infer_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
#define KV_MXFP4 infer_kvalues_mxfp4

/* The first level nearest x at scale d (ggml's best_index_mxfp4: a linear scan, so
 * 0 takes index 0 over 8 and a tie goes to the earlier index). */
static inline int best_index_mxfp4(float x, float d) {
    int best = 0;
    float best_err = fabsf(KV_MXFP4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(KV_MXFP4[i] * d - x);
        if (err < best_err) best = i, best_err = err;
    }
    return best;
}

/* ggml's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127, so amax lands in
 * levels 4..8 (2^(e-127) * 4 <= amax < 2^(e-127) * 8; level 12 is 6 in E2M1).  Where ggml
 * casts an out-of-range float to uint8 (undefined: amax below 2^-125, or inf), e is
 * clamped to 0..255 instead. */
static void quantize_mxfp4(const float *x, void *dst, int64_t n) {
    block_mxfp4 *y = dst;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
        float amax = 0.f;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        uint8_t e = 0;
        if (amax > 0.f) {
            const float ef = floorf(log2f(amax)) - 2 + 127;
            e = ef <= 0.f ? 0 : ef >= 255.f ? 255 : (uint8_t)ef;
        }
        const float d = infer_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; j++)
            y[i].qs[j] = (uint8_t)(best_index_mxfp4(x[j], d) | best_index_mxfp4(x[j + QK_MXFP4 / 2], d) << 4);
    }
}

static void dequantize_mxfp4(const void *src, float *y, int64_t n) {
    const block_mxfp4 *x = src;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4) {
        const float d = infer_e8m0_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = d * KV_MXFP4[x[i].qs[j] & 0xF];
            y[j + 16] = d * KV_MXFP4[x[i].qs[j] >> 4];
        }
    }
}

static float vec_dot_mxfp4_q8_0(int64_t n, const void *w, const void *a) {
    const block_mxfp4 *x = w;
    const block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += KV_MXFP4[x[i].qs[j] & 0xF] * y[i].qs[j] + KV_MXFP4[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        sum += (infer_e8m0_half(x[i].e) * FP16(y[i].d)) * (float)sumi;
    }
    return sum;
}

/* ---- f16 output: through f32 ------------------------------------------------- */

static void dequantize_f16_via(infer_dequantize_fn f, int bs, size_t bb, const void *src,
                               infer_half *y, int64_t n) {
    float buf[QK_K];
    for (int64_t i = 0; i < n / bs; i++, y += bs) {
        f((const uint8_t *)src + (size_t)i * bb, buf, bs);
        for (int l = 0; l < bs; l++) y[l] = infer_fp32_to_fp16(buf[l]);
    }
}

static void dequantize_f16_iq4_nl(const void *src, infer_half *y, int64_t n) {
    dequantize_f16_via(dequantize_iq4_nl, QK4_NL, sizeof(block_iq4_nl), src, y, n);
}

static void dequantize_f16_iq4_xs(const void *src, infer_half *y, int64_t n) {
    dequantize_f16_via(dequantize_iq4_xs, QK_K, sizeof(block_iq4_xs), src, y, n);
}

static void dequantize_f16_mxfp4(const void *src, infer_half *y, int64_t n) {
    dequantize_f16_via(dequantize_mxfp4, QK_MXFP4, sizeof(block_mxfp4), src, y, n);
}

void infer_fill_iq4_scalar(infer_kernel_table *t) {
    t->quantize[INFER_TYPE_IQ4_NL] = quantize_iq4_nl;
    t->dequantize[INFER_TYPE_IQ4_NL] = dequantize_iq4_nl;
    t->dequantize_f16[INFER_TYPE_IQ4_NL] = dequantize_f16_iq4_nl;
    t->vec_dot[INFER_TYPE_IQ4_NL] = vec_dot_iq4_nl_q8_0;

    t->quantize[INFER_TYPE_IQ4_XS] = quantize_iq4_xs;
    t->dequantize[INFER_TYPE_IQ4_XS] = dequantize_iq4_xs;
    t->dequantize_f16[INFER_TYPE_IQ4_XS] = dequantize_f16_iq4_xs;
    t->vec_dot[INFER_TYPE_IQ4_XS] = vec_dot_iq4_xs_q8_K;

    t->quantize[INFER_TYPE_MXFP4] = quantize_mxfp4;
    t->dequantize[INFER_TYPE_MXFP4] = dequantize_mxfp4;
    t->dequantize_f16[INFER_TYPE_MXFP4] = dequantize_f16_mxfp4;
    t->vec_dot[INFER_TYPE_MXFP4] = vec_dot_mxfp4_q8_0;
}
