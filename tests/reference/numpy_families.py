"""Float64 numpy forward passes of the Llama-shaped families: qwen2, qwen3, phi3,
gemma2, llama (with llama3 / linear / YaRN RoPE scaling), smollm3, granite, and
the dense families olmo2 (OLMo 2/3), exaone4, exaone, ernie4_5, gemma,
hunyuan-dense, arcee (Llama with a ReLU² FFN without a gate), apertus (xIELU) and
mistral3 (Ministral 3).

Written from each architecture's definition (the HF modelling code and
llama.cpp's src/models/<arch>.cpp for what the GGUF files hold), sharing no code
with infer: weights come from the `gguf` package's reader.  Slow and plain on
purpose; tests compare the variants' logits against ``forward(tokens)``.

What differs per family is stated in its class below; ``Transformer`` holds the
common pre-norm decoder:

    x = embed(tokens) [* scale]
    for each layer:  x += attn(norm(x)) ;  x += ffn(norm(x))
    logits = norm(x) @ head.T

RoPE conventions (GGUF): NORM rotates pairs (2i, 2i+1) of the first n_rot
elements of a head, NEOX pairs (i, i + n_rot/2).  Pair i turns by
pos * base^(-2i/n_rot), divided by a per-pair factor where the file gives one
(llama3's rope_freqs, phi3's LongRoPE), with cos/sin multiplied by a
magnitude factor (LongRoPE's attn_factor, YaRN's 0.1 ln(s) + 1).
"""
from __future__ import annotations

import math

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _fields(reader):
    out = {}
    for k, f in reader.fields.items():
        try:
            out[k] = f.contents()
        except Exception:  # noqa: BLE001  (a field type contents() does not decode)
            pass
    return out


class Transformer:
    neox = False
    qkv_bias = False
    qk_norm = False
    #: the per-head q/k norms after RoPE rather than before it
    qk_norm_after_rope = False
    #: layers whose attention uses no RoPE
    def no_rope(self, layer):
        return False

    def __init__(self, path: str, n_ctx: int = 0) -> None:
        r = GGUFReader(path)
        md = _fields(r)
        self.arch = a = md["general.architecture"]
        self.md = md

        def get(key, default=None):
            return md.get(f"{a}.{key}", default)

        self.n_layer = int(get("block_count"))
        self.dim = int(get("embedding_length"))
        self.n_head = int(get("attention.head_count"))
        self.n_kv_head = int(get("attention.head_count_kv", self.n_head))
        self.head_dim = int(get("attention.key_length", self.dim // self.n_head))
        self.n_rot = int(get("rope.dimension_count", self.head_dim))
        self.base = float(get("rope.freq_base", 10000.0))
        # (LayerNorm families, Cohere, have the other key)
        self.eps = float(get("attention.layer_norm_rms_epsilon", get("attention.layer_norm_epsilon")))
        self.n_ctx_train = int(get("context_length"))
        self.n_ctx = n_ctx or self.n_ctx_train
        self.get = get
        self.t = {}
        for t in r.tensors:
            a_ = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.t[t.name] = a_.reshape([int(s) for s in reversed(t.shape)]) if len(t.shape) > 1 else a_.reshape(-1)
        self.head = self.t.get("output.weight", self.t["token_embd.weight"])
        self.rope_setup()

    # ---- pieces ----------------------------------------------------------------------
    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope_setup(self):
        """Per-pair angular frequencies and the cos/sin magnitude (no scaling)."""
        self.inv_freq = self.base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot)
        self.mscale = 1.0
        self.pos_scale = 1.0

    def rope(self, x, pos):
        """x: (T, heads, head_dim); rotates the first n_rot elements of each head."""
        ang = (pos[:, None] * self.pos_scale) * self.inv_freq[None, :]
        cos = (np.cos(ang) * self.mscale)[:, None, :]
        sin = (np.sin(ang) * self.mscale)[:, None, :]
        out = x.copy()
        r = self.n_rot
        if self.neox:
            a, b = x[..., : r // 2], x[..., r // 2: r]
            out[..., : r // 2] = a * cos - b * sin
            out[..., r // 2: r] = a * sin + b * cos
        else:
            a, b = x[..., 0:r:2], x[..., 1:r:2]
            out[..., 0:r:2] = a * cos - b * sin
            out[..., 1:r:2] = a * sin + b * cos
        return out

    def embed(self, tokens):
        return self.t["token_embd.weight"][tokens].copy()

    def qkv(self, i, h):
        p = f"blk.{i}."
        q = h @ self.t[p + "attn_q.weight"].T
        k = h @ self.t[p + "attn_k.weight"].T
        v = h @ self.t[p + "attn_v.weight"].T
        if self.qkv_bias:
            q, k, v = q + self.t[p + "attn_q.bias"], k + self.t[p + "attn_k.bias"], v + self.t[p + "attn_v.bias"]
        return q, k, v

    def ffn(self, i, h):
        p = f"blk.{i}."
        g = h @ self.t[p + "ffn_gate.weight"].T
        u = h @ self.t[p + "ffn_up.weight"].T
        return (g / (1.0 + np.exp(-g)) * u) @ self.t[p + "ffn_down.weight"].T

    def attn_scale(self):
        return 1.0 / math.sqrt(self.head_dim)

    def window(self, layer):
        """Positions a query sees (including its own), 0 = all."""
        return 0

    def score_cap(self):
        return 0.0

    def attention(self, i, h, pos):
        T, hd = len(pos), self.head_dim
        q, k, v = self.qkv(i, h)
        q = q.reshape(T, self.n_head, hd)
        k = k.reshape(T, self.n_kv_head, hd)
        v = v.reshape(T, self.n_kv_head, hd)
        if self.qk_norm and not self.qk_norm_after_rope:
            q = self.rmsnorm(q, self.t[f"blk.{i}.attn_q_norm.weight"])
            k = self.rmsnorm(k, self.t[f"blk.{i}.attn_k_norm.weight"])
        if not self.no_rope(i):
            q, k = self.rope(q, pos), self.rope(k, pos)
        if self.qk_norm and self.qk_norm_after_rope:
            q = self.rmsnorm(q, self.t[f"blk.{i}.attn_q_norm.weight"])
            k = self.rmsnorm(k, self.t[f"blk.{i}.attn_k_norm.weight"])
        visible = pos[None, :] <= pos[:, None]
        w = self.window(i)
        if w:
            visible &= pos[None, :] > pos[:, None] - w
        group = self.n_head // self.n_kv_head
        out = np.empty((T, self.n_head, hd))
        cap = self.score_cap()
        for hh in range(self.n_head):
            s = q[:, hh] @ k[:, hh // group].T * self.attn_scale()
            if cap:
                s = cap * np.tanh(s / cap)
            s = np.where(visible, s, -np.inf)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, hh] = s @ v[:, hh // group]
        return out.reshape(T, -1) @ self.t[f"blk.{i}.attn_output.weight"].T

    def block(self, i, x, pos):
        p = f"blk.{i}."
        x = x + self.attention(i, self.rmsnorm(x, self.t[p + "attn_norm.weight"]), pos)
        return x + self.ffn(i, self.rmsnorm(x, self.t[p + "ffn_norm.weight"]))

    def logits(self, x):
        return self.rmsnorm(x, self.t["output_norm.weight"]) @ self.head.T

    def forward(self, tokens) -> np.ndarray:
        """Logits (T, vocab) of every position of ``tokens`` from position 0."""
        tokens = np.asarray(tokens, dtype=np.int64)
        pos = np.arange(len(tokens), dtype=np.float64)
        x = self.embed(tokens)
        for i in range(self.n_layer):
            x = self.block(i, x, pos)
        return self.logits(x)


class Llama(Transformer):
    """NORM RoPE.  Scaling from the file: ``rope_freqs.weight`` (llama3: the
    converter's per-pair divisors), or ``rope.scaling.type`` linear (positions
    divided by the factor) or yarn (below)."""

    def rope_setup(self):
        super().rope_setup()
        kind = self.get("rope.scaling.type", "none")
        factor = float(self.get("rope.scaling.factor", 1.0) or 1.0)
        if "rope_freqs.weight" in self.t:
            self.inv_freq = self.inv_freq / self.t["rope_freqs.weight"]
        if kind == "linear":
            self.pos_scale = 1.0 / factor
        elif kind == "yarn":
            self._yarn(factor)

    def _yarn(self, factor, beta_fast=32.0, beta_slow=1.0):
        """YaRN (Peng et al. 2023; HF `_compute_yarn_parameters`): pairs that turn
        more than beta_fast times in the original context keep their frequency,
        those under beta_slow are interpolated (divided by factor), a linear ramp
        between; cos/sin scaled by 0.1 ln(factor) + 1."""
        orig = float(self.get("rope.scaling.original_context_length", self.n_ctx_train))
        d = self.n_rot

        def corr_dim(n_turns):
            return d * math.log(orig / (n_turns * 2 * math.pi)) / (2 * math.log(self.base))

        low = max(math.floor(corr_dim(beta_fast)), 0)
        high = min(math.ceil(corr_dim(beta_slow)), d - 1)
        ramp = np.clip((np.arange(d // 2) - low) / max(high - low, 0.001), 0, 1)
        extrapolate = 1.0 - ramp
        self.inv_freq = self.inv_freq / factor * (1 - extrapolate) + self.inv_freq * extrapolate
        self.mscale = 0.1 * math.log(factor) + 1.0


class Qwen2(Llama):
    """Biases on q, k, v; NEOX RoPE."""
    neox = True
    qkv_bias = True


class Qwen3(Llama):
    """Per-head RMSNorm on q and k before RoPE, no biases; NEOX RoPE; head_dim
    from attention.key_length (n_head * head_dim may differ from dim)."""
    neox = True
    qk_norm = True


class Phi3(Transformer):
    """Fused ``attn_qkv`` (rows: q, then k, then v) and fused ``ffn_up`` (rows:
    gate, then up; silu(gate) * up).  NEOX RoPE over the first
    rope.dimension_count elements.  LongRoPE: ``rope_factors_long`` when the
    context exceeds rope.scaling.original_context_length, else
    ``rope_factors_short``; cos/sin scaled by rope.scaling.attn_factor.
    (The sliding window in the metadata is ignored, as llama.cpp does.)"""
    neox = True

    def rope_setup(self):
        super().rope_setup()
        orig = int(self.get("rope.scaling.original_context_length", self.n_ctx_train))
        name = "rope_factors_long.weight" if self.n_ctx > orig else "rope_factors_short.weight"
        if name in self.t:
            self.inv_freq = self.inv_freq / self.t[name]
        self.mscale = float(self.get("rope.scaling.attn_factor", 1.0))

    def qkv(self, i, h):
        qkv = h @ self.t[f"blk.{i}.attn_qkv.weight"].T
        nq, nkv = self.n_head * self.head_dim, self.n_kv_head * self.head_dim
        return qkv[:, :nq], qkv[:, nq:nq + nkv], qkv[:, nq + nkv:]

    def ffn(self, i, h):
        gu = h @ self.t[f"blk.{i}.ffn_up.weight"].T
        n = gu.shape[1] // 2
        g, u = gu[:, :n], gu[:, n:]
        return (g / (1.0 + np.exp(-g)) * u) @ self.t[f"blk.{i}.ffn_down.weight"].T


class Gemma2(Transformer):
    """x0 = embed * sqrt(dim); NEOX RoPE; even layers see a window of
    attention.sliding_window positions, odd layers everything; scores
    soft-capped cap * tanh(s / cap) (attn_logit_softcapping) after the
    head_dim^-0.5 scale, final logits capped likewise (final_logit_softcapping);
    post-attention and post-FFN RMSNorms on each half's output; GeGLU with the
    tanh GELU.  Norm weights in the file already hold Gemma's 1 + w; tied head."""
    neox = True

    def embed(self, tokens):
        return super().embed(tokens) * math.sqrt(self.dim)

    def window(self, layer):
        return int(self.get("attention.sliding_window", 4096)) if layer % 2 == 0 else 0

    def score_cap(self):
        return float(self.get("attn_logit_softcapping", 50.0))

    def ffn(self, i, h):
        p = f"blk.{i}."
        g = h @ self.t[p + "ffn_gate.weight"].T
        u = h @ self.t[p + "ffn_up.weight"].T
        gelu = 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g ** 3)))
        return (gelu * u) @ self.t[p + "ffn_down.weight"].T

    def block(self, i, x, pos):
        p = f"blk.{i}."
        a = self.attention(i, self.rmsnorm(x, self.t[p + "attn_norm.weight"]), pos)
        x = x + self.rmsnorm(a, self.t[p + "post_attention_norm.weight"])
        f = self.ffn(i, self.rmsnorm(x, self.t[p + "ffn_norm.weight"]))
        return x + self.rmsnorm(f, self.t[p + "post_ffw_norm.weight"])

    def logits(self, x):
        cap = float(self.get("final_logit_softcapping", 30.0))
        return cap * np.tanh(super().logits(x) / cap)


class SmolLM3(Llama):
    """Llama with no RoPE in every 4th layer (HF no_rope_layer_interval = 4:
    layers 3, 7, 11, ... use no position embedding)."""

    def no_rope(self, layer):
        return (layer + 1) % 4 == 0


class Granite(Llama):
    """Llama with multipliers: x0 = embed * embedding_scale; each block half's
    output times residual_scale before the add; scores times attention.scale
    (instead of head_dim^-0.5); logits divided by logit_scale."""

    def embed(self, tokens):
        return super().embed(tokens) * float(self.get("embedding_scale", 1.0))

    def attn_scale(self):
        return float(self.get("attention.scale"))

    def block(self, i, x, pos):
        p = f"blk.{i}."
        r = float(self.get("residual_scale", 1.0))
        x = x + r * self.attention(i, self.rmsnorm(x, self.t[p + "attn_norm.weight"]), pos)
        return x + r * self.ffn(i, self.rmsnorm(x, self.t[p + "ffn_norm.weight"]))

    def logits(self, x):
        return super().logits(x) / float(self.get("logit_scale", 1.0))


class Experts:
    """A mixture of experts for the FFN (mixed into a family below), from the
    definitions of HF's Qwen3MoeSparseMoeBlock / GraniteMoeMoE and llama.cpp's
    build_moe_ffn: p = softmax(h @ ffn_gate_inp.T) over expert_count experts;
    the expert_used_count most probable run, SwiGLU with their slices of the
    3-D ffn_{gate,up,down}_exps (numpy (expert, out, in)); their outputs are
    summed weighted by p, renormalised to sum 1 when ``norm_topk``.

    ``gaps[layer]`` keeps, per position, the router-logit gap between the last
    expert chosen and the first one left out: where it is small, rounding may
    route differently.  ``follow`` lets a test give the experts another
    implementation chose ({layer: (positions, experts)}): at a position whose
    gap is below ``follow_gap`` the reference takes that choice (the rounding
    decided a near-tie; both are right), anywhere else it keeps its own, and
    ``followed`` / ``disagreed`` count the positions where they differed."""
    norm_topk = True
    follow: dict = {}
    follow_gap = 0.0

    def ffn(self, i, h):
        p = f"blk.{i}."
        k = int(self.get("expert_used_count"))
        logits = h @ self.t[p + "ffn_gate_inp.weight"].T
        order = np.argsort(-logits, axis=1, kind="stable")
        ranked = np.take_along_axis(logits, order, axis=1)
        self.gaps = getattr(self, "gaps", {})
        self.router_logits = getattr(self, "router_logits", {})
        self.router_logits[i] = logits
        self.gaps[i] = ranked[:, k - 1] - ranked[:, k] if k < logits.shape[1] else np.full(len(h), np.inf)
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        chosen = order[:, :k].copy()
        if i in self.follow:
            positions, theirs = self.follow[i]
            for t, e in zip(positions, theirs):
                if set(e) == set(chosen[t]):
                    continue
                if self.gaps[i][t] < self.follow_gap:
                    chosen[t] = e
                    self.followed = getattr(self, "followed", 0) + 1
                else:
                    self.disagreed = getattr(self, "disagreed", 0) + 1
        weight = np.take_along_axis(probs, chosen, axis=1)
        if self.norm_topk:
            weight = weight / weight.sum(axis=1, keepdims=True)
        gate, up, down = (self.t[p + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
        out = np.zeros_like(h)
        for t in range(len(h)):
            for e, wt in zip(chosen[t], weight[t]):
                g = gate[e] @ h[t]
                out[t] += wt * (down[e] @ (g / (1.0 + np.exp(-g)) * (up[e] @ h[t])))
        return out


class Qwen3MoE(Experts, Qwen3):
    """Qwen 3's attention; experts renormalised (norm_topk_prob = true)."""


class OLMoE(Experts, Transformer):
    """NEOX RoPE; RMSNorm over all of q and all of k (HF OlmoeAttention's q_norm /
    k_norm of hidden_size and kv width) before the heads are split; expert
    weights not renormalised (norm_topk_prob = false)."""
    neox = True
    norm_topk = False

    def qkv(self, i, h):
        q, k, v = super().qkv(i, h)
        return (self.rmsnorm(q, self.t[f"blk.{i}.attn_q_norm.weight"]),
                self.rmsnorm(k, self.t[f"blk.{i}.attn_k_norm.weight"]), v)


class Qwen2MoE(Experts, Qwen2):
    """Qwen 2's attention; experts not renormalised (norm_topk_prob = false), and
    HF Qwen2MoeSparseMoeBlock's shared expert: its SwiGLU output times
    sigmoid(h . shared_expert_gate) added to the routed sum."""
    norm_topk = False

    def ffn(self, i, h):
        p = f"blk.{i}."
        g = h @ self.t[p + "ffn_gate_shexp.weight"].T
        u = h @ self.t[p + "ffn_up_shexp.weight"].T
        shared = (g / (1.0 + np.exp(-g)) * u) @ self.t[p + "ffn_down_shexp.weight"].T
        gate = 1.0 / (1.0 + np.exp(-(h @ self.t[p + "ffn_gate_inp_shexp.weight"])))
        return super().ffn(i, h) + gate[:, None] * shared


class GraniteMoE(Experts, Granite):
    """Granite's multipliers; experts renormalised (GraniteMoeTopKGating divides
    the softmax of the top-k logits, which is the same thing)."""


class PostNormOnly(Llama):
    """No norm before either block half; each half's output is RMS-normed
    (post_attention_norm, post_ffw_norm) before its residual add."""

    def block(self, i, x, pos):
        p = f"blk.{i}."
        x = x + self.rmsnorm(self.attention(i, x, pos), self.t[p + "post_attention_norm.weight"])
        return x + self.rmsnorm(self.ffn(i, x), self.t[p + "post_ffw_norm.weight"])


class Olmo2(PostNormOnly):
    """HF Olmo2/Olmo3: post norms only; q and k RMS-normed over the whole
    projection (all heads together, q_dim / kv_dim weights) before RoPE; NEOX RoPE.
    With attention.sliding_window (OLMo 3), layers l with l % 4 != 3 see that
    window and rotate without the file's RoPE scaling (HF: the default rotary
    embedding for sliding layers)."""
    neox = True

    def qkv(self, i, h):
        q, k, v = super().qkv(i, h)
        return self.rmsnorm(q, self.t[f"blk.{i}.attn_q_norm.weight"]), \
            self.rmsnorm(k, self.t[f"blk.{i}.attn_k_norm.weight"]), v

    def sliding(self, layer):
        """llama.cpp's set_swa_pattern(n): layer l slides when l % n < n - 1, every
        layer when n is 0 (n: attention.sliding_window_pattern, default 4)."""
        n = int(self.get("attention.sliding_window_pattern", 4))
        return bool(self.get("attention.sliding_window", 0)) and (n == 0 or layer % n < n - 1)

    def window(self, layer):
        return int(self.get("attention.sliding_window", 0)) if self.sliding(layer) else 0

    def block(self, i, x, pos):
        if not self.sliding(i):
            return super().block(i, x, pos)
        scaled = self.inv_freq, self.mscale
        self.inv_freq = self.base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot)
        self.mscale = 1.0
        try:
            return super().block(i, x, pos)
        finally:
            self.inv_freq, self.mscale = scaled


class Exaone4(PostNormOnly):
    """HF Exaone4: post norms only, per-head q/k RMSNorm before RoPE, NEOX RoPE
    (llama3 factors from rope_freqs).  The 64-layer model: layers l with
    l % 4 != 3 slide attention.sliding_window, the others use no RoPE."""
    neox = True
    qk_norm = True

    def swa(self):
        return self.n_layer == 64

    def window(self, layer):
        return int(self.get("attention.sliding_window", 4096)) if self.swa() and layer % 4 != 3 else 0

    def no_rope(self, layer):
        return self.swa() and layer % 4 == 3


class Exaone(Llama):
    """EXAONE 3.x: Llama with NEOX RoPE."""
    neox = True


class Ernie4_5(Llama):
    """ERNIE 4.5 dense: Llama (NORM RoPE)."""


class Gemma(Transformer):
    """Gemma 1: x0 = embed * sqrt(dim); NEOX RoPE; GeGLU with the tanh GELU;
    plain pre-norm blocks (norm weights hold 1 + w already); tied head."""
    neox = True
    ffn = Gemma2.ffn

    def embed(self, tokens):
        return super().embed(tokens) * math.sqrt(self.dim)


class HunyuanDense(Llama):
    """HF HunYuanDenseV1: per-head q/k RMSNorm after RoPE (not before); NEOX RoPE;
    rope.scaling.alpha, where given, raises the base to base * alpha^(d / (d - 2))
    (NTK-aware scaling, d the head size)."""
    neox = True
    qk_norm = True
    qk_norm_after_rope = True

    def rope_setup(self):
        alpha = float(self.get("rope.scaling.alpha", 0.0))
        if alpha:
            self.base = self.base * alpha ** (self.head_dim / (self.head_dim - 2))
        super().rope_setup()


class Arcee(Llama):
    """HF ArceeMLP: down_proj(relu(up_proj(x))^2), no gate projection."""

    def ffn(self, i, h):
        up = h @ self.t[f"blk.{i}.ffn_up.weight"].T
        return np.maximum(up, 0.0) ** 2 @ self.t[f"blk.{i}.ffn_down.weight"].T


class Apertus(Llama):
    """HF ApertusMLP: down_proj(xIELU(up_proj(x))), no gate; per-head q/k RMSNorm
    before NEOX RoPE.  HF XIELUActivation, with the layer's trained parameters (the
    GGUF's global arrays xielu.*): alpha_p = softplus(alpha_p), alpha_n = beta +
    softplus(alpha_n); x > 0: alpha_p x^2 + beta x, else (expm1(min(x, eps)) - x)
    alpha_n + beta x."""
    neox = True
    qk_norm = True

    def ffn(self, i, h):
        def param(key):
            v = self.md[key]
            return float(v[i] if isinstance(v, list) else v)

        beta, eps = param("xielu.beta"), param("xielu.eps")
        alpha_p = np.log1p(np.exp(param("xielu.alpha_p")))
        alpha_n = beta + np.log1p(np.exp(param("xielu.alpha_n")))
        x = h @ self.t[f"blk.{i}.ffn_up.weight"].T
        act = np.where(x > 0, alpha_p * x * x + beta * x, (np.expm1(np.minimum(x, eps)) - x) * alpha_n + beta * x)
        return act @ self.t[f"blk.{i}.ffn_down.weight"].T


FAMILIES = {"llama": Llama, "qwen2": Qwen2, "qwen3": Qwen3, "phi3": Phi3, "gemma2": Gemma2,
            "smollm3": SmolLM3, "granite": Granite, "olmo2": Olmo2, "exaone4": Exaone4, "exaone": Exaone,
            "ernie4_5": Ernie4_5, "gemma": Gemma, "hunyuan-dense": HunyuanDense,
            "qwen3moe": Qwen3MoE, "granitemoe": GraniteMoE, "olmoe": OLMoE, "qwen2moe": Qwen2MoE,
            "arcee": Arcee, "apertus": Apertus}


class Mistral3(Llama):
    """Ministral 3 (HF Ministral3ForCausalLM): a Llama with YaRN whose beta_fast,
    beta_slow and mscale_all_dim (``yarn_log_multiplier``) come from the file, the
    YaRN magnitude get_mscale(s, 1) / get_mscale(s, mscale_all_dim) (HF's
    ``_compute_yarn_parameters`` with mscale 1), and Llama 4's attention temperature
    (HF ``_get_llama_4_attn_scale``): the query at position p times
    1 + beta * ln(1 + floor(p / original_max_position_embeddings)),
    beta = ``attention.temperature_scale``."""

    def rope_setup(self):
        Transformer.rope_setup(self)
        if self.get("rope.scaling.type") != "yarn":
            return
        factor = float(self.get("rope.scaling.factor"))
        self._yarn(factor, float(self.get("rope.scaling.yarn_beta_fast", 32.0)),
                   float(self.get("rope.scaling.yarn_beta_slow", 1.0)))

        def get_mscale(mscale):
            return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0
        all_dim = float(self.get("rope.scaling.yarn_log_multiplier", 0.0))
        self.mscale = get_mscale(1.0) / get_mscale(all_dim) if all_dim else get_mscale(1.0)

    def forward(self, tokens):
        beta = float(self.get("attention.temperature_scale", 0.0))
        orig = float(self.get("rope.scaling.original_context_length", self.n_ctx_train))
        pos = np.arange(len(tokens), dtype=np.float64)
        self.q_scale = 1.0 + beta * np.log(1.0 + np.floor(pos / orig))
        return super().forward(tokens)

    def qkv(self, i, h):
        # a per-position scalar commutes with RoPE, so q may be scaled before it
        q, k, v = super().qkv(i, h)
        return q * self.q_scale[:, None], k, v


FAMILIES["mistral3"] = Mistral3


def reference(path: str, n_ctx: int = 0) -> Transformer:
    """The reference model of a GGUF file, by its general.architecture."""
    arch = str(_fields(GGUFReader(path))["general.architecture"])
    return FAMILIES[arch](path, n_ctx)
