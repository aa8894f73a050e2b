/* kquants235_neon.c: Q2_K, Q3_K, Q5_K with AArch64 NEON (none yet: the scalar kernels). */
#include "infer_kernels.h"
#include "neon_level.h"
#if defined(__aarch64__) || defined(_M_ARM64)
void INFER_NEON_NAME(infer_fill_kquants235_neon)(infer_kernel_table *t) { (void)t; }
#endif
