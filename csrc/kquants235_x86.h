/* kquants235_x86.h: x86 SIMD kernels of Q2_K, Q3_K and Q5_K (with Q8_K activations),
 * written once for two builds: kquants235_avx2.c includes it with ISA_SUFFIX avx2,
 * kquants235_avx512.c with ISA_SUFFIX avx512 and X86_VNNI 1, which fuses each
 * "multiply int16 pairs by the sub-block scales and accumulate" into one VNNI
 * vpdpwssd on 256-bit vectors (AVX512VL).
 *
 * Dot products: unsigned weight quants times signed Q8_K quants with vpmaddubsw (pairs
 * into int16: at most 2*31*127), then times the int16 sub-block scales into int32;
 * one int32 vector per super-block, scaled by d_w*d_a in float.  Offsets come out once
 * per super-block through Q8_K's bsums: Q2_K's and Q5_K's mins, and Q3_K's -4, which
 * lets its quants stay unsigned (0..7).  Dequantizers do the scalar file's float
 * operations (d*sc*q exact in f32, then one rounding), so they give the same bits.
 * The quantizers are the scalar ones.
 */
#ifndef KQUANTS235_X86_H
#define KQUANTS235_X86_H

#include "infer_kernels.h"
#include "kquants_internal.h"

#include <immintrin.h>

#define K235_CAT2(a, b) a##_##b
#define K235_CAT(a, b) K235_CAT2(a, b)
#define KERNEL(name) K235_CAT(name, ISA_SUFFIX)

#ifndef X86_VNNI
#define X86_VNNI 0
#endif

KQ_INLINE float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KQ_INLINE int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* acc + Σ of int16 pairs p * scales, as 8 int32 lanes. */
KQ_INLINE __m256i madd_acc(__m256i acc, __m256i p, __m256i scales) {
#if X86_VNNI
    return _mm256_dpwssd_epi32(acc, p, scales);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, scales));
#endif
}

/* Shuffle masks over int16 scales held twice (both 128-bit halves alike):
 * pair_mask(k) puts lane 2k in the low half and lane 2k+1 in the high half (two
 * 16-element sub-blocks per 32-element run), lane_mask(k) lane k in both. */
KQ_INLINE __m256i pair_mask(int k) {
    const int8_t a = (int8_t)(4 * k), b = (int8_t)(4 * k + 2);
    return _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1,
                            a, a + 1, a, a + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1,
                            b, b + 1, b, b + 1, b, b + 1, b, b + 1);
}

KQ_INLINE __m256i lane_mask(int k) {
    const int8_t a = (int8_t)(2 * k);
    return _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1,
                            a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1,
                            a, a + 1, a, a + 1, a, a + 1, a, a + 1);
}

/* Bit `bit` of each byte of v, moved to bit `to` (0 or set). */
KQ_INLINE __m256i byte_bit(__m256i v, int bit, int to) {
    const __m256i b = _mm256_and_si256(_mm256_srli_epi16(v, bit), _mm256_set1_epi8(1));
    return _mm256_slli_epi16(b, to);
}

/* The 2-bit field k (bits 2k..2k+1) of each byte of v. */
KQ_INLINE __m256i crumb(__m256i v, int k) {
    return _mm256_and_si256(_mm256_srli_epi16(v, 2 * k), _mm256_set1_epi8(3));
}

/* ---- dot products ------------------------------------------------------------ */

static float KERNEL(vec_dot_q2_K_q8_K)(int64_t n, const void *w, const void *a) {
    const block_q2_K *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float acc_m = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, _mm_set1_epi8(0x0F)));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0F)));
        const int summ = hsum_epi32(_mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)y[i].bsums)));
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        /* the 8 scales of each 128-element half, in both 128-bit lanes */
        const __m256i sc_half[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00),
                                    _mm256_permute2x128_si256(sc16, sc16, 0x11)};
        for (int h = 0; h < 2; h++) {
            const __m256i sc = sc_half[h];
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int k = 0; k < 4; k++, q8 += 32) {
                const __m256i p = _mm256_maddubs_epi16(crumb(qv, k), _mm256_loadu_si256((const __m256i *)q8));
                sumi = madd_acc(sumi, p, _mm256_shuffle_epi8(sc, pair_mask(k)));
            }
        }
        const float d = y[i].d * _cvtsh_ss(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc_m += y[i].d * _cvtsh_ss(x[i].dmin) * (float)summ;
    }
    return hsum_ps(acc) - acc_m;
}

/* Q3_K with unsigned quants u = q + 4 (0..7): Σ sc·q·a = Σ sc·u·a - 4 Σ_j sc_j·bsums_j. */
static float KERNEL(vec_dot_q3_K_q8_K)(int64_t n, const void *w, const void *a) {
    const block_q3_K *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float acc_c = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t s8[16];
        infer_q3_K_unpack_scales(x[i].scales, s8);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)s8));
        const int corr = hsum_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[i].bsums)));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        /* the 8 scales of each 128-element half, in both 128-bit lanes */
        const __m256i sc_half[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00),
                                    _mm256_permute2x128_si256(sc16, sc16, 0x11)};
        for (int h = 0; h < 2; h++) {
            const __m256i sc = sc_half[h];
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int k = 0; k < 4; k++, q8 += 32) {
                const __m256i u = _mm256_or_si256(crumb(qv, k), byte_bit(hb, 4 * h + k, 2));
                const __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)q8));
                sumi = madd_acc(sumi, p, _mm256_shuffle_epi8(sc, pair_mask(k)));
            }
        }
        const float d = _cvtsh_ss(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc_c += d * (float)(4 * corr);
    }
    return hsum_ps(acc) - acc_c;
}

static float KERNEL(vec_dot_q5_K_q8_K)(int64_t n, const void *w, const void *a) {
    const block_q5_K *x = w;
    const block_q8_K *y = a;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = _cvtsh_ss(x[i].d) * y[i].d;
        const float dmin = _cvtsh_ss(x[i].dmin) * y[i].d;
        /* reads 16 bytes: the 12 scale bytes are followed by qh */
        const __m128i sm = infer_q4_K_unpack_scales_sse(x[i].scales);
        const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[i].bsums),
                                          _mm_loadu_si128((const __m128i *)y[i].bsums + 1));
        const __m128i mins16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(bs, mins16)), acc_m);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)x[i].qh);
        const uint8_t *q5 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < QK_K / 64; j++, q5 += 32, q8 += 64) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)q5);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), byte_bit(hb, 2 * j, 4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4),
                                               byte_bit(hb, 2 * j + 1, 4));
            const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8));
            const __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            sumi = madd_acc(sumi, p_lo, _mm256_shuffle_epi8(scales, lane_mask(2 * j)));
            sumi = madd_acc(sumi, p_hi, _mm256_shuffle_epi8(scales, lane_mask(2 * j + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    __m128 m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return hsum_ps(acc) - _mm_cvtss_f32(m);
}

/* ---- dequantizers ------------------------------------------------------------ */

/* Eight floats out, as f32 or f16 (round to nearest even, as infer_fp32_to_fp16). */
KQ_INLINE void store8(void *dst, int64_t at, __m256 v, int f16) {
    if (f16)
        _mm_storeu_si128((__m128i *)((infer_half *)dst + at),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    else
        _mm256_storeu_ps((float *)dst + at, v);
}

/* 16 signed bytes -> d*q - m (m = 0 for the symmetric formats). */
KQ_INLINE void emit16(void *dst, int64_t at, __m128i q, float d, float m, int f16) {
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    const __m256 v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    const __m256 v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)));
    store8(dst, at, _mm256_sub_ps(_mm256_mul_ps(vd, v0), vm), f16);
    store8(dst, at + 8, _mm256_sub_ps(_mm256_mul_ps(vd, v1), vm), f16);
}

KQ_INLINE void dequantize_q2_K(const block_q2_K *x, void *dst, int64_t n, int f16) {
    for (int64_t i = 0, at = 0; i < n / QK_K; i++) {
        const float d = _cvtsh_ss(x[i].d), dmin = _cvtsh_ss(x[i].dmin);
        for (int h = 0; h < 2; h++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int k = 0; k < 4; k++, at += 32) {
                const __m256i q = crumb(qv, k);
                const uint8_t s0 = x[i].scales[8 * h + 2 * k], s1 = x[i].scales[8 * h + 2 * k + 1];
                emit16(dst, at, _mm256_castsi256_si128(q), d * (s0 & 0xF), dmin * (s0 >> 4), f16);
                emit16(dst, at + 16, _mm256_extracti128_si256(q, 1), d * (s1 & 0xF), dmin * (s1 >> 4), f16);
            }
        }
    }
}

KQ_INLINE void dequantize_q3_K(const block_q3_K *x, void *dst, int64_t n, int f16) {
    for (int64_t i = 0, at = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        infer_q3_K_unpack_scales(x[i].scales, sc);
        const float d = _cvtsh_ss(x[i].d);
        const __m256i hb = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int k = 0; k < 4; k++, at += 32) {
                const __m256i u = _mm256_or_si256(crumb(qv, k), byte_bit(hb, 4 * h + k, 2));
                const __m256i q = _mm256_sub_epi8(u, _mm256_set1_epi8(4));
                const int j = 8 * h + 2 * k;
                emit16(dst, at, _mm256_castsi256_si128(q), d * sc[j], 0.f, f16);
                emit16(dst, at + 16, _mm256_extracti128_si256(q, 1), d * sc[j + 1], 0.f, f16);
            }
        }
    }
}

KQ_INLINE void dequantize_q5_K(const block_q5_K *x, void *dst, int64_t n, int f16) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0, at = 0; i < n / QK_K; i++) {
        uint8_t sm[16];
        infer_q4_K_unpack_scales(x[i].scales, sm);
        const float d = _cvtsh_ss(x[i].d), dmin = _cvtsh_ss(x[i].dmin);
        const __m256i hb = _mm256_loadu_si256((const __m256i *)x[i].qh);
        for (int j = 0; j < QK_K / 64; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i runs[2] = {
                _mm256_or_si256(_mm256_and_si256(q, low4), byte_bit(hb, 2 * j, 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), byte_bit(hb, 2 * j + 1, 4))};
            for (int r = 0; r < 2; r++, at += 32) {
                const int s = 2 * j + r;   /* q <= 31: signed and unsigned bytes agree */
                emit16(dst, at, _mm256_castsi256_si128(runs[r]), d * sm[s], dmin * sm[8 + s], f16);
                emit16(dst, at + 16, _mm256_extracti128_si256(runs[r], 1), d * sm[s], dmin * sm[8 + s], f16);
            }
        }
    }
}

#define K235_DEQUANTIZERS(fmt)                                                                   \
    static void KERNEL(dequantize_##fmt)(const void *src, float *dst, int64_t n) {                \
        dequantize_##fmt(src, dst, n, 0);                                                         \
    }                                                                                             \
    static void KERNEL(dequantize_f16_##fmt)(const void *src, infer_half *dst, int64_t n) {       \
        dequantize_##fmt(src, dst, n, 1);                                                         \
    }
K235_DEQUANTIZERS(q2_K)
K235_DEQUANTIZERS(q3_K)
K235_DEQUANTIZERS(q5_K)

static void KERNEL(fill_kquants235_x86)(infer_kernel_table *t) {
    t->vec_dot[INFER_TYPE_Q2_K] = KERNEL(vec_dot_q2_K_q8_K);
    t->vec_dot[INFER_TYPE_Q3_K] = KERNEL(vec_dot_q3_K_q8_K);
    t->vec_dot[INFER_TYPE_Q5_K] = KERNEL(vec_dot_q5_K_q8_K);
    t->dequantize[INFER_TYPE_Q2_K] = KERNEL(dequantize_q2_K);
    t->dequantize[INFER_TYPE_Q3_K] = KERNEL(dequantize_q3_K);
    t->dequantize[INFER_TYPE_Q5_K] = KERNEL(dequantize_q5_K);
    t->dequantize_f16[INFER_TYPE_Q2_K] = KERNEL(dequantize_f16_q2_K);
    t->dequantize_f16[INFER_TYPE_Q3_K] = KERNEL(dequantize_f16_q3_K);
    t->dequantize_f16[INFER_TYPE_Q5_K] = KERNEL(dequantize_f16_q5_K);
}

#endif
