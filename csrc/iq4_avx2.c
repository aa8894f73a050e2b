/* iq4_avx2.c: IQ4_NL, IQ4_XS with AVX2 + FMA + F16C (none yet: the scalar kernels). */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)
void infer_fill_iq4_avx2(infer_kernel_table *t) { (void)t; }
#endif
