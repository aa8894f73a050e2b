/* repack.h: the layout of the *_R16 weight formats (repack_scalar.c, repack_avx512.c).
 *
 * A file's Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 or IQ4_NL rows are repacked at load in groups of 16 rows:
 * for each block b, the 16 rows' block b sit together, as ggml's REPACK
 * layouts do, so that one 512-bit vector holds 4 bytes of each of the 16 rows
 * and a VNNI multiply-add (vpdpbusd) against 4 activation bytes broadcast to every
 * lane sums 4 products into each row's own lane.  A block's products then add up
 * inside the lanes, with no horizontal reduction, and the scales of 16 rows are
 * applied by one vector multiply.
 *
 * Group-block of 16 rows (16 x the file block's bytes, so a row's share of the
 * bytes is the file's row size):
 *   Q4_0_R16: d[16] fp16 | qs: 4 chunks x 16 rows x 4 bytes         (16 x 18)
 *   Q4_1_R16: d[16] fp16 | m[16] fp16 | qs as Q4_0_R16              (16 x 20)
 *   Q8_0_R16: d[16] fp16 | qs: 8 chunks x 16 rows x 4 bytes, ^ 0x80  (16 x 34)
 *   Q5_0_R16: d[16] fp16 | h: 8 x 64-bit masks | qs as Q4_0_R16      (16 x 22)
 *   Q5_1_R16: d[16] fp16 | m[16] fp16 | h as Q5_0_R16 | qs as Q4_0_R16 (16 x 24)
 *   IQ4_NL_R16: as Q4_0_R16; a nibble indexes a level (kvalues_iq4nl)  (16 x 18)
 * Chunk c of a 4-bit group-block holds bytes 4c..4c+3 of each row's qs: their low
 * nibbles are elements 4c..4c+3, their high nibbles elements 16+4c..16+4c+3, so
 * nibble chunk c' (c' < 4 low, c' >= 4 high) pairs with activation bytes 4c'..4c'+3.
 * Chunk c of Q8_0_R16 holds elements 4c..4c+3, stored as unsigned w + 128.
 * Q5_0_R16's mask c' holds the fifth bits of nibble chunk c' where its vector has
 * the bytes: bit 4r + i is the fifth bit of row r's element 4c' + i (bit 4c' + i of
 * the file's qh, a little-endian uint32), so with AVX-512 BW one masked byte add
 * of 16 per chunk makes q = nibble + 16 * bit from the nibbles (a zero-masked move
 * of 16 and a ternary OR instead timed the same; the unpack costs Q5_0_R16 about
 * 1.35x Q4_0_R16's time at one token in cache, 1.13x at eight).
 *
 * Row r . token t over block b is then an exact integer
 *   Q4_0: sum q x - 8 sum(x)      Q5_0: sum q x - 16 sum(x)      Q4_1, Q5_1: sum q x
 *   Q8_0: sum (w + 128) x - 128 sum(x)      IQ4_NL: sum (level + 128) x - 128 sum(x)
 * (sum(x) from the Q8_0S activations), and acc = fma(isum, d_w * d_x, acc) over the
 * blocks in order; for Q4_1 and Q5_1 also mins = fma(m_w, s_x, mins), and acc + mins at the
 * end.  These are the operations of the x86 vec_dot_4xn kernels (quants_x86.h), in
 * the same order, in the scalar kernel and the SIMD ones: the results are the bits
 * of the file's rows under the x86 kernels, and the same on every kernel set.
 */
#ifndef INFER_REPACK_H
#define INFER_REPACK_H

#include "infer_kernels.h"

#include <string.h>

#define R16_ROWS 16
/* Offsets in a group-block: the scales, the mins (Q4_1, Q5_1), the fifth bits
 * (Q5_0, Q5_1), the quants. */
#define R16_D 0
#define R16_M 32
#define R16_H(type) ((type) == INFER_TYPE_Q5_1_R16 ? 64 : 32)
#define R16_QS(type) ((type) == INFER_TYPE_Q4_1_R16 ? 64 : (type) == INFER_TYPE_Q5_0_R16 ? 96 : \
                      (type) == INFER_TYPE_Q5_1_R16 ? 128 : 32)
/* The formats with a min per block (Q8_1 activations), and with fifth bits. */
#define R16_HAS_MIN(type) ((type) == INFER_TYPE_Q4_1_R16 || (type) == INFER_TYPE_Q5_1_R16)
#define R16_HAS_H(type) ((type) == INFER_TYPE_Q5_0_R16 || (type) == INFER_TYPE_Q5_1_R16)
/* 4-byte chunks per row and block */
#define R16_CHUNKS(type) ((type) == INFER_TYPE_Q8_0_R16 ? 8 : 4)

/* a * b + c with one rounding, in portable C (the SIMD kernels use fused multiply-
 * adds; some C runtimes have no fmaf).  a * b is exact in double; p + c rounded to
 * double "to odd" (nudged one ulp off an even result when inexact) then to float
 * rounds correctly, since double has more than two bits beyond float's 24. */
static inline float fma_f32(float a, float b, float c) {
    const double p = (double)a * (double)b, s = p + (double)c;
    const double bb = s - p, e = (p - (s - bb)) + ((double)c - bb);   /* s + e = p + c exactly */
    uint64_t u;
    memcpy(&u, &s, sizeof u);
    if (e != 0.0 && (u & 1) == 0 && (u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull) {
        /* one ulp toward e: away from zero when e has s's sign, else toward it */
        u += ((e > 0.0) == (s > 0.0)) ? 1 : (uint64_t)-1;
        double odd;
        memcpy(&odd, &u, sizeof odd);
        return (float)odd;
    }
    return (float)s;
}

/* The fp16 at p (any alignment) as a float: the scalar kernels' scales. */
static inline float fp16_at(const uint8_t *p) {
    infer_half h;
    memcpy(&h, p, 2);
    return infer_fp16_to_fp32(h);
}

/* Groups ahead whose bytes a group's block loop requests, a few lines a block
 * (infer_prefetch_part_soon), as the other kernels do INFER_PREFETCH_ROWS rows ahead.
 * Into the second-level cache, where the one-row kernels prefetch non-temporally:
 * a tile of 8 tokens over a Q8_0 group from memory took 0.75-0.79x the time
 * (AVX-512, Zen 5, alternated in one process; the other formats 0.96-1.04x), and
 * Gemma 3's decode step for 8 sequences 0.86-0.94x (its head is Q8_0). */
#define R16_PREFETCH_GROUPS (INFER_PREFETCH_ROWS / R16_ROWS)
#define R16_PREFETCH(p) INFER_PREFETCH_SOON(p)

/* The walk every *_R16 SIMD kernel shares: each group of 16 rows (group_bytes apart
 * from w), tiles of up to 8 tokens, each one call GROUP(nt, wg, pf, x, o) with nt a
 * constant 1..8, so that the group kernel unrolls its token loop.  pf: the bytes
 * R16_PREFETCH_GROUPS groups ahead, for a batch's first tile only (the weights come from memory
 * once); one token gets NULL, since it reads the weights as one sequential stream,
 * which the hardware prefetcher follows better alone (interleaved A/B, matrices past
 * the LLC: Q8_0 17 -> 21 GB/s, Q4_1 20 -> 22, Q4_K 17 -> 23). */
#define R16_FOR_GROUPS_AND_TILES(w, n_groups, group_bytes, a, a_stride, n_tok, out, out_stride, GROUP)            \
    for (int64_t g_ = 0; g_ < (n_groups); g_++) {                                                         \
        const uint8_t *wg_ = (const uint8_t *)(w) + (size_t)g_ * (group_bytes);                          \
        for (int64_t t0_ = 0; t0_ < (n_tok); t0_ += 8) {                                                 \
            const uint8_t *pf_ = t0_ == 0 && (n_tok) > 1 ? wg_ + R16_PREFETCH_GROUPS * (group_bytes) : NULL; \
            const uint8_t *x_ = (const uint8_t *)(a) + (size_t)t0_ * (a_stride);                         \
            float *o_ = (out) + (size_t)t0_ * (out_stride) + (size_t)g_ * R16_ROWS;                      \
            switch ((n_tok) - t0_ < 8 ? (int)((n_tok) - t0_) : 8) {                                      \
            case 1: GROUP(1, wg_, pf_, x_, o_); break;                                                   \
            case 2: GROUP(2, wg_, pf_, x_, o_); break;                                                   \
            case 3: GROUP(3, wg_, pf_, x_, o_); break;                                                   \
            case 4: GROUP(4, wg_, pf_, x_, o_); break;                                                   \
            case 5: GROUP(5, wg_, pf_, x_, o_); break;                                                   \
            case 6: GROUP(6, wg_, pf_, x_, o_); break;                                                   \
            case 7: GROUP(7, wg_, pf_, x_, o_); break;                                                   \
            default: GROUP(8, wg_, pf_, x_, o_); break;                                                  \
            }                                                                                            \
        }                                                                                                \
    }

#endif
