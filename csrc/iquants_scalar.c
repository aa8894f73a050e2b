/* iquants_scalar.c: the grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and
 * the ternary TQ1_0, TQ2_0 (weights; dot products with Q8_K), scalar.
 *
 * The oracle for the SIMD files.  Every format is decoded the same way: one super-block
 * of 256 elements into int8 quants q, an integer scale per 16 elements and a float
 * factor dc = d * c, so that element l is dc * ls[l/16] * q[l].  The layouts
 * (ggml-common.h; dequantize_row_* in ggml-quants.c), per sub-block of 32 (ib):
 *  IQ2_XXS: qs as 8 bytes per ib: bytes 0..3 index four 8-element points of
 *           iq2xxs_grid; the next 32-bit word holds four 7-bit sign indices (bits 7l..)
 *           into ksigns and the 4-bit scale s (bits 28..31); ls = 2s+1, c = 1/8.
 *  IQ2_XS:  qs[4ib+l] (16 bits): index bits 0..8 into iq2xs_grid, sign index bits 9..15;
 *           scales[ib]: low nibble for points 0..1, high nibble for 2..3; c = 1/8.
 *  IQ2_S:   index qs[4ib+l] | bits 2l..2l+1 of qh[ib] as bits 8..9 (iq2s_grid); the
 *           point's sign byte is qs[32+4ib+l] (all 8 bits stored); scales as IQ2_XS.
 *  IQ3_XXS: qs[8ib+k] (k < 8) index 4-element points of iq3xxs_grid; the word at
 *           qs[64+4ib] holds the sign indices and scale as IQ2_XXS (one 7-bit index per
 *           8 elements); c = 1/4.
 *  IQ3_S:   index qs[8ib+k] | bit k of qh[ib] as bit 8 (iq3s_grid); signs[4ib+l] gives
 *           the 8 sign bits of elements 8l..8l+7; scale nibble ib&1 of scales[ib/2];
 *           ls = 2s+1, c = 1.
 *  IQ1_S:   index qs[4ib+l] | bits 3l..3l+2 of qh[ib] as bits 8..10 (iq1s_grid, values
 *           -1/0/1); qh bits 12..14 the scale s (ls = 2s+1), bit 15 the sign of a shift
 *           of 1/8 added to every element: value = (8g ± 1) / 8, stored here as 8g ± 1
 *           with c = 1/8.
 *  TQ1_0:   base-3 digits: byte b holds trits t_k = floor(3 * (b * 3^k mod 256) / 256),
 *           most significant first, value t - 1.  qs[0..31] give elements 32k+m (k < 5),
 *           qs[32..47] elements 160+16k+m, qh[0..3] elements 240+4k+j (k < 4).
 *  TQ2_0:   2 bits each: element 128h+32k+m is ((qs[32h+m] >> 2k) & 3) - 1.
 * Dequantized values are exact in f32 whatever the order of the products (d has 11
 * significant bits, ls at most 5, |q| at most 6, c a power of two), so they equal ggml's.
 */
#include "infer_kernels.h"
#include "iquants_grids.h"

#include <string.h>

typedef struct {
    int8_t q[QK_K];
    uint8_t ls[QK_K / 16];
} unpacked;

/* 8 grid bytes with the signs of bits 0..7 of sign applied (bit set: negative). */
static void signed_point(uint64_t point, unsigned sign, int8_t *q) {
    for (int j = 0; j < 8; j++) {
        const int v = (int)((point >> (8 * j)) & 0xFF);
        q[j] = (int8_t)((sign >> j) & 1 ? -v : v);
    }
}

static float unpack_iq2_xxs(const void *src, unpacked *u) {
    const block_iq2_xxs *x = src;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        uint8_t idx[4];
        uint32_t signs;
        memcpy(idx, x->qs + 4 * ib, 4);
        memcpy(&signs, x->qs + 4 * ib + 2, 4);
        for (int l = 0; l < 4; l++)
            signed_point(infer_iq2xxs_grid[idx[l]], infer_ksigns_iq2xs[(signs >> (7 * l)) & 127],
                         u->q + 32 * ib + 8 * l);
        u->ls[2 * ib] = u->ls[2 * ib + 1] = (uint8_t)(2 * (signs >> 28) + 1);
    }
    return infer_fp16_to_fp32(x->d) * 0.125f;
}

static float unpack_iq2_xs(const void *src, unpacked *u) {
    const block_iq2_xs *x = src;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        for (int l = 0; l < 4; l++) {
            const uint16_t v = x->qs[4 * ib + l];
            signed_point(infer_iq2xs_grid[v & 511], infer_ksigns_iq2xs[v >> 9], u->q + 32 * ib + 8 * l);
        }
        u->ls[2 * ib] = (uint8_t)(2 * (x->scales[ib] & 15) + 1);
        u->ls[2 * ib + 1] = (uint8_t)(2 * (x->scales[ib] >> 4) + 1);
    }
    return infer_fp16_to_fp32(x->d) * 0.125f;
}

static float unpack_iq2_s(const void *src, unpacked *u) {
    const block_iq2_s *x = src;
    const uint8_t *signs = x->qs + QK_K / 8;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        for (int l = 0; l < 4; l++) {
            const int index = x->qs[4 * ib + l] | (((x->qh[ib] >> (2 * l)) & 3) << 8);
            signed_point(infer_iq2s_grid[index], signs[4 * ib + l], u->q + 32 * ib + 8 * l);
        }
        u->ls[2 * ib] = (uint8_t)(2 * (x->scales[ib] & 15) + 1);
        u->ls[2 * ib + 1] = (uint8_t)(2 * (x->scales[ib] >> 4) + 1);
    }
    return infer_fp16_to_fp32(x->d) * 0.125f;
}

static float unpack_iq3_xxs(const void *src, unpacked *u) {
    const block_iq3_xxs *x = src;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        uint32_t signs;
        memcpy(&signs, x->qs + QK_K / 4 + 4 * ib, 4);
        for (int l = 0; l < 4; l++) {
            const uint64_t point = infer_iq3xxs_grid[x->qs[8 * ib + 2 * l]] |
                                   (uint64_t)infer_iq3xxs_grid[x->qs[8 * ib + 2 * l + 1]] << 32;
            signed_point(point, infer_ksigns_iq2xs[(signs >> (7 * l)) & 127], u->q + 32 * ib + 8 * l);
        }
        u->ls[2 * ib] = u->ls[2 * ib + 1] = (uint8_t)(2 * (signs >> 28) + 1);
    }
    return infer_fp16_to_fp32(x->d) * 0.25f;
}

static float unpack_iq3_s(const void *src, unpacked *u) {
    const block_iq3_s *x = src;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        for (int l = 0; l < 4; l++) {
            const int k = 2 * l;
            const int i0 = x->qs[8 * ib + k] | (((x->qh[ib] >> k) & 1) << 8);
            const int i1 = x->qs[8 * ib + k + 1] | (((x->qh[ib] >> (k + 1)) & 1) << 8);
            const uint64_t point = infer_iq3s_grid[i0] | (uint64_t)infer_iq3s_grid[i1] << 32;
            signed_point(point, x->signs[4 * ib + l], u->q + 32 * ib + 8 * l);
        }
        const int s = (x->scales[ib / 2] >> (4 * (ib & 1))) & 15;
        u->ls[2 * ib] = u->ls[2 * ib + 1] = (uint8_t)(2 * s + 1);
    }
    return infer_fp16_to_fp32(x->d);
}

static float unpack_iq1_s(const void *src, unpacked *u) {
    const block_iq1_s *x = src;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const unsigned qh = x->qh[ib];
        const int shift = qh & 0x8000 ? -1 : 1;
        for (int l = 0; l < 4; l++) {
            const uint64_t point = infer_iq1s_grid[x->qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
            for (int j = 0; j < 8; j++)
                u->q[32 * ib + 8 * l + j] = (int8_t)(8 * (int8_t)(point >> (8 * j)) + shift);
        }
        u->ls[2 * ib] = u->ls[2 * ib + 1] = (uint8_t)(2 * ((qh >> 12) & 7) + 1);
    }
    return infer_fp16_to_fp32(x->d) * 0.125f;
}

/* Trit k (most significant first) of a byte holding a base-3 fraction. */
static int8_t trit(uint8_t b, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t q = (uint8_t)(b * pow3[k]);   /* mod 256 */
    return (int8_t)(((unsigned)q * 3 >> 8) - 1);
}

static float unpack_tq1_0(const void *src, unpacked *u) {
    const block_tq1_0 *x = src;
    int8_t *q = u->q;
    for (int k = 0; k < 5; k++)
        for (int m = 0; m < 32; m++) q[32 * k + m] = trit(x->qs[m], k);
    for (int k = 0; k < 5; k++)
        for (int m = 0; m < 16; m++) q[160 + 16 * k + m] = trit(x->qs[32 + m], k);
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) q[240 + 4 * k + j] = trit(x->qh[j], k);
    memset(u->ls, 1, sizeof u->ls);
    return infer_fp16_to_fp32(x->d);
}

static float unpack_tq2_0(const void *src, unpacked *u) {
    const block_tq2_0 *x = src;
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int m = 0; m < 32; m++)
                u->q[128 * h + 32 * k + m] = (int8_t)(((x->qs[32 * h + m] >> (2 * k)) & 3) - 1);
    memset(u->ls, 1, sizeof u->ls);
    return infer_fp16_to_fp32(x->d);
}

typedef float (*unpack_fn)(const void *src, unpacked *u);

static void dequantize(unpack_fn unpack, size_t block_bytes, const void *src, float *y, int64_t n) {
    unpacked u;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float dc = unpack((const uint8_t *)src + i * block_bytes, &u);
        for (int l = 0; l < QK_K; l++) y[l] = dc * u.ls[l / 16] * u.q[l];
    }
}

static void dequantize_f16(unpack_fn unpack, size_t block_bytes, const void *src, infer_half *y,
                           int64_t n) {
    float buf[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        dequantize(unpack, block_bytes, (const uint8_t *)src + i * block_bytes, buf, QK_K);
        for (int l = 0; l < QK_K; l++) y[l] = infer_fp32_to_fp16(buf[l]);
    }
}

/* Σ_blocks dc·d_a·Σ_g ls_g·Σ q·a, the inner sums exact in int32. */
static float vec_dot(unpack_fn unpack, size_t block_bytes, int64_t n, const void *w, const void *a) {
    const block_q8_K *y = a;
    unpacked u;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float dc = unpack((const uint8_t *)w + i * block_bytes, &u);
        int32_t sumi = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int32_t s = 0;
            for (int l = 16 * g; l < 16 * g + 16; l++) s += u.q[l] * y[i].qs[l];
            sumi += u.ls[g] * s;
        }
        sum += dc * y[i].d * (float)sumi;
    }
    return sum;
}

#define IQ_FORMAT(TYPE, name, block)                                                          \
    static void infer_dequantize_##name##_scalar(const void *src, float *y, int64_t n) {      \
        dequantize(unpack_##name, sizeof(block), src, y, n);                                  \
    }                                                                                         \
    static void infer_dequantize_f16_##name##_scalar(const void *src, infer_half *y, int64_t n) { \
        dequantize_f16(unpack_##name, sizeof(block), src, y, n);                              \
    }                                                                                         \
    static float infer_vec_dot_##name##_q8_K_scalar(int64_t n, const void *w, const void *a) { \
        return vec_dot(unpack_##name, sizeof(block), n, w, a);                                \
    }
INFER_IQUANTS_FORMATS(IQ_FORMAT)
#undef IQ_FORMAT

void infer_fill_iquants_scalar(infer_kernel_table *t) {
#define FILL(TYPE, name, block) INFER_IQUANTS_FILL(t, scalar, TYPE, name);
    INFER_IQUANTS_FORMATS(FILL)
#undef FILL
}
