"""A float64 numpy forward pass of Qwen3.5 (GGUF ``qwen35`` and ``qwen35moe``),
written from HF transformers' Qwen3_5 modelling (Qwen3_5GatedDeltaNet with
torch_recurrent_gated_delta_rule, Qwen3_5Attention, interleaved M-RoPE) and
llama.cpp's conversion/qwen.py for what the GGUF file holds (norm weights with
HF's +1 already added, ssm_a = -exp(A_log), the V heads reordered so that value
head h reads key head h % n_k_heads, attn_q rows per head: q then gate).  It
shares no code with infer (weights through the `gguf` package's reader) nor
with the other references.  Slow and plain on purpose.

    x = embed(tokens)
    for each layer i:
        h = rmsnorm(x, attn_norm)
        recurrent layer:
            c = silu(causal depthwise conv of h Wqkv over the last K positions)
            q, k, v = split(c); q, k = l2norm(q), l2norm(k); q /= sqrt(d)
            g = -exp(A_log) * softplus(h Walpha + dt_bias); b = sigmoid(h Wbeta)
            per value head, S (d_k x d_v) from 0:
                S *= exp(g_t); S += k_t outer (b_t (v_t - S^T k_t)); o_t = S^T q_t
            x += (rmsnorm(o, ssm_norm) * silu(h Wz)) Wout
        attention layer:
            q|gate = h Wq (per head), k, v; rmsnorm q and k per head; M-RoPE on the
            first rope.dimension_count values (text: t = h = w = position, e = 0);
            x += (softmax attention * sigmoid(gate)) Wo
        h = rmsnorm(x, post_attention_norm)
        x += SwiGLU(h)   or the mixture of experts: softmax router, top k renormalised,
                          + sigmoid(h . gate_inp_shexp) * shared SwiGLU(h)
    logits = rmsnorm(x, output_norm) @ (output or token_embd).T
"""
from __future__ import annotations

import numpy as np

from . import gguf_file


class Qwen35Reference:
    def __init__(self, path: str) -> None:
        meta, self.w = gguf_file.read(path)
        arch = meta["general.architecture"]
        assert arch in ("qwen35", "qwen35moe")

        def get(key, default=None):
            return meta.get(f"{arch}.{key}", default)

        self.n_layer = int(get("block_count"))
        self.n_head = int(get("attention.head_count"))
        self.n_kv = int(get("attention.head_count_kv"))
        self.head_dim = int(get("attention.key_length"))
        self.eps = float(get("attention.layer_norm_rms_epsilon"))
        self.theta = float(get("rope.freq_base", 10000.0))
        self.n_rot = int(get("rope.dimension_count"))
        self.sections = [int(s) for s in get("rope.dimension_sections")]
        self.K = int(get("ssm.conv_kernel"))
        self.d_state = int(get("ssm.state_size"))
        self.n_k = int(get("ssm.group_count"))
        self.n_v = int(get("ssm.time_step_rank"))
        flags = get("attention.recurrent_layers")
        if flags is not None:
            self.recurrent = [bool(f) for f in flags]
        else:
            every = int(get("full_attention_interval", 4))
            self.recurrent = [(i + 1) % every != 0 for i in range(self.n_layer)]
        self.n_used = int(get("expert_used_count", 0))
        self.head = self.w.get("output.weight", self.w["token_embd.weight"])

    def norm(self, x, weight):
        return x * weight / np.sqrt((x ** 2).mean(-1, keepdims=True) + self.eps)

    @staticmethod
    def silu(x):
        return x / (1 + np.exp(-x))

    @staticmethod
    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    def l2norm(self, x):
        return x / np.sqrt((x ** 2).sum(-1, keepdims=True) + self.eps)

    def delta_net(self, i, h):
        p = f"blk.{i}."
        T, d, K = h.shape[0], self.d_state, self.K
        mixed = h @ self.w[p + "attn_qkv.weight"].T            # (T, channels)
        taps = self.w[p + "ssm_conv1d.weight"]                  # (channels, K)
        padded = np.vstack([np.zeros((K - 1, mixed.shape[1])), mixed])
        conv = np.stack([(padded[t:t + K] * taps.T).sum(0) for t in range(T)])
        conv = self.silu(conv)
        kd = self.n_k * d
        q = self.l2norm(conv[:, :kd].reshape(T, self.n_k, d)) / np.sqrt(d)
        k = self.l2norm(conv[:, kd:2 * kd].reshape(T, self.n_k, d))
        v = conv[:, 2 * kd:].reshape(T, self.n_v, d)
        a = h @ self.w[p + "ssm_alpha.weight"].T + self.w[p + "ssm_dt.bias"]
        g = self.w[p + "ssm_a"] * np.log1p(np.exp(a))           # (T, n_v)
        b = self.sigmoid(h @ self.w[p + "ssm_beta.weight"].T)
        out = np.zeros((T, self.n_v, d))
        for hv in range(self.n_v):
            hk = hv % self.n_k
            S = np.zeros((d, d))                                 # S[key, value]
            for t in range(T):
                S *= np.exp(g[t, hv])
                delta = b[t, hv] * (v[t, hv] - S.T @ k[t, hk])
                S += np.outer(k[t, hk], delta)
                out[t, hv] = S.T @ q[t, hk]
        z = (h @ self.w[p + "attn_gate.weight"].T).reshape(T, self.n_v, d)
        o = self.norm(out, self.w[p + "ssm_norm.weight"]) * self.silu(z)
        return o.reshape(T, -1) @ self.w[p + "ssm_out.weight"].T

    def rotate(self, x, pos):
        """Interleaved M-RoPE (HF's Qwen3_5 apply_interleaved_mrope; ggml's IMROPE) of
        the first n_rot values per head, NEOX pairs (i, i + n_rot/2); text positions:
        t = h = w = pos, the fourth section 0."""
        half = self.n_rot // 2
        freq = self.theta ** (-np.arange(half) * 2.0 / self.n_rot)
        s0, s1, s2, _ = self.sections
        total = sum(self.sections)
        which = []
        for i in range(half):
            sector = i % total
            in_thw = ((sector % 3 == 0 and sector < 3 * s0) or (sector % 3 == 1 and sector < 3 * s1)
                      or (sector % 3 == 2 and sector < 3 * s2))
            which.append(1.0 if in_thw else 0.0)                 # the extra section's position is 0
        ang = (pos[:, None] * np.array(which)[None, :]) * freq[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x1, x2, rest = x[..., :half], x[..., half:self.n_rot], x[..., self.n_rot:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], -1)

    def attention(self, i, h):
        p = f"blk.{i}."
        T, hd = h.shape[0], self.head_dim
        qg = (h @ self.w[p + "attn_q.weight"].T).reshape(T, self.n_head, 2, hd)
        q, gate = qg[:, :, 0], qg[:, :, 1]
        k = (h @ self.w[p + "attn_k.weight"].T).reshape(T, self.n_kv, hd)
        v = (h @ self.w[p + "attn_v.weight"].T).reshape(T, self.n_kv, hd)
        q = self.norm(q, self.w[p + "attn_q_norm.weight"])
        k = self.norm(k, self.w[p + "attn_k_norm.weight"])
        pos = np.arange(T, dtype=np.float64)
        q, k = self.rotate(q, pos), self.rotate(k, pos)
        causal = np.tril(np.ones((T, T), bool))
        out = np.zeros((T, self.n_head, hd))
        per_kv = self.n_head // self.n_kv
        for j in range(self.n_head):
            scores = q[:, j] @ k[:, j // per_kv].T / np.sqrt(hd)
            scores[~causal] = -np.inf
            probs = np.exp(scores - scores.max(1, keepdims=True))
            out[:, j] = (probs / probs.sum(1, keepdims=True)) @ v[:, j // per_kv]
        out = out * self.sigmoid(gate)
        return out.reshape(T, -1) @ self.w[p + "attn_output.weight"].T

    def swiglu(self, h, gate, up, down):
        return (self.silu(h @ gate.T) * (h @ up.T)) @ down.T

    def ffn(self, i, h):
        p = f"blk.{i}."
        if p + "ffn_gate_inp.weight" not in self.w:
            return self.swiglu(h, self.w[p + "ffn_gate.weight"], self.w[p + "ffn_up.weight"],
                               self.w[p + "ffn_down.weight"])
        logits = h @ self.w[p + "ffn_gate_inp.weight"].T
        probs = np.exp(logits - logits.max(1, keepdims=True))
        probs /= probs.sum(1, keepdims=True)
        out = np.zeros_like(h)
        gates, ups, downs = (self.w[p + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
        for t in range(h.shape[0]):
            top = np.argsort(-probs[t], kind="stable")[:self.n_used]
            weights = probs[t, top] / probs[t, top].sum()
            for e, wt in zip(top, weights):
                out[t] += wt * self.swiglu(h[t:t + 1], gates[e], ups[e], downs[e])[0]
        shared = self.swiglu(h, self.w[p + "ffn_gate_shexp.weight"], self.w[p + "ffn_up_shexp.weight"],
                             self.w[p + "ffn_down_shexp.weight"])
        return out + self.sigmoid(h @ self.w[p + "ffn_gate_inp_shexp.weight"])[:, None] * shared

    def forward(self, tokens) -> np.ndarray:
        """Logits (T, vocab) at every position of ``tokens`` from position 0."""
        x = self.w["token_embd.weight"][np.asarray(tokens, np.int64)]
        for i in range(self.n_layer):
            p = f"blk.{i}."
            h = self.norm(x, self.w[p + "attn_norm.weight"])
            x = x + (self.delta_net(i, h) if self.recurrent[i] else self.attention(i, h))
            x = x + self.ffn(i, self.norm(x, self.w[p + "post_attention_norm.weight"]))
        return self.norm(x, self.w["output_norm.weight"]) @ self.head.T
