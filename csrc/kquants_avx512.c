/* kquants_avx512.c (avx512). (placeholder) */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)
void infer_fill_kquants_avx512(infer_kernel_table *t) { (void)t; }
#endif
