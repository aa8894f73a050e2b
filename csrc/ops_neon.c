/* ops_neon.c (neon). (placeholder) */
#include "infer_kernels.h"
#if defined(__aarch64__) || defined(_M_ARM64)
void infer_fill_ops_neon(infer_kernel_table *t) { (void)t; }
#endif
