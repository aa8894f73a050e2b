# Quantized kernels: dequantize, quantize, vec_dot, matvec, matmul.
