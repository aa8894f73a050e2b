/* repack_avx512.c: the *_R16 kernels with AVX-512 VNNI (layout: repack.h).
 *
 * A 512-bit vector holds 4 bytes of each of a group's 16 rows, so vpdpbusd against
 * 4 activation bytes broadcast from memory adds 4 products to each row's lane:
 * a block is 8 multiply-adds per token, then one convert and two fused multiply-
 * adds scale all 16 rows.  The weight vectors of a block are loaded (and, for the
 * 4- and 5-bit formats, unpacked: Q5_0's and Q5_1's fifth bits added as 16 under a
 * byte mask)
 * once for up to 8 tokens, each with its own 16 sums.
 * Same operations in the same order as repack_scalar.c's scalar kernel: same bits
 * (the integer sums of a block may add in any order).
 *
 * At 8 tokens (in cache, one thread, alternated with the kernel before these two
 * changes: Q4_1, Q5_0 and Q8_0 at 0.82-0.84x the time, one token at 0.85-0.92x):
 * - each token's block sums in two chains of four vpdpbusd, not one of eight,
 *   which the out-of-order window could not overlap across the tokens;
 * - a call of one tile (decode) converts the activations' fp16 scales and Q8_0S
 *   offsets once, not once per group of 16 rows.
 */
#include "repack.h"
#include "repack_k.h"
#include "kquants_internal.h"
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

static inline float half_at(const infer_half *p) { return _cvtsh_ss(*p); }

/* An activation block's scales as the kernel uses them: d, and Q8_1's s as a float
 * or Q8_0S's offset term -offset * sum(x) (repack.h). */
typedef struct {
    float d;
    union { float s; int32_t offset; } u;
} r16_scales;

INFER_ALWAYS_INLINE int32_t r16_offset(int type, const uint8_t *xb) {
    const int32_t offset = type == INFER_TYPE_Q4_0_R16 ? 8 : type == INFER_TYPE_Q5_0_R16 ? 16 : 128;   /* Q8_0, IQ4_NL */
    return -offset * (int32_t)((const block_q8_0s *)xb)->sum;
}

/* nt (1..8) tokens against one group of 16 rows, for a constant type and nt.  sc,
 * when not NULL, holds token t's block b's scales at sc[t * nb + b], converted once
 * for all the groups. */
INFER_ALWAYS_INLINE void r16_group(int type, int nt, int64_t nb, const uint8_t *wg, const uint8_t *pf,
                                   const uint8_t *a, size_t a_stride, const r16_scales *sc, float *out,
                                   size_t out_stride) {
    const size_t gbb = type == INFER_TYPE_Q4_0_R16 || type == INFER_TYPE_IQ4_NL_R16 ? 16 * 18
                       : type == INFER_TYPE_Q4_1_R16 ? 16 * 20
                       : type == INFER_TYPE_Q5_0_R16 ? 16 * 22
                       : type == INFER_TYPE_Q5_1_R16 ? 16 * 24
                                                     : 16 * 34;
    const int qs_at = R16_QS(type);
    const __m512i low4 = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
    const __m512i levels = _mm512_broadcast_i32x4(
        _mm_add_epi8(_mm_loadu_si128((const __m128i *)infer_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    __m512 acc[8], mins[8];
    for (int t = 0; t < nt; t++) acc[t] = mins[t] = _mm512_setzero_ps();
    size_t pf_done = 0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *gb = wg + (size_t)b * gbb;
        infer_prefetch_part_soon(pf, &pf_done, (size_t)nb * gbb, b, nb);
        __m512i w[8];
        if (type == INFER_TYPE_Q8_0_R16) {
            for (int c = 0; c < 8; c++) w[c] = _mm512_loadu_si512((const void *)(gb + qs_at + 64 * c));
        } else {
            for (int c = 0; c < 4; c++) {
                const __m512i p = _mm512_loadu_si512((const void *)(gb + qs_at + 64 * c));
                w[c] = _mm512_and_si512(p, low4);
                w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(p, 4), low4);
                if (type == INFER_TYPE_IQ4_NL_R16) {   /* level + 128 */
                    w[c] = _mm512_shuffle_epi8(levels, w[c]);
                    w[c + 4] = _mm512_shuffle_epi8(levels, w[c + 4]);
                }
            }
            if (R16_HAS_H(type))
                for (int c = 0; c < 8; c++) {
                    uint64_t h;
                    memcpy(&h, gb + R16_H(type) + 8 * c, 8);
                    w[c] = _mm512_mask_add_epi8(w[c], _cvtu64_mask64(h), w[c], sixteen);
                }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gb + R16_D)));
        __m512 mw = _mm512_setzero_ps();
        if (R16_HAS_MIN(type)) mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gb + R16_M)));
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = a + (size_t)t * a_stride + (size_t)b * 36;   /* Q8_1 and Q8_0S: 36 bytes */
            const int8_t *xs = (const int8_t *)(xb + 4);
            __m512i isum;
            if (R16_HAS_MIN(type)) {
                isum = _mm512_setzero_si512();
            } else if (sc) {
                isum = _mm512_set1_epi32(sc[t * nb + b].u.offset);
            } else {
                isum = _mm512_set1_epi32(r16_offset(type, xb));
            }
            /* two partial sums: half the dependency chain, the same integer */
            __m512i part = _mm512_setzero_si512();
            for (int c = 0; c < 4; c++) {
                int32_t x4, y4;
                memcpy(&x4, xs + 4 * c, 4);
                memcpy(&y4, xs + 4 * c + 16, 4);
                isum = _mm512_dpbusd_epi32(isum, w[c], _mm512_set1_epi32(x4));
                part = _mm512_dpbusd_epi32(part, w[c + 4], _mm512_set1_epi32(y4));
            }
            isum = _mm512_add_epi32(isum, part);
            const float dx = sc ? sc[t * nb + b].d : half_at((const infer_half *)xb);
            const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc[t]);
            if (R16_HAS_MIN(type)) {
                const float sx = sc ? sc[t * nb + b].u.s : half_at((const infer_half *)(xb + 2));
                mins[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx), mins[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++)
        _mm512_storeu_ps(out + (size_t)t * out_stride,
                         R16_HAS_MIN(type) ? _mm512_add_ps(acc[t], mins[t]) : acc[t]);
}

/* Scales converted once per call: for one tile of tokens (decode), where every group
 * would otherwise convert them again; up to R16_SCALES_MAX_NB blocks a row.  The two
 * expansions below pass sc or a literal NULL, so that each inlined kernel compiles
 * without the sc branch. */
#define R16_SCALES_MAX_NB 256

INFER_ALWAYS_INLINE void r16_matmul(int type, int64_t n, const void *w, int64_t n_groups, const void *a,
                                    size_t a_stride, int64_t n_tok, float *out, size_t out_stride) {
    const int64_t nb = n / QK8_0;
    const size_t group_bytes = (size_t)nb * R16_ROWS * infer_type_block_bytes(type);
    if (n_tok <= 8 && nb <= R16_SCALES_MAX_NB) {
        r16_scales sc[8 * R16_SCALES_MAX_NB];
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *xb = (const uint8_t *)a + (size_t)t * a_stride + (size_t)b * 36;
                sc[t * nb + b].d = half_at((const infer_half *)xb);
                if (R16_HAS_MIN(type)) sc[t * nb + b].u.s = half_at((const infer_half *)xb + 1);
                else sc[t * nb + b].u.offset = r16_offset(type, xb);
            }
#define GROUP(nt, wg, pf, x, o) r16_group(type, nt, nb, wg, pf, x, a_stride, sc, o, out_stride)
        R16_FOR_GROUPS_AND_TILES(w, n_groups, group_bytes, a, a_stride, n_tok, out, out_stride, GROUP)
#undef GROUP
        return;
    }
#define GROUP(nt, wg, pf, x, o) r16_group(type, nt, nb, wg, pf, x, a_stride, NULL, o, out_stride)
    R16_FOR_GROUPS_AND_TILES(w, n_groups, group_bytes, a, a_stride, n_tok, out, out_stride, GROUP)
#undef GROUP
}

#define R16_AVX512(name, type)                                                                         \
    static void name(int64_t n, const void *w, int64_t n_groups, const void *a, size_t a_stride,      \
                     int64_t n_tok, float *out, size_t out_stride) {                                   \
        r16_matmul(type, n, w, n_groups, a, a_stride, n_tok, out, out_stride);                        \
    }
R16_AVX512(matmul_q4_0_r16_avx512, INFER_TYPE_Q4_0_R16)
R16_AVX512(matmul_q4_1_r16_avx512, INFER_TYPE_Q4_1_R16)
R16_AVX512(matmul_q8_0_r16_avx512, INFER_TYPE_Q8_0_R16)
R16_AVX512(matmul_q5_0_r16_avx512, INFER_TYPE_Q5_0_R16)
R16_AVX512(matmul_q5_1_r16_avx512, INFER_TYPE_Q5_1_R16)
R16_AVX512(matmul_iq4_nl_r16_avx512, INFER_TYPE_IQ4_NL_R16)

void infer_fill_repack_avx512(infer_kernel_table *t) {
    infer_fill_repack_k_avx512(t);
    t->matmul_r16[INFER_TYPE_Q4_0_R16] = matmul_q4_0_r16_avx512;
    t->matmul_r16[INFER_TYPE_Q4_1_R16] = matmul_q4_1_r16_avx512;
    t->matmul_r16[INFER_TYPE_Q8_0_R16] = matmul_q8_0_r16_avx512;
    t->matmul_r16[INFER_TYPE_Q5_0_R16] = matmul_q5_0_r16_avx512;
    t->matmul_r16[INFER_TYPE_Q5_1_R16] = matmul_q5_1_r16_avx512;
    t->matmul_r16[INFER_TYPE_IQ4_NL_R16] = matmul_iq4_nl_r16_avx512;
    t->repack_to[INFER_TYPE_IQ4_NL] = INFER_TYPE_IQ4_NL_R16;
    t->repack_to[INFER_TYPE_Q4_0] = INFER_TYPE_Q4_0_R16;
    t->repack_to[INFER_TYPE_Q5_1] = INFER_TYPE_Q5_1_R16;
    t->repack_to[INFER_TYPE_Q4_1] = INFER_TYPE_Q4_1_R16;
    t->repack_to[INFER_TYPE_Q8_0] = INFER_TYPE_Q8_0_R16;
    t->repack_to[INFER_TYPE_Q5_0] = INFER_TYPE_Q5_0_R16;
}
#endif
