"""A float64 numpy forward pass of TII's Falcon-H1 (GGUF ``falcon-h1``), written from HF
transformers' FalconH1 modelling (FalconH1DecoderLayer: attention and the Mamba2 mixer
on the same input_layernorm output, each output times its multiplier, summed into the
residual; FalconH1Mixer's torch_forward with its recurrent step and the muP vector on
in_proj's z, x, B, C and dt; FalconH1RMSNormGated with the gate before the norm;
FalconH1MLP with its gate and down multipliers; rotate_half RoPE), with HF's names.

It runs either of two inputs:

* `from_checkpoint`: an HF checkpoint as tests/tiny_models.falcon_h1_checkpoint draws
  it, float64 and unfolded, with the config's multipliers applied where HF applies
  them: what the converter's folding must reproduce;
* `from_gguf`: a GGUF file's tensors (read by the `gguf` package), renamed back to HF's
  (A_log = log(-ssm_a), the conv (channels, 1, K), ``blk.N.ffn_norm``), every
  multiplier 1 since the converter folded them into the weights: the tight reference
  for infer, as the file's F16 values are exactly what both infer and llama.cpp read.

It shares no code with infer nor with the other references.  Slow and plain on purpose.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import gguf_file


@dataclasses.dataclass
class Multipliers:
    """FalconH1Config's muP multipliers (all 1: a converted file's, folded already)."""

    embedding: float = 1.0
    lm_head: float = 1.0
    attention_in: float = 1.0
    attention_out: float = 1.0
    key: float = 1.0
    ssm_in: float = 1.0
    ssm_out: float = 1.0
    mlp: tuple = (1.0, 1.0)
    ssm: tuple = (1.0, 1.0, 1.0, 1.0, 1.0)


class FalconH1:
    """Sizes from the GGUF keys (the same either way); weights by HF name."""

    #: take the Mamba2 mixer out (a test of what the recorded logits tell apart)
    with_mamba = True
    #: take the attention out
    with_attention = True

    def __init__(self, meta, weights, mult: Multipliers) -> None:
        arch = meta["general.architecture"]
        assert arch == "falcon-h1"

        def get(key, default=None):
            return meta.get(f"{arch}.{key}", default)

        self.w, self.m = weights, mult
        self.n_layer = int(get("block_count"))
        self.n_head = int(get("attention.head_count"))
        self.n_kv = int(get("attention.head_count_kv"))
        self.head_dim = int(get("attention.key_length"))
        self.eps = float(get("attention.layer_norm_rms_epsilon"))
        self.theta = float(get("rope.freq_base"))
        self.K = int(get("ssm.conv_kernel"))
        self.d_state = int(get("ssm.state_size"))
        self.d_inner = int(get("ssm.inner_size"))
        self.n_ssm_heads = int(get("ssm.time_step_rank"))
        self.n_groups = int(get("ssm.group_count"))

    @classmethod
    def from_checkpoint(cls, path, checkpoint, mult: Multipliers):
        """The unfolded checkpoint (float64, HF names) with the config's multipliers;
        the file at path gives the sizes only."""
        meta, _ = gguf_file.read(path)
        return cls(meta, checkpoint, mult)

    @classmethod
    def from_gguf(cls, path):
        meta, t = gguf_file.read(path)
        w = {"model.embed_tokens.weight": t["token_embd.weight"],
             "model.final_layernorm.weight": t["output_norm.weight"],
             "lm_head.weight": t.get("output.weight", t["token_embd.weight"])}
        names = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
                 "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
                 "attn_output.weight": "self_attn.o_proj.weight", "ssm_in.weight": "mamba.in_proj.weight",
                 "ssm_conv1d.bias": "mamba.conv1d.bias", "ssm_dt.bias": "mamba.dt_bias",
                 "ssm_out.weight": "mamba.out_proj.weight", "ffn_norm": "pre_ff_layernorm.weight",
                 "ffn_gate.weight": "feed_forward.gate_proj.weight", "ffn_up.weight": "feed_forward.up_proj.weight",
                 "ffn_down.weight": "feed_forward.down_proj.weight"}
        for name, value in t.items():
            if not name.startswith("blk."):
                continue
            _, i, part = name.split(".", 2)
            p = f"model.layers.{i}."
            if part in names:
                w[p + names[part]] = value
            elif part == "ssm_conv1d.weight":
                w[p + "mamba.conv1d.weight"] = value[:, None, :]
            elif part == "ssm_a":
                w[p + "mamba.A_log"] = np.log(-value.reshape(-1))
            elif part == "ssm_d":
                w[p + "mamba.D"] = value.reshape(-1)
            elif part == "ssm_norm.weight":
                w[p + "mamba.norm.weight"] = value.reshape(-1)
            else:
                raise KeyError(f"{name}: not a Falcon-H1 tensor")
        return cls(meta, w, Multipliers())

    def rmsnorm(self, x, weight):
        return x * weight / np.sqrt((x ** 2).mean(-1, keepdims=True) + self.eps)

    @staticmethod
    def silu(x):
        return x / (1 + np.exp(-x))

    def rope(self, x):
        """rotate_half RoPE on (T, heads, head_dim) at positions 0..T-1."""
        T, hd = x.shape[0], self.head_dim
        inv = 1.0 / self.theta ** (np.arange(0, hd, 2) / hd)
        ang = np.arange(T)[:, None] * inv[None, :]
        cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
        sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
        rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos + rot * sin

    def attention(self, i, h):
        p, m = f"model.layers.{i}.self_attn.", self.m
        T, hd = h.shape[0], self.head_dim
        h = h * m.attention_in
        q = (h @ self.w[p + "q_proj.weight"].T).reshape(T, self.n_head, hd)
        k = (h @ self.w[p + "k_proj.weight"].T * m.key).reshape(T, self.n_kv, hd)
        v = (h @ self.w[p + "v_proj.weight"].T).reshape(T, self.n_kv, hd)
        q, k = self.rope(q), self.rope(k)
        causal = np.tril(np.ones((T, T), bool))
        out = np.zeros((T, self.n_head, hd))
        group = self.n_head // self.n_kv
        for j in range(self.n_head):
            scores = q[:, j] @ k[:, j // group].T / np.sqrt(hd)
            scores[~causal] = -np.inf
            probs = np.exp(scores - scores.max(1, keepdims=True))
            out[:, j] = (probs / probs.sum(1, keepdims=True)) @ v[:, j // group]
        return out.reshape(T, -1) @ self.w[p + "o_proj.weight"].T * m.attention_out

    def mamba(self, i, h):
        p, m = f"model.layers.{i}.mamba.", self.m
        T, K, N, G, H = h.shape[0], self.K, self.d_state, self.n_groups, self.n_ssm_heads
        inner, P = self.d_inner, self.d_inner // H
        conv_dim = inner + 2 * G * N
        mup = np.concatenate([np.full(inner, m.ssm[0]), np.full(inner, m.ssm[1]), np.full(G * N, m.ssm[2]),
                              np.full(G * N, m.ssm[3]), np.full(H, m.ssm[4])])
        proj = (h * m.ssm_in) @ self.w[p + "in_proj.weight"].T * mup
        gate, xbc, dt = proj[:, :inner], proj[:, inner:inner + conv_dim], proj[:, inner + conv_dim:]
        taps = self.w[p + "conv1d.weight"][:, 0, :]                        # (conv_dim, K)
        padded = np.vstack([np.zeros((K - 1, conv_dim)), xbc])
        conv = np.stack([(padded[t:t + K] * taps.T).sum(0) for t in range(T)])
        conv = self.silu(conv + self.w[p + "conv1d.bias"])
        x = conv[:, :inner].reshape(T, H, P)
        B = conv[:, inner:inner + G * N].reshape(T, G, N)
        C = conv[:, inner + G * N:].reshape(T, G, N)
        dt = np.log1p(np.exp(dt + self.w[p + "dt_bias"]))                  # (T, H)
        A = -np.exp(self.w[p + "A_log"])
        D = self.w[p + "D"]
        y = np.zeros((T, H, P))
        for head in range(H):
            g = head // (H // G)
            state = np.zeros((P, N))
            for t in range(T):
                state = state * np.exp(dt[t, head] * A[head]) + np.outer(x[t, head] * dt[t, head], B[t, g])
                y[t, head] = state @ C[t, g] + D[head] * x[t, head]
        y = y.reshape(T, inner) * self.silu(gate)
        if p + "norm.weight" in self.w:   # mamba_rms_norm: per group, after the gate
            groups = y.reshape(T, G, inner // G)
            groups = groups / np.sqrt((groups ** 2).mean(-1, keepdims=True) + self.eps)
            y = groups.reshape(T, inner) * self.w[p + "norm.weight"]
        return y @ self.w[p + "out_proj.weight"].T * m.ssm_out

    def mlp(self, i, h):
        p, m = f"model.layers.{i}.feed_forward.", self.m
        gate = h @ self.w[p + "gate_proj.weight"].T * m.mlp[0]
        return (self.silu(gate) * (h @ self.w[p + "up_proj.weight"].T)) @ self.w[p + "down_proj.weight"].T * m.mlp[1]

    def forward(self, tokens) -> np.ndarray:
        """Logits (T, vocab) at every position of ``tokens`` from position 0."""
        x = self.w["model.embed_tokens.weight"][np.asarray(tokens, np.int64)] * self.m.embedding
        for i in range(self.n_layer):
            p = f"model.layers.{i}."
            h = self.rmsnorm(x, self.w[p + "input_layernorm.weight"])
            mixed = np.zeros_like(x)
            if self.with_attention:
                mixed = mixed + self.attention(i, h)
            if self.with_mamba:
                mixed = mixed + self.mamba(i, h)
            x = x + mixed
            x = x + self.mlp(i, self.rmsnorm(x, self.w[p + "pre_ff_layernorm.weight"]))
        x = self.rmsnorm(x, self.w["model.final_layernorm.weight"])
        return x @ self.w["lm_head.weight"].T * self.m.lm_head
