"""infer: LLM inference for Python on hand-written SIMD kernels."""
__version__ = "0.1.0"
