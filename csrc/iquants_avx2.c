/* iquants_avx2.c: IQ and TQ dot products with Q8_K and dequantizers, AVX2. */
#include "infer_kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
void infer_fill_iquants_avx2(infer_kernel_table *t) { (void)t; }
#endif
