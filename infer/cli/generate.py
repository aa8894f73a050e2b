"""`infer generate`: continue a prompt, streaming to stdout."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .common import (CLIError, UsageError, add_llama_tuning_args, add_model_args, add_sampling_args, add_template_args,
                     chat_template_kwargs, check_ctx_size, ctx_size, load_model, max_tokens, read_stdin, sampling,
                     with_context_size)


def read_prompt(args: argparse.Namespace, verbatim: bool = False) -> str:
    """The prompt: the argument, stdin for "-", or the file of -f.  A file's (or
    stdin's) one final newline is dropped, as llama.cpp's -f does: it ends the
    file's last line, it is not part of the prompt.  ``verbatim`` keeps it, as
    llama-tokenize does (there the newline is a token like any other)."""
    strip = (lambda text: text) if verbatim else _without_final_newline
    if args.prompt_option is not None:  # -p, as llama-cli takes it
        if args.prompt is not None:
            raise UsageError("give the prompt either as an argument or with -p, not both")
        if args.file is not None:  # llama.cpp's later flag would win; here -f was silently dropped
            raise UsageError("give the prompt either with -p or with -f, not both")
        return process_escapes(args.prompt_option) if args.escape else str(args.prompt_option)
    if args.file is not None:
        if args.prompt is not None:
            raise UsageError("give the prompt either as an argument or with -f, not both")
        try:
            with open(args.file, encoding="utf-8", newline="" if verbatim else None) as f:
                return strip(f.read())
        except OSError as exc:
            raise CLIError(f"-f: cannot read {args.file}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise CLIError(f"-f: {args.file} is not UTF-8 text") from None
    if args.prompt is None:
        raise UsageError("no prompt: give it as an argument, '-' to read stdin, or -f FILE")
    if args.prompt == "-":
        return strip(read_stdin())
    return str(args.prompt)


def add_prompt_args(p: argparse.ArgumentParser, what: str) -> None:
    """The text a command reads (see read_prompt): an argument, -p as llama-cli and
    llama-tokenize take it, or -f FILE."""
    p.add_argument("prompt", nargs="?", default=None, metavar="TEXT" if what == "text" else None,
                   help=f"the {what}; '-' reads it from stdin")
    p.add_argument("--prompt", "-p", dest="prompt_option", metavar="TEXT", default=None,
                   help=f"the {what}, as an option as llama.cpp's tools take it, escapes such as \\n "
                        "processed (default: the argument, taken as it is)")
    p.add_argument("--escape", "-e", dest="escape", action="store_true", default=True,
                   help="process the escapes of -p (\\n \\r \\t \\' \\\" \\\\ \\xNN), "
                        "as llama.cpp does by default")
    p.add_argument("--no-escape", dest="escape", action="store_false",
                   help="take -p's text as it is (default: escapes processed)")
    p.add_argument("--file", "-f", metavar="FILE", default=None,
                   help=f"read the {what} from FILE (default: the argument)")


def process_escapes(text: str) -> str:
    """llama.cpp's string_process_escapes (common/common.cpp), which its tools apply
    to -p: \\n \\r \\t \\' \\" \\\\ and \\xNN (a byte) are replaced; any other
    backslash stays as it is.  It works on bytes, so \\xNN may build a UTF-8 character."""
    data = text.encode("utf-8", "surrogateescape")
    simple = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("'"): b"'", ord('"'): b'"', ord("\\"): b"\\"}
    out = bytearray()
    i = 0
    while i < len(data):
        if data[i] == ord("\\") and i + 1 < len(data):
            i += 1
            code = data[i]
            if code in simple:
                out += simple[code]
            elif code == ord("x") and i + 2 < len(data) and all(chr(c) in "0123456789abcdefABCDEF"
                                                                 for c in data[i + 1:i + 3]):
                out.append(int(data[i + 1:i + 3], 16))
                i += 2
            else:
                out += b"\\" + bytes([code])
        else:
            out.append(data[i])
        i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("-p: its \\x escapes do not make UTF-8 text (--no-escape takes the text as it is)") from None


def _without_final_newline(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


def cmd_generate(args: argparse.Namespace) -> int:
    import time

    from ..generate import generate

    t_start = time.perf_counter()
    if args.conversation:
        raise UsageError("-cnv: a conversation is `infer chat` (same options); --chat here wraps one prompt as a turn")
    limit = max_tokens(args)
    if args.system is not None and not args.chat:
        raise UsageError("--system: only with --chat")
    for flag, value in (("--chat-template", args.chat_template), ("--chat-template-file", args.chat_template_file),
                        ("--chat-template-kwargs", args.chat_template_kwargs), ("--reasoning", args.reasoning)):
        if value is not None and not args.chat:
            raise UsageError(f"{flag}: only with --chat")
    grammar = _grammar(args)  # a bad schema or grammar fails before the model loads
    if args.special and args.chat:
        raise UsageError("--special: only without --chat (the chat template's markers are always special)")
    prompt = read_prompt(args)
    params = sampling(args)
    template_kwargs = chat_template_kwargs(args) or {}
    with load_model(args) as model:
        tok = model.tokenizer
        if args.chat:
            from ..chat.session import chat_of

            chat = chat_of(model)
            messages = ([{"role": "system", "content": args.system}] if args.system else [])
            messages.append({"role": "user", "content": prompt})
            # The template writes BOS and the turn markers itself, as text.
            ids = tok.encode(chat.render(messages, add_generation_prompt=True, **template_kwargs),
                             add_special=False, parse_special=True)
        else:
            ids = tok.encode(prompt, add_special=True, parse_special=args.special)
        if not ids:
            raise CLIError("the prompt is empty and the model adds no BOS token")
        check_ctx_size(model, ctx_size(args), len(ids), limit)
        # A prompt longer than the context fails with ContextOverflowError; without a
        # limit (-n -1) generation runs until the end of the text or a full context.
        n_ctx = ctx_size(args) or (model.engine.max_seq_len if limit is None else
                                   min(model.engine.max_seq_len, len(ids) + limit))
        ctx = model.create_context(n_ctx=n_ctx, **with_context_size(params, n_ctx))
        gen = generate(model, ids, context=ctx, max_tokens=limit, stop=args.stop or None,
                       grammar=grammar)
        t_first = None
        out = sys.stdout
        try:
            for piece in gen:
                if t_first is None:
                    t_first = time.perf_counter()
                out.write(piece)
                out.flush()
        finally:
            gen.close()  # before the model closes: a generator left open would touch it later
        t_end = time.perf_counter()
        out.write("\n")  # a terminal's prompt, or a file's last line, starts on a line of its own
        out.flush()
        n = len(gen.tokens)
        t_first = t_first or t_end
        rate = (n - 1) / (t_end - t_first) if n > 1 and t_end > t_first else 0.0
        print(f"[{len(ids)} prompt tokens, {n} generated, first token after "
              f"{t_first - t_start:.2f} s, {rate:.1f} tok/s, finish: {gen.finish_reason}]",
              file=sys.stderr)
    return 0


def _grammar(args: argparse.Namespace) -> Any:
    """The output constraint as an infer.structured.Grammar: --json-schema (a file, or
    the schema itself as llama-cli's -j takes it), --json-schema-file, --grammar (a
    file, or GBNF text as llama-cli's --grammar takes it) or --grammar-file."""
    given = [(flag, value) for flag, value in (
        ("--json-schema", args.json_schema), ("--json-schema-file", args.json_schema_file),
        ("--grammar", args.grammar), ("--grammar-file", args.grammar_file)) if value is not None]
    if not given:
        return None
    if len(given) > 1:
        raise UsageError(f"{given[0][0]} and {given[1][0]}: one or the other")
    from ..structured import Grammar

    flag, value = given[0]
    inline = ((flag == "--json-schema" and value.lstrip().startswith("{"))
              or (flag == "--grammar" and "::=" in value and not os.path.isfile(value)))
    if inline:
        text = value
    else:
        try:
            with open(value, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise CLIError(f"{flag}: cannot read {value}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise CLIError(f"{flag}: {value} is not UTF-8 text") from None
    return Grammar.json_schema(text) if "json-schema" in flag else Grammar.gbnf(text)


def register(sub: Any) -> None:
    p = sub.add_parser("generate", help="continue a prompt, streaming to stdout")
    add_prompt_args(p, "prompt")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as one user turn")
    p.add_argument("--conversation", "-cnv", action="store_true",
                   help="llama-cli's conversation mode is `infer chat`: refused here with that hint")
    p.add_argument("--system", "--system-prompt", "-sys", default=None,
                   help="system prompt, with --chat (default: none)")
    p.add_argument("--stop", action="append", default=None, metavar="TEXT",
                   help="stop before this text; repeat for several (default: none)")
    p.add_argument("--special", action="store_true",
                   help="parse special-token texts in the prompt (<|im_start|>, <bos>) as those tokens")
    p.add_argument("--json-schema", "-j", metavar="FILE|JSON", default=None,
                   help="output JSON valid against this schema: a file, or the schema itself (default: none)")
    p.add_argument("--json-schema-file", "-jf", metavar="FILE", default=None,
                   help="the same, always a file, as llama-cli names it (default: none)")
    p.add_argument("--grammar", metavar="FILE|GBNF", default=None,
                   help="output in this GBNF (or Lark) grammar: a file, or GBNF text (default: none)")
    p.add_argument("--grammar-file", metavar="FILE", default=None,
                   help="the same, always a file, as llama-cli names it (default: none)")
    add_model_args(p)
    add_llama_tuning_args(p)
    add_template_args(p)
    add_sampling_args(p)
    p.set_defaults(func=cmd_generate)
