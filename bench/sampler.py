"""Sampler speed: time per draw on 49,152 and 262,144 logits.

    python bench/sampler.py

The baseline, measured in the same run, is the textbook numpy chain: a full
softmax and a full descending sort of the vocabulary for every draw, then the
same filters and one draw.  Logits: a Student-t-like spread (a few large values,
a long tail), as a language model gives.  INFER_BENCH_DRAWS sets draws per row.
"""
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infer.sampler import Sampler

DRAWS = int(os.environ.get("INFER_BENCH_DRAWS", "200"))

CONFIGS = [
    ("greedy (temperature 0)", dict(temperature=0.0)),
    ("default (k40 p.95 m.05 t.8)", dict()),
    ("default + repeat 1.1 / 64", dict(repeat_penalty=1.1)),
    ("top-p .95 only (k off)", dict(top_k=0, min_p=0.0)),
    ("min-p .05 only", dict(top_k=0, top_p=1.0)),
    ("temperature only", dict(top_k=0, top_p=1.0, min_p=0.0)),
]


def naive(logits, rng, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, **_):
    x = logits.astype(np.float64)
    if temperature <= 0:
        return int(np.argmax(x))
    order = np.argsort(-x, kind="stable")
    x = x[order]
    if top_k > 0:
        x, order = x[:top_k], order[:top_k]
    p = np.exp(x - x[0])
    p /= p.sum()
    if top_p < 1:
        n = int(np.searchsorted(np.cumsum(p), top_p)) + 1
        x, order = x[:n], order[:n]
    if min_p > 0:
        keep = x >= x[0] + math.log(min_p)
        x, order = x[keep], order[keep]
    w = np.exp((x - x[0]) / temperature)
    cum = np.cumsum(w)
    return int(order[np.searchsorted(cum, rng.random() * cum[-1], side="right")])


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'config':<30} {'vocab':>7} {'infer us':>10} {'naive us':>10} {'speed-up':>9}")
    for n in (49152, 262144):
        logits = (rng.standard_t(3, n) * 2).astype(np.float32)
        for name, kw in CONFIGS:
            s = Sampler(seed=1, **kw)
            for t in range(64):
                s.accept(t * 17)
            s.sample(logits)
            t0 = time.perf_counter()
            for _ in range(DRAWS):
                s.sample(logits)
            ours = (time.perf_counter() - t0) / DRAWS * 1e6
            base_rng = np.random.default_rng(1)
            draws = max(5, DRAWS // 10)
            t0 = time.perf_counter()
            for _ in range(draws):
                naive(logits, base_rng, **kw)
            base = (time.perf_counter() - t0) / draws * 1e6
            print(f"{name:<30} {n:>7} {ours:>10.1f} {base:>10.1f} {base / ours:>9.1f}")


if __name__ == "__main__":
    main()
