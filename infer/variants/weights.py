"""The tensors a `TransformerSpec` names, as zero-copy views of the file.

* `Matrix`: a weight matrix as the kernels take it (raw rows in the file, its
  format); a fused tensor (Phi-3's ``attn_qkv``, a gate|up ``ffn_up``) is split
  into row views, so every consumer sees separate q/k/v and gate/up matrices.
* `Vector`: an F32 vector (norm weights, biases).
* `load_weights(spec, tensors)`: every tensor of the model, its shape checked
  against the spec; a tensor the spec does not account for is refused (it would
  change the maths, and ignoring it would give quietly wrong logits).

Names follow llama.cpp's GGUF conventions (``src/llama-arch.cpp``).
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

import numpy as np
from numpy.typing import NDArray

from .. import kernels as K
from ..arena import Arena
from ..gguf import GGUFError
from ..runtime import UnsupportedModelError
from ..tensor import unsupported_format_message
from .spec import UNGATED, TransformerSpec


class Matrix:
    """A weight matrix as the kernels take it: raw rows in the file, its format."""

    __slots__ = ("data", "qtype", "rows", "cols", "act_type", "file_data", "file_qtype")

    def __init__(self, tensor: Any, rows: int, cols: int, name: str, experts: int = 0) -> None:
        # experts > 0: a 3-D tensor of `experts` matrices of (rows, cols), stacked
        # into one matrix of experts * rows rows (expert e: rows e*rows ...)
        shape = tuple(int(s) for s in tensor.shape)
        want = (experts, rows, cols) if experts else (rows, cols)
        if shape != want:
            raise GGUFError(f"{name}: expected shape {want}, got {shape}")
        rows *= max(experts, 1)
        if not tensor.dtype.kernel_supported:   # found at load, not at the first token
            raise UnsupportedModelError(unsupported_format_message(name, tensor.dtype), [name])
        self.data = tensor.data.reshape(rows, -1)  # uint8 rows, zero-copy
        self.qtype = K.type_id(tensor.dtype)
        self.rows, self.cols = rows, cols
        #: format the input vector is quantized into for this matrix's dot products
        self.act_type = K.type_id(K.vec_dot_type(self.qtype))
        #: the rows and format in the file (``data`` may be a repacked copy)
        self.file_data, self.file_qtype = self.data, self.qtype

    def row_slice(self, lo: int, hi: int) -> "Matrix":
        """Rows [lo, hi) as a matrix of their own (a view: a fused tensor's parts,
        an expert of a stacked tensor).  A repacked matrix is cut only at its
        16-row groups."""
        if not 0 <= lo <= hi <= self.rows:
            raise ValueError(f"row_slice: rows [{lo}, {hi}) of a matrix of {self.rows}")
        if self.qtype != self.file_qtype and (lo % 16 or hi % 16):
            raise ValueError(f"row_slice: rows [{lo}, {hi}) cut the 16-row groups of a repacked matrix")
        part = object.__new__(Matrix)
        part.data = self.data[lo:hi]
        part.qtype, part.act_type = self.qtype, self.act_type
        part.rows, part.cols = hi - lo, self.cols
        part.file_data, part.file_qtype = part.data, part.qtype
        return part

    def repackable(self, group: int = 0) -> bool:
        """Whether `repacked` makes a copy: the active kernel set has a repacked
        format for this one and the rows come in 16s (and so do the rows of each
        of its parts of ``group`` rows: the experts of a stacked matrix)."""
        return (K.repack_type(self.qtype) is not None and self.rows > 0 and self.rows % 16 == 0
                and group % 16 == 0)

    def repacked(self, arena: Optional[Arena] = None, group: int = 0) -> "Matrix":
        """This matrix in the layout the active kernel set multiplies fastest
        (`kernels.repack_type`: 16 rows interleaved, csrc/repack.h), as a copy in
        memory (taken from ``arena`` if given); itself when not `repackable`."""
        if not self.repackable(group):
            return self
        part = object.__new__(Matrix)
        out = arena.take(self.data.shape) if arena is not None else None
        data, fmt = K.repack(self.data, self.qtype, out)
        part.data, part.qtype = data, K.type_id(fmt)
        part.act_type = K.type_id(K.vec_dot_type(part.qtype))
        part.rows, part.cols = self.rows, self.cols
        part.file_data, part.file_qtype = self.file_data, self.file_qtype
        return part

    def as_tuple(self) -> Tuple[Any, ...]:
        return (self.data, self.qtype, self.act_type, self.rows, self.cols)


def repack_enabled() -> bool:
    """Whether engines repack their weights at load (INFER_REPACK=0 turns it off)."""
    return os.environ.get("INFER_REPACK", "").strip() not in ("0", "off", "false", "no")


def repack_weights(w: "ModelWeights", release: Optional[Callable[[Any], None]] = None) -> "ModelWeights":
    """The model's matrices in the layout the active kernel set multiplies fastest
    (`Matrix.repacked`), as copies in memory: at most the size of those matrices in
    the file.  ``release(file_rows)`` is called for each matrix copied (the file's
    pages can go: `GGUFFile.release_pages`).  token_embd stays the file's (its rows
    are looked up one at a time); a tied head gets its own repacked copy.  The
    copies share one block of memory on huge pages where the OS offers them
    (`infer.arena`)."""
    matrices = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "shared_gate", "shared_up", "shared_down",
                "ple_gate", "ple_proj", "conv_b", "conv_c", "conv_u", "conv_out", "ssm_qkv", "ssm_gate",
                "ssm_alpha", "ssm_beta", "ssm_out", "ssm_in")
    # an expert of a stacked matrix is cut out of it by rows: repacked only if
    # each expert's rows are whole 16-row groups (the router stays as it is)
    groups = {"w_gate": w.expert_rows[0], "w_up": w.expert_rows[0], "w_down": w.expert_rows[1]}
    todo = [(w.output, 0)] + ([(w.ple_model_proj, 0)] if w.ple_model_proj is not None else []) + \
        [(getattr(layer, k), groups.get(k, 0)) for layer in w.layers for k in matrices
         if getattr(layer, k) is not None]
    arena = Arena(Arena.size_of([m.data.shape for m, g in todo if m.repackable(g)]))

    def fast(m: Matrix, group: int = 0) -> Matrix:
        r = m.repacked(arena, group)
        if r is not m and release is not None:
            release(m.file_data)
        return r

    layers = [dataclasses.replace(layer, **{k: fast(getattr(layer, k), groups.get(k, 0))  # type: ignore[arg-type]
                                            for k in matrices if getattr(layer, k) is not None})
              for layer in w.layers]
    ple_model_proj = fast(w.ple_model_proj) if w.ple_model_proj is not None else None
    return dataclasses.replace(w, output=fast(w.output), ple_model_proj=ple_model_proj, layers=layers)


class Vector:
    """An F32 vector (norm weights, biases)."""

    __slots__ = ("data",)

    def __init__(self, tensor: Any, n: int, name: str) -> None:
        # int(), not K.type_id: a file's I32/F64 norm is not a kernel format, and
        # type_id's "qtype: unsupported type id 26" would not name the tensor
        shape = tuple(int(s) for s in tensor.shape)
        if int(tensor.dtype) != 0 or shape not in ((n,), (1, n)):
            kind = getattr(tensor.dtype, "name", tensor.dtype)
            raise GGUFError(f"{name}: expected F32 of {n} values, got {kind} of shape {shape}")
        self.data = tensor.data.view(np.float32).reshape(n)


class Table:
    """An F32 table of rows x cols (gpt-oss's per-expert biases: GGUF dims {cols, rows})."""

    __slots__ = ("data",)

    def __init__(self, tensor: Any, rows: int, cols: int, name: str) -> None:
        shape = tuple(int(s) for s in tensor.shape)
        if int(tensor.dtype) != 0 or shape != (rows, cols):
            kind = getattr(tensor.dtype, "name", tensor.dtype)
            raise GGUFError(f"{name}: expected F32 of shape {(rows, cols)}, got {kind} of shape {shape}")
        self.data = tensor.data.view(np.float32).reshape(rows, cols)


@dataclass
class LayerWeights:
    """One block's tensors; None where the spec has no such piece (a shortconv
    layer has no wq, wk, wv, wo; an attention layer no conv_*)."""

    #: None without pre_norms
    attn_norm: Optional[Vector]
    #: None in a shortconv layer
    wq: Optional[Matrix]
    #: None there, in a layer that reads another's KV cache (spec kv_source)
    wk: Optional[Matrix]
    #: None there too, and where V is K's projection (spec v_from_k)
    wv: Optional[Matrix]
    wo: Optional[Matrix]
    #: None without pre_norms
    ffn_norm: Optional[Vector]
    #: with a mixture of experts: every expert's matrices stacked (`MoE`); None in a
    #: layer without an FFN half (LayerSpec.ffn False: `ffn` asserts there is one)
    w_gate: Optional[Matrix]
    w_up: Optional[Matrix]
    w_down: Optional[Matrix]
    #: ffn_gate_inp (n_experts, dim) of a mixture of experts
    router: Optional[Matrix] = None
    #: exp_probs_b.bias (n_experts): the experts' selection biases (MoE.selection_bias)
    expert_bias: Optional[Vector] = None
    #: a shared expert (MoE.shared_ffn_dim) and the vector of its sigmoid gate
    shared_gate: Optional[Matrix] = None
    shared_up: Optional[Matrix] = None
    shared_down: Optional[Matrix] = None
    shared_gate_inp: Optional[Vector] = None
    q_bias: Optional[Vector] = None
    k_bias: Optional[Vector] = None
    v_bias: Optional[Vector] = None
    q_norm: Optional[Vector] = None
    k_norm: Optional[Vector] = None
    post_attn_norm: Optional[Vector] = None
    post_ffn_norm: Optional[Vector] = None
    #: the LayerNorms' biases (spec norm_bias)
    attn_norm_bias: Optional[Vector] = None
    ffn_norm_bias: Optional[Vector] = None
    #: blk.N.layer_output_scale (one value)
    out_scale: Optional[Vector] = None
    #: per-layer embeddings: blk.N.inp_gate (per_layer_dim x dim), blk.N.proj
    #: (dim x per_layer_dim), blk.N.post_norm
    ple_gate: Optional[Matrix] = None
    ple_proj: Optional[Matrix] = None
    ple_post_norm: Optional[Vector] = None
    #: shortconv.in_proj split into its b, c and u row blocks (dim rows each)
    conv_b: Optional[Matrix] = None
    conv_c: Optional[Matrix] = None
    conv_u: Optional[Matrix] = None
    #: shortconv.out_proj (dim x dim)
    conv_out: Optional[Matrix] = None
    #: shortconv.conv: (dim, L) F32 taps, column L-1 on the current position
    conv_kernel: Optional[NDArray[np.float32]] = None
    #: a deltanet layer (spec.DeltaNet): attn_qkv (conv_dim x dim), attn_gate (z:
    #: value_dim x dim), ssm_alpha and ssm_beta (n_v_heads x dim), ssm_out (dim x
    #: value_dim); ssm_conv1d's (conv_dim, K) F32 taps, column K-1 on the current
    #: position; ssm_dt.bias, ssm_a (-exp(A_log), as the converter stores it), ssm_norm
    ssm_qkv: Optional[Matrix] = None
    ssm_gate: Optional[Matrix] = None
    ssm_alpha: Optional[Matrix] = None
    ssm_beta: Optional[Matrix] = None
    ssm_out: Optional[Matrix] = None
    ssm_conv: Optional[NDArray[np.float32]] = None
    ssm_dt: Optional[Vector] = None
    ssm_a: Optional[Vector] = None
    ssm_norm: Optional[Vector] = None
    #: gpt-oss: attn_sinks (n_heads), attn_output.bias (dim), ffn_gate_inp.bias
    #: (n_experts) and the experts' biases, (n_experts, ffn_dim) for gate and up,
    #: (n_experts, dim) for down
    attn_sinks: Optional[Vector] = None
    o_bias: Optional[Vector] = None
    router_bias: Optional[Vector] = None
    gate_exps_bias: Optional[Table] = None
    up_exps_bias: Optional[Table] = None
    down_exps_bias: Optional[Table] = None
    #: a mamba2 layer (spec.Mamba2) also: ssm_in (z, xBC, dt rows: in_dim x dim), the
    #: conv's optional bias, ssm_d (D); its ssm_norm has d_inner weights, n_groups groups
    ssm_in: Optional[Matrix] = None
    ssm_conv_bias: Optional[Vector] = None
    ssm_d: Optional[Vector] = None
    #: ffn_up.bias (ffn_dim) and ffn_down.bias (dim) of an FFN without a gate (spec ffn_bias)
    ffn_up_bias: Optional[Vector] = None
    ffn_down_bias: Optional[Vector] = None
    #: an mla layer (spec.MLA): attn_q_a (q_lora_rank x dim), attn_q_a_norm and attn_q_b
    #: (n_heads * q_head_dim x q_lora_rank) in place of wq if it has a low-rank q;
    #: attn_kv_a_mqa (cache_dim x dim: the latent, then the rope key), attn_kv_a_norm
    #: (kv_lora_rank); attn_k_b stacked per head (kv_lora_rank x nope_dim each: head h's
    #: q_nope -> latent) and attn_v_b (v_dim x kv_lora_rank each: latent -> head h's value)
    wq_a: Optional[Matrix] = None
    q_a_norm: Optional[Vector] = None
    wq_b: Optional[Matrix] = None
    wkv_a: Optional[Matrix] = None
    kv_a_norm: Optional[Vector] = None
    wk_b: Optional[Matrix] = None
    wv_b: Optional[Matrix] = None
    #: the older conversions' attn_kv_b (n_heads * (nope_dim + v_dim) x kv_lora_rank: per
    #: head, the key's nope rows, then the value's), in place of wk_b and wv_b (MLA.decompressed)
    wkv_b: Optional[Matrix] = None

    def ffn(self) -> Tuple[Matrix, Matrix, Matrix]:
        """(gate, up, down) of a layer with an FFN half."""
        assert self.w_gate is not None and self.w_up is not None and self.w_down is not None
        return self.w_gate, self.w_up, self.w_down


@dataclass
class ModelWeights:
    token_embd: Matrix
    output_norm: Vector
    #: token_embd itself when the head is tied
    output: Matrix
    layers: List[LayerWeights]
    #: rows of one expert in the stacked (gate and up, down) matrices; (0, 0): no experts
    expert_rows: Tuple[int, int] = (0, 0)
    #: per-layer embeddings (spec per_layer_dim): per_layer_token_embd (vocab x
    #: n_layers * per_layer_dim), per_layer_model_proj (n_layers * per_layer_dim x
    #: dim), per_layer_proj_norm (per_layer_dim)
    ple_embd: Optional[Matrix] = None
    ple_model_proj: Optional[Matrix] = None
    ple_proj_norm: Optional[Vector] = None
    #: output_norm.bias (spec norm_bias)
    output_norm_bias: Optional[Vector] = None
    #: output.bias (spec output_bias: Phi-2)
    output_bias: Optional[Vector] = None


class _Tensors:
    """need(name) -> the tensor, or an error naming the missing one; records what was used."""

    def __init__(self, tensors: Dict[str, Any]) -> None:
        self.tensors = tensors
        self.used: Set[str] = set()

    def need(self, name: str) -> Any:
        if name not in self.tensors:
            raise GGUFError(f"GGUF file: tensor {name} is missing")
        self.used.add(name)
        return self.tensors[name]

    def matrix(self, name: str, rows: int, cols: int, experts: int = 0) -> Matrix:
        return Matrix(self.need(name), rows, cols, name, experts)

    def vector(self, name: str, n: int) -> Vector:
        return Vector(self.need(name), n, name)

    def table(self, name: str, rows: int, cols: int) -> Table:
        return Table(self.need(name), rows, cols, name)


def load_weights(spec: TransformerSpec, tensors: Dict[str, Any],
                 also_used: Iterable[str] = ()) -> ModelWeights:
    """Every tensor of the model the spec describes.  ``also_used``: tensors the
    variant read itself (``rope_freqs.weight`` into the spec); any other tensor
    in the file raises GGUFError naming it."""
    t = _Tensors(tensors)
    d = spec.dim
    vocab = spec.vocab_size
    token_embd = t.matrix("token_embd.weight", vocab, d)
    tied = "output.weight" not in tensors if spec.tied_head is None else spec.tied_head
    output = token_embd if tied else t.matrix("output.weight", vocab, d)
    output_norm = t.vector(f"{spec.output_norm_tensor}.weight", d)

    layers = []
    for i in range(spec.n_layers):
        def m(part: str, rows: int, cols: int, i: int = i) -> Matrix:
            return t.matrix(f"blk.{i}.{part}.weight", rows, cols)

        def v(part: str, n: int, suffix: str = "weight", i: int = i) -> Vector:
            return t.vector(f"blk.{i}.{part}.{suffix}", n)

        if spec.layers[i].shortconv:
            layers.append(_shortconv_layer(spec, i, t))
            continue
        if spec.layers[i].kind == "mamba2":
            layers.append(_mamba2_layer(spec, i, t))
            continue
        if spec.layers[i].kind == "mlp":
            layers.append(_mlp_layer(spec, i, t))
            continue
        if spec.layers[i].kind == "mla":
            layers.append(_mla_layer(spec, i, t))
            continue
        ls = spec.layers[i]
        hd = spec.layer_head_dim(i)
        q_dim, kv_dim = spec.n_heads * hd, spec.layer_kv_heads(i) * hd
        wq: Optional[Matrix]
        wk: Optional[Matrix]
        wv: Optional[Matrix]
        deltanet = ls.kind == "deltanet"
        if deltanet:   # its own tensors, after the FFN's
            wq = wk = wv = None
        elif spec.attn_output_gate:   # per head: q's rows, then its gate's
            if spec.fused_qkv or not ls.default_pieces:
                raise GGUFError("an attention output gate with a fused attn_qkv or per-layer sizes is not supported")
            wq, wk, wv = m("attn_q", 2 * q_dim, d), m("attn_k", kv_dim, d), m("attn_v", kv_dim, d)
        elif spec.fused_qkv:
            if not ls.default_pieces:
                raise GGUFError("a fused attn_qkv with per-layer sizes or shared KV is not supported")
            qkv = m("attn_qkv", q_dim + 2 * kv_dim, d)
            wq, wk, wv = (qkv.row_slice(0, q_dim), qkv.row_slice(q_dim, q_dim + kv_dim),
                          qkv.row_slice(q_dim + kv_dim, q_dim + 2 * kv_dim))
        elif ls.kv_source is not None:
            wq, wk, wv = m("attn_q", q_dim, d), None, None
        else:
            wq, wk = m("attn_q", q_dim, d), m("attn_k", kv_dim, d)
            wv = None if ls.v_from_k else m("attn_v", kv_dim, d)
        experts = _expert_pieces(spec, i, t)   # the router first: it names a wrong expert_count
        w_gate, w_up, w_down = _ffn_matrices(spec, i, t)
        attn_norm = v("attn_norm", d) if spec.pre_norms else None
        # parallel blocks: one norm feeds both halves (the fused step norms x again for the FFN)
        ffn_norm = attn_norm if spec.parallel_blocks else t.vector(spec.ffn_norm_name(i), d) \
            if spec.pre_norms and ls.ffn else None
        L = LayerWeights(
            attn_norm=attn_norm, wq=wq, wk=wk, wv=wv,
            wo=None if deltanet else m("attn_output", d, q_dim),
            ffn_norm=ffn_norm,
            w_gate=w_gate, w_up=w_up, w_down=w_down, **experts)
        if deltanet:
            _deltanet_tensors(spec, i, t, L)
        elif spec.qkv_bias and spec.fused_qkv and f"blk.{i}.attn_qkv.bias" in tensors:   # Phi-2's fused bias
            qkv_bias = v("attn_qkv", q_dim + 2 * kv_dim, "bias").data
            L.q_bias, L.k_bias, L.v_bias = (_vector_of(qkv_bias[:q_dim]), _vector_of(qkv_bias[q_dim:q_dim + kv_dim]),
                                            _vector_of(qkv_bias[q_dim + kv_dim:]))
        elif spec.qkv_bias:   # (llama.cpp also reads separate q/k/v biases beside a fused attn_qkv)
            L.q_bias, L.k_bias, L.v_bias = (v("attn_q", q_dim, "bias"), v("attn_k", kv_dim, "bias"),
                                            v("attn_v", kv_dim, "bias"))
        if spec.qk_norm and not deltanet:
            whole = spec.qk_norm_scope == "all"
            L.q_norm = v("attn_q_norm", q_dim if whole else hd)
            L.k_norm = v("attn_k_norm", kv_dim if whole else hd) if ls.kv_source is None else None
        if spec.norm_bias:
            L.attn_norm_bias = v("attn_norm", d, "bias")
            L.ffn_norm_bias = L.attn_norm_bias if spec.parallel_blocks else v("ffn_norm", d, "bias") \
                if ls.ffn else None
        if spec.post_attn_norm:
            L.post_attn_norm = v("post_attention_norm", d)
        _gpt_oss_pieces(spec, i, t, L)
        if spec.post_ffn_norm:
            L.post_ffn_norm = v("post_ffw_norm", d)
        if ls.out_scale:
            L.out_scale = v("layer_output_scale", 1)
        if ls.parallel_mamba2:
            _mamba2_mixer(spec, i, t, L)
        _ffn_biases(spec, i, t, L)
        if spec.per_layer_dim:
            L.ple_gate = m("inp_gate", spec.per_layer_dim, d)
            L.ple_proj = m("proj", d, spec.per_layer_dim)
            L.ple_post_norm = v("post_norm", d)
        layers.append(L)
    weights = ModelWeights(token_embd=token_embd, output_norm=output_norm, output=output, layers=layers)
    if spec.norm_bias:
        weights.output_norm_bias = t.vector(f"{spec.output_norm_tensor}.bias", d)
    if spec.output_bias:
        weights.output_bias = t.vector("output.bias", vocab)
    if spec.per_layer_dim:
        n_ple = spec.n_layers * spec.per_layer_dim
        weights.ple_embd = t.matrix("per_layer_token_embd.weight", vocab, n_ple)
        weights.ple_model_proj = t.matrix("per_layer_model_proj.weight", n_ple, d)
        weights.ple_proj_norm = t.vector("per_layer_proj_norm.weight", spec.per_layer_dim)

    unknown = sorted(set(tensors) - t.used - set(also_used))
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise UnsupportedModelError(
            f"GGUF file: tensor(s) {shown} are not part of the model this variant describes; "
            f"they would change the maths, so the file is refused rather than run without them",
            unknown)
    weights.expert_rows = (spec.ffn_dim, d) if spec.moe is not None else (0, 0)
    return weights


def _vector_of(data: NDArray[np.float32]) -> Vector:
    """A Vector viewing part of another's F32 values (a fused tensor's parts)."""
    vector = object.__new__(Vector)
    vector.data = data
    return vector


def _ffn_biases(spec: TransformerSpec, i: int, t: _Tensors, L: LayerWeights) -> None:
    """Layer i's ffn_up.bias and ffn_down.bias (spec ffn_bias; a layer with an FFN)."""
    if spec.ffn_bias and spec.layers[i].ffn:
        L.ffn_up_bias = t.vector(f"blk.{i}.ffn_up.bias", spec.layer_ffn_dim(i))
        L.ffn_down_bias = t.vector(f"blk.{i}.ffn_down.bias", spec.dim)


def _ffn_matrices(spec: TransformerSpec, i: int,
                  t: _Tensors) -> Tuple[Optional[Matrix], Optional[Matrix], Optional[Matrix]]:
    """Layer i's (gate, up, down): every expert's stacked, or the dense FFN's; None
    in a layer without an FFN half."""
    d, ffn, p = spec.dim, spec.layer_ffn_dim(i), f"blk.{i}."
    if not spec.layers[i].ffn:
        return None, None, None
    if spec.layer_experts(i):   # GGUF dims (dim, ffn, experts) for gate/up, (ffn, dim, experts) for down
        assert spec.moe is not None
        n_exp = spec.moe.n_experts
        if spec.activation in UNGATED:   # (up stands in the gate's place, unread)
            up = t.matrix(p + "ffn_up_exps.weight", ffn, d, n_exp)
            return up, up, t.matrix(p + "ffn_down_exps.weight", d, ffn, n_exp)
        return (t.matrix(p + "ffn_gate_exps.weight", ffn, d, n_exp), t.matrix(p + "ffn_up_exps.weight", ffn, d, n_exp),
                t.matrix(p + "ffn_down_exps.weight", d, ffn, n_exp))
    if spec.activation in UNGATED:   # no gate (Arcee, Apertus): up stands in its place, unread
        up = t.matrix(p + "ffn_up.weight", ffn, d)
        return up, up, t.matrix(p + "ffn_down.weight", d, ffn)
    if spec.fused_gate_up:   # the gate is the first half of ffn_up's output
        gate_up = t.matrix(p + "ffn_up.weight", 2 * ffn, d)
        return gate_up.row_slice(0, ffn), gate_up.row_slice(ffn, 2 * ffn), t.matrix(p + "ffn_down.weight", d, ffn)
    return (t.matrix(p + "ffn_gate.weight", ffn, d), t.matrix(p + "ffn_up.weight", ffn, d),
            t.matrix(p + "ffn_down.weight", d, ffn))


def _expert_pieces(spec: TransformerSpec, i: int, t: _Tensors) -> Dict[str, Any]:
    """Layer i's router, selection biases and shared expert (a mixture's layer
    only), as LayerWeights fields."""
    moe = spec.moe
    if moe is None or not spec.layer_experts(i):
        return {}
    d, p = spec.dim, f"blk.{i}."
    pieces: Dict[str, Any] = {"router": t.matrix(p + "ffn_gate_inp.weight", moe.n_experts, d)}
    if moe.selection_bias:
        bias = pieces["expert_bias"] = t.vector(p + "exp_probs_b.bias", moe.n_experts)
        if not np.isfinite(bias.data).all():
            raise GGUFError(f"{p}exp_probs_b.bias: the experts' selection biases must be finite")
    sh = moe.shared_ffn_dim
    if sh:   # (without a gate, up stands in the gate's place, unread)
        gate = None if spec.activation in UNGATED else t.matrix(p + "ffn_gate_shexp.weight", sh, d)
        up = t.matrix(p + "ffn_up_shexp.weight", sh, d)
        pieces.update(shared_gate=gate or up, shared_up=up, shared_down=t.matrix(p + "ffn_down_shexp.weight", d, sh))
        if moe.shared_gated:
            pieces["shared_gate_inp"] = t.vector(p + "ffn_gate_inp_shexp.weight", d)
    return pieces


def _gpt_oss_pieces(spec: TransformerSpec, i: int, t: _Tensors, L: LayerWeights) -> None:
    """Layer i's attention sinks, output bias, router bias and expert biases, where
    the spec has them (gpt-oss; llama.cpp's names)."""
    p = f"blk.{i}."
    if spec.attn_sinks:
        L.attn_sinks = t.vector(p + "attn_sinks.weight", spec.n_heads)
    if spec.out_bias:
        L.o_bias = t.vector(p + "attn_output.bias", spec.dim)
    moe = spec.moe
    if moe is None or not spec.layer_experts(i):
        return
    if moe.router_bias:
        L.router_bias = t.vector(p + "ffn_gate_inp.bias", moe.n_experts)
    if moe.expert_biases:
        n, ffn = moe.n_experts, spec.layer_ffn_dim(i)
        L.gate_exps_bias = t.table(p + "ffn_gate_exps.bias", n, ffn)
        L.up_exps_bias = t.table(p + "ffn_up_exps.bias", n, ffn)
        L.down_exps_bias = t.table(p + "ffn_down_exps.bias", n, spec.dim)


def _shortconv_layer(spec: TransformerSpec, i: int, t: _Tensors) -> LayerWeights:
    """A shortconv layer's tensors (LFM2; llama.cpp's names): the norms and FFN of
    every layer, shortconv.in_proj / out_proj / conv instead of attention."""
    d, width = spec.dim, spec.layers[i].conv_width
    if spec.fused_gate_up or spec.qkv_bias or spec.post_attn_norm or spec.post_ffn_norm or not spec.pre_norms:
        raise UnsupportedModelError("a shortconv layer with fused gate|up, biases, post-norms or without "
                                    "pre-norms is not implemented")
    p = f"blk.{i}."
    conv_in = t.matrix(p + "shortconv.in_proj.weight", 3 * d, d)
    name = p + "shortconv.conv.weight"
    kernel = t.need(name)
    shape = tuple(int(s) for s in kernel.shape)
    if int(kernel.dtype) != 0 or shape != (d, width):
        kind = getattr(kernel.dtype, "name", kernel.dtype)
        raise GGUFError(f"{name}: expected F32 of shape {(d, width)} (dim, shortconv.l_cache), "
                        f"got {kind} of shape {shape}")
    experts = _expert_pieces(spec, i, t)
    w_gate, w_up, w_down = _ffn_matrices(spec, i, t)
    return LayerWeights(
        attn_norm=t.vector(p + "attn_norm.weight", d), wq=None, wk=None, wv=None, wo=None,
        ffn_norm=t.vector(p + "ffn_norm.weight", d), w_gate=w_gate, w_up=w_up, w_down=w_down,
        conv_b=conv_in.row_slice(0, d), conv_c=conv_in.row_slice(d, 2 * d), conv_u=conv_in.row_slice(2 * d, 3 * d),
        conv_out=t.matrix(p + "shortconv.out_proj.weight", d, d),
        conv_kernel=kernel.data.view(np.float32).reshape(d, width), **experts)


def _mla_layer(spec: TransformerSpec, i: int, t: _Tensors) -> LayerWeights:
    """Layer i of kind "mla" (llama.cpp's deepseek2 with the split attn_k_b / attn_v_b
    the converter writes): its attention tensors (`LayerWeights`), pre-norms and FFN."""
    mla = spec.mla
    assert mla is not None
    if (spec.qkv_bias or spec.qk_norm or spec.post_attn_norm or spec.post_ffn_norm or not spec.pre_norms
            or spec.norm_bias or spec.per_layer_dim or spec.parallel_blocks or spec.out_bias or spec.attn_sinks
            or spec.norm_kind != "rms" or spec.layers[i].head_dim is not None or spec.layers[i].n_kv_heads is not None
            or spec.layers[i].kv_source is not None or spec.layers[i].v_from_k or spec.layers[i].out_scale):
        raise UnsupportedModelError("an mla layer with biases, q/k norms, post-norms, per-layer sizes or without "
                                    "RMS pre-norms is not implemented", [])
    d, p = spec.dim, f"blk.{i}."
    q_rows = spec.n_heads * mla.q_head_dim
    experts = _expert_pieces(spec, i, t)
    w_gate, w_up, w_down = _ffn_matrices(spec, i, t)
    L = LayerWeights(attn_norm=t.vector(p + "attn_norm.weight", d), wq=None, wk=None, wv=None,
                     wo=t.matrix(p + "attn_output.weight", d, spec.n_heads * mla.v_dim),
                     ffn_norm=t.vector(p + "ffn_norm.weight", d), w_gate=w_gate, w_up=w_up, w_down=w_down,
                     **experts)
    if mla.q_lora_rank:
        L.wq_a = t.matrix(p + "attn_q_a.weight", mla.q_lora_rank, d)
        L.q_a_norm = t.vector(p + "attn_q_a_norm.weight", mla.q_lora_rank)
        L.wq_b = t.matrix(p + "attn_q_b.weight", q_rows, mla.q_lora_rank)
    else:
        L.wq = t.matrix(p + "attn_q.weight", q_rows, d)
    L.wkv_a = t.matrix(p + "attn_kv_a_mqa.weight", mla.kv_a_dim, d)
    L.kv_a_norm = t.vector(p + "attn_kv_a_norm.weight", mla.kv_lora_rank)
    if mla.decompressed:
        L.wkv_b = t.matrix(p + "attn_kv_b.weight", spec.n_heads * (mla.nope_dim + mla.v_dim), mla.kv_lora_rank)
    else:
        L.wk_b = t.matrix(p + "attn_k_b.weight", mla.kv_lora_rank, mla.nope_dim, spec.n_heads)
        L.wv_b = t.matrix(p + "attn_v_b.weight", mla.v_dim, mla.kv_lora_rank, spec.n_heads)
    return L


def _mlp_layer(spec: TransformerSpec, i: int, t: _Tensors) -> LayerWeights:
    """An FFN-only layer's tensors (Nemotron-H; llama.cpp's names): attn_norm, the one
    norm of the layer, and the FFN without a gate (optionally with its biases)."""
    if spec.activation not in UNGATED or spec.post_ffn_norm or spec.norm_bias or spec.per_layer_dim:
        raise UnsupportedModelError("an FFN-only layer with a gate, post-norms, norm biases or per-layer "
                                    "inputs is not implemented")
    norm = t.vector(f"blk.{i}.attn_norm.weight", spec.dim)
    experts = _expert_pieces(spec, i, t)
    w_gate, w_up, w_down = _ffn_matrices(spec, i, t)
    L = LayerWeights(attn_norm=norm, wq=None, wk=None, wv=None, wo=None, ffn_norm=norm,
                     w_gate=w_gate, w_up=w_up, w_down=w_down, **experts)
    _ffn_biases(spec, i, t, L)
    return L


def _flat_f32(t: _Tensors, name: str, n: int) -> Vector:
    """An F32 tensor of n values in any shape whose other axes are 1 or that splits
    n in groups (Mamba2's ssm_a and ssm_d (n, 1), its ssm_norm (groups, n / groups))."""
    tensor = t.need(name)
    shape = tuple(int(s) for s in tensor.shape)
    if int(tensor.dtype) != 0 or math.prod(shape) != n or len(shape) > 2:
        kind = getattr(tensor.dtype, "name", tensor.dtype)
        raise GGUFError(f"{name}: expected F32 of {n} values, got {kind} of shape {shape}")
    vector = object.__new__(Vector)
    vector.data = tensor.data.view(np.float32).reshape(n)
    return vector


def _mamba2_layer(spec: TransformerSpec, i: int, t: _Tensors) -> LayerWeights:
    """A mamba2 layer's tensors (Granite 4.0-H; llama.cpp's names and shapes,
    src/models/granite-hybrid.cpp): the mixer's and the block's FFN."""
    m2 = spec.mamba2
    assert m2 is not None
    if spec.qkv_bias or spec.post_attn_norm or spec.post_ffn_norm or not spec.pre_norms or spec.per_layer_dim:
        raise UnsupportedModelError("a mamba2 layer with biases, post-norms, per-layer inputs or without "
                                    "pre-norms is not implemented")
    d, p = spec.dim, f"blk.{i}."
    experts = _expert_pieces(spec, i, t)
    w_gate, w_up, w_down = _ffn_matrices(spec, i, t)
    L = LayerWeights(attn_norm=t.vector(p + "attn_norm.weight", d), wq=None, wk=None, wv=None, wo=None,
                     ffn_norm=t.vector(spec.ffn_norm_name(i), d) if spec.layers[i].ffn else None,
                     w_gate=w_gate, w_up=w_up, w_down=w_down, **experts)
    _mamba2_mixer(spec, i, t, L)
    return L


def _mamba2_mixer(spec: TransformerSpec, i: int, t: _Tensors, L: LayerWeights) -> None:
    """Layer i's Mamba2 mixer tensors into L (a mamba2 layer's, or Falcon-H1's beside
    attention; llama.cpp's names and shapes)."""
    m2 = spec.mamba2
    assert m2 is not None
    d, p = spec.dim, f"blk.{i}."
    L.ssm_in = t.matrix(p + "ssm_in.weight", m2.in_dim, d)
    L.ssm_out = t.matrix(p + "ssm_out.weight", d, m2.d_inner)
    L.ssm_dt = t.vector(p + "ssm_dt.bias", m2.n_heads)
    L.ssm_a = _flat_f32(t, p + "ssm_a", m2.n_heads)
    L.ssm_d = _flat_f32(t, p + "ssm_d", m2.n_heads)
    if m2.gated_norm:
        L.ssm_norm = _flat_f32(t, p + "ssm_norm.weight", m2.d_inner)
    if p + "ssm_conv1d.bias" in t.tensors:
        L.ssm_conv_bias = t.vector(p + "ssm_conv1d.bias", m2.conv_dim)
    name = p + "ssm_conv1d.weight"
    kernel = t.need(name)
    shape = tuple(int(s) for s in kernel.shape)
    if int(kernel.dtype) != 0 or shape != (m2.conv_dim, m2.conv_kernel):
        kind = getattr(kernel.dtype, "name", kernel.dtype)
        raise GGUFError(f"{name}: expected F32 of shape {(m2.conv_dim, m2.conv_kernel)} (channels, "
                        f"ssm.conv_kernel), got {kind} of shape {shape}")
    L.ssm_conv = kernel.data.view(np.float32).reshape(m2.conv_dim, m2.conv_kernel)


def _deltanet_tensors(spec: TransformerSpec, i: int, t: _Tensors, L: LayerWeights) -> None:
    """A deltanet layer's own tensors into L (Qwen3.5; llama.cpp's names and shapes,
    src/models/qwen35.cpp)."""
    dn = spec.deltanet
    assert dn is not None
    if spec.qkv_bias or spec.post_attn_norm or spec.post_ffn_norm or not spec.pre_norms:
        raise UnsupportedModelError("a deltanet layer with biases, post-norms or without pre-norms is not implemented")
    d, p = spec.dim, f"blk.{i}."
    L.ssm_qkv = t.matrix(p + "attn_qkv.weight", dn.conv_dim, d)
    L.ssm_gate = t.matrix(p + "attn_gate.weight", dn.value_dim, d)
    L.ssm_alpha = t.matrix(p + "ssm_alpha.weight", dn.n_v_heads, d)
    L.ssm_beta = t.matrix(p + "ssm_beta.weight", dn.n_v_heads, d)
    L.ssm_out = t.matrix(p + "ssm_out.weight", d, dn.value_dim)
    L.ssm_dt = t.vector(p + "ssm_dt.bias", dn.n_v_heads)
    L.ssm_a = t.vector(p + "ssm_a", dn.n_v_heads)
    L.ssm_norm = t.vector(p + "ssm_norm.weight", dn.d_state)
    name = p + "ssm_conv1d.weight"
    kernel = t.need(name)
    shape = tuple(int(s) for s in kernel.shape)
    if int(kernel.dtype) != 0 or shape != (dn.conv_dim, dn.conv_kernel):
        kind = getattr(kernel.dtype, "name", kernel.dtype)
        raise GGUFError(f"{name}: expected F32 of shape {(dn.conv_dim, dn.conv_kernel)} (channels, "
                        f"ssm.conv_kernel), got {kind} of shape {shape}")
    L.ssm_conv = kernel.data.view(np.float32).reshape(dn.conv_dim, dn.conv_kernel)
