"""What the K-quant, IQ and Q5_1/K235/IQ4 kernel tests share: the gguf package's numpy
dequantizer (the reference), random encoded blocks and quantizer inputs with a hard
case per block (test_kernels_kquants.py, test_kernels_iquants.py,
test_kernels_q5_1_k235_iq4.py)."""
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants as gq

QK_K = 256


def gguf_dequantize(raw, fmt):
    """The gguf package's numpy dequantizer of format `fmt`, as flat float32."""
    return gq.dequantize(np.asarray(raw, np.uint8).reshape(-1), T[fmt.upper()]).astype(np.float32).reshape(-1)


def random_blocks(block_bytes, scale_offsets, n_blocks, seed, exponents=(-4, 1), max_scale=1.0):
    """n_blocks encoded blocks (flat uint8): any bit pattern in quants and sub-block
    scales, and a finite fp16 scale at each byte offset of scale_offsets, of either sign,
    max_scale * 10**e with e uniform in `exponents` (fp16 subnormals included)."""
    rng = np.random.default_rng(seed + 1000)
    raw = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        d = rng.uniform(-1, 1, n_blocks) * max_scale * 10.0 ** rng.uniform(*exponents, n_blocks)
        raw[:, off:off + 2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(-1)


def awkward_values(n_blocks, block_size, seed, kinds=7):
    """n_blocks blocks of float32 quantizer input (flat); block b is hard case
    (b + seed) % kinds: zero, all positive, large, one outlier, a zero sub-block, all
    negative, tiny (fp16 super-scale subnormal)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_blocks, block_size)).astype(np.float32)
    k_format = block_size == QK_K
    for b in range(n_blocks):
        kind = (b + seed) % kinds
        if kind == 0:
            x[b] = 0.0                                        # d = 0
        elif kind == 1:
            x[b] = np.abs(x[b]) + 1.0                         # all positive: a min clamps to 0
        elif kind == 2:
            x[b] *= np.float32(10.0 ** rng.uniform(-0.5, 3))  # magnitudes where fp16 d stays normal
        elif kind == 3:
            x[b, :] = 0.0                                     # one outlier, mostly zero sub-blocks
            x[b, 100 if k_format else 7] = -7.0
        elif kind == 4:
            if k_format:                                      # a zero sub-block among others
                x[b, :32] = 0.0
                x[b, 200:216] = 0.0
            else:
                x[b, :16] = 0.0
        elif kind == 5:
            x[b] = -np.abs(x[b]) - 0.5                        # all negative
        elif kind == 6:
            x[b] *= np.float32(1e-4)                          # fp16 super-scale d subnormal
    return x.reshape(-1)
