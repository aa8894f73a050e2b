"""Float64 numpy forward pass of GGUF ``bert`` / ``nomic-bert`` encoders, written from
llama.cpp's src/models/bert.cpp and build_pooling (src/llama-graph.cpp), sharing no
code with infer: the weights come through the `gguf` package (gguf_file.read).

GELU is the exact erf form (HF BERT's), not ggml's tanh approximation: the two differ
by at most ~1e-3 of a unit, well inside the tolerance of the tests; RoPE is NEOX
(pairs i, i + head_dim/2) over every position, theta = base ** (-2i / head_dim)."""
from __future__ import annotations

import math

import numpy as np

from .gguf_file import read


def _layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _gelu(x):
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def _rope_neox(x, base):
    """x: (n, heads, hd), position p = row index."""
    n, _, hd = x.shape
    half = hd // 2
    theta = base ** (-np.arange(half) * 2.0 / hd)
    ang = np.arange(n)[:, None] * theta[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


class Encoder:
    def __init__(self, path: str) -> None:
        self.meta, self.w = read(path)
        arch = self.meta["general.architecture"]
        self.arch = arch
        self.heads = int(self.meta[f"{arch}.attention.head_count"])
        self.layers = int(self.meta[f"{arch}.block_count"])
        self.eps = float(self.meta[f"{arch}.attention.layer_norm_epsilon"])
        self.pooling = int(self.meta.get(f"{arch}.pooling_type", 0))
        self.base = float(self.meta.get(f"{arch}.rope.freq_base", 10000.0))

    def hidden(self, tokens):
        """Final hidden states (n, dim) of the token ids."""
        w = self.w
        tokens = np.asarray(tokens)
        n = len(tokens)
        x = w["token_embd.weight"][tokens]
        if "token_types.weight" in w:
            x = x + w["token_types.weight"][0]
        if "position_embd.weight" in w:
            x = x + w["position_embd.weight"][:n]
        x = _layernorm(x, w["token_embd_norm.weight"], w["token_embd_norm.bias"], self.eps)
        d = x.shape[1]
        hd = d // self.heads
        for i in range(self.layers):
            p = f"blk.{i}."

            def lin(name, inp):
                y = inp @ w[p + name + ".weight"].T
                return y + w[p + name + ".bias"] if p + name + ".bias" in w else y

            if p + "attn_qkv.weight" in w:
                qkv = lin("attn_qkv", x)
                q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
            else:
                q, k, v = lin("attn_q", x), lin("attn_k", x), lin("attn_v", x)
            q, k, v = (t.reshape(n, self.heads, hd) for t in (q, k, v))
            if self.arch == "nomic-bert":
                q, k = _rope_neox(q, self.base), _rope_neox(k, self.base)
            s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            att = np.einsum("hqk,khd->qhd", s, v).reshape(n, d)
            cur = _layernorm(lin("attn_output", att) + x, w[p + "attn_output_norm.weight"],
                             w[p + "attn_output_norm.bias"], self.eps)
            if p + "ffn_gate.weight" in w:
                g = lin("ffn_gate", cur)
                h = g / (1.0 + np.exp(-g)) * lin("ffn_up", cur)
            else:
                h = _gelu(lin("ffn_up", cur))
            x = _layernorm(lin("ffn_down", h) + cur, w[p + "layer_output_norm.weight"],
                           w[p + "layer_output_norm.bias"], self.eps)
        return x

    def pooled(self, tokens):
        """llama.cpp's pooled output (not normalised): mean / cls / last / rank scores."""
        h = self.hidden(tokens)
        if self.pooling == 1:
            return h.mean(0)
        if self.pooling == 2:
            return h[0]
        if self.pooling == 3:
            return h[-1]
        if self.pooling == 4 or (self.pooling == 0 and ("cls.output.weight" in self.w or "cls.weight" in self.w)):
            # the head reads the first token, or the mean with classifier.pooling_type 1 (MEAN)
            cur = h.mean(0) if self.meta.get(f"{self.arch}.classifier.pooling_type") == 1 else h[0]
            w = self.w
            if "cls.weight" in w:
                cur = np.tanh(cur @ w["cls.weight"].T + w.get("cls.bias", 0.0))
            if "cls.output.weight" in w:
                cur = cur @ w["cls.output.weight"].T + w.get("cls.output.bias", 0.0)
            return cur
        return h
