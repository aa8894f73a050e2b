/* quants_scalar.c: quantized kernels, scalar. (placeholder) */
#include "infer_kernels.h"

void infer_fill_table_scalar(infer_kernel_table *t) { (void)t; }

