"""A float64 numpy forward pass of LFM2 (GGUF ``lfm2``), written from HF
transformers' Lfm2 modelling (Lfm2ShortConv.slow_forward, Lfm2Attention) and
llama.cpp's src/models/lfm2.cpp for what the GGUF file holds.  It shares no code
with infer (weights through the `gguf` package's reader) nor with
numpy_families.py.  Slow and plain on purpose.

    x = embed(tokens)
    for each layer i:
        h = rmsnorm(x, attn_norm)
        if head_count_kv[i] == 0:           (a short-convolution layer)
            B, C, X = split(h @ in_proj.T, 3)           along the features
            Bx = B * X                                  (T, d)
            conv[t] = sum_k w[:, k] * Bx[t - (L-1) + k]  (Conv1d, groups=d, padding L-1,
                                                         the first T outputs; Bx[<0] = 0)
            x += (C * conv) @ out_proj.T
        else:                               (attention)
            q, k, v = h Wq, h Wk, h Wv; per-head rmsnorm of q and k; NEOX RoPE;
            causal softmax(q.k / sqrt(head_dim)) over the last sliding_window
            positions if the file sets one > 0; x += (.) Wo
        x += (silu(h2 Wgate) * h2 Wup) Wdown,  h2 = rmsnorm(x, ffn_norm)
    logits = rmsnorm(x, token_embd_norm) @ (output or token_embd).T

LFM2-MoE (GGUF ``lfm2moe``), from HF transformers' Lfm2MoeSparseMoeBlock
(route_tokens_to_experts): the FFN of every layer from leading_dense_block_count
on is a mixture of experts,

        s = sigmoid(h2 @ ffn_gate_inp.T)                 (expert_count scores)
        chosen = the expert_used_count largest of s + expert_bias (exp_probs_b.bias)
        w = s[chosen] / sum(s[chosen])                   (norm_topk_prob)
        x += sum_e w_e (silu(h2 Wgate_e) * h2 Wup_e) Wdown_e

``gaps[layer]`` keeps per position the gap in s + bias between the last expert
chosen and the first left out, and ``follow`` / ``follow_gap`` let a test give
the choices another implementation made at near-ties (as numpy_families.Experts).
``use_bias = False`` chooses by s alone (to show that the bias matters).
"""
from __future__ import annotations

import numpy as np

from . import gguf_file


class Lfm2Reference:
    def __init__(self, path: str) -> None:
        meta, self.w = gguf_file.read(path)
        arch = meta["general.architecture"]
        assert arch in ("lfm2", "lfm2moe")

        def get(key, default=None):
            return meta.get(f"{arch}.{key}", default)

        self.n_layer = int(get("block_count"))
        self.d = int(get("embedding_length"))
        self.n_head = int(get("attention.head_count"))
        kv = get("attention.head_count_kv")
        self.kv_heads = [int(v) for v in kv] if isinstance(kv, list) else [int(kv)] * self.n_layer
        self.head_dim = self.d // self.n_head
        self.eps = float(get("attention.layer_norm_rms_epsilon"))
        self.theta = float(get("rope.freq_base", 10000.0))
        self.window = int(get("attention.sliding_window", 0))
        self.width = int(get("shortconv.l_cache"))
        self.n_dense = int(get("leading_dense_block_count", self.n_layer)) if arch == "lfm2moe" else self.n_layer
        self.top_k = int(get("expert_used_count", 0))
        if arch == "lfm2moe":
            assert int(get("expert_gating_func")) == 2   # sigmoid
        self.use_bias = True
        self.follow, self.follow_gap, self.gaps = {}, 0.0, {}
        self.followed = self.disagreed = 0
        self.head = self.w.get("output.weight", self.w["token_embd.weight"])

    def norm(self, x, weight):
        return x * weight / np.sqrt((x ** 2).mean(-1, keepdims=True) + self.eps)

    def conv_mixer(self, i, h):
        p = f"blk.{i}.shortconv."
        d, L, T = self.d, self.width, h.shape[0]
        bcx = h @ self.w[p + "in_proj.weight"].T
        b, c, x = bcx[:, :d], bcx[:, d:2 * d], bcx[:, 2 * d:]
        bx = np.vstack([np.zeros((L - 1, d)), b * x])   # the causal padding
        taps = self.w[p + "conv.weight"]                  # (d, L)
        conv = np.zeros((T, d))
        for t in range(T):
            conv[t] = (bx[t:t + L] * taps.T).sum(0)
        return (c * conv) @ self.w[p + "out_proj.weight"].T

    def rotate(self, x, pos):
        half = self.head_dim // 2
        freq = self.theta ** (-np.arange(half) * 2.0 / self.head_dim)
        ang = pos[:, None] * freq[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def attention_mixer(self, i, h):
        p = f"blk.{i}."
        T, hd, nkv = h.shape[0], self.head_dim, self.kv_heads[i]
        q = (h @ self.w[p + "attn_q.weight"].T).reshape(T, self.n_head, hd)
        k = (h @ self.w[p + "attn_k.weight"].T).reshape(T, nkv, hd)
        v = (h @ self.w[p + "attn_v.weight"].T).reshape(T, nkv, hd)
        q = self.norm(q, self.w[p + "attn_q_norm.weight"])
        k = self.norm(k, self.w[p + "attn_k_norm.weight"])
        pos = np.arange(T, dtype=np.float64)
        q, k = self.rotate(q, pos), self.rotate(k, pos)
        allowed = np.tril(np.ones((T, T), bool))
        if self.window > 0:
            allowed &= np.arange(T)[None, :] > np.arange(T)[:, None] - self.window
        out = np.zeros((T, self.n_head, hd))
        per_kv = self.n_head // nkv
        for j in range(self.n_head):
            scores = q[:, j] @ k[:, j // per_kv].T / np.sqrt(hd)
            scores[~allowed] = -np.inf
            probs = np.exp(scores - scores.max(1, keepdims=True))
            out[:, j] = (probs / probs.sum(1, keepdims=True)) @ v[:, j // per_kv]
        return out.reshape(T, self.d) @ self.w[p + "attn_output.weight"].T

    def forward(self, tokens) -> np.ndarray:
        """Logits (T, vocab) at every position of ``tokens`` from position 0."""
        x = self.w["token_embd.weight"][np.asarray(tokens, np.int64)]
        for i in range(self.n_layer):
            p = f"blk.{i}."
            h = self.norm(x, self.w[p + "attn_norm.weight"])
            x = x + (self.conv_mixer(i, h) if self.kv_heads[i] == 0 else self.attention_mixer(i, h))
            h = self.norm(x, self.w[p + "ffn_norm.weight"])
            if i >= self.n_dense:
                x = x + self.experts(i, h)
                continue
            gate = h @ self.w[p + "ffn_gate.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * (h @ self.w[p + "ffn_up.weight"].T)) @ self.w[p + "ffn_down.weight"].T
        return self.norm(x, self.w["token_embd_norm.weight"]) @ self.head.T

    def experts(self, i, h):
        p = f"blk.{i}."
        scores = 1.0 / (1.0 + np.exp(-(h @ self.w[p + "ffn_gate_inp.weight"].T)))
        keys = scores + self.w[p + "exp_probs_b.bias"] if self.use_bias else scores
        order = np.argsort(-keys, axis=1, kind="stable")
        ranked = np.take_along_axis(keys, order, axis=1)
        k = self.top_k
        self.gaps[i] = ranked[:, k - 1] - ranked[:, k]
        chosen = order[:, :k].copy()
        for t, theirs in zip(*self.follow.get(i, ((), ()))):
            if set(theirs) == set(chosen[t]):
                continue
            if self.gaps[i][t] < self.follow_gap:
                chosen[t] = theirs
                self.followed += 1
            else:
                self.disagreed += 1
        weight = np.take_along_axis(scores, chosen, axis=1)
        weight /= weight.sum(axis=1, keepdims=True)
        gate, up, down = (self.w[p + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
        out = np.zeros_like(h)
        for t in range(len(h)):
            for e, wt in zip(chosen[t], weight[t]):
                g = gate[e] @ h[t]
                out[t] += wt * (down[e] @ (g / (1.0 + np.exp(-g)) * (up[e] @ h[t])))
        return out
