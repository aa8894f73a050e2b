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
from gguf import GGUFReader
from gguf.quants import dequantize


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

    def forward(self, tokens) -> np.ndarray:
        """Logits (T, vocab) of every position of ``tokens`` starting at position 0."""
        tokens = np.asarray(tokens, dtype=np.int64)
        T, hd = len(tokens), self.head_dim
        group = self.n_head // self.n_kv_head
        pos = np.arange(T)
        mask = np.triu(np.full((T, T), -np.inf), k=1)
        x = self.embed[tokens].copy()
        for L in self.layers:
            h = self._rmsnorm(x, L["attn_norm"])
            q = self._rope((h @ L["attn_q"].T).reshape(T, self.n_head, hd), pos)
            k = self._rope((h @ L["attn_k"].T).reshape(T, self.n_kv_head, hd), pos)
            v = (h @ L["attn_v"].T).reshape(T, self.n_kv_head, hd)
            att = np.empty((T, self.n_head, hd))
            for head in range(self.n_head):
                kv = head // group
                s = q[:, head, :] @ k[:, kv, :].T / np.sqrt(hd) + mask
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, head, :] = s @ v[:, kv, :]
            x = x + att.reshape(T, -1) @ L["attn_output"].T
            h = self._rmsnorm(x, L["ffn_norm"])
            g = h @ L["ffn_gate"].T
            u = h @ L["ffn_up"].T
            x = x + ((g / (1.0 + np.exp(-g))) * u) @ L["ffn_down"].T
        return self._rmsnorm(x, self.out_norm) @ self.head.T
