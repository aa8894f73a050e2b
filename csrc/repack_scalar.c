/* repack_scalar.c: the *_R16 formats (see repack.h): repacking a file's rows, and the
 * portable kernel, which is the oracle of the SIMD ones (repack_avx512.c). */
#include "repack.h"
#include "repack_k.h"
#include "kquants_internal.h"

#include <string.h>

int infer_repack_type(int type) {
    switch (type) {
    case INFER_TYPE_Q4_0: return INFER_TYPE_Q4_0_R16;
    case INFER_TYPE_Q4_1: return INFER_TYPE_Q4_1_R16;
    case INFER_TYPE_Q5_0: return INFER_TYPE_Q5_0_R16;
    case INFER_TYPE_Q5_1: return INFER_TYPE_Q5_1_R16;
    case INFER_TYPE_IQ4_NL: return INFER_TYPE_IQ4_NL_R16;
    case INFER_TYPE_Q8_0: return INFER_TYPE_Q8_0_R16;
    case INFER_TYPE_Q4_K: return INFER_TYPE_Q4_K_R16;
    case INFER_TYPE_Q5_K: return INFER_TYPE_Q5_K_R16;
    case INFER_TYPE_Q6_K: return INFER_TYPE_Q6_K_R16;
    case INFER_TYPE_IQ4_XS: return INFER_TYPE_IQ4_XS_R16;
    case INFER_TYPE_Q3_K: return INFER_TYPE_Q3_K_R16;
    case INFER_TYPE_Q2_K: return INFER_TYPE_Q2_K_R16;
    default: return 0;
    }
}

int infer_repack_r16(int type, const void *src, size_t row_bytes, int64_t rows, int64_t cols, void *dst) {
    if (infer_type_block_size(type) == QK_K) return infer_repack_k_r16(type, src, row_bytes, rows, cols, dst);
    const int rt = infer_repack_type(type);
    if (!rt || !src || !dst || rows < 0 || rows % R16_ROWS || cols <= 0 || cols % QK8_0) return -1;
    const size_t bb = infer_type_block_bytes(type);
    const int64_t nb = cols / QK8_0;
    if (row_bytes < (size_t)nb * bb) return -1;
    const int chunks = R16_CHUNKS(rt), qs_at = R16_QS(rt);
    const uint8_t flip = rt == INFER_TYPE_Q8_0_R16 ? 0x80 : 0;
    uint8_t *out = (uint8_t *)dst;
    for (int64_t g = 0; g < rows / R16_ROWS; g++)
        for (int64_t b = 0; b < nb; b++, out += R16_ROWS * bb) {
            uint64_t masks[8] = {0};   /* Q5_0: the fifth bits by nibble chunk */
            for (int r = 0; r < R16_ROWS; r++) {
                /* every file block starts with d; Q4_1 has m next, Q5_0 qh, Q5_1 m and qh;
                 * qs follow */
                const uint8_t *blk = (const uint8_t *)src + (size_t)(g * R16_ROWS + r) * row_bytes + (size_t)b * bb;
                const uint8_t *qs = blk + (bb - (size_t)chunks * 4);
                memcpy(out + R16_D + 2 * r, blk, 2);
                if (R16_HAS_MIN(rt)) memcpy(out + R16_M + 2 * r, blk + 2, 2);
                if (R16_HAS_H(rt)) {
                    const uint8_t *h = blk + (rt == INFER_TYPE_Q5_1_R16 ? 4 : 2);
                    const uint32_t qh = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
                    for (int c = 0; c < 8; c++) masks[c] |= (uint64_t)(qh >> (4 * c) & 15) << (4 * r);
                }
                for (int c = 0; c < chunks; c++)
                    for (int k = 0; k < 4; k++)
                        out[qs_at + c * 64 + r * 4 + k] = (uint8_t)(qs[4 * c + k] ^ flip);
            }
            if (R16_HAS_H(rt))   /* little-endian, as the kernels load them */
                for (int c = 0; c < 8; c++)
                    for (int k = 0; k < 8; k++) out[R16_H(rt) + 8 * c + k] = (uint8_t)(masks[c] >> (8 * k));
        }
    return 0;
}

/* The weight of row r, element k of a group-block: unsigned, as the kernels
 * multiply it (q for the 4- and 5-bit formats, w + 128 for Q8_0_R16, level + 128 for
 * IQ4_NL_R16). */
static int r16_weight(int type, const uint8_t *gb, int r, int k) {
    const uint8_t *qs = gb + R16_QS(type);
    if (type == INFER_TYPE_Q8_0_R16) return qs[(k / 4) * 64 + r * 4 + k % 4];
    const uint8_t byte = qs[((k % 16) / 4) * 64 + r * 4 + k % 4];
    const int q = k < 16 ? byte & 15 : byte >> 4;
    if (type == INFER_TYPE_IQ4_NL_R16) return infer_kvalues_iq4nl[q] + 128;
    if (!R16_HAS_H(type)) return q;
    /* mask k / 4 (nibble chunk), bit 4r + k % 4: byte (4r + k % 4) / 8 of the mask */
    const int bit = 4 * r + k % 4;
    return q + 16 * (gb[R16_H(type) + 8 * (k / 4) + bit / 8] >> (bit % 8) & 1);
}

static void matmul_r16_scalar(int type, int64_t n, const void *w, int64_t n_groups, const void *a,
                              size_t a_stride, int64_t n_tok, float *out, size_t out_stride) {
    const int64_t nb = n / QK8_0;
    const size_t gbb = R16_ROWS * infer_type_block_bytes(type);   /* a group-block */
    const int offset = type == INFER_TYPE_Q4_0_R16 ? 8 : type == INFER_TYPE_Q5_0_R16 ? 16 :
                       type == INFER_TYPE_Q8_0_R16 || type == INFER_TYPE_IQ4_NL_R16 ? 128 : 0;
    for (int64_t g = 0; g < n_groups; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)g * (size_t)nb * gbb;
        for (int64_t t = 0; t < n_tok; t++) {
            const uint8_t *x = (const uint8_t *)a + (size_t)t * a_stride;
            float acc[R16_ROWS] = {0}, mins[R16_ROWS] = {0};
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *gb = wg + (size_t)b * gbb;
                const int8_t *xs;
                float dx, sx = 0.0f;
                int32_t init = 0;
                if (R16_HAS_MIN(type)) {
                    const block_q8_1 *xb = (const block_q8_1 *)x + b;
                    xs = xb->qs, dx = infer_fp16_to_fp32(xb->d), sx = infer_fp16_to_fp32(xb->s);
                } else {
                    const block_q8_0s *xb = (const block_q8_0s *)x + b;
                    xs = xb->qs, dx = infer_fp16_to_fp32(xb->d), init = -offset * (int32_t)xb->sum;
                }
                for (int r = 0; r < R16_ROWS; r++) {
                    int32_t isum = init;
                    for (int k = 0; k < QK8_0; k++) isum += r16_weight(type, gb, r, k) * xs[k];
                    acc[r] = fma_f32((float)isum, fp16_at(gb + R16_D + 2 * r) * dx, acc[r]);
                    if (R16_HAS_MIN(type)) mins[r] = fma_f32(fp16_at(gb + R16_M + 2 * r), sx, mins[r]);
                }
            }
            for (int r = 0; r < R16_ROWS; r++)
                out[(size_t)t * out_stride + (size_t)g * R16_ROWS + r] = acc[r] + mins[r];
        }
    }
}

#define R16_SCALAR(name, type)                                                                         \
    static void name(int64_t n, const void *w, int64_t n_groups, const void *a, size_t a_stride,      \
                     int64_t n_tok, float *out, size_t out_stride) {                                   \
        matmul_r16_scalar(type, n, w, n_groups, a, a_stride, n_tok, out, out_stride);                 \
    }
R16_SCALAR(matmul_q4_0_r16, INFER_TYPE_Q4_0_R16)
R16_SCALAR(matmul_q4_1_r16, INFER_TYPE_Q4_1_R16)
R16_SCALAR(matmul_q8_0_r16, INFER_TYPE_Q8_0_R16)
R16_SCALAR(matmul_q5_0_r16, INFER_TYPE_Q5_0_R16)
R16_SCALAR(matmul_q5_1_r16, INFER_TYPE_Q5_1_R16)
R16_SCALAR(matmul_iq4_nl_r16, INFER_TYPE_IQ4_NL_R16)

/* The portable kernels, so every table can run a repacked matrix (and tests can
 * compare); repack_to stays 0: without SIMD the file's rows are faster. */
void infer_fill_repack_scalar(infer_kernel_table *t) {
    infer_fill_repack_k_scalar(t);
    t->matmul_r16[INFER_TYPE_Q4_0_R16] = matmul_q4_0_r16;
    t->matmul_r16[INFER_TYPE_Q4_1_R16] = matmul_q4_1_r16;
    t->matmul_r16[INFER_TYPE_Q8_0_R16] = matmul_q8_0_r16;
    t->matmul_r16[INFER_TYPE_Q5_1_R16] = matmul_q5_1_r16;
    t->matmul_r16[INFER_TYPE_IQ4_NL_R16] = matmul_iq4_nl_r16;
    t->matmul_r16[INFER_TYPE_Q5_0_R16] = matmul_q5_0_r16;
}
