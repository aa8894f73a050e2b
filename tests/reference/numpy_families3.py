"""Float64 numpy forward passes of tiny_models.FAMILIES3's families, written from the
HF modelling code (PhiForCausalLM, Starcoder2ForCausalLM, NemotronHForCausalLM) and
llama.cpp's src/models/<arch>.cpp for what the GGUF files hold, sharing no code with
infer; importing this module adds them to numpy_families.FAMILIES.

phi2:       h = layernorm(x) (weight, bias, attention.layer_norm_epsilon);
            x = x + attn(h) + mlp(h);  q/k/v/o biases (one attn_qkv and its bias in older
            conversions); NEOX RoPE over rope.dimension_count elements; q scaled by
            1/sqrt(head_dim) before q.k as llama.cpp does; mlp(h) = gelu_tanh(h Wup + b) Wdown + b;
            logits = layernorm(x) @ output.T + output.bias.
starcoder2: x += attn(layernorm(x)); x += mlp(layernorm(x)); q/k/v/o and mlp biases, NEOX
            RoPE over the whole head, GQA.
"""
from __future__ import annotations

import math

import numpy as np

from . import numpy_families as nf


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class _LayerNormBiased(nf.Transformer):
    neox = True

    def layernorm(self, x, name):
        mu = x.mean(axis=-1, keepdims=True)
        c = x - mu
        return c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + self.eps) * self.t[name + ".weight"] \
            + self.t[name + ".bias"]

    def qkv(self, i, h):
        p = f"blk.{i}."
        if p + "attn_qkv.weight" not in self.t:
            self.qkv_bias = p + "attn_q.bias" in self.t
            return super().qkv(i, h)
        qkv = h @ self.t[p + "attn_qkv.weight"].T + self.t[p + "attn_qkv.bias"]
        q_dim, kv_dim = self.n_head * self.head_dim, self.n_kv_head * self.head_dim
        return qkv[:, :q_dim], qkv[:, q_dim:q_dim + kv_dim], qkv[:, q_dim + kv_dim:]

    def attention(self, i, h, pos):
        return super().attention(i, h, pos) + self.t[f"blk.{i}.attn_output.bias"]

    def ffn(self, i, h):
        p = f"blk.{i}."
        u = h @ self.t[p + "ffn_up.weight"].T + self.t[p + "ffn_up.bias"]
        return gelu_tanh(u) @ self.t[p + "ffn_down.weight"].T + self.t[p + "ffn_down.bias"]


class Phi2(_LayerNormBiased):
    def block(self, i, x, pos):
        h = self.layernorm(x, f"blk.{i}.attn_norm")
        return x + self.attention(i, h, pos) + self.ffn(i, h)

    def logits(self, x):
        return self.layernorm(x, "output_norm") @ self.head.T + self.t["output.bias"]


class StarCoder2(_LayerNormBiased):
    def block(self, i, x, pos):
        p = f"blk.{i}."
        x = x + self.attention(i, self.layernorm(x, p + "attn_norm"), pos)
        return x + self.ffn(i, self.layernorm(x, p + "ffn_norm"))

    def logits(self, x):
        return self.layernorm(x, "output_norm") @ self.head.T


nf.FAMILIES.update({"phi2": Phi2, "starcoder2": StarCoder2})
