"""The `infer` command line: generate, chat, bench, quantize, info, perplexity, embed.

Each subcommand is one module of this package with a `register(subparsers)`
function that adds its parser and sets `func`; `main()` only parses and runs.
Errors print one line on stderr (a traceback with --verbose).
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from . import bench, chat, embed, generate, info, perplexity, quantize
from .chat import _CHAT_HELP  # noqa: F401  (the tests read the chat help text)
from .common import CLIError  # noqa: F401

#: the subcommands, in the order `infer --help` lists them
COMMANDS = (info, quantize, generate, chat, bench, perplexity, embed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infer", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--verbose", "-v", action="store_true", help="show tracebacks and logs")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # one clear line unless --verbose
        if args.verbose:
            raise
        print(f"infer: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
