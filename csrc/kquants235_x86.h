/* kquants235_x86.h: x86 SIMD kernels of Q2_K, Q3_K and Q5_K (with Q8_K activations),
 * written once for two builds: kquants235_avx2.c includes it with ISA_SUFFIX avx2,
 * kquants235_avx512.c with ISA_SUFFIX avx512 and X86_VNNI 1, which fuses each
 * "multiply int16 pairs by the sub-block scales and accumulate" into one VNNI
 * vpdpwssd on 256-bit vectors (AVX512VL) and adds four-row vec_dot_4 kernels on 512-bit
 * vectors (see "AVX-512 mat-vec" below).
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

#include "x86_vec.h"

#define K235_CAT2(a, b) a##_##b
#define K235_CAT(a, b) K235_CAT2(a, b)
#define KERNEL(name) K235_CAT(name, ISA_SUFFIX)

#ifndef X86_VNNI
#define X86_VNNI 0
#endif

/* acc + Σ of int16 pairs p * scales, as 8 int32 lanes. */
KQ_INLINE __m256i madd_acc(__m256i acc, __m256i p, __m256i scales) {
#if X86_VNNI
    return _mm256_dpwssd_epi32(acc, p, scales);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, scales));
#endif
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

/* infer_q3_K_unpack_scales in a register: the four words built in general registers and
 * moved in with one set, not stored as bytes and read back with one wide load (a store
 * forward that fails and stalls every super-block). */
KQ_INLINE __m128i q3_K_scales_sse(const uint8_t *s) {
    const uint32_t low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    uint32_t w[3];
    memcpy(w, s, 12);
    const __m128i u = _mm_setr_epi32((int)((w[0] & low4) | ((w[2] & low2) << 4)),
                                     (int)((w[1] & low4) | (((w[2] >> 2) & low2) << 4)),
                                     (int)(((w[0] >> 4) & low4) | (((w[2] >> 4) & low2) << 4)),
                                     (int)(((w[1] >> 4) & low4) | (((w[2] >> 6) & low2) << 4)));
    return _mm_sub_epi8(u, _mm_set1_epi8(32));
}

/* Q3_K with unsigned quants u = q + 4 (0..7): Σ sc·q·a = Σ sc·u·a - 4 Σ_j sc_j·bsums_j. */
static float KERNEL(vec_dot_q3_K_q8_K)(int64_t n, const void *w, const void *a) {
    const block_q3_K *x = w;
    const block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float acc_c = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(q3_K_scales_sse(x[i].scales));
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
        const __m256i scales = infer_q4_K_scales_and_mins(x[i].scales, &y[i], dmin, &acc_m);
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
    return hsum_ps(acc) - hsum_ps128(acc_m);
}

#if X86_VNNI
/* ---- AVX-512 mat-vec: four rows against one activation row --------------------
 * A super-block's 256 quants are four zmm "runs": run k holds elements 32k..32k+31
 * (low 256 bits) and 128+32k..128+32k+31 (high 256 bits), which is what one 64-byte
 * load of Q2_K/Q3_K qs gives with the 2-bit field k of each byte.  The activation
 * runs are loaded once per super-block for the four rows; each row then takes four
 * vpmaddubsw + four vpdpwssd (the scales of its four sub-blocks of 16 in one
 * vpshufb), one int32 vector per row and super-block, scaled once in float. */

/* Bytes p[0..31] in the low half, p[128..159] in the high half. */
KQ_INLINE __m512i load_run512(const int8_t *p) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                              _mm256_loadu_si256((const __m256i *)(p + 128)), 1);
}

/* 16 int16 scales -> 128-bit lanes [s0..7, s0..7, s8..15, s8..15]. */
KQ_INLINE __m512i scale_lanes512(__m256i s16) {
    const __m512i z = _mm512_castsi256_si512(s16);
    return _mm512_shuffle_i64x2(z, z, 0x50);
}

/* vpshufb mask on scale_lanes512: run k's sub-blocks (2k, 2k+1, 8+2k, 9+2k), each
 * broadcast over its 8 int16 lanes. */
KQ_INLINE __m512i run_mask512(int k) { return _mm512_broadcast_i64x4(pair_mask(k)); }

/* Q2_K: per row and super-block the exact sums S = Σ sc·Σ q·y and M = Σ m·bsums, then
 * acc = fma((float)S, d_w * d_y, acc); acc = fnmadd((float)M, dmin_w * d_y, acc), the
 * operations of the repacked Q2_K_R16 kernel (repack_k.h). */
static void KERNEL(vec_dot_4_q2_K_q8_K)(int64_t n, const void *w, size_t row_bytes, const void *a,
                                        float *out) {
    const block_q8_K *y = a;
    const uint8_t *x = w;
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m256i m15 = _mm256_set1_epi16(0x0F);
    const __m512i mask[4] = {run_mask512(0), run_mask512(1), run_mask512(2), run_mask512(3)};
    __m128 acc = _mm_setzero_ps();   /* lane r: row r */
    const uint8_t *ahead = x + INFER_PREFETCH_ROWS * row_bytes;   /* see INFER_PREFETCH_ROWS */
    size_t fetched = 0;
    for (int64_t i = 0; i < n / QK_K; i++, x += sizeof(block_q2_K)) {
        infer_prefetch_part(ahead, &fetched, 4 * row_bytes, i, n / QK_K);
        const __m512i q8[4] = {load_run512(y[i].qs), load_run512(y[i].qs + 32), load_run512(y[i].qs + 64),
                               load_run512(y[i].qs + 96)};
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        const float dy = y[i].d;
        __m512i sums[4], mins[4];
        float dd[4], dm[4];
        for (int r = 0; r < 4; r++) {
            const block_q2_K *b = (const block_q2_K *)(x + r * row_bytes);
            const __m256i s16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
            const __m512i sc = scale_lanes512(_mm256_and_si256(s16, m15));
            const __m512i qv = _mm512_loadu_si512((const void *)b->qs);
            __m512i sumi = _mm512_setzero_si512();
            for (int k = 0; k < 4; k++) {
                const __m512i u = _mm512_and_si512(k ? _mm512_srli_epi16(qv, 2 * k) : qv, m3);
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(u, q8[k]), _mm512_shuffle_epi8(sc, mask[k]));
            }
            sums[r] = sumi;
            mins[r] = _mm512_zextsi256_si512(_mm256_madd_epi16(_mm256_srli_epi16(s16, 4), bs));
            dd[r] = _cvtsh_ss(b->d) * dy;
            dm[r] = _cvtsh_ss(b->dmin) * dy;
        }
        const __m128i S = hsum4_epi32_512(sums[0], sums[1], sums[2], sums[3]);
        const __m128i M = hsum4_epi32_512(mins[0], mins[1], mins[2], mins[3]);
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(S), _mm_loadu_ps(dd), acc);
        acc = _mm_fnmadd_ps(_mm_cvtepi32_ps(M), _mm_loadu_ps(dm), acc);
    }
    _mm_storeu_ps(out, acc);
}

/* infer_q3_K_unpack_scales in SIMD: the 16 signed 6-bit scales as bytes.  Reads the 16
 * bytes ending with the scales (the last 4 of qs first), so never past the block. */
KQ_INLINE __m128i q3_K_scales_simd(const block_q3_K *b) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(b->scales - 4));   /* [qs tail, w0, w1, w2] */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, 0x99), _mm_setr_epi32(0, 0, 4, 4)),
                                     _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, 0xFF), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(0x03));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi32(hi, 4)), _mm_set1_epi8(32));
}

/* Q3_K with unsigned quants u = q + 4 (0..7) as the one-row kernel; the -4 offset
 * (-4 Σ_j sc_j bsums_j) starts each row's int32 sum, so one float step per row and
 * super-block: the row's exact sum S, then acc = fma((float)S, d_w * d_y, acc), the
 * operation of the repacked Q3_K_R16 kernel (repack_k.h).  Bit 2 of u: hmask bit k
 * (low half) or 4+k (high half) of run k, tested into a mask register and added as 4. */
static void KERNEL(vec_dot_4_q3_K_q8_K)(int64_t n, const void *w, size_t row_bytes, const void *a,
                                        float *out) {
    const block_q8_K *y = a;
    const uint8_t *x = w;
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    const __m512i mask[4] = {run_mask512(0), run_mask512(1), run_mask512(2), run_mask512(3)};
    __m512i hbit[4];
    for (int k = 0; k < 4; k++)
        hbit[k] = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << k)), _mm256_set1_epi8((char)(1 << (4 + k))), 1);
    __m128 acc = _mm_setzero_ps();   /* lane r: row r */
    const uint8_t *ahead = x + INFER_PREFETCH_ROWS * row_bytes;   /* see INFER_PREFETCH_ROWS */
    size_t fetched = 0;
    for (int64_t i = 0; i < n / QK_K; i++, x += sizeof(block_q3_K)) {
        infer_prefetch_part(ahead, &fetched, 4 * row_bytes, i, n / QK_K);
        const __m512i q8[4] = {load_run512(y[i].qs), load_run512(y[i].qs + 32), load_run512(y[i].qs + 64),
                               load_run512(y[i].qs + 96)};
        /* -4 * bsums: |4 * 16 * 127| fits int16 */
        const __m256i bs4 = _mm256_sub_epi16(_mm256_setzero_si256(),
                                             _mm256_slli_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), 2));
        const float dy = y[i].d;
        __m512i sums[4];
        float dd[4];
        for (int r = 0; r < 4; r++) {
            const block_q3_K *b = (const block_q3_K *)(x + r * row_bytes);
            const __m256i s16 = _mm256_cvtepi8_epi16(q3_K_scales_simd(b));
            const __m512i sc = scale_lanes512(s16);
            const __m512i qv = _mm512_loadu_si512((const void *)b->qs);
            const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->hmask));
            __m512i sumi = _mm512_zextsi256_si512(_mm256_madd_epi16(s16, bs4));
            for (int k = 0; k < 4; k++) {
                const __m512i c = _mm512_and_si512(k ? _mm512_srli_epi16(qv, 2 * k) : qv, m3);
                const __m512i u = _mm512_mask_add_epi8(c, _mm512_test_epi8_mask(hb, hbit[k]), c, four);
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(u, q8[k]), _mm512_shuffle_epi8(sc, mask[k]));
            }
            sums[r] = sumi;
            dd[r] = _cvtsh_ss(b->d) * dy;
        }
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum4_epi32_512(sums[0], sums[1], sums[2], sums[3])), _mm_loadu_ps(dd), acc);
    }
    _mm_storeu_ps(out, acc);
}

/* Q5_K: 64 bytes of qs give two runs (low nibbles: elements 64j + l, high: 64j+32+l
 * for j = 0, 1 in the two halves), the fifth bit is qh bit 2j (2j+1) tested into a
 * mask register and added as 16; the mins go through Q8_K's bsums as in the one-row
 * kernel. */
static void KERNEL(vec_dot_4_q5_K_q8_K)(int64_t n, const void *w, size_t row_bytes, const void *a,
                                        float *out) {
    const block_q8_K *y = a;
    const uint8_t *x = w;
    const __m512i m15 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    /* run k: sub-blocks (lo, hi) = (0,2) (1,3) (4,6) (5,7); the same qh bits */
    static const int sub_lo[4] = {0, 1, 4, 5};
    __m512i mask[4], hbit[4];
    for (int k = 0; k < 4; k++) {
        const int lo = sub_lo[k], hi = lo + 2;
        mask[k] = _mm512_inserti64x4(_mm512_castsi256_si512(lane_mask(lo)), lane_mask(hi), 1);
        hbit[k] = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << lo)), _mm256_set1_epi8((char)(1 << hi)), 1);
    }
    __m512 acc[4];
    __m128 accm[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps(), accm[r] = _mm_setzero_ps();
    const uint8_t *ahead = x + INFER_PREFETCH_ROWS * row_bytes;   /* see INFER_PREFETCH_ROWS */
    size_t fetched = 0;
    for (int64_t i = 0; i < n / QK_K; i++, x += sizeof(block_q5_K)) {
        infer_prefetch_part(ahead, &fetched, 4 * row_bytes, i, n / QK_K);
        const int8_t *q8p = y[i].qs;
        const __m512i q8[4] = {_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q8p)),
                                                  _mm256_loadu_si256((const __m256i *)(q8p + 64)), 1),
                               _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q8p + 32))),
                                                  _mm256_loadu_si256((const __m256i *)(q8p + 96)), 1),
                               _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q8p + 128))),
                                                  _mm256_loadu_si256((const __m256i *)(q8p + 192)), 1),
                               _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q8p + 160))),
                                                  _mm256_loadu_si256((const __m256i *)(q8p + 224)), 1)};
        const __m128i bs8 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[i].bsums),
                                           _mm_loadu_si128((const __m128i *)y[i].bsums + 1));
        const __m128 dy = _mm_set1_ps(y[i].d);
        for (int r = 0; r < 4; r++) {
            const block_q5_K *b = (const block_q5_K *)(x + r * row_bytes);
            /* reads 16 bytes: the 12 scale bytes are followed by qh */
            const __m256i s16 = _mm256_cvtepu8_epi16(infer_q4_K_unpack_scales_sse(b->scales));
            const __m512i sc = _mm512_broadcast_i32x4(_mm256_castsi256_si128(s16));
            const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qh));
            const __m512i q0 = _mm512_loadu_si512((const void *)b->qs);
            const __m512i q1 = _mm512_loadu_si512((const void *)(b->qs + 64));
            const __m512i runs[4] = {_mm512_and_si512(q0, m15), _mm512_and_si512(_mm512_srli_epi16(q0, 4), m15),
                                     _mm512_and_si512(q1, m15), _mm512_and_si512(_mm512_srli_epi16(q1, 4), m15)};
            __m512i sumi = _mm512_setzero_si512();
            for (int k = 0; k < 4; k++) {
                const __m512i u = _mm512_mask_add_epi8(runs[k], _mm512_test_epi8_mask(hb, hbit[k]), runs[k], sixteen);
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(u, q8[k]), _mm512_shuffle_epi8(sc, mask[k]));
            }
            uint32_t dbits;
            memcpy(&dbits, &b->d, 4);   /* d, dmin */
            const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dbits)), dy);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(dd), acc[r]);
            const __m128i summ = _mm_madd_epi16(_mm256_extracti128_si256(s16, 1), bs8);
            accm[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(summ), _mm_shuffle_ps(dd, dd, 0x55), accm[r]);
        }
    }
    for (int r = 0; r < 4; r++) out[r] = _mm512_reduce_add_ps(acc[r]) - hsum_ps128(accm[r]);
}
#endif

/* ---- dequantizers ------------------------------------------------------------ */

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

KQ_DEQUANTIZERS(KERNEL(dequantize_q2_K), KERNEL(dequantize_f16_q2_K), dequantize_q2_K)
KQ_DEQUANTIZERS(KERNEL(dequantize_q3_K), KERNEL(dequantize_f16_q3_K), dequantize_q3_K)
KQ_DEQUANTIZERS(KERNEL(dequantize_q5_K), KERNEL(dequantize_f16_q5_K), dequantize_q5_K)

static void KERNEL(fill_kquants235_x86)(infer_kernel_table *t) {
    t->vec_dot[INFER_TYPE_Q2_K] = KERNEL(vec_dot_q2_K_q8_K);
    t->vec_dot[INFER_TYPE_Q3_K] = KERNEL(vec_dot_q3_K_q8_K);
    t->vec_dot[INFER_TYPE_Q5_K] = KERNEL(vec_dot_q5_K_q8_K);
#if X86_VNNI
    t->vec_dot_4[INFER_TYPE_Q2_K] = KERNEL(vec_dot_4_q2_K_q8_K);
    t->vec_dot_4_prefetches[INFER_TYPE_Q2_K] = 1;
    t->vec_dot_4[INFER_TYPE_Q3_K] = KERNEL(vec_dot_4_q3_K_q8_K);
    t->vec_dot_4_prefetches[INFER_TYPE_Q3_K] = 1;
    t->vec_dot_4[INFER_TYPE_Q5_K] = KERNEL(vec_dot_4_q5_K_q8_K);
    t->vec_dot_4_prefetches[INFER_TYPE_Q5_K] = 1;
#endif
    t->dequantize[INFER_TYPE_Q2_K] = KERNEL(dequantize_q2_K);
    t->dequantize[INFER_TYPE_Q3_K] = KERNEL(dequantize_q3_K);
    t->dequantize[INFER_TYPE_Q5_K] = KERNEL(dequantize_q5_K);
    t->dequantize_f16[INFER_TYPE_Q2_K] = KERNEL(dequantize_f16_q2_K);
    t->dequantize_f16[INFER_TYPE_Q3_K] = KERNEL(dequantize_f16_q3_K);
    t->dequantize_f16[INFER_TYPE_Q5_K] = KERNEL(dequantize_f16_q5_K);
}

#endif
