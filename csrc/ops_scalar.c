/* ops_scalar.c (scalar). (placeholder) */
#include "infer_kernels.h"

void infer_fill_ops_scalar(infer_kernel_table *t) { (void)t; }

