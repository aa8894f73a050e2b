"""End-to-end speed on SmolLM2: pp512, tg128 at 1 and 2 threads, time to first token.

    python bench/generate.py       # INFER_MODEL=path INFER_REPS=3 INFER_THREADS=1,2

"t per CPU-s" divides by the CPU time of this process instead of wall time: on a
machine shared with other jobs it says what the code would do alone (with 2
threads it also counts a helper's spinning).

Baselines measured in the same run: how many times per second numpy can read the
model's weight bytes once (np.sum over them), the memory work of one decode step
without any compute; each figure is shown as a ratio to it.  And, where
bench/machine_probe.py runs (x86-64 Linux with a C compiler), the machine's read
bandwidth at the same thread count over a buffer the size of the weights one decode
step reads (every matrix, the output head included), measured just before that
thread count's runs: tg128 is then shown as GB/s of weights read and its share of
the probe's bandwidth, the decode speed's physical limit.  The
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
from infer.cli.bench import _bench_infer  # noqa: E402

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


def decode_bytes(model) -> int:
    """Weight bytes one decode step reads: every matrix once (the output head
    included), the token's embedding row aside."""
    w = model.engine.weights
    mats = [w.output] + [getattr(layer, k) for layer in w.layers
                         for k in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")]
    return sum(m.data.nbytes for m in mats)


def probe_or_none():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        from machine_probe import Probe, ProbeUnavailable
    except ImportError:
        return None
    try:
        return Probe()
    except (ProbeUnavailable, OSError, subprocess.CalledProcessError):
        return None


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
    with infer.load(path) as model:
        rng = np.random.default_rng(0)
        tokens = [int(t) for t in rng.integers(0, model.engine.vocab_size, 512)]
        roof = numpy_reads_per_s(model.n_bytes)
        step_bytes = decode_bytes(model)
        probe = probe_or_none()
        rows, probe_gbs = [], {}
        for n in threads:
            if probe is not None:
                probe_gbs[n] = probe.read_gbs(max(1, step_bytes // 2**20), n)
            kernels.set_num_threads(n)
            res = _bench_infer(model, 512, 128, reps, tokens)
            for key, label in (("pp", "pp512"), ("tg", "tg128")):
                wall, cpu = res[key], res[key + "_cpu"]
                sd = statistics.stdev(wall) if len(wall) > 1 else 0.0
                rows.append((n, label, statistics.fmean(wall), sd, statistics.fmean(cpu)))
    ttft = statistics.median(first_token_seconds(path) for _ in range(3))
    print(f"SmolLM2-135M Q4_1, {reps} repetitions; same-run baseline: numpy reads the "
          f"{model.n_bytes / 2**20:.0f} MiB of weights {roof:.0f} times/s")
    print("| threads | test | t/s | t per CPU-s | vs numpy read | vs llama-cpp-python (baselines.md, 2 thr) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for n, label, mean, sd, cpu in rows:
        print(f"| {n} | {label} | {mean:.1f} ± {sd:.1f} | {cpu:.1f} | "
              f"{mean / roof:.2f} | {mean / LLAMA_CPP_PYTHON[label]:.2f}x |")
    for n, label, mean, _sd, _cpu in rows:
        if label == "tg128" and n in probe_gbs:
            gbs = mean * step_bytes / 1e9
            print(f"tg128 at {n} thread(s) reads {gbs:.1f} GB/s of weights ({step_bytes / 1e6:.1f} MB a "
                  f"token): {gbs / probe_gbs[n]:.0%} of the probe's {probe_gbs[n]:.1f} GB/s read over "
                  f"{step_bytes // 2**20} MiB with {n} thread(s), just before")
    print(f"time to first token of `infer generate` (process start to first byte): {ttft:.3f} s")


if __name__ == "__main__":
    main()
