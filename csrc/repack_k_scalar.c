/* repack_k_scalar.c: the super-block *_R16 formats (Q2_K to Q6_K, IQ4_XS; layouts:
 * repack_k.h): repacking a file's rows, and the portable kernels, which are the
 * oracles of repack_k_avx512.c. */
#include "repack_k.h"
#include "kquants_internal.h"

#include <string.h>

/* A unit of Q6_K's and Q3_K's reading order, for one row: its three 4-byte chunks,
 * each 64 bytes (a chunk of all 16 rows) after the last. */
static void place_unit(uint8_t *unit, const uint8_t *a, const uint8_t *b, const uint8_t *c) {
    memcpy(unit, a, 4);
    memcpy(unit + 64, b, 4);
    memcpy(unit + 128, c, 4);
}

/* File block x of row r (format `type`) into its place in group-block out. */
static void place_row_block(int type, const uint8_t *x, uint8_t *out, int r) {
    switch (type) {
    case INFER_TYPE_Q4_K:
    case INFER_TYPE_Q5_K: {   /* the same d, dmin and scales; Q5_K has qh before qs */
        const block_q4_K *b = (const block_q4_K *)x;
        const int five = type == INFER_TYPE_Q5_K;
        memcpy(out + R16K_D + 2 * r, &b->d, 2);
        memcpy(out + R16K_DMIN + 2 * r, &b->dmin, 2);
        for (int k = 0; k < 3; k++) memcpy(out + R16K_SCALES + 64 * k + 4 * r, b->scales + 4 * k, 4);
        if (five)
            for (int c = 0; c < 8; c++) memcpy(out + R16K5_QH + 64 * c + 4 * r, ((const block_q5_K *)x)->qh + 4 * c, 4);
        const uint8_t *qs = five ? ((const block_q5_K *)x)->qs : b->qs;
        for (int c = 0; c < QK_K / 8; c++) memcpy(out + (five ? R16K5_QS : R16K_QS) + 64 * c + 4 * r, qs + 4 * c, 4);
        break;
    }
    case INFER_TYPE_Q6_K: {
        const block_q6_K *b = (const block_q6_K *)x;
        memcpy(out + R16Q6_D + 2 * r, &b->d, 2);
        for (int k = 0; k < 4; k++) memcpy(out + R16Q6_SCALES + 64 * k + 4 * r, b->scales + 4 * k, 4);
        for (int u = 0; u < 16; u++) {
            const int h = u / 8, m = 4 * (u % 8);
            place_unit(out + R16Q6_UNITS + R16Q6_UNIT * u + 4 * r, b->qh + 32 * h + m, b->ql + 64 * h + m,
                       b->ql + 64 * h + 32 + m);
        }
        break;
    }
    case INFER_TYPE_IQ4_XS: {
        const block_iq4_xs *b = (const block_iq4_xs *)x;
        memcpy(out + R16I4_D + 2 * r, &b->d, 2);
        memcpy(out + R16I4_SH + 2 * r, &b->scales_h, 2);
        memcpy(out + R16I4_SL + 4 * r, b->scales_l, 4);
        for (int c = 0; c < QK_K / 8; c++) memcpy(out + R16I4_QS + 64 * c + 4 * r, b->qs + 4 * c, 4);
        break;
    }
    case INFER_TYPE_Q3_K: {
        const block_q3_K *b = (const block_q3_K *)x;
        memcpy(out + R16Q3_D + 2 * r, &b->d, 2);
        for (int k = 0; k < 3; k++) memcpy(out + R16Q3_SCALES + 64 * k + 4 * r, b->scales + 4 * k, 4);
        for (int k = 0; k < 8; k++)
            place_unit(out + R16Q3_UNITS + R16Q3_UNIT * k + 4 * r, b->hmask + 4 * k, b->qs + 4 * k,
                       b->qs + 32 + 4 * k);
        break;
    }
    default: {   /* Q2_K */
        const block_q2_K *b = (const block_q2_K *)x;
        memcpy(out + R16Q2_D + 2 * r, &b->d, 2);
        memcpy(out + R16Q2_DMIN + 2 * r, &b->dmin, 2);
        for (int k = 0; k < 4; k++) memcpy(out + R16Q2_SCALES + 64 * k + 4 * r, b->scales + 4 * k, 4);
        for (int c = 0; c < 16; c++) memcpy(out + R16Q2_QS + 64 * c + 4 * r, b->qs + 4 * c, 4);
        break;
    }
    }
}

int infer_repack_k_r16(int type, const void *src, size_t row_bytes, int64_t rows, int64_t cols, void *dst) {
    if (!src || !dst || rows < 0 || rows % R16_ROWS || cols <= 0 || cols % QK_K) return -1;
    if (infer_type_block_size(type) != QK_K || !infer_repack_type(type)) return -1;
    const size_t bb = infer_type_block_bytes(type);   /* a group-block is 16 of them */
    const int64_t nb = cols / QK_K;
    if (row_bytes < (size_t)nb * bb) return -1;
    uint8_t *out = (uint8_t *)dst;
    for (int64_t g = 0; g < rows / R16_ROWS; g++)
        for (int64_t b = 0; b < nb; b++, out += R16_ROWS * bb)
            for (int r = 0; r < R16_ROWS; r++)
                place_row_block(type, (const uint8_t *)src + (size_t)(g * R16_ROWS + r) * row_bytes + (size_t)b * bb, out, r);
    return 0;
}

/* q of row r, element k (0..31) of sub-block j in a Q4_K_R16 group-block, or with
 * five a Q5_K_R16 one (the nibble plus 16 times its fifth bit). */
static int q45_K_r16_q(const uint8_t *gb, int r, int j, int k, int five) {
    const int c = 8 * (j / 2) + k / 4;
    const uint8_t byte = gb[(five ? R16K5_QS : R16K_QS) + 64 * c + 4 * r + k % 4];
    const int q = j % 2 ? byte >> 4 : byte & 15;
    if (!five) return q;
    const uint8_t h = gb[R16K5_QH + 64 * (k / 4) + 4 * r + k % 4];
    return q + 16 * ((h >> j) & 1);
}

/* The 6-bit q (0..63) of row r, element e of a Q6_K_R16 group-block, as the file
 * defines it: element 128h + i (i < 128) is nibble i / 64 of ql[64h + i % 64] with
 * bits 2f..2f+1 of qh[32h + i % 32] on top, f = i / 32. */
static int q6_K_r16_value(const uint8_t *gb, int r, int e) {
    const int h = e / 128, i = e % 128, m = i % 32, f = i / 32;
    const uint8_t *unit = gb + R16Q6_UNITS + R16Q6_UNIT * (8 * h + m / 4) + 4 * r + m % 4;
    const uint8_t lbyte = unit[64 * (1 + f % 2)], hbyte = unit[0];
    return (f < 2 ? lbyte & 15 : lbyte >> 4) | ((hbyte >> (2 * f)) & 3) << 4;
}

/* u = q + 4 (0..7) of row r, element e of a Q3_K_R16 group-block (repack_k.h). */
static int q3_K_r16_u(const uint8_t *gb, int r, int e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const uint8_t *unit = gb + R16Q3_UNITS + R16Q3_UNIT * (l / 4) + 4 * r + l % 4;
    return ((unit[64 + 64 * h] >> (2 * j)) & 3) + 4 * ((unit[0] >> (4 * h + j)) & 1);
}

/* Row r of group-block gb (a repacked format of repack_k.h) against the token's
 * super-block y: the exact integer sums, then the kernels' float steps on acc. */
static float k_r16_row_block(int type, const uint8_t *gb, int r, const block_q8_K *y, float acc) {
    if (type == INFER_TYPE_Q4_K_R16 || type == INFER_TYPE_Q5_K_R16) {
        const int five = type == INFER_TYPE_Q5_K_R16;
        uint8_t packed[12], sm[16];   /* sm: the 8 scales, then the 8 mins */
        for (int k = 0; k < 3; k++) memcpy(packed + 4 * k, gb + R16K_SCALES + 64 * k + 4 * r, 4);
        infer_q4_K_unpack_scales(packed, sm);
        int32_t sum = 0, mins = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            int32_t isum = 0;
            for (int k = 0; k < 32; k++) isum += q45_K_r16_q(gb, r, j, k, five) * y->qs[32 * j + k];
            sum += sm[j] * isum;
            mins += sm[8 + j] * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
        }
        acc = fma_f32((float)sum, fp16_at(gb + R16K_D + 2 * r) * y->d, acc);
        return fma_f32((float)mins, -(fp16_at(gb + R16K_DMIN + 2 * r) * y->d), acc);
    }
    if (type == INFER_TYPE_Q2_K_R16) {
        int32_t sum = 0, mins = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            const uint8_t sm = gb[R16Q2_SCALES + 64 * (j / 4) + 4 * r + j % 4];
            int32_t isum = 0;
            for (int k = 0; k < 16; k++) {
                const int e = 16 * j + k, l = e % 32;
                const uint8_t byte = gb[R16Q2_QS + 64 * (8 * (e / 128) + l / 4) + 4 * r + l % 4];
                isum += ((byte >> (2 * ((e % 128) / 32))) & 3) * y->qs[e];
            }
            sum += (sm & 15) * isum;
            mins += (sm >> 4) * y->bsums[j];
        }
        acc = fma_f32((float)sum, fp16_at(gb + R16Q2_D + 2 * r) * y->d, acc);
        return fma_f32((float)mins, -(fp16_at(gb + R16Q2_DMIN + 2 * r) * y->d), acc);
    }
    if (type == INFER_TYPE_Q3_K_R16) {
        uint8_t packed[12];
        int8_t sc[16];
        for (int k = 0; k < 3; k++) memcpy(packed + 4 * k, gb + R16Q3_SCALES + 64 * k + 4 * r, 4);
        infer_q3_K_unpack_scales(packed, sc);
        int32_t sum = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            int32_t isum = -4 * y->bsums[j];
            for (int k = 0; k < 16; k++) isum += q3_K_r16_u(gb, r, 16 * j + k) * y->qs[16 * j + k];
            sum += sc[j] * isum;
        }
        return fma_f32((float)sum, fp16_at(gb + R16Q3_D + 2 * r) * y->d, acc);
    }
    if (type == INFER_TYPE_Q6_K_R16) {
        int32_t sum = 0, offset = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            const int sc = (int8_t)gb[R16Q6_SCALES + 64 * (j / 4) + 4 * r + j % 4];
            int32_t isum = 0;
            for (int k = 0; k < 16; k++) isum += q6_K_r16_value(gb, r, 16 * j + k) * y->qs[16 * j + k];
            sum += sc * isum;
            offset += sc * y->bsums[j];
        }
        return fma_f32((float)(sum - 32 * offset), fp16_at(gb + R16Q6_D + 2 * r) * y->d, acc);
    }
    /* IQ4_XS_R16 */
    const int sh = gb[R16I4_SH + 2 * r] | gb[R16I4_SH + 2 * r + 1] << 8;
    int32_t sum = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        const int ls = (gb[R16I4_SL + 4 * r + j / 2] >> (4 * (j % 2)) & 15) | (sh >> (2 * j) & 3) << 4;
        int32_t isum = 0;
        for (int k = 0; k < 32; k++) {
            const uint8_t byte = gb[R16I4_QS + 64 * (4 * j + (k % 16) / 4) + 4 * r + k % 4];
            isum += infer_kvalues_iq4nl[k < 16 ? byte & 15 : byte >> 4] * y->qs[32 * j + k];
        }
        sum += (ls - 32) * isum;
    }
    return fma_f32((float)sum, fp16_at(gb + R16I4_D + 2 * r) * y->d, acc);
}

static void matmul_k_r16_scalar(int type, int64_t n, const void *w, int64_t n_groups, const void *a,
                                size_t a_stride, int64_t n_tok, float *out, size_t out_stride) {
    const int64_t nb = n / QK_K;
    const size_t gbb = R16_ROWS * infer_type_block_bytes(type);   /* a group-block */
    for (int64_t g = 0; g < n_groups; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)g * (size_t)nb * gbb;
        for (int64_t t = 0; t < n_tok; t++) {
            const block_q8_K *x = (const block_q8_K *)((const uint8_t *)a + (size_t)t * a_stride);
            float acc[R16_ROWS] = {0};
            for (int64_t b = 0; b < nb; b++)
                for (int r = 0; r < R16_ROWS; r++) acc[r] = k_r16_row_block(type, wg + (size_t)b * gbb, r, &x[b], acc[r]);
            for (int r = 0; r < R16_ROWS; r++) out[(size_t)t * out_stride + (size_t)g * R16_ROWS + r] = acc[r];
        }
    }
}

#define K_R16_SCALAR(name, type)                                                                       \
    static void name(int64_t n, const void *w, int64_t n_groups, const void *a, size_t a_stride,      \
                     int64_t n_tok, float *out, size_t out_stride) {                                   \
        matmul_k_r16_scalar(type, n, w, n_groups, a, a_stride, n_tok, out, out_stride);               \
    }
K_R16_SCALAR(matmul_q4_k_r16, INFER_TYPE_Q4_K_R16)
K_R16_SCALAR(matmul_q5_k_r16, INFER_TYPE_Q5_K_R16)
K_R16_SCALAR(matmul_q6_k_r16, INFER_TYPE_Q6_K_R16)
K_R16_SCALAR(matmul_iq4_xs_r16, INFER_TYPE_IQ4_XS_R16)
K_R16_SCALAR(matmul_q3_k_r16, INFER_TYPE_Q3_K_R16)
K_R16_SCALAR(matmul_q2_k_r16, INFER_TYPE_Q2_K_R16)

/* As infer_fill_repack_scalar: the kernel for every table, repack_to left 0. */
void infer_fill_repack_k_scalar(infer_kernel_table *t) {
    t->matmul_r16[INFER_TYPE_Q4_K_R16] = matmul_q4_k_r16;
    t->matmul_r16[INFER_TYPE_Q5_K_R16] = matmul_q5_k_r16;
    t->matmul_r16[INFER_TYPE_Q6_K_R16] = matmul_q6_k_r16;
    t->matmul_r16[INFER_TYPE_IQ4_XS_R16] = matmul_iq4_xs_r16;
    t->matmul_r16[INFER_TYPE_Q3_K_R16] = matmul_q3_k_r16;
    t->matmul_r16[INFER_TYPE_Q2_K_R16] = matmul_q2_k_r16;
}
