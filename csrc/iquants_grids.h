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

#endif
