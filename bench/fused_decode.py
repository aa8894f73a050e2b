"""Decode speed through the fused C step against the Python blocks, on one file.

    python bench/fused_decode.py MODEL.gguf [N_TOKENS] [THREADS]

Prefills 32 tokens, then decodes N_TOKENS (default 64) one at a time, greedily,
through each path in turn (the same tokens: both compute the same logits), three
rounds, and prints the best tokens/s of each and their ratio.  For models whose
Python decode path still matters (Qwen3.5's DeltaNet layers decoded through the
blocks until the fused step had them).  A shared machine's timings vary: compare
within one run.
"""
import sys
import time

import numpy as np

import infer


def decode_rate(model, fused, n_tokens):
    ctx = model.engine.create_context(n_ctx=256)
    ctx.fused_decode = fused
    ctx.prefill(np.arange(32, dtype=np.int32) % model.engine.vocab_size)
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        ctx.prefill([int(np.argmax(ctx.logits))])
    return n_tokens / (time.perf_counter() - t0)


def main():
    path = sys.argv[1]
    n_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else None
    with infer.load(path, n_threads=threads) as model:
        decode_rate(model, True, 4)   # warm the weights' pages
        best = {True: 0.0, False: 0.0}
        for _ in range(3):
            for fused in (True, False):
                best[fused] = max(best[fused], decode_rate(model, fused, n_tokens))
    print(f"{path}: fused {best[True]:.1f} tok/s, Python blocks {best[False]:.1f} tok/s, "
          f"ratio {best[True] / best[False]:.2f}")


if __name__ == "__main__":
    main()
