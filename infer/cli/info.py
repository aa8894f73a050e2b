"""`infer info`: describe a GGUF file, or the system and its kernel set."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Optional


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
    from ..gguf import GGUFFile
    from .common import UsageError, resolve_model

    if args.path is not None and args.model is not None:
        raise UsageError("give the model either as PATH or with --model, not both")
    with GGUFFile(resolve_model(args.path if args.path is not None else args.model)) as f:
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

    from .. import __version__, kernels

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

    from ..chat.template import fallback_family
    from ..quant_mixtures import file_type_name

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
        "file_type": file_type_name(md.get("general.file_type")),
        "parameters": sum(t.n_elements for t in f.tensors.values()),
        "context_length": arch_key("context_length"), "layers": arch_key("block_count"),
        "embedding_length": arch_key("embedding_length"), "feed_forward_length": arch_key("feed_forward_length"),
        "heads": arch_key("attention.head_count"), "kv_heads": arch_key("attention.head_count_kv"),
        "shortconv_l_cache": arch_key("shortconv.l_cache"),
        "rope_scaling": arch_key("rope.scaling.type"), "rope_scaling_factor": arch_key("rope.scaling.factor"),
        "rope_original_context": arch_key("rope.scaling.original_context_length"),
        "attention_temperature": arch_key("attention.temperature_scale"),
        "deltanet": None if arch in MAMBA2_ARCHS else _deltanet_summary(arch_key),
        "mamba2": _mamba2_summary(arch_key, arch == "nemotron_h", arch == "falcon-h1") if arch in MAMBA2_ARCHS
        else None,
        "mla": _mla_summary(arch_key),
        "experts": arch_key("expert_count"), "experts_used": arch_key("expert_used_count"),
        "expert_feed_forward_length": arch_key("expert_feed_forward_length"),
        # what one token reads: the stacked expert tensors (names *_exps) count as
        # expert_used_count / expert_count of themselves
        "active_parameters": _active_parameters(f, arch_key("expert_count"), arch_key("expert_used_count")),
        "vocabulary": {"kind": md.get("tokenizer.ggml.model"), "pre": md.get("tokenizer.ggml.pre"),
                       "size": len(tokens)},
        "special_tokens": special,
        "chat_template": isinstance(md.get("tokenizer.chat_template"), str),
        # what chat uses instead when the file has no template (a base model, most likely)
        "fallback_chat_template": (None if isinstance(md.get("tokenizer.chat_template"), str)
                                   else fallback_family(md, set(t for t in tokens if isinstance(t, str)).__contains__)),
        "tensor_types": dict(sorted(types.items(), key=lambda kv: -kv[1])),
        "encoder": _encoder_summary(arch, arch_key, "cls.output.weight" in f.tensors or "cls.weight" in f.tensors),
        "tensors": [{"name": t.name, "type": t.dtype.name, "shape": list(t.shape), "bytes": t.nbytes}
                    for t in f.tensors.values()],
        "metadata": metadata,
    }


#: the embedding (encoder) architectures: they embed or rerank, and never chat
ENCODER_ARCHS = ("bert", "nomic-bert")


def _encoder_summary(arch: str, arch_key: Any, has_head: bool) -> Optional[dict[str, Any]]:
    """An encoder's pooling (llama.cpp's pooling_type; rank for a file with a
    classification head and no pooling_type, as infer reads it) and its output: the
    embedding width, or the classification head's labels of a reranker."""
    if arch not in ENCODER_ARCHS:
        return None
    from ..variants.bert import POOLING_TYPES

    pooling = arch_key("pooling_type")
    if pooling is None and has_head:
        pooling = 4
    labels = arch_key("classifier.output_labels")
    return {"pooling": POOLING_TYPES.get(pooling, f"unknown ({pooling})") if isinstance(pooling, int) else "none",
            "dimensions": arch_key("embedding_length"),
            "labels": list(labels) if isinstance(labels, list) else None}


#: the architectures whose ssm.* keys size Mamba2 layers (a layer with 0 KV heads is one;
#: in nemotron_h, with a feed_forward_length of 0 too: its MLP-only layers have no KV heads;
#: in falcon-h1, every layer: its mixer is beside attention)
MAMBA2_ARCHS = ("granitehybrid", "nemotron_h", "falcon-h1")


def _mamba2_summary(arch_key: Any, single_half: bool = False, every_layer: bool = False) -> Optional[dict[str, Any]]:
    """Granite 4.0-H's, Nemotron-H's or Falcon-H1's Mamba2 layers (the ssm.* keys; those
    with head_count_kv 0, with ``single_half`` feed_forward_length 0, or with
    ``every_layer`` all of them): how many, their
    heads, and the recurrent state a context keeps (float32 S and conv inputs per layer,
    plus up to transformer.MAX_CHECKPOINTS copies); None with keys that are not counts
    (the loader names those)."""
    import numpy as np

    from ..variants.transformer import MAX_CHECKPOINTS

    values = [arch_key(k) for k in ("ssm.conv_kernel", "ssm.state_size", "ssm.group_count",
                                    "ssm.time_step_rank", "ssm.inner_size", "block_count")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return None
    conv_kernel, d_state, n_groups, n_heads, inner, n_layers = values
    kv = arch_key("attention.head_count_kv")
    kv_list = list(kv) if isinstance(kv, (list, tuple, np.ndarray)) else [kv] * n_layers
    ff = arch_key("feed_forward_length") if single_half else 0
    ff_list = list(ff) if isinstance(ff, (list, tuple, np.ndarray)) else [ff] * n_layers
    n_recurrent = n_layers if every_layer else \
        sum(1 for n, f in zip(kv_list[:n_layers], ff_list) if n == 0 and f == 0)
    state = n_recurrent * 4 * (inner * d_state + (conv_kernel - 1) * (inner + 2 * n_groups * d_state))
    return {"layers": n_recurrent, "heads": n_heads, "head_dim": inner // n_heads, "groups": n_groups,
            "state_size": d_state, "conv_kernel": conv_kernel, "state_bytes": state,
            "checkpoint_bytes": state * MAX_CHECKPOINTS}


def _deltanet_summary(arch_key: Any) -> Optional[dict[str, Any]]:
    """Qwen3.5's gated DeltaNet layers (the ssm.* keys): how many, their heads, and
    the recurrent state a context keeps (float32 S and conv inputs per layer, plus
    up to transformer.MAX_CHECKPOINTS copies); None without them or with keys that
    are not counts (the loader names those)."""
    import numpy as np

    from ..variants.transformer import MAX_CHECKPOINTS

    values = [arch_key(k) for k in ("ssm.conv_kernel", "ssm.state_size", "ssm.group_count",
                                    "ssm.time_step_rank", "block_count")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return None
    conv_kernel, d, n_k, n_v, n_all = values
    nextn = arch_key("nextn_predict_layers")
    n_layers = n_all - (nextn if isinstance(nextn, int) and 0 <= nextn < n_all else 0)
    flags = arch_key("attention.recurrent_layers")
    interval = arch_key("full_attention_interval")
    if isinstance(flags, (list, tuple, np.ndarray)) and len(flags) >= n_layers:
        n_recurrent = sum(bool(f) for f in list(flags)[:n_layers])
    else:
        every = interval if isinstance(interval, int) and interval > 0 else 4
        n_recurrent = sum((i + 1) % every != 0 for i in range(n_layers))
    state = n_recurrent * 4 * (n_v * d * d + (conv_kernel - 1) * (2 * n_k * d + n_v * d))
    return {"layers": n_recurrent, "key_heads": n_k, "value_heads": n_v, "state_size": d,
            "conv_kernel": conv_kernel, "state_bytes": state, "checkpoint_bytes": state * MAX_CHECKPOINTS}


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


def _mla_summary(arch_key: Any) -> Optional[dict[str, Any]]:
    """DeepSeek's multi-head latent attention (``attention.kv_lora_rank`` and the _mla
    head sizes): what each position caches, one F16 row of the latent and the rope key
    per layer, and the per-head sizes it is decompressed to (None without it)."""
    rank, rope = arch_key("attention.kv_lora_rank"), arch_key("rope.dimension_count")
    q_head, v_dim = arch_key("attention.key_length_mla"), arch_key("attention.value_length_mla")
    layers = arch_key("block_count")
    if not all(isinstance(v, int) and v > 0 for v in (rank, rope, q_head, v_dim, layers)):
        return None
    q_rank = arch_key("attention.q_lora_rank")
    return {"latent": rank, "rope": rope, "nope": q_head - rope, "value": v_dim,
            "q_rank": q_rank if isinstance(q_rank, int) else 0, "cache_bytes_per_token": 2 * layers * (rank + rope)}


def _active_parameters(f: Any, n_experts: Any, n_used: Any) -> Optional[int]:
    """Parameters a token uses in a mixture of experts (None without experts)."""
    if not (isinstance(n_experts, int) and isinstance(n_used, int) and 0 < n_used <= n_experts):
        return None
    return sum(int(t.n_elements) * n_used // n_experts if "_exps." in t.name else int(t.n_elements)
               for t in f.tensors.values())


def format_model(s: dict[str, Any]) -> str:
    """The text `infer info` prints for a describe_model() summary."""
    from pathlib import Path

    rows = [("architecture", s["architecture"] or "?")]
    if s["name"]:
        rows.insert(0, ("name", s["name"]))
    if s["file_type"]:
        rows.append(("file type", s["file_type"]))
    rows.append(("parameters", f"{_human_count(s['parameters'])} ({s['parameters']:,})"))
    if s.get("active_parameters") is not None:
        rows.append(("active", f"{_human_count(s['active_parameters'])} per token ({s['experts_used']} of "
                               f"{s['experts']} experts)"))
    if s["context_length"] is not None:
        rows.append(("context length", str(s["context_length"])))
    if s["layers"] is not None:
        shape = [f"embedding {s['embedding_length']}", f"feed-forward {s['feed_forward_length']}"]
        if s.get("experts") is not None:
            width = s.get("expert_feed_forward_length") or s["feed_forward_length"]
            shape.append(f"{s['experts']} experts of {width}, {s['experts_used']} used")
        if s["heads"] is not None:
            shape.append(f"heads {s['heads']}" + (f" ({s['kv_heads']} kv)" if s["kv_heads"] is not None else ""))
        if s["shortconv_l_cache"] is not None:   # LFM2: the layers with 0 KV heads are convolutions
            shape.append(f"shortconv width {s['shortconv_l_cache']}")
        rows.append(("layers", f"{s['layers']}  ({', '.join(shape)})"))
    if isinstance(s.get("rope_scaling"), str):
        scaling = s["rope_scaling"]
        if isinstance(s.get("rope_scaling_factor"), (int, float)):
            scaling += f", factor {s['rope_scaling_factor']:g}"
        if isinstance(s.get("rope_original_context"), int):
            scaling += f", original context {s['rope_original_context']}"
        rows.append(("rope scaling", scaling))
    if isinstance(s.get("attention_temperature"), (int, float)) and s["attention_temperature"]:
        rows.append(("attention temp", f"{s['attention_temperature']:g} (per-position scale of the queries)"))
    dn = s.get("deltanet")
    if dn is not None:
        rows.append(("gated DeltaNet", f"{dn['layers']} layers, {dn['value_heads']} value heads over "
                                       f"{dn['key_heads']} key heads of {dn['state_size']}, conv width "
                                       f"{dn['conv_kernel']}"))
        rows.append(("recurrent state", f"{_human_bytes(dn['state_bytes'])} per context, and up to "
                                        f"{_human_bytes(dn['checkpoint_bytes'])} of checkpoints for truncation"))
    mla = s.get("mla")
    if mla is not None:
        rows.append(("MLA", f"latent {mla['latent']} + rope key {mla['rope']} cached "
                            f"({_human_bytes(mla['cache_bytes_per_token'])} per token in F16), heads of "
                            f"{mla['nope']} + {mla['rope']}, values {mla['value']}"
                            + (f", q rank {mla['q_rank']}" if mla["q_rank"] else "")))
    m2 = s.get("mamba2")
    if m2 is not None:
        rows.append(("Mamba2", f"{m2['layers']} layers, {m2['heads']} heads of {m2['head_dim']} in "
                               f"{m2['groups']} groups, state size {m2['state_size']}, conv width {m2['conv_kernel']}"))
        rows.append(("recurrent state", f"{_human_bytes(m2['state_bytes'])} per context, and up to "
                                        f"{_human_bytes(m2['checkpoint_bytes'])} of checkpoints for truncation"))
    vocab = s["vocabulary"]
    kind = vocab["kind"] or "none"
    if vocab["pre"]:
        kind += f" (pre-tokenizer {vocab['pre']})"
    rows.append(("vocabulary", f"{kind}, {vocab['size']} tokens"))
    rows.append(("special tokens", ", ".join(
        f"{role} {tok['id']}" + (f" {tok['text']!r}" if tok["text"] is not None else " (out of range)")
        for role, tok in s["special_tokens"].items()) or "none"))
    template = s["metadata"].get("tokenizer.chat_template")
    encoder = s.get("encoder")
    if encoder is not None:
        use = ("reranking: scores (query, document) pairs (model.rerank, /v1/rerank)"
               if encoder["pooling"] == "rank" else f"embeddings of {encoder['dimensions']} dimensions "
               f"(model.embed, infer embed, /v1/embeddings)")
        rows.append(("encoder", f"{use}; pooling {encoder['pooling']}; no text generation"))
    else:
        rows.append(("chat template", f"yes ({len(template)} characters)" if s["chat_template"] else
                     f"no: looks like a base model (made to continue text, not to chat); "
                     f"chat uses the built-in {s['fallback_chat_template']!r} template"))
    split = s["metadata"].get("split.count")
    if isinstance(split, int) and split > 1:
        number = s["metadata"].get("split.no")
        rows.append(("split", f"part {number + 1 if isinstance(number, int) else '?'} of {split} "
                              "(llama-gguf-split): not a whole model on its own"))
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


def register(sub: Any) -> None:
    from .common import add_model_arg

    p = sub.add_parser("info", help="describe a GGUF file (or the system with --system)")
    p.add_argument("path", nargs="?", default=None, help="GGUF file or model name, as --model")
    add_model_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--system", action="store_true", help="CPU features and the active kernel set")
    p.set_defaults(func=cmd_info)
