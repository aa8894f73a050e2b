"""End-to-end speed on SmolLM2: pp512, tg128 at 1 and 2 threads, time to first token.

    python bench/generate.py       # INFER_MODEL=path INFER_REPS=3 INFER_THREADS=1,2

Baseline measured in the same run: how many times per second numpy can read the
model's weight bytes once (np.sum over them), the memory work of one decode step
without any compute; each figure is shown as a ratio to it.  The
figures of baselines.md (llama-cpp-python 0.3.36 at 2 threads: pp512 275, tg128
72 tok/s) were measured on another day, so they are printed for orientation only.
"""
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import infer  # noqa: E402
from infer import kernels  # noqa: E402

LLAMA_CPP_PYTHON = {"pp512": 275.0, "tg128": 72.0}  # baselines.md, 2 threads


def numpy_reads_per_s(model_bytes: int) -> float:
    """Passes per second of numpy summing the weights' bytes (as float64 words)."""
    buf = np.ones(model_bytes // 8, np.float64)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        buf.sum()
        times.append(time.perf_counter() - t0)
    return 1.0 / min(times)


def first_token_seconds(model_path):
    """Wall time from starting `infer generate` to its first byte on stdout."""
    cmd = [sys.executable, "-m", "infer", "generate", "The capital of France is", "--temp", "0", "-n", "1"]
    if model_path:
        cmd += ["--model", model_path]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    p.stdout.read(1)
    t = time.perf_counter() - t0
    p.communicate()
    return t


def main():
    reps = int(os.environ.get("INFER_REPS", "3"))
    threads = [int(t) for t in os.environ.get("INFER_THREADS", "1,2").split(",")]
    path = os.environ.get("INFER_MODEL")
    from infer.cli import _bench_infer

    with infer.load(path) as model:
        rng = np.random.default_rng(0)
        tokens = [int(t) for t in rng.integers(0, model.engine.vocab_size, 512)]
        roof = numpy_reads_per_s(model.n_bytes)
        rows = []
        for n in threads:
            kernels.set_num_threads(n)
            res = _bench_infer(model, 512, 128, reps, tokens)
            for key, label in (("pp", "pp512"), ("tg", "tg128")):
                mean = statistics.fmean(res[key])
                sd = statistics.stdev(res[key]) if len(res[key]) > 1 else 0.0
                rows.append((n, label, mean, sd))
    ttft = statistics.median(first_token_seconds(path) for _ in range(3))
    print(f"SmolLM2-135M Q4_1, {reps} repetitions; same-run baseline: numpy reads the "
          f"{model.n_bytes / 2**20:.0f} MiB of weights {roof:.0f} times/s")
    print("| threads | test | t/s | vs numpy read | vs llama-cpp-python (baselines.md, 2 thr) |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for n, label, mean, sd in rows:
        print(f"| {n} | {label} | {mean:.1f} ± {sd:.1f} | "
              f"{mean / roof:.2f} | {mean / LLAMA_CPP_PYTHON[label]:.2f}x |")
    print(f"time to first token of `infer generate` (process start to first byte): {ttft:.3f} s")


if __name__ == "__main__":
    main()
