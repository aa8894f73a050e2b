"""Python overhead of a decoded token: Context.next()/prefill([t]) against the bare C step.

    python bench/profile_decode.py            # INFER_TOKENS=256 INFER_THREADS=2 INFER_MODEL=path

Prints, per decoded token: the C decode step alone (LlamaDecoder.decode, the whole
forward pass in one call), the same token through Context.prefill([t]) (history,
sampler window, checks), and through Context.next() (plus sampling), with the share
of the step spent in Python.  The target is < 10% for next().
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import infer  # noqa: E402
from infer import kernels  # noqa: E402


def per_token(fn, n, reps=5):
    """Median over reps of the mean seconds per call of fn(i), i < n."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def main():
    n = int(os.environ.get("INFER_TOKENS", "128"))
    threads = int(os.environ.get("INFER_THREADS", "2"))
    with infer.load(os.environ.get("INFER_MODEL"), n_threads=threads) as model:
        n_ctx = n + 8
        ctx = model.create_context(n_ctx=n_ctx, temperature=0)
        rng = np.random.default_rng(0)
        toks = [int(t) for t in rng.integers(0, model.engine.vocab_size, n)]
        ctx.prefill(toks[:1])
        dec = ctx._decoder
        logits = np.zeros(model.engine.vocab_size, np.float32)
        # same positions for every variant: 1 .. n
        c_step = per_token(lambda i: dec.decode(toks[i], 1 + i, logits), n - 1)

        def via_prefill(i):
            if i == 0:
                ctx.truncate_to(1)
            ctx.prefill(toks[i:i + 1])

        py_prefill = per_token(via_prefill, n - 1)

        def via_next(i):
            if i == 0:
                ctx.truncate_to(1)
                ctx._ensure_logits()
            ctx.next()

        py_next = per_token(via_next, n - 1)
    print(f"SmolLM2 decode at {threads} threads, positions 1..{n - 1}, median of 5 runs")
    print("| path | ms/token | tok/s | Python share |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| C step (baseline) | {c_step * 1e3:.3f} | {1 / c_step:.1f} | - |")
    for name, t in (("Context.prefill([t])", py_prefill), ("Context.next()", py_next)):
        print(f"| {name} | {t * 1e3:.3f} | {1 / t:.1f} | {(t - c_step) / t * 100:.1f}% |")


if __name__ == "__main__":
    main()
