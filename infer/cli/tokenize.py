"""`infer tokenize`: the token ids and pieces of a text, as llama-tokenize prints them."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import UsageError, add_model_arg, resolve_model
from .generate import add_prompt_args, read_prompt


def cmd_tokenize(args: argparse.Namespace) -> int:
    from ..gguf import GGUFFile
    from ..tokenizer import Tokenizer

    if args.stdin:  # llama-tokenize's spelling of the "-" argument
        if args.prompt is not None or args.prompt_option is not None or args.file is not None:
            raise UsageError("--stdin: the text comes from stdin alone, not also from an argument, -p or -f")
        args.prompt = "-"
    # The file's or stdin's text exactly, final newline included, as llama-tokenize reads it.
    text = read_prompt(args, verbatim=True)
    # Only the vocabulary is needed: no weights are mapped into a model.
    with GGUFFile(resolve_model(args.model)) as f:
        tok = Tokenizer.from_metadata(f.metadata)
        kind = f.metadata.get("tokenizer.ggml.model")
    # on stderr, where llama-tokenize logs the vocabulary: stdout stays its format
    pre = getattr(tok, "pre", None)
    if not getattr(args, "log_disable", False):  # llama-tokenize's --log-disable silences that log
        sys.stderr.write(f"vocabulary: {kind}" + (f" (pre-tokenizer {pre})" if pre and kind == "gpt2" else "")
                         + f", {len(tok.vocab)} tokens\n")
    ids = tok.encode(text, add_special=not args.no_bos, parse_special=not args.no_parse_special)
    out = sys.stdout
    if args.ids:
        out.write("[" + ", ".join(map(str, ids)) + "]\n")
    else:
        # The piece's bytes as they are, as llama-tokenize prints them: a piece that is
        # part of a character (a byte token) is not valid UTF-8 on its own.
        out.flush()
        raw = getattr(out, "buffer", None)
        for tid in ids:
            piece = tok.token_to_piece(tid)
            line = f"{tid:6d} -> '".encode() + piece + b"'\n"
            if raw is not None:
                raw.write(line)
            else:
                out.write(line.decode("utf-8", errors="replace"))
        if raw is not None:
            raw.flush()
    if args.show_count:
        out.write(f"Total number of tokens: {len(ids)}\n")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("tokenize", help="print the token ids and pieces of a text (like llama-tokenize)")
    add_prompt_args(p, "text")
    p.add_argument("--stdin", action="store_true", help="read the text from stdin, as llama-tokenize's --stdin")
    p.add_argument("--ids", action="store_true", help="print only the ids, as a list")
    p.add_argument("--no-bos", action="store_true", help="do not add the BOS token the model would add")
    p.add_argument("--no-parse-special", action="store_true",
                   help="tokenize special-token texts (<|im_start|>) as plain text")
    p.add_argument("--show-count", action="store_true", help="print the number of tokens at the end")
    add_model_arg(p)
    p.set_defaults(func=cmd_tokenize)
