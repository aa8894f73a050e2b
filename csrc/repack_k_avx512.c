/* repack_k_avx512.c: the Q2_K_R16, Q3_K_R16, Q4_K_R16, Q5_K_R16, Q6_K_R16 and IQ4_XS_R16 kernels with AVX-512 VNNI
 * (layouts: repack_k.h).  Q4_K_R16 first; Q5_K_R16 is its kernel with the fifth bits.
 *
 * A vector holds 4 bytes of each of a group's 16 rows.  Per super-block, the 6-bit
 * scales and mins of the 16 rows are unpacked with the word-wise bit moves of
 * infer_q4_K_unpack_scales.  Per pair of sub-blocks (32 bytes of qs a row: low nibbles
 * sub-block 2p, high 2p + 1), 16 vpdpbusd of the rows' nibbles against 4 activation
 * bytes broadcast to every lane give each row's exact sums of q x in its lanes, which
 * vpmulld scales by the rows' sc_j into the super-block's S.  The mins term M is 4
 * vpdpwssd of the rows' (m_2i, m_2i+1) against the token's pair sums of bsums.  The
 * nibbles are unpacked once for up to 8 tokens.  The integers are exact, so their
 * order is free; the float operations are repack_k_scalar.c's in its order: same bits.
 *
 * Measured (one thread, Zen 5, 2048 x 2048): the nibble masks cost about a third of
 * a one-token product, hence the high nibbles taken in place as 16 q; with one token
 * the load ports are the busier, hence its activations loaded 16 bytes at a time.
 */
#include "repack_k.h"
#include "kquants_internal.h"
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

/* vpshufb index: in each 32-bit lane, byte k of the lane as an int32 (k < 4), or
 * (k >= 4) bytes 2(k - 4) and 2(k - 4) + 1 as two int16. */
INFER_ALWAYS_INLINE __m512i lane_bytes(int k) {
    int8_t idx[64];
    for (int i = 0; i < 64; i++) {
        const int base = (i % 16) / 4 * 4, at = i % 4;   /* vpshufb indexes within 128 bits */
        if (k < 4) idx[i] = (int8_t)(at == 0 ? base + k : -128);
        else idx[i] = (int8_t)(at % 2 ? -128 : base + 2 * (k - 4) + at / 2);
    }
    return _mm512_loadu_si512(idx);
}

/* Dword k (0..3) of every 128-bit lane of v, in every lane of that lane (vpshufd takes
 * an immediate). */
INFER_ALWAYS_INLINE __m512i dword_of(__m512i v, int k) {
    switch (k) {
    case 0: return _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0x00);
    case 1: return _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0x55);
    case 2: return _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0xAA);
    default: return _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0xFF);
    }
}

/* nt (1..8) tokens against one group of 16 rows, for a constant nt.  pf: the group
 * whose lines to request meanwhile, or NULL. */
INFER_ALWAYS_INLINE void q45_k_r16_group(int nt, int64_t nb, const uint8_t *wg, const uint8_t *pf, const uint8_t *a,
                                         size_t a_stride, float *out, size_t out_stride, const int five) {
    const size_t gbb = five ? R16K5_GROUP_BLOCK : R16K_GROUP_BLOCK, qs_at = five ? R16K5_QS : R16K_QS;
    const __m512i low4 = _mm512_set1_epi8(15), low6 = _mm512_set1_epi8(63), low2 = _mm512_set1_epi8(3);
    const __m512i bit4 = _mm512_set1_epi8(16);
    const __m512i byte_of[4] = {lane_bytes(0), lane_bytes(1), lane_bytes(2), lane_bytes(3)};
    const __m512i pair_lo = lane_bytes(4), pair_hi = lane_bytes(5);
    __m512 acc[8];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *gb = wg + (size_t)b * gbb;
        /* lane r: row r's scale words; sc03 = scales 0..3 as bytes, sc47, m03, m47 likewise */
        const __m512i w0 = _mm512_loadu_si512((const void *)(gb + R16K_SCALES));
        const __m512i w1 = _mm512_loadu_si512((const void *)(gb + R16K_SCALES + 64));
        const __m512i w2 = _mm512_loadu_si512((const void *)(gb + R16K_SCALES + 128));
        const __m512i sc03 = _mm512_and_si512(w0, low6), m03 = _mm512_and_si512(w1, low6);
        const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(w2, low4),
                                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), low2), 4));
        const __m512i m47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low4),
                                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), low2), 4));
        /* 16 S per token: the high nibbles are multiplied in place (v & 0xF0 = 16 q), so the
         * low ones take 16 sc, and S comes out of 16 S by a shift (|16 S| < 2^29) */
        __m512i sum16[8];
        for (int t = 0; t < nt; t++) sum16[t] = _mm512_setzero_si512();
        for (int p = 0; p < QK_K / 64; p++) {   /* sub-blocks 2p (low nibbles) and 2p + 1 (high) */
            if (pf)   /* the group-block's lines a group ahead, a quarter a pair (Q4_K: 36, 9) */
                for (int i = 0; i < (int)(gbb / 4 / 64) + five; i++)
                    R16_PREFETCH(pf + (size_t)b * gbb + (size_t)p * (gbb / 4) + 64 * i);
            __m512i lo[8], hi16[8];
            for (int c = 0; c < 8; c++) {
                const __m512i v = _mm512_loadu_si512((const void *)(gb + qs_at + 64 * (8 * p + c)));
                if (five) {   /* q = nibble | fifth bit << 4, both 0..31; hi16 holds q (not 16 q) */
                    const __m512i h = _mm512_loadu_si512((const void *)(gb + R16K5_QH + 64 * c));
                    const __m512i h_lo = 2 * p <= 4 ? _mm512_slli_epi32(h, 4 - 2 * p) : _mm512_srli_epi32(h, 2 * p - 4);
                    const __m512i h_hi = 2 * p + 1 <= 4 ? _mm512_slli_epi32(h, 3 - 2 * p) : _mm512_srli_epi32(h, 2 * p - 3);
                    lo[c] = _mm512_ternarylogic_epi32(_mm512_and_si512(v, low4), h_lo, bit4, 0xF8);
                    hi16[c] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(v, 4), low4), h_hi, bit4, 0xF8);
                } else {
                    lo[c] = _mm512_and_si512(v, low4);
                    hi16[c] = _mm512_andnot_si512(low4, v);
                }
            }
            const __m512i sc4 = p < 2 ? sc03 : sc47;
            const __m512i sc16_lo = _mm512_slli_epi32(_mm512_shuffle_epi8(sc4, byte_of[2 * p % 4]), 4);
            const __m512i sc_hi = five ? _mm512_slli_epi32(_mm512_shuffle_epi8(sc4, byte_of[2 * p % 4 + 1]), 4)
                                       : _mm512_shuffle_epi8(sc4, byte_of[2 * p % 4 + 1]);
            for (int t = 0; t < nt; t++) {
                const int8_t *xs = ((const block_q8_K *)(a + (size_t)t * a_stride) + b)->qs + 64 * p;
                __m512i s[4], x16[4];
                for (int k = 0; k < 4; k++) s[k] = _mm512_setzero_si512();
                if (nt == 1)   /* the load ports are the busier: 16 bytes at a time, then in-lane shuffles */
                    for (int k = 0; k < 4; k++) x16[k] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xs + 16 * k)));
                for (int c = 0; c < 8; c++) {
                    /* one token: four short chains of vpdpbusd (more at once); more tokens: two */
                    const int k = nt == 1 ? c / 4 : 0;
                    __m512i x_lo, x_hi;
                    if (nt == 1) {
                        x_lo = dword_of(x16[c / 4], c % 4);
                        x_hi = dword_of(x16[2 + c / 4], c % 4);
                    } else {
                        int32_t lo4, hi4;
                        memcpy(&lo4, xs + 4 * c, 4);
                        memcpy(&hi4, xs + 32 + 4 * c, 4);
                        x_lo = _mm512_set1_epi32(lo4), x_hi = _mm512_set1_epi32(hi4);
                    }
                    s[k] = _mm512_dpbusd_epi32(s[k], lo[c], x_lo);
                    s[2 + k] = _mm512_dpbusd_epi32(s[2 + k], hi16[c], x_hi);
                }
                if (nt == 1) s[0] = _mm512_add_epi32(s[0], s[1]), s[2] = _mm512_add_epi32(s[2], s[3]);
                sum16[t] = _mm512_add_epi32(sum16[t], _mm512_add_epi32(_mm512_mullo_epi32(s[0], sc16_lo),
                                                                       _mm512_mullo_epi32(s[2], sc_hi)));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gb + R16K_D)));
        const __m512 dminw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gb + R16K_DMIN)));
        const __m512i mp[4] = {_mm512_shuffle_epi8(m03, pair_lo), _mm512_shuffle_epi8(m03, pair_hi),
                               _mm512_shuffle_epi8(m47, pair_lo), _mm512_shuffle_epi8(m47, pair_hi)};
        for (int t = 0; t < nt; t++) {
            const block_q8_K *y = (const block_q8_K *)(a + (size_t)t * a_stride) + b;
            /* int16 pair sums bsums[2j] + bsums[2j+1], j = 0..7 (|.| <= 32 * 127: no saturation) */
            const __m256i s32 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), _mm256_set1_epi16(1));
            const __m512i s16 = _mm512_castsi128_si512(
                _mm_packs_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1)));
            __m512i mins = _mm512_setzero_si512();
            for (int k = 0; k < 4; k++)
                mins = _mm512_dpwssd_epi32(mins, mp[k], _mm512_permutexvar_epi32(_mm512_set1_epi32(k), s16));
            const __m512 dx = _mm512_set1_ps(y->d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srai_epi32(sum16[t], 4)), _mm512_mul_ps(dw, dx), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dminw, dx), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* ---- Q6_K_R16 ---------------------------------------------------------------
 *
 * Per super-block, the 16 int8 scales of the 16 rows sign-extended to int32 (lane r:
 * row r), and for the offset term their pairs (sc_2u, sc_2u+1) as int16.  Per quarter
 * (half h, q = 0, 1: sub-blocks 8h + q + 2g, g = 0..3), four units make 16 vectors
 * of 6-bit q (ternary logic 0xF8: a | (b & c)), unpacked once for up to 8 tokens; each sub-block's 16 elements are one chain of four vpdpbusd,
 * which vpmulld scales by the rows' sc_j into S.  The offset is 8 vpdpwssd of the
 * scale pairs against the token's pair of bsums.  Integers exact, floats in the
 * scalar kernel's order: the same bits. */

/* vpshufb index: in each 32-bit lane, bytes 2p and 2p + 1 of the lane into the high
 * bytes of its two int16 (an arithmetic shift by 8 then sign-extends them). */
INFER_ALWAYS_INLINE __m512i pair_high_bytes(int p) {
    int8_t idx[64];
    for (int i = 0; i < 64; i++) {
        const int base = (i % 16) / 4 * 4, at = i % 4;
        idx[i] = (int8_t)(at == 1 ? base + 2 * p : at == 3 ? base + 2 * p + 1 : -128);
    }
    return _mm512_loadu_si512(idx);
}

/* Shared by the Q6_K, Q3_K and Q2_K kernels, whose sub-blocks are 16 elements.
 * One quarter of a super-block for nt tokens: W[j][c] holds elements x_at + 32j + 4c..+3
 * of 16 rows, sub-block j's four chunks; each token's S gains sc[sc_at + 2j] times the
 * chain of four vpdpbusd of sub-block j. */
INFER_ALWAYS_INLINE void quarter_dots(int nt, __m512i W[4][4], const uint8_t *a, size_t a_stride, int64_t b,
                                      int x_at, const __m512i *sc, int sc_at, __m512i S[8]) {
    for (int t = 0; t < nt; t++) {
        const int8_t *xs = ((const block_q8_K *)(a + (size_t)t * a_stride) + b)->qs + x_at;
        for (int j = 0; j < 4; j++) {
            __m512i s = _mm512_setzero_si512();
            for (int c = 0; c < 4; c++) {
                int32_t x4;
                memcpy(&x4, xs + 32 * j + 4 * c, 4);
                s = _mm512_dpbusd_epi32(s, W[j][c], _mm512_set1_epi32(x4));
            }
            S[t] = _mm512_add_epi32(S[t], _mm512_mullo_epi32(s, sc[sc_at + 2 * j]));
        }
    }
}

/* The int32 lanes of lo and hi as the int16 pairs (lo, hi) that vpdpwssd multiplies
 * (both fit int16). */
INFER_ALWAYS_INLINE __m512i int16_pairs(__m512i lo, __m512i hi) {
    return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(hi, 16));
}

/* sum_j p_j * bsums[j] over the 16 sub-blocks of y, pairs[u] holding (p_2u, p_2u+1) as
 * int16 in each row's lane. */
INFER_ALWAYS_INLINE __m512i pairs_dot_bsums(const __m512i pairs[8], const block_q8_K *y) {
    __m512i sum = _mm512_setzero_si512();
    for (int u = 0; u < 8; u++) {
        int32_t bs2;
        memcpy(&bs2, y->bsums + 2 * u, 4);
        sum = _mm512_dpwssd_epi32(sum, pairs[u], _mm512_set1_epi32(bs2));
    }
    return sum;
}

INFER_ALWAYS_INLINE void q6_k_r16_group(int nt, int64_t nb, const uint8_t *wg, const uint8_t *pf, const uint8_t *a,
                                        size_t a_stride, float *out, size_t out_stride) {
    const __m512i low4 = _mm512_set1_epi8(15), bits45 = _mm512_set1_epi8(0x30);
    const __m512i pair_idx[2] = {pair_high_bytes(0), pair_high_bytes(1)};
    __m512 acc[8];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *gb = wg + (size_t)b * R16Q6_GROUP_BLOCK;
        __m512i words[4], sc[16];
        for (int k = 0; k < 4; k++) {
            words[k] = _mm512_loadu_si512((const void *)(gb + R16Q6_SCALES + 64 * k));
            for (int i = 0; i < 4; i++) sc[4 * k + i] = _mm512_srai_epi32(_mm512_slli_epi32(words[k], 24 - 8 * i), 24);
        }
        __m512i S[8];
        for (int t = 0; t < nt; t++) S[t] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++)
            for (int q = 0; q < 2; q++) {
                if (pf)   /* a group-block's 53 lines a group ahead, 14 a quarter */
                    for (int i = 0; i < 14; i++)
                        R16_PREFETCH(pf + (size_t)b * R16Q6_GROUP_BLOCK + (size_t)(2 * h + q) * (R16Q6_GROUP_BLOCK / 4) + 64 * i);
                __m512i W[4][4];   /* [g][c]: elements 128h + 32g + 16q + 4c..+3 */
                for (int c = 0; c < 4; c++) {
                    const int c8 = 4 * q + c;
                    const uint8_t *unit = gb + R16Q6_UNITS + R16Q6_UNIT * (8 * h + c8);
                    const __m512i H = _mm512_loadu_si512((const void *)unit);
                    const __m512i L0 = _mm512_loadu_si512((const void *)(unit + 64));
                    const __m512i L1 = _mm512_loadu_si512((const void *)(unit + 128));
                    W[0][c] = _mm512_ternarylogic_epi32(_mm512_and_si512(L0, low4), _mm512_slli_epi32(H, 4), bits45, 0xF8);
                    W[1][c] = _mm512_ternarylogic_epi32(_mm512_and_si512(L1, low4), _mm512_slli_epi32(H, 2), bits45, 0xF8);
                    W[2][c] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(L0, 4), low4), H, bits45, 0xF8);
                    W[3][c] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(L1, 4), low4),
                                                        _mm512_srli_epi32(H, 2), bits45, 0xF8);
                }
                quarter_dots(nt, W, a, a_stride, b, 128 * h + 16 * q, sc, 8 * h + q, S);
            }
        __m512i pairs[8];
        for (int u = 0; u < 8; u++) pairs[u] = _mm512_srai_epi16(_mm512_shuffle_epi8(words[u / 2], pair_idx[u % 2]), 8);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gb + R16Q6_D)));
        for (int t = 0; t < nt; t++) {
            const block_q8_K *y = (const block_q8_K *)(a + (size_t)t * a_stride) + b;
            const __m512i st = _mm512_sub_epi32(S[t], _mm512_slli_epi32(pairs_dot_bsums(pairs, y), 5));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(st), _mm512_mul_ps(dw, _mm512_set1_ps(y->d)), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* ---- IQ4_XS_R16 -------------------------------------------------------------
 *
 * Per super-block, the 8 scales ls - 32 of the 16 rows as int32 (lane r: row r) and
 * as int16 pairs for the offset.  Per sub-block, 4 chunks give 8 vectors of level +
 * 128 (one vpshufb each), unpacked once for up to 8 tokens; a token's sub-block is two
 * chains of four vpdpbusd, scaled by one vpmulld into S; the offset 128 * sum_j sc_j
 * (bsums[2j] + bsums[2j+1]) is 4 vpdpwssd.  Same integers, same float step: the bits
 * of the scalar kernel and of the file's AVX-512 rows. */
INFER_ALWAYS_INLINE void iq4_xs_r16_group(int nt, int64_t nb, const uint8_t *wg, const uint8_t *pf, const uint8_t *a,
                                          size_t a_stride, float *out, size_t out_stride) {
    const __m512i low4 = _mm512_set1_epi8(15);
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_add_epi8(_mm_loadu_si128((const __m128i *)infer_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    __m512 acc[8];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *gb = wg + (size_t)b * R16I4_GROUP_BLOCK;
        const __m512i sl = _mm512_loadu_si512((const void *)(gb + R16I4_SL));
        const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(gb + R16I4_SH)));
        __m512i sc[8], pairs[4];
        for (int j = 0; j < 8; j++)
            sc[j] = _mm512_sub_epi32(
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(15)),
                                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3)), 4)),
                _mm512_set1_epi32(32));
        for (int u = 0; u < 4; u++)   /* int16 (sc_2u, sc_2u+1) in each lane */
            pairs[u] = int16_pairs(sc[2 * u], sc[2 * u + 1]);
        __m512i S[8];
        for (int t = 0; t < nt; t++) S[t] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            if (pf)   /* a group-block's 34 lines a group ahead, 5 a sub-block */
                for (int i = 0; i < 5; i++)
                    R16_PREFETCH(pf + (size_t)b * R16I4_GROUP_BLOCK + (size_t)j * (R16I4_GROUP_BLOCK / 8) + 64 * i);
            __m512i lo[4], hi[4];
            for (int c = 0; c < 4; c++) {
                const __m512i v = _mm512_loadu_si512((const void *)(gb + R16I4_QS + 64 * (4 * j + c)));
                lo[c] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low4));
                hi[c] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi32(v, 4), low4));
            }
            for (int t = 0; t < nt; t++) {
                const int8_t *xs = ((const block_q8_K *)(a + (size_t)t * a_stride) + b)->qs + 32 * j;
                __m512i s_lo = _mm512_setzero_si512(), s_hi = _mm512_setzero_si512();
                for (int c = 0; c < 4; c++) {
                    int32_t x_lo, x_hi;
                    memcpy(&x_lo, xs + 4 * c, 4);
                    memcpy(&x_hi, xs + 16 + 4 * c, 4);
                    s_lo = _mm512_dpbusd_epi32(s_lo, lo[c], _mm512_set1_epi32(x_lo));
                    s_hi = _mm512_dpbusd_epi32(s_hi, hi[c], _mm512_set1_epi32(x_hi));
                }
                S[t] = _mm512_add_epi32(S[t], _mm512_mullo_epi32(_mm512_add_epi32(s_lo, s_hi), sc[j]));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gb + R16I4_D)));
        for (int t = 0; t < nt; t++) {
            const block_q8_K *y = (const block_q8_K *)(a + (size_t)t * a_stride) + b;
            /* int16 sums of 32, bsums[2j] + bsums[2j+1] (|.| <= 32 * 128: no saturation) */
            const __m256i s32 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), _mm256_set1_epi16(1));
            const __m512i s16 = _mm512_castsi128_si512(
                _mm_packs_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1)));
            __m512i off = _mm512_setzero_si512();
            for (int u = 0; u < 4; u++)
                off = _mm512_dpwssd_epi32(off, pairs[u], _mm512_permutexvar_epi32(_mm512_set1_epi32(u), s16));
            const __m512i st = _mm512_sub_epi32(S[t], _mm512_slli_epi32(off, 7));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(st), _mm512_mul_ps(dw, _mm512_set1_ps(y->d)), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* ---- Q3_K_R16 --------------------------------------------------------------
 *
 * Per super-block, the 16 scales sc - 32 of the 16 rows as int32 (the word-wise
 * unpack of infer_q3_K_unpack_scales on vectors) and as int16 pairs for the offset.
 * Per quarter (h, lh: sub-blocks 8h + 2j + lh, j = 0..3), four units give 16 vectors
 * of u = field + 4 * hmask bit (ternary logic 0xF8: a | (b & c)), unpacked once for up
 * to 8 tokens; each sub-block is one chain of four vpdpbusd scaled by one vpmulld;
 * the offset -4 sum_j sc_j bsums[j] is 8 vpdpwssd.  Same integers and float step as
 * the scalar kernel and the file's AVX-512 rows. */
INFER_ALWAYS_INLINE void q3_k_r16_group(int nt, int64_t nb, const uint8_t *wg, const uint8_t *pf, const uint8_t *a,
                                        size_t a_stride, float *out, size_t out_stride) {
    const __m512i low2 = _mm512_set1_epi8(3), bit2 = _mm512_set1_epi8(4);
    const __m512i low4w = _mm512_set1_epi32(0x0f0f0f0f), low2w = _mm512_set1_epi32(0x03030303);
    __m512 acc[8];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *gb = wg + (size_t)b * R16Q3_GROUP_BLOCK;
        const __m512i w0 = _mm512_loadu_si512((const void *)(gb + R16Q3_SCALES));
        const __m512i w1 = _mm512_loadu_si512((const void *)(gb + R16Q3_SCALES + 64));
        const __m512i w2 = _mm512_loadu_si512((const void *)(gb + R16Q3_SCALES + 128));
        /* lane r: row r's scales 4k..4k+3 as bytes (infer_q3_K_unpack_scales) */
        const __m512i sb[4] = {
            _mm512_or_si512(_mm512_and_si512(w0, low4w), _mm512_slli_epi32(_mm512_and_si512(w2, low2w), 4)),
            _mm512_or_si512(_mm512_and_si512(w1, low4w), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w2, 2), low2w), 4)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w0, 4), low4w),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low2w), 4)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w1, 4), low4w),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w2, 6), low2w), 4))};
        __m512i sc[16], pairs[8];
        for (int j = 0; j < 16; j++)
            sc[j] = _mm512_sub_epi32(_mm512_srli_epi32(_mm512_slli_epi32(sb[j / 4], 24 - 8 * (j % 4)), 24),
                                     _mm512_set1_epi32(32));
        for (int u = 0; u < 8; u++)   /* int16 (sc_2u, sc_2u+1) in each lane */
            pairs[u] = int16_pairs(sc[2 * u], sc[2 * u + 1]);
        __m512i S[8];
        for (int t = 0; t < nt; t++) S[t] = _mm512_setzero_si512();
        for (int lh = 0; lh < 2; lh++)
            for (int h = 0; h < 2; h++) {
                if (pf)   /* a group-block's 28 lines a group ahead, 7 a quarter */
                    for (int i = 0; i < 7; i++)
                        R16_PREFETCH(pf + (size_t)b * R16Q3_GROUP_BLOCK + (size_t)(2 * lh + h) * (R16Q3_GROUP_BLOCK / 4) + 64 * i);
                __m512i W[4][4];   /* [j][c]: elements 128h + 32j + 16lh + 4c..+3 */
                for (int c = 0; c < 4; c++) {
                    const uint8_t *unit = gb + R16Q3_UNITS + R16Q3_UNIT * (4 * lh + c);
                    const __m512i H = _mm512_loadu_si512((const void *)unit);
                    const __m512i V = _mm512_loadu_si512((const void *)(unit + 64 + 64 * h));
                    for (int j = 0; j < 4; j++) {
                        const int hb = 4 * h + j;   /* the hmask bit, to bit 2 */
                        const __m512i hv = hb >= 2 ? _mm512_srli_epi32(H, hb - 2) : _mm512_slli_epi32(H, 2 - hb);
                        const __m512i field = _mm512_and_si512(j ? _mm512_srli_epi32(V, 2 * j) : V, low2);
                        W[j][c] = _mm512_ternarylogic_epi32(field, hv, bit2, 0xF8);
                    }
                }
                quarter_dots(nt, W, a, a_stride, b, 128 * h + 16 * lh, sc, 8 * h + lh, S);
            }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gb + R16Q3_D)));
        for (int t = 0; t < nt; t++) {
            const block_q8_K *y = (const block_q8_K *)(a + (size_t)t * a_stride) + b;
            const __m512i st = _mm512_sub_epi32(S[t], _mm512_slli_epi32(pairs_dot_bsums(pairs, y), 2));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(st), _mm512_mul_ps(dw, _mm512_set1_ps(y->d)), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* ---- Q2_K_R16 --------------------------------------------------------------
 *
 * Q3_K_R16's walk without the hmask, with Q4_K's mins: per super-block the scales
 * (int32) and the mins (int16 pairs) of the 16 rows; per quarter, 16 vectors of 2-bit
 * q for up to 8 tokens, one chain of four vpdpbusd a sub-block scaled by one vpmulld;
 * M is 8 vpdpwssd; then Q4_K's two fmas. */
INFER_ALWAYS_INLINE void q2_k_r16_group(int nt, int64_t nb, const uint8_t *wg, const uint8_t *pf, const uint8_t *a,
                                        size_t a_stride, float *out, size_t out_stride) {
    const __m512i low2 = _mm512_set1_epi8(3), low4w = _mm512_set1_epi32(15);
    __m512 acc[8];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *gb = wg + (size_t)b * R16Q2_GROUP_BLOCK;
        __m512i sc[16], mpairs[8];
        for (int k = 0; k < 4; k++) {
            const __m512i w = _mm512_loadu_si512((const void *)(gb + R16Q2_SCALES + 64 * k));
            for (int i = 0; i < 4; i++) sc[4 * k + i] = _mm512_and_si512(_mm512_srli_epi32(w, 8 * i), low4w);
            /* mins of sub-blocks 4k + 2p, 4k + 2p + 1 as int16 pairs: the high nibbles of bytes 2p, 2p + 1 */
            for (int p = 0; p < 2; p++)
                mpairs[2 * k + p] = int16_pairs(_mm512_and_si512(_mm512_srli_epi32(w, 16 * p + 4), low4w),
                                                _mm512_and_si512(_mm512_srli_epi32(w, 16 * p + 12), low4w));
        }
        __m512i S[8];
        for (int t = 0; t < nt; t++) S[t] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++)
            for (int lh = 0; lh < 2; lh++) {
                if (pf)   /* a group-block's 21 lines a group ahead, 6 a quarter */
                    for (int i = 0; i < 6; i++)
                        R16_PREFETCH(pf + (size_t)b * R16Q2_GROUP_BLOCK + (size_t)(2 * h + lh) * (R16Q2_GROUP_BLOCK / 4) + 64 * i);
                __m512i W[4][4];   /* [j][c]: elements 128h + 32j + 16lh + 4c..+3 */
                for (int c = 0; c < 4; c++) {
                    const __m512i V = _mm512_loadu_si512((const void *)(gb + R16Q2_QS + 64 * (8 * h + 4 * lh + c)));
                    for (int j = 0; j < 4; j++) W[j][c] = _mm512_and_si512(j ? _mm512_srli_epi32(V, 2 * j) : V, low2);
                }
                quarter_dots(nt, W, a, a_stride, b, 128 * h + 16 * lh, sc, 8 * h + lh, S);
            }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gb + R16Q2_D)));
        const __m512 dminw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gb + R16Q2_DMIN)));
        for (int t = 0; t < nt; t++) {
            const block_q8_K *y = (const block_q8_K *)(a + (size_t)t * a_stride) + b;
            const __m512i mins = pairs_dot_bsums(mpairs, y);
            const __m512 dx = _mm512_set1_ps(y->d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[t]), _mm512_mul_ps(dw, dx), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dminw, dx), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) _mm512_storeu_ps(out + (size_t)t * out_stride, acc[t]);
}

/* The entries: each group kernel over the groups and tiles of tokens. */
#define K_R16_AVX512(name, group_block, GROUP)                                                         \
    static void name(int64_t n, const void *w, int64_t n_groups, const void *a, size_t a_stride,      \
                     int64_t n_tok, float *out, size_t out_stride) {                                   \
        const int64_t nb = n / QK_K;                                                                   \
        const size_t group_bytes = (size_t)nb * (group_block);                                        \
        R16_FOR_GROUPS_AND_TILES(w, n_groups, group_bytes, a, a_stride, n_tok, out, out_stride, GROUP) \
    }
#define Q4K_GROUP(nt, wg, pf, x, o) q45_k_r16_group(nt, nb, wg, pf, x, a_stride, o, out_stride, 0)
#define Q5K_GROUP(nt, wg, pf, x, o) q45_k_r16_group(nt, nb, wg, pf, x, a_stride, o, out_stride, 1)
#define Q6K_GROUP(nt, wg, pf, x, o) q6_k_r16_group(nt, nb, wg, pf, x, a_stride, o, out_stride)
#define IQ4XS_GROUP(nt, wg, pf, x, o) iq4_xs_r16_group(nt, nb, wg, pf, x, a_stride, o, out_stride)
#define Q3K_GROUP(nt, wg, pf, x, o) q3_k_r16_group(nt, nb, wg, pf, x, a_stride, o, out_stride)
#define Q2K_GROUP(nt, wg, pf, x, o) q2_k_r16_group(nt, nb, wg, pf, x, a_stride, o, out_stride)
K_R16_AVX512(matmul_q4_k_r16_avx512, R16K_GROUP_BLOCK, Q4K_GROUP)
K_R16_AVX512(matmul_q5_k_r16_avx512, R16K5_GROUP_BLOCK, Q5K_GROUP)
K_R16_AVX512(matmul_q6_k_r16_avx512, R16Q6_GROUP_BLOCK, Q6K_GROUP)
K_R16_AVX512(matmul_iq4_xs_r16_avx512, R16I4_GROUP_BLOCK, IQ4XS_GROUP)
K_R16_AVX512(matmul_q3_k_r16_avx512, R16Q3_GROUP_BLOCK, Q3K_GROUP)
K_R16_AVX512(matmul_q2_k_r16_avx512, R16Q2_GROUP_BLOCK, Q2K_GROUP)

void infer_fill_repack_k_avx512(infer_kernel_table *t) {
    t->matmul_r16[INFER_TYPE_IQ4_XS_R16] = matmul_iq4_xs_r16_avx512;
    t->repack_to[INFER_TYPE_IQ4_XS] = INFER_TYPE_IQ4_XS_R16;
    t->matmul_r16[INFER_TYPE_Q3_K_R16] = matmul_q3_k_r16_avx512;
    t->repack_to[INFER_TYPE_Q3_K] = INFER_TYPE_Q3_K_R16;
    t->matmul_r16[INFER_TYPE_Q2_K_R16] = matmul_q2_k_r16_avx512;
    t->repack_to[INFER_TYPE_Q2_K] = INFER_TYPE_Q2_K_R16;
    t->matmul_r16[INFER_TYPE_Q4_K_R16] = matmul_q4_k_r16_avx512;
    t->repack_to[INFER_TYPE_Q4_K] = INFER_TYPE_Q4_K_R16;
    t->matmul_r16[INFER_TYPE_Q5_K_R16] = matmul_q5_k_r16_avx512;
    t->repack_to[INFER_TYPE_Q5_K] = INFER_TYPE_Q5_K_R16;
    t->matmul_r16[INFER_TYPE_Q6_K_R16] = matmul_q6_k_r16_avx512;
    t->repack_to[INFER_TYPE_Q6_K] = INFER_TYPE_Q6_K_R16;
}
#endif
