/* iq4_avx2.c: IQ4_NL and IQ4_XS with AVX2 + FMA + F16C (iq4_x86.h). */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)

#define ISA_SUFFIX avx2
#include "iq4_x86.h"

void infer_fill_iq4_avx2(infer_kernel_table *t) { fill_iq4_x86_avx2(t); }
#endif
