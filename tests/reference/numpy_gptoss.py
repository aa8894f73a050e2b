"""A float64 numpy forward pass of gpt-oss (GGUF ``gpt-oss``), written from
llama.cpp's src/models/openai-moe.cpp, build_moe_ffn (src/llama-graph.cpp) and
ggml's soft_max with sinks and swiglu_oai, sharing no code with infer: weights come
from the `gguf` package's reader, every step is spelt out here.

    x = embed(tokens)
    per layer:  h = rms(x) * attn_norm
                q, k, v = h Wq + bq, h Wk + bk, h Wv + bv ; YaRN NEOX RoPE on q, k
                scores = q k^T / sqrt(head_dim), causal, even layers only the last
                         `sliding_window` positions; softmax with the head's sink
                         logit in the denominator
                x += (softmax V) Wo + bo
                h = rms(x) * post_attention_norm
                r = h Wrouter + brouter ; top-k experts by r ; w = softmax(r[top-k])
                x += sum_e w_e ((swiglu_oai(h Wg_e + bg_e, h Wu_e + bu_e)) Wd_e + bd_e)
    logits = rms(x) * output_norm @ Wout^T

Switches for the tests that show each piece matters: ``sinks``, ``biases``
(every bias), ``window``, ``clamp`` (swiglu_oai's limit), ``softmax_weight``
(False: softmax over all experts, then the top-k probabilities).  ``gaps`` holds,
per layer, each position's router-logit gap between the last expert chosen and
the first left out (a small one is a near-tie that rounding may flip).
"""
from __future__ import annotations

import math

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class GptOss:
    def __init__(self, path: str) -> None:
        r = GGUFReader(path)
        md = {}
        for key, f in r.fields.items():
            try:
                md[key] = f.contents()
            except Exception:  # noqa: BLE001  (a field type contents() does not decode)
                pass
        a = "gpt-oss"
        assert md["general.architecture"] == a

        def get(key, default=None):
            return md.get(f"{a}.{key}", default)

        self.n_layer = int(get("block_count"))
        self.n_head = int(get("attention.head_count"))
        self.n_kv_head = int(get("attention.head_count_kv"))
        self.head_dim = int(get("attention.key_length"))
        self.eps = float(get("attention.layer_norm_rms_epsilon"))
        self.n_used = int(get("expert_used_count"))
        self.window_len = int(get("attention.sliding_window"))
        self.base = float(get("rope.freq_base"))
        self.yarn_factor = float(get("rope.scaling.factor", 1.0)) if get("rope.scaling.type") == "yarn" else 1.0
        self.yarn_orig = int(get("rope.scaling.original_context_length", get("context_length")))
        self.t = {}
        for t in r.tensors:
            x = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.t[t.name] = x.reshape([int(s) for s in reversed(t.shape)]) if len(t.shape) > 1 else x.reshape(-1)
        self.sinks = self.biases = self.window = self.clamp = self.softmax_weight = True
        self.gaps = {}

    # ---- pieces --------------------------------------------------------------------
    def rms(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def bias(self, name):
        return self.t[name] if self.biases else 0.0

    def rope_angles(self, n):
        """(n, head_dim/2) angles and the magnitude: YaRN as ggml's rope_yarn computes
        it (corr dims floored / ceiled, ramp between them, ext_factor 1)."""
        d, base, s = self.head_dim, self.base, self.yarn_factor
        theta = base ** (-np.arange(0, d, 2) / d)
        mag = 1.0
        if s > 1.0:
            def corr(rot):
                return d * math.log(self.yarn_orig / (rot * 2 * math.pi)) / (2 * math.log(base))
            lo, hi = max(0.0, math.floor(corr(32.0))), min(d - 1.0, math.ceil(corr(1.0)))
            ramp = 1.0 - np.clip((np.arange(d // 2) - lo) / max(0.001, hi - lo), 0.0, 1.0)
            theta = theta / s * (1 - ramp) + theta * ramp
            mag = 1.0 + 0.1 * math.log(s)
        return np.arange(n)[:, None] * theta[None, :], mag

    def rope(self, x, ang, mag):
        """NEOX: pairs (i, i + head_dim/2) of each head; x (n, heads, head_dim)."""
        h = self.head_dim // 2
        c, s = (np.cos(ang) * mag)[:, None, :], (np.sin(ang) * mag)[:, None, :]
        a, b = x[..., :h], x[..., h:]
        return np.concatenate([a * c - b * s, a * s + b * c], -1)

    def swiglu_oai(self, g, u):
        limit = 7.0 if self.clamp else np.inf
        g = np.minimum(g, limit)
        u = np.clip(u, -limit, limit)
        return g / (1.0 + np.exp(-1.702 * g)) * (u + 1.0)

    # ---- the model -------------------------------------------------------------------
    def attention(self, i, h, ang, mag):
        t, p = self.t, f"blk.{i}."
        n, hd, H, KV = h.shape[0], self.head_dim, self.n_head, self.n_kv_head
        q = (h @ t[p + "attn_q.weight"].T + self.bias(p + "attn_q.bias")).reshape(n, H, hd)
        k = (h @ t[p + "attn_k.weight"].T + self.bias(p + "attn_k.bias")).reshape(n, KV, hd)
        v = (h @ t[p + "attn_v.weight"].T + self.bias(p + "attn_v.bias")).reshape(n, KV, hd)
        q, k = self.rope(q, ang, mag), self.rope(k, ang, mag)
        pos = np.arange(n)
        allowed = pos[None, :] <= pos[:, None]
        if self.window and i % 2 == 0:   # llama.cpp's swa pattern 2: even layers slide
            allowed &= pos[:, None] - pos[None, :] < self.window_len
        out = np.zeros((n, H, hd))
        for head in range(H):
            kvh = head // (H // KV)
            s = q[:, head] @ k[:, kvh].T / math.sqrt(hd)
            s = np.where(allowed, s, -np.inf)
            sink = t[p + "attn_sinks.weight"][head] if self.sinks else -np.inf
            m = np.maximum(s.max(-1, keepdims=True), sink)
            e = np.exp(s - m)
            out[:, head] = (e @ v[:, kvh]) / (e.sum(-1, keepdims=True) + np.exp(sink - m))
        return out.reshape(n, H * hd) @ t[p + "attn_output.weight"].T + self.bias(p + "attn_output.bias")

    def experts(self, i, h):
        t, p = self.t, f"blk.{i}."
        logits = h @ t[p + "ffn_gate_inp.weight"].T + self.bias(p + "ffn_gate_inp.bias")
        order = np.argsort(-logits, axis=1, kind="stable")
        top = order[:, :self.n_used]
        srt = np.take_along_axis(logits, order, 1)
        self.gaps[i] = srt[:, self.n_used - 1] - srt[:, self.n_used]
        chosen = np.take_along_axis(logits, top, 1)
        if self.softmax_weight:
            w = np.exp(chosen - chosen.max(1, keepdims=True))
            w /= w.sum(1, keepdims=True)
        else:
            probs = np.exp(logits - logits.max(1, keepdims=True))
            w = np.take_along_axis(probs / probs.sum(1, keepdims=True), top, 1)
        out = np.zeros_like(h)
        for row in range(h.shape[0]):
            for slot, e in enumerate(top[row]):
                g = t[p + "ffn_gate_exps.weight"][e] @ h[row] + (t[p + "ffn_gate_exps.bias"][e] if self.biases else 0)
                u = t[p + "ffn_up_exps.weight"][e] @ h[row] + (t[p + "ffn_up_exps.bias"][e] if self.biases else 0)
                y = t[p + "ffn_down_exps.weight"][e] @ self.swiglu_oai(g, u)
                if self.biases:
                    y = y + t[p + "ffn_down_exps.bias"][e]
                out[row] += w[row, slot] * y
        return out

    def forward(self, tokens):
        t = self.t
        tokens = np.asarray(tokens)
        x = t["token_embd.weight"][tokens].copy()
        ang, mag = self.rope_angles(len(tokens))
        for i in range(self.n_layer):
            p = f"blk.{i}."
            x = x + self.attention(i, self.rms(x, t[p + "attn_norm.weight"]), ang, mag)
            x = x + self.experts(i, self.rms(x, t[p + "post_attention_norm.weight"]))
        return self.rms(x, t["output_norm.weight"]) @ t["output.weight"].T
