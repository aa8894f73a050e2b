/* kquants_scalar.c (scalar). (placeholder) */
#include "infer_kernels.h"

void infer_fill_kquants_scalar(infer_kernel_table *t) { (void)t; }

