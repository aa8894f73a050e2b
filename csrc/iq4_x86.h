/* iq4_x86.h: x86 SIMD kernels of IQ4_NL and MXFP4 (with Q8_0) and IQ4_XS (with Q8_K), written once
 * for two builds: iq4_avx2.c (ISA_SUFFIX avx2) and iq4_avx512.c (ISA_SUFFIX avx512,
 * X86_VNNI 1: the 8-bit dot steps become vpdpbusd, the scale steps vpdpwssd; that build
 * also has four-row vec_dot_4 kernels on 512-bit vectors, which the mat-vec uses).
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

KQ_INLINE __m256i levels_table_of(const int8_t *levels) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)levels));
}

KQ_INLINE __m256i levels_table(void) { return levels_table_of(infer_kvalues_iq4nl); }

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

/* MXFP4: IQ4_NL's steps with kvalues_mxfp4 (-12..12) and the E8M0 scale. */
static float KERNEL(vec_dot_mxfp4_q8_0)(int64_t n, const void *w, const void *a) {
    const block_mxfp4 *x = w;
    const block_q8_0 *y = a;
    const __m256i table = levels_table_of(infer_kvalues_mxfp4);
    const int64_t nb = n / QK_MXFP4;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const __m256i p0 = dot_s8_i32(levels32(table, x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        const __m256i p1 = dot_s8_i32(levels32(table, x[b + 1].qs), _mm256_loadu_si256((const __m256i *)y[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(infer_e8m0_half(x[b].e) * _cvtsh_ss(y[b].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(infer_e8m0_half(x[b + 1].e) * _cvtsh_ss(y[b + 1].d)),
                               _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; b < nb; b++) {
        const __m256i p0 = dot_s8_i32(levels32(table, x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(infer_e8m0_half(x[b].e) * _cvtsh_ss(y[b].d)), _mm256_cvtepi32_ps(p0), acc0);
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

#if X86_VNNI
/* ---- AVX-512 mat-vec of IQ4_NL: four rows against one Q8_0 row ----------------
 * Two blocks per zmm: a nibble becomes its level + 128 (1..241, unsigned) by one
 * vpshufb, vpdpbusd takes it against the activations, and -128 Σ a (computed once
 * per pair of activation blocks for the four rows) starts the sum.  The int32 lanes
 * are scaled in float by d_w d_a of their block (the eight fp16 d of four rows and
 * two blocks converted together) and summed across lanes once per row. */
static void KERNEL(vec_dot_4_iq4_nl_q8_0)(int64_t n, const void *w, size_t row_bytes, const void *a,
                                          float *out) {
    const block_q8_0 *y = a;
    const uint8_t *x = w;
    const int64_t nb = n / QK4_NL;
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_add_epi8(_mm_loadu_si128((const __m128i *)infer_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    const __m512i m4 = _mm512_set1_epi8(0x0F), c128 = _mm512_set1_epi8((char)0x80);
    /* qs of block b in 128-bit lanes 0 and 1, of block b+1 in 2 and 3; lanes 1 and 3
     * shifted by 4 (high nibbles) */
    const __m512i dup = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);
    const __m512i shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    __m512i expand[4];
    for (int r = 0; r < 4; r++)
        expand[r] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * r)),
                                       _mm256_set1_epi32(2 * r + 1), 1);
    __m512 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
    /* Four blocks (72 bytes) per row at a time: two 64-byte loads, at 0 and 8, and one
     * vpermt2w put block j's qs in 128-bit lane j (block j's qs are words 9j+1..9j+8;
     * word v of the second load is word v+4 of the blocks), one vpermw its d over the
     * four int32 lanes of lane j.  The low nibbles are one run, the high another,
     * against activations rearranged alike (elements 0..15, 16..31 of four blocks). */
    int16_t qi[32], di[32];
    for (int j = 0; j < 4; j++)
        for (int t = 0; t < 8; t++) {
            const int word = 9 * j + 1 + t;
            qi[8 * j + t] = (int16_t)(word < 32 ? word : 32 + word - 4);
        }
    for (int t = 0; t < 32; t++) di[t] = (int16_t)(t < 16 ? 9 * (t / 4) : 0);
    const __m512i qidx = _mm512_loadu_si512((const void *)qi), didx = _mm512_loadu_si512((const void *)di);
    const __m512i spread4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    int64_t b = 0;
    const uint8_t *ahead = x + INFER_PREFETCH_ROWS * row_bytes;   /* see INFER_PREFETCH_ROWS */
    size_t fetched = 0;
    for (; b + 4 <= nb; b += 4) {
        infer_prefetch_part(ahead, &fetched, 4 * row_bytes, b / 4, nb / 4);
        const __m512i a0 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[b].qs)),
                                              _mm256_loadu_si256((const __m256i *)y[b + 1].qs), 1);
        const __m512i a1 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[b + 2].qs)),
                                              _mm256_loadu_si256((const __m256i *)y[b + 3].qs), 1);
        const __m512i ylo = _mm512_shuffle_i64x2(a0, a1, 0x88), yhi = _mm512_shuffle_i64x2(a0, a1, 0xDD);
        const __m512i off = _mm512_sub_epi32(
            _mm512_setzero_si512(),
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, ylo), c128, yhi));
        const __m128i ydh = _mm_setr_epi16((short)y[b].d, (short)y[b + 1].d, (short)y[b + 2].d, (short)y[b + 3].d,
                                           0, 0, 0, 0);
        const __m512 dy = _mm512_permutexvar_ps(spread4, _mm512_castps128_ps512(_mm_cvtph_ps(ydh)));
        for (int r = 0; r < 4; r++) {
            const uint8_t *xb = x + r * row_bytes + b * sizeof(block_iq4_nl);
            const __m512i l0 = _mm512_loadu_si512((const void *)xb), l1 = _mm512_loadu_si512((const void *)(xb + 8));
            const __m512i q = _mm512_permutex2var_epi16(l0, qidx, l1);
            const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            __m512i p = _mm512_dpbusd_epi32(off, _mm512_shuffle_epi8(table, lo), ylo);
            p = _mm512_dpbusd_epi32(p, _mm512_shuffle_epi8(table, hi), yhi);
            const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(didx, l0))), dy);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[r]);
        }
    }
    for (; b + 2 <= nb; b += 2) {
        const __m512i yv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[b].qs)),
                                              _mm256_loadu_si256((const __m256i *)y[b + 1].qs), 1);
        const __m512i off = _mm512_sub_epi32(_mm512_setzero_si512(),
                                             _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, yv));
        const block_iq4_nl *xr[4];
        for (int r = 0; r < 4; r++) xr[r] = (const block_iq4_nl *)(x + r * row_bytes) + b;
        /* d_w of (row r, block b + j) in lane 2r + j, times d_a of block b + j */
        const __m128i dh = _mm_setr_epi16((short)xr[0][0].d, (short)xr[0][1].d, (short)xr[1][0].d, (short)xr[1][1].d,
                                          (short)xr[2][0].d, (short)xr[2][1].d, (short)xr[3][0].d, (short)xr[3][1].d);
        const __m128i ydh = _mm_setr_epi16((short)y[b].d, (short)y[b + 1].d, 0, 0, 0, 0, 0, 0);
        const __m256 dy = _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(_mm_cvtph_ps(ydh))));
        const __m512 d = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_cvtph_ps(dh), dy));
        for (int r = 0; r < 4; r++) {
            const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)xr[r][0].qs)),
                                                      _mm_loadu_si128((const __m128i *)xr[r][1].qs), 1);
            const __m512i idx = _mm512_and_si512(
                _mm512_srlv_epi64(_mm512_permutexvar_epi64(dup, _mm512_castsi256_si512(q)), shift), m4);
            const __m512i p = _mm512_dpbusd_epi32(off, _mm512_shuffle_epi8(table, idx), yv);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(expand[r], d), acc[r]);
        }
    }
    float tail[4] = {0.f, 0.f, 0.f, 0.f};
    if (b < nb) {   /* an odd last block: the one-row kernel's steps */
        const __m256i t256 = levels_table();
        const __m256i yv = _mm256_loadu_si256((const __m256i *)y[b].qs);
        for (int r = 0; r < 4; r++) {
            const block_iq4_nl *xb = (const block_iq4_nl *)(x + r * row_bytes) + b;
            tail[r] = _cvtsh_ss(xb->d) * _cvtsh_ss(y[b].d) * (float)hsum_epi32(dot_s8_i32(levels32(t256, xb->qs), yv));
        }
    }
    for (int r = 0; r < 4; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + tail[r];
}

/* The eight scales ls - 32 of an IQ4_XS block as int16, from its first 8 bytes (d,
 * scales_h, scales_l): low nibbles by a byte spread and per-lane shifts, top bits
 * by per-lane shifts of scales_h. */
KQ_INLINE __m128i iq4_xs_scales_simd(const block_iq4_xs *b) {
    const __m128i v = _mm_loadl_epi64((const __m128i *)b);
    const __m128i lo = _mm_and_si128(
        _mm_srlv_epi16(_mm_shuffle_epi8(v, _mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1)),
                       _mm_setr_epi16(0, 4, 0, 4, 0, 4, 0, 4)),
        _mm_set1_epi16(0x0F));
    const __m128i hi = _mm_and_si128(
        _mm_srlv_epi16(_mm_shuffle_epi8(v, _mm_setr_epi8(2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3)),
                       _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)),
        _mm_set1_epi16(3));
    return _mm_sub_epi16(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi16(32));
}

/* IQ4_XS: four rows against one Q8_K row.  64 bytes of qs are four sub-blocks, one per
 * 128-bit lane: their low nibbles (elements 0..15 of each) are one run, their high
 * nibbles (16..31) another, against activations rearranged alike once for the four
 * rows.  A nibble becomes level + 128 (unsigned) by one vpshufb; two vpdpbusd give
 * each 128-bit lane the dot of one sub-block, one vpmulld its scale; the -128 offset
 * is -128 Σ_j ls_j (bsums[2j] + bsums[2j+1]), folded into the int32 sum.  Each row's
 * super-block sum S is then exact (|S| < 2^28) and scaled by one fma,
 * acc = fma((float)S, d_w * d_y, acc): the operation of the repacked IQ4_XS_R16
 * kernel (csrc/repack_k.h), in the same order, so both give the same bits. */
static void KERNEL(vec_dot_4_iq4_xs_q8_K)(int64_t n, const void *w, size_t row_bytes, const void *a,
                                          float *out) {
    const block_q8_K *y = a;
    const uint8_t *x = w;
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_add_epi8(_mm_loadu_si128((const __m128i *)infer_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    const __m512i m15 = _mm512_set1_epi8(0x0F);
    /* int32 scale of sub-block 4m + j over the four lanes of 128-bit lane j */
    const __m512i spread[2] = {_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                               _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)};
    __m128 acc = _mm_setzero_ps();   /* lane r: row r */
    const uint8_t *ahead = x + INFER_PREFETCH_ROWS * row_bytes;   /* see INFER_PREFETCH_ROWS */
    size_t fetched = 0;
    for (int64_t i = 0; i < n / QK_K; i++, x += sizeof(block_iq4_xs)) {
        infer_prefetch_part(ahead, &fetched, 4 * row_bytes, i, n / QK_K);
        __m512i q8lo[2], q8hi[2];
        for (int m = 0; m < 2; m++) {
            const __m512i a0 = _mm512_loadu_si512((const void *)(y[i].qs + 128 * m));
            const __m512i a1 = _mm512_loadu_si512((const void *)(y[i].qs + 128 * m + 64));
            q8lo[m] = _mm512_shuffle_i64x2(a0, a1, 0x88);
            q8hi[m] = _mm512_shuffle_i64x2(a0, a1, 0xDD);
        }
        const __m128i bs8 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[i].bsums),
                                           _mm_loadu_si128((const __m128i *)y[i].bsums + 1));
        const float dy = y[i].d;
        __m512i sums[4];
        float dd[4];
        for (int r = 0; r < 4; r++) {
            const block_iq4_xs *b = (const block_iq4_xs *)(x + r * row_bytes);
            const __m128i ls = iq4_xs_scales_simd(b);
            const __m512i ls32 = _mm512_castsi256_si512(_mm256_cvtepi16_epi32(ls));
            const __m128i corr = _mm_slli_epi32(_mm_madd_epi16(ls, bs8), 7);   /* |.| < 2^31 */
            __m512i sumi = _mm512_zextsi128_si512(_mm_sub_epi32(_mm_setzero_si128(), corr));
            for (int m = 0; m < 2; m++) {
                const __m512i q = _mm512_loadu_si512((const void *)(b->qs + 64 * m));
                const __m512i lo = _mm512_and_si512(q, m15), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m15);
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_shuffle_epi8(table, lo), q8lo[m]);
                p = _mm512_dpbusd_epi32(p, _mm512_shuffle_epi8(table, hi), q8hi[m]);
                sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, _mm512_permutexvar_epi32(spread[m], ls32)));
            }
            sums[r] = sumi;
            dd[r] = _cvtsh_ss(b->d) * dy;
        }
        const __m128i S = hsum4_epi32_512(sums[0], sums[1], sums[2], sums[3]);
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(S), _mm_loadu_ps(dd), acc);
    }
    _mm_storeu_ps(out, acc);
}
#endif

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

KQ_INLINE void dequantize_mxfp4(const block_mxfp4 *x, void *dst, int64_t n, int f16) {
    const __m256i table = levels_table_of(infer_kvalues_mxfp4);
    for (int64_t b = 0; b < n / QK_MXFP4; b++) {
        const float d = infer_e8m0_half(x[b].e);
        emit32_s8(dst, 32 * b, levels32(table, x[b].qs), d, d, f16);
    }
}

KQ_DEQUANTIZERS(KERNEL(dequantize_iq4_nl), KERNEL(dequantize_f16_iq4_nl), dequantize_iq4_nl)
KQ_DEQUANTIZERS(KERNEL(dequantize_mxfp4), KERNEL(dequantize_f16_mxfp4), dequantize_mxfp4)
KQ_DEQUANTIZERS(KERNEL(dequantize_iq4_xs), KERNEL(dequantize_f16_iq4_xs), dequantize_iq4_xs)

static void KERNEL(fill_iq4_x86)(infer_kernel_table *t) {
    t->vec_dot[INFER_TYPE_IQ4_NL] = KERNEL(vec_dot_iq4_nl_q8_0);
    t->vec_dot[INFER_TYPE_IQ4_XS] = KERNEL(vec_dot_iq4_xs_q8_K);
#if X86_VNNI
    t->vec_dot_4[INFER_TYPE_IQ4_NL] = KERNEL(vec_dot_4_iq4_nl_q8_0);
    t->vec_dot_4_prefetches[INFER_TYPE_IQ4_NL] = 1;
    t->vec_dot_4[INFER_TYPE_IQ4_XS] = KERNEL(vec_dot_4_iq4_xs_q8_K);
    t->vec_dot_4_prefetches[INFER_TYPE_IQ4_XS] = 1;
#endif
    t->dequantize[INFER_TYPE_IQ4_NL] = KERNEL(dequantize_iq4_nl);
    t->dequantize[INFER_TYPE_IQ4_XS] = KERNEL(dequantize_iq4_xs);
    t->dequantize_f16[INFER_TYPE_IQ4_NL] = KERNEL(dequantize_f16_iq4_nl);
    t->dequantize_f16[INFER_TYPE_IQ4_XS] = KERNEL(dequantize_f16_iq4_xs);
    t->vec_dot[INFER_TYPE_MXFP4] = KERNEL(vec_dot_mxfp4_q8_0);
    t->dequantize[INFER_TYPE_MXFP4] = KERNEL(dequantize_mxfp4);
    t->dequantize_f16[INFER_TYPE_MXFP4] = KERNEL(dequantize_f16_mxfp4);
}

#endif
