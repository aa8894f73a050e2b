"""What the subcommands share: the one-line error, the help format, the model and
sampling options, and finding a model by path or by the name of its package."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional


class CLIError(Exception):
    """An error to show the user as one line (exit status 1)."""


class UsageError(CLIError):
    """A bad flag value or combination, found before any work: one line and exit
    status 2, as argparse gives for an unknown flag or a value of the wrong type."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, unless the help already says it
    (a None default needs words: "default: physical cores"); flags need none."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS, False) or \
                isinstance(action, (argparse._StoreTrueAction, argparse._VersionAction)):
            return text
        return super()._get_help_string(action) or text


class SubcommandParser(argparse.ArgumentParser):
    """The parser of one subcommand: defaults in its help, ``-v`` accepted after the
    subcommand as well as before it, and llama.cpp's ``--log-disable``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        # No prefixes of long options: `--chat-template chatml` must not be taken
        # for `--chat-template-file chatml` (llama.cpp's tools accept no prefixes).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # SUPPRESS: without -v here, `infer -v generate` keeps the -v given before it
        self.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS,
                          help="show tracebacks and logs")
        # llama.cpp's tools take it (llama-tokenize's examples end with it); the only
        # log it silences here is tokenize's vocabulary line
        self.add_argument("--log-disable", action="store_true", default=argparse.SUPPRESS,
                          help="as llama.cpp's tools take it: no log lines (tokenize's vocabulary line)")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        for arg in args if args is not None else sys.argv[1:]:
            if arg == "--":
                break
            self._refuse_glued_misreading(arg)
        return super().parse_known_args(args, namespace)

    def _refuse_glued_misreading(self, arg: str) -> None:
        """argparse reads an unknown ``-ngl`` as ``-n gl``, ``-cnv`` as ``-c nv`` and
        ``-fa`` (flash attention) as ``-f a`` (llama.cpp's tools have many such
        options), then blames -n or -c for a bad number, or reads a file named "a".
        Name the option itself instead.  A number glued to its option (-n5, -t1)
        still reads; llama.cpp's tools take no glued text values, nor does infer."""
        if len(arg) == 2 and arg[0] == "-" and arg[1].isalpha() and arg not in self._option_string_actions:
            # argparse calls an unknown -n "ambiguous" when -ngl and -np start with it
            self.error(f"unrecognized option {arg}; see {self.prog} --help")
        if len(arg) < 3 or arg[0] != "-" or not arg[1].isalpha() or "=" in arg or \
                arg in self._option_string_actions:
            return
        short = self._option_string_actions.get(arg[:2])
        if short is None or short.nargs == 0:
            return
        if callable(short.type) and short.type is not str:
            try:
                short.type(arg[2:])
                return
            except (ValueError, argparse.ArgumentTypeError):
                pass
        if " " in arg:  # text, not an option: argparse would read it as {arg[:2]} with a glued value
            self.error(f"{arg!r} starts like the option {arg[:2]}; to give text that starts with '-', "
                       f"put it after --: {self.prog} [options] -- {arg!r}")
        self.error(f"unrecognized option {arg} (it is not {arg[:2]} {arg[2:]}); see {self.prog} --help")


def _model_names() -> list[str]:
    from ..gguf import MODEL_NAMES

    return list(MODEL_NAMES)


_MODEL_HELP = ("GGUF file, or the name of an installed model package: "
               + ", ".join(_model_names()) + " (default: smollm2, SmolLM2-135M-Instruct)")


def resolve_model(value: Optional[str]) -> str:
    """The path ``--model`` names: a file, an installed model's name
    (`infer.gguf.MODEL_NAMES`), or the default model; CLIError for anything else."""
    from ..gguf import MODEL_NAMES, model_path

    if value is None:
        value = "smollm2"
    if os.path.exists(value) and not os.path.isfile(value):
        raise CLIError(f"--model: {value} is not a file (nor one of: {', '.join(MODEL_NAMES)})")
    try:
        return model_path(value)
    except FileNotFoundError as exc:
        if value in MODEL_NAMES:
            raise CLIError(str(exc)) from None
        raise CLIError(f"--model: {value} is not a file (nor one of: {', '.join(MODEL_NAMES)})") from None


def add_model_arg(p: argparse.ArgumentParser, help: str = _MODEL_HELP) -> None:  # noqa: A002
    p.add_argument("--model", "-m", metavar="PATH|NAME", default=None, help=help)


def add_model_args(p: argparse.ArgumentParser) -> None:
    add_model_arg(p)
    p.add_argument("--threads", "-t", type=int, default=None,
                   help="kernel threads (default: physical cores; -1 = the same, as in llama.cpp)")
    add_gpu_layers_arg(p)


def add_gpu_layers_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n-gpu-layers", "--gpu-layers", "-ngl", metavar="N", default=None,
                   help="accepted for llama.cpp compatibility and ignored: infer runs on the CPU (default: none)")


#: the values llama.cpp takes for -fa and --reasoning (common_arg_utils: is_truthy, is_falsey, is_autoy)
ON_OFF_AUTO = ("on", "enabled", "true", "1", "off", "disabled", "false", "0", "auto", "-1")


def add_llama_tuning_args(p: argparse.ArgumentParser) -> None:
    """llama.cpp's attention and batch-size knobs, which its users type out of habit
    (`-fa on -b 2048`): accepted so that such a command line runs, and ignored with a
    warning, as --n-gpu-layers is.  They change speed and memory there, not the text."""
    p.add_argument("--flash-attn", "-fa", metavar="on|off|auto", default=None, choices=ON_OFF_AUTO,
                   help="accepted for llama.cpp compatibility and ignored: infer has one attention kernel "
                        "(default: none)")
    for flags in (("--batch-size", "-b"), ("--ubatch-size", "-ub")):
        p.add_argument(*flags, type=int, metavar="N", default=None,
                       help="accepted for llama.cpp compatibility and ignored: infer sizes its own batches "
                            "(default: none)")


def warn_ignored_tuning(args: argparse.Namespace) -> None:
    given = [flag for flag, name in (("--flash-attn", "flash_attn"), ("--batch-size", "batch_size"),
                                     ("--ubatch-size", "ubatch_size")) if getattr(args, name, None) is not None]
    if given:
        warn(f"{', '.join(given)}: ignored; infer chooses its own attention kernel and batch sizes")


def add_template_args(p: argparse.ArgumentParser) -> None:
    """llama-server's template options: a built-in template's name or a template's
    text, a template file, either replacing the GGUF's; and --jinja, accepted as a
    no-op (infer always renders templates with jinja2)."""
    # The built-ins' names written out: infer.chat imports jinja2, which a command
    # line that renders no template (generate without --chat) need not load.
    p.add_argument("--chat-template", metavar="NAME|JINJA", default=None,
                   help="chat template to use instead of the model's, as llama.cpp takes it: a built-in's name "
                        "(chatml, llama3, gemma, gemma4) or the jinja2 template itself (default: the GGUF's own)")
    p.add_argument("--chat-template-file", metavar="FILE", default=None,
                   help="jinja2 chat template to use instead of the model's (default: the GGUF's own)")
    p.add_argument("--chat-template-kwargs", metavar="JSON", default=None,
                   help="extra template variables as a JSON object, as llama-server takes them "
                        "('{\"enable_thinking\": false}'); a request's own chat_template_kwargs win "
                        "(default: none)")
    p.add_argument("--reasoning", "-rea", metavar="on|off|auto", default=None, choices=ON_OFF_AUTO,
                   help="thinking in the chat, as llama.cpp's --reasoning: on or off sets the template's "
                        "enable_thinking (Qwen3, SmolLM3, ...), auto leaves it to the template (default: auto)")
    p.add_argument("--reasoning-effort", metavar="LEVEL", default=None,
                   help="reasoning effort given to the chat template as reasoning_effort, as llama.cpp's "
                        "--reasoning-effort: default keeps the template's own, or a level such as minimal, low, "
                        "medium or high (gpt-oss) (default: default)")
    p.add_argument("--reasoning-budget", metavar="N", type=int, default=None,
                   help="llama.cpp's thinking budget: only -1 (unrestricted) is supported; "
                        "--reasoning off turns thinking off (default: -1)")
    p.add_argument("--jinja", action="store_true",
                   help="accepted for llama-server compatibility: templates are always jinja2")


def add_sampling_args(p: argparse.ArgumentParser, ctx_size: bool = True) -> None:
    p.add_argument("--max-tokens", "-n", "--n-predict", "--predict", type=int, default=256,
                   help="tokens to generate at most; -1 = no limit but the end of the text or a full context, "
                        "as llama.cpp's -n -1")
    p.add_argument("--temp", "--temperature", type=float, default=0.8,
                   help="temperature; 0 = greedy (below 0 is taken as 0, as llama.cpp does)")
    p.add_argument("--top-k", type=int, default=40, help="keep the k likeliest tokens; 0 = all")
    p.add_argument("--top-p", type=float, default=0.95, help="keep the likeliest tokens up to this mass; 1 = all")
    p.add_argument("--min-p", type=float, default=0.05,
                   help="drop tokens less likely than this times the likeliest; 0 = none")
    p.add_argument("--repeat-penalty", type=float, default=1.0, help="penalty for repeated tokens; 1 = none")
    p.add_argument("--repeat-last-n", type=int, default=64,
                   help="how many recent tokens the penalty looks at; 0 = none, -1 = the whole context, as llama.cpp")
    p.add_argument("--presence-penalty", type=float, default=0.0,
                   help="subtracted once from each token in the penalty window; 0 = none (default: 0)")
    p.add_argument("--frequency-penalty", type=float, default=0.0,
                   help="subtracted per occurrence of each token in the penalty window; 0 = none (default: 0)")
    p.add_argument("--seed", "-s", type=int, default=-1, help="sampling seed; -1 = random")
    if not ctx_size:
        return
    p.add_argument("--ctx-size", "-c", type=int, default=None,
                   help="context window in tokens (default: what the prompt and --max-tokens "
                        "need for generate, the model's trained context for chat and for -n -1; 0 = the same)")


def load_model(args: argparse.Namespace, text_generation: bool = True) -> Any:
    """infer.load with a progress line on a terminal; CLIError for a bad --threads, and
    for an embedding model (an encoder) where the command generates or scores text."""
    import time
    import warnings

    from .. import loader

    if args.threads == -1:  # llama.cpp's default: as many as the machine has
        args.threads = None
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads: must be >= 1, or -1 for the default, got {args.threads}")
    if getattr(args, "n_gpu_layers", None) not in (None, "0"):
        warn("infer runs on the CPU: --n-gpu-layers is ignored")  # as a CPU-only llama.cpp build says
    if "ubatch_size" in args:  # the commands that take add_llama_tuning_args
        warn_ignored_tuning(args)
    path = resolve_model(args.model)
    template = read_chat_template(args)
    show = sys.stderr.isatty()
    if show:
        print(f"loading {path} ...", end="", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = loader.load(path, n_threads=args.threads, chat_template=template)
    for w in caught:  # the kernels name their own parameter ("n: 1000 threads ..."): say the flag
        if "thread pool's limit" in str(w.message):
            from .. import kernels

            warn(f"--threads {args.threads}: above the thread pool's limit; using {kernels.get_num_threads()}")
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if show:
        print(f"\r\033[Kloaded {path} in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    if text_generation and getattr(model.engine, "is_encoder", False):
        model.close()
        raise CLIError(f"{path} is an embedding model ({model.engine.architecture}, an encoder): it cannot "
                       f"generate text; use infer embed, or infer serve for /v1/embeddings and /v1/rerank")
    return model


def read_chat_template(args: argparse.Namespace) -> Optional[str]:
    """The template of --chat-template (a built-in's name, or the text itself) or the
    text of --chat-template-file; None without either; CLIError if unusable."""
    given = getattr(args, "chat_template", None)
    name = getattr(args, "chat_template_file", None)
    if given is not None and name is not None:
        raise UsageError("--chat-template and --chat-template-file: one or the other")
    if given is not None:
        from ..chat import FALLBACK_TEMPLATES  # imports jinja2: only when a template is given

        if given in FALLBACK_TEMPLATES:
            return FALLBACK_TEMPLATES[given]
        # llama.cpp takes any other value as the template itself; a bare word is a
        # misspelt name far more often than a template that prints one constant.
        if "{{" not in given and "{%" not in given:
            raise UsageError(f"--chat-template: {given!r} is neither a built-in template ("
                           + ", ".join(FALLBACK_TEMPLATES) + ") nor a jinja2 template")
        return str(given)
    if name is None:
        return None
    try:
        with open(name, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"--chat-template-file: cannot read {name}: {exc}") from None
    if not text.strip():
        raise CLIError(f"--chat-template-file: {name} is empty")
    return text


def chat_template_kwargs(args: argparse.Namespace) -> Optional[dict[str, Any]]:
    """The object of --chat-template-kwargs (None without it); UsageError if it is not a
    JSON object or sets a variable the request and the model set (messages, tools, ...)."""
    import json

    budget = getattr(args, "reasoning_budget", None)
    if budget is not None and budget != -1:
        raise UsageError(f"--reasoning-budget: only -1 (no budget) is supported, got {budget}; "
                         "--reasoning off turns thinking off")
    # llama.cpp's --reasoning on/off is its default template kwarg enable_thinking
    reasoning = getattr(args, "reasoning", None)
    thinking = {} if reasoning is None or reasoning in ("auto", "-1") else \
        {"enable_thinking": reasoning in ("on", "enabled", "true", "1")}
    effort = getattr(args, "reasoning_effort", None)
    if effort is not None and effort != "default":  # llama.cpp: "default" keeps the template's own level
        if not effort:
            raise UsageError("--reasoning-effort: expected a level such as low, medium or high, or default")
        thinking["reasoning_effort"] = effort
    given = getattr(args, "chat_template_kwargs", None)
    if given is None:
        return thinking or None
    try:
        value = json.loads(given)
    except ValueError as exc:
        raise UsageError(f"--chat-template-kwargs: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError(f"--chat-template-kwargs: expected a JSON object, got {type(value).__name__}")
    from ..chat.template import TEMPLATE_VARIABLES

    reserved = sorted(set(value) & set(TEMPLATE_VARIABLES))
    if reserved:
        raise UsageError(f"--chat-template-kwargs: {reserved[0]!r} is set from the conversation and the model")
    return {**thinking, **value}


def utf8_text(text: str, what: str) -> str:
    """``text`` if it is all valid UTF-8; else CLIError naming its first bad byte.

    Under a C or C.UTF-8 locale Python reads stdin with surrogateescape: each byte
    that is not UTF-8 arrives as a lone surrogate (U+DC80..U+DCFF), which fails much
    later, in the tokenizer, with a message about surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        bad = f"byte 0x{code - 0xDC00:02X}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        raise CLIError(f"{what} is not UTF-8 text ({bad} at character {exc.start})") from None
    return text


def read_stdin() -> str:
    """All of stdin, which must be UTF-8 text (CLIError otherwise)."""
    try:
        return utf8_text(sys.stdin.read(), "stdin")
    except UnicodeDecodeError as exc:  # a locale whose stdin decodes strictly
        raise CLIError(f"stdin is not UTF-8 text ({exc.reason})") from None


def ctx_size(args: argparse.Namespace) -> Optional[int]:
    if args.ctx_size is not None and args.ctx_size < 0:
        raise UsageError(f"--ctx-size: must be >= 0, got {args.ctx_size}")
    return args.ctx_size or None


def max_tokens(args: argparse.Namespace, least: int = 0) -> Optional[int]:
    """--max-tokens as the API takes it: -1 (llama.cpp's "infinity") is None, no limit
    but the end of the text or a full context; CLIError below ``least`` otherwise."""
    if args.max_tokens == -1:
        return None
    if args.max_tokens < least:
        raise UsageError(f"--max-tokens: must be >= {least}, or -1 for no limit, got {args.max_tokens}")
    return int(args.max_tokens)


def warn(message: str) -> None:
    print(f"infer: warning: {message}", file=sys.stderr)


def check_ctx_size(model: Any, n_ctx: Optional[int], n_prompt: int, max_tokens: Optional[int]) -> None:
    """Warn (as llama.cpp does) when -c passes the trained context or leaves too little
    room after the prompt.  (A prompt longer than -c is an error, raised later.)"""
    trained = int(getattr(model.engine, "max_seq_len", 0) or 0)
    if n_ctx is None:
        return
    if trained and n_ctx > trained:
        warn(f"-c {n_ctx} exceeds the model's trained context of {trained} tokens; "
             "output past that many tokens may degrade")
    if n_prompt == n_ctx:
        warn(f"-c {n_ctx} leaves no room to generate after the {n_prompt}-token prompt")
    elif max_tokens is not None and n_prompt < n_ctx < n_prompt + max_tokens:
        warn(f"-c {n_ctx} leaves room for {n_ctx - n_prompt} of the {max_tokens} tokens asked for (-n) "
             f"after the {n_prompt}-token prompt")


#: the destinations of add_sampling_args's flags but --ctx-size
_SAMPLING_DESTS = ("max_tokens", "temp", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n",
                   "presence_penalty", "frequency_penalty", "seed")


def add_server_sampling_args(p: argparse.ArgumentParser) -> None:
    """add_sampling_args's flags (not --ctx-size) as llama-server's: the defaults of the
    requests that omit a field, so each is None unless given (`server_sampling_defaults`)."""
    add_sampling_args(p, ctx_size=False)
    p.set_defaults(**dict.fromkeys(_SAMPLING_DESTS))


def server_sampling_defaults(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling flags given (add_server_sampling_args) as llama-server's request fields
    (``n_predict``, ``temperature``, ...), checked as `sampling` checks them."""
    reference = argparse.ArgumentParser()
    add_sampling_args(reference, ctx_size=False)
    given = {dest: getattr(args, dest) for dest in _SAMPLING_DESTS if getattr(args, dest, None) is not None}
    filled = argparse.Namespace(**{**vars(reference.parse_args([])), **given})
    params = sampling(filled)
    out: dict[str, Any] = {}
    for dest, value in given.items():
        if dest == "max_tokens":
            limit = max_tokens(filled, least=1)
            if limit is not None:  # -1: no limit, llama-server's own default
                out["n_predict"] = limit
        elif dest == "seed":
            if params["seed"] is not None:  # -1: a random seed per request
                out["seed"] = params["seed"]
        elif dest == "temp":
            out["temperature"] = params["temperature"]
        else:
            out[dest] = value
    return out


def sampling(args: argparse.Namespace) -> dict[str, Any]:
    """The sampler's options; a repeat_last_n of -1 (llama.cpp: the context size) is
    left for `with_context_size` to resolve once the context size is known."""
    if args.seed < -1:
        raise UsageError(f"--seed: must be >= 0, or -1 for a random seed, got {args.seed}")
    if args.repeat_last_n < -1:
        raise UsageError(f"--repeat-last-n: must be >= 0, or -1 for the whole context, got {args.repeat_last_n}")
    params = dict(temperature=max(args.temp, 0.0), top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                  repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n,
                  seed=None if args.seed == -1 else args.seed)
    for name in ("presence_penalty", "frequency_penalty"):  # given only when used: 0 is the sampler's default
        if getattr(args, name, 0.0):
            params[name] = getattr(args, name)
    _check_sampling(params)
    return params


#: the flag of each sampler option whose name differs from it
_SAMPLER_FLAGS = {"temperature": "--temp"}


def _check_sampling(params: dict[str, Any]) -> None:
    """UsageError, naming the flag, for a value the Sampler refuses (--top-p 2), before
    the model loads rather than as a failure once it has."""
    from ..sampler import Sampler

    try:
        Sampler(**dict(params, repeat_last_n=max(params["repeat_last_n"], 0), seed=0))
    except (TypeError, ValueError) as exc:
        name, _, reason = str(exc).partition(": ")
        raise UsageError(f"{_SAMPLER_FLAGS.get(name, '--' + name.replace('_', '-'))}: {reason}") from None


def with_context_size(params: dict[str, Any], n_ctx: int) -> dict[str, Any]:
    """``params`` with a repeat_last_n of -1 made the context size ``n_ctx``."""
    return {**params, "repeat_last_n": n_ctx} if params["repeat_last_n"] == -1 else params
