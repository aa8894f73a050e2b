/* kquants_avx512.c: Q4_K and Q6_K dot products with Q8_K, AVX-512 F/BW/VL + VNNI.
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

void infer_fill_kquants_avx512(infer_kernel_table *t) {
    t->vec_dot[INFER_TYPE_Q4_K] = infer_vec_dot_q4_K_q8_K_avx512;
    t->vec_dot[INFER_TYPE_Q6_K] = infer_vec_dot_q6_K_q8_K_avx512;
    t->vec_dot_4[INFER_TYPE_Q4_K] = infer_vec_dot_4_q4_K_q8_K_avx512;
    t->vec_dot_4[INFER_TYPE_Q6_K] = infer_vec_dot_4_q6_K_q8_K_avx512;
    /* The AVX2 four-row, n-token kernels this table inherits would replace these
     * (the mat-mul driver prefers them) with other numbers: keep the AVX-512 path. */
    t->vec_dot_4xn[INFER_TYPE_Q4_K] = NULL;
    t->vec_dot_4xn[INFER_TYPE_Q6_K] = NULL;
}
#endif
