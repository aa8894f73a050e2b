"""Python overhead of a decoded token: Context.next()/prefill([t]) against the bare C step.

    python bench/profile_decode.py            # INFER_TOKENS=256 INFER_THREADS=2 INFER_MODEL=path

Prints the C decode step alone (TransformerDecoder.decode: the whole forward pass in one
call), then the Python side of a token measured with the C step replaced by a
no-op: Context.prefill([t]) (history, sampler window, checks) and Context.next()
(plus sampling, greedy and the default chain), as a share of a whole step.  The
target is < 10%.  Measuring the Python side apart keeps the share meaningful on
a busy machine, where the C step's time swings by 2x between runs.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

import infer


def per_token(fn, n, reps=5):
    """Median over reps of the mean seconds per call of fn(i), i < n."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


class NoStep:
    """Stands in for the C step: what remains is the Python side of a token."""

    def decode(self, token, pos, k_cache, v_cache, logits):
        pass


def main():
    n = int(os.environ.get("INFER_TOKENS", "128"))
    threads = int(os.environ.get("INFER_THREADS", "2"))
    with infer.load(os.environ.get("INFER_MODEL"), n_threads=threads) as model:
        ctx = model.create_context(n_ctx=n + 8, temperature=0)
        sampled = model.create_context(n_ctx=n + 8)  # the default sampling chain
        rng = np.random.default_rng(0)
        toks = [int(t) for t in rng.integers(0, model.engine.vocab_size, n)]
        ctx.prefill(toks[:1])
        eng = model.engine
        dec = eng.fused_step()
        logits = np.zeros(eng.vocab_size, np.float32)
        # the whole forward pass in one C call, positions 1 .. n-1
        c_step = per_token(lambda i: dec.decode(toks[i], 1 + i, ctx.k_cache, ctx.v_cache, logits), n - 1)

        rows = []
        for name, c in (("Context.prefill([t])", ctx), ("Context.next(), greedy", ctx),
                        ("Context.next(), default sampler", sampled)):
            c.restart()
            c.prefill(toks[:1])
            eng._decoders[eng.spec] = NoStep()
            c.logits[:] = rng.standard_normal(len(c.logits)).astype(np.float32)

            def step(i, c=c, name=name):
                if i == 0:
                    c.truncate_to(1)
                    c._logits_valid = True
                if name.startswith("Context.prefill"):
                    c.prefill(toks[i:i + 1])
                else:
                    c.next()

            rows.append((name, per_token(step, n - 1)))
            eng._decoders[eng.spec] = dec
    print(f"SmolLM2 decode at {threads} threads, positions 1..{n - 1}, median of 5 runs")
    print(f"C step alone (baseline): {c_step * 1e3:.3f} ms/token = {1 / c_step:.1f} tok/s")
    print("| Python side of | us/token | share of a step |")
    print("| --- | ---: | ---: |")
    for name, t in rows:
        print(f"| {name} | {t * 1e6:.1f} | {t / (t + c_step) * 100:.2f}% |")


if __name__ == "__main__":
    main()
