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
nemotron_h: x += mixer(rmsnorm(x, attn_norm)) per layer, the mixer by the layer's
            head_count_kv and feed_forward_length: Mamba2 (numpy_mamba2's reading of
            HF's mixer: NemotronHMamba2Mixer is the same SSM with the gated norm per group),
            attention without RoPE at 1/sqrt(head_dim), or relu(h Wup)^2 Wdown;
            logits = rmsnorm(x) @ output.T.  nemotron_h_moe: the MLP is HF's NemotronHMoE
            (sigmoid scores, top k by score + e_score_correction_bias, renormalised, times
            routed_scaling_factor; relu² experts and a relu² shared expert).
"""
from __future__ import annotations

import math

import numpy as np

from . import numpy_dense2 as nd
from . import numpy_families as nf
from .numpy_mamba2 import GraniteHybridReference


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class _LayerNormBiased(nd.StableLM):
    """StableLM's reading (LayerNorms with biases, NEOX RoPE over rope.dimension_count,
    q/k/v biases where present) with a biased output projection and a biased GELU FFN."""

    def qkv(self, i, h):
        p = f"blk.{i}."
        if p + "attn_qkv.weight" not in self.t:
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
    """StableLM's sequential blocks and unbiased head."""


class NemotronH(GraniteHybridReference):
    def __init__(self, path: str, n_ctx: int = 0) -> None:
        super().__init__(path)
        arch = self.meta["general.architecture"]
        self.head_dim = int(self.meta[f"{arch}.attention.key_length"])
        self.attention_multiplier = 1.0 / math.sqrt(self.head_dim)
        self.ffn_lengths = [int(n) for n in self.meta[f"{arch}.feed_forward_length"]]

    ARCHS = ("nemotron_h", "nemotron_h_moe")

    @staticmethod
    def relu2(h, up, down):
        u = np.maximum(h @ up.T, 0.0)
        return (u * u) @ down.T

    def mlp(self, i, h):
        """The MLP, or (nemotron_h_moe) HF's NemotronHMoE: sigmoid router scores, the top
        k of score + e_score_correction_bias, weights = their scores renormalised (norm_topk_prob)
        times routed_scaling_factor, relu² experts, plus the shared expert."""
        p = f"blk.{i}."
        if p + "ffn_gate_inp.weight" not in self.w:
            return self.relu2(h, self.w[p + "ffn_up.weight"], self.w[p + "ffn_down.weight"])
        get = self.meta.get
        k, scale = int(get("nemotron_h_moe.expert_used_count")), float(get("nemotron_h_moe.expert_weights_scale"))
        scores = 1.0 / (1.0 + np.exp(-(h @ self.w[p + "ffn_gate_inp.weight"].T)))
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-(scores[t] + self.w[p + "exp_probs_b.bias"]), kind="stable")[:k]
            weights = scores[t, top] / scores[t, top].sum() * scale
            for e, wt in zip(top, weights):
                out[t] += wt * self.relu2(h[t:t + 1], self.w[p + "ffn_up_exps.weight"][e],
                                          self.w[p + "ffn_down_exps.weight"][e])[0]
        return out + self.relu2(h, self.w[p + "ffn_up_shexp.weight"], self.w[p + "ffn_down_shexp.weight"])

    def forward(self, tokens) -> np.ndarray:
        x = self.w["token_embd.weight"][np.asarray(tokens, np.int64)]
        for i in range(self.n_layer):
            h = self.norm(x, self.w[f"blk.{i}.attn_norm.weight"])
            if self.ffn_lengths[i]:
                x = x + self.mlp(i, h)
            elif self.kv_heads[i]:
                x = x + self.attention(i, h)
            else:
                x = x + self.mamba(i, h)
        return self.norm(x, self.w["output_norm.weight"]) @ self.head.T


nf.FAMILIES.update({"phi2": Phi2, "starcoder2": StarCoder2, "nemotron_h": NemotronH, "nemotron_h_moe": NemotronH})
