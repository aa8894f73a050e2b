"""`infer embed TEXT...`: one embedding per text, as a JSON array per line."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import CLIError, add_model_args, load_model


def cmd_embed(args: argparse.Namespace) -> int:
    texts = list(args.text)
    if args.file is not None:
        try:
            with (sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")) as f:
                texts += [line.rstrip("\n") for line in f if line.strip()]
        except OSError as e:
            raise CLIError(f"{args.file}: {e.strerror}") from None
    if not texts:
        raise CLIError("embed: give TEXT arguments or --file")
    with load_model(args) as model:
        vectors = model.embed(texts, pooling=args.pooling, normalize=not args.no_normalize)
    for vec in vectors:
        print(json.dumps([round(float(v), 7) for v in vec]))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("embed", help="embeddings of texts from the final hidden states (JSON lines)")
    p.add_argument("text", nargs="*", help="texts to embed (each its own embedding)")
    p.add_argument("--file", "-f", default=None, help="also embed each non-empty line of FILE ('-': stdin)")
    p.add_argument("--pooling", choices=("mean", "last", "cls"), default="mean")
    p.add_argument("--no-normalize", action="store_true", help="keep the raw length (default: unit L2 norm)")
    add_model_args(p)
    p.set_defaults(func=cmd_embed)
