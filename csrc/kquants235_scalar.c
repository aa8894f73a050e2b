/* kquants235_scalar.c: the K formats Q2_K, Q3_K and Q5_K (weights, paired with Q8_K
 * activations), portable C: the oracle of kquants235_{avx2,avx512,neon}.c.
 *
 * Layouts (ggml-common.h, ggml-quants.c):
 *  Q2_K: 16 sub-blocks of 16.  scales[j] = sc | m << 4 (4 bits each); element
 *        = d*sc*q - dmin*m, q in 0..3.  Element 128h + 32k + l sits in bits 2k..2k+1
 *        of qs[32h + l]; sub-block j covers elements 16j..16j+15.
 *  Q3_K: 16 sub-blocks of 16, element = d*(sc-32)*(q-4) with q in 0..7: the low two
 *        bits as Q2_K's, bit 2 is bit (element / 32) of hmask[element % 32] (a set
 *        bit means no -4).  The 6-bit sc of sub-block j: low nibble of scales[j]
 *        (j < 8) or its high nibble (scales[j-8], j >= 8), top two bits from bits
 *        2*(j/4)..+1 of scales[8 + j%4].
 *  Q5_K: Q4_K's scales/mins and nibbles, plus bit 4 of element 64c + l (l < 32) in
 *        bit 2c of qh[l] and of element 64c + 32 + l in bit 2c+1.
 *
 * Quantizers are ggml's quantize_row_q{2,3,5}_K_ref (what llama-quantize runs with no
 * importance matrix) with their float operations in the same order and no FMA
 * contraction.  Dequantizers are exact in f32 (d*sc*q has at most 11+6+5 significant
 * bits; only the final subtraction of the min rounds), so any order gives the same
 * bits; the dot products sum exact int32 per super-block, then scale in float.
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

static inline int clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Q2_K / Q3_K keep four 2-bit fields per byte: element 128h + 32k + l in bits
 * 2k..2k+1 of qs[32h + l]. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                      (L[j + l + 96] << 6));
}

static inline int q2_value(const uint8_t *qs, int i) {
    return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

/* ---- Q2_K ------------------------------------------------------------------- */

static void quantize_q2_K(const float *x, void *dst, int64_t n) {
    block_q2_K *y = dst;
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = infer_make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j],
                                               Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            /* ggml stores nearest_int's int into the byte, then ORs the min above it */
            for (int j = 0; j < QK_K / 16; j++) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = infer_fp32_to_fp16(max_scale / q4scale);
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = infer_fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; j++)
                y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = infer_fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = infer_fp32_to_fp16(0.f);
        }
        /* Requantize against the rounded 4-bit scales and fp16 super-scales. */
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = FP16(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = FP16(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)clamp(nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

static void dequantize_q2_K(const void *src, float *y, int64_t n) {
    const block_q2_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d), dmin = FP16(x[i].dmin);
        for (int j = 0; j < QK_K / 16; j++) {
            const float dl = d * (x[i].scales[j] & 0xF), ml = dmin * (x[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) {
                const float p = dl * q2_value(x[i].qs, 16 * j + l);
                y[16 * j + l] = p - ml;
            }
        }
    }
}

/* Σ_j sc_j·Σ q·a - Σ_j m_j·Σ a; the min term from Q8_K's bsums (one per sub-block). */
static float vec_dot_q2_K_q8_K(int64_t n, const void *w, const void *a) {
    const block_q2_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t summ = 0, sumi = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            summ += (x[i].scales[j] >> 4) * y[i].bsums[j];
            int32_t s = 0;
            for (int l = 16 * j; l < 16 * j + 16; l++) s += q2_value(x[i].qs, l) * y[i].qs[l];
            sumi += (x[i].scales[j] & 0xF) * s;
        }
        const float d = y[i].d * FP16(x[i].d), dmin = y[i].d * FP16(x[i].dmin);
        sum += d * (float)sumi - dmin * (float)summ;
    }
    return sum;
}

/* ---- Q3_K ------------------------------------------------------------------- */

/* Symmetric 3-bit quantizer of one sub-block (ggml make_q3_quants with do_rmse):
 * start from -nmax/max, then up to 5 sweeps that move single elements to the level
 * that most improves the weighted (x²) fit.  Stores q + nmax in L; returns the scale. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    const float max = infer_signed_absmax(n, x);
    if (max == 0.f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx, suml2;
    infer_symmetric_levels(n, nmax, x, iscale, 0, L, &sumlx, &suml2);
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* The 16 signed 6-bit scales (sc - 32) of a Q3_K block. */
static void q3_K_scales(const uint8_t *s, int out[16]) {
    int8_t sc[16];
    infer_q3_K_unpack_scales(s, sc);
    for (int j = 0; j < 16; j++) out[j] = sc[j];
}

static inline int q3_value(const block_q3_K *b, int i) {
    return q2_value(b->qs, i) - ((b->hmask[i % 32] >> (i / 32)) & 1 ? 0 : 4);
}

static void quantize_q3_K(const float *x, void *dst, int64_t n) {
    block_q3_K *y = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                int l = clamp(nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = infer_fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = infer_fp32_to_fp16(0.f);
        }
        int sc[16];
        q3_K_scales(y[i].scales, sc);
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = FP16(y[i].d) * sc[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clamp(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        memset(y[i].hmask, 0, QK_K / 8);
        uint8_t low[QK_K];
        for (int j = 0; j < QK_K; j++) {
            if (L[j] > 3) y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
            low[j] = (uint8_t)(L[j] & 3);
        }
        pack_2bit(low, y[i].qs);
    }
}

static void dequantize_q3_K(const void *src, float *y, int64_t n) {
    const block_q3_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d);
        int sc[16];
        q3_K_scales(x[i].scales, sc);
        for (int j = 0; j < QK_K / 16; j++) {
            const float dl = d * sc[j];
            for (int l = 0; l < 16; l++) y[16 * j + l] = dl * q3_value(&x[i], 16 * j + l);
        }
    }
}

static float vec_dot_q3_K_q8_K(int64_t n, const void *w, const void *a) {
    const block_q3_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sc[16];
        q3_K_scales(x[i].scales, sc);
        int32_t sumi = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            int32_t s = 0;
            for (int l = 16 * j; l < 16 * j + 16; l++) s += q3_value(&x[i], l) * y[i].qs[l];
            sumi += sc[j] * s;
        }
        sum += FP16(x[i].d) * y[i].d * (float)sumi;
    }
    return sum;
}

/* ---- Q5_K ------------------------------------------------------------------- */

static inline int q5_value(const block_q5_K *b, int i) {
    const int c = i / 64, l = i % 32, hi = (i % 64) / 32;
    return ((b->qs[32 * c + l] >> (4 * hi)) & 0xF) | (((b->qh[l] >> (2 * c + hi)) & 1) << 4);
}

static void quantize_q5_K(const float *x, void *dst, int64_t n) {
    block_q5_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        infer_quantize_K_sub_blocks(x, 31, -0.5f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        memset(y[i].qh, 0, QK_K / 8);
        for (int c = 0; c < QK_K / 64; c++)
            for (int l = 0; l < 32; l++) {
                const int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                y[i].qh[l] |= (uint8_t)(((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1)));
                y[i].qs[32 * c + l] = (uint8_t)((l1 & 0xF) | ((l2 & 0xF) << 4));
            }
    }
}

static void dequantize_q5_K(const void *src, float *y, int64_t n) {
    const block_q5_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        uint8_t sm[16];
        infer_q4_K_unpack_scales(x[i].scales, sm);
        const float d = FP16(x[i].d), dmin = FP16(x[i].dmin);
        for (int j = 0; j < QK_K / 32; j++) {
            const float dl = d * sm[j], ml = dmin * sm[8 + j];
            for (int l = 0; l < 32; l++) {
                const float p = dl * q5_value(&x[i], 32 * j + l);
                y[32 * j + l] = p - ml;
            }
        }
    }
}

static float vec_dot_q5_K_q8_K(int64_t n, const void *w, const void *a) {
    const block_q5_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sm[16];
        infer_q4_K_unpack_scales(x[i].scales, sm);
        int32_t summ = 0, sumi = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            summ += sm[8 + j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
            int32_t s = 0;
            for (int l = 32 * j; l < 32 * j + 32; l++) s += q5_value(&x[i], l) * y[i].qs[l];
            sumi += sm[j] * s;
        }
        const float d = FP16(x[i].d) * y[i].d, dmin = FP16(x[i].dmin) * y[i].d;
        sum += d * (float)sumi - dmin * (float)summ;
    }
    return sum;
}

/* ---- f16 output: through f32, one super-block at a time ---------------------- */

#define DEQUANTIZE_F16(name, block)                                                      \
    static void dequantize_f16_##name(const void *src, infer_half *y, int64_t n) {        \
        float buf[QK_K];                                                                \
        for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {                              \
            dequantize_##name((const block *)src + i, buf, QK_K);                        \
            for (int l = 0; l < QK_K; l++) y[l] = infer_fp32_to_fp16(buf[l]);            \
        }                                                                               \
    }
DEQUANTIZE_F16(q2_K, block_q2_K)
DEQUANTIZE_F16(q3_K, block_q3_K)
DEQUANTIZE_F16(q5_K, block_q5_K)

void infer_fill_kquants235_scalar(infer_kernel_table *t) {
    t->quantize[INFER_TYPE_Q2_K] = quantize_q2_K;
    t->dequantize[INFER_TYPE_Q2_K] = dequantize_q2_K;
    t->dequantize_f16[INFER_TYPE_Q2_K] = dequantize_f16_q2_K;
    t->vec_dot[INFER_TYPE_Q2_K] = vec_dot_q2_K_q8_K;

    t->quantize[INFER_TYPE_Q3_K] = quantize_q3_K;
    t->dequantize[INFER_TYPE_Q3_K] = dequantize_q3_K;
    t->dequantize_f16[INFER_TYPE_Q3_K] = dequantize_f16_q3_K;
    t->vec_dot[INFER_TYPE_Q3_K] = vec_dot_q3_K_q8_K;

    t->quantize[INFER_TYPE_Q5_K] = quantize_q5_K;
    t->dequantize[INFER_TYPE_Q5_K] = dequantize_q5_K;
    t->dequantize_f16[INFER_TYPE_Q5_K] = dequantize_f16_q5_K;
    t->vec_dot[INFER_TYPE_Q5_K] = vec_dot_q5_K_q8_K;
}
