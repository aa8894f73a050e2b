"""`infer embed TEXT...`: one embedding per text, as a JSON array per line."""
from __future__ import annotations

import argparse
import json
from typing import Any

from .common import CLIError, UsageError, add_model_args, load_model, read_stdin


def cmd_embed(args: argparse.Namespace) -> int:
    texts = list(args.text)
    if args.file is not None:
        if args.file == "-":
            content = read_stdin()
        else:
            try:
                with open(args.file, encoding="utf-8") as f:
                    content = f.read()
            except OSError as e:
                raise CLIError(f"{args.file}: {e.strerror}") from None
            except UnicodeDecodeError:
                raise CLIError(f"{args.file} is not UTF-8 text") from None
        texts += [line for line in content.splitlines() if line.strip()]
    if not texts:
        raise UsageError("embed: give TEXT arguments or --file")
    with load_model(args, text_generation=False) as model:
        vectors = model.embed(texts, pooling=args.pooling, normalize=not args.no_normalize)
    for vec in vectors:
        print(json.dumps([round(float(v), 7) for v in vec]))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("embed", help="embeddings of texts from the final hidden states (JSON lines)")
    p.add_argument("text", nargs="*", help="texts to embed (each its own embedding)")
    p.add_argument("--file", "-f", default=None, help="also embed each non-empty line of FILE ('-': stdin)")
    p.add_argument("--pooling", choices=("mean", "last", "cls"), default=None,
                   help="one vector from a text's final hidden states: their mean, the last token's, or the "
                        "first token's (cls), as llama.cpp's --pooling (default: the file's pooling_type, "
                        "else mean)")
    p.add_argument("--no-normalize", action="store_true", help="keep the raw length (default: unit L2 norm)")
    add_model_args(p)
    p.set_defaults(func=cmd_embed)
