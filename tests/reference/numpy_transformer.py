"""A float64 numpy forward pass of a generic pre-norm transformer, written from the
definitions (RMSNorm, rotary embeddings, causal softmax attention with optional
soft-capping and a sliding window, gated FFN), sharing no code with infer.

Weights are dense float64 arrays in a plain dict, named as in GGUF files:
``token_embd``, ``output_norm``, ``output``, and per layer ``blk.N.attn_norm``,
``attn_q``/``attn_k``/``attn_v`` (or ``attn_qkv``), their ``*_bias``,
``attn_q_norm``/``attn_k_norm``, ``attn_output``, ``post_attention_norm``,
``ffn_norm``, ``ffn_gate``/``ffn_up`` (or ``ffn_up`` holding gate then up),
``ffn_down``, ``post_ffw_norm``.  A matrix is (out, in): y = W @ x.

``options`` (a dict) selects the variations; per layer a rope tuple
(layout "norm"/"neox", base, scale, factors or None, attn_factor) or None, and
a window (0 = all); a 6th rope entry, when there, is the number of rotated
elements of a head (the rest pass through).
"""
import numpy as np


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate(x, pos, rope, head_dim):
    """x: (heads, head_dim) at position pos."""
    layout, base, scale, factors, attn_factor = rope[:5]
    rot = rope[5] if len(rope) > 5 and rope[5] else head_dim
    y = x.copy()
    y[:, :rot] = _rotate_first(x[:, :rot], pos, layout, base, scale, factors, attn_factor, rot)
    return y


def _rotate_first(x, pos, layout, base, scale, factors, attn_factor, rot):
    half = rot // 2
    i = np.arange(half)
    freq = scale * base ** (-2.0 * i / rot)
    if factors is not None:
        freq = freq / np.asarray(factors, np.float64)
    c, s = attn_factor * np.cos(pos * freq), attn_factor * np.sin(pos * freq)
    y = x.copy()
    if layout == "neox":
        a, b = x[:, :half], x[:, half:]
        y[:, :half], y[:, half:] = a * c - b * s, a * s + b * c
    else:
        a, b = x[:, 0::2], x[:, 1::2]
        y[:, 0::2], y[:, 1::2] = a * c - b * s, a * s + b * c
    return y


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(weights, options, tokens):
    """Logits (len(tokens), vocab) of tokens at positions 0, 1, ..."""
    o = options
    n_heads, n_kv, hd, eps = o["n_heads"], o["n_kv_heads"], o["head_dim"], o["rms_eps"]
    group = n_heads // n_kv
    scale = o.get("query_scale") or 1.0 / np.sqrt(hd)
    x = weights["token_embd"][tokens] * o.get("embd_scale", 1.0)
    n = len(tokens)
    for li, (rope, window) in enumerate(o["layers"]):
        def W(name, li=li):
            return weights.get(f"blk.{li}.{name}")

        h = rmsnorm(x, W("attn_norm"), eps)
        if W("attn_qkv") is not None:
            qkv = h @ W("attn_qkv").T
            q, k, v = np.split(qkv, [n_heads * hd, (n_heads + n_kv) * hd], axis=1)
        else:
            q, k, v = h @ W("attn_q").T, h @ W("attn_k").T, h @ W("attn_v").T
        if W("attn_q_bias") is not None:
            q, k, v = q + W("attn_q_bias"), k + W("attn_k_bias"), v + W("attn_v_bias")
        q, k, v = q.reshape(n, n_heads, hd), k.reshape(n, n_kv, hd), v.reshape(n, n_kv, hd)
        if W("attn_q_norm") is not None:
            q, k = rmsnorm(q, W("attn_q_norm"), eps), rmsnorm(k, W("attn_k_norm"), eps)
        if rope is not None:
            q = np.stack([rotate(q[t], t, rope, hd) for t in range(n)])
            k = np.stack([rotate(k[t], t, rope, hd) for t in range(n)])
        att = np.zeros((n, n_heads, hd))
        for t in range(n):
            lo = max(0, t - window + 1) if window else 0
            for hh in range(n_heads):
                kv = hh // group
                s = k[lo:t + 1, kv] @ q[t, hh] * scale
                if o.get("attn_softcap"):
                    s = o["attn_softcap"] * np.tanh(s / o["attn_softcap"])
                p = np.exp(s - s.max())
                att[t, hh] = (p / p.sum()) @ v[lo:t + 1, kv]
        a = att.reshape(n, -1) @ W("attn_output").T
        if W("post_attention_norm") is not None:
            a = rmsnorm(a, W("post_attention_norm"), eps)
        x = x + a * o.get("residual_scale", 1.0)
        h = rmsnorm(x, W("ffn_norm"), eps)
        if W("ffn_gate") is not None:
            g, u = h @ W("ffn_gate").T, h @ W("ffn_up").T
        else:
            g, u = np.split(h @ W("ffn_up").T, 2, axis=1)
        act = gelu_tanh if o.get("activation") == "gelu_tanh" else silu
        f = (act(g) * u) @ W("ffn_down").T
        if W("post_ffw_norm") is not None:
            f = rmsnorm(f, W("post_ffw_norm"), eps)
        x = x + f * o.get("residual_scale", 1.0)
    head = weights.get("output", weights["token_embd"])
    logits = rmsnorm(x, weights["output_norm"], eps) @ head.T * o.get("logit_scale", 1.0)
    if o.get("final_softcap"):
        logits = o["final_softcap"] * np.tanh(logits / o["final_softcap"])
    return logits
