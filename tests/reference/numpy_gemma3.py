"""A float64 numpy forward pass of a GGUF Gemma 3 (text) model.

Written from the model's definition only: no infer kernel or variant code.  The
raw tensor bytes come from infer's GGUF reader (a plain file map; gguf's own
GGUFReader spends 8-20 s on Gemma's 262,144-token vocabulary), and every weight
is decoded by the `gguf` package's numpy dequantizers.  Slow and simple on
purpose; tests compare the variant's logits against it.

Facts it relies on (checked against llama.cpp's gemma3 graph and hparams):
* x0 = embedding * sqrt(n_embd); the output head is the embedding (tied).
* Every RMSNorm multiplies by the stored weight: the converter already added
  Gemma's "1 +".  q and k get a per-head RMSNorm before RoPE.
* RoPE is NEOX style: element i of a head pairs with element i + head_dim/2.
* Layer l attends globally when (l + 1) % 6 == 0 (RoPE base: rope.freq_base);
  the others see only the last `sliding_window` positions (RoPE base 10000).
* q.k is scaled by head_dim ** -0.5 (query_pre_attn_scalar = head_dim).
* Block: x += norm(attn(norm(x)) Wo); x += norm(ffn(norm(x))) with the
  post-attention / post-FFW norms; ffn = (gelu_tanh(h Wg) * h Wu) Wd.
* No final logit soft-capping in Gemma 3.

``hidden(..., act_quant=True)`` / ``head(..., act_quant=True)`` also model what
ggml's quantized kernels do to activations (each product's input rounded to
Q8_0 or Q8_K, K/V stored as F16), written from ggml's quantizer definitions;
tests use it to show how far that rounding alone moves this model's logits.
"""
from __future__ import annotations

import contextlib
import math

import gguf
import numpy as np
from gguf.quants import dequantize

from infer.gguf import GGUFFile

HEAD_CHUNK = 16384  # embedding rows decoded at a time for the output head


def single_threaded_blas():
    """BLAS on one thread while the reference runs: on this busy 2-core machine
    OpenBLAS's spinning threads make a (16 x 640) @ (640 x 2048) product ~20x slower."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


#: ggml type ids of the k-quants (their dot products take Q8_K activations; the
#: 32-element formats take Q8_0)
K_QUANTS = {10, 11, 12, 13, 14, 15}


def round_activations(x, weight_type: int) -> np.ndarray:
    """x (T, n) rounded through the activation format ggml pairs with weight_type:
    Q8_0 (blocks of 32, d = amax/127 stored as f16) for Q4_0..Q8_0, Q8_K (blocks of
    256, d = max/-127 in f32, q clamped to 127) for the k-quants; F32/F16 untouched."""
    if weight_type in (0, 1):
        return x
    x = np.asarray(x, np.float32)
    if weight_type in K_QUANTS:
        b = x.reshape(-1, 256)
        big = np.take_along_axis(b, np.abs(b).argmax(axis=1)[:, None], axis=1)  # signed max
        with np.errstate(divide="ignore"):
            iscale = np.where(big != 0, np.float32(-127.0) / big, 0).astype(np.float32)
        q = np.minimum(127, np.rint(iscale * b))
        d = np.where(iscale != 0, 1.0 / np.where(iscale != 0, iscale, 1), 0)
        return (q * d).reshape(x.shape).astype(np.float64)
    b = x.reshape(-1, 32)
    d = np.abs(b).max(axis=1, keepdims=True) / np.float32(127.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d > 0, np.rint(b / d), 0)
    return (q * d.astype(np.float16).astype(np.float64)).reshape(x.shape)


class NumpyGemma3:
    def __init__(self, path: str) -> None:
        self.file = GGUFFile(path)
        md = self.file.metadata
        arch = md["general.architecture"]
        self.n_layer = int(md[f"{arch}.block_count"])
        self.dim = int(md[f"{arch}.embedding_length"])
        self.n_head = int(md[f"{arch}.attention.head_count"])
        self.n_kv_head = int(md[f"{arch}.attention.head_count_kv"])
        self.head_dim = int(md[f"{arch}.attention.key_length"])
        self.eps = float(md[f"{arch}.attention.layer_norm_rms_epsilon"])
        self.rope_global = float(md[f"{arch}.rope.freq_base"])
        self.rope_local = 10000.0
        self.window = int(md[f"{arch}.attention.sliding_window"])
        self.tensors = self.file.tensors
        # Dequantized weights kept as float32 (the dequantizers' exact output);
        # products upcast them to float64.
        self.layers = []
        for i in range(self.n_layer):
            self.layers.append({k: self._weight(f"blk.{i}.{k}.weight") for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm",
                "attn_output", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up",
                "ffn_down", "post_ffw_norm")})
        self.out_norm = self._weight("output_norm.weight")

    def _raw(self, name: str):
        t = self.tensors[name]
        rows = int(t.shape[0])
        return t.data.reshape(rows, -1), gguf.GGMLQuantizationType(int(t.dtype))

    def _weight(self, name: str) -> np.ndarray:
        raw, qtype = self._raw(name)
        return dequantize(np.asarray(raw), qtype).reshape([int(s) for s in self.tensors[name].shape])

    def _mm(self, h, w, name, act_quant):
        """h @ w.T in float64 (w is kept as float32; mixed dtypes would miss BLAS).
        With act_quant, h is first rounded the way ggml quantizes an activation
        for the dot product with weight ``name``'s format."""
        if act_quant:
            h = round_activations(h, int(self.tensors[name].dtype))
        return h @ w.astype(np.float64).T

    def _rmsnorm(self, x, weight):
        x = np.asarray(x, np.float64)
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    @staticmethod
    def _rope_neox(x, positions, base):
        # x: (T, heads, hd); element i pairs with i + hd/2, angle pos * base^(-2i/hd)
        hd = x.shape[-1]
        half = hd // 2
        inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / hd)
        ang = positions[:, None].astype(np.float64) * inv_freq[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    @staticmethod
    def _gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    def hidden(self, tokens, window=None, act_quant=False) -> np.ndarray:
        """The final-normed hidden states (T, dim) of ``tokens`` from position 0;
        ``window`` overrides the file's sliding window (tests use a short one);
        ``act_quant`` rounds every product's input as ggml's quantized kernels
        do, and K/V to F16 as the cache stores them."""
        window = self.window if window is None else int(window)
        aq = act_quant

        def mm(h, key):
            return self._mm(h, L[key], f"blk.{i}.{key}.weight", aq)

        tokens = np.asarray(tokens, dtype=np.int64)
        T, hd = len(tokens), self.head_dim
        group = self.n_head // self.n_kv_head
        pos = np.arange(T)
        raw, qtype = self._raw("token_embd.weight")
        x = dequantize(np.asarray(raw[tokens]), qtype).astype(np.float64) * math.sqrt(self.dim)
        causal = pos[None, :] <= pos[:, None]                       # [query, key]
        local = causal & (pos[None, :] > pos[:, None] - window)
        for i, L in enumerate(self.layers):
            is_global = (i + 1) % 6 == 0
            base, visible = (self.rope_global, causal) if is_global else (self.rope_local, local)
            h = self._rmsnorm(x, L["attn_norm"])
            q = self._rmsnorm(mm(h, "attn_q").reshape(T, self.n_head, hd), L["attn_q_norm"])
            k = self._rmsnorm(mm(h, "attn_k").reshape(T, self.n_kv_head, hd), L["attn_k_norm"])
            v = mm(h, "attn_v").reshape(T, self.n_kv_head, hd)
            q, k = self._rope_neox(q, pos, base), self._rope_neox(k, pos, base)
            if act_quant:  # the KV cache holds F16
                k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
            att = np.empty((T, self.n_head, hd))
            for head in range(self.n_head):
                kv = head // group
                s = q[:, head, :] @ k[:, kv, :].T / math.sqrt(hd)
                s = np.where(visible, s, -np.inf)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, head, :] = s @ v[:, kv, :]
            x = x + self._rmsnorm(mm(att.reshape(T, -1), "attn_output"), L["post_attention_norm"])
            h = self._rmsnorm(x, L["ffn_norm"])
            f = mm(self._gelu_tanh(mm(h, "ffn_gate")) * mm(h, "ffn_up"), "ffn_down")
            x = x + self._rmsnorm(f, L["post_ffw_norm"])
        return self._rmsnorm(x, self.out_norm)

    @property
    def head_name(self) -> str:
        return "output.weight" if "output.weight" in self.tensors else "token_embd.weight"

    def head(self, h: np.ndarray, act_quant=False) -> np.ndarray:
        """Logits (T, vocab) of final hidden states h (T, dim): h . embedding rows,
        decoding the tied embedding a chunk at a time (it is 262,144 x dim);
        act_quant: h rounded as for a quantized dot product (see hidden)."""
        name = self.head_name
        raw, qtype = self._raw(name)
        out = np.empty((h.shape[0], raw.shape[0]))
        for r0 in range(0, raw.shape[0], HEAD_CHUNK):
            w = dequantize(np.asarray(raw[r0:r0 + HEAD_CHUNK]), qtype)
            out[:, r0:r0 + w.shape[0]] = self._mm(h, w, name, act_quant)
        return out

    def forward(self, tokens) -> np.ndarray:
        """Logits (T, vocab) of every position of ``tokens`` starting at position 0."""
        with single_threaded_blas():
            return self.head(self.hidden(tokens))

    def forward_many(self, sequences) -> list:
        """forward() of several sequences, decoding the output head only once."""
        with single_threaded_blas():
            hs = [self.hidden(s) for s in sequences]
            logits = self.head(np.concatenate(hs))
        out, r = [], 0
        for h in hs:
            out.append(logits[r:r + len(h)])
            r += len(h)
        return out

    def close(self) -> None:
        self.layers = []
        self.tensors = {}
        self.file.close()
