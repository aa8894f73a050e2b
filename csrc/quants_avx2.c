/* quants_avx2.c: the 32-element block formats with AVX2, FMA and F16C. */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)

#define ISA_SUFFIX avx2
#include "quants_x86.h"

void infer_fill_table_avx2(infer_kernel_table *t) { fill_quants_x86_avx2(t); }
#endif
