"""Throughput of the K-quant kernels per kernel set, against scalar measured in the same run.

    python bench/bench_kquants.py

Figures are float32-equivalent GB/s (elements x 4 bytes / s, as ggml's
test-quantize-perf prints them), one thread, best of several short trials:
- vec_dot: matvec_q over pre-quantized Q8_K activations (the dot products alone);
- matvec: matvec from float32 x (includes quantizing x to Q8_K);
- dequantize: to float32.
Environment: KQ_SHAPES ("rows x cols" list, default "16x4096 640x2048 4096x4096"),
KQ_SECONDS (time per figure, default 0.3), KQ_THREADS (default 1).
"""
import os
import sys
import time

import numpy as np

# Run from a checkout without installing: the worktree's own infer package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import infer.kernels as K  # noqa: E402

FORMATS = ["q4_k", "q6_k"]


def shapes():
    spec = os.environ.get("KQ_SHAPES", "16x4096 640x2048 4096x4096")
    return [tuple(int(v) for v in s.split("x")) for s in spec.split()]


def best_rate(fn, elements, seconds):
    """Best elements*4/s over short trials: the least disturbed by other processes."""
    fn()
    best = 0.0
    trials = 10
    for _ in range(trials):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / trials:
                break
        best = max(best, calls * elements * 4 / elapsed / 1e9)
    return best


def main():
    seconds = float(os.environ.get("KQ_SECONDS", "0.3"))
    K.set_num_threads(int(os.environ.get("KQ_THREADS", "1")))
    isas = K.capabilities()["available"]
    previous = K.capabilities()["active"]
    rng = np.random.default_rng(0)
    print(f"{'op':<11}{'format':<7}{'shape':>11}  " + "".join(f"{isa:>16}" for isa in isas))
    try:
        for fmt in FORMATS:
            for rows, cols in shapes():
                n = rows * cols
                w = np.empty(K.row_bytes(fmt, n), np.uint8)
                K.set_isa("scalar")
                K.quantize(rng.standard_normal(n).astype(np.float32), fmt, w)
                w = w.reshape(rows, -1)
                x = rng.standard_normal(cols).astype(np.float32)
                xq = K.quantize_activations(x, fmt, np.empty(K.activation_bytes(fmt, cols), np.uint8))
                out = np.empty(rows, np.float32)
                dense = np.empty(n, np.float32)
                ops = {
                    "vec_dot": lambda: K.matvec_q(w, fmt, xq, out),
                    "matvec": lambda: K.matvec(w, fmt, x, out),
                    "dequantize": lambda: K.dequantize(w, fmt, dense),
                }
                for op, fn in ops.items():
                    rates = {}
                    for isa in isas:
                        K.set_isa(isa)
                        rates[isa] = best_rate(fn, n, seconds)
                    cells = "".join(f"{rates[i]:8.1f} (x{rates[i] / rates['scalar']:4.1f})" for i in isas)
                    print(f"{op:<11}{fmt:<7}{f'{rows}x{cols}':>11}  {cells}")
    finally:
        K.set_isa(previous)


if __name__ == "__main__":
    main()
