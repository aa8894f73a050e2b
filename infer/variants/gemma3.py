"""Gemma 3 (text): GGUF architecture ``gemma3``.

    x = embed(token) * sqrt(dim)
    for each layer l:
        h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv
        q, k = rmsnorm(q, q_norm), rmsnorm(k, k_norm)     (per head)
        rope(q, k)                 (NEOX pairs; base 10000 on local layers, freq_base on global)
        store k, v
        a = attention(q, K, V) * scale   (grouped-query; local layers see the last `window` positions)
        x += rmsnorm(a Wo, post_attention_norm)
        h = rmsnorm(x, ffn_norm)
        x += rmsnorm((gelu(h Wg) * h Wu) Wd, post_ffw_norm)   (GeGLU, tanh GELU)
    logits = rmsnorm(x) Wembed                               (tied head, no soft-capping)

Every 6th layer (l % 6 == 5) is global, the others slide a window of
``gemma3.attention.sliding_window`` positions (as llama.cpp's
``set_swa_pattern(6)``).  The GGUF converter stores every norm weight with
Gemma's ``1 + w`` already added, so the norms are plain RMSNorm here.  The
query scale is ``query_pre_attn_scalar ** -0.5`` with llama.cpp's choice of
scalar: head_dim, except n_embd / n_head for the 62-layer (27B) model.

Weights are views into the memory-mapped file.  Each activation is quantized
once per format and shared by the matrices that read it (q/k/v; gate/up).  A
batch of tokens (prefill) runs `_block` below through the matrix-matrix kernels;
decoding one token runs the same computation as one C call (csrc/gemma3_block.c,
matrix-vector kernels, one thread-pool run per token), or `_block` through the
matrix-vector kernels when ``fused_decode`` is off.  The head runs for the last
position only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from numpy.typing import NDArray

from .. import kernels as K
from ..runtime import RowOutputs, register_variant
from .common import Matrix, TransformerContext, TransformerEngine, Vector, tensor_lookup

# Prefill processes at most this many tokens per pass (bounds the scratch memory).
N_BATCH = 512

#: llama.cpp's Gemma 3 defaults for what the GGUF file does not say
SWA_PATTERN = 6            # layers l with l % 6 == 5 attend globally
LOCAL_ROPE_BASE = 10000.0  # RoPE base of the sliding-window layers


@dataclass(frozen=True)
class Gemma3Config:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    max_seq_len: int
    rms_eps: float
    #: RoPE base and frequency scale of global and of sliding-window layers
    rope_base: float
    rope_scale: float
    rope_base_local: float
    #: attention window of the local layers (positions, including the current one)
    window: int
    #: per layer: True when the layer attends globally
    global_layers: Tuple[bool, ...]
    #: multiplies q.k in attention
    attn_scale: float

    @classmethod
    def from_metadata(cls, md: Dict[str, Any], vocab_size: int) -> "Gemma3Config":
        arch = md["general.architecture"]

        def get(key: str, default: Any = None) -> Any:
            full = f"{arch}.{key}"
            if full in md:
                return md[full]
            if default is None:
                raise ValueError(f"GGUF metadata: missing {full}")
            return default

        dim = int(get("embedding_length"))
        n_layers = int(get("block_count"))
        n_heads = int(get("attention.head_count"))
        n_kv_heads = int(get("attention.head_count_kv", n_heads))
        head_dim = int(get("attention.key_length", dim // n_heads))
        if int(get("attention.value_length", head_dim)) != head_dim:
            raise ValueError("GGUF metadata: key and value head sizes differ")
        if n_heads % n_kv_heads:
            raise ValueError(f"GGUF metadata: {n_heads} heads is not a multiple of {n_kv_heads} KV heads")
        if head_dim % 2:
            raise ValueError(f"GGUF metadata: head dimension {head_dim} is odd (RoPE rotates pairs)")

        # Which layers slide a window: an explicit per-layer list or period if the
        # file has one, else Gemma 3's 5 local : 1 global.
        pattern = get("attention.sliding_window_pattern", SWA_PATTERN)
        if isinstance(pattern, (list, tuple, np.ndarray)):
            if len(pattern) != n_layers:
                raise ValueError(f"GGUF metadata: sliding_window_pattern has {len(pattern)} "
                                 f"entries for {n_layers} layers")
            global_layers = tuple(not bool(p) for p in pattern)
        else:
            period = int(pattern)
            global_layers = tuple(period <= 0 or i % period == period - 1 for i in range(n_layers))

        # Linear RoPE scaling (the 4B-27B models) applies to the global layers only.
        rope_scale = 1.0
        if str(get("rope.scaling.type", "none")) == "linear":
            rope_scale = 1.0 / float(get("rope.scaling.factor", 1.0))

        # GGUF files do not carry query_pre_attn_scalar; llama.cpp derives it from the
        # model size (head_dim, or dim / n_heads for the 62-layer 27B).  The key is
        # read in case a converter ever writes it.
        query_scalar = float(get("attention.query_pre_attn_scalar",
                                 dim / n_heads if n_layers == 62 else head_dim))
        return cls(
            dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
            head_dim=head_dim, ffn_dim=int(get("feed_forward_length")), vocab_size=vocab_size,
            max_seq_len=int(get("context_length", 8192)),
            rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
            rope_base=float(get("rope.freq_base", 1000000.0)), rope_scale=rope_scale,
            rope_base_local=float(get("rope.freq_base_swa", LOCAL_ROPE_BASE)),
            window=int(get("attention.sliding_window")), global_layers=global_layers,
            attn_scale=1.0 / math.sqrt(query_scalar))

    def rope_for(self, layer: int) -> Tuple[float, float]:
        """(freq_base, freq_scale) of a layer's RoPE."""
        if self.global_layers[layer]:
            return self.rope_base, self.rope_scale
        return self.rope_base_local, 1.0

    def window_for(self, layer: int) -> int:
        """The attention kernel's ``window`` of a layer (0: attend to every position)."""
        return 0 if self.global_layers[layer] else self.window


@dataclass
class Gemma3Layer:
    attn_norm: Vector
    wq: Matrix
    wk: Matrix
    wv: Matrix
    q_norm: Vector
    k_norm: Vector
    wo: Matrix
    post_attn_norm: Vector
    ffn_norm: Vector
    w_gate: Matrix
    w_up: Matrix
    w_down: Matrix
    post_ffw_norm: Vector


class Gemma3Engine(TransformerEngine["Gemma3Context"]):
    architecture = "gemma3"

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        super().__init__()
        self.context_class = Gemma3Context
        t = gguf_file.tensors
        md = gguf_file.metadata
        need = tensor_lookup(t)

        embd = need("token_embd.weight")
        vocab_size = int(embd.shape[0])
        cfg = Gemma3Config.from_metadata(md, vocab_size)
        self.config = cfg
        self.vocab_size = vocab_size
        self.max_seq_len = cfg.max_seq_len
        d, hd = cfg.dim, cfg.head_dim
        q_dim, kv_dim = cfg.n_heads * hd, cfg.n_kv_heads * hd
        self.token_embd = Matrix(embd, vocab_size, d, "token_embd.weight")
        self.embd_scale = math.sqrt(d)
        self.output_norm = Vector(need("output_norm.weight"), d, "output_norm.weight")
        self.output = (Matrix(t["output.weight"], vocab_size, d, "output.weight")
                       if "output.weight" in t else self.token_embd)
        self.layers: List[Gemma3Layer] = []
        for i in range(cfg.n_layers):
            def m(name: str, rows: int, cols: int, i: int = i) -> Matrix:
                return Matrix(need(f"blk.{i}.{name}.weight"), rows, cols, f"blk.{i}.{name}.weight")

            def v(name: str, n: int, i: int = i) -> Vector:
                return Vector(need(f"blk.{i}.{name}.weight"), n, f"blk.{i}.{name}.weight")

            self.layers.append(Gemma3Layer(
                attn_norm=v("attn_norm", d),
                wq=m("attn_q", q_dim, d), wk=m("attn_k", kv_dim, d), wv=m("attn_v", kv_dim, d),
                q_norm=v("attn_q_norm", hd), k_norm=v("attn_k_norm", hd),
                wo=m("attn_output", d, q_dim), post_attn_norm=v("post_attention_norm", d),
                ffn_norm=v("ffn_norm", d),
                w_gate=m("ffn_gate", cfg.ffn_dim, d), w_up=m("ffn_up", cfg.ffn_dim, d),
                w_down=m("ffn_down", d, cfg.ffn_dim), post_ffw_norm=v("post_ffw_norm", d)))
        self.n_threads = n_threads
        self.n_embd = d

    def decoder_for(self, ctx: "Gemma3Context") -> Any:
        """The fused one-token step (csrc/gemma3_block.c) bound to ctx's cache."""
        cfg = self.config
        layers = []
        for i, L in enumerate(self.layers):
            base, scale = cfg.rope_for(i)
            layers.append((L.attn_norm.data, L.q_norm.data, L.k_norm.data, L.post_attn_norm.data,
                           L.ffn_norm.data, L.post_ffw_norm.data, L.wq.as_tuple(), L.wk.as_tuple(),
                           L.wv.as_tuple(), L.wo.as_tuple(), L.w_gate.as_tuple(), L.w_up.as_tuple(),
                           L.w_down.as_tuple(), base, scale, cfg.window_for(i)))
        return K.Gemma3Decoder(cfg, self.embd_scale, self.token_embd.as_tuple(),
                               self.output.as_tuple(), self.output_norm.data, layers,
                               ctx.k_cache, ctx.v_cache, ctx.n_ctx)


class Gemma3Context(TransformerContext[Gemma3Engine]):
    def _new_scratch(self, n: int) -> "_Scratch":
        return _Scratch(self.engine, n)

    def _prefill(self, tokens: NDArray[Any], start: int, rows: Optional[RowOutputs] = None) -> None:
        eng = self.engine
        cfg = eng.config
        for c0 in range(0, len(tokens), N_BATCH):
            chunk = tokens[c0:c0 + N_BATCH]
            s = self._buffers(len(chunk))
            for j, tok in enumerate(chunk):
                K.dequantize(eng.token_embd.data[tok], eng.token_embd.qtype, s.x[j])
            K.scale(s.x, eng.embd_scale)
            for li, layer in enumerate(eng.layers):
                self._block(layer, li, s, start + c0)
            if rows is not None:
                self._head_rows(s, c0, len(chunk), rows)
        if rows is not None and rows.logits is not None and rows.logits.shape[0]:
            self.logits[:] = rows.logits[-1]
            return
        last = s.x[len(chunk) - 1:len(chunk)]
        h = s.h1[:1]
        K.rmsnorm(last, eng.output_norm.data, h, cfg.rms_eps)
        s.mul_one(h[0], eng.output, self.logits)

    def _block(self, w: Gemma3Layer, li: int, s: "_Scratch", pos0: int) -> None:
        """One transformer block over the batch s.x (rows = positions pos0, pos0+1, ...)."""
        cfg = self.engine.config
        n, hd = s.n, cfg.head_dim
        base, freq_scale = cfg.rope_for(li)
        K.rmsnorm(s.x, w.attn_norm.data, s.h1, cfg.rms_eps)
        s.mul(s.h1, (w.wq, s.q), (w.wk, s.k), (w.wv, s.v))  # one quantized input for q, k, v
        q = s.q.reshape(n, cfg.n_heads, hd)
        k = s.k.reshape(n, cfg.n_kv_heads, hd)
        K.rmsnorm(q, w.q_norm.data, q, cfg.rms_eps)  # per head
        K.rmsnorm(k, w.k_norm.data, k, cfg.rms_eps)
        K.rope(q, pos0, base, neox=True, freq_scale=freq_scale)
        K.rope(k, pos0, base, neox=True, freq_scale=freq_scale)
        K.kv_store(k, self.k_cache[li], pos0)
        K.kv_store(s.v.reshape(n, cfg.n_kv_heads, hd), self.v_cache[li], pos0)
        K.attention(q, self.k_cache[li], self.v_cache[li], pos0, s.att.reshape(q.shape),
                    scale=cfg.attn_scale, window=cfg.window_for(li))
        s.mul(s.att, (w.wo, s.h2))
        K.rmsnorm(s.h2, w.post_attn_norm.data, s.h2, cfg.rms_eps)
        K.add(s.x, s.h2)
        K.rmsnorm(s.x, w.ffn_norm.data, s.h1, cfg.rms_eps)
        s.mul(s.h1, (w.w_gate, s.gate), (w.w_up, s.up))  # one quantized input for gate, up
        K.gelu_mul(s.gate, s.up, s.gate)
        s.mul(s.gate, (w.w_down, s.h2))
        K.rmsnorm(s.h2, w.post_ffw_norm.data, s.h2, cfg.rms_eps)
        K.add(s.x, s.h2)


class _Scratch:
    """Activations of a batch of n positions, allocated once per batch size."""

    def __init__(self, engine: Gemma3Engine, n: int) -> None:
        cfg = engine.config
        f = np.float32
        q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        self.n = n
        self.x = np.zeros((n, cfg.dim), f)          # residual stream
        self.h1 = np.zeros((n, cfg.dim), f)         # normed input of a block half
        self.h2 = np.zeros((n, cfg.dim), f)         # output of a block half
        self.q = np.zeros((n, q_dim), f)
        self.k = np.zeros((n, kv_dim), f)
        self.v = np.zeros((n, kv_dim), f)
        self.att = np.zeros((n, q_dim), f)
        self.gate = np.zeros((n, cfg.ffn_dim), f)
        self.up = np.zeros((n, cfg.ffn_dim), f)
        self._act: Dict[Tuple[int, int, int], NDArray[Any]] = {}

    def _quantized(self, x: NDArray[Any], w: Matrix, rows: int) -> NDArray[Any]:
        key = (w.act_type, w.cols, rows)
        xq = self._act.get(key)
        if xq is None:
            xq = self._act[key] = np.zeros(K.activation_bytes(w.qtype, w.cols, rows), np.uint8)
        return K.quantize_activations(x, w.qtype, xq)

    def mul(self, x: NDArray[Any], *pairs: Tuple[Matrix, NDArray[Any]]) -> None:
        """out = x W^T for each (W, out); x is quantized once per activation format.
        One row goes through matvec, several through matmul."""
        done: Dict[int, NDArray[Any]] = {}
        for w, out in pairs:
            xq = done.get(w.act_type)
            if xq is None:
                xq = done[w.act_type] = self._quantized(x, w, self.n)
            if self.n == 1:
                K.matvec_q(w.data, w.qtype, xq, out[0])
            else:
                K.matmul_q(w.data, w.qtype, xq, out)

    def head(self, x: NDArray[Any], w: Matrix, out: NDArray[Any]) -> None:
        """out = x W^T for the rows of x (the output head over several positions)."""
        xq = self._quantized(x, w, x.shape[0])
        if x.shape[0] == 1:
            K.matvec_q(w.data, w.qtype, xq, out[0])
        else:
            K.matmul_q(w.data, w.qtype, xq, out)

    def mul_one(self, x: NDArray[Any], w: Matrix, out: NDArray[Any]) -> None:
        """out = W x for one float32 vector x (the output head)."""
        K.matvec_q(w.data, w.qtype, self._quantized(x, w, 1), out)


@register_variant("gemma3")
def _gemma3(gguf_file: Any, n_threads: Optional[int] = None) -> Gemma3Engine:
    return Gemma3Engine(gguf_file, n_threads)
