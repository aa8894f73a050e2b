/* kquants_internal.h: format helpers shared by the kquants_*.c files (private).
 *
 * The K formats (ggml-common.h, ggml-quants.c):
 *  Q4_K: 8 sub-blocks of 32; element = d*sc[j]*q - dmin*m[j], q in 0..15.  The 6-bit
 *        sc/m live in 12 bytes: for j < 4, sc = s[j] & 63 and m = s[j+4] & 63; for
 *        j >= 4, the low 4 bits come from s[j+4] (sc low nibble, m high nibble) and
 *        the top 2 bits from bits 6..7 of s[j-4] (sc) and s[j] (m).  Nibbles: 64
 *        elements per 32 bytes, element l in the low nibble, element l+32 in the high.
 *  Q6_K: 16 sub-blocks of 16, element = d*sc[j]*(q-32), q in 0..63 (see ggml-facts.md).
 *  Q8_K: activations; d is f32 (may be negative), bsums[j] = sum of qs[16j..16j+15].
 */
#ifndef INFER_KQUANTS_INTERNAL_H
#define INFER_KQUANTS_INTERNAL_H

#include "infer_kernels.h"

#include <string.h>

#if defined(_MSC_VER)
#include <intrin.h>
#define KQ_INLINE static __forceinline
static __forceinline int kq_lowest_bit(unsigned v) {  /* v != 0 */
    unsigned long i;
    _BitScanForward(&i, v);
    return (int)i;
}
#else
#define KQ_INLINE static inline __attribute__((always_inline))
static inline int kq_lowest_bit(unsigned v) { return __builtin_ctz(v); }  /* v != 0 */
#endif

/* The f32 and f16 dequantize entries (f32_name, f16_name) of a dequantizer written
 * once as impl(src, dst, n, f16). */
#define KQ_DEQUANTIZERS(f32_name, f16_name, impl)                                          \
    static void f32_name(const void *src, float *dst, int64_t n) { impl(src, dst, n, 0); } \
    static void f16_name(const void *src, infer_half *dst, int64_t n) { impl(src, dst, n, 1); }

/* ggml's GROUP_MAX_EPS: a group whose largest |x| is below this quantizes to zero. */
#define GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even (ggml's nearest_int: adding 1.5*2^23 leaves the
 * rounded integer in the low mantissa bits).  Valid for |x| <= 2^22. */
static inline int nearest_int(float x) {
    float biased = x + 12582912.f;
    int32_t bits;
    memcpy(&bits, &biased, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

/* The start of ggml's symmetric sub-block quantizers (make_q3_quants, make_qx_quants):
 * the element of largest magnitude (0 when it is below GROUP_MAX_EPS: the group is
 * zero), then the levels l = clamp(nearest(iscale * x), -nmax, nmax - 1) stored as
 * l + offset, with Σ w·x·l and Σ w·l² (w = x²). */
static inline float infer_signed_absmax(int n, const float *x) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = x[i] < 0 ? -x[i] : x[i];
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    return amax < GROUP_MAX_EPS ? 0.f : max;
}

static inline void infer_symmetric_levels(int n, int nmax, const float *x, float iscale, int offset,
                                          int8_t *L, float *sumlx, float *suml2) {
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(l + offset);
        float w = x[i] * x[i];
        slx += w * x[i] * l;
        sl2 += w * l * l;
    }
    *sumlx = slx, *suml2 = sl2;
}

/* ggml make_qkx2_quants (kquants_scalar.c): Q2_K, Q4_K and Q5_K's sub-block search. */
float infer_make_qkx2_quants(int n, int nmax, const float *x, const float *weights,
                             uint8_t *L, float *neg_min, uint8_t *Laux,
                             float rmin, float rdelta, int nstep, int use_mad);

/* ggml's kvalues_iq4nl (iq4_scalar.c): the 16 levels of IQ4_NL and IQ4_XS nibbles. */
extern const int8_t infer_kvalues_iq4nl[16];

/* ggml's kvalues_mxfp4 (iq4_scalar.c): the E2M1 values doubled, so integers. */
extern const int8_t infer_kvalues_mxfp4[16];

/* Q4_K and Q5_K's sub-block search (kquants_scalar.c, ggml quantize_row_q4_K_ref and
 * _q5_K_ref): per 32 elements the best scale and min for levels 0..nmax
 * (make_qkx2_quants with rmin and nstep), packed as 6-bit scales and mins with fp16 d
 * and dmin; L gets the levels requantized against the stored scales. */
void infer_quantize_K_sub_blocks(const float *x, int nmax, float rmin, int nstep, uint8_t L[QK_K],
                                 uint8_t scales[K_SCALE_SIZE], infer_half *d, infer_half *dmin);

/* The 8 scales then the 8 mins of a Q4_K block, as bytes 0..7 and 8..15 of out
 * (little-endian words, as on every target we build for).
 * Word-wise: the same bit moves as the per-j rule above, four sub-blocks at once. */
static inline void infer_q4_K_unpack_scales(const uint8_t *s, uint8_t out[16]) {
    const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    uint32_t w[3], r[4];
    memcpy(w, s, 12);
    r[0] = w[0] & low6;                                  /* sc 0..3 */
    r[2] = w[1] & low6;                                  /* m 0..3 */
    r[1] = (w[2] & low4) | (((w[0] >> 6) & low2) << 4);  /* sc 4..7 */
    r[3] = ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4);  /* m 4..7 */
    memcpy(out, r, 16);
}

/* The 16 signed scales (sc - 32) of a Q3_K block, word-wise: sub-block j takes its
 * low nibble from byte j % 8 (high nibble for j >= 8) and its top two bits from bits
 * 2*(j/4)..+1 of byte 8 + j % 4. */
static inline void infer_q3_K_unpack_scales(const uint8_t *s, int8_t out[16]) {
    const uint32_t low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    uint32_t w[3], r[4];
    memcpy(w, s, 12);
    r[0] = (w[0] & low4) | ((w[2] & low2) << 4);
    r[1] = (w[1] & low4) | (((w[2] >> 2) & low2) << 4);
    r[2] = ((w[0] >> 4) & low4) | (((w[2] >> 4) & low2) << 4);
    r[3] = ((w[1] >> 4) & low4) | (((w[2] >> 6) & low2) << 4);
    uint8_t u[16];
    memcpy(u, r, 16);
    for (int j = 0; j < 16; j++) out[j] = (int8_t)(u[j] - 32);
}

#if defined(__AVX2__)
#include <immintrin.h>
/* The same unpack in a register: bytes 0..7 scales, 8..15 mins.  Reads 16 bytes
 * from s: the 12 scale bytes of a block_q4_K are followed by its qs. */
static inline __m128i infer_q4_K_unpack_scales_sse(const uint8_t *s) {
    const __m128i w = _mm_loadu_si128((const __m128i *)s);     /* w0 w1 w2 . */
    const __m128i a = _mm_shuffle_epi32(w, _MM_SHUFFLE(2, 1, 2, 0));  /* w0 w2 w1 w2 */
    const __m128i b = _mm_shuffle_epi32(w, _MM_SHUFFLE(1, 1, 0, 0));  /* w0 w0 w1 w1 */
    const __m128i low = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                      _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i top = _mm_and_si128(_mm_srli_epi32(b, 2),   /* bits 6..7 -> 4..5 */
                                      _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(low, top);
}

/* Q4_K and Q5_K per super-block: the 8 sub-block scales as int16 in both 128-bit
 * halves, and acc_m += dmin * Σ_j m_j·(bsums[2j] + bsums[2j+1]), the mins' part. */
static inline __m256i infer_q4_K_scales_and_mins(const uint8_t *scales, const block_q8_K *y, float dmin,
                                                 __m128 *acc_m) {
    const __m128i sm = infer_q4_K_unpack_scales_sse(scales);
    const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums),
                                      _mm_loadu_si128((const __m128i *)y->bsums + 1));
    const __m128i mins16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    *acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(bs, mins16)), *acc_m);
    return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
}
#endif

#endif
