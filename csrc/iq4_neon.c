/* iq4_neon.c: IQ4_NL, IQ4_XS with AArch64 NEON (none yet: the scalar kernels). */
#include "infer_kernels.h"
#include "neon_level.h"
#if defined(__aarch64__) || defined(_M_ARM64)
void INFER_NEON_NAME(infer_fill_iq4_neon)(infer_kernel_table *t) { (void)t; }
#endif
