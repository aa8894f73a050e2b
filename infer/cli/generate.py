"""`infer generate`: continue a prompt, streaming to stdout."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import CLIError, add_model_args, add_sampling_args, ctx_size, load_model, sampling


def cmd_generate(args: argparse.Namespace) -> int:
    import time

    from ..generate import generate

    t_start = time.perf_counter()
    if args.max_tokens < 0:
        raise CLIError(f"--max-tokens: must be >= 0, got {args.max_tokens}")
    if args.system is not None and not args.chat:
        raise CLIError("--system: only with --chat")
    grammar = _grammar(args)  # a bad schema or grammar fails before the model loads
    with load_model(args) as model:
        tok = model.tokenizer
        if args.chat:
            if model.chat is None:
                raise CLIError("--chat: this model has no chat template (or infer.chat is unavailable)")
            messages = ([{"role": "system", "content": args.system}] if args.system else [])
            messages.append({"role": "user", "content": args.prompt})
            # The template writes BOS and the turn markers itself, as text.
            ids = tok.encode(model.chat.render(messages, add_generation_prompt=True),
                             add_special=False, parse_special=True)
        else:
            ids = tok.encode(args.prompt, add_special=True, parse_special=False)
        if not ids:
            raise CLIError("the prompt is empty and the model adds no BOS token")
        # A prompt longer than the trained context fails with ContextOverflowError.
        n_ctx = ctx_size(args) or min(model.engine.max_seq_len, len(ids) + args.max_tokens)
        ctx = model.create_context(n_ctx=n_ctx, **sampling(args))
        gen = generate(model, ids, context=ctx, max_tokens=args.max_tokens, grammar=grammar)
        t_first = None
        out = sys.stdout
        for piece in gen:
            if t_first is None:
                t_first = time.perf_counter()
            out.write(piece)
            out.flush()
        t_end = time.perf_counter()
        if out.isatty():
            out.write("\n")
        n = len(gen.tokens)
        t_first = t_first or t_end
        rate = (n - 1) / (t_end - t_first) if n > 1 and t_end > t_first else 0.0
        print(f"[{len(ids)} prompt tokens, {n} generated, first token after "
              f"{t_first - t_start:.2f} s, {rate:.1f} tok/s, finish: {gen.finish_reason}]",
              file=sys.stderr)
    return 0


def _grammar(args: argparse.Namespace) -> Any:
    """--json-schema FILE / --grammar FILE (GBNF or Lark) as an infer.structured.Grammar."""
    path = args.json_schema or args.grammar
    if path is None:
        return None
    if args.json_schema and args.grammar:
        raise CLIError("--json-schema and --grammar: one or the other")
    from ..structured import Grammar

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CLIError(f"{path}: {e.strerror}") from None
    return Grammar.json_schema(text) if args.json_schema else Grammar.gbnf(text)


def register(sub: Any) -> None:
    p = sub.add_parser("generate", help="continue a prompt, streaming to stdout")
    p.add_argument("prompt")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as one user turn")
    p.add_argument("--system", default=None, help="system prompt (with --chat)")
    p.add_argument("--json-schema", metavar="FILE", default=None, help="output JSON valid against this schema")
    p.add_argument("--grammar", metavar="FILE", default=None, help="output in this GBNF (or Lark) grammar")
    add_model_args(p)
    add_sampling_args(p)
    p.set_defaults(func=cmd_generate)
