/* kquants235_avx512.c: Q2_K, Q3_K and Q5_K with AVX-512 VL + VNNI: the kernels of
 * kquants235_x86.h with each int16 pair-times-scale accumulation one vpdpwssd. */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)

#define ISA_SUFFIX avx512
#define X86_VNNI 1
#include "kquants235_x86.h"

void infer_fill_kquants235_avx512(infer_kernel_table *t) { fill_kquants235_x86_avx512(t); }
#endif
