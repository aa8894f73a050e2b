/* iq4_x86.h: x86 SIMD kernels of IQ4_NL (with Q8_0) and IQ4_XS (with Q8_K), written once
 * for two builds: iq4_avx2.c (ISA_SUFFIX avx2) and iq4_avx512.c (ISA_SUFFIX avx512,
 * X86_VNNI 1: the 8-bit dot steps become vpdpbusd, the scale steps vpdpwssd).
 *
 * A nibble becomes its level with one vpshufb into kvalues_iq4nl.  Levels are signed
 * (-127..113), so the dot uses the sign trick |w| * (a with w's sign): vpmaddubsw's
 * pair sums stay within int16 (2*127*127).  Dequantizers do the scalar file's float
 * operations (d*ls*kvalue exact in f32), so they give the same bits.  The
 * quantizers are the scalar ones.
 */
#ifndef IQ4_X86_H
#define IQ4_X86_H

#include "infer_kernels.h"
#include "kquants_internal.h"

#include <immintrin.h>

#include "x86_vec.h"

#define IQ4_CAT2(a, b) a##_##b
#define IQ4_CAT(a, b) IQ4_CAT2(a, b)
#define KERNEL(name) IQ4_CAT(name, ISA_SUFFIX)

#ifndef X86_VNNI
#define X86_VNNI 0
#endif

KQ_INLINE __m256i levels_table(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)infer_kvalues_iq4nl));
}

/* The 32 levels of one 16-byte nibble run: elements 0..15 (low nibbles) in the low
 * half, 16..31 (high nibbles) in the high half. */
KQ_INLINE __m256i levels32(__m256i table, const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m = _mm_set1_epi8(0x0F);
    const __m256i idx = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, m)),
                                                _mm_and_si128(_mm_srli_epi16(q, 4), m), 1);
    return _mm256_shuffle_epi8(table, idx);
}

/* Σ of groups of four w*a (signed bytes) as 8 int32 lanes. */
KQ_INLINE __m256i dot_s8_i32(__m256i w, __m256i a) {
    const __m256i u = _mm256_sign_epi8(w, w), s = _mm256_sign_epi8(a, w);
#if X86_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* acc + Σ w*a * scale, the scale one int16 broadcast (|ls - 32| <= 32). */
KQ_INLINE __m256i dot_s8_scaled(__m256i acc, __m256i w, __m256i a, __m256i scale16) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
#if X86_VNNI
    return _mm256_dpwssd_epi32(acc, p, scale16);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale16));
#endif
}

static float KERNEL(vec_dot_iq4_nl_q8_0)(int64_t n, const void *w, const void *a) {
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    const __m256i table = levels_table();
    const int64_t nb = n / QK4_NL;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const __m256i p0 = dot_s8_i32(levels32(table, x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        const __m256i p1 = dot_s8_i32(levels32(table, x[b + 1].qs), _mm256_loadu_si256((const __m256i *)y[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[b + 1].d) * _cvtsh_ss(y[b + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; b < nb; b++) {
        const __m256i p0 = dot_s8_i32(levels32(table, x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d)), _mm256_cvtepi32_ps(p0), acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

KQ_INLINE int iq4_xs_scale(const block_iq4_xs *b, int j) {
    return (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
}

static float KERNEL(vec_dot_iq4_xs_q8_K)(int64_t n, const void *w, const void *a) {
    const block_iq4_xs *x = w;
    const block_q8_K *y = a;
    const __m256i table = levels_table();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const __m256i q8 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * ib));
            const __m256i sc = _mm256_set1_epi16((short)iq4_xs_scale(&x[i], ib));
            sumi = dot_s8_scaled(sumi, levels32(table, x[i].qs + 16 * ib), q8, sc);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

KQ_INLINE void dequantize_iq4_nl(const block_iq4_nl *x, void *dst, int64_t n, int f16) {
    const __m256i table = levels_table();
    for (int64_t b = 0; b < n / QK4_NL; b++)
        emit32_s8(dst, 32 * b, levels32(table, x[b].qs), _cvtsh_ss(x[b].d), _cvtsh_ss(x[b].d), f16);
}

KQ_INLINE void dequantize_iq4_xs(const block_iq4_xs *x, void *dst, int64_t n, int f16) {
    const __m256i table = levels_table();
    for (int64_t i = 0, at = 0; i < n / QK_K; i++) {
        const float d = _cvtsh_ss(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++, at += 32)
            emit32_s8(dst, at, levels32(table, x[i].qs + 16 * ib), d * iq4_xs_scale(&x[i], ib),
                      d * iq4_xs_scale(&x[i], ib), f16);
    }
}

KQ_DEQUANTIZERS(KERNEL(dequantize_iq4_nl), KERNEL(dequantize_f16_iq4_nl), dequantize_iq4_nl)
KQ_DEQUANTIZERS(KERNEL(dequantize_iq4_xs), KERNEL(dequantize_f16_iq4_xs), dequantize_iq4_xs)

static void KERNEL(fill_iq4_x86)(infer_kernel_table *t) {
    t->vec_dot[INFER_TYPE_IQ4_NL] = KERNEL(vec_dot_iq4_nl_q8_0);
    t->vec_dot[INFER_TYPE_IQ4_XS] = KERNEL(vec_dot_iq4_xs_q8_K);
    t->dequantize[INFER_TYPE_IQ4_NL] = KERNEL(dequantize_iq4_nl);
    t->dequantize[INFER_TYPE_IQ4_XS] = KERNEL(dequantize_iq4_xs);
    t->dequantize_f16[INFER_TYPE_IQ4_NL] = KERNEL(dequantize_f16_iq4_nl);
    t->dequantize_f16[INFER_TYPE_IQ4_XS] = KERNEL(dequantize_f16_iq4_xs);
}

#endif
