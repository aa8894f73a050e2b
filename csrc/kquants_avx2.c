/* kquants_avx2.c: Q4_K and Q6_K dequantize and dot products with Q8_K, AVX2 + FMA + F16C.
 *
 * Dot products: unsigned weight quants times signed Q8_K quants with maddubs (pairs
 * into int16), then madd against the int16 sub-block scales (into int32), one int32
 * vector per super-block, scaled by d_w*d_a in float.  The offsets (Q4_K's min,
 * Q6_K's -32) are taken out with Q8_K's bsums once per super-block instead of per
 * element.  Dequantizers do the scalar file's float operations, so they give the
 * same bits (Q4_K's d*sc*q is exact in f32: 11+6+4 significant bits, so it makes
 * no difference whether the compiler fuses the subtraction of dmin*m).
 * Q8_K's quantizer (once per mat-vec input) gives the scalar one's bytes; the weight
 * quantizers are the scalar ones.
 */
#include "infer_kernels.h"
#include "kquants_internal.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "x86_vec.h"

/* ---- Q4_K ------------------------------------------------------------------- */

static float infer_vec_dot_q4_K_q8_K_avx2(int64_t n, const void *w, const void *a) {
    const block_q4_K *x = w;
    const block_q8_K *y = a;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = _cvtsh_ss(x[i].d) * y[i].d;
        const float dmin = _cvtsh_ss(x[i].dmin) * y[i].d;
        const __m256i scales = infer_q4_K_scales_and_mins(x[i].scales, &y[i], dmin, &acc_m);
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < QK_K / 64; j++, q4 += 32, q8 += 64) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)q4);
            const __m256i lo = _mm256_and_si256(q, low4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8));
            __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            p_lo = _mm256_madd_epi16(p_lo, _mm256_shuffle_epi8(scales, lane_mask(2 * j)));
            p_hi = _mm256_madd_epi16(p_hi, _mm256_shuffle_epi8(scales, lane_mask(2 * j + 1)));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc) - hsum_ps128(acc_m);
}

/* Tokens one row's unpacked super-block serves at once: vec_dot_4xn's up to
 * INFER_DOT_4XN_MAX, vec_dot_rx8's 8. */
#define ROW_TOKENS_MAX 8

/* One Q4_K row against n_tok <= ROW_TOKENS_MAX tokens (a_stride bytes apart):
 * the row's nibbles, scales and mins are unpacked once per super-block for all the
 * tokens.  Per token the operations are infer_vec_dot_q4_K_q8_K_avx2's, in its
 * order (the integer sums are exact in any order), so each result has its bits. */
static void q4_K_row_tokens(int64_t n, const block_q4_K *x, const uint8_t *a, size_t a_stride,
                            int n_tok, float *out, size_t out_stride) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[ROW_TOKENS_MAX];
    __m128 acc_m[ROW_TOKENS_MAX];
    for (int t = 0; t < n_tok; t++) acc[t] = _mm256_setzero_ps(), acc_m[t] = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float xd = _cvtsh_ss(x[i].d), xdmin = _cvtsh_ss(x[i].dmin);
        const __m128i sm = infer_q4_K_unpack_scales_sse(x[i].scales);
        const __m128i mins16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        __m256i q[QK_K / 32], sc[QK_K / 32];   /* 32-element runs: nibbles, scale lanes */
        for (int j = 0; j < QK_K / 64; j++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            q[2 * j] = _mm256_and_si256(v, low4);
            q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            sc[2 * j] = _mm256_shuffle_epi8(scales, lane_mask(2 * j));
            sc[2 * j + 1] = _mm256_shuffle_epi8(scales, lane_mask(2 * j + 1));
        }
        for (int t = 0; t < n_tok; t++) {
            const block_q8_K *y = (const block_q8_K *)(a + t * a_stride) + i;
            const float d = xd * y->d, dmin = xdmin * y->d;
            const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums),
                                              _mm_loadu_si128((const __m128i *)y->bsums + 1));
            acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(bs, mins16)), acc_m[t]);
            __m256i sumi = _mm256_setzero_si256();
            for (int r = 0; r < QK_K / 32; r++) {
                const __m256i p = _mm256_maddubs_epi16(q[r], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * r)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc[r]));
            }
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
    }
    for (int t = 0; t < n_tok; t++) out[t * out_stride] = hsum_ps(acc[t]) - hsum_ps128(acc_m[t]);
}

static void infer_vec_dot_4xn_q4_K_q8_K_avx2(int64_t n, const void *w, size_t row_bytes, const void *a,
                                             size_t a_stride, int n_tok, float *out, size_t out_stride) {
    for (int k = 0; k < 4; k++) {
        const block_q4_K *row = (const block_q4_K *)((const uint8_t *)w + k * row_bytes);
        /* one row ahead per row, not four at once: see INFER_PREFETCH_ROWS */
        infer_prefetch_lines((const uint8_t *)row + INFER_PREFETCH_ROWS * row_bytes, row_bytes);
        if (n_tok == 1)   /* nothing to share: the one-row kernel, same bits */
            out[k] = infer_vec_dot_q4_K_q8_K_avx2(n, row, a);
        else
            q4_K_row_tokens(n, row, a, a_stride, n_tok, out + k, out_stride);
    }
}

/* 32 unsigned bytes -> d*q - m, as four runs of eight. */
KQ_INLINE void emit32_u8(void *dst, int64_t at, __m256i q, __m256 d, __m256 m, int f16) {
    const __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {q0, _mm_srli_si128(q0, 8), q1, _mm_srli_si128(q1, 8)};
    for (int k = 0; k < 4; k++) {
        const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
        store8(dst, at + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d, v), m), f16);
    }
}

KQ_INLINE void dequantize_q4_K(const block_q4_K *x, void *dst, int64_t n, int f16) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sm[16];
        infer_q4_K_unpack_scales(x[i].scales, sm);
        const float d = _cvtsh_ss(x[i].d), dmin = _cvtsh_ss(x[i].dmin);
        for (int j = 0; j < QK_K / 64; j++, at += 64) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            emit32_u8(dst, at, _mm256_and_si256(q, low4), _mm256_set1_ps(d * sm[2 * j]),
                      _mm256_set1_ps(dmin * sm[8 + 2 * j]), f16);
            emit32_u8(dst, at + 32, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4),
                      _mm256_set1_ps(d * sm[2 * j + 1]), _mm256_set1_ps(dmin * sm[8 + 2 * j + 1]),
                      f16);
        }
    }
}

static void infer_dequantize_q4_K_avx2(const void *src, float *dst, int64_t n) {
    dequantize_q4_K(src, dst, n, 0);
}

static void infer_dequantize_f16_q4_K_avx2(const void *src, infer_half *dst, int64_t n) {
    dequantize_q4_K(src, dst, n, 1);
}

/* ---- Q6_K ------------------------------------------------------------------- */

/* The four 32-element runs of one 128-element half, as unsigned 6-bit values:
 * run k takes its low 4 bits from ql[32*(k&1)..] (low nibble for k < 2, high for
 * k >= 2) and its top 2 bits from bits 2k..2k+1 of qh. */
KQ_INLINE void unpack_q6_K_half(const uint8_t *ql, const uint8_t *qh, __m256i q[4]) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    /* 16-bit shifts move bits across bytes; the 0x30 mask keeps only each byte's own */
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4),
                           _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                           _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                           _mm256_and_si256(h, bits45));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45));
}

/* Σ_j sc_j·Σ (q-32)·a = Σ_j sc_j·Σ q·a - 32·Σ_j sc_j·bsums_j */
static float infer_vec_dot_q6_K_q8_K_avx2(int64_t n, const void *w, const void *a) {
    const block_q6_K *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = _cvtsh_ss(x[i].d) * y[i].d;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m256i offset = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[i].bsums));
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < QK_K / 128; h++) {
            const __m256i scales = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11)
                                     : _mm256_permute2x128_si256(sc16, sc16, 0x00);
            __m256i q[4];
            unpack_q6_K_half(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
            const int8_t *q8 = y[i].qs + 128 * h;
            for (int k = 0; k < 4; k++) {
                const __m256i p = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(q8 + 32 * k)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_shuffle_epi8(scales, pair_mask(k))));
            }
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* One Q6_K row against n_tok tokens, unpacked once per super-block: per token the
 * operations of infer_vec_dot_q6_K_q8_K_avx2 (see q4_K_row_tokens). */
static void q6_K_row_tokens(int64_t n, const block_q6_K *x, const uint8_t *a, size_t a_stride,
                            int n_tok, float *out, size_t out_stride) {
    __m256 acc[ROW_TOKENS_MAX];
    for (int t = 0; t < n_tok; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float xd = _cvtsh_ss(x[i].d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        __m256i q[QK_K / 32], sc[QK_K / 32];
        for (int h = 0; h < QK_K / 128; h++) {
            const __m256i scales = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11)
                                     : _mm256_permute2x128_si256(sc16, sc16, 0x00);
            unpack_q6_K_half(x[i].ql + 64 * h, x[i].qh + 32 * h, q + 4 * h);
            for (int k = 0; k < 4; k++) sc[4 * h + k] = _mm256_shuffle_epi8(scales, pair_mask(k));
        }
        for (int t = 0; t < n_tok; t++) {
            const block_q8_K *y = (const block_q8_K *)(a + t * a_stride) + i;
            const float d = xd * y->d;
            const __m256i offset = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
            __m256i sumi = _mm256_setzero_si256();
            for (int r = 0; r < QK_K / 32; r++) {
                const __m256i p = _mm256_maddubs_epi16(q[r], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * r)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc[r]));
            }
            sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
    }
    for (int t = 0; t < n_tok; t++) out[t * out_stride] = hsum_ps(acc[t]);
}

static void infer_vec_dot_4xn_q6_K_q8_K_avx2(int64_t n, const void *w, size_t row_bytes, const void *a,
                                             size_t a_stride, int n_tok, float *out, size_t out_stride) {
    for (int k = 0; k < 4; k++) {
        const block_q6_K *row = (const block_q6_K *)((const uint8_t *)w + k * row_bytes);
        /* one row ahead per row, not four at once: see INFER_PREFETCH_ROWS */
        infer_prefetch_lines((const uint8_t *)row + INFER_PREFETCH_ROWS * row_bytes, row_bytes);
        if (n_tok == 1)   /* nothing to share: the one-row kernel, same bits */
            out[k] = infer_vec_dot_q6_K_q8_K_avx2(n, row, a);
        else
            q6_K_row_tokens(n, row, a, a_stride, n_tok, out + k, out_stride);
    }
}

/* 16 signed bytes (the low half of q) -> ds*q, as two runs of eight. */
KQ_INLINE void emit16_i8(void *dst, int64_t at, __m128i q, float ds, int f16) {
    const __m256 s = _mm256_set1_ps(ds);
    store8(dst, at, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))), f16);
    store8(dst, at + 8, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)))), f16);
}

KQ_INLINE void dequantize_q6_K(const block_q6_K *x, void *dst, int64_t n, int f16) {
    const __m256i m32 = _mm256_set1_epi8(32);
    int64_t at = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = _cvtsh_ss(x[i].d);
        for (int h = 0; h < QK_K / 128; h++) {
            const int8_t *sc = x[i].scales + 8 * h;
            __m256i q[4];
            unpack_q6_K_half(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
            for (int k = 0; k < 4; k++, at += 32) {
                const __m256i v = _mm256_sub_epi8(q[k], m32);
                emit16_i8(dst, at, _mm256_castsi256_si128(v), d * sc[2 * k], f16);
                emit16_i8(dst, at + 16, _mm256_extracti128_si256(v, 1), d * sc[2 * k + 1], f16);
            }
        }
    }
}

static void infer_dequantize_q6_K_avx2(const void *src, float *dst, int64_t n) {
    dequantize_q6_K(src, dst, n, 0);
}

static void infer_dequantize_f16_q6_K_avx2(const void *src, infer_half *dst, int64_t n) {
    dequantize_q6_K(src, dst, n, 1);
}

/* ---- Q8_K ------------------------------------------------------------------- */

/* quantize_row_q8_K_ref: max = the first element of largest |x| (sign kept),
 * q = nearest_int(-127/max * x) (cvtps rounds to nearest even, as nearest_int),
 * bsums = sums of 16.  Same bytes as the scalar quantizer. */
static void infer_quantize_q8_K_avx2(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i ones = _mm256_set1_epi16(1);
    /* packs works within 128-bit lanes; this restores element order */
    const __m256i unzip = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int k = 0; k < QK_K / 8; k++)
            vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int at = 0;
        for (int k = 0; k < QK_K / 8; k++) {
            const __m256 ax = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k));
            const int hits = _mm256_movemask_ps(_mm256_cmp_ps(ax, _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (hits) {
                at = 8 * k + kq_lowest_bit((unsigned)hits);
                break;
            }
        }
        const float iscale = -127.f / x[at];
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int c = 0; c < QK_K / 64; c++) {
            __m256i h[2];
            for (int s = 0; s < 2; s++) {
                const float *xs = x + 64 * c + 32 * s;
                __m256i v[4];
                for (int j = 0; j < 4; j++)
                    v[j] = _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(xs + 8 * j)));
                /* |v| <= 127, so the saturating packs are exact */
                const __m256i p01 = _mm256_packs_epi32(v[0], v[1]);  /* elements 0..15, permuted */
                const __m256i p23 = _mm256_packs_epi32(v[2], v[3]);  /* elements 16..31 */
                const __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), unzip);
                _mm256_storeu_si256((__m256i *)(y[i].qs + 64 * c + 32 * s), q);
                h[s] = _mm256_hadd_epi32(_mm256_madd_epi16(p01, ones), _mm256_madd_epi16(p23, ones));
            }
            /* two more pairwise sums leave one total per group of 16, split over the
             * 128-bit halves: groups 4c..4c+3 = low + high */
            const __m256i hh = _mm256_hadd_epi32(h[0], h[1]);
            const __m128i sums = _mm_add_epi32(_mm256_castsi256_si128(hh), _mm256_extracti128_si256(hh, 1));
            _mm_storel_epi64((__m128i *)(y[i].bsums + 4 * c), _mm_packs_epi32(sums, sums));
        }
        y[i].d = 1 / iscale;
    }
}

/* n_rows rows against 8 tokens: each row's super-block unpacked once for the 8 (the
 * per-token operations of the 4xn kernels above, so the same bits as their one-token
 * results, which are the one-row kernel's). */
#define KQ_RX8_KERNEL(name, block_type, row_tokens)                                               \
    static void name(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *a,    \
                     size_t a_stride, float *out, size_t out_stride) {                             \
        for (int64_t row = 0; row < n_rows; row++) {                                               \
            const uint8_t *x = (const uint8_t *)w + row * row_bytes;                               \
            if (row + INFER_PREFETCH_ROWS < n_rows)                                                \
                infer_prefetch_lines(x + INFER_PREFETCH_ROWS * row_bytes, row_bytes);              \
            row_tokens(n, (const block_type *)x, a, a_stride, 8, out + row, out_stride);          \
        }                                                                                          \
    }

KQ_RX8_KERNEL(infer_vec_dot_rx8_q4_K_q8_K_avx2, block_q4_K, q4_K_row_tokens)
KQ_RX8_KERNEL(infer_vec_dot_rx8_q6_K_q8_K_avx2, block_q6_K, q6_K_row_tokens)

void infer_fill_kquants_avx2(infer_kernel_table *t) {
    t->dequantize[INFER_TYPE_Q4_K] = infer_dequantize_q4_K_avx2;
    t->dequantize_f16[INFER_TYPE_Q4_K] = infer_dequantize_f16_q4_K_avx2;
    t->vec_dot[INFER_TYPE_Q4_K] = infer_vec_dot_q4_K_q8_K_avx2;
    t->vec_dot_4xn[INFER_TYPE_Q4_K] = infer_vec_dot_4xn_q4_K_q8_K_avx2;
    t->dequantize[INFER_TYPE_Q6_K] = infer_dequantize_q6_K_avx2;
    t->dequantize_f16[INFER_TYPE_Q6_K] = infer_dequantize_f16_q6_K_avx2;
    t->vec_dot[INFER_TYPE_Q6_K] = infer_vec_dot_q6_K_q8_K_avx2;
    t->vec_dot_4xn[INFER_TYPE_Q6_K] = infer_vec_dot_4xn_q6_K_q8_K_avx2;
    t->quantize[INFER_TYPE_Q8_K] = infer_quantize_q8_K_avx2;
    t->vec_dot_rx8[INFER_TYPE_Q4_K] = infer_vec_dot_rx8_q4_K_q8_K_avx2;
    t->vec_dot_rx8[INFER_TYPE_Q6_K] = infer_vec_dot_rx8_q6_K_q8_K_avx2;
}
#endif
