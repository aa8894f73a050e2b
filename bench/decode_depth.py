"""Decode at depth: tg tokens/s after a context of D tokens, infer beside llama-bench.

    python bench/decode_depth.py     # INFER_DEPTHS=1024,4096 INFER_GEN=64 INFER_THREADS=2 INFER_REPS=2

For SmolLM2 and Gemma 3 (whichever is installed) and each depth D: a context holding
D random tokens, then INFER_GEN single-token decode steps (the fused C step, no
sampling, as llama-bench's tg), best of INFER_REPS; beside it, in the same run and
alternating with it, llama.cpp's own

    llama-bench -m MODEL -p 0 -n GEN -d D -t THREADS -r 1 -o csv

(set INFER_LLAMA_BENCH to its path; skipped when it is not there).  The ratio is the
figure to read: on a shared machine both sides slow down alike.
"""
import csv
import io
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import infer  # noqa: E402
from infer.gguf import default_model_path, gemma3_model_path  # noqa: E402

# llama.cpp's llama-bench: INFER_LLAMA_BENCH, else the one on PATH
LLAMA_BENCH = os.environ.get("INFER_LLAMA_BENCH") or shutil.which("llama-bench") or "llama-bench"


def infer_tg(model, depth, n_gen, reps):
    rng = np.random.default_rng(0)
    toks = [int(t) for t in rng.integers(100, model.engine.vocab_size - 100, depth + n_gen)]
    ctx = model.create_context(n_ctx=depth + n_gen + 1)
    ctx.prefill(toks[:depth])
    best = 0.0
    for _ in range(reps):
        ctx.truncate_to(depth)
        t0 = time.perf_counter()
        for i in range(n_gen):
            ctx.prefill(toks[depth + i:depth + i + 1])
        best = max(best, n_gen / (time.perf_counter() - t0))
    return best


def llama_tg(path, depth, n_gen, threads):
    if not os.path.exists(LLAMA_BENCH):
        return None
    out = subprocess.run([LLAMA_BENCH, "-m", str(path), "-p", "0", "-n", str(n_gen), "-d", str(depth),
                          "-t", str(threads), "-r", "1", "-o", "csv"],
                         capture_output=True, text=True, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    return float(rows[-1]["avg_ts"])


def main() -> None:
    depths = [int(d) for d in os.environ.get("INFER_DEPTHS", "1024,4096").split(",")]
    n_gen = int(os.environ.get("INFER_GEN", "64"))
    threads = int(os.environ.get("INFER_THREADS", "2"))
    reps = int(os.environ.get("INFER_REPS", "2"))
    print(f"tg{n_gen} at depth, {threads} threads, infer best of {reps}, llama-bench -r 1, alternated")
    print("| model | depth | infer t/s | llama-bench t/s (baseline) | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, locate in (("SmolLM2-135M Q4_1", default_model_path), ("Gemma 3 270M Q4_K_M", gemma3_model_path)):
        try:
            path = locate()
        except FileNotFoundError:
            continue
        with infer.load(str(path), n_threads=threads) as model:
            for depth in depths:
                ours = infer_tg(model, depth, n_gen, reps)
                theirs = llama_tg(path, depth, n_gen, threads)
                ratio = f"{ours / theirs:.2f}x" if theirs else "-"
                print(f"| {name} | {depth} | {ours:.1f} | {theirs or '-'} | {ratio} |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
