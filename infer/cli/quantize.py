"""`infer quantize`: requantize a GGUF file."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .common import UsageError, add_model_arg, resolve_model


def cmd_quantize(args: argparse.Namespace) -> int:
    from ..quantize import ProgressBar, quantize_file

    from ..quant_mixtures import RECIPES

    if args.model is not None:  # `quantize --model NAME OUTPUT [TYPE]`: the first positional is the output
        # `--model NAME OUTPUT TYPE`: a second word that is not a .gguf path is the type,
        # checked below (a misspelt type was reported as a second input)
        if args.ftype is None and args.output is not None and (
                args.output.lower() in RECIPES or not args.output.lower().endswith(".gguf")):
            args.output, args.ftype = None, args.output
        if args.output is not None:
            raise UsageError("give the input either as INPUT or with --model, not both")
        args.input, args.output = resolve_model(args.model), args.input
    if args.ftype is not None:  # llama-quantize's `INPUT OUTPUT TYPE`
        if args.type is not None and args.type != args.ftype.lower():
            raise UsageError(f"two types given: --type {args.type} and {args.ftype}")
        args.type = args.ftype.lower()
    if args.input is None or args.output is None or args.type is None:
        raise UsageError("usage: infer quantize INPUT OUTPUT --type TYPE (or INPUT OUTPUT TYPE, "
                       "or --model NAME OUTPUT --type TYPE)")
    if args.type not in RECIPES:
        raise UsageError(f"unknown type {args.type!r}; one of {', '.join(RECIPES)}")
    if args.type in ("q3_k", "q4_k", "q5_k"):
        # llama-quantize's Q3_K, Q4_K, Q5_K are aliases of Q3_K_M, Q4_K_M, Q5_K_M
        print(f"infer: note: {args.type} gives {args.type.upper()} to every weight it can; llama-quantize's "
              f"{args.type.upper()} is an alias of {args.type.upper()}_M, which infer names {args.type}_m",
              file=sys.stderr)
    if not os.path.isfile(args.input):
        args.input = resolve_model(args.input)  # a model name such as gemma3
    bar = ProgressBar(os.path.getsize(args.input), f"quantize to {args.type}")
    try:
        report = quantize_file(args.input, args.output, args.type, threads=args.threads,
                               progress=bar.update,
                               warn=lambda msg: print(f"infer: warning: {msg}", file=sys.stderr))
        bar.finish()
    finally:
        bar.close()
    counts = ", ".join(f"{k} x{v}" for k, v in sorted(report.type_counts().items(), key=lambda kv: -kv[1]))
    print(f"wrote {args.output}: {report.bytes_out / 2**20:.1f} MiB (from {report.bytes_in / 2**20:.1f} MiB) "
          f"in {report.seconds:.1f} s; tensors: {counts}")
    n = report.n_fallback
    if n:
        detail = ", ".join(f"{k} x{v}" for k, v in report.fallbacks().items())
        print(f"{n} tensor{'s' if n != 1 else ''} fell back to another type because "
              f"{'their rows are' if n != 1 else 'its rows are'} not whole blocks of the type chosen, "
              f"as llama.cpp does: {detail}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("quantize", help="requantize a GGUF file")
    p.add_argument("input", nargs="?", default=None, help="GGUF file or model name to read, as --model")
    p.add_argument("output", nargs="?", default=None, help="GGUF file to write")
    p.add_argument("ftype", nargs="?", default=None, metavar="TYPE",
                   help="the type, as llama-quantize takes it (Q4_K_M); or --type")
    add_model_arg(p, help="the input: a GGUF file or an installed model's name (smollm2, gemma3); "
                          "then the one positional is the output (default: INPUT)")
    from ..quant_mixtures import RECIPES

    p.add_argument("--type", type=str.lower, choices=list(RECIPES),
                   help="a llama.cpp file type, in either case (q4_k_m, Q3_K_S, ...: its per-tensor "
                        "mixture, docs/gguf.md), or q3_k/q4_k/q5_k for that type throughout; "
                        "required, here or as the third positional")
    p.add_argument("--threads", "-t", type=int, default=None, help="threads (default: physical cores)")
    p.set_defaults(func=cmd_quantize)
