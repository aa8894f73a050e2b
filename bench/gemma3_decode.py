"""Gemma 3 decode: the fused C step (csrc/transformer_block.c) against the Python block.

    python bench/gemma3_decode.py          # INFER_TOKENS=32 INFER_MODEL=path

For 1 and 2 threads, ms per decoded token of: the Python `_block` path
(`fused_decode = False`, ~450 kernel calls per token), the fused C step, and the
output head alone (a 262,144 x 640 Q8_0 mat-vec, the largest part of a token).
Paths alternate within each repetition, and the ratio is taken within the run,
so that a busy machine shifts both alike.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

import infer
from infer import kernels as K
from infer.gguf import gemma3_model_path


def main() -> None:
    path = os.environ.get("INFER_MODEL") or str(gemma3_model_path())
    n = int(os.environ.get("INFER_TOKENS", "32"))
    reps = 5
    print(f"model {os.path.basename(path)}, {n} tokens per measurement, median of {reps}, "
          f"kernels {K.capabilities()['active']}")
    print("| threads | python block ms/token | fused C ms/token | head only ms | fused speed-up |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    with infer.load(path) as model:
        eng = model.engine
        prompt = model.tokenizer.encode("Paris is the capital of", add_special=True)
        tokens = np.random.RandomState(0).randint(1000, 200000, n)
        for threads in (1, 2):
            K.set_num_threads(threads)
            times = {"python": [], "fused": [], "head": []}
            for _ in range(reps):
                for fused in (False, True):
                    ctx = eng.create_context(n_ctx=len(prompt) + n)
                    ctx.fused_decode = fused
                    ctx.prefill(prompt)
                    t0 = time.perf_counter()
                    for t in tokens:
                        ctx.prefill([int(t)])
                    times["fused" if fused else "python"].append((time.perf_counter() - t0) / n)
                head = eng.live_weights().output
                h = np.ones(eng.spec.dim, np.float32)
                xq = np.zeros(K.activation_bytes(head.qtype, eng.spec.dim), np.uint8)
                K.quantize_activations(h, head.qtype, xq)
                out = np.zeros(eng.vocab_size, np.float32)
                t0 = time.perf_counter()
                for _ in range(4):
                    K.matvec_q(head.data, head.qtype, xq, out)
                times["head"].append((time.perf_counter() - t0) / 4)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            print(f"| {threads} | {med['python']:.2f} | {med['fused']:.2f} | {med['head']:.2f} | "
                  f"{med['python'] / med['fused']:.2f}x |")


if __name__ == "__main__":
    main()
