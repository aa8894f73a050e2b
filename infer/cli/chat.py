"""`infer chat`: interactive multi-turn chat on the model's template."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Iterator, TextIO

from .common import (CLIError, UsageError, add_llama_tuning_args, add_model_args, add_sampling_args, add_template_args,
                     chat_template_kwargs, ctx_size, load_model, max_tokens, sampling, utf8_text, with_context_size)


_CHAT_HELP = """commands: /reset (forget the conversation), /system TEXT (new system prompt, and reset),
/quit; Ctrl-C stops a reply, Ctrl-C again (or Ctrl-D) leaves"""


def _chat_lines(interactive: bool) -> Iterator[str]:
    """User lines: from the terminal with a prompt, or one per line of piped stdin.
    A line that is not UTF-8 text is reported and skipped: the chat goes on."""
    buffer = getattr(sys.stdin, "buffer", None)
    while True:
        try:
            if interactive:
                try:
                    line = input("> ")
                except EOFError:
                    print()
                    return
            else:
                # bytes, decoded here: a strict text reader would lose its place at a bad byte
                line = sys.stdin.readline() if buffer is None else \
                    buffer.readline().decode("utf-8", "surrogateescape")
                if not line:
                    return
                line = line.rstrip("\r\n")
            yield utf8_text(line, "that line")
        except (CLIError, UnicodeDecodeError) as exc:
            reason = str(exc) if isinstance(exc, CLIError) else f"that line is not UTF-8 text ({exc.reason})"
            print(f"infer: {reason}; skipped", file=sys.stderr)


def _chat_command(session: Any, line: str, out: TextIO) -> bool:
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


def _chat_reply(session: Any, line: str, show_thinking: bool, out: TextIO) -> None:
    import json

    from ..chat import Reply, ThinkingText

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
                if piece.finish_reason == "length":
                    out.write(_cut_off_marker(session, piece))
                continue
            if isinstance(piece, ThinkingText) != thinking:
                thinking = not thinking
                # the answer starts on a line of its own (the thought's last newline is not shown)
                out.write(("\x1b[2m" if thinking else "\x1b[0m\n") if dim else
                          ("<think>" if thinking else "</think>\n"))
            out.write(piece)
            out.flush()
    except KeyboardInterrupt:
        pieces.close()  # ends the turn: the partial reply stays in the conversation
        out.write(" [interrupted]")
    finally:
        pieces.close()  # now, while the model is open (a BrokenPipeError leaves it unfinished)
        if thinking and dim:
            out.write("\x1b[0m")
    out.write("\n")
    out.flush()


def _cut_off_marker(session: Any, reply: Any) -> str:
    if reply.completion_tokens >= (session.max_tokens or 0) > 0:
        return f" [cut off: {session.max_tokens} tokens, raise -n for longer replies]"
    return " [cut off: the context is full; /reset, or a larger -c]"


def _overflow_message(session: Any) -> str:
    return (f"this message does not fit in the context of {session.context.n_ctx} tokens, even with "
            "the earlier turns dropped; shorten it, /reset, or start infer chat with a larger -c")


def cmd_chat(args: argparse.Namespace) -> int:
    from ..chat import ChatSession, ChatTemplateError
    from ..runtime import ContextOverflowError

    limit = max_tokens(args, least=1)
    if args.keep is not None and args.keep < -1:
        raise UsageError(f"--keep: must be >= 0, or -1 for the system prompt, got {args.keep}")
    params = sampling(args)
    template_kwargs = chat_template_kwargs(args)
    out = sys.stdout
    interactive = sys.stdin.isatty()
    model = load_model(args)
    try:
        params = with_context_size(params, ctx_size(args) or model.engine.max_seq_len)
        session = ChatSession(model, system=args.system, max_tokens=limit, trim_history=True,
                              n_keep=args.keep, n_ctx=ctx_size(args), template_kwargs=template_kwargs, **params)
        try:  # a template that cannot render a plain turn would fail every line: stop now
            session.chat.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
        except ChatTemplateError as exc:
            raise CLIError(f"{exc} (--chat-template chatml, or another, uses a built-in template instead)") from None
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
            n_before = len(session.history)
            try:
                _chat_reply(session, line, args.show_thinking, out)
            except ContextOverflowError:
                print(f"infer: {_overflow_message(session)}", file=sys.stderr)
                continue
            except ChatTemplateError as exc:
                print(f"infer: {exc}", file=sys.stderr)
                continue
            dropped = n_before + 2 - len(session.history)
            if dropped > 0:
                print(f"[{dropped} earlier messages dropped to fit the context]", file=sys.stderr)
    finally:
        model.close()


def register(sub: Any) -> None:
    p = sub.add_parser("chat", help="interactive multi-turn chat")
    p.add_argument("--system", "--system-prompt", "-sys", default=None, help="system prompt (default: none)")
    p.add_argument("--show-thinking", action="store_true", help="show thinking blocks (dimmed on a terminal)")
    p.add_argument("--conversation", "-cnv", action="store_true",
                   help="accepted for llama-cli compatibility: infer chat is always a conversation")
    p.add_argument("--keep", type=int, default=None, metavar="N",
                   help="when the context fills, keep the first N tokens (-1: the system prompt) and drop "
                        "half of the rest, as llama.cpp's --keep does (default: drop the oldest turns)")
    add_model_args(p)
    add_llama_tuning_args(p)
    add_template_args(p)
    add_sampling_args(p)
    p.set_defaults(func=cmd_chat)
