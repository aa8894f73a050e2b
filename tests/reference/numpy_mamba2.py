"""A float64 numpy forward pass of IBM Granite 4.0-H (GGUF ``granitehybrid``),
written from HF transformers' GraniteMoeHybrid modelling (GraniteMoeHybridMambaLayer's
torch_forward with its recurrent step, GraniteMoeHybridAttention without rotary
embedding, the Granite multipliers) and llama.cpp's conversion/granite.py +
conversion/mamba.py for what the GGUF file holds (ssm_a = -exp(A_log) and ssm_d as
(n_heads, 1), the conv squeezed to (channels, K), ssm_norm as (n_groups, d_inner /
n_groups), dt_bias as ssm_dt.bias, a layer is attention iff its head_count_kv is
not 0).  The gated norm is taken per group of d_inner / n_groups, as mamba_ssm's
RMSNormGated(group_size=d_inner / ngroups) and llama.cpp do (HF's torch fallback
normalises the whole d_inner: the same for Granite 4.0-H's n_groups = 1).  It
shares no code with infer (weights through the `gguf` package's reader) nor with
the other references.  Slow and plain on purpose.

    x = embed(tokens) * embedding_multiplier
    for each layer i:
        h = rmsnorm(x, attn_norm)
        mamba layer:
            z | xBC | dt = h Win
            xBC = silu(causal depthwise conv1d(xBC) + bias); x | B | C = xBC
            dt = softplus(dt + dt_bias); A = -exp(A_log)
            per head (group g = head // (heads / groups)), state (head_dim x d_state) from 0:
                state = state * exp(dt A) + (x dt) outer B_g ; y = state C_g + D x
            x += residual_multiplier * (rmsnorm_grouped(y * silu(z), norm)) Wout
        attention layer:
            softmax(q k^T * attention_multiplier) v, no RoPE; x += residual_multiplier * (.) Wo
        x += residual_multiplier * SwiGLU(rmsnorm(x, ffn_norm))
             (h-tiny/h-small: + the top-k experts' SwiGLU, softmax weights renormalised)
    logits = rmsnorm(x, output_norm) @ (output or token_embd).T / logits_scaling
"""
from __future__ import annotations

import numpy as np

from . import gguf_file


class GraniteHybridReference:
    #: the architectures this reading fits (numpy_families3's Nemotron-H adds its own)
    ARCHS = ("granitehybrid",)

    def __init__(self, path: str) -> None:
        meta, self.w = gguf_file.read(path)
        self.meta = meta
        arch = meta["general.architecture"]
        assert arch in self.ARCHS

        def get(key, default=None):
            return meta.get(f"{arch}.{key}", default)

        self.n_layer = int(get("block_count"))
        self.n_head = int(get("attention.head_count"))
        self.kv_heads = [int(n) for n in get("attention.head_count_kv")]
        self.dim = int(get("embedding_length"))
        self.head_dim = self.dim // self.n_head
        self.eps = float(get("attention.layer_norm_rms_epsilon"))
        self.embedding_multiplier = float(get("embedding_scale", 1.0))
        self.residual_multiplier = float(get("residual_scale", 1.0))
        self.attention_multiplier = float(get("attention.scale", 1.0 / np.sqrt(self.head_dim)))
        self.logits_scaling = float(get("logit_scale", 1.0))
        self.K = int(get("ssm.conv_kernel"))
        self.d_state = int(get("ssm.state_size"))
        self.d_inner = int(get("ssm.inner_size"))
        self.n_ssm_heads = int(get("ssm.time_step_rank"))
        self.n_groups = int(get("ssm.group_count"))
        self.n_used = int(get("expert_used_count", 0))
        self.head = self.w.get("output.weight", self.w["token_embd.weight"])

    def norm(self, x, weight):
        return x * weight / np.sqrt((x ** 2).mean(-1, keepdims=True) + self.eps)

    @staticmethod
    def silu(x):
        return x / (1 + np.exp(-x))

    def mamba(self, i, h):
        p = f"blk.{i}."
        T, K, N, G, H = h.shape[0], self.K, self.d_state, self.n_groups, self.n_ssm_heads
        inner, P = self.d_inner, self.d_inner // H
        conv_dim = inner + 2 * G * N
        proj = h @ self.w[p + "ssm_in.weight"].T
        gate, xbc, dt = proj[:, :inner], proj[:, inner:inner + conv_dim], proj[:, inner + conv_dim:]
        taps = self.w[p + "ssm_conv1d.weight"]                              # (conv_dim, K)
        padded = np.vstack([np.zeros((K - 1, conv_dim)), xbc])
        conv = np.stack([(padded[t:t + K] * taps.T).sum(0) for t in range(T)])
        conv = self.silu(conv + self.w.get(p + "ssm_conv1d.bias", np.zeros(conv_dim)))
        x = conv[:, :inner].reshape(T, H, P)
        B = conv[:, inner:inner + G * N].reshape(T, G, N)
        C = conv[:, inner + G * N:].reshape(T, G, N)
        dt = np.log1p(np.exp(dt + self.w[p + "ssm_dt.bias"]))             # (T, H)
        A = self.w[p + "ssm_a"].reshape(H)                                 # -exp(A_log)
        D = self.w[p + "ssm_d"].reshape(H)
        y = np.zeros((T, H, P))
        for head in range(H):
            g = head // (H // G)
            state = np.zeros((P, N))
            for t in range(T):
                state = state * np.exp(dt[t, head] * A[head]) + np.outer(x[t, head] * dt[t, head], B[t, g])
                y[t, head] = state @ C[t, g] + D[head] * x[t, head]
        y = y.reshape(T, inner) * self.silu(gate)
        groups = y.reshape(T, G, inner // G)
        groups = groups / np.sqrt((groups ** 2).mean(-1, keepdims=True) + self.eps)
        y = groups.reshape(T, inner) * self.w[p + "ssm_norm.weight"].reshape(inner)
        return y @ self.w[p + "ssm_out.weight"].T

    def attention(self, i, h):
        p = f"blk.{i}."
        T, hd, n_kv = h.shape[0], self.head_dim, self.kv_heads[i]
        q = (h @ self.w[p + "attn_q.weight"].T).reshape(T, self.n_head, hd)
        k = (h @ self.w[p + "attn_k.weight"].T).reshape(T, n_kv, hd)
        v = (h @ self.w[p + "attn_v.weight"].T).reshape(T, n_kv, hd)
        causal = np.tril(np.ones((T, T), bool))
        out = np.zeros((T, self.n_head, hd))
        per_kv = self.n_head // n_kv
        for j in range(self.n_head):
            scores = q[:, j] @ k[:, j // per_kv].T * self.attention_multiplier
            scores[~causal] = -np.inf
            probs = np.exp(scores - scores.max(1, keepdims=True))
            out[:, j] = (probs / probs.sum(1, keepdims=True)) @ v[:, j // per_kv]
        return out.reshape(T, -1) @ self.w[p + "attn_output.weight"].T

    def swiglu(self, h, gate, up, down):
        return (self.silu(h @ gate.T) * (h @ up.T)) @ down.T

    def ffn(self, i, h):
        """The shared MLP (a dense file's whole FFN) and, in h-tiny/h-small, the block's
        sparse MoE: softmax over the router logits, the top k weights renormalised."""
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
            for e, wt in zip(top, probs[t, top] / probs[t, top].sum()):
                out[t] += wt * self.swiglu(h[t:t + 1], gates[e], ups[e], downs[e])[0]
        return out + self.swiglu(h, self.w[p + "ffn_gate_shexp.weight"], self.w[p + "ffn_up_shexp.weight"],
                                 self.w[p + "ffn_down_shexp.weight"])

    def forward(self, tokens) -> np.ndarray:
        """Logits (T, vocab) at every position of ``tokens`` from position 0."""
        x = self.w["token_embd.weight"][np.asarray(tokens, np.int64)] * self.embedding_multiplier
        for i in range(self.n_layer):
            p = f"blk.{i}."
            h = self.norm(x, self.w[p + "attn_norm.weight"])
            mixed = self.attention(i, h) if self.kv_heads[i] else self.mamba(i, h)
            x = x + self.residual_multiplier * mixed
            x = x + self.residual_multiplier * self.ffn(i, self.norm(x, self.w[p + "ffn_norm.weight"]))
        return self.norm(x, self.w["output_norm.weight"]) @ self.head.T / self.logits_scaling
