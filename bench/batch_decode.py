"""Batched decode: aggregate tokens/s of B conversations decoded in one step.

    python bench/batch_decode.py      # INFER_STEPS=16 INFER_THREADS=2 INFER_BATCHES=1,2,4,8 INFER_CLOCK=wall

For SmolLM2 and Gemma 3 (whichever is installed) and each B: B contexts at
different positions advance together through `runtime.next_batch` (one C step,
every weight row read once for the B tokens), against the same B contexts
advanced one after another with `Context.next()` (B steps, the weights read B
times).  Both are measured alternately in each repetition, median of 3, so a busy
machine shifts them alike; the ratio is the figure to read.  INFER_CLOCK=cpu times
with this process's CPU time instead of the wall clock: with INFER_THREADS=1 it
leaves out the time other processes hold the core (a loaded machine), so it
measures the work of a step.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import infer
from infer import kernels as K
from infer.gguf import default_model_path, gemma3_model_path
from infer.runtime import next_batch


def models():
    yield "SmolLM2-135M Q4_1", default_model_path
    yield "Gemma 3 270M Q4_K_M", gemma3_model_path


def contexts(model, b, steps):
    """b greedy contexts holding prompts of different lengths."""
    out = []
    for i in range(b):
        ctx = model.create_context(n_ctx=64 + steps * 4, temperature=0)
        ctx.prefill(model.tokenizer.encode("Once upon a time" + " there" * i))
        out.append(ctx)
    return out


CLOCK = time.process_time if os.environ.get("INFER_CLOCK", "wall") == "cpu" else time.perf_counter


def tok_per_s(fn, ctxs, steps):
    marks = [len(c.tokens) for c in ctxs]
    t0 = CLOCK()
    for _ in range(steps):
        fn(ctxs)
    dt = CLOCK() - t0
    for c, n in zip(ctxs, marks):
        c.truncate_to(n)
    return steps * len(ctxs) / dt


def one_at_a_time(ctxs):
    for c in ctxs:
        c.next()


def main() -> None:
    steps = int(os.environ.get("INFER_STEPS", "16"))
    threads = int(os.environ.get("INFER_THREADS", "2"))
    batches = [int(b) for b in os.environ.get("INFER_BATCHES", "1,2,4,8").split(",")]
    print(f"{steps} steps per measurement, median of 3, {threads} threads, kernels "
          f"{K.capabilities()['active']}, {'CPU' if CLOCK is time.process_time else 'wall'} time")
    print("| model | B | batched tok/s | one at a time tok/s (baseline) | ratio | batched / B=1 batched |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, locate in models():
        try:
            path = locate()
        except FileNotFoundError:
            print(f"| {name} | not installed | | | | |")
            continue
        with infer.load(str(path), n_threads=threads) as model:
            first = None
            for b in batches:
                ctxs = contexts(model, b, steps)
                batched, single = [], []
                for _ in range(3):
                    batched.append(tok_per_s(next_batch, ctxs, steps))
                    single.append(tok_per_s(one_at_a_time, ctxs, steps))
                bt, st = statistics.median(batched), statistics.median(single)
                first = first or bt
                print(f"| {name} | {b} | {bt:.1f} | {st:.1f} | {bt / st:.2f}x | {bt / first:.2f}x |")


if __name__ == "__main__":
    main()
