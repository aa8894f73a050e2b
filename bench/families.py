"""Prefill and decode speed per architecture family, beside Llama's, on tiny models.

    python bench/families.py      # INFER_PROMPT=256 INFER_TOKENS=64 INFER_REPS=3 INFER_THREADS=1

Every family of tests/tiny_models.py (d=256, 2-4 layers, vocab 512, F16 weights)
is written to a temporary directory and timed: prefill of INFER_PROMPT tokens
in one batch, then INFER_TOKENS decoded one at a time (the fused C step where
the family has one, else the Python blocks: the "decode" column says which).
Speeds are also given per weight byte (tokens/s x weight bytes = bytes of
weights streamed per second), since the files differ in size, and as a ratio
to the plain Llama file timed in the same run; the families take turns within
each repetition so that a busy machine slows all of them alike.  On such small
models the per-token overhead outside the mat-vecs dominates, which is what a
new variant's decode path must not add to.
"""
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import numpy as np  # noqa: E402
import tiny_models as tm  # noqa: E402

import infer  # noqa: E402
from infer import kernels as K  # noqa: E402


def measure(model, prompt, n_gen):
    """(prefill s, decode s per token, fused?) for one run on a fresh context."""
    ctx = model.engine.create_context(n_ctx=len(prompt) + n_gen + 1)
    t0 = time.perf_counter()
    ctx.prefill(prompt)
    t1 = time.perf_counter()
    for tok in prompt[:n_gen]:
        ctx.prefill([int(tok)])
    t2 = time.perf_counter()
    return t1 - t0, (t2 - t1) / n_gen, bool(getattr(ctx, "fused_decode", False))


def main() -> None:
    n_prompt = int(os.environ.get("INFER_PROMPT", "256"))
    n_gen = int(os.environ.get("INFER_TOKENS", "64"))
    reps = int(os.environ.get("INFER_REPS", "3"))
    K.set_num_threads(int(os.environ.get("INFER_THREADS", "1")))
    names = [n for n in tm.TINY if n != "phi3-short"]
    prompt = np.random.default_rng(0).integers(0, tm.VOCAB - len(tm.SPECIALS), n_prompt)
    with tempfile.TemporaryDirectory() as tmp:
        models = {n: infer.load(tm.write(n, f"{tmp}/{n}.gguf")) for n in names}
        times = {n: ([], []) for n in names}
        fused = {}
        for _ in range(reps):
            for n in names:
                p, d, fused[n] = measure(models[n], prompt, n_gen)
                times[n][0].append(p)
                times[n][1].append(d)
        print(f"tiny families, prompt {n_prompt}, {n_gen} decoded, median of {reps}, "
              f"{K.get_num_threads()} thread(s), kernels {K.capabilities()['active']}")
        print("| family | weights MB | prefill tok/s | decode tok/s | decode | prefill GB/s | "
              "decode GB/s | prefill vs llama | decode vs llama |")
        print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
        rows = {}
        for n in names:
            nbytes = models[n].n_bytes
            pre = n_prompt / statistics.median(times[n][0])
            dec = 1.0 / statistics.median(times[n][1])
            rows[n] = (nbytes, pre, dec)
        base = rows["llama"]
        for n in names:
            nbytes, pre, dec = rows[n]
            # ratios per weight byte: a family with more weights is allowed to be slower
            print(f"| {n} | {nbytes / 1e6:.2f} | {pre:,.0f} | {dec:,.0f} | "
                  f"{'fused C' if fused[n] else 'python'} | {pre * nbytes / 1e9:.1f} | "
                  f"{dec * nbytes / 1e9:.2f} | {pre * nbytes / (base[1] * base[0]):.2f} | "
                  f"{dec * nbytes / (base[2] * base[0]):.2f} |")
        for m in models.values():
            m.close()


if __name__ == "__main__":
    main()
