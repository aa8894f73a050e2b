/* iq4_avx512.c: IQ4_NL and IQ4_XS with AVX-512 VL + VNNI: the kernels of iq4_x86.h with
 * the 8-bit dot steps as vpdpbusd and the scale steps as vpdpwssd. */
#include "infer_kernels.h"
#if defined(__x86_64__) || defined(_M_X64)

#define ISA_SUFFIX avx512
#define X86_VNNI 1
#include "iq4_x86.h"

void infer_fill_iq4_avx512(infer_kernel_table *t) { fill_iq4_x86_avx512(t); }
#endif
