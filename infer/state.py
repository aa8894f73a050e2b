"""Saved contexts: a Context as bytes, and back, continuing bit for bit.

What is saved: the token history, the used part of the KV cache (positions
``0 .. n_past-1`` only), the logits and whether they are current, and the
sampler's whole state (its settings, seed, the RNG's exact position, the penalty
window).  A grammar set on the sampler is not saved (`save_state` refuses); the
grammar of ``generate(grammar=...)`` is on the sampler only while a token is drawn.

The format is self-describing and versioned::

    b"INFERCTX"  u32 version  u64 header length  header (JSON, UTF-8)
    array bytes, in the order and at the offsets the header lists
    32-byte BLAKE2b of everything before it

The header names the model it belongs to (architecture, vocabulary size and a
checksum of the weights: each tensor's format, shape and first and last 4 KiB),
the context's class, n_ctx and options (kv_type), and each array's dtype and
shape.  Loading checks all of it before touching a context: another model, a
truncated or altered file, or another version raises `StateError`.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray

MAGIC = b"INFERCTX"
VERSION = 1
_DIGEST = 32


class StateError(ValueError):
    """Saved context data that does not load: not ours, truncated, altered, another
    version, or made with another model."""


def fingerprint(engine: Any) -> dict[str, Any]:
    """What identifies the model a state belongs to (cached on the engine)."""
    cached = getattr(engine, "_state_fingerprint", None)
    if cached is not None:
        return dict(cached)
    weights = getattr(engine, "weight_arrays", None)
    if weights is None:
        raise NotImplementedError(f"{type(engine).__name__} cannot fingerprint its weights (weight_arrays)")
    # It reads the weights, views of the map: a file truncated since loading would
    # kill the process with SIGBUS (FileChangedError instead, as before each step).
    check = getattr(engine, "file_check", None)
    if check is not None:
        check()
    h = hashlib.blake2b(digest_size=16)
    for name, fmt, data in weights():
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        h.update(f"{name}:{fmt}:{data.shape}:{flat.size}".encode())
        h.update(flat[:4096].tobytes())
        h.update(flat[-4096:].tobytes())
    fp = {"architecture": engine.architecture, "vocab_size": int(engine.vocab_size),
          "weights": h.hexdigest()}
    engine._state_fingerprint = fp
    return dict(fp)


def save_state(ctx: Any) -> bytes:
    """The context as bytes (see the module doc for the layout)."""
    from .sampler import Sampler

    sampler = ctx.sampler
    if not isinstance(sampler, Sampler):
        raise TypeError(f"save_state: the sampler {type(sampler).__name__} is not an infer Sampler "
                        f"(its state cannot be saved)")
    if sampler.grammar is not None:
        raise ValueError("save_state: a grammar is being followed; save before or after the constrained "
                         "generation")
    ctx._check_file()  # both lines below may read the weights: the file must be whole
    ctx._ensure_cached()  # history a failed call left uncached is evaluated first
    n = len(ctx.tokens)
    arrays: dict[str, NDArray[Any]] = {"tokens": np.asarray(ctx.tokens, dtype="<i4"),
                                       "logits": np.asarray(ctx.logits, dtype="<f4")}
    for name, value in ctx._cache_state(n).items():
        arrays[f"cache.{name}"] = np.ascontiguousarray(value)
    table, offset = [], 0
    for name, value in arrays.items():
        table.append({"name": name, "dtype": value.dtype.str, "shape": list(value.shape),
                      "offset": offset, "nbytes": int(value.nbytes)})
        offset += int(value.nbytes)
    header = {
        "format": "infer-context", "version": VERSION, "model": fingerprint(ctx.engine),
        "context": {"class": type(ctx).__name__, "n_ctx": ctx.n_ctx, "options": ctx._state_options()},
        "n_past": n, "logits_valid": bool(ctx._logits_valid), "sampler": sampler.get_state(),
        "arrays": table,
    }
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    parts = [MAGIC, struct.pack("<IQ", VERSION, len(head)), head]
    parts += [value.tobytes() for value in arrays.values()]
    body = b"".join(parts)
    return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()


def read_header(data: bytes) -> tuple[dict[str, Any], memoryview]:
    """The header and the array bytes of saved data, after every integrity check."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data: expected bytes, got {type(data).__name__}")
    view = memoryview(data).cast("B")
    if len(view) < len(MAGIC) + 12 or bytes(view[:len(MAGIC)]) != MAGIC:
        raise StateError("not a saved infer context (no INFERCTX header)")
    version, head_len = struct.unpack_from("<IQ", view, len(MAGIC))
    if version != VERSION:
        raise StateError(f"saved context format version {version}; this infer reads version {VERSION}")
    start = len(MAGIC) + 12
    if len(view) < start + head_len + _DIGEST:
        raise StateError("saved context is truncated (in its header)")
    body, digest = view[:len(view) - _DIGEST], bytes(view[len(view) - _DIGEST:])
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
        raise StateError("saved context is truncated or altered (checksum mismatch)")
    try:
        header = json.loads(bytes(view[start:start + head_len]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StateError(f"saved context header is not JSON: {e}") from None
    if not isinstance(header, dict) or header.get("format") != "infer-context":
        raise StateError("saved context header does not describe an infer context")
    return header, body[start + head_len:]


def load_state(model: Any, data: bytes) -> Any:
    """A new Context of ``model`` (a Model or an Engine) holding the saved state."""
    from .sampler import Sampler

    engine = getattr(model, "engine", model)
    header, payload = read_header(data)
    theirs, ours = header.get("model"), fingerprint(engine)
    if theirs != ours:
        raise StateError(f"saved context belongs to another model ({theirs}), not this one ({ours})")
    arrays: dict[str, NDArray[Any]] = {}
    try:
        for entry in header["arrays"]:
            off, nbytes = int(entry["offset"]), int(entry["nbytes"])
            dtype, shape = np.dtype(entry["dtype"]), tuple(int(s) for s in entry["shape"])
            if off < 0 or nbytes < 0 or off + nbytes > len(payload) or \
                    int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != nbytes:
                raise StateError(f"saved context: array {entry['name']} does not fit its bytes")
            arrays[str(entry["name"])] = np.frombuffer(payload[off:off + nbytes], dtype=dtype).reshape(shape)
        spec = header["context"]
        n_past = int(header["n_past"])
        tokens, logits = arrays.pop("tokens"), arrays.pop("logits")
        sampler = Sampler.from_state(header["sampler"])
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, StateError):
            raise
        raise StateError(f"saved context header is incomplete or malformed: {e!r}") from None
    if tokens.shape != (n_past,) or logits.shape != (engine.vocab_size,):
        raise StateError("saved context: tokens or logits do not match n_past and the vocabulary")
    ctx = engine.create_context(n_ctx=int(spec["n_ctx"]), sampler=sampler, **dict(spec.get("options", {})))
    if type(ctx).__name__ != spec.get("class"):
        raise StateError(f"saved context is a {spec.get('class')}, this model makes {type(ctx).__name__}")
    if n_past > ctx.n_ctx or (n_past and tokens.max() >= engine.vocab_size) or (n_past and tokens.min() < 0):
        raise StateError("saved context: tokens outside the context or the vocabulary")
    ctx._load_cache_state({k[len("cache."):]: v for k, v in arrays.items() if k.startswith("cache.")}, n_past)
    ctx.tokens = [int(t) for t in tokens]
    ctx._n_cached = n_past
    ctx.logits[:] = logits
    ctx._logits_valid = bool(header.get("logits_valid", False))
    return ctx


def save(ctx: Any, path: "os.PathLike[str] | str") -> None:
    """Write `save_state` to ``path`` atomically (a temporary file in the same
    directory, flushed, then renamed over ``path``)."""
    data = save_state(ctx)
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".infer-ctx-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(model: Any, path: "os.PathLike[str] | str", max_bytes: Optional[int] = None) -> Any:
    with open(path, "rb") as f:
        data = f.read() if max_bytes is None else f.read(max_bytes)
    return load_state(model, data)
