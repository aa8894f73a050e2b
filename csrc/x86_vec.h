/* x86_vec.h: the small vector helpers the K-quant, IQ4 and IQ x86 kernel files share
 * (kquants_avx2.c, kquants235_x86.h, iq4_x86.h, iquants_avx2.c): horizontal sums, the
 * int16 scale-broadcast shuffle masks, and the stores of dequantized values as f32 or
 * f16.
 * Everything is static and inlined; include after immintrin.h in an AVX2 (or higher)
 * translation unit. */
#ifndef INFER_X86_VEC_H
#define INFER_X86_VEC_H

#include <immintrin.h>

#include "infer_kernels.h"

INFER_ALWAYS_INLINE float hsum_ps128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INFER_ALWAYS_INLINE float hsum_ps(__m256 v) {
    return hsum_ps128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

INFER_ALWAYS_INLINE int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* _mm256_shuffle_epi8 masks over int16 scales held alike in both 128-bit halves:
 * pair_mask(k) puts lane 2k in the low half and lane 2k+1 in the high half (two
 * 16-element sub-blocks per 32-element run), lane_mask(k) lane k in both. */
INFER_ALWAYS_INLINE __m256i pair_mask(int k) {
    const char a = (char)(4 * k), b = (char)(4 * k + 2);
    return _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1,
                            a, a + 1, a, a + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1,
                            b, b + 1, b, b + 1, b, b + 1, b, b + 1);
}

INFER_ALWAYS_INLINE __m256i lane_mask(int k) {
    const char a = (char)(2 * k);
    return _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1,
                            a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1,
                            a, a + 1, a, a + 1, a, a + 1, a, a + 1);
}

#if defined(__AVX512F__)
/* The totals of four rows' 16 int32 lanes (a, b, c, d) as lanes 0..3: exact integer add
 * trees, for the four-row kernels that scale each row's super-block sum once. */
INFER_ALWAYS_INLINE __m128i hsum4_epi32_512(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    const __m512i abcd = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    const __m256i half = _mm256_add_epi32(_mm512_castsi512_si256(abcd), _mm512_extracti64x4_epi64(abcd, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
}
#endif

/* Eight floats out at element `at`, as f32 or f16 (round to nearest even, as
 * infer_fp32_to_fp16). */
INFER_ALWAYS_INLINE void store8(void *dst, int64_t at, __m256 v, int f16) {
    if (f16)
        _mm_storeu_si128((__m128i *)((infer_half *)dst + at),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    else
        _mm256_storeu_ps((float *)dst + at, v);
}

/* 32 signed bytes q out as s1 * q (elements 0..15) and s2 * q (16..31). */
INFER_ALWAYS_INLINE void emit32_s8(void *dst, int64_t at, __m256i q, float s1, float s2, int f16) {
    const __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {q0, _mm_srli_si128(q0, 8), q1, _mm_srli_si128(q1, 8)};
    for (int k = 0; k < 4; k++)
        store8(dst, at + 8 * k,
               _mm256_mul_ps(_mm256_set1_ps(k < 2 ? s1 : s2), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k]))),
               f16);
}

#endif
