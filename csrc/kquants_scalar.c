/* kquants_scalar.c: the K formats Q4_K, Q6_K (weights) and Q8_K (activations), scalar.
 *
 * The oracle for the SIMD files.  Quantizers follow ggml's reference algorithms
 * (quantize_row_{q4,q6,q8}_K_ref) with their float operations in the same order, so
 * they produce the same bytes on every machine: contraction into FMA is off here,
 * as the compilers for AArch64 fuse by default (infer_make_qkx2_quants, shared by
 * Q2_K/Q4_K/Q5_K, then picked other scales there); dequantizers evaluate d*sc*q - dmin*m as
 * dequantize_row_q{4,6}_K does, and their result is exact whether fused or not:
 * d*sc*q has at most 11+6+4 significant bits for Q4_K, and Q6_K has no sum.
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

/* ---- Q4_K ------------------------------------------------------------------- */

/* Asymmetric quantizer of one sub-block (ggml make_qkx2_quants): first the
 * min/max grid, then nstep+1 trial scales (nmax + rmin + rdelta*is)/(max - min),
 * each refitted by weighted least squares on (scale, min); keep the lowest
 * weighted error (squared, or absolute when use_mad).  Returns the scale, stores
 * -min (>= 0) in *neg_min. */
float infer_make_qkx2_quants(int n, int nmax, const float *x, const float *weights,
                             uint8_t *L, float *neg_min, uint8_t *Laux,
                             float rmin, float rdelta, int nstep, int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

void infer_quantize_K_sub_blocks(const float *x, int nmax, float rmin, int nstep, uint8_t L[QK_K],
                                 uint8_t scales[K_SCALE_SIZE], infer_half *d_out, infer_half *dmin_out) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], sub_scales[QK_K / 32];
    float max_scale = 0, max_min = 0;  /* both >= 0: the min is subtracted */
    for (int j = 0; j < QK_K / 32; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xs[l]);
        sub_scales[j] = infer_make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux,
                                               rmin, 0.1f, nstep, 0);
        if (sub_scales[j] > max_scale) max_scale = sub_scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales, 0, K_SCALE_SIZE);
    for (int j = 0; j < QK_K / 32; j++) {
        /* ggml stores nearest_int's result in a uint8_t, then clamps to 63 */
        uint8_t ls = (uint8_t)nearest_int(inv_scale * sub_scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        if (ls > 63) ls = 63;
        if (lm > 63) lm = 63;
        if (j < 4) {
            scales[j] = ls;
            scales[j + 4] = lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = infer_fp32_to_fp16(max_scale / 63.f);
    *dmin_out = infer_fp32_to_fp16(max_min / 63.f);

    /* Requantize against the rounded 6-bit scales and fp16 super-scales. */
    uint8_t sm[16];
    infer_q4_K_unpack_scales(scales, sm);
    const float d_all = infer_fp16_to_fp32(*d_out);
    const float m_all = infer_fp16_to_fp32(*dmin_out);
    for (int j = 0; j < QK_K / 32; j++) {
        const float d = d_all * sm[j];
        if (!d) continue;
        const float dm = m_all * sm[8 + j];
        for (int l = 0; l < 32; l++) {
            int q = nearest_int((x[32 * j + l] + dm) / d);
            L[32 * j + l] = (uint8_t)(q < 0 ? 0 : q > nmax ? nmax : q);
        }
    }
}

static void infer_quantize_q4_K_scalar(const float *x, void *dst, int64_t n) {
    block_q4_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        infer_quantize_K_sub_blocks(x, 15, -1.f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        for (int j = 0; j < QK_K / 64; j++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * j + l] = (uint8_t)(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
    }
}

static void infer_dequantize_q4_K_scalar(const void *src, float *y, int64_t n) {
    const block_q4_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sm[16];
        infer_q4_K_unpack_scales(x[i].scales, sm);
        const float d = infer_fp16_to_fp32(x[i].d);
        const float dmin = infer_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int j = 0; j < QK_K / 64; j++, q += 32, y += 64) {
            const float d1 = d * sm[2 * j], m1 = dmin * sm[8 + 2 * j];
            const float d2 = d * sm[2 * j + 1], m2 = dmin * sm[8 + 2 * j + 1];
            for (int l = 0; l < 32; l++) {
                float p1 = d1 * (q[l] & 0xF), p2 = d2 * (q[l] >> 4);
                y[l] = p1 - m1;
                y[32 + l] = p2 - m2;
            }
        }
    }
}

/* f16 output of a K format: each super-block through its f32 dequantizer, then
 * rounded to nearest even. */
static void dequantize_f16_via(infer_dequantize_fn dequantize, size_t block_bytes,
                               const void *src, infer_half *y, int64_t n) {
    float buf[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        dequantize((const uint8_t *)src + i * block_bytes, buf, QK_K);
        for (int l = 0; l < QK_K; l++) y[l] = infer_fp32_to_fp16(buf[l]);
    }
}

static void infer_dequantize_f16_q4_K_scalar(const void *src, infer_half *y, int64_t n) {
    dequantize_f16_via(infer_dequantize_q4_K_scalar, sizeof(block_q4_K), src, y, n);
}

/* Σ_j sc_j·Σ q·a - Σ_j m_j·Σ a: the min term comes from Q8_K's bsums (two per sub-block). */
static float infer_vec_dot_q4_K_q8_K_scalar(int64_t n, const void *w, const void *a) {
    const block_q4_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sm[16];
        infer_q4_K_unpack_scales(x[i].scales, sm);
        int32_t summ = 0;
        for (int j = 0; j < QK_K / 32; j++)
            summ += sm[8 + j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        int32_t sumi = 0;
        const uint8_t *q = x[i].qs;
        const int8_t *q8 = y[i].qs;
        for (int j = 0; j < QK_K / 64; j++, q += 32, q8 += 64) {
            int32_t s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                s1 += (q[l] & 0xF) * q8[l];
                s2 += (q[l] >> 4) * q8[32 + l];
            }
            sumi += sm[2 * j] * s1 + sm[2 * j + 1] * s2;
        }
        const float d = infer_fp16_to_fp32(x[i].d) * y[i].d;
        const float dmin = infer_fp16_to_fp32(x[i].dmin) * y[i].d;
        sum += d * (float)sumi - dmin * (float)summ;
    }
    return sum;
}

/* ---- Q6_K ------------------------------------------------------------------- */

/* Symmetric quantizer of one sub-block into -nmax..nmax-1 (ggml make_qx_quants with
 * rmse_type 1 and no importance: weights x²), searching 19 scales around -nmax/max.
 * Stores q + nmax in L; returns the scale (negative when max > 0). */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    const float max = infer_signed_absmax(n, x);
    if (max == 0.f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx, suml2;
    infer_symmetric_levels(n, nmax, x, iscale, nmax, L, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest_int(iscale * x[i]);
                l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
                L[i] = (int8_t)(l + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void infer_quantize_q6_K_scalar(const float *x, void *dst, int64_t n) {
    block_q6_K *y = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = make_qx_quants(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* The largest scale maps to -128, so int8 scales span -128..127. */
        float iscale = -128.f / max_scale;
        y[i].d = infer_fp32_to_fp16(1 / iscale);
        for (int j = 0; j < QK_K / 16; j++) {
            int s = nearest_int(iscale * scales[j]);
            y[i].scales[j] = (int8_t)(s > 127 ? 127 : s);
        }
        const float d_all = infer_fp16_to_fp32(y[i].d);
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = d_all * y[i].scales[j];
            if (!d) continue;  /* keeps make_qx_quants' levels, as ggml does */
            for (int l = 0; l < 16; l++) {
                int q = nearest_int(x[16 * j + l] / d);
                q = q < -32 ? -32 : q > 31 ? 31 : q;
                L[16 * j + l] = (int8_t)(q + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int h = 0; h < QK_K / 128; h++, ql += 64, qh += 32) {
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[64 + l] & 0xF) << 4));
                ql[32 + l] = (uint8_t)((Lh[32 + l] & 0xF) | ((Lh[96 + l] & 0xF) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[32 + l] >> 4) << 2) |
                                  ((Lh[64 + l] >> 4) << 4) | ((Lh[96 + l] >> 4) << 6));
            }
        }
    }
}

/* The 6-bit value of element l+32k (k = 0..3) of a 128-element half. */
static inline int q6_K_value(const uint8_t *ql, const uint8_t *qh, int l, int k) {
    int lo = (k & 1 ? ql[32 + l] : ql[l]) >> (k & 2 ? 4 : 0);
    return ((lo & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
}

static void infer_dequantize_q6_K_scalar(const void *src, float *y, int64_t n) {
    const block_q6_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = infer_fp16_to_fp32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < QK_K / 128; h++, ql += 64, qh += 32, sc += 8, y += 128)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    const float ds = d * sc[2 * k + l / 16];
                    y[32 * k + l] = ds * q6_K_value(ql, qh, l, k);
                }
    }
}

static void infer_dequantize_f16_q6_K_scalar(const void *src, infer_half *y, int64_t n) {
    dequantize_f16_via(infer_dequantize_q6_K_scalar, sizeof(block_q6_K), src, y, n);
}

static float infer_vec_dot_q6_K_q8_K_scalar(int64_t n, const void *w, const void *a) {
    const block_q6_K *x = w;
    const block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales, *q8 = y[i].qs;
        int32_t sumi = 0;
        for (int h = 0; h < QK_K / 128; h++, ql += 64, qh += 32, sc += 8, q8 += 128)
            for (int k = 0; k < 4; k++)
                for (int s = 0; s < 2; s++) {  /* sub-block 2k+s: elements 32k+16s.. */
                    int32_t si = 0;
                    for (int l = 16 * s; l < 16 * s + 16; l++)
                        si += q6_K_value(ql, qh, l, k) * q8[32 * k + l];
                    sumi += sc[2 * k + s] * si;
                }
        sum += infer_fp16_to_fp32(x[i].d) * y[i].d * (float)sumi;
    }
    return sum;
}

/* ---- Q8_K ------------------------------------------------------------------- */

static void infer_quantize_q8_K_scalar(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0, amax = 0;  /* max: the element of largest |x|, sign kept */
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* -127 (not -128) so that q stays in -127..127 */
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

static void infer_dequantize_q8_K_scalar(const void *src, float *y, int64_t n) {
    const block_q8_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
        for (int j = 0; j < QK_K; j++) y[j] = x[i].d * x[i].qs[j];
}

void infer_fill_kquants_scalar(infer_kernel_table *t) {
    t->quantize[INFER_TYPE_Q4_K] = infer_quantize_q4_K_scalar;
    t->dequantize[INFER_TYPE_Q4_K] = infer_dequantize_q4_K_scalar;
    t->dequantize_f16[INFER_TYPE_Q4_K] = infer_dequantize_f16_q4_K_scalar;
    t->vec_dot[INFER_TYPE_Q4_K] = infer_vec_dot_q4_K_q8_K_scalar;

    t->quantize[INFER_TYPE_Q6_K] = infer_quantize_q6_K_scalar;
    t->dequantize[INFER_TYPE_Q6_K] = infer_dequantize_q6_K_scalar;
    t->dequantize_f16[INFER_TYPE_Q6_K] = infer_dequantize_f16_q6_K_scalar;
    t->vec_dot[INFER_TYPE_Q6_K] = infer_vec_dot_q6_K_q8_K_scalar;

    t->quantize[INFER_TYPE_Q8_K] = infer_quantize_q8_K_scalar;
    t->dequantize[INFER_TYPE_Q8_K] = infer_dequantize_q8_K_scalar;
}
