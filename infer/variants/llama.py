"""The Llama family: Llama 2/3, TinyLlama, SmolLM2, Mistral-style GGUF files.

    x = embed(token)
    for each layer:
        h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv ; rope(q, k) ; store k, v
        x += attention(q, K, V) Wo                       (grouped-query)
        h = rmsnorm(x) ; x += (silu(h Wg) * h Wu) Wd      (SwiGLU)
    logits = rmsnorm(x) Wout                              (Wout = Wembed if tied)

Weights are views into the memory-mapped file, never copied.  A matrix-vector
product quantizes its input once into the weight's activation format (Q8_0 for
Q4_0/Q8_0, Q8_1 for Q4_1, Q8_K for K-quants); q/k/v share one quantized input
and gate/up another.  Prefill runs the batch through the matrix-matrix kernels,
block by block as `_block` below reads.  Decoding one token is a single C call
for the whole pass (csrc/llama_block.c): the same computation as `_block`
without ~20 kernel calls per layer from Python (tests compare the two).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from numpy.typing import NDArray

from .. import kernels as K
from ..runtime import RowOutputs, register_variant
from .common import Matrix, TransformerContext, TransformerEngine, Vector, tensor_lookup

# Prefill processes at most this many tokens per pass (bounds the scratch memory).
N_BATCH = 512


@dataclass(frozen=True)
class LlamaConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    max_seq_len: int
    rope_base: float
    rms_eps: float

    @classmethod
    def from_metadata(cls, md: Dict[str, Any], vocab_size: int) -> "LlamaConfig":
        arch = md["general.architecture"]

        def get(key: str, default: Any = None) -> Any:
            full = f"{arch}.{key}"
            if full in md:
                return md[full]
            if default is None:
                raise ValueError(f"GGUF metadata: missing {full}")
            return default

        dim = int(get("embedding_length"))
        n_heads = int(get("attention.head_count"))
        n_kv_heads = int(get("attention.head_count_kv", n_heads))
        head_dim = int(get("attention.key_length", dim // n_heads))
        if n_heads % n_kv_heads:
            raise ValueError(f"GGUF metadata: {n_heads} heads is not a multiple of {n_kv_heads} KV heads")
        if head_dim % 2:
            raise ValueError(f"GGUF metadata: head dimension {head_dim} is odd (RoPE rotates pairs)")
        return cls(
            dim=dim, n_layers=int(get("block_count")), n_heads=n_heads, n_kv_heads=n_kv_heads,
            head_dim=head_dim, ffn_dim=int(get("feed_forward_length")), vocab_size=vocab_size,
            max_seq_len=int(get("context_length", 2048)),
            rope_base=float(get("rope.freq_base", 10000.0)),
            rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)))


@dataclass
class LayerWeights:
    attn_norm: Vector
    wq: Matrix
    wk: Matrix
    wv: Matrix
    wo: Matrix
    ffn_norm: Vector
    w_gate: Matrix
    w_up: Matrix
    w_down: Matrix


class LlamaEngine(TransformerEngine["LlamaContext"]):
    architecture = "llama"

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        super().__init__()
        self.context_class = LlamaContext
        t = gguf_file.tensors
        md = gguf_file.metadata
        need = tensor_lookup(t)

        embd = need("token_embd.weight")
        vocab_size = int(embd.shape[0])
        cfg = LlamaConfig.from_metadata(md, vocab_size)
        self.config = cfg
        self.architecture = md["general.architecture"]
        self.vocab_size = vocab_size
        self.max_seq_len = cfg.max_seq_len
        d, q_dim, kv_dim = cfg.dim, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        self.token_embd = Matrix(embd, vocab_size, d, "token_embd.weight")
        self.output_norm = Vector(need("output_norm.weight"), d, "output_norm.weight")
        # Tied embeddings: no output.weight, the head reuses token_embd.
        self.output = (Matrix(t["output.weight"], vocab_size, d, "output.weight")
                       if "output.weight" in t else self.token_embd)
        self.layers: List[LayerWeights] = []
        for i in range(cfg.n_layers):
            def m(name: str, rows: int, cols: int, i: int = i) -> Matrix:
                return Matrix(need(f"blk.{i}.{name}.weight"), rows, cols, f"blk.{i}.{name}.weight")

            self.layers.append(LayerWeights(
                attn_norm=Vector(need(f"blk.{i}.attn_norm.weight"), d, f"blk.{i}.attn_norm.weight"),
                wq=m("attn_q", q_dim, d), wk=m("attn_k", kv_dim, d), wv=m("attn_v", kv_dim, d),
                wo=m("attn_output", d, q_dim),
                ffn_norm=Vector(need(f"blk.{i}.ffn_norm.weight"), d, f"blk.{i}.ffn_norm.weight"),
                w_gate=m("ffn_gate", cfg.ffn_dim, d), w_up=m("ffn_up", cfg.ffn_dim, d),
                w_down=m("ffn_down", d, cfg.ffn_dim)))
        self.n_threads = n_threads
        self.n_embd = d

    def decoder_for(self, ctx: "LlamaContext") -> Any:
        """The fused one-token step (csrc/llama_block.c) bound to ctx's cache."""
        cfg = self.config
        layers = [(L.attn_norm.data, L.ffn_norm.data, L.wq.as_tuple(), L.wk.as_tuple(),
                   L.wv.as_tuple(), L.wo.as_tuple(), L.w_gate.as_tuple(), L.w_up.as_tuple(),
                   L.w_down.as_tuple()) for L in self.layers]
        return K.LlamaDecoder(cfg, self.token_embd.as_tuple(), self.output.as_tuple(),
                              self.output_norm.data, layers, ctx.k_cache, ctx.v_cache, ctx.n_ctx)


class LlamaContext(TransformerContext[LlamaEngine]):
    def _new_scratch(self, n: int) -> "_Scratch":
        return _Scratch(self.engine, n)

    def _prefill(self, tokens: NDArray[Any], start: int, rows: Optional[RowOutputs] = None) -> None:
        eng = self.engine
        for c0 in range(0, len(tokens), N_BATCH):
            chunk = tokens[c0:c0 + N_BATCH]
            s = self._buffers(len(chunk))
            embd_rows = eng.token_embd.data[chunk]  # gathers the rows (a small copy)
            K.dequantize(embd_rows.reshape(-1), eng.token_embd.qtype, s.x.reshape(-1))
            for li, layer in enumerate(eng.layers):
                self._block(layer, li, s, start + c0)
            if rows is not None:
                self._head_rows(s, c0, len(chunk), rows)
        if rows is not None and rows.logits is not None and rows.logits.shape[0]:
            self.logits[:] = rows.logits[-1]
            return
        cfg = eng.config
        last = s.h1[len(chunk) - 1]
        K.rmsnorm(s.x[len(chunk) - 1], eng.output_norm.data, last, cfg.rms_eps)
        xq = np.empty(K.activation_bytes(eng.output.qtype, cfg.dim), np.uint8)
        K.quantize_activations(last, eng.output.qtype, xq)
        K.matvec_q(eng.output.data, eng.output.qtype, xq, self.logits)

    def _block(self, w: LayerWeights, li: int, s: "_Scratch", pos0: int) -> None:
        """One transformer block over the batch s.x (rows = positions pos0, pos0+1, ...)."""
        cfg = self.engine.config
        n, hd = s.n, cfg.head_dim
        K.rmsnorm(s.x, w.attn_norm.data, s.h1, cfg.rms_eps)
        s.mul(s.h1, (w.wq, s.q), (w.wk, s.k), (w.wv, s.v))  # one quantized input for q, k, v
        q = s.q.reshape(n, cfg.n_heads, hd)
        k = s.k.reshape(n, cfg.n_kv_heads, hd)
        K.rope(q, pos0, cfg.rope_base)
        K.rope(k, pos0, cfg.rope_base)
        K.kv_store(k, self.k_cache[li], pos0)
        K.kv_store(s.v.reshape(n, cfg.n_kv_heads, hd), self.v_cache[li], pos0)
        K.attention(q, self.k_cache[li], self.v_cache[li], pos0, s.att.reshape(q.shape))
        s.mul(s.att, (w.wo, s.h2))
        K.add(s.x, s.h2)
        K.rmsnorm(s.x, w.ffn_norm.data, s.h1, cfg.rms_eps)
        s.mul(s.h1, (w.w_gate, s.gate), (w.w_up, s.up))  # one quantized input for gate, up
        K.silu_mul(s.gate, s.up, s.gate)
        s.mul(s.gate, (w.w_down, s.h2))
        K.add(s.x, s.h2)


class _Scratch:
    """Activations of a batch of n positions, allocated once per batch size."""

    def __init__(self, engine: LlamaEngine, n: int) -> None:
        cfg = engine.config
        f = np.float32
        self.n = n
        self.x = np.zeros((n, cfg.dim), f)          # residual stream
        self.h1 = np.zeros((n, cfg.dim), f)         # normed input of a block half
        self.h2 = np.zeros((n, cfg.dim), f)         # output of a block half
        self.q = np.zeros((n, cfg.n_heads * cfg.head_dim), f)
        self.k = np.zeros((n, cfg.n_kv_heads * cfg.head_dim), f)
        self.v = np.zeros((n, cfg.n_kv_heads * cfg.head_dim), f)
        self.att = np.zeros((n, cfg.n_heads * cfg.head_dim), f)
        self.gate = np.zeros((n, cfg.ffn_dim), f)
        self.up = np.zeros((n, cfg.ffn_dim), f)
        self._act: Dict[Tuple[int, int], NDArray[Any]] = {}

    def mul(self, x: NDArray[Any], *pairs: Tuple[Matrix, NDArray[Any]]) -> None:
        """out = x W^T for each (W, out); x is quantized once per activation format."""
        done: Dict[int, NDArray[Any]] = {}
        for w, out in pairs:
            xq = done.get(w.act_type)
            if xq is None:
                key = (w.act_type, w.cols)
                xq = self._act.get(key)
                if xq is None:
                    xq = self._act[key] = np.zeros(K.activation_bytes(w.qtype, w.cols, self.n), np.uint8)
                K.quantize_activations(x, w.qtype, xq)
                done[w.act_type] = xq
            K.matmul_q(w.data, w.qtype, xq, out)

    def head(self, x: NDArray[Any], w: Matrix, out: NDArray[Any]) -> None:
        """out = x W^T for the rows of x (the output head over several positions)."""
        xq = np.empty(K.activation_bytes(w.qtype, w.cols, x.shape[0]), np.uint8)
        K.quantize_activations(x, w.qtype, xq)
        K.matmul_q(w.data, w.qtype, xq, out)


@register_variant("llama", "mistral")
def _llama(gguf_file: Any, n_threads: Optional[int] = None) -> LlamaEngine:
    return LlamaEngine(gguf_file, n_threads)
