"""What the built-in transformer variants share.

* `Matrix` / `Vector`: weights as the kernels take them, zero-copy views into the
  memory-mapped file.
* `TransformerEngine` / `TransformerContext`: the bookkeeping around a KV cache
  and a fused one-token decode step (a C call per token, bound to one context's
  cache).  A variant adds its config, its weights, `decoder_for(ctx)` and the
  readable Python forward pass (`_prefill`) that the C step mirrors.

A new variant does not have to use these (docs/variants.md starts from the bare
runtime contract); they exist so that Llama and Gemma 3 say only what differs.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, Generic, Optional, Tuple, TypeVar

import numpy as np
from numpy.typing import NDArray

from .. import kernels as K
from ..runtime import Context, Engine
from ..tensor import check_kernel_format


class Matrix:
    """A weight matrix as the kernels take it: raw rows in the file, its format."""

    __slots__ = ("data", "qtype", "rows", "cols", "act_type")

    def __init__(self, tensor: Any, rows: int, cols: int, name: str) -> None:
        shape = tuple(int(s) for s in tensor.shape)
        if shape != (rows, cols):
            raise ValueError(f"{name}: expected shape {(rows, cols)}, got {shape}")
        check_kernel_format(name, tensor.dtype)
        self.data = tensor.data.reshape(rows, -1)  # uint8 rows, zero-copy
        self.qtype = K.type_id(tensor.dtype)
        self.rows, self.cols = rows, cols
        #: format the input vector is quantized into for this matrix's dot products
        self.act_type = K.type_id(K.vec_dot_type(self.qtype))

    def as_tuple(self) -> Tuple[Any, ...]:
        return (self.data, self.qtype, self.act_type, self.rows, self.cols)


class Vector:
    """An F32 vector (norm weights)."""

    def __init__(self, tensor: Any, n: int, name: str) -> None:
        if K.type_id(tensor.dtype) != 0 or tuple(int(s) for s in tensor.shape) not in ((n,), (1, n)):
            raise ValueError(f"{name}: expected f32 of {n} values, got {tensor.dtype} {tensor.shape}")
        self.data = tensor.data.view(np.float32).reshape(n)


def tensor_lookup(tensors: Dict[str, Any]) -> Callable[[str], Any]:
    """need(name) -> the tensor, or a ValueError naming the missing one."""

    def need(name: str) -> Any:
        if name not in tensors:
            raise ValueError(f"GGUF file: tensor {name} is missing")
        return tensors[name]

    return need


C = TypeVar("C", bound="TransformerContext[Any]")


class TransformerEngine(Engine, Generic[C]):
    """Weights as views of the file; contexts tracked so close() can drop them all."""

    #: the context class this engine creates
    context_class: Any = None
    # Set by the variant; None once closed.
    layers: Any
    token_embd: Any
    output: Any
    output_norm: Any

    def __init__(self) -> None:
        self._contexts: "weakref.WeakSet[C]" = weakref.WeakSet()

    def create_context(self, n_ctx: Optional[int] = None, sampler: Any = None,
                       kv_type: str = "f16") -> C:
        """A context of ``n_ctx`` positions (default: the trained length); KV cache
        in ``kv_type`` "f16" (default) or "f32".  Cache pages are touched as used."""
        if self.layers is None:
            raise RuntimeError("the model is closed")
        ctx: C = self.context_class(self, n_ctx or self.max_seq_len, sampler, kv_type)
        self._contexts.add(ctx)
        return ctx

    def decoder_for(self, ctx: C) -> Any:
        """The fused one-token step bound to ctx's cache (a kernels.*Decoder)."""
        raise NotImplementedError

    def close(self) -> None:
        # Drop every view into the file map (ours and the contexts' decoders) so it
        # can be unmapped.
        for ctx in list(self._contexts):
            ctx._release()
        self.layers = None
        self.token_embd = self.output = self.output_norm = None


E = TypeVar("E", bound=TransformerEngine[Any])


class TransformerContext(Context, Generic[E]):
    """A KV cache of shape (layers, kv_heads, n_ctx, head_dim) and the fused step."""

    engine: E

    def __init__(self, engine: E, n_ctx: int, sampler: Any, kv_type: str) -> None:
        super().__init__(engine, n_ctx, sampler)
        cfg = engine.config  # type: ignore[attr-defined]
        if kv_type not in ("f16", "f32"):
            raise ValueError(f"kv_type: expected 'f16' or 'f32', got {kv_type!r}")
        # F16 is stored as its bits (uint16), the layout kv_store/attention read.
        kv_dtype = np.uint16 if kv_type == "f16" else np.float32
        shape = (cfg.n_layers, cfg.n_kv_heads, self.n_ctx, cfg.head_dim)
        # np.zeros maps untouched pages lazily: memory grows with the positions used.
        self.k_cache = np.zeros(shape, dtype=kv_dtype)
        self.v_cache = np.zeros(shape, dtype=kv_dtype)
        self._scratch: Dict[int, Any] = {}
        self._decoder: Any = None
        #: False: decode through the Python blocks too (for tests comparing the two)
        self.fused_decode = True

    # ---- what a variant writes -----------------------------------------------------
    def _new_scratch(self, n: int) -> Any:
        """Activation buffers for a batch of n positions."""
        raise NotImplementedError

    def _prefill(self, tokens: NDArray[Any], start: int) -> None:
        """The Python forward pass over a batch (also one token with fused_decode off)."""
        raise NotImplementedError

    # ---- shared ------------------------------------------------------------------------
    def _forward(self, tokens: NDArray[Any], start: int) -> None:
        eng = self.engine
        if eng.layers is None:
            raise RuntimeError("the model is closed")
        if len(tokens) == 1 and self.fused_decode:
            if self._decoder is None:
                self._decoder = eng.decoder_for(self)
            self._decoder.decode(int(tokens[0]), start, self.logits)
            return
        self._prefill(tokens, start)

    def _buffers(self, n: int) -> Any:
        if n not in self._scratch:
            if len(self._scratch) > 2:
                self._scratch.clear()
            self._scratch[n] = self._new_scratch(n)
        return self._scratch[n]

    def _release(self) -> None:
        if self._decoder is not None:
            self._decoder.release()
        self._decoder = None
        self._scratch.clear()
