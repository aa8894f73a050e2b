/* iquants_avx2.c: the IQ and TQ formats' dot products with Q8_K and dequantizers,
 * AVX2 + FMA + F16C.
 *
 * Grid formats: 32 weights at a time as unsigned grid magnitudes (four 8-byte points,
 * or eight 4-byte IQ3 points, loaded by index) and +1/-1 sign bytes; the signs go onto
 * the activations (sign_epi8), then maddubs (pairs into int16: |grid| <= 62 and
 * |q8| <= 127 keep a pair below 2^15) and madd against the int16 sub-block scales.
 * What sub-blocks share is unpacked once per super-block (grid_side): all 256 sign
 * bits as bytes (the 7-bit sign indices of IQ2_XXS, IQ2_XS and IQ3_XXS get their
 * parity bit by shifts, no ksigns lookups) and the scales as bytes, so a sub-block
 * takes its signs and its scales with one in-lane shuffle each.  Shuffles and vector
 * loads are what these loops run short of on Zen 3: hardware gathers (39 uops there),
 * blends of broadcast loads and indices computed in vector registers all measured
 * slower than scalar index loads into _mm256_set_epi64x.  One int32 vector per
 * super-block, scaled by d*c*d_a in float.  IQ1_S's grid is -1/0/1 plus a shift of
 * +-1/8 per sub-block: g+1 goes unsigned into maddubs, and the shift and the +1 come
 * back through Q8_K's bsums.  TQ2_0 and
 * TQ1_0 quants are q+1 in 0..2 (0..3): maddubs with the activations, minus their sum.
 * TQ1_0's base-3 digits come out of 16-bit multiplies: with the byte b in the high half
 * of a lane, (b << 8) * 3^k keeps (b * 3^k mod 256) << 8, and its high half times 3 is
 * the digit.  Dequantizers produce the scalar file's exact values (see there).
 */
#include "infer_kernels.h"
#include "iquants_grids.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "x86_vec.h"

#if defined(__clang__)
#define IQ_UNROLL _Pragma("clang loop unroll(full)")
#elif defined(__GNUC__)
#define IQ_UNROLL _Pragma("GCC unroll 8")
#else
#define IQ_UNROLL
#endif

/* Sum of the 256 activations of a Q8_K block, from its 16 bsums. */
INFER_ALWAYS_INLINE int q8_K_sum(const block_q8_K *y) {
    const __m256i b = _mm256_loadu_si256((const __m256i *)y->bsums);
    return hsum_epi32(_mm256_madd_epi16(b, _mm256_set1_epi16(1)));
}

/* Bytes of 7 sign bits (bit 7 clear) get the parity of the seven as bit 7 (ksigns:
 * an even count of negatives).  Shifts within 32-bit lanes only carry bits into the
 * upper bits of each byte, which the parity of bits 0..6 never reads. */
INFER_ALWAYS_INLINE __m256i with_parity(__m256i s) {
    __m256i p = _mm256_xor_si256(s, _mm256_srli_epi32(s, 4));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
    return _mm256_or_si256(s, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi8(1)), 7));
}

/* Words holding four 7-bit sign indices (bits 7l..7l+6) as their four sign bytes. */
INFER_ALWAYS_INLINE __m256i signs_from_words(__m256i w) {
    const __m256i s = _mm256_or_si256(
        _mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi32(0x7F)),
                        _mm256_and_si256(_mm256_slli_epi32(w, 1), _mm256_set1_epi32(0x7F00))),
        _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(w, 2), _mm256_set1_epi32(0x7F0000)),
                        _mm256_and_si256(_mm256_slli_epi32(w, 3), _mm256_set1_epi32(0x7F000000))));
    return with_parity(s);
}

/* Nibbles of n bytes as 2n values in order (low nibble first). */
INFER_ALWAYS_INLINE __m128i nibbles(__m128i b) {
    const __m128i m = _mm_set1_epi8(15);
    return _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
}

/* What a grid-format super-block shares among its sub-blocks: the sign bits (bit j of
 * byte 4ib+l for element 32ib+8l+j), those of sub-blocks 0..3 and 4..7 each in both
 * 128-bit lanes; and the scales ls = 2s+1 as bytes in both lanes, one per sub-block
 * (bytes 0..7) or, for IQ2_XS and IQ2_S, one per 16 elements (bytes 0..15). */
typedef struct {
    __m256i signs4[2];
    __m256i ls;
} grid_side;

INFER_ALWAYS_INLINE int two_scales(int type) {
    return type == INFER_TYPE_IQ2_XS || type == INFER_TYPE_IQ2_S;
}

/* Scales 2s+1 of the 4-bit s in the low bytes of b, in both lanes. */
INFER_ALWAYS_INLINE __m256i scale_bytes(__m128i s) {
    return _mm256_broadcastsi128_si256(_mm_add_epi8(_mm_add_epi8(s, s), _mm_set1_epi8(1)));
}

INFER_ALWAYS_INLINE void grid_prepare(int type, const uint8_t *blk, grid_side *g) {
    __m256i signs;
    switch (type) {
    case INFER_TYPE_IQ2_XXS: {
        /* qs: per sub-block 4 index bytes, then a word of sign indices and scale */
        const uint8_t *qs = blk + 2;
        const __m256 v0 = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)qs));
        const __m256 v1 = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(qs + 32)));
        const __m256i w = _mm256_permute4x64_epi64(
            _mm256_castps_si256(_mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0));
        signs = signs_from_words(w);
        g->ls = scale_bytes(_mm_packus_epi16(_mm_packus_epi32(_mm256_castsi256_si128(_mm256_srli_epi32(w, 28)),
                                                              _mm256_extracti128_si256(_mm256_srli_epi32(w, 28), 1)),
                                             _mm_setzero_si128()));
        break;
    }
    case INFER_TYPE_IQ3_XXS: {
        const __m256i w = _mm256_loadu_si256((const __m256i *)(blk + 2 + QK_K / 4));
        signs = signs_from_words(w);
        g->ls = scale_bytes(_mm_packus_epi16(_mm_packus_epi32(_mm256_castsi256_si128(_mm256_srli_epi32(w, 28)),
                                                              _mm256_extracti128_si256(_mm256_srli_epi32(w, 28), 1)),
                                             _mm_setzero_si128()));
        break;
    }
    case INFER_TYPE_IQ2_XS: {
        const block_iq2_xs *x = (const block_iq2_xs *)blk;
        const __m256i v0 = _mm256_loadu_si256((const __m256i *)x->qs);
        const __m256i v1 = _mm256_loadu_si256((const __m256i *)(x->qs + 16));
        const __m256i s = _mm256_packus_epi16(_mm256_srli_epi16(v0, 9), _mm256_srli_epi16(v1, 9));
        signs = with_parity(_mm256_permute4x64_epi64(s, _MM_SHUFFLE(3, 1, 2, 0)));
        g->ls = scale_bytes(nibbles(_mm_loadl_epi64((const __m128i *)x->scales)));
        break;
    }
    case INFER_TYPE_IQ2_S: {
        const block_iq2_s *x = (const block_iq2_s *)blk;
        signs = _mm256_loadu_si256((const __m256i *)(x->qs + QK_K / 8));
        g->ls = scale_bytes(nibbles(_mm_loadl_epi64((const __m128i *)x->scales)));
        break;
    }
    default: {   /* INFER_TYPE_IQ3_S */
        const block_iq3_s *x = (const block_iq3_s *)blk;
        signs = _mm256_loadu_si256((const __m256i *)x->signs);
        uint32_t sc;
        memcpy(&sc, x->scales, 4);
        g->ls = scale_bytes(nibbles(_mm_cvtsi32_si128((int)sc)));
        break;
    }
    }
    g->signs4[0] = _mm256_permute2x128_si256(signs, signs, 0x00);
    g->signs4[1] = _mm256_permute2x128_si256(signs, signs, 0x11);
}

INFER_ALWAYS_INLINE __m256i points8(const uint64_t *grid, int i0, int i1, int i2, int i3) {
    return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1],
                             (long long)grid[i0]);
}

INFER_ALWAYS_INLINE __m256i points4(const uint32_t *grid, const int i[8]) {
    return _mm256_setr_epi32((int)grid[i[0]], (int)grid[i[1]], (int)grid[i[2]], (int)grid[i[3]],
                             (int)grid[i[4]], (int)grid[i[5]], (int)grid[i[6]], (int)grid[i[7]]);
}

/* The 32 unsigned magnitudes of sub-block ib (indices read by scalar loads: moving
 * them out of vector registers costs more than it saves). */
INFER_ALWAYS_INLINE __m256i grid_points(int type, const uint8_t *blk, int ib) {
    switch (type) {
    case INFER_TYPE_IQ2_XXS: {
        const uint8_t *q = blk + 2 + 8 * ib;
        return points8(infer_iq2xxs_grid, q[0], q[1], q[2], q[3]);
    }
    case INFER_TYPE_IQ2_XS: {
        const block_iq2_xs *x = (const block_iq2_xs *)blk;
        const uint16_t *v = x->qs + 4 * ib;
        return points8(infer_iq2xs_grid, v[0] & 511, v[1] & 511, v[2] & 511, v[3] & 511);
    }
    case INFER_TYPE_IQ2_S: {
        const block_iq2_s *x = (const block_iq2_s *)blk;
        const uint8_t *q = x->qs + 4 * ib;
        const int h = x->qh[ib];
        return points8(infer_iq2s_grid, q[0] | ((h << 8) & 0x300), q[1] | ((h << 6) & 0x300),
                        q[2] | ((h << 4) & 0x300), q[3] | ((h << 2) & 0x300));
    }
    case INFER_TYPE_IQ3_XXS: {
        const uint8_t *q = blk + 2 + 8 * ib;
        const int i[8] = {q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]};
        return points4(infer_iq3xxs_grid, i);
    }
    default: {   /* INFER_TYPE_IQ3_S */
        const block_iq3_s *x = (const block_iq3_s *)blk;
        const uint8_t *q = x->qs + 8 * ib;
        const int h = x->qh[ib];
        int i[8];
        for (int k = 0; k < 8; k++) i[k] = q[k] | (((h >> k) & 1) << 8);
        return points4(infer_iq3s_grid, i);
    }
    }
}

/* Sub-block ib's signs as +1/-1 bytes.  s4 holds the sign bytes of sub-blocks
 * 4(ib/4)..4(ib/4)+3 in both 128-bit lanes, so one in-lane shuffle spreads them. */
INFER_ALWAYS_INLINE __m256i grid_signs(__m256i s4, int ib) {
    const char k = (char)(4 * (ib & 3));
    const __m256i spread = _mm256_setr_epi8(k, k, k, k, k, k, k, k, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1,
                                            k + 2, k + 2, k + 2, k + 2, k + 2, k + 2, k + 2, k + 2,
                                            k + 3, k + 3, k + 3, k + 3, k + 3, k + 3, k + 3, k + 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i b = _mm256_shuffle_epi8(s4, spread);
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit), _mm256_set1_epi8(1));
}

/* Sub-block ib's scales as int16: elements 0..15 in the low half, 16..31 the high. */
INFER_ALWAYS_INLINE __m256i grid_scales(int type, __m256i ls, int ib) {
    const char z = (char)0x80;   /* shuffle index: a zero byte */
    const char lo = (char)(two_scales(type) ? 2 * ib : ib), hi = (char)(two_scales(type) ? 2 * ib + 1 : ib);
    return _mm256_shuffle_epi8(ls, _mm256_setr_epi8(lo, z, lo, z, lo, z, lo, z, lo, z, lo, z, lo, z, lo, z,
                                                       hi, z, hi, z, hi, z, hi, z, hi, z, hi, z, hi, z, hi, z));
}

/* Sub-block ib (32 elements) of a grid-format block: magnitudes, +1/-1 signs and the
 * scales of its two halves as int16.  `type` is a constant wherever this is inlined. */
INFER_ALWAYS_INLINE void grid32(int type, const uint8_t *blk, const grid_side *g, int ib, __m256i *mag,
                                __m256i *sign, __m256i *scales) {
    *mag = grid_points(type, blk, ib);
    *sign = grid_signs(g->signs4[ib >> 2], ib);
    *scales = grid_scales(type, g->ls, ib);
}

/* d * c: element = d * c * ls * q (c as in iquants_scalar.c). */
INFER_ALWAYS_INLINE float grid_factor(int type, const uint8_t *blk) {
    const float d = _cvtsh_ss(*(const infer_half *)blk);   /* d first in every IQ block */
    switch (type) {
    case INFER_TYPE_IQ3_XXS: return d * 0.25f;
    case INFER_TYPE_IQ3_S: return d;
    default: return d * 0.125f;
    }
}

INFER_ALWAYS_INLINE float vec_dot_grid(int type, size_t block_bytes, int64_t n, const void *w,
                                       const void *a) {
    const uint8_t *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, x += block_bytes) {
        const int8_t *q8 = y[i].qs;
        grid_side g;
        grid_prepare(type, x, &g);
        __m256i sumi = _mm256_setzero_si256();
        IQ_UNROLL
        for (int ib = 0; ib < QK_K / 32; ib++, q8 += 32) {
            __m256i mag, sign, scales;
            grid32(type, x, &g, ib, &mag, &sign, &scales);
            const __m256i a8 = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)q8), sign);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(mag, a8), scales));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(grid_factor(type, x) * y[i].d),
                              _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}


INFER_ALWAYS_INLINE void dequantize_grid(int type, size_t block_bytes, const void *src, void *dst,
                                         int64_t n, int f16) {
    const uint8_t *x = src;
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++, x += block_bytes) {
        const float dc = grid_factor(type, x);
        grid_side g;
        grid_prepare(type, x, &g);
        for (int ib = 0; ib < QK_K / 32; ib++, at += 32) {
            __m256i mag, sign, scales;
            grid32(type, x, &g, ib, &mag, &sign, &scales);
            const int ls1 = _mm256_extract_epi16(scales, 0), ls2 = _mm256_extract_epi16(scales, 8);
            emit32_s8(dst, at, _mm256_sign_epi8(mag, sign), dc * ls1, dc * ls2, f16);
        }
    }
}

/* ---- IQ1_S ------------------------------------------------------------------ */

/* Sub-block ib's -1/0/1 grid values. */
INFER_ALWAYS_INLINE __m256i iq1_s_grid32(const block_iq1_s *x, int ib) {
    const int h = x->qh[ib];
    const uint8_t *q = x->qs + 4 * ib;
    return points8(infer_iq1s_grid, q[0] | ((h << 8) & 0x700), q[1] | ((h << 5) & 0x700),
                   q[2] | ((h << 2) & 0x700), q[3] | ((h >> 1) & 0x700));
}

/* Σ ls·Σ (8g + shift)·a = 8·Σ ls·Σ (g+1)·a + Σ ls·(shift - 8)·(sum of the sub-block's
 * a): g+1 is unsigned, so it goes straight into maddubs; the sums come from bsums.
 * Exact in int32 (|8 Σ ls Σ (g+1) a| <= 8 * 8 * 15 * 64 * 127). */
INFER_ALWAYS_INLINE float vec_dot_iq1_s(int64_t n, const void *w, const void *a) {
    const block_iq1_s *x = w;
    const block_q8_K *y = a;
    const __m256i one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = y[i].qs;
        const __m128i qh = _mm_loadu_si128((const __m128i *)x[i].qh);
        const __m128i ls = _mm_add_epi16(_mm_and_si128(_mm_srli_epi16(qh, 11), _mm_set1_epi16(14)),
                                         _mm_set1_epi16(1));
        const __m256i ls8 = _mm256_broadcastsi128_si256(_mm_packus_epi16(ls, _mm_setzero_si128()));
        __m256i sumi = _mm256_setzero_si256();
        IQ_UNROLL
        for (int ib = 0; ib < QK_K / 32; ib++, q8 += 32) {
            const __m256i g1 = _mm256_add_epi8(iq1_s_grid32(&x[i], ib), one);
            const __m256i dot = _mm256_maddubs_epi16(g1, _mm256_loadu_si256((const __m256i *)q8));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(dot, grid_scales(INFER_TYPE_IQ1_S, ls8, ib)));
        }
        /* shift - 8 is -7 or -9 (qh bit 15 set: shift -1) */
        const __m128i k = _mm_sub_epi16(_mm_set1_epi16(-7), _mm_and_si128(_mm_srai_epi16(qh, 15), _mm_set1_epi16(2)));
        const __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[i].bsums),
                                             _mm_loadu_si128((const __m128i *)y[i].bsums + 1));
        const __m128i shifted = _mm_madd_epi16(_mm_mullo_epi16(ls, k), pairs);
        const __m256i total = _mm256_add_epi32(_mm256_slli_epi32(sumi, 3),
                                               _mm256_inserti128_si256(_mm256_setzero_si256(), shifted, 0));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d) * 0.125f * y[i].d), _mm256_cvtepi32_ps(total), acc);
    }
    return hsum_ps(acc);
}

INFER_ALWAYS_INLINE void dequantize_iq1_s(const block_iq1_s *x, void *dst, int64_t n, int f16) {
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float dc = _cvtsh_ss(x[i].d) * 0.125f;
        for (int ib = 0; ib < QK_K / 32; ib++, at += 32) {
            const int h = x[i].qh[ib], ls = 2 * ((h >> 12) & 7) + 1, shift = h & 0x8000 ? -1 : 1;
            const __m256i g = iq1_s_grid32(&x[i], ib);
            /* 8g per byte: a 16-bit shift, minus the bits it carried across bytes */
            const __m256i g8 = _mm256_and_si256(_mm256_slli_epi16(g, 3), _mm256_set1_epi8((char)0xF8));
            emit32_s8(dst, at, _mm256_add_epi8(g8, _mm256_set1_epi8((char)shift)), dc * ls, dc * ls, f16);
        }
    }
}

/* ---- TQ2_0, TQ1_0 ------------------------------------------------------------- */

/* The 32 quants (0..3) of run k of half h: bits 2k..2k+1 of qs[32h..32h+31]. */
INFER_ALWAYS_INLINE __m256i tq2_0_run(const block_tq2_0 *x, int h, int k) {
    const __m256i b = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
    return _mm256_and_si256(_mm256_srli_epi16(b, 2 * k), _mm256_set1_epi8(3));
}

/* Digit k of each byte of b (in its lane position), for 16-bit lanes holding bytes
 * lo | hi << 8 and the per-lane multipliers p = 3^k. */
INFER_ALWAYS_INLINE __m256i trits(__m256i b, __m256i p) {
    const __m256i three = _mm256_set1_epi16(3);
    const __m256i lo = _mm256_mulhi_epu16(_mm256_mullo_epi16(_mm256_slli_epi16(b, 8), p), three);
    const __m256i hi = _mm256_mulhi_epu16(
        _mm256_mullo_epi16(_mm256_and_si256(b, _mm256_set1_epi16((short)0xFF00)), p), three);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 8));
}

/* The 256 quants + 1 (0..2) of a TQ1_0 block, as 8 runs of 32 in element order. */
INFER_ALWAYS_INLINE void tq1_0_unpack(const block_tq1_0 *x, __m256i q[8]) {
    static const short pow3[5] = {1, 3, 9, 27, 81};
    const __m256i b0 = _mm256_loadu_si256((const __m256i *)x->qs);
    for (int k = 0; k < 5; k++) q[k] = trits(b0, _mm256_set1_epi16(pow3[k]));
    /* qs[32..47] -> elements 160 + 16k + m: digits k and k+1 in the two 128-bit halves */
    const __m128i b1s = _mm_loadu_si128((const __m128i *)(x->qs + 32));
    const __m256i b1 = _mm256_broadcastsi128_si256(b1s);
    q[5] = trits(b1, _mm256_setr_m128i(_mm_set1_epi16(1), _mm_set1_epi16(3)));
    q[6] = trits(b1, _mm256_setr_m128i(_mm_set1_epi16(9), _mm_set1_epi16(27)));
    /* digit 4 of qs[32..47] (elements 224..239), then qh: element 240 + 4k + j is digit
     * k of qh[j] (byte 4k+j of the half holds qh[j]; lanes 2k, 2k+1 multiply by 3^k) */
    uint32_t qh;
    memcpy(&qh, x->qh, 4);
    const __m256i b2 = _mm256_setr_m128i(b1s, _mm_set1_epi32((int)qh));
    q[7] = trits(b2, _mm256_setr_epi16(81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27));
}

/* Σ (q - 1)·a = Σ q·a - Σ a (TQ2_0's q may be 3: value 2, as ggml computes). */
INFER_ALWAYS_INLINE float vec_dot_tq2_0(int64_t n, const void *w, const void *a) {
    const block_tq2_0 *x = w;
    const block_q8_K *y = a;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* int16 lanes: 8 runs of pairs of 3 * 127 stay below 2^15 */
        __m256i sum16 = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++) {
                const __m256i a8 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * k));
                sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(tq2_0_run(&x[i], h, k), a8));
            }
        const __m256i sumi = _mm256_sub_epi32(_mm256_madd_epi16(sum16, ones),
                                              _mm256_setr_epi32(q8_K_sum(&y[i]), 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

INFER_ALWAYS_INLINE float vec_dot_tq1_0(int64_t n, const void *w, const void *a) {
    const block_tq1_0 *x = w;
    const block_q8_K *y = a;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i q[8];
        tq1_0_unpack(&x[i], q);
        __m256i sum16 = _mm256_setzero_si256();   /* 8 runs of pairs of 2 * 127 */
        for (int r = 0; r < 8; r++) {
            const __m256i a8 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * r));
            sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(q[r], a8));
        }
        const __m256i sumi = _mm256_sub_epi32(_mm256_madd_epi16(sum16, ones),
                                              _mm256_setr_epi32(q8_K_sum(&y[i]), 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

INFER_ALWAYS_INLINE void dequantize_tq(int type, const void *src, void *dst, int64_t n, int f16) {
    const __m256i one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i q[8];
        float d;
        if (type == INFER_TYPE_TQ1_0) {
            const block_tq1_0 *x = (const block_tq1_0 *)src + i;
            tq1_0_unpack(x, q);
            d = _cvtsh_ss(x->d);
        } else {
            const block_tq2_0 *x = (const block_tq2_0 *)src + i;
            for (int r = 0; r < 8; r++) q[r] = tq2_0_run(x, r / 4, r % 4);
            d = _cvtsh_ss(x->d);
        }
        for (int r = 0; r < 8; r++) emit32_s8(dst, i * QK_K + 32 * r, _mm256_sub_epi8(q[r], one), d, d, f16);
    }
}

/* ---- the table ---------------------------------------------------------------- */

/* Every format's entries through one switch on the constant type. */
INFER_ALWAYS_INLINE float vec_dot_iq(int type, size_t block_bytes, int64_t n, const void *w, const void *a) {
    switch (type) {
    case INFER_TYPE_IQ1_S: return vec_dot_iq1_s(n, w, a);
    case INFER_TYPE_TQ1_0: return vec_dot_tq1_0(n, w, a);
    case INFER_TYPE_TQ2_0: return vec_dot_tq2_0(n, w, a);
    default: return vec_dot_grid(type, block_bytes, n, w, a);
    }
}

INFER_ALWAYS_INLINE void dequantize_iq(int type, size_t block_bytes, const void *src, void *dst, int64_t n,
                                       int f16) {
    switch (type) {
    case INFER_TYPE_IQ1_S: dequantize_iq1_s(src, dst, n, f16); break;
    case INFER_TYPE_TQ1_0: case INFER_TYPE_TQ2_0: dequantize_tq(type, src, dst, n, f16); break;
    default: dequantize_grid(type, block_bytes, src, dst, n, f16);
    }
}

#define IQ_FORMAT(TYPE, name, block)                                                          \
    static float infer_vec_dot_##name##_q8_K_avx2(int64_t n, const void *w, const void *a) {   \
        return vec_dot_iq(TYPE, sizeof(block), n, w, a);                                      \
    }                                                                                         \
    static void infer_dequantize_##name##_avx2(const void *src, float *y, int64_t n) {        \
        dequantize_iq(TYPE, sizeof(block), src, y, n, 0);                                     \
    }                                                                                         \
    static void infer_dequantize_f16_##name##_avx2(const void *src, infer_half *y, int64_t n) { \
        dequantize_iq(TYPE, sizeof(block), src, y, n, 1);                                     \
    }
INFER_IQUANTS_FORMATS(IQ_FORMAT)
#undef IQ_FORMAT

void infer_fill_iquants_avx2(infer_kernel_table *t) {
#define FILL(TYPE, name, block) INFER_IQUANTS_FILL(t, avx2, TYPE, name);
    INFER_IQUANTS_FORMATS(FILL)
#undef FILL
}
#endif
