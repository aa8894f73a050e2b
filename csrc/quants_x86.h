/* quants_x86.h: x86 SIMD kernels of the 32-element block formats, written once for
 * two builds.  quants_avx2.c includes it with ISA_SUFFIX avx2 (AVX2, FMA, F16C);
 * quants_avx512.c with ISA_SUFFIX avx512 and X86_VNNI 1, which turns each 8-bit
 * dot step into one VNNI vpdpbusd on 256-bit vectors (AVX512VL) instead of the
 * vpmaddubsw + vpmaddwd pair.
 *
 * Both instructions multiply an unsigned byte by a signed byte.  Formats whose
 * weights are unsigned (Q4_1's nibbles 0..15) feed them directly; signed pairs
 * (Q4_0, Q5_0, Q8_0 against Q8 activations) use the sign trick: |x| * (y * sign x).
 *
 * Dequantizers are bit-exact with the scalar ones (every product d*q is exact in
 * float32 and Q4_1's "+ m" is one rounding, fused or not).  The Q8 activation
 * quantizers are bit-exact too: same float32 d and id, same x*id, rounded half away
 * from zero as roundf does.
 */
#ifndef QUANTS_X86_H
#define QUANTS_X86_H

#include "infer_kernels.h"

#include <immintrin.h>
#include <string.h>

#define X86_CAT2(a, b) a##_##b
#define X86_CAT(a, b) X86_CAT2(a, b)
#define KERNEL(name) X86_CAT(name, ISA_SUFFIX)

#ifndef X86_VNNI
#define X86_VNNI 0
#endif

static inline float half_to_float(infer_half h) { return _cvtsh_ss(h); }


static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* acc + sum of each group of 4 products u8 * s8, as 8 int32 lanes. */
static inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if X86_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    /* vpmaddubsw saturates pair sums to int16: callers keep u <= 128 (2*128*127 fits). */
    const __m256i p16 = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#endif
}

/* Signed x signed bytes via |x| * (y with x's sign); x = -128 never occurs in our formats. */
static inline __m256i dot_s8s8(__m256i acc, __m256i x, __m256i y) {
    return dot_u8s8(acc, _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* 32 nibbles of a Q4 block as bytes: lanes 0..15 the low nibbles (elements 0..15),
 * lanes 16..31 the high nibbles (elements 16..31). */
static inline __m256i unpack_nibbles(const uint8_t *qs) {
    /* Both halves hold qs (a broadcast load); shifting the upper half's 64-bit lanes
     * right by 4 brings each byte's high nibble down (what the next byte shifts in
     * lands in the high nibble, which the mask clears). */
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    const __m256i shifted = _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F));
}

/* Byte i = 0xFF if bit i of the 32-bit little-endian word at p is set, else 0. */
static inline __m256i bits_to_bytes(const uint8_t *p) {
    uint32_t bits;
    memcpy(&bits, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                           0x0101010101010101LL, 0x0000000000000000LL);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
}

/* Q5_0 element values minus 16, as signed bytes: nib | 0xF0 is nib - 16 when the
 * fifth bit is clear; with the bit set the value is nib itself. */
static inline __m256i unpack_q5_0(const block_q5_0 *b) {
    const __m256i lo = unpack_nibbles(b->qs);
    const __m256i hi = _mm256_andnot_si256(bits_to_bytes(b->qh), _mm256_set1_epi8((char)0xF0));
    return _mm256_or_si256(lo, hi);
}

/* Q5_0 element values as unsigned bytes 0..31 (the value is this minus 16).  With
 * AVX-512 BW the fifth bits are a byte mask as they stand: 16 is added under it. */
static inline __m256i unpack_q5_0_unsigned(const block_q5_0 *b) {
#if X86_VNNI
    uint32_t bits;
    memcpy(&bits, b->qh, 4);
    const __m256i nib = unpack_nibbles(b->qs);
    return _mm256_mask_add_epi8(nib, (__mmask32)bits, nib, _mm256_set1_epi8(16));
#else
    const __m256i hi = _mm256_and_si256(bits_to_bytes(b->qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(unpack_nibbles(b->qs), hi);
#endif
}

/* Q5_1 element values as unsigned bytes 0..31 (bits as Q5_0's, the value is d*q + m). */
static inline __m256i unpack_q5_1(const block_q5_1 *b) {
    const __m256i hi = _mm256_and_si256(bits_to_bytes(b->qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(unpack_nibbles(b->qs), hi);
}

/* ---- dequantize ------------------------------------------------------------------ */

/* Stores 32 signed bytes as floats times d. */
static inline void store_scaled_i8(float *dst, __m256i q, __m256 d) {
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(dst + 0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
}

static void KERNEL(dequantize_q4_0)(const void *src, float *dst, int64_t n) {
    const block_q4_0 *x = (const block_q4_0 *)src;
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < n / QK4_0; b++, dst += QK4_0)
        store_scaled_i8(dst, _mm256_sub_epi8(unpack_nibbles(x[b].qs), eight),
                        _mm256_set1_ps(half_to_float(x[b].d)));
}

static void KERNEL(dequantize_q4_1)(const void *src, float *dst, int64_t n) {
    const block_q4_1 *x = (const block_q4_1 *)src;
    for (int64_t b = 0; b < n / QK4_1; b++, dst += QK4_1) {
        const __m256 d = _mm256_set1_ps(half_to_float(x[b].d));
        const __m256 m = _mm256_set1_ps(half_to_float(x[b].m));
        const __m256i q = unpack_nibbles(x[b].qs);
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int k = 0; k < 4; k++) {
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
            _mm256_storeu_ps(dst + 8 * k, _mm256_fmadd_ps(v, d, m));  /* d*v exact: one rounding */
        }
    }
}

static void KERNEL(dequantize_q5_1)(const void *src, float *dst, int64_t n) {
    const block_q5_1 *x = (const block_q5_1 *)src;
    for (int64_t b = 0; b < n / QK5_1; b++, dst += QK5_1) {
        const __m256 d = _mm256_set1_ps(half_to_float(x[b].d));
        const __m256 m = _mm256_set1_ps(half_to_float(x[b].m));
        const __m256i q = unpack_q5_1(&x[b]);
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int k = 0; k < 4; k++) {
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
            _mm256_storeu_ps(dst + 8 * k, _mm256_fmadd_ps(v, d, m));  /* d*v exact: one rounding */
        }
    }
}

static void KERNEL(dequantize_q5_0)(const void *src, float *dst, int64_t n) {
    const block_q5_0 *x = (const block_q5_0 *)src;
    for (int64_t b = 0; b < n / QK5_0; b++, dst += QK5_0)
        store_scaled_i8(dst, unpack_q5_0(&x[b]), _mm256_set1_ps(half_to_float(x[b].d)));
}

static void KERNEL(dequantize_q8_0)(const void *src, float *dst, int64_t n) {
    const block_q8_0 *x = (const block_q8_0 *)src;
    for (int64_t b = 0; b < n / QK8_0; b++, dst += QK8_0)
        store_scaled_i8(dst, _mm256_loadu_si256((const __m256i *)x[b].qs),
                        _mm256_set1_ps(half_to_float(x[b].d)));
}

static void KERNEL(dequantize_q8_1)(const void *src, float *dst, int64_t n) {
    const block_q8_1 *x = (const block_q8_1 *)src;
    for (int64_t b = 0; b < n / QK8_1; b++, dst += QK8_1)
        store_scaled_i8(dst, _mm256_loadu_si256((const __m256i *)x[b].qs),
                        _mm256_set1_ps(half_to_float(x[b].d)));
}

static void KERNEL(dequantize_f16)(const void *src, float *dst, int64_t n) {
    const infer_half *x = (const infer_half *)src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) dst[i] = half_to_float(x[i]);
}

static void KERNEL(dequantize_bf16)(const void *src, float *dst, int64_t n) {
    const uint16_t *x = (const uint16_t *)src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; i++) dst[i] = infer_bf16_to_fp32(x[i]);
}

/* f32 -> f16, round to nearest even (what numpy's astype(float16) does). */
static void KERNEL(quantize_f16)(const float *src, void *dst, int64_t n) {
    infer_half *y = (infer_half *)dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = infer_fp32_to_fp16(src[i]);
}

/* Dequantize to f16 through a 1 KB float buffer that stays in L1. */
#define DEQUANTIZE_F16_VIA_F32(fmt, block_type)                                        \
    static void KERNEL(dequantize_f16_##fmt)(const void *src, infer_half *dst, int64_t n) { \
        float tmp[256];                                                                \
        const uint8_t *s = (const uint8_t *)src;                                       \
        for (int64_t i = 0; i < n; i += 256) {                                         \
            const int64_t m = n - i < 256 ? n - i : 256;                               \
            KERNEL(dequantize_##fmt)(s + (i / 32) * sizeof(block_type), tmp, m);       \
            KERNEL(quantize_f16)(tmp, dst + i, m);                                     \
        }                                                                              \
    }
DEQUANTIZE_F16_VIA_F32(q4_0, block_q4_0)
DEQUANTIZE_F16_VIA_F32(q4_1, block_q4_1)
DEQUANTIZE_F16_VIA_F32(q5_0, block_q5_0)
DEQUANTIZE_F16_VIA_F32(q5_1, block_q5_1)
DEQUANTIZE_F16_VIA_F32(q8_0, block_q8_0)
DEQUANTIZE_F16_VIA_F32(q8_1, block_q8_1)

static void KERNEL(dequantize_f16_bf16)(const void *src, infer_half *dst, int64_t n) {
    float tmp[256];
    const uint16_t *s = (const uint16_t *)src;
    for (int64_t i = 0; i < n; i += 256) {
        const int64_t m = n - i < 256 ? n - i : 256;
        KERNEL(dequantize_bf16)(s + i, tmp, m);
        KERNEL(quantize_f16)(tmp, dst + i, m);
    }
}

static void KERNEL(dequantize_f16_f32)(const void *src, infer_half *dst, int64_t n) {
    KERNEL(quantize_f16)((const float *)src, dst, n);
}

/* ---- Q8 activation quantizers ---------------------------------------------------- */

/* roundf(v) for |v| <= 127.5: truncate, then step away from zero when the dropped
 * fraction (exact: v - trunc(v)) is at least one half. */
static inline __m256i round_half_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 up = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                                    _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign)));
    __m256 r = _mm256_add_ps(t, up);
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    return _mm256_cvttps_epi32(r);
}

/* Quantizes 32 floats to qs; returns d and (through sum) the sum of the quants. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
/* The same operations on two 512-bit vectors, narrowed by vpmovsdb: the same bytes
 * for finite inputs, 12-15% faster (each block still waits on two divisions and a
 * reduction).  Rows of 16 blocks and more go mostly through quantize_16_blocks_q8
 * below; this one takes the blocks left over. */
static inline __m512i round_half_away_512(__m512 v) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
    const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 away = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(_mm512_set1_ps(1.0f)), _mm512_and_si512(_mm512_castps_si512(v), sign)));
    __m512 r = _mm512_mask_add_ps(t, up, t, away);
    r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    return _mm512_cvttps_epi32(r);
}

static inline float quantize_block_q8(const float *x, int8_t *qs, int *sum) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = round_half_away_512(_mm512_mul_ps(v0, vid));
    const __m512i q1 = round_half_away_512(_mm512_mul_ps(v1, vid));
    if (sum) *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtsepi32_epi8(q1));
    return d;
}

/* Sixteen blocks at a time: in quantize_block_q8 each block's maximum, divisions and
 * sum wait on one another (a reduction tree, two divisions, another tree), 45-52
 * cycles a block on long rows.  Here the sixteen maxima and sums come out of one
 * transposing reduction each, and d and 1/d of the sixteen blocks out of two vector
 * divisions: 30-33 cycles a block (one thread, 8 x 16384 values).  The same
 * operations on each value: the same bytes as quantize_block_q8 for finite inputs. */

/* lane i = op over the lanes of v[i]: halves of pairs, then quarters, then in-lane
 * unpacks, leaving block 4j + q in lane 4q + j, which the last permute puts back. */
#define REDUCE16(v, OP)                                                                             \
    do {                                                                                            \
        for (int i_ = 0; i_ < 8; i_++)                                                              \
            v[i_] = OP(_mm512_shuffle_f32x4(v[2 * i_], v[2 * i_ + 1], _MM_SHUFFLE(1, 0, 1, 0)),     \
                       _mm512_shuffle_f32x4(v[2 * i_], v[2 * i_ + 1], _MM_SHUFFLE(3, 2, 3, 2)));    \
        for (int i_ = 0; i_ < 4; i_++)                                                              \
            v[i_] = OP(_mm512_shuffle_f32x4(v[2 * i_], v[2 * i_ + 1], _MM_SHUFFLE(2, 0, 2, 0)),     \
                       _mm512_shuffle_f32x4(v[2 * i_], v[2 * i_ + 1], _MM_SHUFFLE(3, 1, 3, 1)));    \
        for (int i_ = 0; i_ < 2; i_++)                                                              \
            v[i_] = OP(_mm512_unpacklo_ps(v[2 * i_], v[2 * i_ + 1]),                                \
                       _mm512_unpackhi_ps(v[2 * i_], v[2 * i_ + 1]));                               \
        v[0] = OP(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(v[0]), _mm512_castps_pd(v[1]))), \
                  _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(v[0]), _mm512_castps_pd(v[1])))); \
        v[0] = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v[0]); \
    } while (0)
#define MAX16(a, b) _mm512_max_ps(a, b)
#define ADD16(a, b) _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)))

/* Quantizes the 16 blocks at x, block i's quants to qs + i * stride; returns their d
 * and (when sums is not NULL) the sums of their quants. */
static inline __m512 quantize_16_blocks_q8(const float *x, int8_t *qs, size_t stride, __m512i *sums) {
    __m512 v[16];
    for (int i = 0; i < 16; i++)
        v[i] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 32 * i)), _mm512_abs_ps(_mm512_loadu_ps(x + 32 * i + 16)));
    REDUCE16(v, MAX16);
    const __m512 d = _mm512_div_ps(v[0], _mm512_set1_ps(127.0f));
    /* d != 0.0f, as quantize_block_q8 asks it: true for NaN */
    const __mmask16 nonzero = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    float id[16];
    _mm512_storeu_ps(id, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0f), d));
    for (int i = 0; i < 16; i++) {
        const __m512 vid = _mm512_set1_ps(id[i]);
        const __m512i q0 = round_half_away_512(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * i), vid));
        const __m512i q1 = round_half_away_512(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * i + 16), vid));
        _mm_storeu_si128((__m128i *)(qs + i * stride), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(qs + i * stride + 16), _mm512_cvtsepi32_epi8(q1));
        v[i] = _mm512_castsi512_ps(_mm512_add_epi32(q0, q1));
    }
    if (sums) {
        REDUCE16(v, ADD16);
        *sums = _mm512_castps_si512(v[0]);
    }
    return d;
}
#undef REDUCE16
#undef MAX16
#undef ADD16
#define QUANTIZE_16_BLOCKS 1
#else
static inline float quantize_block_q8(const float *x, int8_t *qs, int *sum) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], abs_mask));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = round_half_away(_mm256_mul_ps(v[k], vid));
    if (sum) *sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                                _mm256_add_epi32(q[2], q[3])));
    /* packs interleave 128-bit lanes; the permute puts the 32 bytes back in order. */
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, p);
    return d;
}
#endif

static void KERNEL(quantize_q8_0)(const float *src, void *dst, int64_t n) {
    block_q8_0 *y = (block_q8_0 *)dst;
    int64_t b = 0;
#ifdef QUANTIZE_16_BLOCKS
    for (; b + 16 <= n / QK8_0; b += 16, src += 16 * QK8_0) {
        uint16_t dh[16];
        _mm256_storeu_si256((__m256i *)dh, _mm512_cvtps_ph(quantize_16_blocks_q8(src, y[b].qs, sizeof *y, NULL),
                                                           _MM_FROUND_TO_NEAREST_INT));
        for (int i = 0; i < 16; i++) memcpy(&y[b + i].d, &dh[i], 2);
    }
#endif
    for (; b < n / QK8_0; b++, src += QK8_0)
        y[b].d = (infer_half)_cvtss_sh(quantize_block_q8(src, y[b].qs, NULL), _MM_FROUND_TO_NEAREST_INT);
}

static void KERNEL(quantize_q8_0s)(const float *src, void *dst, int64_t n) {
    block_q8_0s *y = (block_q8_0s *)dst;
    int64_t b = 0;
#ifdef QUANTIZE_16_BLOCKS
    for (; b + 16 <= n / QK8_0; b += 16, src += 16 * QK8_0) {
        __m512i sums;
        uint16_t dh[16];
        int16_t s16[16];
        _mm256_storeu_si256((__m256i *)dh, _mm512_cvtps_ph(quantize_16_blocks_q8(src, y[b].qs, sizeof *y, &sums),
                                                           _MM_FROUND_TO_NEAREST_INT));
        _mm256_storeu_si256((__m256i *)s16, _mm512_cvtepi32_epi16(sums));   /* (int16_t)sum */
        for (int i = 0; i < 16; i++) memcpy(&y[b + i].d, &dh[i], 2), y[b + i].sum = s16[i];
    }
#endif
    for (; b < n / QK8_0; b++, src += QK8_0) {
        int sum;
        const float d = quantize_block_q8(src, y[b].qs, &sum);
        y[b].d = (infer_half)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        y[b].sum = (int16_t)sum;
    }
}

static void KERNEL(quantize_q8_1)(const float *src, void *dst, int64_t n) {
    block_q8_1 *y = (block_q8_1 *)dst;
    int64_t b = 0;
#ifdef QUANTIZE_16_BLOCKS
    for (; b + 16 <= n / QK8_1; b += 16, src += 16 * QK8_1) {
        __m512i sums;
        uint16_t dh[16], sh[16];
        const __m512 d = quantize_16_blocks_q8(src, y[b].qs, sizeof *y, &sums);
        _mm256_storeu_si256((__m256i *)dh, _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
        _mm256_storeu_si256((__m256i *)sh, _mm512_cvtps_ph(_mm512_mul_ps(_mm512_cvtepi32_ps(sums), d),
                                                           _MM_FROUND_TO_NEAREST_INT));
        for (int i = 0; i < 16; i++) memcpy(&y[b + i].d, &dh[i], 2), memcpy(&y[b + i].s, &sh[i], 2);
    }
#endif
    for (; b < n / QK8_1; b++, src += QK8_1) {
        int sum;
        const float d = quantize_block_q8(src, y[b].qs, &sum);
        y[b].d = (infer_half)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        y[b].s = (infer_half)_cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

/* ---- dot products ---------------------------------------------------------------- */

static float KERNEL(vec_dot_q4_0_q8_0)(int64_t n, const void *w, const void *a) {
    const block_q4_0 *x = (const block_q4_0 *)w;
    const block_q8_0 *y = (const block_q8_0 *)a;
    const int64_t nb = n / QK4_0;
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const __m256i x0 = _mm256_sub_epi8(unpack_nibbles(x[b].qs), eight);
        const __m256i x1 = _mm256_sub_epi8(unpack_nibbles(x[b + 1].qs), eight);
        const __m256i p0 = dot_s8s8(_mm256_setzero_si256(), x0, _mm256_loadu_si256((const __m256i *)y[b].qs));
        const __m256i p1 = dot_s8s8(_mm256_setzero_si256(), x1, _mm256_loadu_si256((const __m256i *)y[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(half_to_float(x[b + 1].d) * half_to_float(y[b + 1].d)), acc1);
    }
    for (; b < nb; b++) {
        const __m256i x0 = _mm256_sub_epi8(unpack_nibbles(x[b].qs), eight);
        const __m256i p0 = dot_s8s8(_mm256_setzero_si256(), x0, _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d)), acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

static float KERNEL(vec_dot_q4_1_q8_1)(int64_t n, const void *w, const void *a) {
    const block_q4_1 *x = (const block_q4_1 *)w;
    const block_q8_1 *y = (const block_q8_1 *)a;
    const int64_t nb = n / QK4_1;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float mins = 0.0f;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const __m256i p0 = dot_u8s8(_mm256_setzero_si256(), unpack_nibbles(x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        const __m256i p1 = dot_u8s8(_mm256_setzero_si256(), unpack_nibbles(x[b + 1].qs), _mm256_loadu_si256((const __m256i *)y[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(half_to_float(x[b + 1].d) * half_to_float(y[b + 1].d)), acc1);
        mins += half_to_float(x[b].m) * half_to_float(y[b].s) + half_to_float(x[b + 1].m) * half_to_float(y[b + 1].s);
    }
    for (; b < nb; b++) {
        const __m256i p0 = dot_u8s8(_mm256_setzero_si256(), unpack_nibbles(x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d)), acc0);
        mins += half_to_float(x[b].m) * half_to_float(y[b].s);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1)) + mins;
}

/* As Q4_1's, with the fifth bit: q in 0..31 keeps vpmaddubsw's pair sums in int16. */
static float KERNEL(vec_dot_q5_1_q8_1)(int64_t n, const void *w, const void *a) {
    const block_q5_1 *x = (const block_q5_1 *)w;
    const block_q8_1 *y = (const block_q8_1 *)a;
    const int64_t nb = n / QK5_1;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float mins = 0.0f;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const __m256i p0 = dot_u8s8(_mm256_setzero_si256(), unpack_q5_1(&x[b]), _mm256_loadu_si256((const __m256i *)y[b].qs));
        const __m256i p1 = dot_u8s8(_mm256_setzero_si256(), unpack_q5_1(&x[b + 1]), _mm256_loadu_si256((const __m256i *)y[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(half_to_float(x[b + 1].d) * half_to_float(y[b + 1].d)), acc1);
        mins += half_to_float(x[b].m) * half_to_float(y[b].s) + half_to_float(x[b + 1].m) * half_to_float(y[b + 1].s);
    }
    for (; b < nb; b++) {
        const __m256i p0 = dot_u8s8(_mm256_setzero_si256(), unpack_q5_1(&x[b]), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d)), acc0);
        mins += half_to_float(x[b].m) * half_to_float(y[b].s);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1)) + mins;
}

static float KERNEL(vec_dot_q5_0_q8_0)(int64_t n, const void *w, const void *a) {
    const block_q5_0 *x = (const block_q5_0 *)w;
    const block_q8_0 *y = (const block_q8_0 *)a;
    const int64_t nb = n / QK5_0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i p = dot_s8s8(_mm256_setzero_si256(), unpack_q5_0(&x[b]), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d)), acc);
    }
    return hsum_ps(acc);
}

static float KERNEL(vec_dot_q8_0_q8_0)(int64_t n, const void *w, const void *a) {
    const block_q8_0 *x = (const block_q8_0 *)w;
    const block_q8_0 *y = (const block_q8_0 *)a;
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const __m256i p0 = dot_s8s8(_mm256_setzero_si256(), _mm256_loadu_si256((const __m256i *)x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        const __m256i p1 = dot_s8s8(_mm256_setzero_si256(), _mm256_loadu_si256((const __m256i *)x[b + 1].qs), _mm256_loadu_si256((const __m256i *)y[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(half_to_float(x[b + 1].d) * half_to_float(y[b + 1].d)), acc1);
    }
    for (; b < nb; b++) {
        const __m256i p0 = dot_s8s8(_mm256_setzero_si256(), _mm256_loadu_si256((const __m256i *)x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d)), acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* Four weight rows against one activation row: each activation block is loaded
 * and its scale converted once for four rows. */
#define ROW(k) ((const uint8_t *)w + (k) * row_bytes)

static inline void store_hsum4(float *out, const __m256 acc[4]) {
    /* Transpose-and-add: lane k of the result is the sum of acc[k]. */
    const __m256 a01 = _mm256_hadd_ps(acc[0], acc[1]), a23 = _mm256_hadd_ps(acc[2], acc[3]);
    const __m256 a = _mm256_hadd_ps(a01, a23);
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)));
}

static inline int load_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return (int)v; }

/* The fp16 at p in four rows (row_bytes apart) as four floats.  (Gathering through
 * a small array measured faster here than four inserts.) */
static inline __m128 load_half_x4(const uint8_t *p, size_t row_bytes) {
    uint16_t h[4];
    for (int k = 0; k < 4; k++) memcpy(&h[k], p + k * row_bytes, 2);
    return _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)h));
}

/* The 32 bits at p in four rows: Q4_1's adjacent (d, m) pairs. */
static inline __m128i load_u32_x4(const uint8_t *p, size_t row_bytes) {
    uint32_t v[4];
    for (int k = 0; k < 4; k++) memcpy(&v[k], p + k * row_bytes, 4);
    return _mm_loadu_si128((const __m128i *)v);
}

/* Broadcast of lane k of a 4-float scale vector. */
#define LANE(v4, k) _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v4), _mm256_set1_epi32(k))

/* -c * (sum of each group of 4 bytes of y), as the int32 lanes dot_u8s8 produces. */
static inline __m256i minus_sum_times(int c, __m256i y) {
    return _mm256_sub_epi32(_mm256_setzero_si256(),
                            dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8((char)c), y));
}

/* Weight bytes made unsigned: value = byte - c (c = 8, 16, 128 below). */
#define UNPACK_Q4_0(blk) unpack_nibbles((blk)->qs)
#define UNPACK_Q8_0_FLIPPED(blk) _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk)->qs), \
                                                  _mm256_set1_epi8((char)0x80))

/* Four rows of a format whose value is (unpacked unsigned byte - c) * d, d the fp16 at
 * offset 0, against one activation row: acc[k] += d_k*d_y * (u_k . y - c * sum(y)).
 * The offset -c * sum(y) is computed once per activation block for the four rows. */
#define DOT4_OFFSET_KERNEL(name, block_type, unpack, c)                                   \
    static void KERNEL(name)(int64_t n, const void *w, size_t row_bytes, const void *a,    \
                             float *out) {                                                \
        const block_q8_0 *y = (const block_q8_0 *)a;                                      \
        const uint8_t *x = (const uint8_t *)w;                                            \
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),   \
                         _mm256_setzero_ps()};                                            \
        for (int64_t b = 0; b < n / 32; b++, x += sizeof(block_type)) {                   \
            const __m256i yv = _mm256_loadu_si256((const __m256i *)y[b].qs);              \
            const __m256i offset = minus_sum_times(c, yv);                                \
            const __m128 scale = _mm_mul_ps(load_half_x4(x, row_bytes),                   \
                                            _mm_set1_ps(half_to_float(y[b].d)));          \
            for (int k = 0; k < 4; k++)                                                   \
                acc[k] = _mm256_fmadd_ps(                                                 \
                    _mm256_cvtepi32_ps(dot_u8s8(offset, unpack((const block_type *)(x + k * row_bytes)), yv)), \
                    LANE(scale, k), acc[k]);                                              \
        }                                                                                 \
        store_hsum4(out, acc);                                                            \
    }

DOT4_OFFSET_KERNEL(vec_dot_4_q4_0_q8_0, block_q4_0, UNPACK_Q4_0, 8)
DOT4_OFFSET_KERNEL(vec_dot_4_q5_0_q8_0, block_q5_0, unpack_q5_0_unsigned, 16)
#if X86_VNNI
/* x + 128 can reach 255: only vpdpbusd, which sums into int32, takes it without
 * saturating (vpmaddubsw would saturate 255*127*2 in int16). */
DOT4_OFFSET_KERNEL(vec_dot_4_q8_0_q8_0, block_q8_0, UNPACK_Q8_0_FLIPPED, 128)
#else
static void KERNEL(vec_dot_4_q8_0_q8_0)(int64_t n, const void *w, size_t row_bytes, const void *a, float *out) {
    const block_q8_0 *y = (const block_q8_0 *)a;
    const uint8_t *x = (const uint8_t *)w;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < n / QK8_0; b++, x += sizeof(block_q8_0)) {
        const __m256i yv = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m128 scale = _mm_mul_ps(load_half_x4(x, row_bytes), _mm_set1_ps(half_to_float(y[b].d)));
        for (int k = 0; k < 4; k++) {
            const __m256i xk = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)(x + k * row_bytes))->qs);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_s8s8(_mm256_setzero_si256(), xk, yv)),
                                     LANE(scale, k), acc[k]);
        }
    }
    store_hsum4(out, acc);
}
#endif

static void KERNEL(vec_dot_4_q4_1_q8_1)(int64_t n, const void *w, size_t row_bytes, const void *a, float *out) {
    const block_q8_1 *y = (const block_q8_1 *)a;
    const uint8_t *x = (const uint8_t *)w;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 mins = _mm256_setzero_ps();   /* odd lanes: sum of m_k * s */
    for (int64_t b = 0; b < n / QK4_1; b++, x += sizeof(block_q4_1)) {
        const __m256i yv = _mm256_loadu_si256((const __m256i *)y[b].qs);
        /* d and m are adjacent: one 32-bit load per row gives d0 m0 d1 m1 d2 m2 d3 m3;
         * the activation's d and s are adjacent too. */
        const __m128 ysf = _mm_cvtph_ps(_mm_cvtsi32_si128(load_u32((const uint8_t *)&y[b].d)));
        const __m256 ds = _mm256_mul_ps(_mm256_cvtph_ps(load_u32_x4(x, row_bytes)),
                                        _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(ysf))));
        mins = _mm256_add_ps(mins, ds);
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(dot_u8s8(_mm256_setzero_si256(),
                                            unpack_nibbles(((const block_q4_1 *)(x + k * row_bytes))->qs), yv)),
                _mm256_permutevar8x32_ps(ds, _mm256_set1_epi32(2 * k)), acc[k]);
    }
    store_hsum4(out, acc);
    const __m256 odd = _mm256_permutevar8x32_ps(mins, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7));
    _mm_storeu_ps(out, _mm_add_ps(_mm_loadu_ps(out), _mm256_castps256_ps128(odd)));
}

/* Four weight rows against four tokens.  Each weight block is unpacked once and
 * used for the four tokens; each activation block is loaded once for the four rows.
 * Sixteen accumulators: meant for the 32 vector registers of AVX-512 (the AVX2 build
 * spills some to L1 and is still faster than four-row calls per token). */
#define DOT4X4_BEGIN(block_type)                                                        \
    const uint8_t *x = (const uint8_t *)w;                                             \
    __m256 acc[4][4];                                                                  \
    for (int t = 0; t < 4; t++)                                                        \
        for (int k = 0; k < 4; k++) acc[t][k] = _mm256_setzero_ps();                   \
    for (int64_t b = 0; b < n / 32; b++, x += sizeof(block_type)) {

#define DOT4X4_END                                                                     \
    }                                                                                  \
    for (int t = 0; t < 4; t++) store_hsum4(out + t * out_stride, acc[t]);

/* Weights whose value is (unsigned byte - c) times a per-block fp16 scale d at offset 0. */
#define DOT4X4_OFFSET_KERNEL(name, block_type, act_type, unpack, c)                     \
    static void KERNEL(name)(int64_t n, const void *w, size_t row_bytes, const void *a,  \
                             size_t a_stride, float *out, size_t out_stride) {          \
        DOT4X4_BEGIN(block_type)                                                        \
        __m256i u[4];                                                                   \
        for (int k = 0; k < 4; k++) u[k] = unpack((const block_type *)(x + k * row_bytes)); \
        const __m128 dx = load_half_x4(x, row_bytes);                                   \
        for (int t = 0; t < 4; t++) {                                                   \
            const act_type *y = (const act_type *)((const uint8_t *)a + t * a_stride) + b; \
            const __m256i yv = _mm256_loadu_si256((const __m256i *)y->qs);              \
            const __m256i offset = minus_sum_times(c, yv);                              \
            const __m128 scale = _mm_mul_ps(dx, _mm_set1_ps(half_to_float(y->d)));      \
            for (int k = 0; k < 4; k++)                                                 \
                acc[t][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(offset, u[k], yv)), \
                                            LANE(scale, k), acc[t][k]);                 \
        }                                                                               \
        DOT4X4_END                                                                      \
    }

DOT4X4_OFFSET_KERNEL(vec_dot_4x4_q4_0_q8_0, block_q4_0, block_q8_0, UNPACK_Q4_0, 8)
DOT4X4_OFFSET_KERNEL(vec_dot_4x4_q5_0_q8_0, block_q5_0, block_q8_0, unpack_q5_0_unsigned, 16)
#if X86_VNNI
DOT4X4_OFFSET_KERNEL(vec_dot_4x4_q8_0_q8_0, block_q8_0, block_q8_0, UNPACK_Q8_0_FLIPPED, 128)
#endif

static void KERNEL(vec_dot_4x4_q4_1_q8_1)(int64_t n, const void *w, size_t row_bytes, const void *a,
                                          size_t a_stride, float *out, size_t out_stride) {
    __m256 mins[4];   /* per token; odd lanes: sum of m_k * s */
    for (int t = 0; t < 4; t++) mins[t] = _mm256_setzero_ps();
    DOT4X4_BEGIN(block_q4_1)
    __m256i u[4];
    for (int k = 0; k < 4; k++) u[k] = unpack_nibbles(((const block_q4_1 *)(x + k * row_bytes))->qs);
    const __m256 dm = _mm256_cvtph_ps(load_u32_x4(x, row_bytes));   /* d0 m0 d1 m1 ... */
    for (int t = 0; t < 4; t++) {
        const block_q8_1 *y = (const block_q8_1 *)((const uint8_t *)a + t * a_stride) + b;
        const __m256i yv = _mm256_loadu_si256((const __m256i *)y->qs);
        const __m128 ysf = _mm_cvtph_ps(_mm_cvtsi32_si128(load_u32((const uint8_t *)&y->d)));
        const __m256 ds = _mm256_mul_ps(dm, _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(ysf))));
        mins[t] = _mm256_add_ps(mins[t], ds);
        for (int k = 0; k < 4; k++)
            acc[t][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(_mm256_setzero_si256(), u[k], yv)),
                                        _mm256_permutevar8x32_ps(ds, _mm256_set1_epi32(2 * k)), acc[t][k]);
    }
    DOT4X4_END
    for (int t = 0; t < 4; t++) {
        const __m256 odd = _mm256_permutevar8x32_ps(mins[t], _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7));
        float *o = out + t * out_stride;
        _mm_storeu_ps(o, _mm_add_ps(_mm_loadu_ps(o), _mm256_castps256_ps128(odd)));
    }
}

/* Four weight rows against n_tok <= INFER_DOT_4XN_MAX tokens, in passes of up to
 * four tokens (then two, then one): each weight block is unpacked once per pass and
 * each activation block loaded once for the four rows, so batches of 2 and 3 (and
 * the tail of a larger one) share the weights too, which vec_dot_4x4 cannot do.
 * Each block's integer dot is summed exactly, the four rows' sums reduced into one
 * vector and scaled once, so a (row, token) result takes the same operations, in
 * the same order, whatever n_tok and the pass: it has the bits of the one-token
 * call (not vec_dot_4's, which scales eight lanes per row and block). */
#if defined(_MSC_VER)
#define X86_ALWAYS_INLINE static __forceinline
#else
#define X86_ALWAYS_INLINE static inline __attribute__((always_inline))
#endif

/* Run `pass` (T tokens, a constant once inlined) over the tokens: 4, 2, then 1 at a
 * time, the first pass prefetching the four rows INFER_PREFETCH_ROWS ahead. */
#define DOT4XN_DRIVER(name, pass)                                                         \
    static void KERNEL(name)(int64_t n, const void *w, size_t row_bytes, const void *a,    \
                             size_t a_stride, int n_tok, float *out, size_t out_stride) { \
        const uint8_t *at = (const uint8_t *)a;                                           \
        int t = 0;                                                                        \
        const uint8_t *ahead = (const uint8_t *)w + INFER_PREFETCH_ROWS * row_bytes;     \
        for (; t + 4 <= n_tok; t += 4)                                                    \
            pass(n, w, row_bytes, at + t * a_stride, a_stride, 4, out + t * out_stride, out_stride, \
                 t ? NULL : ahead);                                                       \
        if (t + 2 <= n_tok) {                                                             \
            pass(n, w, row_bytes, at + t * a_stride, a_stride, 2, out + t * out_stride, out_stride, \
                 t ? NULL : ahead);                                                       \
            t += 2;                                                                       \
        }                                                                                 \
        if (t < n_tok)                                                                    \
            pass(n, w, row_bytes, at + t * a_stride, a_stride, 1, out + t * out_stride, out_stride, \
                 t ? NULL : ahead);                                                       \
    }

/* The int32 sums of four rows' 8-lane block dots, one lane per row. */
static inline __m128i block_sums4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Formats whose value is (unsigned byte - c) * d: each block's integer dot (the
 * offset -c * sum(y) folded in) is kept exact and scaled once, per row and token
 * acc = fma(float(sum_i (u_i - c) y_i), d_w d_y, acc) over the blocks in order (four
 * rows in one vector, see block_sums4); vec_dot_rx8_offset below does the same with
 * the tokens in the lanes. */
#define DOT4XN_OFFSET_KERNEL(name, block_type, unpack, c) \
    DOT4XN_OFFSET_KERNEL_SCALED(name, block_type, unpack, c, load_half_x4)
/* The same with the four rows' block scales from load_scales(x, row_bytes). */
#define DOT4XN_OFFSET_KERNEL_SCALED(name, block_type, unpack, c, load_scales)              \
    X86_ALWAYS_INLINE void KERNEL(name##_pass)(int64_t n, const void *w, size_t row_bytes, \
                                               const uint8_t *a, size_t a_stride, const int T, \
                                               float *out, size_t out_stride, const uint8_t *ahead) { \
        const uint8_t *x = (const uint8_t *)w;                                            \
        __m128 acc[4];                                                                    \
        size_t fetched = 0;                                                               \
        for (int t = 0; t < T; t++) acc[t] = _mm_setzero_ps();                            \
        for (int64_t b = 0; b < n / 32; b++, x += sizeof(block_type)) {                   \
            infer_prefetch_part(ahead, &fetched, 4 * row_bytes, b, n / 32);               \
            __m256i u[4];                                                                 \
            for (int k = 0; k < 4; k++) u[k] = unpack((const block_type *)(x + k * row_bytes)); \
            const __m128 dx = load_scales(x, row_bytes);                                  \
            for (int t = 0; t < T; t++) {                                                 \
                const block_q8_0 *y = (const block_q8_0 *)(a + t * a_stride) + b;         \
                const __m256i yv = _mm256_loadu_si256((const __m256i *)y->qs);            \
                const __m256i offset = minus_sum_times(c, yv);                            \
                const __m128i sums = block_sums4(dot_u8s8(offset, u[0], yv), dot_u8s8(offset, u[1], yv), \
                                                 dot_u8s8(offset, u[2], yv), dot_u8s8(offset, u[3], yv)); \
                acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dx, _mm_set1_ps(half_to_float(y->d))), \
                                      acc[t]);                                            \
            }                                                                             \
        }                                                                                 \
        for (int t = 0; t < T; t++) _mm_storeu_ps(out + t * out_stride, acc[t]);          \
    }                                                                                     \
    DOT4XN_DRIVER(name, KERNEL(name##_pass))

DOT4XN_OFFSET_KERNEL(vec_dot_4xn_q4_0_q8_0, block_q4_0, UNPACK_Q4_0, 8)
DOT4XN_OFFSET_KERNEL(vec_dot_4xn_q5_0_q8_0, block_q5_0, unpack_q5_0_unsigned, 16)
#if X86_VNNI
DOT4XN_OFFSET_KERNEL(vec_dot_4xn_q8_0_q8_0, block_q8_0, UNPACK_Q8_0_FLIPPED, 128)
/* IQ4_NL (Q4_0's nibbles, each the index of a level -127..113) as level + 128, so an
 * offset format with c = 128 (vpdpbusd sums four products into int32: no int16 pairs
 * to saturate, hence VNNI only): exact block sums, one fma, the operations a repacked
 * IQ4_NL repeats. */
extern const int8_t infer_kvalues_iq4nl[16];
static inline __m256i unpack_iq4_nl_flipped(const block_iq4_nl *b) {
    const __m128i table = _mm_add_epi8(_mm_loadu_si128((const __m128i *)infer_kvalues_iq4nl), _mm_set1_epi8((char)0x80));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), unpack_nibbles(b->qs));
}
DOT4XN_OFFSET_KERNEL(vec_dot_4xn_iq4_nl_q8_0, block_iq4_nl, unpack_iq4_nl_flipped, 128)
#else
/* The offset kernels' operations with the exact block dot taken by dot_s8s8 (|x|
 * once per weight block for all the tokens; x may be -128 in a file: |x| is then
 * 128 as an unsigned byte, as there), so the same bits as with VNNI above, and
 * four accumulators of four rows for T tokens instead of T x 4 of eight lanes
 * (which spilled: 15 G MAC/s at 4 tokens against Q4_1's 25 on Zen 3). */
X86_ALWAYS_INLINE void KERNEL(vec_dot_4xn_q8_0_q8_0_pass)(int64_t n, const void *w, size_t row_bytes,
                                                          const uint8_t *a, size_t a_stride, const int T,
                                                          float *out, size_t out_stride, const uint8_t *ahead) {
    const uint8_t *x = (const uint8_t *)w;
    __m128 acc[4];
    size_t fetched = 0;
    for (int t = 0; t < T; t++) acc[t] = _mm_setzero_ps();
    for (int64_t b = 0; b < n / QK8_0; b++, x += sizeof(block_q8_0)) {
        infer_prefetch_part(ahead, &fetched, 4 * row_bytes, b, n / QK8_0);
        __m256i xk[4], ax[4];
        for (int k = 0; k < 4; k++) {
            xk[k] = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)(x + k * row_bytes))->qs);
            ax[k] = _mm256_sign_epi8(xk[k], xk[k]);
        }
        const __m128 dx = load_half_x4(x, row_bytes);
        for (int t = 0; t < T; t++) {
            const block_q8_0 *y = (const block_q8_0 *)(a + t * a_stride) + b;
            const __m256i yv = _mm256_loadu_si256((const __m256i *)y->qs);
            const __m128i sums = block_sums4(
                dot_u8s8(_mm256_setzero_si256(), ax[0], _mm256_sign_epi8(yv, xk[0])),
                dot_u8s8(_mm256_setzero_si256(), ax[1], _mm256_sign_epi8(yv, xk[1])),
                dot_u8s8(_mm256_setzero_si256(), ax[2], _mm256_sign_epi8(yv, xk[2])),
                dot_u8s8(_mm256_setzero_si256(), ax[3], _mm256_sign_epi8(yv, xk[3])));
            acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dx, _mm_set1_ps(half_to_float(y->d))), acc[t]);
        }
    }
    for (int t = 0; t < T; t++) _mm_storeu_ps(out + t * out_stride, acc[t]);
}
DOT4XN_DRIVER(vec_dot_4xn_q8_0_q8_0, KERNEL(vec_dot_4xn_q8_0_q8_0_pass))
#endif

/* MXFP4 (Q4_0's nibbles, each the index of a level -12..12) as level + 12: 0..24, within
 * vpmaddubsw's int16 pair sums, so an offset format on AVX2 too, with E8M0 block
 * scales (infer_e8m0_half). */
extern const int8_t infer_kvalues_mxfp4[16];
static inline __m256i unpack_mxfp4_offset(const block_mxfp4 *b) {
    const __m128i table = _mm_add_epi8(_mm_loadu_si128((const __m128i *)infer_kvalues_mxfp4), _mm_set1_epi8(12));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), unpack_nibbles(b->qs));
}
/* infer_e8m0_half of the first byte of four rows: (e - 1) << 23, or 2^21 << e for the
 * subnormal scales of e = 0 and 1. */
static inline __m128 load_e8m0_half_x4(const uint8_t *p, size_t row_bytes) {
    const __m128i e = _mm_setr_epi32(p[0], p[row_bytes], p[2 * row_bytes], p[3 * row_bytes]);
    const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
    const __m128i subnormal = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);
    return _mm_castsi128_ps(_mm_blendv_epi8(normal, subnormal, _mm_cmpgt_epi32(_mm_set1_epi32(2), e)));
}
DOT4XN_OFFSET_KERNEL_SCALED(vec_dot_4xn_mxfp4_q8_0, block_mxfp4, unpack_mxfp4_offset, 12, load_e8m0_half_x4)

/* Q4_1 keeps each block's integer dot exact and scales it once: per row and token,
 * acc = fma(float(sum_i u_i y_i), d_w d_y, acc) and mins = fma(m_w, s_y, mins) over
 * the blocks in order, then acc + mins.  (Four rows share one vector: the block sums
 * of four rows are reduced with three hadds, instead of one fma per row in 8 lanes.)
 * vec_dot_rx8_q4_1_q8_1 below computes the same operations with the tokens in the
 * lanes, so the two give the same bits for any batch. */

/* Q5_1 (d, m, qh, qs) takes the same operations with its fifth bits added to the
 * nibbles (unpack_q5_1), so a repacked Q5_1 repeats them too. */
static inline __m256i unpack_q4_1(const block_q4_1 *b) { return unpack_nibbles(b->qs); }

#define DOT4XN_MIN_KERNEL(name, block_type, unpack)                                       \
    X86_ALWAYS_INLINE void KERNEL(name##_pass)(int64_t n, const void *w, size_t row_bytes, \
                                               const uint8_t *a, size_t a_stride, const int T, \
                                               float *out, size_t out_stride, const uint8_t *ahead) { \
        const uint8_t *x = (const uint8_t *)w;                                            \
        __m128 acc[4], mins[4];                                                           \
        size_t fetched = 0;                                                               \
        for (int t = 0; t < T; t++) acc[t] = _mm_setzero_ps(), mins[t] = _mm_setzero_ps(); \
        for (int64_t b = 0; b < n / 32; b++, x += sizeof(block_type)) {                   \
            infer_prefetch_part(ahead, &fetched, 4 * row_bytes, b, n / 32);               \
            __m256i u[4];                                                                 \
            for (int k = 0; k < 4; k++) u[k] = unpack((const block_type *)(x + k * row_bytes)); \
            const __m256 dm = _mm256_cvtph_ps(load_u32_x4(x, row_bytes));   /* d0 m0 d1 m1 ... */ \
            const __m256 even_odd = _mm256_permutevar8x32_ps(dm, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)); \
            const __m128 d4 = _mm256_castps256_ps128(even_odd), m4 = _mm256_extractf128_ps(even_odd, 1); \
            for (int t = 0; t < T; t++) {                                                 \
                const block_q8_1 *y = (const block_q8_1 *)(a + t * a_stride) + b;         \
                const __m256i yv = _mm256_loadu_si256((const __m256i *)y->qs);            \
                const __m128i sums = block_sums4(dot_u8s8(_mm256_setzero_si256(), u[0], yv), \
                                                 dot_u8s8(_mm256_setzero_si256(), u[1], yv), \
                                                 dot_u8s8(_mm256_setzero_si256(), u[2], yv), \
                                                 dot_u8s8(_mm256_setzero_si256(), u[3], yv)); \
                acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(d4, _mm_set1_ps(half_to_float(y->d))), acc[t]); \
                mins[t] = _mm_fmadd_ps(m4, _mm_set1_ps(half_to_float(y->s)), mins[t]);    \
            }                                                                             \
        }                                                                                 \
        for (int t = 0; t < T; t++) _mm_storeu_ps(out + t * out_stride, _mm_add_ps(acc[t], mins[t])); \
    }                                                                                     \
    DOT4XN_DRIVER(name, KERNEL(name##_pass))

DOT4XN_MIN_KERNEL(vec_dot_4xn_q4_1_q8_1, block_q4_1, unpack_q4_1)
DOT4XN_MIN_KERNEL(vec_dot_4xn_q5_1_q8_1, block_q5_1, unpack_q5_1)

/* Eight tokens in the eight 32-bit lanes, any number of rows: the activations of
 * each block are transposed once per call (lane t of group g = bytes 4g..4g+3 of
 * token t), then a weight row's four bytes of a group are broadcast to the lanes,
 * so one vpmaddubsw serves eight tokens, the int16 products of a whole block are
 * summed before one vpmaddwd (16 products of nibble <= 15 and |y| <= 128 stay below
 * 2^15), and a block costs one cvt and two fmas for eight tokens.  Same operations
 * per (row, token) as vec_dot_4xn_q4_1_q8_1, so the same bits. */
static inline void transpose8_epi32(const __m256i r[8], __m256i out[8]) {
    __m256i t[8], q[8];
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; k++) {   /* rows 4k..4k+3: groups 0 4, 1 5, 2 6, 3 7 */
        q[4 * k + 0] = _mm256_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
        q[4 * k + 1] = _mm256_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
        q[4 * k + 2] = _mm256_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        q[4 * k + 3] = _mm256_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    for (int g = 0; g < 4; g++) {
        out[g] = _mm256_permute2x128_si256(q[g], q[4 + g], 0x20);
        out[4 + g] = _mm256_permute2x128_si256(q[g], q[4 + g], 0x31);
    }
}


/* The activations of eight Q8_0 tokens, transposed for the rx8 kernels: block b's
 * group g (bytes 4g..4g+3) of token t in lane t of ys[b][g], the scales d_t in dy[b],
 * and -c * sum(y_t) in neg_sum[b] (exact, as minus_sum_times gives it per lane). */
static void transpose_q8_0_x8(const void *a, size_t a_stride, int64_t nb, int c, __m256i (*ys)[8],
                              __m256 *dy, __m256i *neg_sum) {
    const __m256i cs = _mm256_set1_epi8((char)c);
    for (int64_t b = 0; b < nb; b++) {
        __m256i r[8];
        uint16_t hd[8];
        for (int t = 0; t < 8; t++) {
            const block_q8_0 *y = (const block_q8_0 *)((const uint8_t *)a + t * a_stride) + b;
            r[t] = _mm256_loadu_si256((const __m256i *)y->qs);
            hd[t] = y->d;
        }
        transpose8_epi32(r, ys[b]);
        __m256i sum = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) sum = dot_u8s8(sum, cs, ys[b][g]);
        neg_sum[b] = _mm256_sub_epi32(_mm256_setzero_si256(), sum);
        dy[b] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hd));
    }
}

/* Eight tokens in the lanes (as vec_dot_rx8_q4_1_q8_1) for the offset formats: groups
 * 0..3 and 4..7 are summed in int16 apart (u <= 31: four vpmaddubsw pairs stay below
 * 2^15), then widened and added to -c * sum(y): the exact block dot of
 * vec_dot_4xn's offset kernels, scaled the same way. */
#define RX8_OFFSET_KERNEL(name, block_type, weight_groups, c)                               \
    static void KERNEL(name)(int64_t n, const void *w, size_t row_bytes, int64_t n_rows,       \
                             const void *a, size_t a_stride, float *out, size_t out_stride) { \
        const int64_t nb = n / 32;                                                          \
        __m256i ys[INFER_DOT_RX8_MAX_N / 32][8], neg_sum[INFER_DOT_RX8_MAX_N / 32];         \
        __m256 dy[INFER_DOT_RX8_MAX_N / 32];                                                \
        transpose_q8_0_x8(a, a_stride, nb, c, ys, dy, neg_sum);                             \
        const __m256i ones = _mm256_set1_epi16(1);                                          \
        for (int64_t row = 0; row < n_rows; row++) {                                        \
            const block_type *x = (const block_type *)((const uint8_t *)w + row * row_bytes); \
            if (row + INFER_PREFETCH_ROWS < n_rows)                                         \
                infer_prefetch_lines((const uint8_t *)x + INFER_PREFETCH_ROWS * row_bytes, row_bytes); \
            __m256 acc = _mm256_setzero_ps();                                               \
            for (int64_t b = 0; b < nb; b++) {                                              \
                __m256i wg[8];                                                              \
                weight_groups(&x[b], wg);                                                   \
                __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();           \
                for (int g = 0; g < 4; g++) {                                               \
                    lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(wg[g], ys[b][g]));       \
                    hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(wg[4 + g], ys[b][4 + g])); \
                }                                                                           \
                const __m256i sums = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(lo, ones), \
                                                                       _mm256_madd_epi16(hi, ones)), \
                                                      neg_sum[b]);                          \
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums),                             \
                                      _mm256_mul_ps(_mm256_set1_ps(half_to_float(x[b].d)), dy[b]), acc); \
            }                                                                               \
            float res[8];                                                                   \
            _mm256_storeu_ps(res, acc);                                                     \
            for (int t = 0; t < 8; t++) out[t * out_stride + row] = res[t];                 \
        }                                                                                   \
    }

/* Group g of a block's unsigned weight bytes broadcast to all eight lanes. */
static inline void q4_0_groups(const block_q4_0 *blk, __m256i wg[8]) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int g = 0; g < 4; g++) {
        const __m256i v = _mm256_set1_epi32(load_u32(blk->qs + 4 * g));
        wg[g] = _mm256_and_si256(v, low4);                            /* elements 4g.. */
        wg[4 + g] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);  /* elements 16+4g.. */
    }
}

static inline void q5_0_groups(const block_q5_0 *blk, __m256i wg[8]) {
    const __m256i u = unpack_q5_0_unsigned(blk);
    for (int g = 0; g < 8; g++) wg[g] = _mm256_permutevar8x32_epi32(u, _mm256_set1_epi32(g));
}

RX8_OFFSET_KERNEL(vec_dot_rx8_q4_0_q8_0, block_q4_0, q4_0_groups, 8)
#if X86_VNNI
/* Row r's block dots (p0) in the even dwords and row r+1's (p1) in the odd ones: the
 * two dwords of a token's qword summed, one int32 per (row, token). */
static inline __m512i rx8_pair_sums(__m512i p0, __m512i p1) {
    return _mm512_mask_blend_epi32(0xAAAA, _mm512_add_epi32(p0, _mm512_srli_epi64(p0, 32)),
                                   _mm512_add_epi32(p1, _mm512_slli_epi64(p1, 32)));
}

/* Stores R / 2 row pairs (row r in the even lanes, r+1 in the odd) of eight tokens,
 * skipping rows at or past n_rows. */
static inline void rx8_store_pairs(const __m512 *res, const int R, int64_t row, int64_t n_rows, float *out,
                                   size_t out_stride) {
    for (int q = 0; q < R / 2; q++) {
        float v[16];
        _mm512_storeu_ps(v, res[q]);
        for (int h = 0; h < 2; h++)
            if (row + 2 * q + h < n_rows)
                for (int t = 0; t < 8; t++) out[t * out_stride + row + 2 * q + h] = v[2 * t + h];
    }
}

/* Q5_0, eight tokens, two rows per 512-bit vector (AVX-512 build), four rows a step
 * (two independent pairs) and a pair for the last rows.  The
 * activations are laid out once per call by 64-bit pieces: ys[b][j] holds bytes
 * 8j..8j+7 of block b of token t in qword t (dwords 2t, 2t+1).  A row's blocks are
 * first unpacked to unsigned bytes 0..31 in a buffer (unpack_q5_0_unsigned), so
 * each piece j of a weight block is one vpbroadcastq from memory against
 * ys[b][j]: four vpdpbusd per block and row (instead of eight vpermd and eight
 * vpmaddubsw with their adds), started from -16 * sum(y) in the even dwords.  The
 * two dwords of a token are added within the qword, row r's total landing in the
 * even dword and row r+1's in the odd one, so one cvt, one mul and one fma serve
 * two rows.  Per (row, token) the block's integer dot is the same exact integer and
 * acc = fma(float(dot), d_w * d_y, acc) runs over the blocks in order: the bits of
 * vec_dot_4xn_q5_0_q8_0. */
/* Rows row..row+R-1 (R = 2 or 4, a constant once inlined; rows past n_rows repeat
 * the last one and are not stored): R / 2 independent pairs per block step. */
X86_ALWAYS_INLINE void KERNEL(rx8_q5_0_rows)(int64_t nb, const uint8_t *w, size_t row_bytes, int64_t row,
                                             int64_t n_rows, const int R, __m512i (*ys)[4],
                                             const __m512i *neg_sum, const __m512 *dy,
                                             uint8_t (*wu)[INFER_DOT_RX8_MAX_N], float *out, size_t out_stride) {
    const uint8_t *xr[4];
    for (int i = 0; i < R; i++) xr[i] = w + (row + i < n_rows ? row + i : n_rows - 1) * row_bytes;
    /* the rows ahead, a few lines per block (INFER_PREFETCH_ROWS) */
    const uint8_t *ahead = row + INFER_PREFETCH_ROWS + R <= n_rows ? xr[0] + INFER_PREFETCH_ROWS * row_bytes : NULL;
    size_t fetched = 0;
    for (int64_t b = 0; b < nb; b++) {
        infer_prefetch_part(ahead, &fetched, R * row_bytes, b, nb);
        for (int i = 0; i < R; i++)
            _mm256_storeu_si256((__m256i *)(wu[i] + 32 * b), unpack_q5_0_unsigned((const block_q5_0 *)xr[i] + b));
    }
    __m512 acc[2];
    for (int q = 0; q < R / 2; q++) acc[q] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++)
        for (int q = 0; q < R / 2; q++) {
            __m512i p0 = neg_sum[b], p1 = neg_sum[b];
            for (int j = 0; j < 4; j++) {
                uint64_t w0, w1;
                memcpy(&w0, wu[2 * q] + 32 * b + 8 * j, 8);
                memcpy(&w1, wu[2 * q + 1] + 32 * b + 8 * j, 8);
                p0 = _mm512_dpbusd_epi32(p0, _mm512_set1_epi64((long long)w0), ys[b][j]);
                p1 = _mm512_dpbusd_epi32(p1, _mm512_set1_epi64((long long)w1), ys[b][j]);
            }
            const __m512i sums = rx8_pair_sums(p0, p1);
            const uint32_t dpair = (uint32_t)((const block_q5_0 *)xr[2 * q] + b)->d |
                                   (uint32_t)((const block_q5_0 *)xr[2 * q + 1] + b)->d << 16;
            const __m512 dw = _mm512_cvtph_ps(_mm256_set1_epi32((int)dpair));
            acc[q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dw, dy[b]), acc[q]);
        }
    rx8_store_pairs(acc, R, row, n_rows, out, out_stride);
}

/* The activations of eight tokens for the 512-bit rx8 kernels, laid out once per
 * call: ys[b][j] holds bytes 8j..8j+7 of block b of token t in qword t, dy[b] the
 * scale d_t in dwords 2t and 2t+1, and sy[b] (when given: Q8_1) s_t likewise.  With
 * c > 0, neg_sum[b] holds -c * sum(y_t) in dword 2t and 0 in the odd dwords: the
 * offset of an unsigned weight byte u = x + c, added once per block and token. */
static void KERNEL(rx8_activations)(const uint8_t *a, size_t a_stride, size_t block_bytes, size_t qs_off,
                                    int64_t nb, int c, __m512i (*ys)[4], __m512 *dy, __m512i *neg_sum,
                                    __m512 *sy) {
    for (int64_t b = 0; b < nb; b++) {
        uint64_t q[4][8];
        uint16_t hd[16], hs[16];
        for (int t = 0; t < 8; t++) {
            const uint8_t *y = a + t * a_stride + b * block_bytes;
            for (int j = 0; j < 4; j++) memcpy(&q[j][t], y + qs_off + 8 * j, 8);
            memcpy(&hd[2 * t], y, 2);   /* d first in Q8_0 and Q8_1, then Q8_1's s */
            hd[2 * t + 1] = hd[2 * t];
            if (sy) memcpy(&hs[2 * t], y + 2, 2), hs[2 * t + 1] = hs[2 * t];
        }
        __m512i s = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            ys[b][j] = _mm512_loadu_si512((const void *)q[j]);
            if (c) s = _mm512_dpbusd_epi32(s, _mm512_set1_epi8((char)c), ys[b][j]);
        }
        if (c) {
            s = _mm512_add_epi32(s, _mm512_srli_epi64(s, 32));   /* even dwords: c * sum(y_t) */
            neg_sum[b] = _mm512_maskz_sub_epi32(0x5555, _mm512_setzero_si512(), s);
        }
        dy[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)hd));
        if (sy) sy[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)hs));
    }
}

/* Lane i (0..3, a constant once inlined) of a vector set to v. */
static inline __m128i insert_epi32_lane(__m128i f, int v, int i) {
    return i == 0 ? _mm_insert_epi32(f, v, 0) : i == 1 ? _mm_insert_epi32(f, v, 1)
         : i == 2 ? _mm_insert_epi32(f, v, 2) : _mm_insert_epi32(f, v, 3);
}
static inline __m128i insert_epi16_lane(__m128i f, int v, int i) {
    return i == 0 ? _mm_insert_epi16(f, v, 0) : i == 1 ? _mm_insert_epi16(f, v, 1)
         : i == 2 ? _mm_insert_epi16(f, v, 2) : _mm_insert_epi16(f, v, 3);
}

/* _mm512_set_epi32's arguments for odd lanes = o and even lanes = e. */
#define PAIR16(o, e) o, e, o, e, o, e, o, e, o, e, o, e, o, e, o, e

static void KERNEL(vec_dot_rx8_q5_0_q8_0)(int64_t n, const void *w, size_t row_bytes, int64_t n_rows,
                                          const void *a, size_t a_stride, float *out, size_t out_stride) {
    const int64_t nb = n / QK5_0;
    __m512i ys[INFER_DOT_RX8_MAX_N / QK5_0][4], neg_sum[INFER_DOT_RX8_MAX_N / QK5_0];
    __m512 dy[INFER_DOT_RX8_MAX_N / QK5_0];   /* d of token t in dwords 2t, 2t+1 */
    uint8_t wu[4][INFER_DOT_RX8_MAX_N];   /* no _Alignas: C99 (MSVC); unaligned loads and stores */
    KERNEL(rx8_activations)((const uint8_t *)a, a_stride, sizeof(block_q8_0), offsetof(block_q8_0, qs), nb, 16,
                            ys, dy, neg_sum, NULL);
    int64_t row = 0;
    for (; row + 4 <= n_rows; row += 4)
        KERNEL(rx8_q5_0_rows)(nb, (const uint8_t *)w, row_bytes, row, n_rows, 4, ys, neg_sum, dy, wu, out, out_stride);
    for (; row < n_rows; row += 2)
        KERNEL(rx8_q5_0_rows)(nb, (const uint8_t *)w, row_bytes, row, n_rows, 2, ys, neg_sum, dy, wu, out, out_stride);
}

/* Q4_1 and Q8_0, eight tokens, as Q5_0 above: two rows per 512-bit vector, four rows
 * a step.  Each 8-byte piece of a weight block is broadcast from the file's bytes to
 * the eight tokens' qwords: Q4_1's qs[0..7] and qs[8..15] give pieces 0 and 1 (low
 * nibbles) and 2 and 3 (high nibbles), Q8_0's signed bytes are flipped to unsigned
 * (x ^ 0x80 = x + 128, offset by neg_sum).  Per (row, token) the same exact block
 * integer and the same float operations as vec_dot_4xn (Q4_1: acc = fma(float(dot),
 * d_w d_y, acc), mins = fma(m_w, s_y, mins), then acc + mins; Q8_0: acc only), so
 * the same bits. */
X86_ALWAYS_INLINE void KERNEL(rx8_q4_1_q8_0_rows)(const int is_q8_0, int64_t nb, const uint8_t *w, size_t row_bytes,
                                                  int64_t row, int64_t n_rows, const int R, __m512i (*ys)[4],
                                                  const __m512i *neg_sum, const __m512 *dy, const __m512 *sy,
                                                  float *out, size_t out_stride) {
    const uint8_t *xr[4];
    for (int i = 0; i < R; i++) xr[i] = w + (row + i < n_rows ? row + i : n_rows - 1) * row_bytes;
    /* the rows ahead, a few lines per block (INFER_PREFETCH_ROWS) */
    const uint8_t *ahead = row + INFER_PREFETCH_ROWS + R <= n_rows ? xr[0] + INFER_PREFETCH_ROWS * row_bytes : NULL;
    size_t fetched = 0;
    const __m512i low4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8((char)0x80);
    const size_t block_bytes = is_q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_1);
    __m512 acc[2], mins[2];
    for (int q = 0; q < R / 2; q++) acc[q] = _mm512_setzero_ps(), mins[q] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        infer_prefetch_part(ahead, &fetched, R * row_bytes, b, nb);
        /* the R rows' d (and Q4_1's m, which follows it) as floats, once: fields
         * [d0 m0 d1 m1 ...] or [d0 d1 ...], then each pair's lanes picked out */
        __m128i f = _mm_setzero_si128();
        for (int i = 0; i < R; i++) {   /* inserts, not stores then a wide load: no store forwarding stall */
            uint32_t v;
            memcpy(&v, xr[i] + b * block_bytes, 4);
            f = is_q8_0 ? insert_epi16_lane(f, (int)(v & 0xFFFF), i) : insert_epi32_lane(f, (int)v, i);
        }
        const __m512 fields = _mm512_castps256_ps512(_mm256_cvtph_ps(f));
        for (int q = 0; q < R / 2; q++) {
            __m512i p[2];
            for (int h = 0; h < 2; h++) {
                const uint8_t *x = xr[2 * q + h] + b * block_bytes;
                if (is_q8_0) {
                    p[h] = neg_sum[b];
                    for (int j = 0; j < 4; j++) {
                        uint64_t v;
                        memcpy(&v, x + offsetof(block_q8_0, qs) + 8 * j, 8);
                        p[h] = _mm512_dpbusd_epi32(p[h], _mm512_xor_si512(_mm512_set1_epi64((long long)v), flip),
                                                   ys[b][j]);
                    }
                } else {
                    uint64_t v0, v1;
                    memcpy(&v0, x + offsetof(block_q4_1, qs), 8);
                    memcpy(&v1, x + offsetof(block_q4_1, qs) + 8, 8);
                    const __m512i b0 = _mm512_set1_epi64((long long)v0), b1 = _mm512_set1_epi64((long long)v1);
                    p[h] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(b0, low4), ys[b][0]);
                    p[h] = _mm512_dpbusd_epi32(p[h], _mm512_and_si512(b1, low4), ys[b][1]);
                    p[h] = _mm512_dpbusd_epi32(p[h], _mm512_and_si512(_mm512_srli_epi16(b0, 4), low4), ys[b][2]);
                    p[h] = _mm512_dpbusd_epi32(p[h], _mm512_and_si512(_mm512_srli_epi16(b1, 4), low4), ys[b][3]);
                }
            }
            /* row 2q's field k in the even lanes, row 2q+1's in the odd ones */
            const int step = is_q8_0 ? 1 : 2;
            const __m512i d_idx = _mm512_set_epi32(PAIR16(step * (2 * q + 1), step * 2 * q));
            acc[q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(rx8_pair_sums(p[0], p[1])),
                                     _mm512_mul_ps(_mm512_permutexvar_ps(d_idx, fields), dy[b]), acc[q]);
            if (!is_q8_0)
                mins[q] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_add_epi32(d_idx, _mm512_set1_epi32(1)), fields),
                                          sy[b], mins[q]);
        }
    }
    if (!is_q8_0)
        for (int q = 0; q < R / 2; q++) acc[q] = _mm512_add_ps(acc[q], mins[q]);
    rx8_store_pairs(acc, R, row, n_rows, out, out_stride);
}

#define RX8_512_KERNEL(name, is_q8_0, act_block, c, with_s)                                  \
    static void KERNEL(name)(int64_t n, const void *w, size_t row_bytes, int64_t n_rows,       \
                             const void *a, size_t a_stride, float *out, size_t out_stride) { \
        const int64_t nb = n / 32;                                                          \
        __m512i ys[INFER_DOT_RX8_MAX_N / 32][4], neg_sum[INFER_DOT_RX8_MAX_N / 32];         \
        __m512 dy[INFER_DOT_RX8_MAX_N / 32], sy[INFER_DOT_RX8_MAX_N / 32];                  \
        KERNEL(rx8_activations)((const uint8_t *)a, a_stride, sizeof(act_block), offsetof(act_block, qs), nb, c, \
                                ys, dy, neg_sum, with_s ? sy : NULL);                       \
        int64_t row = 0;                                                                    \
        for (; row + 4 <= n_rows; row += 4)                                                 \
            KERNEL(rx8_q4_1_q8_0_rows)(is_q8_0, nb, (const uint8_t *)w, row_bytes, row, n_rows, 4, ys, neg_sum, \
                                       dy, sy, out, out_stride);                            \
        for (; row < n_rows; row += 2)                                                      \
            KERNEL(rx8_q4_1_q8_0_rows)(is_q8_0, nb, (const uint8_t *)w, row_bytes, row, n_rows, 2, ys, neg_sum, \
                                       dy, sy, out, out_stride);                            \
    }
RX8_512_KERNEL(vec_dot_rx8_q4_1_q8_1, 0, block_q8_1, 0, 1)
RX8_512_KERNEL(vec_dot_rx8_q8_0_q8_0, 1, block_q8_0, 128, 0)
#else
RX8_OFFSET_KERNEL(vec_dot_rx8_q5_0_q8_0, block_q5_0, q5_0_groups, 16)

/* Q8_0 with the tokens in the lanes: each block's exact dot, then the scaling of
 * vec_dot_4xn_q8_0_q8_0 (same bits).  The block dot takes |x| and y with x's sign
 * per group of four (pair sums <= 2 * 128 * 127 fit int16, two groups would not,
 * so each group is widened on its own). */
static void KERNEL(vec_dot_rx8_q8_0_q8_0)(int64_t n, const void *w, size_t row_bytes, int64_t n_rows,
                                          const void *a, size_t a_stride, float *out, size_t out_stride) {
    const int64_t nb = n / QK8_0;
    __m256i ys[INFER_DOT_RX8_MAX_N / QK8_0][8], neg_sum[INFER_DOT_RX8_MAX_N / QK8_0];
    __m256 dy[INFER_DOT_RX8_MAX_N / QK8_0];
    transpose_q8_0_x8(a, a_stride, nb, 128, ys, dy, neg_sum);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t row = 0; row < n_rows; row++) {
        const block_q8_0 *x = (const block_q8_0 *)((const uint8_t *)w + row * row_bytes);
        if (row + INFER_PREFETCH_ROWS < n_rows)
            infer_prefetch_lines((const uint8_t *)x + INFER_PREFETCH_ROWS * row_bytes, row_bytes);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m256i sums = _mm256_setzero_si256();
            for (int g = 0; g < 8; g++) {
                const __m256i v = _mm256_set1_epi32(load_u32((const uint8_t *)x[b].qs + 4 * g));
                sums = _mm256_add_epi32(sums, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(v, v),
                                                                                     _mm256_sign_epi8(ys[b][g], v)),
                                                                ones));
            }
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(_mm256_set1_ps(half_to_float(x[b].d)), dy[b]), acc);
        }
        float res[8];
        _mm256_storeu_ps(res, acc);
        for (int t = 0; t < 8; t++) out[t * out_stride + row] = res[t];
    }
}

static void KERNEL(vec_dot_rx8_q4_1_q8_1)(int64_t n, const void *w, size_t row_bytes, int64_t n_rows,
                                          const void *a, size_t a_stride, float *out, size_t out_stride) {
    const int64_t nb = n / QK4_1;
    __m256i ys[INFER_DOT_RX8_MAX_N / QK4_1][8];
    __m256 dy[INFER_DOT_RX8_MAX_N / QK4_1], sy[INFER_DOT_RX8_MAX_N / QK4_1];
    for (int64_t b = 0; b < nb; b++) {
        __m256i r[8];
        uint16_t hd[8], hs[8];
        for (int t = 0; t < 8; t++) {
            const block_q8_1 *y = (const block_q8_1 *)((const uint8_t *)a + t * a_stride) + b;
            r[t] = _mm256_loadu_si256((const __m256i *)y->qs);
            hd[t] = y->d;
            hs[t] = y->s;
        }
        transpose8_epi32(r, ys[b]);
        dy[b] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hd));
        sy[b] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hs));
    }
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    for (int64_t row = 0; row < n_rows; row++) {
        const block_q4_1 *x = (const block_q4_1 *)((const uint8_t *)w + row * row_bytes);
        if (row + INFER_PREFETCH_ROWS < n_rows)   /* as the mat-mul driver does for its rows */
            infer_prefetch_lines((const uint8_t *)x + INFER_PREFETCH_ROWS * row_bytes, row_bytes);
        __m256 acc = _mm256_setzero_ps(), mins = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m256i p = _mm256_setzero_si256();
            for (int g = 0; g < 4; g++) {
                const __m256i v = _mm256_set1_epi32(load_u32(x[b].qs + 4 * g));
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(_mm256_and_si256(v, low4), ys[b][g]));
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4),
                                                             ys[b][4 + g]));
            }
            const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
            acc = _mm256_fmadd_ps(sums, _mm256_mul_ps(_mm256_set1_ps(half_to_float(x[b].d)), dy[b]), acc);
            mins = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[b].m)), sy[b], mins);
        }
        float res[8];
        _mm256_storeu_ps(res, _mm256_add_ps(acc, mins));
        for (int t = 0; t < 8; t++) out[t * out_stride + row] = res[t];
    }
}
#endif   /* X86_VNNI: the 512-bit rx8 kernels above, else these */

/* Float rows: 4 accumulators of 8 lanes, then a scalar tail. */
#define FLOAT_DOT(name, load_w, scalar_w)                                              \
    static float KERNEL(name)(int64_t n, const void *w, const void *a) {              \
        const float *y = (const float *)a;                                             \
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), \
                         _mm256_setzero_ps()};                                         \
        int64_t i = 0;                                                                 \
        for (; i + 32 <= n; i += 32)                                                   \
            for (int k = 0; k < 4; k++)                                                \
                acc[k] = _mm256_fmadd_ps(load_w(w, i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]); \
        for (; i + 8 <= n; i += 8)                                                     \
            acc[0] = _mm256_fmadd_ps(load_w(w, i), _mm256_loadu_ps(y + i), acc[0]);    \
        float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),               \
                                          _mm256_add_ps(acc[2], acc[3])));             \
        for (; i < n; i++) sum += scalar_w(w, i) * y[i];                               \
        return sum;                                                                    \
    }

#define LOAD_F32(w, i) _mm256_loadu_ps((const float *)(w) + (i))
#define LOAD_F16(w, i) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const infer_half *)(w) + (i))))
#define LOAD_BF16(w, i) _mm256_castsi256_ps(_mm256_slli_epi32(                          \
    _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)(w) + (i)))), 16))
#define SCALAR_F32(w, i) (((const float *)(w))[i])
#define SCALAR_F16(w, i) half_to_float(((const infer_half *)(w))[i])
#define SCALAR_BF16(w, i) infer_bf16_to_fp32(((const uint16_t *)(w))[i])

FLOAT_DOT(vec_dot_f32_f32, LOAD_F32, SCALAR_F32)
FLOAT_DOT(vec_dot_f16_f32, LOAD_F16, SCALAR_F16)
FLOAT_DOT(vec_dot_bf16_f32, LOAD_BF16, SCALAR_BF16)

/* Overrides every entry of the 32-element block formats this header implements. */
static void KERNEL(fill_quants_x86)(infer_kernel_table *t) {
    t->dequantize[INFER_TYPE_F16] = KERNEL(dequantize_f16);
    t->dequantize[INFER_TYPE_BF16] = KERNEL(dequantize_bf16);
    t->dequantize[INFER_TYPE_Q4_0] = KERNEL(dequantize_q4_0);
    t->dequantize[INFER_TYPE_Q4_1] = KERNEL(dequantize_q4_1);
    t->dequantize[INFER_TYPE_Q5_0] = KERNEL(dequantize_q5_0);
    t->dequantize[INFER_TYPE_Q5_1] = KERNEL(dequantize_q5_1);
    t->dequantize[INFER_TYPE_Q8_0] = KERNEL(dequantize_q8_0);
    t->dequantize[INFER_TYPE_Q8_1] = KERNEL(dequantize_q8_1);

    t->dequantize_f16[INFER_TYPE_F32] = KERNEL(dequantize_f16_f32);
    t->dequantize_f16[INFER_TYPE_BF16] = KERNEL(dequantize_f16_bf16);
    t->dequantize_f16[INFER_TYPE_Q4_0] = KERNEL(dequantize_f16_q4_0);
    t->dequantize_f16[INFER_TYPE_Q4_1] = KERNEL(dequantize_f16_q4_1);
    t->dequantize_f16[INFER_TYPE_Q5_0] = KERNEL(dequantize_f16_q5_0);
    t->dequantize_f16[INFER_TYPE_Q5_1] = KERNEL(dequantize_f16_q5_1);
    t->dequantize_f16[INFER_TYPE_Q8_0] = KERNEL(dequantize_f16_q8_0);
    t->dequantize_f16[INFER_TYPE_Q8_1] = KERNEL(dequantize_f16_q8_1);

    t->quantize[INFER_TYPE_F16] = KERNEL(quantize_f16);
    t->quantize[INFER_TYPE_Q8_0] = KERNEL(quantize_q8_0);
    t->quantize[INFER_TYPE_Q8_1] = KERNEL(quantize_q8_1);
    t->quantize[INFER_TYPE_Q8_0S] = KERNEL(quantize_q8_0s);

    t->vec_dot[INFER_TYPE_F32] = KERNEL(vec_dot_f32_f32);
    t->vec_dot[INFER_TYPE_F16] = KERNEL(vec_dot_f16_f32);
    t->vec_dot[INFER_TYPE_BF16] = KERNEL(vec_dot_bf16_f32);
    t->vec_dot[INFER_TYPE_Q4_0] = KERNEL(vec_dot_q4_0_q8_0);
    t->vec_dot[INFER_TYPE_Q4_1] = KERNEL(vec_dot_q4_1_q8_1);
    t->vec_dot[INFER_TYPE_Q5_0] = KERNEL(vec_dot_q5_0_q8_0);
    t->vec_dot[INFER_TYPE_Q5_1] = KERNEL(vec_dot_q5_1_q8_1);
    t->vec_dot[INFER_TYPE_Q8_0] = KERNEL(vec_dot_q8_0_q8_0);

    t->vec_dot_4[INFER_TYPE_Q4_0] = KERNEL(vec_dot_4_q4_0_q8_0);
    t->vec_dot_4[INFER_TYPE_Q4_1] = KERNEL(vec_dot_4_q4_1_q8_1);
    t->vec_dot_4[INFER_TYPE_Q5_0] = KERNEL(vec_dot_4_q5_0_q8_0);
    t->vec_dot_4[INFER_TYPE_Q8_0] = KERNEL(vec_dot_4_q8_0_q8_0);

    t->vec_dot_4x4[INFER_TYPE_Q4_0] = KERNEL(vec_dot_4x4_q4_0_q8_0);
    t->vec_dot_4x4[INFER_TYPE_Q4_1] = KERNEL(vec_dot_4x4_q4_1_q8_1);
    t->vec_dot_4x4[INFER_TYPE_Q5_0] = KERNEL(vec_dot_4x4_q5_0_q8_0);
#if X86_VNNI
    t->vec_dot_4x4[INFER_TYPE_Q8_0] = KERNEL(vec_dot_4x4_q8_0_q8_0);
#endif

    t->vec_dot_4xn[INFER_TYPE_Q4_0] = KERNEL(vec_dot_4xn_q4_0_q8_0);
    t->vec_dot_4xn[INFER_TYPE_Q4_1] = KERNEL(vec_dot_4xn_q4_1_q8_1);
    t->vec_dot_4xn[INFER_TYPE_Q5_1] = KERNEL(vec_dot_4xn_q5_1_q8_1);
    t->vec_dot_4xn[INFER_TYPE_Q5_0] = KERNEL(vec_dot_4xn_q5_0_q8_0);
    t->vec_dot_4xn[INFER_TYPE_Q8_0] = KERNEL(vec_dot_4xn_q8_0_q8_0);
#if X86_VNNI
    t->vec_dot_4xn[INFER_TYPE_IQ4_NL] = KERNEL(vec_dot_4xn_iq4_nl_q8_0);
#endif
    t->vec_dot_4xn[INFER_TYPE_MXFP4] = KERNEL(vec_dot_4xn_mxfp4_q8_0);

    t->vec_dot_rx8[INFER_TYPE_Q4_0] = KERNEL(vec_dot_rx8_q4_0_q8_0);
    t->vec_dot_rx8[INFER_TYPE_Q4_1] = KERNEL(vec_dot_rx8_q4_1_q8_1);
    t->vec_dot_rx8[INFER_TYPE_Q5_0] = KERNEL(vec_dot_rx8_q5_0_q8_0);
    t->vec_dot_rx8[INFER_TYPE_Q8_0] = KERNEL(vec_dot_rx8_q8_0_q8_0);
}

#endif
