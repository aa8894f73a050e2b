"""The inputs whose ggml quantization tests/data/ggml_quantized.npz records.

scripts/record_ggml_quants.py quantized them with ggml; tests/test_kernels_q5_1_k235_iq4.py
rebuilds them and compares infer's bytes with the recorded ones.
"""
from __future__ import annotations

import numpy as np

SMOLLM2_TENSOR, SMOLLM2_ROWS = "blk.0.ffn_down.weight", 8


def ggml_test_inputs() -> dict[str, np.ndarray]:
    """float32 matrices: seeded random rows of assorted scales (zero runs, one all-positive
    row), and the first rows of SmolLM2's blk.0.ffn_down decoded from its Q4_1 file
    (FileNotFoundError when the model package is absent)."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((8, 1024)) * np.exp(2 * rng.standard_normal((8, 1)))).astype(np.float32)
    x[::3, 100:300] = 0
    x[5] = np.abs(x[5])
    inputs = {"random": x}
    from infer import gguf
    with gguf.GGUFFile(gguf.default_model_path()) as f:
        inputs["smollm2"] = np.ascontiguousarray(f.tensors[SMOLLM2_TENSOR].to_f32()[:SMOLLM2_ROWS])
    return inputs
