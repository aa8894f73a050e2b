"""Small-B mat-mul: the cost of one more activation column, per weight format.

    python bench/batch_matmul.py     # INFER_BENCH_SECONDS=0.3 INFER_BATCHES=1,2,3,4,8,16,32

For the decode shapes of SmolLM2 (Q4_1, Q8_0 head) and Gemma 3 (Q5_0, Q4_K, Q6_K,
Q8_0) and each B, `matmul_q` of B pre-quantized activation columns on one thread
(CPU time, best of many batches), beside B=1 measured in the same run.  The figure
to read is "per column vs B=1": the time of a column as a share of a mat-vec's
(1.00 = no reuse; 1/B would be free columns).  The batched decode step
(bench/batch_decode.py) spends most of its time in these products.
"""
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import infer.kernels as K  # noqa: E402

SECONDS = float(os.environ.get("INFER_BENCH_SECONDS", "0.3"))
BATCHES = [int(b) for b in os.environ.get("INFER_BATCHES", "1,2,3,4,8,16,32").split(",")]
SHAPES = [("q4_1", 1536, 576), ("q8_0", 8192, 576), ("q5_0", 2048, 640), ("q4_k", 640, 2048),
          ("q6_k", 640, 2048), ("q4_0", 1536, 576)]
if os.environ.get("INFER_BENCH_SHAPES"):
    SHAPES = [(f, int(r), int(c)) for f, r, c in
              (s.split("x") for s in os.environ["INFER_BENCH_SHAPES"].split(","))]


def cpu_per_call(fn):
    """Best per-call thread CPU time over batches filling about SECONDS."""
    fn()
    t0 = time.thread_time()
    fn()
    once = max(time.thread_time() - t0, 1e-6)
    batch = max(1, int(SECONDS / 20 / once))
    best = float("inf")
    deadline = time.perf_counter() + SECONDS
    while time.perf_counter() < deadline or best == float("inf"):
        t0 = time.thread_time()
        for _ in range(batch):
            fn()
        dt = time.thread_time() - t0
        if dt > 0:
            best = min(best, dt / batch)
    return best


def main() -> None:
    rng = np.random.default_rng(0)
    K.set_num_threads(1)
    print(f"one thread, kernels {K.capabilities()['active']}, best CPU time of batches over "
          f"{SECONDS} s")
    print("| format | rows x cols | B | us per call | us per column | per column vs B=1 | "
          "G MAC/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for fmt, rows, cols in SHAPES:
        w_f = rng.standard_normal((rows, cols)).astype(np.float32)
        w = np.empty(rows * K.row_bytes(fmt, cols), np.uint8)
        K.quantize(w_f.reshape(-1), fmt, w)
        w = w.reshape(rows, -1)
        base = None
        for b in BATCHES:
            x = rng.standard_normal((b, cols)).astype(np.float32)
            xq = np.empty(K.activation_bytes(fmt, cols, b), np.uint8)
            K.quantize_activations(x, fmt, xq)
            out = np.empty((b, rows), np.float32)
            t = cpu_per_call(lambda: K.matmul_q(w, fmt, xq, out))
            col = t / b
            base = base or col
            print(f"| {fmt} | {rows}x{cols} | {b} | {t * 1e6:.1f} | {col * 1e6:.1f} | "
                  f"{col / base:.2f} | {rows * cols * b / t / 1e9:.1f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
