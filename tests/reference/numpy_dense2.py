"""Float64 numpy forward passes of tiny_models.DENSE2's families: glm4 (GLM-4-0414),
cohere2 (Command R7B), minicpm, internlm2 and stablelm.  Written from the HF modelling code and llama.cpp's
src/models/<arch>.cpp, sharing no code with infer; importing this module adds
them to numpy_families.FAMILIES (so `numpy_families.reference` finds them).

glm4:     x += rmsnorm(attn(rmsnorm(x)), post_attention_norm);
          x += rmsnorm(ffn(rmsnorm(x)), post_ffw_norm);  q/k/v biases; ffn_up holds the
          gate rows then the up rows; NORM RoPE over rope.dimension_count elements.
cohere2:  h = layernorm(x) (weight, no bias, attention.layer_norm_epsilon);
          x = x + ffn(h) + attn(h);  NORM RoPE on the sliding layers (l % 4 != 3,
          window attention.sliding_window), none on the global ones;
          logits = layernorm(x) @ embd.T * logit_scale.
minicpm:  Llama (NORM RoPE) with x0 = embed * embedding_scale, each block half's
          output times residual_scale, logits divided by logit_scale.
"""
from __future__ import annotations

import numpy as np

from . import numpy_families as nf


class Glm4(nf.Transformer):
    qkv_bias = True

    def ffn(self, i, h):
        gu = h @ self.t[f"blk.{i}.ffn_up.weight"].T
        n = gu.shape[1] // 2
        g, u = gu[:, :n], gu[:, n:]
        return (g / (1.0 + np.exp(-g)) * u) @ self.t[f"blk.{i}.ffn_down.weight"].T

    def block(self, i, x, pos):
        p = f"blk.{i}."
        a = self.attention(i, self.rmsnorm(x, self.t[p + "attn_norm.weight"]), pos)
        x = x + self.rmsnorm(a, self.t[p + "post_attention_norm.weight"])
        f = self.ffn(i, self.rmsnorm(x, self.t[p + "ffn_norm.weight"]))
        return x + self.rmsnorm(f, self.t[p + "post_ffw_norm.weight"])


class Cohere2(nf.Transformer):
    def layernorm(self, x, w):
        mu = x.mean(axis=-1, keepdims=True)
        c = x - mu
        return c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + self.eps) * w

    def no_rope(self, layer):
        return layer % 4 == 3

    def window(self, layer):
        return 0 if layer % 4 == 3 else int(self.get("attention.sliding_window"))

    def block(self, i, x, pos):
        h = self.layernorm(x, self.t[f"blk.{i}.attn_norm.weight"])
        return x + self.ffn(i, h) + self.attention(i, h, pos)

    def logits(self, x):
        scale = float(self.get("logit_scale"))
        return self.layernorm(x, self.t["output_norm.weight"]) @ self.head.T * scale


class MiniCPM(nf.Llama):
    def embed(self, tokens):
        return super().embed(tokens) * float(self.get("embedding_scale"))

    def block(self, i, x, pos):
        p, s = f"blk.{i}.", float(self.get("residual_scale"))
        x = x + s * self.attention(i, self.rmsnorm(x, self.t[p + "attn_norm.weight"]), pos)
        return x + s * self.ffn(i, self.rmsnorm(x, self.t[p + "ffn_norm.weight"]))

    def logits(self, x):
        return super().logits(x) / float(self.get("logit_scale"))


class InternLM2(nf.Llama):
    """Llama: the converter already split and permuted wqkv (conversion/internlm.py)."""


class StableLM(nf.Transformer):
    """NEOX RoPE over rope.dimension_count elements; LayerNorms with weight and bias."""
    neox = True

    def layernorm(self, x, name):
        mu = x.mean(axis=-1, keepdims=True)
        c = x - mu
        return c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + self.eps) * self.t[name + ".weight"] \
            + self.t[name + ".bias"]

    def qkv(self, i, h):
        self.qkv_bias = f"blk.{i}.attn_q.bias" in self.t
        return super().qkv(i, h)

    def block(self, i, x, pos):
        p = f"blk.{i}."
        x = x + self.attention(i, self.layernorm(x, p + "attn_norm"), pos)
        return x + self.ffn(i, self.layernorm(x, p + "ffn_norm"))

    def logits(self, x):
        return self.layernorm(x, "output_norm") @ self.head.T


nf.FAMILIES.update({"glm4": Glm4, "cohere2": Cohere2, "minicpm": MiniCPM, "internlm2": InternLM2,
                    "stablelm": StableLM})
