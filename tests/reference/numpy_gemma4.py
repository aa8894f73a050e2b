"""A float64 numpy forward pass of Gemma 4 (dense), GGUF architecture ``gemma4``.

Written from llama.cpp's src/models/gemma4.cpp (graph and hyper-parameters), the
layer-reuse rule of src/llama-model.cpp (create_memory) and what
conversion/gemma.py's Gemma4Model writes, sharing no code with infer: the
weights come from the `gguf` package's reader, and the whole prompt is one
matrix computation with explicit causal and sliding-window masks.

    x = E[tokens] * sqrt(n_embd)
    ple = (rmsnorm((x @ W_ple_model.T) / sqrt(n_embd)) per layer, * proj_norm)
           + E_ple[tokens] * sqrt(n_embd_per_layer)) / sqrt(2)        [T, L, P]
    for each layer l (sliding: own head size, rope.freq_base_swa, window mask;
                      full: rope.freq_base, rope_freqs as frequency divisors):
        h = rmsnorm(x) * attn_norm
        q = rmsnorm_per_head(h Wq) * q_norm ; rope(q)
        own K/V:  k = h Wk ; v = h Wv (or k, without Wv)
                  v = rmsnorm_per_head(v) ; k = rmsnorm_per_head(k) * k_norm ; rope(k)
        shared:   k, v of layer n_kv - 2 (sliding) or n_kv - 1 (full), n_kv = L - shared_kv_layers
        x += rmsnorm(softmax(q k^T * 1.0 + mask) v Wo) * post_attention_norm
        x += rmsnorm(((gelu(h2 Wg) * h2 Wu) Wd)) * post_ffw_norm, h2 = rmsnorm(x) * ffn_norm
        x += rmsnorm((gelu(x W_inp_gate) * ple[:, l]) W_proj) * post_norm      (PLE)
        x *= layer_output_scale
    logits = c * tanh((rmsnorm(x) * output_norm) E^T / c)

GELU is the tanh form (ggml_gelu).  NEOX RoPE: pair (i, i + n_rot/2) of a head
turns by pos * base^(-2i/n_rot) / factor_i.
"""
from __future__ import annotations

import math

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class Gemma4Reference:
    def __init__(self, path: str) -> None:
        reader = GGUFReader(path)
        md = {}
        for key, f in reader.fields.items():
            try:
                md[key] = f.contents()
            except Exception:  # noqa: BLE001  (a field type contents() does not decode)
                pass
        self.md = md
        self.w = {}
        for t in reader.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.w[t.name] = a.reshape([int(s) for s in reversed(t.shape)]) if len(t.shape) > 1 else a.reshape(-1)
        g = lambda k, default=None: md.get(f"gemma4.{k}", default)  # noqa: E731
        self.n_layer = int(g("block_count"))
        self.n_embd = int(g("embedding_length"))
        self.n_head = int(g("attention.head_count"))
        kv = g("attention.head_count_kv", self.n_head)
        self.n_kv = [int(x) for x in kv] if isinstance(kv, list) else [int(kv)] * self.n_layer
        self.sliding = [bool(x) for x in g("attention.sliding_window_pattern")]
        self.window = int(g("attention.sliding_window"))
        self.hd_full = int(g("attention.key_length"))
        self.hd_swa = int(g("attention.key_length_swa"))
        self.rot_full = int(g("rope.dimension_count", self.hd_full))
        self.rot_swa = int(g("rope.dimension_count_swa", self.rot_full))
        self.base_full = float(g("rope.freq_base", 10000.0))
        self.base_swa = float(g("rope.freq_base_swa", 10000.0))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.softcap = float(g("final_logit_softcapping", 0.0))
        self.n_shared = int(g("attention.shared_kv_layers", 0))
        self.n_ple = int(g("embedding_length_per_layer_input", 0))
        self.freq_div = self.w.get("rope_freqs.weight")

    def rms(self, x, weight=None):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return y if weight is None else y * weight

    def rope(self, x, pos, sliding):
        """x: (T, heads, hd), NEOX pairs over the first n_rot elements."""
        n_rot = self.rot_swa if sliding else self.rot_full
        base = self.base_swa if sliding else self.base_full
        theta = base ** (-np.arange(n_rot // 2, dtype=np.float64) * 2.0 / n_rot)
        if not sliding and self.freq_div is not None:
            theta = theta / self.freq_div[: n_rot // 2]
        ang = pos[:, None] * theta[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        h = n_rot // 2
        out = x.copy()
        a, b = x[..., :h], x[..., h:n_rot]
        out[..., :h] = a * c - b * s
        out[..., h:n_rot] = a * s + b * c
        return out

    def source_layer(self, il):
        """The layer whose K/V layer il attends to (llama.cpp's reuse callback)."""
        n_kv_from = self.n_layer - self.n_shared
        if il < n_kv_from:
            return il
        return n_kv_from - (2 if self.sliding[il] else 1)

    def forward(self, tokens) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        T = len(tokens)
        w, d, L = self.w, self.n_embd, self.n_layer
        pos = np.arange(T, dtype=np.float64)
        x = w["token_embd.weight"][tokens] * math.sqrt(d)
        ple = None
        if self.n_ple:
            P = self.n_ple
            sel = w["per_layer_token_embd.weight"][tokens].reshape(T, L, P) * math.sqrt(P)
            proj = (x @ w["per_layer_model_proj.weight"].T / math.sqrt(d)).reshape(T, L, P)
            ple = (self.rms(proj, w["per_layer_proj_norm.weight"]) + sel) / math.sqrt(2.0)
        causal = pos[None, :] <= pos[:, None]             # [query, key]
        windowed = causal & (pos[:, None] - pos[None, :] < self.window)
        kv = {}
        for il in range(L):
            p = f"blk.{il}."
            sliding = self.sliding[il]
            hd = self.hd_swa if sliding else self.hd_full
            h = self.rms(x, w[p + "attn_norm.weight"])
            q = (h @ w[p + "attn_q.weight"].T).reshape(T, self.n_head, hd)
            q = self.rope(self.rms(q, w[p + "attn_q_norm.weight"]), pos, sliding)
            src = self.source_layer(il)
            if src == il:
                k = (h @ w[p + "attn_k.weight"].T).reshape(T, self.n_kv[il], hd)
                v = (h @ w[p + "attn_v.weight"].T).reshape(T, self.n_kv[il], hd) if p + "attn_v.weight" in w else k
                v = self.rms(v)
                k = self.rope(self.rms(k, w[p + "attn_k_norm.weight"]), pos, sliding)
                kv[il] = (k, v)
            k, v = kv[src]
            group = self.n_head // k.shape[1]
            k = np.repeat(k, group, axis=1)
            v = np.repeat(v, group, axis=1)
            scores = np.einsum("qhd,khd->hqk", q, k)        # attention scale 1.0
            mask = windowed if sliding else causal
            scores = np.where(mask[None], scores, -np.inf)
            scores -= scores.max(-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(-1, keepdims=True)
            att = np.einsum("hqk,khd->qhd", probs, v).reshape(T, -1)
            x = x + self.rms(att @ w[p + "attn_output.weight"].T, w[p + "post_attention_norm.weight"])
            h2 = self.rms(x, w[p + "ffn_norm.weight"])
            f = _gelu(h2 @ w[p + "ffn_gate.weight"].T) * (h2 @ w[p + "ffn_up.weight"].T)
            x = x + self.rms(f @ w[p + "ffn_down.weight"].T, w[p + "post_ffw_norm.weight"])
            if ple is not None:
                gpe = _gelu(x @ w[p + "inp_gate.weight"].T) * ple[:, il, :]
                x = x + self.rms(gpe @ w[p + "proj.weight"].T, w[p + "post_norm.weight"])
            if p + "layer_output_scale.weight" in w:
                x = x * w[p + "layer_output_scale.weight"][0]
        logits = self.rms(x, w["output_norm.weight"]) @ w.get("output.weight", w["token_embd.weight"]).T
        if self.softcap:
            logits = self.softcap * np.tanh(logits / self.softcap)
        return logits
