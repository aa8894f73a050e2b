"""A float64 numpy forward pass of a GGUF Llama-architecture model.

Written from the model's definition only: it shares no code with infer (weights
come from the `gguf` package's reader and numpy dequantizers).  It is slow and
simple on purpose; tests compare the variant's logits against it.

Facts it relies on:
* GGUF stores a weight of shape (rows=out, cols=in); the reader reports the
  numpy shape rows-first after dequantization.
* The converter permutes the Q and K rows so that RoPE rotates *adjacent* pairs
  (2i, 2i+1) of each head ("normal" RoPE, as llama2.c does).
* output.weight missing means the head is tied to token_embd.weight.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader
from gguf.quants import dequantize, quantize

# Weight formats whose dot products take Q8_0-style activations (Q8_1 has the same
# values for Q4_1/Q5_1) and those that take Q8_K (ggml's type_traits_cpu vec_dot_type);
# F32/F16/BF16 weights take F32.
_Q8_0_PAIRED = {QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.IQ4_NL, QT.MXFP4}
_Q8_K_PAIRED = {QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ4_XS,
                QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S,
                QT.TQ1_0, QT.TQ2_0}


def round_activations(x: np.ndarray, weight_type) -> np.ndarray:
    """x rounded through the 8-bit activation format ggml pairs with weight_type.

    Q8_0 goes through the gguf package's own quantizer; Q8_K (blocks of 256,
    d = max/-127 in f32, q = min(127, nearest int)) is written out here."""
    x = np.asarray(x, np.float32)
    if weight_type in _Q8_0_PAIRED:
        q = quantize(x.reshape(-1, x.shape[-1]), QT.Q8_0)
        return dequantize(q, QT.Q8_0).reshape(x.shape).astype(np.float64)
    if weight_type in _Q8_K_PAIRED:
        b = x.reshape(-1, 256)
        big = np.take_along_axis(b, np.abs(b).argmax(axis=1)[:, None], axis=1)
        with np.errstate(divide="ignore"):
            iscale = np.where(big != 0, np.float32(-127.0) / big, 0).astype(np.float32)
        q = np.minimum(127, np.rint(iscale * b))
        d = np.where(iscale != 0, 1.0 / np.where(iscale != 0, iscale, 1), 0)
        return (q * d).reshape(x.shape).astype(np.float64)
    return x.astype(np.float64)


def _field(reader: GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class NumpyLlama:
    def __init__(self, path: str) -> None:
        r = GGUFReader(path)
        arch = _field(r, "general.architecture")
        self.n_layer = int(_field(r, f"{arch}.block_count"))
        self.dim = int(_field(r, f"{arch}.embedding_length"))
        self.n_head = int(_field(r, f"{arch}.attention.head_count"))
        self.n_kv_head = int(_field(r, f"{arch}.attention.head_count_kv", self.n_head))
        self.head_dim = self.dim // self.n_head
        self.rope_base = float(_field(r, f"{arch}.rope.freq_base", 10000.0))
        self.eps = float(_field(r, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5))
        tensors = {t.name: t for t in r.tensors}
        self.types = {name: QT(t.tensor_type) for name, t in tensors.items()}
        self.types.setdefault("output.weight", self.types["token_embd.weight"])

        def w(name):
            t = tensors[name]
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            return a.reshape([int(s) for s in reversed(t.shape)]) if a.ndim > 1 else a.reshape(-1)

        self.embed = w("token_embd.weight")
        self.out_norm = w("output_norm.weight")
        self.head = w("output.weight") if "output.weight" in tensors else self.embed
        self.layers = []
        for i in range(self.n_layer):
            p = f"blk.{i}."
            self.layers.append({k: w(p + k + ".weight") for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")})

    def _rmsnorm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def _rope(self, x, positions):
        # x: (T, heads, head_dim); rotate pairs (2i, 2i+1) by pos * base^(-2i/head_dim)
        hd = x.shape[-1]
        inv_freq = self.rope_base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        ang = positions[:, None].astype(np.float64) * inv_freq[None, :]  # (T, hd/2)
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def forward(self, tokens, act_quant: bool = False) -> np.ndarray:
        """Logits (T, vocab) of every position of ``tokens`` starting at position 0.

        With ``act_quant`` every product's input is first rounded through the 8-bit
        activation format its weight pairs with, and K/V through float16 (an F16
        KV cache), as ggml-style engines compute: the exact numerics they aim at."""
        tokens = np.asarray(tokens, dtype=np.int64)
        T, hd = len(tokens), self.head_dim

        def mm(h, i, name):
            key = f"blk.{i}.{name}.weight" if i is not None else name
            if act_quant:
                h = round_activations(h, self.types[key])
            w = self.layers[i][name] if i is not None else self.head
            return h @ w.T

        def cache(a):
            return a.astype(np.float16).astype(np.float64) if act_quant else a

        group = self.n_head // self.n_kv_head
        pos = np.arange(T)
        mask = np.triu(np.full((T, T), -np.inf), k=1)
        x = self.embed[tokens].copy()
        for i, L in enumerate(self.layers):
            h = self._rmsnorm(x, L["attn_norm"])
            q = self._rope(mm(h, i, "attn_q").reshape(T, self.n_head, hd), pos)
            k = cache(self._rope(mm(h, i, "attn_k").reshape(T, self.n_kv_head, hd), pos))
            v = cache(mm(h, i, "attn_v").reshape(T, self.n_kv_head, hd))
            att = np.empty((T, self.n_head, hd))
            for head in range(self.n_head):
                kv = head // group
                s = q[:, head, :] @ k[:, kv, :].T / np.sqrt(hd) + mask
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, head, :] = s @ v[:, kv, :]
            x = x + mm(att.reshape(T, -1), i, "attn_output")
            h = self._rmsnorm(x, L["ffn_norm"])
            g = mm(h, i, "ffn_gate")
            u = mm(h, i, "ffn_up")
            x = x + mm((g / (1.0 + np.exp(-g))) * u, i, "ffn_down")
        return mm(self._rmsnorm(x, self.out_norm), None, "output.weight")


_SHARED: dict = {}


def shared(path) -> NumpyLlama:
    """One NumpyLlama of ``path`` for the whole test session (the last file asked for):
    building one reads the file with gguf's reader and dequantizes every weight to
    float64 (seconds, ~1 GB for SmolLM2), and several test modules (test_llama,
    test_perplexity, test_embeddings) compare against the same model.  Forward passes
    leave it unchanged."""
    key = str(path)
    if key not in _SHARED:
        _SHARED.clear()
        _SHARED[key] = NumpyLlama(key)
    return _SHARED[key]
