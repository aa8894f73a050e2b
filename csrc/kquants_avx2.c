/* kquants_avx2.c (avx2). (placeholder) */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)
void infer_fill_kquants_avx2(infer_kernel_table *t) { (void)t; }
#endif
