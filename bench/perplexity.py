"""`infer perplexity` against llama-perplexity, side by side, on the same text.

    python bench/perplexity.py            # GPL-3 at ctx 512, SmolLM2 and Gemma 3

Each model: llama-perplexity (LLAMA_PERPLEXITY names the binary, else the one on PATH;
skipped when there is none) then `infer perplexity`, the same file, context
and thread count; the table gives both wall times (process start to exit, model
loading included), their ratio and both PPL figures.  INFER_BENCH_MODELS=smollm2
runs one model; INFER_BENCH_CHUNKS limits the chunks (both tools).
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infer.gguf import default_model_path, gemma3_model_path  # noqa: E402

TEXT = os.environ.get("INFER_BENCH_TEXT", "/usr/share/common-licenses/GPL-3")
CTX = os.environ.get("INFER_BENCH_CTX", "512")
CHUNKS = os.environ.get("INFER_BENCH_CHUNKS")
FINAL = re.compile(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)")


def timed(cmd):
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    m = FINAL.search(out.stdout + out.stderr)
    if out.returncode != 0 or m is None:
        raise SystemExit(f"{cmd[0]} failed:\n{out.stderr[-2000:]}")
    return wall, float(m.group(1))


def main():
    ref = os.environ.get("LLAMA_PERPLEXITY") or shutil.which("llama-perplexity")
    models = {"smollm2": default_model_path, "gemma3": gemma3_model_path}
    wanted = os.environ.get("INFER_BENCH_MODELS", "smollm2,gemma3").split(",")
    threads = str(os.cpu_count() or 1)
    extra = ["--chunks", CHUNKS] if CHUNKS else []
    print(f"{TEXT}, ctx {CTX}, {threads} threads")
    print(f"{'model':10s} {'llama-perplexity':>17s} {'infer':>8s} {'ratio':>6s}   {'PPL llama':>9s} {'PPL infer':>9s}")
    for name in wanted:
        path = str(models[name]())
        base = (timed([ref, "-m", path, "-f", TEXT, "-c", CTX, "-t", threads] + extra) if ref else (float("nan"),
                                                                                                  float("nan")))
        ours = timed([sys.executable, "-m", "infer", "perplexity", TEXT, "-c", CTX, "-m", path, "-t", threads]
                     + extra)
        print(f"{name:10s} {base[0]:15.1f} s {ours[0]:6.1f} s {ours[0] / base[0]:6.2f}   "
              f"{base[1]:9.4f} {ours[1]:9.4f}")


if __name__ == "__main__":
    main()
