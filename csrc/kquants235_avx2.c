/* kquants235_avx2.c: Q2_K, Q3_K and Q5_K with AVX2 + FMA + F16C (kquants235_x86.h). */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)

#define ISA_SUFFIX avx2
#include "kquants235_x86.h"

void infer_fill_kquants235_avx2(infer_kernel_table *t) { fill_kquants235_x86_avx2(t); }
#endif
