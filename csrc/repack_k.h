/* repack_k.h: Q4_K_R16 (and Q5_K_R16, Q6_K_R16, IQ4_XS_R16, Q3_K_R16, Q2_K_R16, below), a file's Q4_K rows repacked in groups
 * of 16 (repack_k_scalar.c, repack_k_avx512.c), as repack.h's formats are: one 512-bit vector holds 4 bytes of
 * each of 16 rows, and vpdpbusd against 4 activation bytes broadcast to every lane
 * adds into each row's own lane.
 *
 * Group-block b of a group: super-block b (256 elements) of the 16 rows, in the same
 * 16 x 144 bytes as the file's (a repacked matrix has the file's shape):
 *   d[16] fp16 | dmin[16] fp16 | scales: 3 words x 16 rows x 4 bytes | qs: 32 chunks x 16 rows x 4 bytes
 * Word k of row r is bytes 4k..4k+3 of the row's 12 scale bytes, so the word-wise bit
 * moves of infer_q4_K_unpack_scales unpack the 6-bit scales and mins of 16 rows in a
 * few vector ops (kept packed: the mat-vec reads no more bytes than the file's rows).
 * Chunk c is bytes 4c..4c+3 of a row's qs; with p = c / 8 and e = 4 (c % 8), their low
 * nibbles are elements e..e+3 of sub-block 2p, their high nibbles those of 2p+1.
 *
 * Row r . token t over super-block b, with the Q8_K activations x (bsums: sums of 16):
 *   S = sum_j sc_j * sum_{k in sub-block j} q_k x_k     M = sum_j m_j * (bsums[2j] + bsums[2j+1])
 * exact in int32 (|x| <= 127: |S| <= 8 * 63 * 32 * 15 * 127 < 2^25, |M| <= 8 * 63 * 32 * 127
 * < 2^22), then over the super-blocks in order
 *   acc = fma((float)S, d_w * d_x, acc);  acc = fma((float)M, -(dmin_w * d_x), acc)
 * These are the operations of the AVX-512 Q4_K vec_dot_4xn and rx8 kernels
 * (kquants_avx512.c) in their order: the bits of the file's rows on that kernel set.
 */
#ifndef INFER_REPACK_K_H
#define INFER_REPACK_K_H

#include "repack.h"

#define R16K_D 0
#define R16K_DMIN 32
#define R16K_SCALES 64
#define R16K_QS 256
#define R16K_GROUP_BLOCK (R16_ROWS * 144)   /* 16 x sizeof(block_q4_K) */

/* Q5_K_R16: Q4_K_R16 with the rows' qh between the scales and the quants (16 x 176
 * bytes a group-block):
 *   d[16] | dmin[16] | scales: 3 words x 16 rows x 4 bytes | qh: 8 chunks x 16 rows x 4 bytes |
 *   qs: 32 chunks x 16 rows x 4 bytes
 * qh chunk c is bytes 4c..4c+3 of a row's qh: for qs chunk 8p + c, bit 2p of each byte
 * is the fifth bit of the low nibble's element, bit 2p + 1 of the high nibble's (q =
 * nibble + 16 bit, 0..31).  S and M as Q4_K's (|S| <= 8 * 63 * 32 * 31 * 128 < 2^26),
 * the same two fmas: the operations of the AVX-512 Q5_K vec_dot_4xn and rx8 kernels. */
#define R16K5_QH 256
#define R16K5_QS 768
#define R16K5_GROUP_BLOCK (R16_ROWS * 176)   /* 16 x sizeof(block_q5_K) */

/* Q6_K_R16, a file's Q6_K rows repacked the same way (16 x 210 bytes a group-block),
 * with the quants in the order the kernel reads them, so that one token streams each
 * group-block from start to end (ql and qh apart, it read at half the speed from memory):
 *   d[16] fp16 | scales: 4 words x 16 rows x 4 bytes | 16 units of 3 chunks x 16 rows x 4 bytes
 * Word k of row r is its int8 scales 4k..4k+3 (sub-blocks of 16 elements).  Unit u
 * (half h = u / 8, c = u % 8) holds bytes 4c..4c+3 of the row's qh[32h..], then of its
 * ql[64h..] and of its ql[64h + 32..].  With m = 4c, the first ql chunk's low nibbles
 * are elements 128h + m..m+3 (their top two bits: bits 0-1 of the qh chunk), the
 * second's 128h + 32 + m.. (bits 2-3); their high nibbles are elements 128h + 64 + m..
 * (bits 4-5) and 128h + 96 + m.. (bits 6-7).  So a unit is four 64-byte vectors of
 * 6-bit q, 4 elements of 16 rows each, one in each of sub-blocks 8h + c / 4 + 2g.
 *
 * Row r . token t over super-block b, q unsigned (0..63), in int32:
 *   S = sum_j sc_j * sum_{k in sub-block j} q_k x_k - 32 * sum_j sc_j * bsums[j]
 * (|x| <= 128: |S| <= 16 * 128 * 16 * 63 * 128 + 32 * 16 * 128 * 16 * 128 < 2^29), then in order
 *   acc = fma((float)S, d_w * d_x, acc)
 * the operations of the AVX-512 Q6_K vec_dot_4xn and rx8 kernels (kquants_avx512.c).
 */
#define R16Q6_D 0
#define R16Q6_SCALES 32
#define R16Q6_UNITS 288
#define R16Q6_UNIT 192
#define R16Q6_GROUP_BLOCK (R16_ROWS * 210)   /* 16 x sizeof(block_q6_K) */

/* IQ4_XS_R16, a file's IQ4_XS rows repacked the same way (16 x 136 bytes a group-block):
 *   d[16] fp16 | scales_h: 16 rows x 2 bytes | scales_l: 16 rows x 4 bytes |
 *   qs: 32 chunks x 16 rows x 4 bytes
 * Sub-block j's scale is ls_j - 32 (ls_j: nibble j of the row's scales_l word, bits
 * 2j..2j+1 of its scales_h on top).  qs chunk c is bytes 4c..4c+3 of the row's qs: in
 * sub-block j = c / 4, its low nibbles index the levels of elements 32j + 4(c % 4)..+3,
 * its high nibbles those of 32j + 16 + 4(c % 4)..+3 (kvalues_iq4nl, -127..113).
 *
 * Row r . token t over super-block b, in int32 (|S| <= 8 * 32 * 32 * 127 * 128 < 2^28):
 *   S = sum_j (ls_j - 32) * sum_{k in sub-block j} level_k x_k
 * (the SIMD kernel multiplies level + 128, unsigned, and takes 128 (bsums[2j] +
 * bsums[2j+1]) back), then in order acc = fma((float)S, d_w * d_x, acc): the
 * operations of the AVX-512 IQ4_XS four-row kernel (iq4_x86.h). */
#define R16I4_D 0
#define R16I4_SH 32
#define R16I4_SL 64
#define R16I4_QS 128
#define R16I4_GROUP_BLOCK (R16_ROWS * 136)   /* 16 x sizeof(block_iq4_xs) */

/* Q3_K_R16, a file's Q3_K rows repacked the same way (16 x 110 bytes a group-block),
 * the quants in the order the kernel reads them (see Q6_K_R16):
 *   d[16] fp16 | scales: 3 words x 16 rows x 4 bytes | 8 units of 3 chunks x 16 rows x 4 bytes
 * Word k of row r is bytes 4k..4k+3 of its 12 scale bytes (infer_q3_K_unpack_scales:
 * scale j - 32).  Unit k holds bytes 4k..4k+3 of the row's hmask, of its qs and of its
 * qs[32..]: with l = 4k + i, field j (bits 2j..2j+1) of the second chunk's byte i is
 * element 32j + l, of the third's element 128 + 32j + l, and bit 4h + j of the hmask
 * byte is that element's bit 2 (u = field + 4 bit, the value u - 4).
 *
 * Row r . token t over super-block b, in int32 (|S| <= 16 * 32 * 16 * 7 * 128 * 2 < 2^24):
 *   S = sum_j (sc_j - 32) * (sum_{k in sub-block j} u_k x_k - 4 bsums[j])
 * then in order acc = fma((float)S, d_w * d_x, acc): the operations of the AVX-512 Q3_K
 * four-row kernel (kquants235_x86.h). */
#define R16Q3_D 0
#define R16Q3_SCALES 32
#define R16Q3_UNITS 224
#define R16Q3_UNIT 192
#define R16Q3_GROUP_BLOCK (R16_ROWS * 110)   /* 16 x sizeof(block_q3_K) */

/* Q2_K_R16, a file's Q2_K rows repacked the same way (16 x 84 bytes a group-block):
 *   d[16] fp16 | dmin[16] fp16 | scales: 4 words x 16 rows x 4 bytes | qs: 16 chunks x 16 rows x 4 bytes
 * Word k of row r is its scale bytes 4k..4k+3 (sub-block j: scale in the low nibble,
 * min in the high one).  qs chunk c is bytes 4c..4c+3 of the row's qs; with h = c / 8
 * and l = 4 (c % 8), field j of byte i is element 128h + 32j + l + i.
 * Row r . token t over super-block b, in int32:
 *   S = sum_j sc_j * sum_{k in sub-block j} q_k x_k     M = sum_j m_j * bsums[j]
 * then in order acc = fma((float)S, d_w * d_x, acc); acc = fma((float)M, -(dmin_w * d_x), acc):
 * the operations of the AVX-512 Q2_K four-row kernel (kquants235_x86.h). */
#define R16Q2_D 0
#define R16Q2_DMIN 32
#define R16Q2_SCALES 64
#define R16Q2_QS 320
#define R16Q2_GROUP_BLOCK (R16_ROWS * 84)   /* 16 x sizeof(block_q2_K) */

/* infer_repack_r16 for the super-block formats above (same arguments and result). */
int infer_repack_k_r16(int type, const void *src, size_t row_bytes, int64_t rows, int64_t cols, void *dst);
void infer_fill_repack_k_scalar(infer_kernel_table *t);
void infer_fill_repack_k_avx512(infer_kernel_table *t);

#endif
