/* iquants_neon.c: IQ and TQ dot products with Q8_K and dequantizers, AArch64 NEON. */
#include "infer_kernels.h"
#include "neon_level.h"

#if defined(__aarch64__) || defined(_M_ARM64)
void INFER_NEON_NAME(infer_fill_iquants_neon)(infer_kernel_table *t) { (void)t; }
#endif
