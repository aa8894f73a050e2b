/* kquants235_avx512.c: Q2_K, Q3_K, Q5_K with AVX-512 (none yet: the AVX2 kernels). */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)
void infer_fill_kquants235_avx512(infer_kernel_table *t) { (void)t; }
#endif
