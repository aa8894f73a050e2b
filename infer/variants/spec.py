"""The description of a transformer of the Llama family, as data.

Every built-in transformer variant (llama, gemma3, and the families that differ
from them only in details) is one `TransformerSpec`: sizes, which optional
pieces the blocks have, and the scalars that change the maths.  A variant's
module reads its GGUF metadata into a spec; `weights.load_weights` then finds
the tensors the spec names, and both forward passes read the same spec: the
Python prefill (`transformer.TransformerContext`) and the fused C decode step
(`csrc/transformer_block.c` through `kernels.TransformerDecoder`).  A new
architecture is a new way of filling the spec, not a copy of a forward pass.

One block, with every optional piece (each is off by default):

    x = embed(token) * embd_scale
    for each layer l:
        h = rmsnorm(x, attn_norm)                     (pre_norms; else h = x)
        q, k, v = h Wq + bq, h Wk + bk, h Wv + bv       (biases: qkv_bias; one
                                                       matrix: fused_qkv)
        q, k = rmsnorm(q, q_norm), rmsnorm(k, k_norm)  (qk_norm: per head, or over
                                                       all of q and of k: qk_norm_scope)
        rope(q, k)                                    (layers[l].rope; None: NoPE; the
                                                       q/k norms after it: qk_norm_after_rope)
        q *= 1 + c ln(floor(pos / F) + 1)             (attn_temp_scale c, attn_temp_floor F)
        a = attention(q, K, V)   scores * query_scale, soft-capped by attn_softcap,
                                 over the last layers[l].window positions, a
                                 per-head sink logit in each denominator (attn_sinks)
        a = a Wo + bo ; a = rmsnorm(a, post_attn_norm) (bo: out_bias; post_attn_norm)
        x += a * residual_scale                       (parallel_blocks: a is added after f,
                                                       and f reads the first h)
        h = rmsnorm(x, ffn_norm)                      (pre_norms; else h = x)
        f = (act(h Wgate) * h Wup) Wdown              (act: activation; one matrix
                                                       gate|up: fused_gate_up; relu_sqr,
                                                       xielu: act(h Wup) Wdown, no gate)
            or, with moe: p = softmax(h Wrouter) (or sigmoid: moe.gating); the
            top experts_used experts e by p (by p + bias: moe.selection_bias),
            each weighted p_e (renormalised to sum 1: norm_weights),
            f = sum_e p_e (act(h Wgate_e) * h Wup_e) Wdown_e
            (a layer with dense_ffn has the dense FFN instead)
            (gpt-oss: router and expert biases, p = softmax of the chosen logits)
        f = rmsnorm(f, post_ffn_norm)                 (post_ffn_norm)
        x += f * residual_scale
        x += rmsnorm(ple_proj(gelu(x Wple_gate) * ple[l]), ple_post_norm)   (per_layer_dim)
        x *= layer_output_scale                       (layers[l].out_scale)
    logits = rmsnorm(x, output_norm) Wout * logit_scale, soft-capped by final_softcap

Gemma 4 adds per-layer sizes (a layer's head_dim, n_kv_heads, ffn_dim may
differ from the model's), layers that read an earlier layer's KV cache instead
of their own (`LayerSpec.kv_source`), V taken from K's projection
(`LayerSpec.v_from_k`), V RMS-normalised without a weight (`v_norm`) and
per-layer embeddings (`per_layer_dim`, "PLE"):

    ple[l] = (rmsnorm(reshape(x0 Wple_model / sqrt(dim)), ple_proj_norm)
              + ple_embed(token)[l] * sqrt(per_layer_dim)) / sqrt(2)

with x0 the scaled embedding.  Both forward passes compute all of it.

A layer of kind "shortconv" (LFM2) replaces the attention half by a gated short
convolution of width L = layers[l].conv_width, depthwise over the last L positions:

        h = rmsnorm(x, attn_norm)
        b, c, u = split(h Win, 3)                     (shortconv.in_proj: 3 * dim rows)
        s_p = b * u                                   (kept per position, like K and V)
        y = c * sum_k conv[:, k] * s_(p-L+1+k)        (shortconv.conv: (dim, L); s_(<0) = 0)
        x += y Wout_conv                              (shortconv.out_proj)

A layer of kind "deltanet" (Qwen3.5's gated DeltaNet, `DeltaNet`) replaces it by a
linear attention with a recurrent state S_h (d x d per value head h):

        h = rmsnorm(x, attn_norm)
        c = silu(conv_K(h Wqkv))                      (depthwise over the last K inputs)
        q, k, v = split(c)  (group_count heads of q and k, time_step_rank of v, d each)
        q, k = q / |q|, k / |k|
        g = softplus(h Walpha + dt_bias) * ssm_a ; beta = sigmoid(h Wbeta)   (per v head)
        S = S * exp(g) ; S += k (beta (v - S^T k))^T ; o = S^T q / sqrt(d)
        x += (rmsnorm(o, ssm_norm) * silu(h Wgate)) Wssm_out

and ``attn_output_gate`` gives the attention layers a sigmoid gate on their output,
projected with q (per head: q's head_dim rows, then the gate's).

Phi-2 and StarCoder2 add an FFN without a gate, "gelu" (GELU's tanh approximation),
with biases (ffn_bias: f = gelu(h Wup + b_up) Wdown + b_down), and Phi-2 a bias on the
logits (output_bias).  Nemotron-H's layers are each one half only: a layer whose
``LayerSpec.ffn`` is False has no FFN half, and one of kind "mlp" no mixing half
(x += ffn(norm(x, attn_norm))); Nemotron 3 Nano's experts and shared expert have no
gate (activation "relu_sqr" with a MoE: relu(h Wup_e)^2 Wdown_e; the Python blocks only).

A layer of kind "mamba2" (Granite 4.0-H's Mamba2 mixer, `Mamba2`) replaces it by a
selective state space scan with a state S_h (head_dim x d_state per head h):

        h = rmsnorm(x, attn_norm)
        z, xBC, dt = split(h Wssm_in)                 (d_inner, conv_dim, n_heads)
        x, B, C = split(silu(conv_K(xBC) + conv_bias)) (d_inner; n_groups x d_state twice)
        dt = softplus(dt + dt_bias) ; dA = exp(dt * ssm_a)   (per head; ssm_a = -exp(A_log))
        S_h = S_h dA_h + (x_h dt_h) B_g^T ; y_h = S_h C_g + D_h x_h    (g: h's group)
        x += rmsnorm_per_group(y * silu(z), ssm_norm) Wssm_out

(without ``Mamba2.gated_norm``, no ssm_norm: x += (y * silu(z)) Wssm_out).  An attention
layer with ``LayerSpec.parallel_mamba2`` (Falcon-H1) runs such a mixer beside its
attention on the same normed h, and both outputs are added to x.

A layer of kind "mla" (DeepSeek's multi-head latent attention, `MLA`; llama.cpp's
deepseek2 with attn_k_b / attn_v_b) caches one latent row per position and decompresses
through it (the Python blocks only):

        q = h Wq  (or rmsnorm(h Wq_a, q_a_norm) Wq_b)  per head: nope | rope parts
        c, k_r = split(h Wkv_a_mqa)                   (kv_lora_rank, rope_dim)
        c = rmsnorm(c, kv_a_norm) ; rope(k_r), rope(q_rope)
        cache [c | k_r] (one head of kv_lora_rank + rope_dim: TransformerSpec.head_dim)
        per head: q' = [Wk_b q_nope | q_rope] ; a = softmax(q' . K * mla.kq_scale) over the
                  cached rows ; o = Wv_b (a . c)                     (V is the cached c)
        x += concat(o) Wo

(With the older conversions' attn_kv_b, `MLA.decompressed`, the latent is decompressed
into per-head keys [c Wk_h | k_r] and values c Wv_h, which are cached instead.)

Tensor names follow llama.cpp's GGUF conventions (`blk.N.attn_q.weight`, ...;
see `weights.py`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Tuple

import numpy as np
from numpy.typing import NDArray

#: the FFN activations the kernels have: gated, act(h Wgate) * h Wup ("silu",
#: "gelu_tanh", "swiglu_oai": gpt-oss's min(gate, 7) * sigmoid(1.702 min(gate, 7)) *
#: (clamp(up, -7, 7) + 1)); or without a gate (no ffn_gate tensor), act(h Wup): "relu_sqr",
#: relu(u)^2 (Arcee; also a mixture of experts', Nemotron 3 Nano), "xielu" with each layer's
#: LayerSpec.xielu (Apertus), "gelu", GELU's tanh approximation (Phi-2, StarCoder2)
ACTIVATIONS = ("silu", "gelu_tanh", "relu_sqr", "xielu", "swiglu_oai", "gelu")
#: the activations without a gate
UNGATED = ("relu_sqr", "xielu", "gelu")
#: RoPE layouts: "norm" rotates adjacent pairs (2i, 2i+1) of a head (GGUF `llama`,
#: whose converter permuted Q/K rows); "neox" rotates (i, i + head_dim/2)
ROPE_LAYOUTS = ("norm", "neox")
#: what a q/k norm spans: one head, or the whole projection
QK_NORM_SCOPES = ("head", "all")
#: the block and output norms (TransformerSpec.norm_kind): RMSNorm, or LayerNorm
#: (mean subtracted, population variance, a weight and no bias: Cohere)
NORM_KINDS = ("rms", "layer")
#: how a layer mixes positions (LayerSpec.kind); "mlp": it does not, the layer is its
#: FFN alone (Nemotron-H)
LAYER_KINDS = ("attention", "shortconv", "deltanet", "mamba2", "mlp", "mla")
#: the recurrent kinds (a state per context, checkpoints for truncate_to)
RECURRENT_KINDS = ("deltanet", "mamba2")
#: the kinds without a KV cache of their own
CACHELESS_KINDS = RECURRENT_KINDS + ("mlp",)
#: the widest short convolution accepted (LFM2's is 3; a huge width is a bad file)
MAX_CONV_WIDTH = 64
#: the largest DeltaNet head (d_state; Qwen3.5's is 128): the kernel's stack scratch
MAX_DELTANET_STATE = 1024


@dataclass(frozen=True)
class Rope:
    """Rotary position embedding of one layer.

    Pair i of a head at position p turns by
    ``p * scale * base**(-2i/head_dim) / freq_factors[i]``, and the rotated values
    are multiplied by ``attn_factor`` (ggml's rope with ext_factor 0).
    """

    layout: str = "norm"
    #: freq_base
    base: float = 10000.0
    #: freq_scale: 1 / the factor of linear RoPE scaling (1.0: none)
    scale: float = 1.0
    #: per-pair divisors of the frequencies (head_dim / 2 values): llama3 rope
    #: scaling's ``rope_freqs.weight``, Phi-3 LongRoPE's factors, or factors a
    #: variant computed (YaRN's ramp; +inf: a pair that does not turn, M-RoPE's
    #: extra section for text, qwen_vl.py).  None: all 1.
    freq_factors: Optional[Tuple[float, ...]] = None
    #: multiplies cos and sin (YaRN / LongRoPE magnitude scaling; 1.0: none)
    attn_factor: float = 1.0
    #: the rotated elements of a head (``rope.dimension_count``; Phi-4-mini turns
    #: 3/4 of it); None: the whole head
    rot_dim: Optional[int] = None

    def __post_init__(self) -> None:
        if self.layout not in ROPE_LAYOUTS:
            raise ValueError(f"rope layout: expected one of {ROPE_LAYOUTS}, got {self.layout!r}")
        if not (math.isfinite(self.base) and self.base > 0):
            raise ValueError(f"rope base: must be a finite number > 0, got {self.base}")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"rope scale: must be a finite number > 0, got {self.scale}")
        if not math.isfinite(self.attn_factor):
            raise ValueError(f"rope attn_factor: must be finite, got {self.attn_factor}")
        if self.freq_factors is not None and not all(f > 0 and not math.isnan(f) for f in self.freq_factors):
            raise ValueError("rope freq_factors: every factor must be a number > 0 (+inf: the pair does not turn)")
        if self.rot_dim is not None and (self.rot_dim < 2 or self.rot_dim % 2):
            raise ValueError(f"rope rot_dim: must be even and >= 2, got {self.rot_dim}")

    @property
    def neox(self) -> bool:
        return self.layout == "neox"

    def rotated(self, head_dim: int) -> int:
        """The rotated elements of a head of head_dim."""
        rot = head_dim if self.rot_dim is None else self.rot_dim
        if rot > head_dim:
            raise ValueError(f"rope rot_dim: {rot} exceeds head_dim {head_dim}")
        return rot

    def factors_array(self, head_dim: int) -> Optional[NDArray[np.float32]]:
        """freq_factors as the float32 array the kernels take (None if absent)."""
        if self.freq_factors is None:
            return None
        n = self.rotated(head_dim) // 2
        if len(self.freq_factors) != n:
            raise ValueError(f"rope freq_factors: {len(self.freq_factors)} values for "
                             f"{2 * n} rotated dimensions (expected {n})")
        return np.array(self.freq_factors, dtype=np.float32)


#: how a mixture of experts turns router logits into probabilities (llama.cpp's
#: LLAMA_EXPERT_GATING_FUNC_TYPE_*): softmax over the experts, or each logit's sigmoid;
#: "softmax_weight" (gpt-oss) picks the top experts by logit and softmaxes their logits alone
GATINGS = ("softmax", "sigmoid", "softmax_weight")
#: llama.cpp's LLAMA_MAX_EXPERTS
MAX_EXPERTS = 1024


@dataclass(frozen=True)
class MoE:
    """A mixture-of-experts FFN (llama.cpp's build_moe_ffn, src/llama-graph.cpp).

    Each token's router logits ``h Wrouter`` (n_experts of them) become
    probabilities by ``gating``; the ``n_used`` most probable experts run (with
    ``selection_bias``: the largest probability + the layer's bias of the expert),
    and their outputs are summed weighted by their probabilities, divided by the
    sum of those (clamped below at 2**-14, as llama.cpp does) if ``norm_weights``,
    then multiplied by ``weight_scale``.  Expert e's gate, up and down matrices
    are rows [e * n, (e + 1) * n) of one stacked matrix (n: ffn_dim for gate and
    up, the model's dim for down)."""

    n_experts: int
    n_used: int
    #: the width of one expert's FFN
    ffn_dim: int
    gating: str = "softmax"
    norm_weights: bool = True
    weight_scale: float = 1.0
    #: width of a shared expert every token also runs (ffn_{gate,up,down}_shexp),
    #: its output times sigmoid(h . ffn_gate_inp_shexp) (Qwen 2 MoE); 0: none
    shared_ffn_dim: int = 0
    #: a per-expert bias (blk.N.exp_probs_b.bias, n_experts F32) added to the
    #: probabilities for the choice of experts only, not to their weights
    #: (llama.cpp's exp_probs_b: DeepSeek V3, LFM2-MoE)
    selection_bias: bool = False
    #: ffn_gate_inp.bias added to the router logits (gpt-oss)
    router_bias: bool = False
    #: ffn_{gate,up,down}_exps.bias: each expert's biases on its gate, up and down
    #: products (gpt-oss)
    expert_biases: bool = False
    #: False: the shared expert's output is added as it is, with no sigmoid gate and
    #: no ffn_gate_inp_shexp (Granite 4.0-H's shared MLP; the Python blocks only)
    shared_gated: bool = True
    #: expert groups (DeepSeek V3's expert_group_count / expert_group_used_count): the
    #: experts e in [g n / n_groups, (g + 1) n / n_groups) form group g, each group
    #: scores the sum of its two largest selection keys, and only the experts of the
    #: n_groups_used best groups are chosen from (llama.cpp's build_moe_ffn; the Python
    #: blocks only).  1: none
    n_groups: int = 1
    n_groups_used: int = 0

    def __post_init__(self) -> None:
        if self.n_groups != 1 and (isinstance(self.n_groups, bool) or not isinstance(self.n_groups, int)
                                   or self.n_groups < 1 or self.n_experts % self.n_groups
                                   or self.n_experts // self.n_groups < 2
                                   or not 1 <= self.n_groups_used < self.n_groups):
            raise ValueError(f"moe n_groups: {self.n_groups} groups ({self.n_groups_used} used) of "
                             f"{self.n_experts} experts: need groups of at least two experts and "
                             "1 <= groups used < groups")
        for name in ("n_experts", "n_used", "ffn_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
                raise ValueError(f"moe {name}: must be an integer in [1, 2**31 - 1], got {value!r}")
        if self.n_experts > MAX_EXPERTS:
            raise ValueError(f"moe n_experts: {self.n_experts} exceeds {MAX_EXPERTS}")
        if self.n_used > self.n_experts:
            raise ValueError(f"moe n_used: {self.n_used} experts used of {self.n_experts}")
        if self.gating not in GATINGS:
            raise ValueError(f"moe gating: expected one of {GATINGS}, got {self.gating!r}")
        if isinstance(self.shared_ffn_dim, bool) or not isinstance(self.shared_ffn_dim, int) \
                or not 0 <= self.shared_ffn_dim <= 2**31 - 1:
            raise ValueError(f"moe shared_ffn_dim: must be an integer in [0, 2**31 - 1], got {self.shared_ffn_dim!r}")
        if not (math.isfinite(self.weight_scale) and self.weight_scale > 0):
            raise ValueError(f"moe weight_scale: must be a finite number > 0, got {self.weight_scale}")


@dataclass(frozen=True)
class DeltaNet:
    """The sizes of the gated DeltaNet layers (llama.cpp's ssm.* keys of ``qwen35``):
    q and k have ``n_k_heads`` (ssm.group_count) heads, v ``n_v_heads``
    (ssm.time_step_rank), all of ``d_state`` values; value head h reads q/k head
    h % n_k_heads.  The causal depthwise convolution spans ``conv_kernel`` positions."""

    conv_kernel: int
    d_state: int
    n_k_heads: int
    n_v_heads: int

    def __post_init__(self) -> None:
        for name in ("conv_kernel", "d_state", "n_k_heads", "n_v_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**20:
                raise ValueError(f"deltanet {name}: must be an integer in [1, 2**20], got {value!r}")
        if not 2 <= self.conv_kernel <= MAX_CONV_WIDTH:
            raise ValueError(f"deltanet conv_kernel: must be in [2, {MAX_CONV_WIDTH}], got {self.conv_kernel}")
        if self.d_state > MAX_DELTANET_STATE:
            raise ValueError(f"deltanet d_state: {self.d_state} exceeds {MAX_DELTANET_STATE}")
        if self.n_v_heads % self.n_k_heads:
            raise ValueError(f"deltanet: {self.n_v_heads} value heads are not a multiple of "
                             f"{self.n_k_heads} key heads")

    @property
    def key_dim(self) -> int:
        return self.n_k_heads * self.d_state

    @property
    def value_dim(self) -> int:
        return self.n_v_heads * self.d_state

    @property
    def conv_dim(self) -> int:
        """The convolved channels: q, k and v."""
        return 2 * self.key_dim + self.value_dim

    @property
    def state_floats(self) -> int:
        """float32 values of one layer's recurrent state: S and the conv inputs kept."""
        return self.n_v_heads * self.d_state * self.d_state + (self.conv_kernel - 1) * self.conv_dim


@dataclass(frozen=True)
class Mamba2:
    """The sizes of the Mamba2 layers (llama.cpp's ssm.* keys of ``granitehybrid``):
    ``n_heads`` heads (ssm.time_step_rank) of d_inner / n_heads channels in
    ``n_groups`` groups (ssm.group_count) sharing B and C of ``d_state`` values;
    head h reads group h // (n_heads / n_groups).  The causal depthwise convolution
    spans ``conv_kernel`` positions."""

    conv_kernel: int
    d_state: int
    d_inner: int
    n_heads: int
    n_groups: int
    #: y * silu(z) is RMS-normalised per group with ssm_norm; False: no ssm_norm tensor,
    #: the gated y goes to ssm_out as it is (Falcon-H1 without mamba_rms_norm)
    gated_norm: bool = True

    def __post_init__(self) -> None:
        for name in ("conv_kernel", "d_state", "d_inner", "n_heads", "n_groups"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**20:
                raise ValueError(f"mamba2 {name}: must be an integer in [1, 2**20], got {value!r}")
        if not 2 <= self.conv_kernel <= MAX_CONV_WIDTH:
            raise ValueError(f"mamba2 conv_kernel: must be in [2, {MAX_CONV_WIDTH}], got {self.conv_kernel}")
        if self.d_state > MAX_DELTANET_STATE:
            raise ValueError(f"mamba2 d_state: {self.d_state} exceeds {MAX_DELTANET_STATE}")
        if self.d_inner % self.n_heads or self.n_heads % self.n_groups:
            raise ValueError(f"mamba2: inner size {self.d_inner}, {self.n_heads} heads and {self.n_groups} groups "
                             "do not divide evenly")

    @property
    def head_dim(self) -> int:
        return self.d_inner // self.n_heads

    @property
    def conv_dim(self) -> int:
        """The convolved channels: x, B and C."""
        return self.d_inner + 2 * self.n_groups * self.d_state

    @property
    def in_dim(self) -> int:
        """The rows of ssm_in: z, x, B, C and dt."""
        return self.d_inner + self.conv_dim + self.n_heads

    @property
    def state_floats(self) -> int:
        """float32 values of one layer's recurrent state: S and the conv inputs kept."""
        return self.d_inner * self.d_state + (self.conv_kernel - 1) * self.conv_dim


@dataclass(frozen=True)
class MLA:
    """The sizes of DeepSeek's multi-head latent attention (llama.cpp's deepseek2:
    ``attention.q_lora_rank``, ``attention.kv_lora_rank``, ``attention.key_length_mla``
    = nope_dim + rope_dim, ``attention.value_length_mla`` = v_dim, ``rope.dimension_count``
    = rope_dim) and the scale of q.k (llama.cpp's kq_scale: mscale^2 / sqrt(nope_dim +
    rope_dim), mscale from YaRN's factor and log multiplier)."""

    kv_lora_rank: int
    nope_dim: int
    rope_dim: int
    v_dim: int
    kq_scale: float
    #: 0: no low-rank q (attn_q); else attn_q_a (q_lora_rank x dim), its norm, attn_q_b
    q_lora_rank: int = 0
    #: the older conversions' unsplit attn_kv_b: llama.cpp decompresses the latent into
    #: per-head keys [k_nope | k_rope] and values and caches those (n_heads KV heads,
    #: both padded with zeros to `cache_dim`), as plain multi-head attention
    decompressed: bool = False

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "nope_dim", "rope_dim", "v_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**20:
                raise ValueError(f"mla {name}: must be an integer in [1, 2**20], got {value!r}")
        if isinstance(self.q_lora_rank, bool) or not isinstance(self.q_lora_rank, int) \
                or not 0 <= self.q_lora_rank <= 2**20:
            raise ValueError(f"mla q_lora_rank: must be an integer in [0, 2**20], got {self.q_lora_rank!r}")
        if self.rope_dim % 2:
            raise ValueError(f"mla rope_dim: {self.rope_dim} is odd (RoPE rotates pairs)")
        if not (math.isfinite(self.kq_scale) and self.kq_scale > 0):
            raise ValueError(f"mla kq_scale: must be a finite number > 0, got {self.kq_scale}")

    @property
    def q_head_dim(self) -> int:
        """One head's projected q: nope, then rope."""
        return self.nope_dim + self.rope_dim

    @property
    def cache_dim(self) -> int:
        """One position's cached row: the normed latent, then the rotated rope key (or,
        decompressed, one head's key or value, the longer of the two)."""
        if self.decompressed:
            return max(self.q_head_dim, self.v_dim)
        return self.kv_lora_rank + self.rope_dim

    @property
    def kv_a_dim(self) -> int:
        """The rows of attn_kv_a_mqa: the latent, then the shared rope key."""
        return self.kv_lora_rank + self.rope_dim

    def cache_heads(self, n_heads: int) -> int:
        """The KV heads cached: one latent row, or each head's decompressed key and value."""
        return n_heads if self.decompressed else 1


@dataclass(frozen=True)
class LayerSpec:
    """What may differ from one layer to the next."""

    #: None: no rotary embedding in this layer (SmolLM3's NoPE layers)
    rope: Optional[Rope] = field(default_factory=Rope)
    #: attend to the last `window` positions (the current one included); 0: all
    window: int = 0
    #: this layer's sizes where they differ from the model's (None: the model's)
    head_dim: Optional[int] = None
    n_kv_heads: Optional[int] = None
    ffn_dim: Optional[int] = None
    #: the earlier layer whose KV cache this one attends to; it has no K/V of its
    #: own (Gemma 4's shared-KV layers).  None: its own cache.
    kv_source: Optional[int] = None
    #: no attn_v: V is K's projection (before K's norm and RoPE; Gemma 4 31B's
    #: full-attention layers)
    v_from_k: bool = False
    #: a one-value blk.N.layer_output_scale multiplies the block's output
    out_scale: bool = False
    #: what mixes positions: "attention", "shortconv" (LFM2's gated short
    #: convolution), "deltanet" (Qwen3.5's gated DeltaNet, sized by
    #: TransformerSpec.deltanet) or "mamba2" (sized by TransformerSpec.mamba2); see
    #: `TransformerSpec`; the last three have no attention
    kind: str = "attention"
    #: a shortconv layer's kernel width L (GGUF ``shortconv.l_cache``): position p
    #: reads the gated inputs of positions p-L+1 .. p
    conv_width: int = 0
    #: a dense FFN (ffn_gate/up/down of this layer's ffn_dim) in a model whose other
    #: layers have the mixture of experts (LFM2-MoE's leading_dense_block_count layers)
    dense_ffn: bool = False
    #: the xielu activation's (alpha_n, alpha_p, beta, eps) in this layer, as ggml_xielu
    #: takes them (alpha_n = beta + softplus(the file's), alpha_p = softplus(the file's)):
    #: xielu(u) = alpha_p u^2 + beta u (u > 0), (expm1(min(u, eps)) - u) alpha_n + beta u
    xielu: Optional[Tuple[float, float, float, float]] = None
    #: False: the layer has no FFN half (Nemotron-H's mamba2 and attention layers are
    #: their mixer alone, x += mixer(norm(x, attn_norm)); an "mlp" layer is its FFN
    #: alone, x += ffn(norm(x, attn_norm)))
    ffn: bool = True
    #: an attention layer that also runs a Mamba2 mixer (sized by TransformerSpec.mamba2)
    #: on the same normed input, both outputs added to x (Falcon-H1)
    parallel_mamba2: bool = False

    def __post_init__(self) -> None:
        if self.parallel_mamba2 and self.kind != "attention":
            raise ValueError(f"parallel_mamba2: only beside attention, not in a {self.kind!r} layer")
        if self.kind == "mlp" and not self.ffn:
            raise ValueError("layer kind 'mlp': the layer is its FFN (ffn must be True)")
        if not 0 <= self.window <= 2**31 - 1:
            raise ValueError(f"window: must be in [0, 2**31 - 1], got {self.window}")
        if self.kind not in LAYER_KINDS:
            raise ValueError(f"layer kind: expected one of {LAYER_KINDS}, got {self.kind!r}")
        if self.xielu is not None and (len(self.xielu) != 4 or not all(math.isfinite(v) for v in self.xielu)):
            raise ValueError(f"xielu: expected 4 finite numbers (alpha_n, alpha_p, beta, eps), got {self.xielu!r}")
        if self.kind == "shortconv" and not 2 <= self.conv_width <= MAX_CONV_WIDTH:
            raise ValueError(f"conv_width: a shortconv layer needs 2 .. {MAX_CONV_WIDTH}, got {self.conv_width}")
        for name in ("head_dim", "n_kv_heads", "ffn_dim"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 1 <= value <= 2**31 - 1):
                raise ValueError(f"{name}: must be None or an integer in [1, 2**31 - 1], got {value!r}")
        if self.head_dim is not None and self.head_dim % 2:
            raise ValueError(f"head_dim: {self.head_dim} is odd (RoPE rotates pairs)")
        if self.kv_source is not None and (isinstance(self.kv_source, bool) or not isinstance(self.kv_source, int)
                                           or self.kv_source < 0):
            raise ValueError(f"kv_source: must be None or a layer index >= 0, got {self.kv_source!r}")

    @property
    def default_pieces(self) -> bool:
        """Whether the layer has the model's sizes, its own K/V and no output scale."""
        return (self.head_dim is None and self.n_kv_heads is None and self.ffn_dim is None
                and self.kv_source is None and not self.v_from_k and not self.out_scale)

    @property
    def shortconv(self) -> bool:
        return self.kind == "shortconv"


@dataclass(frozen=True)
class TransformerSpec:
    """A whole model: sizes, optional pieces (off by default) and scalars."""

    # ---- sizes -------------------------------------------------------------------
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    #: the trained context length (the default context size)
    max_seq_len: int
    rms_eps: float
    #: one per layer
    layers: Tuple[LayerSpec, ...]

    # ---- optional tensors ----------------------------------------------------------
    #: attn_q/k/v.bias added to the projections (Qwen2)
    qkv_bias: bool = False
    #: one attn_qkv matrix whose rows are q, then k, then v (Phi-3)
    fused_qkv: bool = False
    #: per-head RMSNorm of q and k, attn_q_norm / attn_k_norm, before RoPE (Qwen3, Gemma 3)
    qk_norm: bool = False
    #: post_attention_norm on the attention output before the residual add (Gemma 2/3)
    post_attn_norm: bool = False
    #: post_ffw_norm on the FFN output before the residual add (Gemma 2/3)
    post_ffn_norm: bool = False
    #: no ffn_gate: ffn_up has 2 * ffn_dim rows, gate first, then up (Phi-3)
    fused_gate_up: bool = False
    #: no output.weight: the head is token_embd (None: whichever the file has)
    tied_head: Optional[bool] = None
    #: a mixture of experts in place of every layer's FFN (ffn_gate_inp and the
    #: stacked ffn_{gate,up,down}_exps) but the layers with dense_ffn; ffn_dim is
    #: then one expert's width
    moe: Optional[MoE] = None

    # ---- the maths -----------------------------------------------------------------
    #: FFN activation: "silu" (SwiGLU), "gelu_tanh" (GeGLU), or without a gate
    #: "relu_sqr" (relu(h Wup)^2 Wdown, Arcee) or "xielu" (LayerSpec.xielu; Apertus)
    activation: str = "silu"
    #: multiplies q.k in attention; None: 1 / sqrt(head_dim)
    query_scale: Optional[float] = None
    #: attention scores become c * tanh(score / c); 0: off (Gemma 2)
    attn_softcap: float = 0.0
    #: logits become c * tanh(logit / c); 0: off (Gemma 2)
    final_softcap: float = 0.0
    #: multiplies the embedding (Gemma: sqrt(dim); Granite: embedding_multiplier)
    embd_scale: float = 1.0
    #: multiplies each block half's output before the residual add (Granite)
    residual_scale: float = 1.0
    #: multiplies the logits (Granite: 1 / logits_scaling)
    logit_scale: float = 1.0
    #: V is RMS-normalised per head without a weight before it is stored (Gemma 4)
    v_norm: bool = False
    #: per-layer embeddings of this many values per layer (Gemma 4's PLE); 0: none
    per_layer_dim: int = 0
    #: the final norm's tensor, without ".weight" (LFM2: "token_embd_norm")
    output_norm_tensor: str = "output_norm"

    # ---- norm placement (after the fields above, so that other families' additions stay apart)
    #: attn_norm / ffn_norm before each block half; False: the halves read x itself and
    #: only the post norms are applied (OLMo 2, EXAONE 4)
    pre_norms: bool = True
    #: what the q/k RMSNorm of qk_norm normalises: "head", each head (head_dim
    #: weights; Qwen3), or "all", the whole q and k projections (q_dim and kv_dim
    #: weights; OLMo 2)
    qk_norm_scope: str = "head"
    #: the q/k norms come after RoPE instead of before it (Hunyuan)
    qk_norm_after_rope: bool = False

    # ---- gpt-oss
    #: blk.N.attn_sinks: a learned logit per query head that joins each softmax's
    #: denominator only (no value row)
    attn_sinks: bool = False
    #: attn_output.bias added to the attention's output projection
    out_bias: bool = False

    # ---- attention temperature (Ministral 3; llama.cpp's llm_graph_input_attn_temp)
    #: q (after RoPE) is multiplied at position p by
    #: 1 + attn_temp_scale * ln(floor(p / attn_temp_floor) + 1); 0: off
    attn_temp_scale: float = 0.0
    #: the positions of one step of that scale (n_attn_temp_floor_scale: Ministral 3's
    #: original YaRN context)
    attn_temp_floor: int = 0
    # ---- Qwen3.5 (after the fields above, so that other families' additions stay apart)
    #: the sizes of the layers of kind "deltanet" (None: the model has none)
    deltanet: Optional[DeltaNet] = None
    #: attn_q also projects a sigmoid gate of the attention output, per head after
    #: that head's q rows (Qwen3.5's full-attention layers)
    attn_output_gate: bool = False
    #: the FFN's pre-norm tensor, without ".weight" (Qwen3.5, gpt-oss: "post_attention_norm")
    ffn_norm_tensor: str = "ffn_norm"

    # ---- norm kind and block shape (dense2: Cohere 2, GLM-4)
    #: what attn_norm, ffn_norm and the output norm compute: "rms" (RMSNorm) or "layer"
    #: (LayerNorm with a weight and no bias: Cohere); rms_eps is their epsilon either way
    #: (q/k and post norms stay RMSNorms)
    norm_kind: str = "rms"
    #: the two block halves read one normed input and both add to x (Cohere 2):
    #: h = norm(x, attn_norm); x += ffn(h) + attention(h).  No ffn_norm tensor.
    parallel_blocks: bool = False
    #: the LayerNorms add a bias (attn_norm.bias, ffn_norm.bias, output_norm.bias: StableLM)
    norm_bias: bool = False

    # ---- Granite 4.0-H
    #: the sizes of the layers of kind "mamba2" (None: the model has none)
    mamba2: Optional[Mamba2] = None

    # ---- Phi-2, StarCoder2, Nemotron-H (after the fields above, so that other families' additions stay apart)
    #: ffn_up.bias and ffn_down.bias: f = act(h Wup + b_up) Wdown + b_down (an FFN without
    #: a gate only)
    ffn_bias: bool = False
    #: output.bias added to the logits (before logit_scale and soft-capping; Phi-2)
    output_bias: bool = False

    # ---- Falcon-H1 (after the fields above, so that other families' additions stay apart)
    #: the FFN's pre-norm tensor is named without ".weight" (blk.N.ffn_norm: Falcon-H1's
    #: converter maps pre_ff_layernorm.weight whole, and llama.cpp reads that name)
    ffn_norm_bare: bool = False

    # ---- DeepSeek's multi-head latent attention (after the fields above, so that other families' additions stay apart)
    #: the sizes of the layers of kind "mla" (None: the model has none); head_dim and
    #: n_kv_heads are then the cached row's (mla.cache_dim, 1)
    mla: Optional[MLA] = None

    def __post_init__(self) -> None:
        for name in ("dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim",
                     "vocab_size", "max_seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
                raise ValueError(f"{name}: must be an integer in [1, 2**31 - 1], got {value!r}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads: {self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim: {self.head_dim} is odd (RoPE rotates pairs)")
        if len(self.layers) != self.n_layers:
            raise ValueError(f"layers: {len(self.layers)} layer specs for n_layers={self.n_layers}")
        if self.moe is not None and (self.moe.ffn_dim != self.ffn_dim or self.fused_gate_up):
            raise ValueError(f"moe: ffn_dim {self.ffn_dim} must be the experts' width {self.moe.ffn_dim}, "
                             "and experts have separate gate and up matrices")
        if self.moe is None and any(layer.dense_ffn for layer in self.layers):
            raise ValueError("layers: dense_ffn marks the dense layers of a mixture of experts; there is none")
        if self.qk_norm_after_rope and self.qk_norm_scope != "head":
            raise ValueError("qk_norm_after_rope: only with per-head q/k norms (qk_norm_scope 'head')")
        if self.norm_kind not in NORM_KINDS:
            raise ValueError(f"norm_kind: expected one of {NORM_KINDS}, got {self.norm_kind!r}")
        if self.norm_bias and self.norm_kind != "layer":
            raise ValueError("norm_bias: only with norm_kind 'layer'")
        if self.parallel_blocks and (not self.pre_norms or self.post_attn_norm or self.post_ffn_norm
                                     or self.residual_scale != 1.0 or self.per_layer_dim or self.conv_layers):
            raise ValueError("parallel_blocks: only with pre-norms and without post norms, a residual "
                             "scale, per-layer embeddings or shortconv layers")
        if not isinstance(self.ffn_norm_tensor, str) or not self.ffn_norm_tensor:
            raise ValueError(f"ffn_norm_tensor: must be a tensor name, got {self.ffn_norm_tensor!r}")
        if self.qk_norm_scope not in QK_NORM_SCOPES:
            raise ValueError(f"qk_norm_scope: expected one of {QK_NORM_SCOPES}, got {self.qk_norm_scope!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation: expected one of {ACTIVATIONS}, got {self.activation!r}")
        if self.ffn_bias and (self.activation not in UNGATED or self.moe is not None):
            raise ValueError("ffn_bias: only with an FFN without a gate and without experts")
        if any(layer.kind == "mlp" or not layer.ffn for layer in self.layers) and \
                (self.parallel_blocks or not self.pre_norms):
            raise ValueError("layers: FFN-only layers and layers without an FFN need pre-norms and "
                             "sequential blocks")
        # experts without a gate: relu² only (Nemotron 3 Nano), and only with ungated shared experts
        if self.activation in UNGATED and (self.fused_gate_up or (self.moe is not None and (
                self.activation != "relu_sqr" or (self.moe.shared_ffn_dim and self.moe.shared_gated)))):
            raise ValueError(f"activation {self.activation} (no gate): not with a fused gate|up, nor with experts "
                             "but relu_sqr's with an ungated shared expert")
        if any((layer.xielu is not None) != (self.activation == "xielu") for layer in self.layers):
            raise ValueError("layers: the xielu activation has every layer's xielu parameters, another none")
        if not (math.isfinite(self.rms_eps) and self.rms_eps > 0):
            raise ValueError(f"rms_eps: must be a finite number > 0, got {self.rms_eps}")
        if self.query_scale is not None and not (math.isfinite(self.query_scale) and self.query_scale > 0):
            raise ValueError(f"query_scale: must be a finite number > 0, got {self.query_scale}")
        for name in ("attn_softcap", "final_softcap"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: must be a finite number >= 0 (0: off), got {value}")
        for name in ("embd_scale", "residual_scale", "logit_scale"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name}: must be finite, got {getattr(self, name)}")
        if not math.isfinite(self.attn_temp_scale):
            raise ValueError(f"attn_temp_scale: must be finite, got {self.attn_temp_scale}")
        if self.attn_temp_scale != 0.0 and (isinstance(self.attn_temp_floor, bool)
                                            or not isinstance(self.attn_temp_floor, int)
                                            or not 1 <= self.attn_temp_floor <= 2**31 - 1):
            raise ValueError(f"attn_temp_floor: must be an integer in [1, 2**31 - 1] with an attention "
                             f"temperature, got {self.attn_temp_floor!r}")
        if isinstance(self.per_layer_dim, bool) or not isinstance(self.per_layer_dim, int) or \
                not 0 <= self.per_layer_dim <= 2**31 - 1:
            raise ValueError(f"per_layer_dim: must be an integer in [0, 2**31 - 1], got {self.per_layer_dim!r}")
        if any(layer.kind == "deltanet" for layer in self.layers) and self.deltanet is None:
            raise ValueError("layers: a deltanet layer needs the spec's deltanet sizes")
        if any(layer.kind == "mamba2" or layer.parallel_mamba2 for layer in self.layers) and self.mamba2 is None:
            raise ValueError("layers: a mamba2 layer needs the spec's mamba2 sizes")
        if any(layer.kind == "mla" for layer in self.layers) and (
                self.mla is None or (self.head_dim, self.n_kv_heads) != (self.mla.cache_dim,
                                                                         self.mla.cache_heads(self.n_heads))):
            raise ValueError("layers: an mla layer needs the spec's mla sizes, with head_dim the cached row's "
                             "(kv_lora_rank + rope_dim) and one KV head (decompressed: n_heads of the longer "
                             "of a key and a value)")
        if any(layer.parallel_mamba2 for layer in self.layers) and self.parallel_blocks:
            raise ValueError("parallel_mamba2: not with parallel_blocks (the FFN reads x after both mixers)")
        if self.deltanet_layers and self.mamba2_layers:
            raise ValueError("layers: deltanet and mamba2 layers in one model are not supported")
        for li in range(self.n_layers):
            n_kv = self.layer_kv_heads(li)
            if self.n_heads % n_kv:
                raise ValueError(f"layers[{li}]: n_heads={self.n_heads} is not a multiple of n_kv_heads={n_kv}")
            src = self.layers[li].kv_source
            if src is None:
                continue
            if src >= li:
                raise ValueError(f"layers[{li}].kv_source: {src} is not an earlier layer")
            if self.layers[src].kv_source is not None:
                raise ValueError(f"layers[{li}].kv_source: layer {src} has no KV cache of its own")
            if (self.layer_head_dim(src), self.layer_kv_heads(src)) != (self.layer_head_dim(li), n_kv):
                raise ValueError(f"layers[{li}].kv_source: layer {src}'s KV heads "
                                 f"({self.layer_kv_heads(src)} x {self.layer_head_dim(src)}) differ from "
                                 f"this layer's ({n_kv} x {self.layer_head_dim(li)})")

    # ---- per-layer sizes ------------------------------------------------------------
    def layer_head_dim(self, li: int) -> int:
        hd = self.layers[li].head_dim
        return self.head_dim if hd is None else hd

    def layer_kv_heads(self, li: int) -> int:
        n = self.layers[li].n_kv_heads
        return self.n_kv_heads if n is None else n

    def layer_ffn_dim(self, li: int) -> int:
        f = self.layers[li].ffn_dim
        return self.ffn_dim if f is None else f

    def layer_experts(self, li: int) -> bool:
        """Whether layer li's FFN is the mixture of experts (not a dense one, nor none)."""
        return self.moe is not None and not self.layers[li].dense_ffn and self.layers[li].ffn

    def layer_kv_owner(self, li: int) -> int:
        """The layer whose KV cache layer li reads (itself unless shared)."""
        src = self.layers[li].kv_source
        return li if src is None else src

    @property
    def uniform_kv(self) -> bool:
        """Every layer has its own KV cache of the model's shape (the (layers,
        kv_heads, n_ctx, head_dim) cache the fused step takes)."""
        return all(self.layer_head_dim(li) == self.head_dim and self.layer_kv_heads(li) == self.n_kv_heads
                   and self.layers[li].kv_source is None for li in range(self.n_layers)) and not self.recurrent_layers \
            and not any(layer.kind == "mlp" for layer in self.layers)

    def kv_owners(self) -> Tuple[int, ...]:
        """The layers with a KV cache of their own: not shared-KV layers, nor recurrent
        layers (Qwen3.5: three of four layers need none)."""
        return tuple(li for li, layer in enumerate(self.layers)
                     if layer.kv_source is None and layer.kind not in CACHELESS_KINDS)

    @property
    def conv_layers(self) -> Tuple[int, ...]:
        """The indices of the shortconv layers (their order is the conv cache's)."""
        return tuple(i for i, layer in enumerate(self.layers) if layer.shortconv)

    @property
    def deltanet_layers(self) -> Tuple[int, ...]:
        """The indices of the deltanet layers (their order is the recurrent state's)."""
        return tuple(i for i, layer in enumerate(self.layers) if layer.kind == "deltanet")

    @property
    def mamba2_layers(self) -> Tuple[int, ...]:
        """The indices of the layers with a Mamba2 mixer, of kind mamba2 or beside
        attention (their order is the recurrent state's)."""
        return tuple(i for i, layer in enumerate(self.layers) if layer.kind == "mamba2" or layer.parallel_mamba2)

    @property
    def recurrent_layers(self) -> Tuple[int, ...]:
        """The layers with a recurrent state (deltanet or mamba2; a model has one kind)."""
        return tuple(i for i, layer in enumerate(self.layers)
                     if layer.kind in RECURRENT_KINDS or layer.parallel_mamba2)

    def ffn_norm_name(self, li: int) -> str:
        """Layer li's FFN pre-norm tensor."""
        return f"blk.{li}.{self.ffn_norm_tensor}" + ("" if self.ffn_norm_bare else ".weight")

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def query_temperature(self, pos0: int, n: int) -> NDArray[np.float32]:
        """The factors q is multiplied by at positions pos0 .. pos0 + n - 1 (float32,
        computed in double as llama.cpp's set_input does)."""
        pos = np.arange(pos0, pos0 + n, dtype=np.float64)
        if self.attn_temp_scale == 0.0:
            return np.ones(n, np.float32)
        return (np.log(np.floor(pos / self.attn_temp_floor) + 1.0) * self.attn_temp_scale + 1.0).astype(np.float32)

    @property
    def attn_scale(self) -> float:
        """What q.k is multiplied by."""
        return 1.0 / math.sqrt(self.head_dim) if self.query_scale is None else self.query_scale
