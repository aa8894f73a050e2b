/* kquants_avx512.c: Q4_K and Q6_K dot products with Q8_K, AVX-512 F/BW/VL + VNNI (and
 * Q5_K's four-row and eight-token kernels, Q4_K's with the fifth bits).
 *
 * As the AVX2 file, on 64 elements per instruction: maddubs (unsigned weight quant x signed
 * activation, pairs into int16), then VNNI's dpwssd multiplies those by the int16
 * sub-block scales and accumulates into int32 in one instruction.  The scale of
 * each int16 lane comes from one permutexvar of the block's scales.  Offsets (Q4_K's
 * min, Q6_K's -32) come out once per super-block through Q8_K's bsums.
 * Dequantizers and quantizers are the AVX2 and scalar ones.
 */
#include "infer_kernels.h"
#include "kquants_internal.h"

#include <stddef.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

/* Index vector for permutexvar_epi16: lane i takes source lane base + i/width. */
KQ_INLINE __m512i run_index(int base, int width) {
    int16_t idx[32];
    for (int i = 0; i < 32; i++) idx[i] = (int16_t)(base + i / width);
    return _mm512_loadu_si512(idx);
}

/* Index vector: lanes 0..15 take source lane a, lanes 16..31 lane b. */
KQ_INLINE __m512i run_pair_index(int a, int b) {
    int16_t idx[32];
    for (int i = 0; i < 32; i++) idx[i] = (int16_t)(i < 16 ? a : b);
    return _mm512_loadu_si512(idx);
}

/* ---- Q4_K ------------------------------------------------------------------- */

/* Two 128-element steps per super-block.  One 64-byte load of qs holds chunks 2s and
 * 2s+1 (32 bytes each); their low nibbles are sub-blocks 4s and 4s+2, their high
 * nibbles 4s+1 and 4s+3, so the matching activations are gathered from two places.
 * nrows (1 or 4, a constant after inlining) weight rows share the activation vectors. */
KQ_INLINE void q4_K_dot_rows(int64_t n, const uint8_t *w, size_t row_bytes,
                             const block_q8_K *y, int nrows, float *out) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i idx_lo[2] = {run_pair_index(0, 2), run_pair_index(4, 6)};
    const __m512i idx_hi[2] = {run_pair_index(1, 3), run_pair_index(5, 7)};
    __m512 acc[4];
    __m128 acc_m[4];
    for (int k = 0; k < nrows; k++) {
        acc[k] = _mm512_setzero_ps();
        acc_m[k] = _mm_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[i].bsums),
                                          _mm_loadu_si128((const __m128i *)y[i].bsums + 1));
        __m512i a_lo[2], a_hi[2];
        for (int s = 0; s < 2; s++) {
            const int8_t *q8 = y[i].qs + 128 * s;
            a_lo[s] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q8)),
                                         _mm256_loadu_si256((const __m256i *)(q8 + 64)), 1);
            a_hi[s] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q8 + 32))),
                                         _mm256_loadu_si256((const __m256i *)(q8 + 96)), 1);
        }
        for (int k = 0; k < nrows; k++) {
            const block_q4_K *x = (const block_q4_K *)(w + k * row_bytes) + i;
            const float d = _cvtsh_ss(x->d) * y[i].d;
            const float dmin = _cvtsh_ss(x->dmin) * y[i].d;
            const __m256i sm16 = _mm256_cvtepu8_epi16(infer_q4_K_unpack_scales_sse(x->scales));
            acc_m[k] = _mm_fmadd_ps(_mm_set1_ps(dmin),
                                    _mm_cvtepi32_ps(_mm_madd_epi16(bs, _mm256_extracti128_si256(sm16, 1))),
                                    acc_m[k]);
            const __m512i scales = _mm512_castsi256_si512(sm16);
            __m512i sumi = _mm512_setzero_si512();
            for (int s = 0; s < 2; s++) {
                const __m512i q = _mm512_loadu_si512(x->qs + 64 * s);
                const __m512i p_lo = _mm512_maddubs_epi16(_mm512_and_si512(q, low4), a_lo[s]);
                const __m512i p_hi = _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(q, 4), low4), a_hi[s]);
                sumi = _mm512_dpwssd_epi32(sumi, p_lo, _mm512_permutexvar_epi16(idx_lo[s], scales));
                sumi = _mm512_dpwssd_epi32(sumi, p_hi, _mm512_permutexvar_epi16(idx_hi[s], scales));
            }
            acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc[k]);
        }
    }
    for (int k = 0; k < nrows; k++) {
        __m128 m = _mm_add_ps(acc_m[k], _mm_movehl_ps(acc_m[k], acc_m[k]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        out[k] = _mm512_reduce_add_ps(acc[k]) - _mm_cvtss_f32(m);
    }
}

static float infer_vec_dot_q4_K_q8_K_avx512(int64_t n, const void *w, const void *a) {
    float out;
    q4_K_dot_rows(n, w, 0, a, 1, &out);
    return out;
}

static void infer_vec_dot_4_q4_K_q8_K_avx512(int64_t n, const void *w, size_t row_bytes,
                                             const void *a, float *out) {
    q4_K_dot_rows(n, w, row_bytes, a, 4, out);
}

/* ---- Q6_K ------------------------------------------------------------------- */

/* One 128-element half is two 64-element vectors: runs 0,1 (elements 0..63) take
 * their low 4 bits from the low nibbles of ql[0..63], runs 2,3 from the high ones;
 * run k's top 2 bits are bits 2k..2k+1 of qh.  With hh = [qh, qh >> 2], the top
 * bits of runs 0,1 are (hh << 4) & 0x30 and of runs 2,3 hh & 0x30. */
KQ_INLINE void q6_K_dot_rows(int64_t n, const uint8_t *w, size_t row_bytes,
                             const block_q8_K *y, int nrows, float *out) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    /* lanes of 8 int16 = one 16-element sub-block; four per vector */
    const __m512i idx[4] = {run_index(0, 8), run_index(4, 8), run_index(8, 8), run_index(12, 8)};
    __m256 acc[4];
    for (int k = 0; k < nrows; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        __m512i a[4];
        for (int j = 0; j < 4; j++) a[j] = _mm512_loadu_si512(y[i].qs + 64 * j);
        for (int k = 0; k < nrows; k++) {
            const block_q6_K *x = (const block_q6_K *)(w + k * row_bytes) + i;
            const float d = _cvtsh_ss(x->d) * y[i].d;
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
            const __m256i offset = _mm256_madd_epi16(sc16, bsums);
            const __m512i scales = _mm512_castsi256_si512(sc16);
            __m512i sumi = _mm512_setzero_si512();
            for (int h = 0; h < QK_K / 128; h++) {
                const __m512i ql = _mm512_loadu_si512(x->ql + 64 * h);
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
                const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
                /* ternary logic 0xF8: a | (b & c) */
                const __m512i q01 = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, low4),
                                                              _mm512_slli_epi16(hh, 4), bits45, 0xF8);
                const __m512i q23 = _mm512_ternarylogic_epi32(
                    _mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), hh, bits45, 0xF8);
                const __m512i p01 = _mm512_maddubs_epi16(q01, a[2 * h]);
                const __m512i p23 = _mm512_maddubs_epi16(q23, a[2 * h + 1]);
                sumi = _mm512_dpwssd_epi32(sumi, p01, _mm512_permutexvar_epi16(idx[2 * h], scales));
                sumi = _mm512_dpwssd_epi32(sumi, p23, _mm512_permutexvar_epi16(idx[2 * h + 1], scales));
            }
            __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
            s = _mm256_sub_epi32(s, _mm256_slli_epi32(offset, 5));
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[k]);
        }
    }
    for (int k = 0; k < nrows; k++) out[k] = _mm512_reduce_add_ps(_mm512_zextps256_ps512(acc[k]));
}

static float infer_vec_dot_q6_K_q8_K_avx512(int64_t n, const void *w, const void *a) {
    float out;
    q6_K_dot_rows(n, w, 0, a, 1, &out);
    return out;
}

static void infer_vec_dot_4_q6_K_q8_K_avx512(int64_t n, const void *w, size_t row_bytes,
                                             const void *a, float *out) {
    q6_K_dot_rows(n, w, row_bytes, a, 4, out);
}

/* ---- four rows x n tokens, and n rows x 8 tokens -----------------------------
 *
 * Both entries compute, per (row, token), the same float operations: per super-block
 * i in order, the exact integer dot S_i (and for Q4_K the exact mins term M_i =
 * Σ_j m_j·(bsums[2j] + bsums[2j+1])), then
 *     acc = fma(float(S_i), d_w·d_y, acc)   [Q4_K: acc = fnmadd(float(M_i), dmin_w·d_y, acc)]
 * so that a result has the same bits whatever the batch, the entry (4xn or rx8) or
 * which lanes hold it: 4xn keeps four rows in the lanes of one vector per token, rx8
 * eight tokens in the lanes of one vector per row.  The integer work is shared: each
 * weight block is unpacked once (into the activations' element order, so the Q8_K
 * rows are used as they lie in memory) for all the tokens of the call, and a 512-bit
 * vector of int32 partial sums per (row, token) is reduced with the others of its
 * group (four rows or four tokens) by unpack/add trees, which are exact.
 * (Not vec_dot_4's bits: that kernel scales sixteen int32 lanes per super-block.) */

/* 128-bit lane L of the result: [a, b, c, d] summed over lane L of each input. */
KQ_INLINE __m512i sum4_by_lane(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

/* The totals of the four 128-bit lanes of a, b, c, d, as the four lanes of one vector. */
KQ_INLINE __m512i fold4_lanes(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i x = _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i y = _mm512_add_epi32(_mm512_shuffle_i64x2(c, d, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i64x2(c, d, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_epi32(_mm512_shuffle_i64x2(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i64x2(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* The totals of a's and b's four 128-bit lanes: lane 0 a's, lane 2 b's. */
KQ_INLINE __m512i fold2_lanes(__m512i a, __m512i b) {
    const __m512i x = _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_epi32(x, _mm512_shuffle_i64x2(x, x, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* Index vectors for permutexvar_epi32 over int32 units ("units" are int16 pairs):
 * unit_transpose: lane L, unit k <- unit 4k + L (four 128-bit rows of four units,
 * transposed); unit_spread(o, s): lane L, every unit <- unit s*L + o. */
KQ_INLINE __m512i unit_transpose(void) {
    return _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
}
KQ_INLINE __m512i unit_spread(int o, int s) {
    return _mm512_setr_epi32(o, o, o, o, s + o, s + o, s + o, s + o, 2 * s + o, 2 * s + o, 2 * s + o,
                             2 * s + o, 3 * s + o, 3 * s + o, 3 * s + o, 3 * s + o);
}
/* For two vectors of two 256-bit rows of eight units (p: rows 0, 1; q: rows 2, 3):
 * lane L, unit k <- unit 2L + o of row k. */
KQ_INLINE __m512i unit_gather8(int o) {
    int32_t idx[16];
    for (int L = 0; L < 4; L++)
        for (int k = 0; k < 4; k++) idx[4 * L + k] = 8 * k + 2 * L + o;   /* q's units are 16.. */
    return _mm512_loadu_si512(idx);
}

#ifndef KQ_DOT_PACKED
#define KQ_DOT_PACKED 1
#endif
#define KQ_NSC (KQ_DOT_PACKED ? 2 : 4)   /* scale vectors per super-block */

/* Q6_K's scale vectors as permutexvar_epi16 indices into the 16 int16 scales: vector j
 * holds sub-blocks 4j..4j+3, one per 128-bit lane; packed, vector p serves the pack
 * of vectors 2p (int16 lanes 0..3 of each 128-bit lane) and 2p+1 (lanes 4..7). */
KQ_INLINE void q6_K_scale_index(__m512i idx[KQ_NSC]) {
    for (int p = 0; p < KQ_NSC; p++) {
        int16_t v[32];
        for (int i = 0; i < 32; i++) {
            const int L = i / 8, w = i % 8;
            v[i] = (int16_t)(KQ_DOT_PACKED ? 4 * (2 * p + (w >= 4)) + L : 4 * p + L);
        }
        idx[p] = _mm512_loadu_si512(v);
    }
}

/* Q4_K: one row's super-block unpacked in the order of the Q8_K quants: vector j
 * holds elements 64j..64j+63 (the low then the high nibbles of qs[32j..32j+31]), and
 * sc[j] the int16 scales of sub-blocks 2j (lanes 0..15) and 2j+1 (16..31). */
typedef struct { __m512i q[4], sc[KQ_NSC]; } q4_K_unpacked;

/* The int16 scale vectors of q4_K_unpacked from the block's 16 scale/min bytes (as
 * infer_q4_K_unpack_scales_sse gives them) in every 128-bit lane of sm. */
/* Sub-block of 128-bit lane L of Q4_K vector j, in the activation-order layout or the
 * split one (q4_K_unpack_q_split). */
KQ_INLINE int q4_K_sub_block(int j, int L, const int split) {
    return split ? 4 * (j / 2) + (j & 1) + 2 * (L >= 2) : 2 * j + (L >= 2);
}

/* The int16 scale vectors kq_dot_partials takes, from the block's 16 scale/min bytes
 * (as infer_q4_K_unpack_scales_sse gives them) in every 128-bit lane of sm. */
KQ_INLINE void q4_K_scale_vectors(__m512i sm, __m512i sc[KQ_NSC], const int split) {
    for (int p = 0; p < KQ_NSC; p++) {
        int8_t c[64];
        for (int b = 0; b < 64; b++) {
            const int L = b / 16, w = (b % 16) / 2;   /* int16 lane w of 128-bit lane L */
            const int j = KQ_DOT_PACKED ? 2 * p + (w >= 4) : p;
            c[b] = (b & 1) ? (int8_t)0x80 : (int8_t)q4_K_sub_block(j, L, split);
        }
        sc[p] = _mm512_shuffle_epi8(sm, _mm512_loadu_si512(c));
    }
}

/* Row k's mins as int16 pairs: lane L, every unit <- mins 2L, 2L+1 (sm as above). */
KQ_INLINE __m512i q4_K_min_pairs(__m512i sm) {
    int8_t c[64];
    for (int b = 0; b < 64; b++) c[b] = (b & 1) ? (int8_t)0x80 : (int8_t)(8 + 2 * (b / 16) + ((b / 2) & 1));
    return _mm512_shuffle_epi8(sm, _mm512_loadu_si512(c));
}

/* The "split" layout: vector 2s holds the low nibbles of qs[64s..64s+63] (sub-blocks
 * 4s and 4s+2), vector 2s+1 the high ones (4s+1, 4s+3); fewer operations than the
 * activation order, for a caller that permutes the activations once for four rows
 * (q8_K_split). */
KQ_INLINE void q4_K_unpack_q_split(const block_q4_K *x, q4_K_unpacked *u) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int s = 0; s < 2; s++) {
        const __m512i v = _mm512_loadu_si512(x->qs + 64 * s);
        u->q[2 * s] = _mm512_and_si512(v, low4);
        u->q[2 * s + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
}

KQ_INLINE void q8_K_split(const int8_t *q8, __m512i y[4]) {
    for (int s = 0; s < 2; s++, q8 += 128) {
        y[2 * s] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q8)),
                                      _mm256_loadu_si256((const __m256i *)(q8 + 64)), 1);
        y[2 * s + 1] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q8 + 32))),
                                          _mm256_loadu_si256((const __m256i *)(q8 + 96)), 1);
    }
}

KQ_INLINE void q4_K_unpack_q(const block_q4_K *x, q4_K_unpacked *u) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int j = 0; j < 4; j++) {
        __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * j)));
        v = _mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4);
        u->q[j] = _mm512_and_si512(v, low4);
    }
}

/* Q5_K: Q4_K's unpacks with each element's fifth bit added as 16.  The fifth bit of
 * element 64j + l (the low nibble of qs[32j + l]) is bit 2j of qh[l], of 64j + 32 + l
 * (its high nibble) bit 2j + 1. */
KQ_INLINE __m512i q5_K_add_bits(__m512i q, __m512i hb, int bit_lo, int bit_hi) {
    const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << bit_lo)), _mm256_set1_epi8((char)(1 << bit_hi)), 1);
    return _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hb, bits), q, _mm512_set1_epi8(16));
}

KQ_INLINE void q5_K_unpack_q(const block_q5_K *x, q4_K_unpacked *u) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->qh));
    for (int j = 0; j < 4; j++) {
        __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * j)));
        v = _mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4);
        u->q[j] = q5_K_add_bits(_mm512_and_si512(v, low4), hb, 2 * j, 2 * j + 1);
    }
}

/* The split layout (q4_K_unpack_q_split): vector 2s holds elements 128s + l and
 * 128s + 64 + l (bits 4s and 4s + 2), vector 2s + 1 elements 128s + 32 + l and
 * 128s + 96 + l (bits 4s + 1 and 4s + 3). */
KQ_INLINE void q5_K_unpack_q_split(const block_q5_K *x, q4_K_unpacked *u) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->qh));
    for (int s = 0; s < 2; s++) {
        const __m512i v = _mm512_loadu_si512(x->qs + 64 * s);
        u->q[2 * s] = q5_K_add_bits(_mm512_and_si512(v, low4), hb, 4 * s, 4 * s + 2);
        u->q[2 * s + 1] = q5_K_add_bits(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), hb, 4 * s + 1, 4 * s + 3);
    }
}

/* 128-bit lane k of v in all four lanes. */
KQ_INLINE __m512i lane_broadcast(__m512i v, int k) {
    switch (k) {
    case 0: return _mm512_shuffle_i32x4(v, v, 0x00);
    case 1: return _mm512_shuffle_i32x4(v, v, 0x55);
    case 2: return _mm512_shuffle_i32x4(v, v, 0xAA);
    default: return _mm512_shuffle_i32x4(v, v, 0xFF);
    }
}

/* infer_q4_K_unpack_scales_sse on four blocks at once, one per 128-bit lane. */
KQ_INLINE __m512i q4_K_unpack_scales_x4(const uint8_t *p, size_t row_bytes) {
    __m512i w = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)(p + row_bytes)), 1);
    w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)(p + 2 * row_bytes)), 2);
    w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)(p + 3 * row_bytes)), 3);
    const __m512i a = _mm512_shuffle_epi32(w, _MM_SHUFFLE(2, 1, 2, 0));
    const __m512i b = _mm512_shuffle_epi32(w, _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i low = _mm512_and_si512(_mm512_srlv_epi32(a, _mm512_setr4_epi32(0, 0, 0, 4)),
                                         _mm512_setr4_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    /* low | (b >> 2 & top) */
    return _mm512_ternarylogic_epi32(low, _mm512_srli_epi32(b, 2),
                                     _mm512_setr4_epi32(0, 0x30303030, 0, 0x30303030), 0xF8);
}

/* Q6_K: vector j holds elements 64j..64j+63 as 6-bit unsigned values (see
 * q6_K_dot_rows), sc[j] the int16 scales of sub-blocks 4j..4j+3, eight lanes each. */
typedef struct { __m512i q[4], sc[KQ_NSC]; } q6_K_unpacked;

KQ_INLINE void q6_K_unpack(const block_q6_K *x, __m256i sc16, const __m512i sc_idx[KQ_NSC], q6_K_unpacked *u) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    const __m512i scales = _mm512_zextsi256_si512(sc16);
    for (int h = 0; h < QK_K / 128; h++) {
        const __m512i ql = _mm512_loadu_si512(x->ql + 64 * h);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        u->q[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, low4), _mm512_slli_epi16(hh, 4), bits45, 0xF8);
        u->q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), hh, bits45, 0xF8);
    }
    for (int j = 0; j < KQ_NSC; j++) u->sc[j] = _mm512_permutexvar_epi16(sc_idx[j], scales);
}

/* Σ_j sc_j · Σ q·y over a super-block (weights q[4], activations y[4] in the same
 * element order), as sixteen int32 partial sums.  Exact: with KQ_DOT_PACKED, vpdpbusd
 * sums four products q·y (|sum| <= 4·63·128 < 2^15), two such vectors are packed to
 * int16 without saturating and vpdpwssd applies the scales (six multiplies per 256
 * elements instead of eight); otherwise vpmaddubsw pairs (2·63·128 < 2^15) times the
 * scales.  The whole dot fits int32. */
KQ_INLINE __m512i kq_dot_partials_v(const __m512i q[4], const __m512i sc[KQ_NSC], const __m512i y[4]) {
#if KQ_DOT_PACKED
    const __m512i z = _mm512_setzero_si512();
    __m512i s = _mm512_madd_epi16(_mm512_packs_epi32(_mm512_dpbusd_epi32(z, q[0], y[0]), _mm512_dpbusd_epi32(z, q[1], y[1])), sc[0]);
    return _mm512_dpwssd_epi32(s, _mm512_packs_epi32(_mm512_dpbusd_epi32(z, q[2], y[2]), _mm512_dpbusd_epi32(z, q[3], y[3])), sc[1]);
#else
    __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(q[0], y[0]), sc[0]);
    for (int j = 1; j < 4; j++) s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(q[j], y[j]), sc[j]);
    return s;
#endif
}

KQ_INLINE __m512i kq_dot_partials(const __m512i q[4], const __m512i sc[KQ_NSC], const int8_t *y) {
    __m512i yv[4];
    for (int j = 0; j < 4; j++) yv[j] = _mm512_loadu_si512(y + 64 * j);
    return kq_dot_partials_v(q, sc, yv);
}

/* The 8 sub-block sums of 32 of a Q8_K block as int16 (bsums pairs). */
KQ_INLINE __m128i q8_K_bsums32(const block_q8_K *y) {
    return _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums),
                          _mm_loadu_si128((const __m128i *)y->bsums + 1));
}

/* Four rows' fp16 (d, dmin) pairs at the start of their blocks as d4 and dmin4. */
KQ_INLINE void load_d_dmin_x4(const uint8_t *p, size_t row_bytes, __m128 *d4, __m128 *dmin4) {
    int32_t v[4];
    for (int k = 0; k < 4; k++) memcpy(&v[k], p + k * row_bytes, 4);
    const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)v));   /* d0 m0 d1 m1 .. */
    const __m256 even_odd = _mm256_permutevar8x32_ps(dm, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    *d4 = _mm256_castps256_ps128(even_odd);
    *dmin4 = _mm256_extractf128_ps(even_odd, 1);
}

/* Q4_K, or with five set Q5_K (the same d, dmin and scales; qh before qs). */
KQ_INLINE void qk45_4xn_pass(int64_t n, const uint8_t *w, size_t row_bytes, const uint8_t *a,
                             size_t a_stride, const int T, float *out, size_t out_stride, const int five) {
    const uint8_t *ahead = w + INFER_PREFETCH_ROWS * row_bytes;   /* see INFER_PREFETCH_ROWS */
    size_t fetched = 0;
    const __m512i transpose = unit_transpose(), spread = unit_spread(0, 1);
    __m128 acc[INFER_DOT_4XN_MAX];
    for (int t = 0; t < T; t++) acc[t] = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *xb = w + i * (five ? sizeof(block_q5_K) : sizeof(block_q4_K));
        infer_prefetch_part(ahead, &fetched, 4 * row_bytes, i, n / QK_K);
        const __m512i sm = q4_K_unpack_scales_x4(xb + offsetof(block_q4_K, scales), row_bytes);
        /* mins of row k, pair L in lane L unit k */
        const __m512i mins = _mm512_permutexvar_epi32(transpose, _mm512_unpackhi_epi8(sm, _mm512_setzero_si512()));
        __m128 d4, dmin4;
        load_d_dmin_x4(xb, row_bytes, &d4, &dmin4);
        __m512i s[4][INFER_DOT_4XN_MAX];
        /* one or two tokens: activations permuted once for the four rows, then the
         * cheaper split unpack of the weights; more: the weights in activation order */
        const int split = T <= 2;
        __m512i ys[2][4];
        if (split)
            for (int t = 0; t < T; t++) q8_K_split(((const block_q8_K *)(a + t * a_stride) + i)->qs, ys[t]);
        for (int k = 0; k < 4; k++) {
            q4_K_unpacked u;
            if (five && split)
                q5_K_unpack_q_split((const block_q5_K *)(xb + k * row_bytes), &u);
            else if (five)
                q5_K_unpack_q((const block_q5_K *)(xb + k * row_bytes), &u);
            else if (split)
                q4_K_unpack_q_split((const block_q4_K *)(xb + k * row_bytes), &u);
            else
                q4_K_unpack_q((const block_q4_K *)(xb + k * row_bytes), &u);
            q4_K_scale_vectors(lane_broadcast(sm, k), u.sc, split);
            for (int t = 0; t < T; t++)
                s[k][t] = split ? kq_dot_partials_v(u.q, u.sc, ys[t])
                                : kq_dot_partials(u.q, u.sc, ((const block_q8_K *)(a + t * a_stride) + i)->qs);
        }
        for (int t = 0; t < T; t++) {
            const block_q8_K *y = (const block_q8_K *)(a + t * a_stride) + i;
            const __m512i sums = sum4_by_lane(s[0][t], s[1][t], s[2][t], s[3][t]);
            const __m512i m = _mm512_madd_epi16(mins, _mm512_permutexvar_epi32(spread, _mm512_castsi128_si512(q8_K_bsums32(y))));
            const __m512 f = _mm512_cvtepi32_ps(fold2_lanes(sums, m));
            const __m128 dy = _mm_set1_ps(y->d);
            acc[t] = _mm_fmadd_ps(_mm512_castps512_ps128(f), _mm_mul_ps(d4, dy), acc[t]);
            acc[t] = _mm_fnmadd_ps(_mm512_extractf32x4_ps(f, 2), _mm_mul_ps(dmin4, dy), acc[t]);
        }
    }
    for (int t = 0; t < T; t++) _mm_storeu_ps(out + t * out_stride, acc[t]);
}

#define KQ_4XN_ENTRY(name, pass)                                                                  \
    static void name(int64_t n, const void *w, size_t row_bytes, const void *a, size_t a_stride,   \
                     int n_tok, float *out, size_t out_stride) {                                  \
        const uint8_t *wb = (const uint8_t *)w, *ab = (const uint8_t *)a;                         \
        switch (n_tok) {                                                                          \
        case 1: pass(n, wb, row_bytes, ab, a_stride, 1, out, out_stride); break;                  \
        case 2: pass(n, wb, row_bytes, ab, a_stride, 2, out, out_stride); break;                  \
        case 3: pass(n, wb, row_bytes, ab, a_stride, 3, out, out_stride); break;                  \
        default: pass(n, wb, row_bytes, ab, a_stride, 4, out, out_stride); break;                 \
        }                                                                                         \
    }

KQ_INLINE void q4_K_4xn_pass(int64_t n, const uint8_t *w, size_t row_bytes, const uint8_t *a,
                             size_t a_stride, const int T, float *out, size_t out_stride) {
    qk45_4xn_pass(n, w, row_bytes, a, a_stride, T, out, out_stride, 0);
}

KQ_INLINE void q5_K_4xn_pass(int64_t n, const uint8_t *w, size_t row_bytes, const uint8_t *a,
                             size_t a_stride, const int T, float *out, size_t out_stride) {
    qk45_4xn_pass(n, w, row_bytes, a, a_stride, T, out, out_stride, 1);
}

KQ_4XN_ENTRY(infer_vec_dot_4xn_q4_K_q8_K_avx512, q4_K_4xn_pass)
KQ_4XN_ENTRY(infer_vec_dot_4xn_q5_K_q8_K_avx512, q5_K_4xn_pass)

#define RX8_MAX_NB (INFER_DOT_RX8_MAX_N / QK_K)


/* Eight tokens in the lanes: per super-block, the tokens' d (dy) and their bsums
 * sums of 32 with token k of group g (tokens 4g..4g+3) in unit k of lane L (pair L). */
KQ_INLINE void qk45_rx8(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *a,
                        size_t a_stride, float *out, size_t out_stride, const int five) {
    const int64_t nb = n / QK_K;
    const uint8_t *ab = (const uint8_t *)a;
    __m512i bsT[RX8_MAX_NB][2];
    __m256 dy[RX8_MAX_NB];
    const __m512i transpose = unit_transpose();
    for (int64_t i = 0; i < nb; i++) {
        float d[8];
        __m128i bs[8];
        for (int t = 0; t < 8; t++) {
            const block_q8_K *y = (const block_q8_K *)(ab + t * a_stride) + i;
            d[t] = y->d;
            bs[t] = q8_K_bsums32(y);
        }
        dy[i] = _mm256_loadu_ps(d);
        for (int g = 0; g < 2; g++) {
            const __m512i r = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(bs[4 * g]), bs[4 * g + 1], 1)),
                _mm256_inserti128_si256(_mm256_castsi128_si256(bs[4 * g + 2]), bs[4 * g + 3], 1), 1);
            bsT[i][g] = _mm512_permutexvar_epi32(transpose, r);
        }
    }
    for (int64_t row = 0; row < n_rows; row++) {
        const uint8_t *xr = (const uint8_t *)w + row * row_bytes;
        if (row + INFER_PREFETCH_ROWS < n_rows) infer_prefetch_lines(xr + INFER_PREFETCH_ROWS * row_bytes, row_bytes);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; i++) {
            /* d, dmin and scales sit alike in both formats */
            const block_q4_K *xi = (const block_q4_K *)(xr + i * (five ? sizeof(block_q5_K) : sizeof(block_q4_K)));
            const __m512i sm = _mm512_broadcast_i32x4(infer_q4_K_unpack_scales_sse(xi->scales));
            q4_K_unpacked u;
            if (five)
                q5_K_unpack_q((const block_q5_K *)xi, &u);
            else
                q4_K_unpack_q(xi, &u);
            q4_K_scale_vectors(sm, u.sc, 0);
            __m512i s[8];
            for (int t = 0; t < 8; t++) s[t] = kq_dot_partials(u.q, u.sc, ((const block_q8_K *)(ab + t * a_stride) + i)->qs);
            const __m512i mins = q4_K_min_pairs(sm);
            const __m512 f = _mm512_cvtepi32_ps(fold4_lanes(sum4_by_lane(s[0], s[1], s[2], s[3]),
                                                            sum4_by_lane(s[4], s[5], s[6], s[7]),
                                                            _mm512_madd_epi16(bsT[i][0], mins),
                                                            _mm512_madd_epi16(bsT[i][1], mins)));
            acc = _mm256_fmadd_ps(_mm512_castps512_ps256(f), _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(xi->d)), dy[i]), acc);
            acc = _mm256_fnmadd_ps(_mm512_extractf32x8_ps(f, 1), _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(xi->dmin)), dy[i]), acc);
        }
        float res[8];
        _mm256_storeu_ps(res, acc);
        for (int t = 0; t < 8; t++) out[t * out_stride + row] = res[t];
    }
}

static void infer_vec_dot_rx8_q4_K_q8_K_avx512(int64_t n, const void *w, size_t row_bytes, int64_t n_rows,
                                               const void *a, size_t a_stride, float *out, size_t out_stride) {
    qk45_rx8(n, w, row_bytes, n_rows, a, a_stride, out, out_stride, 0);
}

static void infer_vec_dot_rx8_q5_K_q8_K_avx512(int64_t n, const void *w, size_t row_bytes, int64_t n_rows,
                                               const void *a, size_t a_stride, float *out, size_t out_stride) {
    qk45_rx8(n, w, row_bytes, n_rows, a, a_stride, out, out_stride, 1);
}

/* Q6_K: S_i = Σ_j sc_j·Σ q·y - 32·Σ_j sc_j·bsums_j, all in int32.  The offset term
 * pairs up the 16 scales with the 16 bsums: unit u = sub-blocks 2u, 2u+1; lane L of
 * "a" takes unit 2L, of "b" unit 2L+1, one row (4xn) or token (rx8) per int32. */
KQ_INLINE void q6_K_4xn_pass(int64_t n, const uint8_t *w, size_t row_bytes, const uint8_t *a,
                             size_t a_stride, const int T, float *out, size_t out_stride) {
    const uint8_t *ahead = w + INFER_PREFETCH_ROWS * row_bytes;   /* see INFER_PREFETCH_ROWS */
    size_t fetched = 0;
    __m512i sc_idx[KQ_NSC];
    q6_K_scale_index(sc_idx);
    const __m512i gather_a = unit_gather8(0), gather_b = unit_gather8(1);
    const __m512i spread_a = unit_spread(0, 2), spread_b = unit_spread(1, 2);
    __m128 acc[INFER_DOT_4XN_MAX];
    for (int t = 0; t < T; t++) acc[t] = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *xb = w + i * sizeof(block_q6_K);
        infer_prefetch_part(ahead, &fetched, 4 * row_bytes, i, n / QK_K);
        __m256i sc16[4];
        float d[4];
        for (int k = 0; k < 4; k++) {
            const block_q6_K *x = (const block_q6_K *)(xb + k * row_bytes);
            sc16[k] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
            d[k] = _cvtsh_ss(x->d);
        }
        const __m128 d4 = _mm_loadu_ps(d);
        const __m512i p01 = _mm512_inserti64x4(_mm512_castsi256_si512(sc16[0]), sc16[1], 1);
        const __m512i p23 = _mm512_inserti64x4(_mm512_castsi256_si512(sc16[2]), sc16[3], 1);
        const __m512i sc_a = _mm512_permutex2var_epi32(p01, gather_a, p23);
        const __m512i sc_b = _mm512_permutex2var_epi32(p01, gather_b, p23);
        __m512i s[4][INFER_DOT_4XN_MAX];
        for (int k = 0; k < 4; k++) {
            q6_K_unpacked u;
            q6_K_unpack((const block_q6_K *)(xb + k * row_bytes), sc16[k], sc_idx, &u);
            for (int t = 0; t < T; t++)
                s[k][t] = kq_dot_partials(u.q, u.sc, ((const block_q8_K *)(a + t * a_stride) + i)->qs);
        }
        __m512i sums[INFER_DOT_4XN_MAX];
        for (int t = 0; t < T; t++) {
            const block_q8_K *y = (const block_q8_K *)(a + t * a_stride) + i;
            const __m512i bs = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y->bsums));
            const __m512i off = _mm512_dpwssd_epi32(_mm512_madd_epi16(sc_a, _mm512_permutexvar_epi32(spread_a, bs)),
                                                    sc_b, _mm512_permutexvar_epi32(spread_b, bs));
            sums[t] = _mm512_sub_epi32(sum4_by_lane(s[0][t], s[1][t], s[2][t], s[3][t]), _mm512_slli_epi32(off, 5));
        }
        for (int t = 0; t < T; t += 2) {
            const int t1 = t + 1 < T ? t + 1 : t;
            const __m512 f = _mm512_cvtepi32_ps(fold2_lanes(sums[t], sums[t1]));
            acc[t] = _mm_fmadd_ps(_mm512_castps512_ps128(f), _mm_mul_ps(d4, _mm_set1_ps(((const block_q8_K *)(a + t * a_stride) + i)->d)), acc[t]);
            if (t1 != t)
                acc[t1] = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 2),
                                       _mm_mul_ps(d4, _mm_set1_ps(((const block_q8_K *)(a + t1 * a_stride) + i)->d)), acc[t1]);
        }
    }
    for (int t = 0; t < T; t++) _mm_storeu_ps(out + t * out_stride, acc[t]);
}

KQ_4XN_ENTRY(infer_vec_dot_4xn_q6_K_q8_K_avx512, q6_K_4xn_pass)

static void infer_vec_dot_rx8_q6_K_q8_K_avx512(int64_t n, const void *w, size_t row_bytes, int64_t n_rows,
                                               const void *a, size_t a_stride, float *out, size_t out_stride) {
    const int64_t nb = n / QK_K;
    const uint8_t *ab = (const uint8_t *)a;
    __m512i bsT[RX8_MAX_NB][2][2];   /* [block][token group][a, b] */
    __m256 dy[RX8_MAX_NB];
    const __m512i gather_a = unit_gather8(0), gather_b = unit_gather8(1);
    const __m512i spread_a = unit_spread(0, 2), spread_b = unit_spread(1, 2);
    for (int64_t i = 0; i < nb; i++) {
        float d[8];
        __m256i bs[8];
        for (int t = 0; t < 8; t++) {
            const block_q8_K *y = (const block_q8_K *)(ab + t * a_stride) + i;
            d[t] = y->d;
            bs[t] = _mm256_loadu_si256((const __m256i *)y->bsums);
        }
        dy[i] = _mm256_loadu_ps(d);
        for (int g = 0; g < 2; g++) {
            const __m512i p01 = _mm512_inserti64x4(_mm512_castsi256_si512(bs[4 * g]), bs[4 * g + 1], 1);
            const __m512i p23 = _mm512_inserti64x4(_mm512_castsi256_si512(bs[4 * g + 2]), bs[4 * g + 3], 1);
            bsT[i][g][0] = _mm512_permutex2var_epi32(p01, gather_a, p23);
            bsT[i][g][1] = _mm512_permutex2var_epi32(p01, gather_b, p23);
        }
    }
    __m512i sc_idx[KQ_NSC];
    q6_K_scale_index(sc_idx);
    for (int64_t row = 0; row < n_rows; row++) {
        const block_q6_K *x = (const block_q6_K *)((const uint8_t *)w + row * row_bytes);
        if (row + INFER_PREFETCH_ROWS < n_rows) infer_prefetch_lines((const uint8_t *)x + INFER_PREFETCH_ROWS * row_bytes, row_bytes);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; i++) {
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
            q6_K_unpacked u;
            q6_K_unpack(&x[i], sc16, sc_idx, &u);
            __m512i s[8];
            for (int t = 0; t < 8; t++) s[t] = kq_dot_partials(u.q, u.sc, ((const block_q8_K *)(ab + t * a_stride) + i)->qs);
            const __m512i sc_a = _mm512_permutexvar_epi32(spread_a, _mm512_castsi256_si512(sc16));
            const __m512i sc_b = _mm512_permutexvar_epi32(spread_b, _mm512_castsi256_si512(sc16));
            __m512i sums[2];
            for (int g = 0; g < 2; g++) {
                const __m512i off = _mm512_dpwssd_epi32(_mm512_madd_epi16(bsT[i][g][0], sc_a), bsT[i][g][1], sc_b);
                sums[g] = _mm512_sub_epi32(sum4_by_lane(s[4 * g], s[4 * g + 1], s[4 * g + 2], s[4 * g + 3]),
                                           _mm512_slli_epi32(off, 5));
            }
            const __m512 f = _mm512_cvtepi32_ps(fold4_lanes(sums[0], sums[1], sums[0], sums[1]));
            acc = _mm256_fmadd_ps(_mm512_castps512_ps256(f), _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d)), dy[i]), acc);
        }
        float res[8];
        _mm256_storeu_ps(res, acc);
        for (int t = 0; t < 8; t++) out[t * out_stride + row] = res[t];
    }
}

void infer_fill_kquants_avx512(infer_kernel_table *t) {
    t->vec_dot[INFER_TYPE_Q4_K] = infer_vec_dot_q4_K_q8_K_avx512;
    t->vec_dot[INFER_TYPE_Q6_K] = infer_vec_dot_q6_K_q8_K_avx512;
    t->vec_dot_4[INFER_TYPE_Q4_K] = infer_vec_dot_4_q4_K_q8_K_avx512;
    t->vec_dot_4[INFER_TYPE_Q6_K] = infer_vec_dot_4_q6_K_q8_K_avx512;
    t->vec_dot_4xn[INFER_TYPE_Q4_K] = infer_vec_dot_4xn_q4_K_q8_K_avx512;
    t->vec_dot_4xn[INFER_TYPE_Q6_K] = infer_vec_dot_4xn_q6_K_q8_K_avx512;
    t->vec_dot_rx8[INFER_TYPE_Q4_K] = infer_vec_dot_rx8_q4_K_q8_K_avx512;
    t->vec_dot_rx8[INFER_TYPE_Q6_K] = infer_vec_dot_rx8_q6_K_q8_K_avx512;
    /* Q5_K's one- and four-row kernels are in kquants235_avx512.c */
    t->vec_dot_4xn[INFER_TYPE_Q5_K] = infer_vec_dot_4xn_q5_K_q8_K_avx512;
    t->vec_dot_rx8[INFER_TYPE_Q5_K] = infer_vec_dot_rx8_q5_K_q8_K_avx512;
}
#endif
