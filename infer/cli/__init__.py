"""The `infer` command line: generate, chat, tokenize, bench, quantize, info, serve, perplexity, embed.

Each subcommand is one module of this package with a `register(subparsers)`
function that adds its parser and sets `func`; `main()` only parses and runs.
Errors print one line on stderr (a traceback with --verbose); the exit status is 2
for a bad flag, value or combination of flags (as argparse's own errors), 1 for a
failure of a run whose flags were fine (a missing file, a model infer refuses).
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any, Optional, Sequence

from . import bench, chat, embed, generate, info, perplexity, quantize, serve, tokenize
from .chat import _CHAT_HELP  # noqa: F401  (the tests read the chat help text)
from .common import CLIError, SubcommandParser, UsageError  # noqa: F401

#: the subcommands, in the order `infer --help` lists them
COMMANDS = (info, quantize, generate, chat, tokenize, bench, serve, perplexity, embed)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="infer", description=(__doc__ or "").splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--verbose", "-v", action="store_true", help="show tracebacks and logs")
    parser.add_argument("--version", action="version", version=f"infer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=SubcommandParser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def _one_line_warning(message: Any, category: Any, filename: str, lineno: int, line: Any = None) -> str:
    return f"infer: warning: {message}\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    formatwarning, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    try:
        return _run(args)
    finally:
        warnings.formatwarning = formatwarning


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`infer chat | head`): stop quietly.  Point stdout at
        # devnull so that the interpreter's last flush cannot fail a second time.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except UsageError as exc:
        if args.verbose:
            raise
        print(f"infer: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # one clear line unless --verbose
        if args.verbose:
            raise
        print(f"infer: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
