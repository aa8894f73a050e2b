/* kquants235_avx2.c: Q2_K, Q3_K, Q5_K with AVX2 + FMA + F16C (none yet: the scalar kernels). */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)
void infer_fill_kquants235_avx2(infer_kernel_table *t) { (void)t; }
#endif
