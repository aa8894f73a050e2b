# The fused decode step of the transformer family (csrc/transformer_block.c): one
# C call decodes one token of each of B sequences.
from libc.stdlib cimport calloc, free
from libc.stdint cimport uint8_t

cdef extern from "transformer_block.h" nogil:
    enum:
        INFER_ROPE_NONE
        INFER_ROPE_NORM
        INFER_ROPE_NEOX
        INFER_BLOCK_MAX_BATCH
        INFER_BLOCK_MAX_EXPERTS_USED
        INFER_GATING_SOFTMAX
        INFER_GATING_SIGMOID
        INFER_GATING_SOFTMAX_WEIGHT
    ctypedef struct infer_block_layer:
        const float *attn_norm
        const float *ffn_norm
        const float *q_norm
        const float *k_norm
        const float *post_attn_norm
        const float *post_ffn_norm
        const float *q_bias
        const float *k_bias
        const float *v_bias
        infer_decode_matrix wq, wk, wv, wo, gate, up, down
        infer_decode_matrix router
        infer_decode_matrix shexp_gate, shexp_up, shexp_down
        const float *shexp_gate_inp
        int rope
        int rope_dims
        const double *rope_inv_freq
        float rope_attn_factor
        int window
        int head_dim, n_kv_heads, ffn_dim
        int kv_row, own_kv, v_from_k
        float out_scale
        infer_decode_matrix ple_gate, ple_proj
        const float *ple_post_norm
        int conv_width
        int conv_index
        const float *conv_kernel
        infer_decode_matrix conv_b, conv_c, conv_u, conv_out
        int dense_ffn
        const float *exp_probs_b
        float xielu_alpha_n, xielu_alpha_p, xielu_beta, xielu_eps
        int deltanet
        int dn_index
        infer_decode_matrix ssm_qkv, ssm_gate, ssm_alpha, ssm_beta, ssm_out
        const float *ssm_conv
        const float *ssm_dt
        const float *ssm_a
        const float *ssm_norm
        const float *attn_sinks
        const float *o_bias
        const float *router_bias
        const float *gate_exps_bias
        const float *up_exps_bias
        const float *down_exps_bias
        const float *attn_norm_b
        const float *ffn_norm_b
        const float *ffn_up_b
        const float *ffn_down_b
        int mamba2
        infer_decode_matrix ssm_in
        const float *ssm_d
        const float *ssm_conv_b
    ctypedef struct infer_block_model:
        int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size
        int kv_rows, kv_row_width, v_norm
        const float *ones
        int per_layer_dim
        infer_decode_matrix ple_embd, ple_model_proj
        const float *ple_proj_norm
        int gelu
        float rms_eps, attn_scale, attn_softcap, embd_scale, residual_scale, logit_scale
        float final_softcap
        int n_experts, n_experts_used, expert_norm
        float expert_scale
        int shared_ffn_dim
        const infer_block_layer *layers
        infer_decode_matrix embd, output
        const float *output_norm
        int n_conv_layers
        int qk_norm_whole
        int qk_norm_after_rope
        int expert_gating
        int ffn_relu_sqr
        int ffn_xielu
        int n_deltanet_layers
        int dn_conv_width, dn_d_state, dn_k_heads, dn_v_heads
        float dn_l2_eps
        int attn_output_gate
        float attn_temp_scale
        int attn_temp_floor
        int swiglu_oai
        int layer_norm
        int parallel
        const float *output_norm_b
        int ffn_gelu
        const float *output_b
        int n_mamba2_layers
        int m2_conv_width, m2_d_state, m2_d_inner, m2_n_heads, m2_n_groups
        int shared_ungated
    ctypedef struct infer_block_seq:
        int n_ctx
        int kv_f16
        void *k_cache
        void *v_cache
        int token, pos
        float *logits
        float *conv_cache
        float *ssm_state
        float *ssm_conv
    ctypedef struct infer_block_scratch:
        int max_batch
        float *x
        float *h
        float *q
        float *att
        float *k
        float *v
        float *gate
        float *up
        float *rope_cs
        float *ple
        float *ple_proj
        float *probs
        float *moe_in
        float *moe_rows
        float *moe_out
        uint8_t *xq[3]
        float *conv
        float *dn
        float *q_gate
        float *m2
    int infer_block_decode(const infer_block_model *m, const infer_block_scratch *s,
                           const infer_block_seq *seqs, int n_seqs) noexcept
    int infer_block_check_model(const infer_block_model *m) noexcept
    int64_t infer_block_deltanet_floats(const infer_block_model *m) noexcept
    int64_t infer_block_mamba2_floats(const infer_block_model *m) noexcept
    void infer_block_sigmoid(const float *x, float *out, int64_t n) noexcept

#: the most sequences one TransformerDecoder.step takes
MAX_BATCH = INFER_BLOCK_MAX_BATCH
#: the most experts per token the fused step routes to (a mixture of experts)
MAX_EXPERTS_USED = INFER_BLOCK_MAX_EXPERTS_USED

_INT_LIMIT = 2**31 - 1


def sigmoid(x, out):
    """out = 1 / (1 + exp(-x)) elementwise in float32 (x and out float32 of one
    shape, out C-contiguous and writable; out may be x): the gates of the fused
    decode step, so that the Python blocks round them alike.  Returns out."""
    import numpy as np
    if not isinstance(x, np.ndarray) or not isinstance(out, np.ndarray) or x.dtype != np.float32 \
            or out.dtype != np.float32 or x.shape != out.shape:
        raise TypeError("sigmoid: x and out must be float32 arrays of one shape")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("sigmoid: out must be C-contiguous and writable")
    if out.size == 0:
        return out
    src = np.ascontiguousarray(x)
    if src is not out and np.may_share_memory(src, out):   # another view of it: read a copy
        src = src.copy()
    cdef const float[::1] xv = src.reshape(-1)
    cdef float[::1] ov = out.reshape(-1)
    with nogil:
        infer_block_sigmoid(&xv[0], &ov[0], xv.shape[0])
    return out


cdef int _positive_int(object c, str name) except -1:
    value = getattr(c, name)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _INT_LIMIT:
        raise ValueError(f"config.{name}: expected an integer in [1, 2**31 - 1], got {value!r}")
    return value


cdef float _finite(object c, str name, bint non_negative=False) except? -1:
    import math
    value = float(getattr(c, name))
    if not math.isfinite(value) or (non_negative and value < 0):
        raise ValueError(f"config.{name}: expected a finite number{' >= 0' if non_negative else ''}, "
                         f"got {value}")
    return value


cdef infer_decode_matrix _shaped_matrix(object w, int64_t rows, int64_t cols, str name, list keep) except *:
    if not isinstance(w, tuple) or len(w) != 5:
        raise TypeError(f"{name}: expected a matrix tuple (data, qtype, act_type, rows, cols)")
    if w[3] != rows or w[4] != cols:
        raise ValueError(f"{name}: a {w[3]} x {w[4]} matrix where the config needs {rows} x {cols}")
    cdef infer_decode_matrix m = _decode_matrix(w, keep)
    if m.act_type != infer_type_vec_dot_type(m.type):
        raise ValueError(f"{name}: act_type {m.act_type} is not the activation format of {TYPE_NAMES[m.type]}")
    return m


cdef const float *_optional_vector(object layer, str key, int64_t n, str name, list keep) except? NULL:
    a = layer.get(key)
    if a is None:
        return NULL
    try:
        return _decode_vector(a, n, keep)
    except ValueError as exc:
        raise ValueError(f"{name}.{key}: {exc}") from None


cdef class TransformerDecoder:
    """The fused decode step of a transformer: weights bound once, a batch of up
    to max_batch sequences (each with its own KV cache) per `step`.

    config: an object with the sizes dim, n_layers, n_heads, n_kv_heads, head_dim,
    ffn_dim, vocab_size and rms_eps, activation ("silu" or "gelu_tanh", gated;
    "relu_sqr", relu(h Wup)^2, or "xielu", xielu(h Wup) with each layer's "xielu"
    (alpha_n, alpha_p, beta, eps: ggml_xielu's op parameters), without a gate: each
    layer's gate, of up's shape, unread),
    attn_scale, attn_softcap, final_softcap, embd_scale, residual_scale and
    logit_scale, and optionally pre_norms (default True), qk_norm_scope ("head",
    the default, or "all"), qk_norm_after_rope (default False), attn_temp_scale
    and attn_temp_floor (default 0: q times 1 + scale ln(floor(pos / floor) + 1)), norm_kind
    ("rms", the default, or "layer": LayerNorm pre and output norms), parallel_blocks
    (default False: True adds FFN(h) and attention(h) of one h = norm(x, attn_norm);
    then no post norms) and moe (None,
    or an object with n_experts, n_used, gating "softmax", "sigmoid" or "softmax_weight",
    norm_weights, weight_scale and shared_ffn_dim: infer.variants.spec.MoE)
    (infer.variants.spec.TransformerSpec is one).
    output_norm_bias: None, or the output LayerNorm's bias (norm_kind "layer"
    only); then every layer has attn_norm_bias and ffn_norm_bias vectors too.
    output_bias: None, or vocab_size values added to the logits (Phi-2).  With an
    activation without a gate ("relu_sqr", "xielu", "gelu": GELU's tanh approximation), a
    layer may have up_bias and down_bias vectors (ffn_dim and dim values: Phi-2, StarCoder2).
    embd/output: matrix tuples (data uint8 rows, qtype, act_type, rows, cols).
    layers: one mapping per layer with attn_norm, ffn_norm (float32 vectors; only
    with pre_norms), wq, wk, wv, wo, gate, up, down (matrix tuples; with moe,
    gate/up/down stack the experts' matrices, n_experts * ffn_dim or
    n_experts * dim rows, router is the n_experts x dim router, and with a
    shared expert shexp_gate, shexp_up, shexp_down and the vector
    shexp_gate_inp, and optionally exp_probs_b, the n_experts selection biases; a
    layer with "dense_ffn": True has one dense FFN of its ffn_dim instead (LFM2-MoE's
    leading layers), a mixture's layer's ffn_dim is one expert's width); optionally
    q_norm and k_norm (head_dim values, or q_dim and kv_dim with scope "all"),
    post_attn_norm, post_ffn_norm, q_bias, k_bias and v_bias (vectors), rope
    (None or (layout "norm"/"neox", base, scale, freq_factors or None,
    attn_factor, rot_dim: the rotated elements of a head)) and window (int, 0 = all);
    gpt-oss's sinks (n_heads values), o_bias (dim), and with moe router_bias
    (n_experts), gate_exps_bias, up_exps_bias (n_experts * ffn_dim, expert by
    expert) and down_exps_bias (n_experts * dim); config.activation "swiglu_oai".
    A shortconv layer (LFM2) has instead of wq, wk, wv, wo (and q/k norms, biases,
    rope) "conv": (kernel float32 (dim, width), b, c, u, out matrix tuples, dim x dim
    each); its contexts then pass conv caches to `step`.
    A gated DeltaNet layer (Qwen3.5) has instead "deltanet": (conv taps float32
    (conv_dim, conv_kernel), qkv, gate, alpha, beta, out matrix tuples, dt, a, norm
    vectors), sized by config.deltanet (conv_kernel, d_state, n_k_heads, n_v_heads:
    infer.variants.spec.DeltaNet) and no KV cache row; its contexts then pass their
    recurrent states to `step`.  config.attn_output_gate (default False): wq projects
    q and a gate per head ([q | gate], 2 * n_heads * head_dim rows) and the attention
    output is multiplied by sigmoid(gate).
    A Mamba2 layer (Granite 4.0-H) has instead "mamba2": (conv taps float32
    (conv_dim, conv_kernel), conv bias (conv_dim) or None, in, out matrix tuples, dt,
    a, d, norm vectors), sized by config.mamba2 (conv_kernel, d_state, d_inner,
    n_heads, n_groups: infer.variants.spec.Mamba2) and no KV cache row; its contexts
    pass their recurrent states to `step` as a deltanet model's.  A moe with
    shared_gated False adds the shared expert without a gate (no shexp_gate_inp).
    Gemma 4's optional per-layer head_dim, n_kv_heads and ffn_dim (ints; default
    the config's), kv_source (an earlier layer whose cache this one reads; then no
    wk, wv, k_norm), v_from_k (no wv: V is K's projection), out_scale (a float) and
    ple_gate, ple_proj (matrix tuples), ple_post_norm (vector) when ple is given.
    ple: None, or (ple_embd, ple_model_proj, ple_proj_norm) with config.per_layer_dim
    set; config.v_norm: V is RMS-normalised per head without a weight.  Every size
    is checked against the config before anything runs.

    The caches `step` takes: (n_layers, n_kv_heads, n_ctx, head_dim) when every
    layer has the config's sizes and its own cache, else (rows, n_ctx * width):
    one row per layer with its own cache, in layer order, width the largest
    n_kv_heads * head_dim of them (transformer._kv_layout's layout).
    """
    cdef infer_block_model m
    cdef infer_block_layer *layers
    cdef infer_block_scratch s
    cdef infer_block_seq seqs[INFER_BLOCK_MAX_BATCH]
    cdef list keep
    cdef object lock
    cdef int q_dim, kv_dim
    cdef bint initialised, uniform_kv

    def __cinit__(self):
        self.layers = NULL

    def __init__(self, config, embd, output, output_norm, layers, int max_batch=INFER_BLOCK_MAX_BATCH,
                 ple=None, output_norm_bias=None, output_bias=None):
        import numpy as np
        import threading
        cdef int i, rc
        # A second __init__ would replace self.keep, freeing the scratch and weights
        # that self.s and self.m still point to: a step after it (or after it failed
        # half-way) would read freed memory.
        if self.initialised:
            raise RuntimeError("TransformerDecoder: already initialised; build a new one")
        self.initialised = True
        self.keep = []
        self.lock = threading.Lock()
        c = config
        m = &self.m
        m.dim, m.n_layers = _positive_int(c, "dim"), _positive_int(c, "n_layers")
        m.n_heads, m.n_kv_heads = _positive_int(c, "n_heads"), _positive_int(c, "n_kv_heads")
        m.head_dim, m.ffn_dim = _positive_int(c, "head_dim"), _positive_int(c, "ffn_dim")
        m.vocab_size = _positive_int(c, "vocab_size")
        if len(layers) != m.n_layers:
            raise ValueError(f"layers: expected {m.n_layers}, got {len(layers)}")
        # each layer's sizes (the config's unless it says), and where its cache is
        sizes = []
        rows = []   # per layer: its cache row, or the source layer's
        n_rows = 0
        for i, layer in enumerate(layers):
            phd, pkv, pffn = (layer.get(k) for k in ("head_dim", "n_kv_heads", "ffn_dim"))
            phd = m.head_dim if phd is None else phd
            pkv = m.n_kv_heads if pkv is None else pkv
            pffn = m.ffn_dim if pffn is None else pffn
            for key, value in (("head_dim", phd), ("n_kv_heads", pkv), ("ffn_dim", pffn)):
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _INT_LIMIT:
                    raise ValueError(f"layers[{i}].{key}: expected an integer in [1, 2**31 - 1], got {value!r}")
            if m.n_heads % pkv:
                raise ValueError(f"layers[{i}]: n_heads={m.n_heads} is not a multiple of n_kv_heads={pkv}")
            if phd % 2 or phd > INFER_ATTN_MAX_HEAD_DIM:
                raise ValueError(f"layers[{i}].head_dim: must be even and <= {INFER_ATTN_MAX_HEAD_DIM}, got {phd}")
            # the step's attention scratch (INFER_TEAM_SCRATCH_FLOATS): a KV head's outputs,
            # their (max, sum) pairs and at least one query
            if (m.n_heads // pkv) * (phd + 2) + phd > 8192:
                raise ValueError(f"layers[{i}]: (n_heads / n_kv_heads) * (head_dim + 2) + head_dim exceeds "
                                 f"the step's attention scratch (8192)")
            if <int64_t>m.n_heads * phd > _INT_LIMIT:
                raise ValueError(f"layers[{i}]: n_heads * head_dim overflows")
            src = layer.get("kv_source")
            if layer.get("deltanet") is not None or layer.get("mamba2") is not None:   # no KV cache
                if src is not None:
                    raise ValueError(f"layers[{i}]: a recurrent layer reads no cache (kv_source)")
                rows.append(0)
            elif src is None:
                rows.append(n_rows)
                n_rows += 1
            else:
                if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < i \
                        or layers[src].get("kv_source") is not None or layers[src].get("deltanet") is not None \
                        or layers[src].get("mamba2") is not None:
                    raise ValueError(f"layers[{i}].kv_source: {src!r} is not an earlier layer with its own cache")
                if (sizes[src][0], sizes[src][1]) != (phd, pkv):
                    raise ValueError(f"layers[{i}].kv_source: layer {src}'s KV heads differ from this layer's")
                rows.append(rows[src])
            sizes.append((phd, pkv, pffn))
        self.uniform_kv = n_rows == m.n_layers and all(sz[:2] == (m.head_dim, m.n_kv_heads) for sz in sizes)
        m.head_dim = max([m.head_dim] + [sz[0] for sz in sizes])
        m.n_kv_heads = max([m.n_kv_heads] + [sz[1] for sz in sizes])
        m.ffn_dim = max([m.ffn_dim] + [sz[2] for sz in sizes])
        m.kv_rows = n_rows
        if n_rows == 0:
            raise ValueError("layers: the fused step needs at least one attention layer")
        m.kv_row_width = max(sz[0] * sz[1] for sz, layer in zip(sizes, layers)
                             if layer.get("kv_source") is None and layer.get("deltanet") is None
                             and layer.get("mamba2") is None)
        m.per_layer_dim = getattr(c, "per_layer_dim", 0) or 0
        if isinstance(m.per_layer_dim, bool) or not 0 <= m.per_layer_dim <= _INT_LIMIT:
            raise ValueError(f"config.per_layer_dim: expected an integer >= 0, got {m.per_layer_dim!r}")
        if (ple is None) != (m.per_layer_dim == 0):
            raise ValueError("ple: the per-layer embedding tensors come with config.per_layer_dim > 0")
        activation = getattr(c, "activation")
        if activation not in ("silu", "gelu_tanh", "relu_sqr", "xielu", "swiglu_oai", "gelu"):
            raise ValueError(f"config.activation: expected 'silu', 'gelu_tanh', 'relu_sqr', 'xielu', "
                             f"'swiglu_oai' or 'gelu', got {activation!r}")
        m.gelu = activation == "gelu_tanh"
        # relu_sqr, xielu and gelu have no gate: act(h Wup) (a layer's "gate", of up's shape, is not read)
        m.ffn_relu_sqr = activation == "relu_sqr"
        m.ffn_xielu = activation == "xielu"
        m.ffn_gelu = activation == "gelu"
        m.swiglu_oai = activation == "swiglu_oai"
        m.rms_eps = _finite(c, "rms_eps", True)
        m.attn_scale = _finite(c, "attn_scale")
        m.attn_softcap = _finite(c, "attn_softcap", True)
        m.final_softcap = _finite(c, "final_softcap", True)
        m.embd_scale = _finite(c, "embd_scale")
        m.residual_scale = _finite(c, "residual_scale")
        m.logit_scale = _finite(c, "logit_scale")
        moe = getattr(c, "moe", None)
        m.n_experts = 0
        m.shared_ffn_dim = 0
        if moe is not None:
            m.n_experts = _positive_int(moe, "n_experts")
            m.n_experts_used = _positive_int(moe, "n_used")
            if m.n_experts_used > m.n_experts or m.n_experts_used > INFER_BLOCK_MAX_EXPERTS_USED:
                raise ValueError(f"config.moe.n_used: {m.n_experts_used} of {m.n_experts} experts (the fused "
                                 f"step routes to at most {INFER_BLOCK_MAX_EXPERTS_USED})")
            gatings = {"softmax": INFER_GATING_SOFTMAX, "sigmoid": INFER_GATING_SIGMOID,
                       "softmax_weight": INFER_GATING_SOFTMAX_WEIGHT}
            if getattr(moe, "gating") not in gatings:
                raise ValueError(f"config.moe.gating: expected one of {sorted(gatings)}, got {moe.gating!r}")
            m.expert_gating = gatings[moe.gating]
            m.expert_norm = bool(getattr(moe, "norm_weights"))
            m.expert_scale = _finite(moe, "weight_scale")
            shared = getattr(moe, "shared_ffn_dim", 0)
            if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared <= _INT_LIMIT:
                raise ValueError(f"config.moe.shared_ffn_dim: expected an integer in [0, 2**31 - 1], got {shared!r}")
            m.shared_ffn_dim = shared
            shared_gated = getattr(moe, "shared_gated", True)
            if not isinstance(shared_gated, bool):
                raise ValueError(f"config.moe.shared_gated: expected a bool, got {shared_gated!r}")
            m.shared_ungated = bool(shared and not shared_gated)
        pre_norms = getattr(c, "pre_norms", True)
        if not isinstance(pre_norms, bool):
            raise ValueError(f"config.pre_norms: expected a bool, got {pre_norms!r}")
        qk_scope = getattr(c, "qk_norm_scope", "head")
        if qk_scope not in ("head", "all"):
            raise ValueError(f"config.qk_norm_scope: expected 'head' or 'all', got {qk_scope!r}")
        m.qk_norm_whole = qk_scope == "all"
        after_rope = getattr(c, "qk_norm_after_rope", False)
        if not isinstance(after_rope, bool) or (after_rope and m.qk_norm_whole):
            raise ValueError(f"config.qk_norm_after_rope: expected a bool, and False with qk_norm_scope "
                             f"'all', got {after_rope!r}")
        m.qk_norm_after_rope = after_rope
        m.attn_temp_scale = _finite(c, "attn_temp_scale") if hasattr(c, "attn_temp_scale") else 0.0
        temp_floor = getattr(c, "attn_temp_floor", 0)
        if m.attn_temp_scale != 0.0 and (isinstance(temp_floor, bool) or not isinstance(temp_floor, int)
                                         or not 1 <= temp_floor <= _INT_LIMIT):
            raise ValueError(f"config.attn_temp_floor: expected an integer in [1, 2**31 - 1] with "
                             f"attn_temp_scale {m.attn_temp_scale}, got {temp_floor!r}")
        m.attn_temp_floor = temp_floor if m.attn_temp_scale != 0.0 else 0
        norm_kind = getattr(c, "norm_kind", "rms")
        if norm_kind not in ("rms", "layer"):
            raise ValueError(f"config.norm_kind: expected 'rms' or 'layer', got {norm_kind!r}")
        m.layer_norm = norm_kind == "layer"
        parallel = getattr(c, "parallel_blocks", False)
        if not isinstance(parallel, bool) or (parallel and not pre_norms):
            raise ValueError(f"config.parallel_blocks: expected a bool, and False without pre_norms, "
                             f"got {parallel!r}")
        m.parallel = parallel
        norm_bias = output_norm_bias is not None
        if norm_bias and not m.layer_norm:
            raise ValueError("output_norm_bias: norm biases come with config.norm_kind 'layer'")
        if not 1 <= max_batch <= INFER_BLOCK_MAX_BATCH:
            raise ValueError(f"max_batch: must be in [1, {INFER_BLOCK_MAX_BATCH}], got {max_batch}")
        cdef int64_t d = m.dim, hd = m.head_dim, ffn = m.ffn_dim, P = m.per_layer_dim
        cdef int64_t q_dim = <int64_t>m.n_heads * hd, kv_dim = <int64_t>m.n_kv_heads * hd
        self.q_dim, self.kv_dim = q_dim, max(sz[0] * sz[1] for sz in sizes)
        m.embd = _shaped_matrix(embd, m.vocab_size, d, "embd", self.keep)
        m.output = _shaped_matrix(output, m.vocab_size, d, "output", self.keep)
        m.output_norm = _decode_vector(output_norm, d, self.keep)
        if norm_bias:
            m.output_norm_b = _decode_vector(output_norm_bias, d, self.keep)
        if output_bias is not None:
            m.output_b = _decode_vector(output_bias, m.vocab_size, self.keep)
        m.v_norm = bool(getattr(c, "v_norm", False))
        attn_gate = getattr(c, "attn_output_gate", False)
        if not isinstance(attn_gate, bool):
            raise ValueError(f"config.attn_output_gate: expected a bool, got {attn_gate!r}")
        m.attn_output_gate = attn_gate
        m.n_deltanet_layers = 0
        cdef int64_t n_ones = hd, dn_floats = 0, dn_value_dim = 0
        if any(layer.get("deltanet") is not None for layer in layers):
            dn = getattr(c, "deltanet", None)
            if dn is None:
                raise ValueError("config.deltanet: the sizes of the deltanet layers are missing")
            m.dn_conv_width, m.dn_d_state = _positive_int(dn, "conv_kernel"), _positive_int(dn, "d_state")
            m.dn_k_heads, m.dn_v_heads = _positive_int(dn, "n_k_heads"), _positive_int(dn, "n_v_heads")
            if not 2 <= m.dn_conv_width <= 64 or m.dn_d_state > INFER_DELTA_NET_MAX_STATE or \
                    m.dn_v_heads % m.dn_k_heads or m.dn_v_heads > 2**20 or m.dn_k_heads > 2**20:
                raise ValueError(f"config.deltanet: conv_kernel in [2, 64], d_state <= {INFER_DELTA_NET_MAX_STATE}, "
                                 f"n_v_heads a multiple of n_k_heads (at most 2**20), got {dn!r}")
            m.dn_l2_eps = float(getattr(c, "rms_eps")) / m.dn_d_state   # as the Python blocks round it
            n_ones = max(hd, m.dn_d_state)
            dn_value_dim = <int64_t>m.dn_v_heads * m.dn_d_state
        m.n_mamba2_layers = 0
        if any(layer.get("mamba2") is not None for layer in layers):
            m2 = getattr(c, "mamba2", None)
            if m2 is None:
                raise ValueError("config.mamba2: the sizes of the mamba2 layers are missing")
            m.m2_conv_width, m.m2_d_state = _positive_int(m2, "conv_kernel"), _positive_int(m2, "d_state")
            m.m2_d_inner, m.m2_n_heads = _positive_int(m2, "d_inner"), _positive_int(m2, "n_heads")
            m.m2_n_groups = _positive_int(m2, "n_groups")
            if not 2 <= m.m2_conv_width <= 64 or max(m.m2_d_state, m.m2_d_inner, m.m2_n_groups) > 2**20 or \
                    m.m2_d_inner % m.m2_n_heads or m.m2_n_heads % m.m2_n_groups:
                raise ValueError(f"config.mamba2: conv_kernel in [2, 64], d_state, d_inner and n_groups at most "
                                 f"2**20, d_inner a multiple of n_heads and n_heads of n_groups, got {m2!r}")
            n_ones = max(n_ones, m.m2_d_inner // m.m2_n_groups)
            dn_value_dim = max(dn_value_dim, m.m2_d_inner)   # ssm_out's input
        m.ones = _decode_vector(np.ones(n_ones, np.float32), n_ones, self.keep)
        if P:
            if not isinstance(ple, tuple) or len(ple) != 3:
                raise TypeError("ple: expected (ple_embd, ple_model_proj, ple_proj_norm)")
            m.ple_embd = _shaped_matrix(ple[0], m.vocab_size, m.n_layers * P, "ple_embd", self.keep)
            m.ple_model_proj = _shaped_matrix(ple[1], m.n_layers * P, d, "ple_model_proj", self.keep)
            m.ple_proj_norm = _decode_vector(ple[2], P, self.keep)
        self.layers = <infer_block_layer *>calloc(m.n_layers, sizeof(infer_block_layer))
        if self.layers == NULL:
            raise MemoryError()
        freqs = {}   # one frequency table per distinct RoPE, so the step reuses its angles
        cdef double[::1] fv
        cdef const float[::1] ff
        cdef infer_block_layer *L
        cdef int64_t lhd, lq, lkv, lffn
        for i, layer in enumerate(layers):
            L = &self.layers[i]
            name = f"layers[{i}]"
            lhd, lffn = sizes[i][0], sizes[i][2]
            lq, lkv = <int64_t>m.n_heads * lhd, <int64_t>sizes[i][1] * lhd
            L.head_dim, L.n_kv_heads, L.ffn_dim = sizes[i]
            L.kv_row = rows[i]
            L.own_kv = layer.get("kv_source") is None
            L.v_from_k = bool(layer.get("v_from_k", False))
            L.out_scale = float(layer.get("out_scale", 1.0))
            if not abs(L.out_scale) < float("inf"):
                raise ValueError(f"{name}.out_scale: must be finite, got {L.out_scale}")
            if pre_norms and parallel:   # one norm feeds both halves
                if layer.get("ffn_norm") is not None and layer["ffn_norm"] is not layer["attn_norm"]:
                    raise ValueError(f"{name}: parallel blocks have one norm (ffn_norm must be attn_norm or None)")
                L.attn_norm = _decode_vector(layer["attn_norm"], d, self.keep)
                L.ffn_norm = L.attn_norm
            elif pre_norms:
                L.attn_norm = _decode_vector(layer["attn_norm"], d, self.keep)
                L.ffn_norm = _decode_vector(layer["ffn_norm"], d, self.keep)
            elif layer.get("attn_norm") is not None or layer.get("ffn_norm") is not None:
                raise ValueError(f"{name}: attn_norm / ffn_norm given but config.pre_norms is False")
            if norm_bias != (layer.get("attn_norm_bias") is not None) or \
                    (layer.get("attn_norm_bias") is not None) != (layer.get("ffn_norm_bias") is not None):
                raise ValueError(f"{name}: attn_norm_bias and ffn_norm_bias come with output_norm_bias")
            if norm_bias:
                if not pre_norms:
                    raise ValueError(f"{name}: norm biases without pre_norms")
                L.attn_norm_b = _decode_vector(layer["attn_norm_bias"], d, self.keep)
                L.ffn_norm_b = L.attn_norm_b if parallel else _decode_vector(layer["ffn_norm_bias"], d, self.keep)
            if m.ffn_xielu:
                params = layer.get("xielu")
                if not isinstance(params, tuple) or len(params) != 4 or \
                        not all(abs(float(v)) < float("inf") for v in params):
                    raise ValueError(f"{name}.xielu: expected 4 finite numbers (alpha_n, alpha_p, beta, eps), "
                                     f"got {params!r}")
                L.xielu_alpha_n, L.xielu_alpha_p, L.xielu_beta, L.xielu_eps = params
            dense_ffn = layer.get("dense_ffn", False)
            if not isinstance(dense_ffn, bool) or (dense_ffn and not m.n_experts):
                raise ValueError(f"{name}.dense_ffn: a bool, True only in a mixture of experts, got {dense_ffn!r}")
            L.dense_ffn = dense_ffn
            layer_moe = m.n_experts and not dense_ffn
            stacks = m.n_experts if layer_moe else 1
            L.gate = _shaped_matrix(layer["gate"], stacks * lffn, d, f"{name}.gate", self.keep)
            L.up = _shaped_matrix(layer["up"], stacks * lffn, d, f"{name}.up", self.keep)
            L.down = _shaped_matrix(layer["down"], stacks * d, lffn, f"{name}.down", self.keep)
            L.ffn_up_b = _optional_vector(layer, "up_bias", lffn, name, self.keep)
            L.ffn_down_b = _optional_vector(layer, "down_bias", d, name, self.keep)
            if (L.ffn_up_b == NULL) != (L.ffn_down_b == NULL) or \
                    (L.ffn_up_b != NULL and (layer_moe or not (m.ffn_relu_sqr or m.ffn_xielu or m.ffn_gelu))):
                raise ValueError(f"{name}: up_bias and down_bias come together, in an FFN without a gate "
                                 "or experts")
            if layer_moe:
                L.router = _shaped_matrix(layer["router"], m.n_experts, d, f"{name}.router", self.keep)
                L.exp_probs_b = _optional_vector(layer, "exp_probs_b", m.n_experts, name, self.keep)
                L.router_bias = _optional_vector(layer, "router_bias", m.n_experts, name, self.keep)
                L.gate_exps_bias = _optional_vector(layer, "gate_exps_bias", m.n_experts * lffn, name, self.keep)
                L.up_exps_bias = _optional_vector(layer, "up_exps_bias", m.n_experts * lffn, name, self.keep)
                L.down_exps_bias = _optional_vector(layer, "down_exps_bias", m.n_experts * d, name, self.keep)
                if (L.gate_exps_bias == NULL) != (L.up_exps_bias == NULL):
                    raise ValueError(f"{name}: gate_exps_bias and up_exps_bias come together")
            elif any(layer.get(k) is not None for k in ("router", "exp_probs_b", "router_bias", "gate_exps_bias",
                                                        "up_exps_bias", "down_exps_bias")):
                raise ValueError(f"{name}: a router, selection or expert biases in a layer without experts")
            if layer_moe and m.shared_ffn_dim:
                sh = m.shared_ffn_dim
                L.shexp_gate = _shaped_matrix(layer["shexp_gate"], sh, d, f"{name}.shexp_gate", self.keep)
                L.shexp_up = _shaped_matrix(layer["shexp_up"], sh, d, f"{name}.shexp_up", self.keep)
                L.shexp_down = _shaped_matrix(layer["shexp_down"], d, sh, f"{name}.shexp_down", self.keep)
                if not m.shared_ungated:
                    L.shexp_gate_inp = _decode_vector(layer["shexp_gate_inp"], d, self.keep)
                elif layer.get("shexp_gate_inp") is not None:
                    raise ValueError(f"{name}.shexp_gate_inp: a gate of a shared expert without one")
            if layer.get("deltanet") is not None:
                self._deltanet_layer(L, layer["deltanet"], name)
                continue
            if layer.get("mamba2") is not None:
                self._mamba2_layer(L, layer["mamba2"], name)
                continue
            if layer.get("conv") is not None:
                self._shortconv_layer(L, layer["conv"], name)
                continue
            L.q_norm = _optional_vector(layer, "q_norm", lq if m.qk_norm_whole else lhd, name, self.keep)
            L.k_norm = _optional_vector(layer, "k_norm", lkv if m.qk_norm_whole else lhd, name, self.keep)
            L.post_attn_norm = _optional_vector(layer, "post_attn_norm", d, name, self.keep)
            L.post_ffn_norm = _optional_vector(layer, "post_ffn_norm", d, name, self.keep)
            L.q_bias = _optional_vector(layer, "q_bias", lq, name, self.keep)
            L.k_bias = _optional_vector(layer, "k_bias", lkv, name, self.keep)
            L.v_bias = _optional_vector(layer, "v_bias", lkv, name, self.keep)
            L.attn_sinks = _optional_vector(layer, "sinks", m.n_heads, name, self.keep)
            L.o_bias = _optional_vector(layer, "o_bias", d, name, self.keep)
            if L.own_kv and (L.q_norm == NULL) != (L.k_norm == NULL):
                raise ValueError(f"{name}: q_norm and k_norm come together")
            if (L.q_bias == NULL) != (L.k_bias == NULL) or (L.q_bias == NULL) != (L.v_bias == NULL):
                raise ValueError(f"{name}: q_bias, k_bias and v_bias come together")
            if not L.own_kv and (L.q_bias != NULL or L.k_norm != NULL or L.v_from_k
                                 or layer.get("wk") is not None or layer.get("wv") is not None):
                raise ValueError(f"{name}: a layer reading another's cache has no wk, wv, k_norm, biases")
            # with an output gate, wq projects [q | gate] per head
            L.wq = _shaped_matrix(layer["wq"], (2 if attn_gate else 1) * lq, d, f"{name}.wq", self.keep)
            if L.own_kv:
                L.wk = _shaped_matrix(layer["wk"], lkv, d, f"{name}.wk", self.keep)
                if L.v_from_k:
                    if layer.get("wv") is not None:
                        raise ValueError(f"{name}: v_from_k and a wv")
                else:
                    L.wv = _shaped_matrix(layer["wv"], lkv, d, f"{name}.wv", self.keep)
            L.wo = _shaped_matrix(layer["wo"], d, lq, f"{name}.wo", self.keep)
            if P:
                L.ple_gate = _shaped_matrix(layer["ple_gate"], P, d, f"{name}.ple_gate", self.keep)
                L.ple_proj = _shaped_matrix(layer["ple_proj"], d, P, f"{name}.ple_proj", self.keep)
                L.ple_post_norm = _decode_vector(layer["ple_post_norm"], d, self.keep)
            window = layer.get("window", 0)
            if not 0 <= window <= _INT_LIMIT:
                raise ValueError(f"{name}.window: must be in [0, 2**31 - 1], got {window}")
            L.window = window
            rope = layer.get("rope")
            L.rope = INFER_ROPE_NONE
            if rope is not None:
                layout, base, scale, factors, attn_factor, rot = rope
                if layout not in ("norm", "neox"):
                    raise ValueError(f"{name}.rope: layout must be 'norm' or 'neox', got {layout!r}")
                if not (base > 0 and scale > 0) or base == float("inf") or scale == float("inf"):
                    raise ValueError(f"{name}.rope: base and scale must be finite and > 0")
                if not (abs(attn_factor) < float("inf")):
                    raise ValueError(f"{name}.rope: attn_factor must be finite, got {attn_factor}")
                if isinstance(rot, bool) or not isinstance(rot, int) or rot < 2 or rot % 2 or rot > lhd:
                    raise ValueError(f"{name}.rope: rot_dim must be even and in [2, head_dim={lhd}], got {rot!r}")
                key = (float(base), float(scale), rot,
                       None if factors is None else bytes(np.asarray(factors, np.float32)))
                if key not in freqs:
                    table = np.zeros(rot // 2, np.float64)
                    fv = table
                    if factors is None:
                        infer_rope_inv_freq(&fv[0], rot, base, scale, NULL)
                    else:
                        ff = _f32_in(factors, f"{name}.rope freq_factors")
                        if ff.shape[0] != rot // 2 or not np.all(np.asarray(ff) > 0):
                            raise ValueError(f"{name}.rope: freq_factors must be {rot // 2} values > 0")
                        infer_rope_inv_freq(&fv[0], rot, base, scale, &ff[0])
                    freqs[key] = table
                    self.keep.append(table)
                fv = freqs[key]
                L.rope = INFER_ROPE_NEOX if layout == "neox" else INFER_ROPE_NORM
                L.rope_dims = rot
                L.rope_inv_freq = &fv[0]
                L.rope_attn_factor = attn_factor
        m.layers = self.layers
        rc = infer_block_check_model(m)
        if rc == -1:
            raise NotImplementedError("a kernel this model needs is missing from the active kernel set")
        if rc != 0:
            raise ValueError("TransformerDecoder: the model description was rejected by the kernel")

        f32 = np.float32
        B = max_batch
        self.s.max_batch = B
        self.s.x = _decode_buffer(np.zeros(B * d, f32), self.keep)
        self.s.h = _decode_buffer(np.zeros(B * d, f32), self.keep)
        self.s.q = _decode_buffer(np.zeros(B * q_dim, f32), self.keep)
        self.s.att = _decode_buffer(np.zeros(B * q_dim, f32), self.keep)
        self.s.k = _decode_buffer(np.zeros(B * self.kv_dim, f32), self.keep)
        self.s.v = _decode_buffer(np.zeros(B * self.kv_dim, f32), self.keep)
        # gate and up also hold the attention's outputs and (max, sum) pairs (q_dim and
        # 2 n_heads per token, unsplit: csrc/transformer_block.c splits only when
        # twice that fits ffn_dim), a shared expert's rows and a PLE gate (P per token)
        self.s.gate = _decode_buffer(np.zeros(B * max(ffn, q_dim, P, m.shared_ffn_dim), f32), self.keep)
        self.s.up = _decode_buffer(np.zeros(B * max(ffn, 2 * m.n_heads, m.shared_ffn_dim), f32), self.keep)
        self.s.rope_cs = _decode_buffer(np.zeros(2 * B * 2 * hd, f32), self.keep)
        self.s.ple = self.s.ple_proj = NULL
        if P:
            self.s.ple = _decode_buffer(np.zeros(B * m.n_layers * P, f32), self.keep)
            self.s.ple_proj = _decode_buffer(np.zeros(B * m.n_layers * P, f32), self.keep)
        if m.n_experts:
            self.s.probs = _decode_buffer(np.zeros(B * m.n_experts, f32), self.keep)
            self.s.moe_in = _decode_buffer(np.zeros(B * d, f32), self.keep)
            self.s.moe_rows = _decode_buffer(np.zeros(B * d, f32), self.keep)
            self.s.moe_out = _decode_buffer(np.zeros(B * d, f32), self.keep)
        self.s.conv = NULL
        if m.n_conv_layers:   # b|c|u, then y, per token
            self.s.conv = _decode_buffer(np.zeros(B * 4 * d, f32), self.keep)
        self.s.dn = self.s.q_gate = NULL
        dn_floats = infer_block_deltanet_floats(m)
        if dn_floats:
            self.s.dn = _decode_buffer(np.zeros(B * dn_floats, f32), self.keep)
        self.s.m2 = NULL
        m2_floats = infer_block_mamba2_floats(m)
        if m2_floats:
            self.s.m2 = _decode_buffer(np.zeros(B * m2_floats, f32), self.keep)
        if m.attn_output_gate:
            self.s.q_gate = _decode_buffer(np.zeros(B * 2 * q_dim, f32), self.keep)
        cdef uint8_t[::1] xq
        widest = max(d, ffn, q_dim, P, m.shared_ffn_dim, dn_value_dim)
        for i in range(3):
            buf = np.zeros(infer_decode_act_bytes(widest, B), np.uint8)
            xq = buf
            self.s.xq[i] = &xq[0]
            self.keep.append(buf)

    cdef int _shortconv_layer(self, infer_block_layer *L, object conv, str name) except -1:
        import numpy as np
        cdef int64_t d = self.m.dim
        if not isinstance(conv, tuple) or len(conv) != 5:
            raise TypeError(f"{name}.conv: expected (kernel, b, c, u, out)")
        kernel = conv[0]
        if not isinstance(kernel, np.ndarray) or kernel.dtype != np.float32 or kernel.ndim != 2 \
                or kernel.shape[0] != d or not 1 <= kernel.shape[1] <= 64:
            raise ValueError(f"{name}.conv: the kernel must be float32 of shape ({d}, width <= 64)")
        L.conv_width = kernel.shape[1]
        L.conv_index = self.m.n_conv_layers
        self.m.n_conv_layers += 1
        L.conv_kernel = _decode_vector(np.ascontiguousarray(kernel).reshape(-1), d * L.conv_width, self.keep)
        L.conv_b = _shaped_matrix(conv[1], d, d, f"{name}.conv b", self.keep)
        L.conv_c = _shaped_matrix(conv[2], d, d, f"{name}.conv c", self.keep)
        L.conv_u = _shaped_matrix(conv[3], d, d, f"{name}.conv u", self.keep)
        L.conv_out = _shaped_matrix(conv[4], d, d, f"{name}.conv out", self.keep)
        return 0

    cdef int _deltanet_layer(self, infer_block_layer *L, object dn, str name) except -1:
        import numpy as np
        cdef int64_t d = self.m.dim, nv = self.m.dn_v_heads, dd = self.m.dn_d_state
        cdef int64_t vd = nv * dd, cd = 2 * <int64_t>self.m.dn_k_heads * dd + vd
        if not isinstance(dn, tuple) or len(dn) != 9:
            raise TypeError(f"{name}.deltanet: expected (conv, qkv, gate, alpha, beta, out, dt, a, norm)")
        conv = dn[0]
        if not isinstance(conv, np.ndarray) or conv.dtype != np.float32 or \
                conv.shape != (cd, self.m.dn_conv_width):
            raise ValueError(f"{name}.deltanet: the conv taps must be float32 of shape ({cd}, "
                             f"{self.m.dn_conv_width})")
        L.deltanet = 1
        L.dn_index = self.m.n_deltanet_layers
        self.m.n_deltanet_layers += 1
        L.ssm_conv = _decode_vector(np.ascontiguousarray(conv).reshape(-1), cd * self.m.dn_conv_width, self.keep)
        L.ssm_qkv = _shaped_matrix(dn[1], cd, d, f"{name}.deltanet qkv", self.keep)
        L.ssm_gate = _shaped_matrix(dn[2], vd, d, f"{name}.deltanet gate", self.keep)
        L.ssm_alpha = _shaped_matrix(dn[3], nv, d, f"{name}.deltanet alpha", self.keep)
        L.ssm_beta = _shaped_matrix(dn[4], nv, d, f"{name}.deltanet beta", self.keep)
        L.ssm_out = _shaped_matrix(dn[5], d, vd, f"{name}.deltanet out", self.keep)
        for key, at, n in (("dt", 6, nv), ("a", 7, nv), ("norm", 8, dd)):
            try:
                vec = _decode_vector(dn[at], n, self.keep)
            except ValueError as exc:
                raise ValueError(f"{name}.deltanet {key}: {exc}") from None
            if key == "dt":
                L.ssm_dt = vec
            elif key == "a":
                L.ssm_a = vec
            else:
                L.ssm_norm = vec
        return 0

    cdef int _mamba2_layer(self, infer_block_layer *L, object m2, str name) except -1:
        import numpy as np
        cdef int64_t d = self.m.dim, nh = self.m.m2_n_heads, inner = self.m.m2_d_inner
        cdef int64_t cd = inner + 2 * <int64_t>self.m.m2_n_groups * self.m.m2_d_state
        if not isinstance(m2, tuple) or len(m2) != 8:
            raise TypeError(f"{name}.mamba2: expected (conv, conv_bias, in, out, dt, a, d, norm)")
        conv = m2[0]
        if not isinstance(conv, np.ndarray) or conv.dtype != np.float32 or conv.shape != (cd, self.m.m2_conv_width):
            raise ValueError(f"{name}.mamba2: the conv taps must be float32 of shape ({cd}, {self.m.m2_conv_width})")
        L.mamba2 = 1
        L.dn_index = self.m.n_mamba2_layers
        self.m.n_mamba2_layers += 1
        L.ssm_conv = _decode_vector(np.ascontiguousarray(conv).reshape(-1), cd * self.m.m2_conv_width, self.keep)
        L.ssm_in = _shaped_matrix(m2[2], inner + cd + nh, d, f"{name}.mamba2 in", self.keep)
        L.ssm_out = _shaped_matrix(m2[3], d, inner, f"{name}.mamba2 out", self.keep)
        for key, at, n in (("conv_bias", 1, cd), ("dt", 4, nh), ("a", 5, nh), ("d", 6, nh), ("norm", 7, inner)):
            if key == "conv_bias" and m2[at] is None:
                continue
            try:
                vec = _decode_vector(m2[at], n, self.keep)
            except ValueError as exc:
                raise ValueError(f"{name}.mamba2 {key}: {exc}") from None
            if key == "conv_bias":
                L.ssm_conv_b = vec
            elif key == "dt":
                L.ssm_dt = vec
            elif key == "a":
                L.ssm_a = vec
            elif key == "d":
                L.ssm_d = vec
            else:
                L.ssm_norm = vec
        return 0

    @property
    def n_mamba2_layers(self):
        return self.m.n_mamba2_layers

    @property
    def n_deltanet_layers(self):
        return self.m.n_deltanet_layers

    @property
    def n_conv_layers(self):
        return self.m.n_conv_layers

    def __dealloc__(self):
        free(self.layers)

    @property
    def max_batch(self):
        return self.s.max_batch

    def step(self, k_caches, v_caches, tokens, positions, logits, conv_caches=None, ssm_states=None,
             ssm_convs=None):
        """Decode tokens[i] at positions[i] in the sequence whose caches are
        k_caches[i] / v_caches[i] (C-contiguous (n_layers, n_kv_heads, n_ctx,
        head_dim), both uint16 F16 bits or both float32, distinct per sequence),
        writing its K/V at that slot and its logits into logits[i] (float32 of
        vocab_size).  With shortconv layers, conv_caches[i] (float32, C-contiguous
        (n_conv_layers, n_ctx, dim)) gets the gated inputs.  With deltanet layers,
        ssm_states[i] (float32, C-contiguous (n_deltanet_layers, n_v_heads, d_state,
        d_state)) and ssm_convs[i] (float32, C-contiguous (n_deltanet_layers,
        conv_kernel - 1, conv_dim)) are sequence i's recurrent state, advanced by the
        token in place; with mamba2 layers, (n_mamba2_layers, n_heads, d_inner /
        n_heads, d_state) and (n_mamba2_layers, conv_kernel - 1, conv_dim).  Waits for a step running in another thread."""
        import numpy as np
        cdef int n = len(tokens), i, rc = -2
        if not 1 <= n <= self.s.max_batch:
            raise ValueError(f"tokens: a step takes 1 to {self.s.max_batch} sequences, got {n}")
        if not (len(k_caches) == len(v_caches) == len(positions) == len(logits) == n):
            raise ValueError("k_caches, v_caches, tokens, positions, logits: one of each per sequence")
        if self.m.n_conv_layers and (conv_caches is None or len(conv_caches) != n):
            raise ValueError("conv_caches: one per sequence for a model with shortconv layers")
        cdef int64_t n_dn = self.m.n_deltanet_layers, dd = self.m.dn_d_state
        cdef int64_t conv_dim = 2 * <int64_t>self.m.dn_k_heads * dd + <int64_t>self.m.dn_v_heads * dd
        state_shape = (n_dn, self.m.dn_v_heads, dd, dd)
        conv_shape = (n_dn, self.m.dn_conv_width - 1, conv_dim)
        if self.m.n_mamba2_layers:   # the same two arrays, Mamba2's shapes
            n_dn = self.m.n_mamba2_layers
            state_shape = (n_dn, self.m.m2_n_heads, self.m.m2_d_inner // self.m.m2_n_heads, self.m.m2_d_state)
            conv_shape = (n_dn, self.m.m2_conv_width - 1,
                          self.m.m2_d_inner + 2 * self.m.m2_n_groups * self.m.m2_d_state)
        if n_dn and (ssm_states is None or ssm_convs is None or len(ssm_states) != n or len(ssm_convs) != n):
            raise ValueError("ssm_states, ssm_convs: one of each per sequence for a model with recurrent layers")
        cdef list held = []
        cdef infer_block_seq seqs[INFER_BLOCK_MAX_BATCH]
        # every buffer the step writes: K, V, logits and conv cache of each sequence
        cdef const void *span_at[6 * INFER_BLOCK_MAX_BATCH]
        cdef Py_ssize_t span_len[6 * INFER_BLOCK_MAX_BATCH]
        cdef int a_i, b_i, n_spans = 0
        cdef uint8_t[::1] kb
        cdef uint8_t[::1] vb
        cdef float[::1] lv
        cdef float[::1] cv
        cdef float[::1] sv
        names = []
        for i in range(n):
            k, v = k_caches[i], v_caches[i]
            if not isinstance(k, np.ndarray) or not isinstance(v, np.ndarray):
                raise TypeError(f"k_caches[{i}], v_caches[{i}]: expected numpy arrays")
            if k.dtype != v.dtype or k.dtype not in (np.uint16, np.float32):
                raise TypeError(f"k_caches[{i}], v_caches[{i}]: expected both uint16 (F16 bits) or both float32")
            if self.uniform_kv:
                if k.ndim != 4 or k.shape != v.shape or k.shape[0] != self.m.n_layers or \
                        k.shape[1] != self.m.n_kv_heads or k.shape[3] != self.m.head_dim:
                    raise ValueError(f"k_caches[{i}]: expected shape ({self.m.n_layers}, {self.m.n_kv_heads}, "
                                     f"n_ctx, {self.m.head_dim}) for both caches, got {k.shape} and {v.shape}")
                n_ctx = k.shape[2]
            else:
                if k.ndim != 2 or k.shape != v.shape or k.shape[0] != self.m.kv_rows or \
                        k.shape[1] % self.m.kv_row_width:
                    raise ValueError(f"k_caches[{i}]: expected shape ({self.m.kv_rows}, n_ctx * "
                                     f"{self.m.kv_row_width}) for both caches, got {k.shape} and {v.shape}")
                n_ctx = k.shape[1] // self.m.kv_row_width
            if not (k.flags.c_contiguous and v.flags.c_contiguous and k.flags.writeable and v.flags.writeable):
                raise ValueError(f"k_caches[{i}], v_caches[{i}]: must be C-contiguous and writable")
            if not (k.flags.aligned and v.flags.aligned):
                raise ValueError(f"k_caches[{i}], v_caches[{i}]: must be aligned to their elements "
                                 f"(an odd-offset view?)")
            if not 1 <= n_ctx <= _INT_LIMIT:
                raise ValueError(f"k_caches[{i}]: n_ctx {n_ctx} out of range")
            # integers only: a token or position of 1.5 would be truncated to 1
            token = _int64(tokens[i], f"tokens[{i}]")
            pos = _int64(positions[i], f"positions[{i}]")
            if not 0 <= token < self.m.vocab_size:
                raise ValueError(f"tokens[{i}]: id {token} outside the vocabulary [0, {self.m.vocab_size})")
            if not 0 <= pos < n_ctx:
                raise ValueError(f"positions[{i}]: {pos} outside the context [0, {n_ctx})")
            lv = _f32_out(logits[i], f"logits[{i}]")
            if lv.shape[0] != self.m.vocab_size:
                raise ValueError(f"logits[{i}]: expected {self.m.vocab_size} values, got {lv.shape[0]}")
            _check_aligned_out(&lv[0], 4, f"logits[{i}]")
            kb = k.reshape(-1).view(np.uint8)
            vb = v.reshape(-1).view(np.uint8)
            held += [k, v, logits[i]]
            span_at[n_spans] = &kb[0]
            span_len[n_spans] = kb.shape[0]
            span_at[n_spans + 1] = &vb[0]
            span_len[n_spans + 1] = vb.shape[0]
            span_at[n_spans + 2] = &lv[0]
            span_len[n_spans + 2] = lv.shape[0] * 4
            n_spans += 3
            names += [f"k_caches[{i}]", f"v_caches[{i}]", f"logits[{i}]"]
            seqs[i].conv_cache = NULL
            if self.m.n_conv_layers:
                c = conv_caches[i]
                if not isinstance(c, np.ndarray) or c.dtype != np.float32 or \
                        c.shape != (self.m.n_conv_layers, n_ctx, self.m.dim):
                    raise ValueError(f"conv_caches[{i}]: expected float32 of shape ({self.m.n_conv_layers}, "
                                     f"{n_ctx}, {self.m.dim})")
                if not (c.flags.c_contiguous and c.flags.writeable and c.flags.aligned):
                    raise ValueError(f"conv_caches[{i}]: must be C-contiguous, writable and aligned")
                cv = c.reshape(-1)
                held.append(c)
                span_at[n_spans] = &cv[0]
                span_len[n_spans] = cv.shape[0] * 4
                n_spans += 1
                names.append(f"conv_caches[{i}]")
                seqs[i].conv_cache = &cv[0]
            seqs[i].ssm_state = seqs[i].ssm_conv = NULL
            if n_dn:
                for key, arrays, shape in (("ssm_states", ssm_states, state_shape),
                                           ("ssm_convs", ssm_convs, conv_shape)):
                    a = arrays[i]
                    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != shape:
                        raise ValueError(f"{key}[{i}]: expected float32 of shape {shape}")
                    if not (a.flags.c_contiguous and a.flags.writeable and a.flags.aligned):
                        raise ValueError(f"{key}[{i}]: must be C-contiguous, writable and aligned")
                    sv = a.reshape(-1)
                    held.append(a)
                    span_at[n_spans] = &sv[0]
                    span_len[n_spans] = sv.shape[0] * 4
                    n_spans += 1
                    names.append(f"{key}[{i}]")
                    if key == "ssm_states":
                        seqs[i].ssm_state = &sv[0]
                    else:
                        seqs[i].ssm_conv = &sv[0]
            seqs[i].n_ctx = n_ctx
            seqs[i].kv_f16 = 1 if k.dtype == np.uint16 else 0
            seqs[i].k_cache = &kb[0]
            seqs[i].v_cache = &vb[0]
            seqs[i].token = token
            seqs[i].pos = pos
            seqs[i].logits = &lv[0]
        # The step writes all of them: two that share a byte (a cache given twice, a
        # V cache overlapping its K cache, logits inside a cache) would mix their data.
        for a_i in range(n_spans):
            for b_i in range(a_i):
                if (<size_t>span_at[a_i] < <size_t>span_at[b_i] + <size_t>span_len[b_i]
                        and <size_t>span_at[b_i] < <size_t>span_at[a_i] + <size_t>span_len[a_i]):
                    _check_disjoint(span_at[a_i], span_len[a_i], names[a_i],
                                    span_at[b_i], span_len[b_i], names[b_i])
        with self.lock:   # a step of another thread first (the scratch is shared)
            if self.keep is None:
                raise RuntimeError("the model is closed")
            with nogil:
                rc = infer_block_decode(&self.m, &self.s, seqs, n)
        if rc == -1:
            raise NotImplementedError("a kernel this model needs is missing from the active kernel set")
        if rc != 0:
            raise ValueError("infer_block_decode: bad arguments")

    def decode(self, token, pos, k_cache, v_cache, logits, conv_cache=None, ssm_state=None, ssm_conv=None):
        """One sequence's step: `step` with a batch of one."""
        self.step((k_cache,), (v_cache,), (token,), (pos,), (logits,),
                  None if conv_cache is None else (conv_cache,),
                  None if ssm_state is None else (ssm_state,), None if ssm_conv is None else (ssm_conv,))

    def release(self):
        """Drop every reference to the weights (the model is closing); waits for a
        running step, and later steps raise RuntimeError."""
        with self.lock:
            self.keep = None
            self.m.layers = NULL
