/* iquants_avx2.c: the IQ and TQ formats' dot products with Q8_K and dequantizers,
 * AVX2 + FMA + F16C.
 *
 * Grid formats: 32 weights at a time as unsigned grid magnitudes (four 8-byte points,
 * or eight 4-byte IQ3 points, loaded by index) and +1/-1 sign bytes; the signs go onto
 * the activations (sign_epi8), then maddubs (pairs into int16: |grid| <= 62 and
 * |q8| <= 127 keep a pair below 2^15) and madd against the int16 sub-block scales.  One
 * int32 vector per super-block, scaled by d*c*d_a in float.  IQ1_S's grid is -1/0/1
 * plus a shift of +-1/8 per sub-block: the shift comes from Q8_K's bsums.  TQ2_0 and
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

INFER_ALWAYS_INLINE float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INFER_ALWAYS_INLINE int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* Sum of the 256 activations of a Q8_K block, from its 16 bsums. */
INFER_ALWAYS_INLINE int q8_K_sum(const block_q8_K *y) {
    const __m256i b = _mm256_loadu_si256((const __m256i *)y->bsums);
    return hsum_epi32(_mm256_madd_epi16(b, _mm256_set1_epi16(1)));
}

/* Stored sign bits (bit j of byte k: element 8k+j negative) as +1/-1 bytes. */
INFER_ALWAYS_INLINE __m256i signs_from_bits(uint32_t bits) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread), bit);
    return _mm256_or_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(1));
}

/* Four 7-bit sign indices (bits 0..27 of w) as +1/-1 bytes. */
INFER_ALWAYS_INLINE __m256i signs_from_indices(uint32_t w) {
    const uint64_t *k = infer_ksigns64_iq2xs;
    return _mm256_set_epi64x((long long)k[(w >> 21) & 127], (long long)k[(w >> 14) & 127],
                             (long long)k[(w >> 7) & 127], (long long)k[w & 127]);
}

INFER_ALWAYS_INLINE __m256i points8(const uint64_t *grid, int i0, int i1, int i2, int i3) {
    return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1],
                             (long long)grid[i0]);
}

INFER_ALWAYS_INLINE __m256i points4(const uint32_t *grid, const int i[8]) {
    return _mm256_setr_epi32((int)grid[i[0]], (int)grid[i[1]], (int)grid[i[2]], (int)grid[i[3]],
                             (int)grid[i[4]], (int)grid[i[5]], (int)grid[i[6]], (int)grid[i[7]]);
}

/* Sub-block ib (32 elements) of a grid-format block: unsigned magnitudes, +1/-1 signs
 * and the scales of its two halves.  `type` is a constant wherever this is inlined. */
INFER_ALWAYS_INLINE void grid32(int type, const uint8_t *blk, int ib, __m256i *mag, __m256i *sign,
                                int *ls1, int *ls2) {
    switch (type) {
    case INFER_TYPE_IQ2_XXS: {
        const block_iq2_xxs *x = (const block_iq2_xxs *)blk;
        uint8_t idx[4];
        uint32_t w;
        memcpy(idx, x->qs + 4 * ib, 4);
        memcpy(&w, x->qs + 4 * ib + 2, 4);
        *mag = points8(infer_iq2xxs_grid, idx[0], idx[1], idx[2], idx[3]);
        *sign = signs_from_indices(w);
        *ls1 = *ls2 = (int)(2 * (w >> 28) + 1);
        break;
    }
    case INFER_TYPE_IQ2_XS: {
        const block_iq2_xs *x = (const block_iq2_xs *)blk;
        uint16_t v[4];
        memcpy(v, x->qs + 4 * ib, 8);
        *mag = points8(infer_iq2xs_grid, v[0] & 511, v[1] & 511, v[2] & 511, v[3] & 511);
        const uint64_t *k = infer_ksigns64_iq2xs;
        *sign = _mm256_set_epi64x((long long)k[v[3] >> 9], (long long)k[v[2] >> 9],
                                  (long long)k[v[1] >> 9], (long long)k[v[0] >> 9]);
        *ls1 = 2 * (x->scales[ib] & 15) + 1;
        *ls2 = 2 * (x->scales[ib] >> 4) + 1;
        break;
    }
    case INFER_TYPE_IQ2_S: {
        const block_iq2_s *x = (const block_iq2_s *)blk;
        const uint8_t *q = x->qs + 4 * ib;
        const int h = x->qh[ib];
        *mag = points8(infer_iq2s_grid, q[0] | ((h << 8) & 0x300), q[1] | ((h << 6) & 0x300),
                       q[2] | ((h << 4) & 0x300), q[3] | ((h << 2) & 0x300));
        uint32_t bits;
        memcpy(&bits, x->qs + QK_K / 8 + 4 * ib, 4);
        *sign = signs_from_bits(bits);
        *ls1 = 2 * (x->scales[ib] & 15) + 1;
        *ls2 = 2 * (x->scales[ib] >> 4) + 1;
        break;
    }
    case INFER_TYPE_IQ3_XXS: {
        const block_iq3_xxs *x = (const block_iq3_xxs *)blk;
        const uint8_t *q = x->qs + 8 * ib;
        const int i[8] = {q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]};
        uint32_t w;
        memcpy(&w, x->qs + QK_K / 4 + 4 * ib, 4);
        *mag = points4(infer_iq3xxs_grid, i);
        *sign = signs_from_indices(w);
        *ls1 = *ls2 = (int)(2 * (w >> 28) + 1);
        break;
    }
    default: {   /* INFER_TYPE_IQ3_S */
        const block_iq3_s *x = (const block_iq3_s *)blk;
        const uint8_t *q = x->qs + 8 * ib;
        const int h = x->qh[ib];
        int i[8];
        for (int k = 0; k < 8; k++) i[k] = q[k] | (((h >> k) & 1) << 8);
        *mag = points4(infer_iq3s_grid, i);
        uint32_t bits;
        memcpy(&bits, x->signs + 4 * ib, 4);
        *sign = signs_from_bits(bits);
        *ls1 = *ls2 = 2 * ((x->scales[ib / 2] >> (4 * (ib & 1))) & 15) + 1;
        break;
    }
    }
}

INFER_ALWAYS_INLINE __m256i scales16(int ls1, int ls2) {
    return _mm256_setr_m128i(_mm_set1_epi16((short)ls1), _mm_set1_epi16((short)ls2));
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
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < QK_K / 32; ib++, q8 += 32) {
            __m256i mag, sign;
            int ls1, ls2;
            grid32(type, x, ib, &mag, &sign, &ls1, &ls2);
            const __m256i a8 = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)q8), sign);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(mag, a8),
                                                            scales16(ls1, ls2)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(grid_factor(type, x) * y[i].d),
                              _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* 32 signed quants q out as s1 * q (elements 0..15) and s2 * q (16..31), f32 or f16. */
INFER_ALWAYS_INLINE void emit32(void *dst, int64_t at, __m256i q, float s1, float s2, int f16) {
    const __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {q0, _mm_srli_si128(q0, 8), q1, _mm_srli_si128(q1, 8)};
    for (int k = 0; k < 4; k++) {
        const __m256 v = _mm256_mul_ps(_mm256_set1_ps(k < 2 ? s1 : s2),
                                       _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])));
        if (f16)
            _mm_storeu_si128((__m128i *)((infer_half *)dst + at + 8 * k),
                             _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        else
            _mm256_storeu_ps((float *)dst + at + 8 * k, v);
    }
}

INFER_ALWAYS_INLINE void dequantize_grid(int type, size_t block_bytes, const void *src, void *dst,
                                         int64_t n, int f16) {
    const uint8_t *x = src;
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++, x += block_bytes) {
        const float dc = grid_factor(type, x);
        for (int ib = 0; ib < QK_K / 32; ib++, at += 32) {
            __m256i mag, sign;
            int ls1, ls2;
            grid32(type, x, ib, &mag, &sign, &ls1, &ls2);
            emit32(dst, at, _mm256_sign_epi8(mag, sign), dc * ls1, dc * ls2, f16);
        }
    }
}

/* ---- IQ1_S ------------------------------------------------------------------ */

/* Sub-block ib: the -1/0/1 grid values, the scale and the sign of the 1/8 shift. */
INFER_ALWAYS_INLINE __m256i iq1_s_grid32(const block_iq1_s *x, int ib, int *ls, int *shift) {
    const int h = x->qh[ib];
    const uint8_t *q = x->qs + 4 * ib;
    *ls = 2 * ((h >> 12) & 7) + 1;
    *shift = h & 0x8000 ? -1 : 1;
    return points8(infer_iq1s_grid, q[0] | ((h << 8) & 0x700), q[1] | ((h << 5) & 0x700),
                   q[2] | ((h << 2) & 0x700), q[3] | ((h >> 1) & 0x700));
}

/* Σ ls·Σ (8g + shift)·a = 8·Σ ls·Σ g·a + Σ ls·shift·(sum of the sub-block's a). */
static float infer_vec_dot_iq1_s_q8_K_avx2(int64_t n, const void *w, const void *a) {
    const block_iq1_s *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_shift = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < QK_K / 32; ib++, q8 += 32) {
            int ls, shift;
            const __m256i g = iq1_s_grid32(&x[i], ib, &ls, &shift);
            const __m256i a8 = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)q8), g);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(g), a8),
                                                            _mm256_set1_epi16((short)ls)));
        }
        /* the shifts of all 8 sub-blocks at once: ls * (+1 or -1) against the sums of
         * their 32 activations (bsums in pairs, |sum| <= 32 * 127) */
        const __m128i qh = _mm_loadu_si128((const __m128i *)x[i].qh);
        const __m128i ls = _mm_add_epi16(_mm_and_si128(_mm_srli_epi16(qh, 11), _mm_set1_epi16(14)),
                                         _mm_set1_epi16(1));
        const __m128i sign = _mm_or_si128(_mm_srai_epi16(qh, 15), _mm_set1_epi16(1));
        const __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[i].bsums),
                                             _mm_loadu_si128((const __m128i *)y[i].bsums + 1));
        const __m128i shifted = _mm_madd_epi16(_mm_sign_epi16(ls, sign), pairs);
        const float dc = _cvtsh_ss(x[i].d) * 0.125f * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(8 * dc), _mm256_cvtepi32_ps(sumi), acc);
        acc_shift = _mm_fmadd_ps(_mm_set1_ps(dc), _mm_cvtepi32_ps(shifted), acc_shift);
    }
    __m128 s = _mm_add_ps(acc_shift, _mm_movehl_ps(acc_shift, acc_shift));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return hsum_ps(acc) + _mm_cvtss_f32(s);
}

INFER_ALWAYS_INLINE void dequantize_iq1_s(const block_iq1_s *x, void *dst, int64_t n, int f16) {
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float dc = _cvtsh_ss(x[i].d) * 0.125f;
        for (int ib = 0; ib < QK_K / 32; ib++, at += 32) {
            int ls, shift;
            const __m256i g = iq1_s_grid32(&x[i], ib, &ls, &shift);
            /* 8g per byte: a 16-bit shift, minus the bits it carried across bytes */
            const __m256i g8 = _mm256_and_si256(_mm256_slli_epi16(g, 3), _mm256_set1_epi8((char)0xF8));
            emit32(dst, at, _mm256_add_epi8(g8, _mm256_set1_epi8((char)shift)), dc * ls, dc * ls, f16);
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
static float infer_vec_dot_tq2_0_q8_K_avx2(int64_t n, const void *w, const void *a) {
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

static float infer_vec_dot_tq1_0_q8_K_avx2(int64_t n, const void *w, const void *a) {
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
        for (int r = 0; r < 8; r++) emit32(dst, i * QK_K + 32 * r, _mm256_sub_epi8(q[r], one), d, d, f16);
    }
}

/* ---- the table ---------------------------------------------------------------- */

#define GRID_FORMAT(name, TYPE, block)                                                        \
    static float infer_vec_dot_##name##_q8_K_avx2(int64_t n, const void *w, const void *a) {   \
        return vec_dot_grid(TYPE, sizeof(block), n, w, a);                                    \
    }                                                                                         \
    static void infer_dequantize_##name##_avx2(const void *src, float *y, int64_t n) {        \
        dequantize_grid(TYPE, sizeof(block), src, y, n, 0);                                   \
    }                                                                                         \
    static void infer_dequantize_f16_##name##_avx2(const void *src, infer_half *y, int64_t n) { \
        dequantize_grid(TYPE, sizeof(block), src, y, n, 1);                                   \
    }
GRID_FORMAT(iq2_xxs, INFER_TYPE_IQ2_XXS, block_iq2_xxs)
GRID_FORMAT(iq2_xs, INFER_TYPE_IQ2_XS, block_iq2_xs)
GRID_FORMAT(iq2_s, INFER_TYPE_IQ2_S, block_iq2_s)
GRID_FORMAT(iq3_xxs, INFER_TYPE_IQ3_XXS, block_iq3_xxs)
GRID_FORMAT(iq3_s, INFER_TYPE_IQ3_S, block_iq3_s)
#undef GRID_FORMAT

static void infer_dequantize_iq1_s_avx2(const void *src, float *y, int64_t n) {
    dequantize_iq1_s(src, y, n, 0);
}
static void infer_dequantize_f16_iq1_s_avx2(const void *src, infer_half *y, int64_t n) {
    dequantize_iq1_s(src, y, n, 1);
}
static void infer_dequantize_tq1_0_avx2(const void *src, float *y, int64_t n) {
    dequantize_tq(INFER_TYPE_TQ1_0, src, y, n, 0);
}
static void infer_dequantize_f16_tq1_0_avx2(const void *src, infer_half *y, int64_t n) {
    dequantize_tq(INFER_TYPE_TQ1_0, src, y, n, 1);
}
static void infer_dequantize_tq2_0_avx2(const void *src, float *y, int64_t n) {
    dequantize_tq(INFER_TYPE_TQ2_0, src, y, n, 0);
}
static void infer_dequantize_f16_tq2_0_avx2(const void *src, infer_half *y, int64_t n) {
    dequantize_tq(INFER_TYPE_TQ2_0, src, y, n, 1);
}

void infer_fill_iquants_avx2(infer_kernel_table *t) {
#define FILL(TYPE, name)                                              \
    t->dequantize[TYPE] = infer_dequantize_##name##_avx2;             \
    t->dequantize_f16[TYPE] = infer_dequantize_f16_##name##_avx2;     \
    t->vec_dot[TYPE] = infer_vec_dot_##name##_q8_K_avx2;
    FILL(INFER_TYPE_IQ2_XXS, iq2_xxs)
    FILL(INFER_TYPE_IQ2_XS, iq2_xs)
    FILL(INFER_TYPE_IQ2_S, iq2_s)
    FILL(INFER_TYPE_IQ3_XXS, iq3_xxs)
    FILL(INFER_TYPE_IQ3_S, iq3_s)
    FILL(INFER_TYPE_IQ1_S, iq1_s)
    FILL(INFER_TYPE_TQ1_0, tq1_0)
    FILL(INFER_TYPE_TQ2_0, tq2_0)
#undef FILL
}
#endif
