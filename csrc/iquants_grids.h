/* iquants_grids.h: the lookup tables of the IQ formats (defined in iquants_grids.c,
 * generated from the gguf package by scripts/gen_iquants_grids.py; ggml-common.h's
 * values and order).  A grid point is 8 elements (IQ3: 4) packed in one word, byte j =
 * element j: unsigned magnitudes for IQ2/IQ3 (signs stored apart), -1/0/+1 as int8 for
 * IQ1_S.  Private to the iquants_*.c files. */
#ifndef INFER_IQUANTS_GRIDS_H
#define INFER_IQUANTS_GRIDS_H

#include <stdint.h>

extern const uint64_t infer_iq2xxs_grid[256];   /* magnitudes 8, 25, 43 */
extern const uint64_t infer_iq2xs_grid[512];
extern const uint64_t infer_iq2s_grid[1024];
extern const uint32_t infer_iq3xxs_grid[256];   /* magnitudes 4 .. 62 */
extern const uint32_t infer_iq3s_grid[512];     /* magnitudes 1 .. 15, odd */
extern const uint64_t infer_iq1s_grid[2048];    /* int8 -1, 0, 1 */
/* 7 stored sign bits -> 8 (bit 7 makes the count of negatives even). */
extern const uint8_t infer_ksigns_iq2xs[128];
/* ksigns[k] as 8 bytes of +1 (bit clear) or -1 (bit set). */
extern const uint64_t infer_ksigns64_iq2xs[128];

/* The formats the iquants_*.c files implement, as X(TYPE, name, block): each file
 * defines its entries per format and fills its table from this one list. */
#define INFER_IQUANTS_FORMATS(X)                      \
    X(INFER_TYPE_IQ2_XXS, iq2_xxs, block_iq2_xxs)     \
    X(INFER_TYPE_IQ2_XS, iq2_xs, block_iq2_xs)        \
    X(INFER_TYPE_IQ2_S, iq2_s, block_iq2_s)           \
    X(INFER_TYPE_IQ3_XXS, iq3_xxs, block_iq3_xxs)     \
    X(INFER_TYPE_IQ3_S, iq3_s, block_iq3_s)           \
    X(INFER_TYPE_IQ1_S, iq1_s, block_iq1_s)           \
    X(INFER_TYPE_TQ1_0, tq1_0, block_tq1_0)           \
    X(INFER_TYPE_TQ2_0, tq2_0, block_tq2_0)

/* Fills t's three entries of one format from functions named
 * infer_{dequantize,dequantize_f16,vec_dot}_<name>..._<isa> (isa: scalar, avx2, neon). */
#define INFER_IQUANTS_FILL(t, isa, TYPE, name)                           \
    ((t)->dequantize[TYPE] = infer_dequantize_##name##_##isa,           \
     (t)->dequantize_f16[TYPE] = infer_dequantize_f16_##name##_##isa,   \
     (t)->vec_dot[TYPE] = infer_vec_dot_##name##_q8_K_##isa)

#endif
