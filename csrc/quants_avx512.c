/* quants_avx512.c: the 32-element block formats with AVX-512 VL and VNNI.
 *
 * The kernels are those of quants_x86.h, with each 8-bit dot step done by VNNI's
 * vpdpbusd (unsigned x signed bytes, summed in groups of 4 into int32) on 256-bit
 * vectors: one 32-element block fills one vector exactly.
 */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)

#define ISA_SUFFIX avx512
#define X86_VNNI 1
#include "quants_x86.h"

void infer_fill_table_avx512(infer_kernel_table *t) { fill_quants_x86_avx512(t); }
#endif
