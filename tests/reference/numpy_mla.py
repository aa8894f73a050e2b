"""A float64 numpy forward pass of DeepSeek-V2 / V3 (GGUF ``deepseek2``), written from
HF's DeepseekV2 / DeepseekV3 modelling (DeepseekV2Attention, DeepseekV2YarnRotaryEmbedding,
MoEGate, DeepseekV2MoE) in its plain multi-head form: the latent is decompressed into
per-head keys and values, which is not how infer (nor llama.cpp) computes it.  It
shares no code with infer (weights through the `gguf` package's reader).  Slow and
plain on purpose.

    x = embed(tokens)
    for each layer i:
        h = rmsnorm(x, attn_norm)
        q = h Wq   or   rmsnorm(h Wq_a, q_a_norm) Wq_b           (heads of nope | rope)
        c, k_pe = split(h Wkv_a)                                (kv_lora, rope)
        c = rmsnorm(c, kv_a_norm)
        kv_b = per head [k_b^T ; v_b]  (HF's kv_b_proj, which the converter split)
        k_nope_h = c k_b_h^T... : k_h = [c kv_b_nope_h^T | rope(k_pe)],  v_h = c kv_b_v_h^T
        q_h = [q_nope_h | rope(q_pe_h)]
        o_h = softmax(q_h . k_h * softmax_scale) v_h,  x += concat(o) Wo
        x += ffn(rmsnorm(x, ffn_norm))     (dense in the leading layers, else MoE + shared)

RoPE rotates adjacent pairs of the rope parts (HF's interleaved q_pe / k_pe, the GGUF
"norm" layout).  With YaRN (factor s, original context C, beta_fast 32, beta_slow 1):
the frequencies ramp between base^(-2i/d) and base^(-2i/d) / s, cos and sin keep
magnitude yarn_get_mscale(s, m) / yarn_get_mscale(s, m_all) = 1 (m = m_all:
mscale_all_dim = log multiplier / 0.1) and softmax_scale = q_head^-0.5 *
yarn_get_mscale(s, m_all)^2.

Routing (MoEGate): scores = softmax(router logits) or sigmoid; the choice by scores
(+ e_score_correction_bias, exp_probs_b); with n_group groups, only the topk_group
groups with the largest sums of their two best keys; weights = the chosen scores
(divided by their sum with norm_topk_prob) times routed_scaling_factor.

Switches for the ablations: ``rope_parts`` (False: no rotation at all), ``kv_norm``
(False: the latent without its RMSNorm), ``yarn_mscale`` (False: softmax_scale without
mscale^2), ``use_bias`` and ``groups`` (the routing without selection biases / groups).
``gaps[layer]`` keeps per position the gap between the last expert chosen and the
next one's key, to choose prompts whose routing is clear.
"""
from __future__ import annotations

import math

import numpy as np

from . import gguf_file


class MlaReference:
    def __init__(self, path: str) -> None:
        meta, self.w = gguf_file.read(path)
        assert meta["general.architecture"] == "deepseek2"

        def get(key, default=None):
            return meta.get(f"deepseek2.{key}", default)

        self.n_layer = int(get("block_count"))
        self.n_head = int(get("attention.head_count"))
        self.eps = float(get("attention.layer_norm_rms_epsilon"))
        self.kv_lora = int(get("attention.kv_lora_rank"))
        # the older conversions (attn_kv_b) give a decompressed head's lengths without "_mla"
        self.q_head = int(get("attention.key_length_mla", get("attention.key_length")))
        self.v_dim = int(get("attention.value_length_mla", get("attention.value_length")))
        self.rope_dim = int(get("rope.dimension_count"))
        self.nope = self.q_head - self.rope_dim
        self.base = float(get("rope.freq_base", 10000.0))
        self.n_dense = int(get("leading_dense_block_count", 0))
        self.top_k = int(get("expert_used_count", 0))
        self.sigmoid = int(get("expert_gating_func", 1)) == 2
        self.norm_topk = bool(get("expert_weights_norm", False))
        self.routed_scale = float(get("expert_weights_scale", 1.0))
        self.n_group = int(get("expert_group_count", 1))
        self.topk_group = int(get("expert_group_used_count", 1))
        self.factor = float(get("rope.scaling.factor", 1.0)) if get("rope.scaling.type") == "yarn" else 1.0
        self.original = int(get("rope.scaling.original_context_length", get("context_length")))
        self.mscale_all = float(get("rope.scaling.yarn_log_multiplier", 0.0)) / 0.1
        self.rope_parts = self.kv_norm = self.yarn_mscale = self.use_bias = self.groups = True
        self.gaps = {}

    @staticmethod
    def _get_mscale(scale, mscale):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    def rmsnorm(self, x, weight):
        return x * weight / np.sqrt((x ** 2).mean(-1, keepdims=True) + self.eps)

    def inv_freq(self):
        d = self.rope_dim
        extra = self.base ** (-np.arange(0, d, 2) / d)
        if self.factor == 1.0:
            return extra

        def corr(n_rot):
            return d * math.log(self.original / (n_rot * 2 * math.pi)) / (2 * math.log(self.base))

        low, high = max(math.floor(corr(32.0)), 0), min(math.ceil(corr(1.0)), d - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(d // 2) - low) / (high - low), 0, 1)
        keep = 1.0 - ramp
        return extra / self.factor * (1 - keep) + extra * keep

    def rotate(self, x, pos):
        """Adjacent pairs (2i, 2i+1) of the last axis turned by pos * inv_freq[i]."""
        if not self.rope_parts:
            return x
        ang = pos[:, None] * self.inv_freq()[None, :]
        cos, sin = np.cos(ang), np.sin(ang)
        mag = self._get_mscale(self.factor, self.mscale_all) / self._get_mscale(self.factor, self.mscale_all) \
            if self.mscale_all else self._get_mscale(self.factor, 1.0)
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (-1,)
        cos, sin = cos.reshape(shape) * mag, sin.reshape(shape) * mag
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def softmax_scale(self):
        scale = self.q_head ** -0.5
        if self.yarn_mscale and self.mscale_all and self.factor > 1:
            scale *= self._get_mscale(self.factor, self.mscale_all) ** 2
        return scale

    def attention(self, i, h):
        p, w = f"blk.{i}.", self.w
        T, H = h.shape[0], self.n_head
        if p + "attn_q_a.weight" in w:
            q = self.rmsnorm(h @ w[p + "attn_q_a.weight"].T, w[p + "attn_q_a_norm.weight"]) @ w[p + "attn_q_b.weight"].T
        else:
            q = h @ w[p + "attn_q.weight"].T
        q = q.reshape(T, H, self.q_head)
        ckv = h @ w[p + "attn_kv_a_mqa.weight"].T
        c, k_pe = ckv[:, :self.kv_lora], ckv[:, self.kv_lora:]
        if self.kv_norm:
            c = self.rmsnorm(c, w[p + "attn_kv_a_norm.weight"])
        # HF's kv_b_proj, per head: rows nope (k) then v_dim (v), from the split tensors
        if p + "attn_kv_b.weight" in w:   # HF's kv_b_proj as it is
            kv_b = w[p + "attn_kv_b.weight"].reshape(H, self.nope + self.v_dim, self.kv_lora)
            k_b, v_b = kv_b[:, :self.nope], kv_b[:, self.nope:]
        else:
            k_b = w[p + "attn_k_b.weight"].transpose(0, 2, 1)   # (H, nope, kv_lora)
            v_b = w[p + "attn_v_b.weight"]                      # (H, v_dim, kv_lora)
        pos = np.arange(T, dtype=np.float64)
        k_pe = self.rotate(k_pe, pos)
        q_pe = self.rotate(q[:, :, self.nope:], pos)
        causal = np.tril(np.ones((T, T), bool))
        out = np.zeros((T, H, self.v_dim))
        for j in range(H):
            k = np.concatenate([c @ k_b[j].T, k_pe], axis=1)
            v = c @ v_b[j].T
            qj = np.concatenate([q[:, j, :self.nope], q_pe[:, j]], axis=1)
            scores = qj @ k.T * self.softmax_scale()
            scores[~causal] = -np.inf
            probs = np.exp(scores - scores.max(1, keepdims=True))
            out[:, j] = probs / probs.sum(1, keepdims=True) @ v
        return out.reshape(T, -1) @ w[p + "attn_output.weight"].T

    @staticmethod
    def swiglu(h, gate, up, down):
        g = h @ gate.T
        return (g / (1 + np.exp(-g)) * (h @ up.T)) @ down.T

    def experts(self, i, h):
        p, w = f"blk.{i}.", self.w
        logits = h @ w[p + "ffn_gate_inp.weight"].T
        if self.sigmoid:
            scores = 1 / (1 + np.exp(-logits))
        else:
            e = np.exp(logits - logits.max(1, keepdims=True))
            scores = e / e.sum(1, keepdims=True)
        keys = scores.copy()
        if self.use_bias and p + "exp_probs_b.bias" in w:
            keys = keys + w[p + "exp_probs_b.bias"]
        T, n_exp = scores.shape
        if self.groups and self.n_group > 1:
            grouped = keys.reshape(T, self.n_group, -1)
            group_scores = np.sort(grouped, axis=2)[:, :, -2:].sum(2)
            kept = np.argsort(-group_scores, axis=1, kind="stable")[:, :self.topk_group]
            mask = np.ones((T, self.n_group), bool)
            np.put_along_axis(mask, kept, False, axis=1)
            keys = np.where(np.repeat(mask, n_exp // self.n_group, axis=1), -np.inf, keys)
        order = np.argsort(-keys, axis=1, kind="stable")
        chosen = order[:, :self.top_k]
        ranked = np.take_along_axis(keys, order, axis=1)
        self.gaps[i] = ranked[:, self.top_k - 1] - ranked[:, self.top_k]
        weights = np.take_along_axis(scores, chosen, axis=1)
        if self.norm_topk:
            weights = weights / weights.sum(1, keepdims=True)
        weights = weights * self.routed_scale
        gate, up, down = (w[p + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
        out = np.zeros_like(h)
        for t in range(T):
            for e, wt in zip(chosen[t], weights[t]):
                out[t] += wt * self.swiglu(h[t:t + 1], gate[e], up[e], down[e])[0]
        if p + "ffn_gate_shexp.weight" in w:
            out += self.swiglu(h, w[p + "ffn_gate_shexp.weight"], w[p + "ffn_up_shexp.weight"],
                               w[p + "ffn_down_shexp.weight"])
        return out

    def forward(self, tokens) -> np.ndarray:
        """Logits (T, vocab) at every position of ``tokens`` from position 0."""
        w = self.w
        x = w["token_embd.weight"][np.asarray(tokens, np.int64)]
        for i in range(self.n_layer):
            p = f"blk.{i}."
            x = x + self.attention(i, self.rmsnorm(x, w[p + "attn_norm.weight"]))
            h = self.rmsnorm(x, w[p + "ffn_norm.weight"])
            if i < self.n_dense:
                x = x + self.swiglu(h, w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"], w[p + "ffn_down.weight"])
            else:
                x = x + self.experts(i, h)
        head = w.get("output.weight", w["token_embd.weight"])
        return self.rmsnorm(x, w["output_norm.weight"]) @ head.T
