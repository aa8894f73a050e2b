"""The transformer family's engine: one forward pass for every `TransformerSpec`.

* `TransformerEngine`: a spec, its weights (views of the file map), the contexts
  it made (so close() can drop every view), and the batched decode step.
* `TransformerContext`: a KV cache of shape (layers, kv_heads, n_ctx, head_dim),
  written in place at each position (with per-layer sizes or shared-KV layers:
  one flat row per layer that owns a cache, viewed per layer by `_kv_layout`);
  `_block` below is the readable forward pass that prefill runs through the
  matrix-matrix kernels.  Decoding one token is a
  single C call for the whole pass (csrc/transformer_block.c, reading the same
  spec), and `forward_batch` decodes one token of each of several contexts in
  one such call; ``fused_decode = False`` decodes through `_block` instead,
  which the tests compare the C step against.

A variant module (llama.py, gemma3.py) reads its metadata into a spec and calls
`TransformerEngine(spec, gguf_file)`; nothing here knows a family by name.
"""
from __future__ import annotations

import math
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Dict, Iterable, Iterator, Optional, Sequence, Tuple

import numpy as np
from numpy.typing import NDArray

from .. import kernels as K
from ..runtime import Context, Engine, ModelClosedError, RowOutputs
from .spec import CACHELESS_KINDS, UNGATED, LayerSpec, MoE, TransformerSpec
from .weights import LayerWeights, Matrix, ModelWeights, load_weights, repack_enabled, repack_weights

# Prefill processes at most this many tokens per pass (bounds the scratch memory).
N_BATCH = 512
#: a context with deltanet layers keeps a copy of their recurrent state at the end
#: of each prefill and every CHECKPOINT_INTERVAL decoded positions, at most
#: MAX_CHECKPOINTS of them (the oldest decoded one goes first: a prefill's end is
#: where a chat or a server's next prompt most likely branches off); truncate_to(n)
#: restores the latest at or before n and evaluates the tokens after it again
CHECKPOINT_INTERVAL = 16
MAX_CHECKPOINTS = 8


class TransformerEngine(Engine):
    """A loaded transformer: spec, weights as views of the file, its contexts and
    the fused decode step (one per engine, bound to the weights once)."""

    def __init__(self, spec: TransformerSpec, gguf_file: Any, n_threads: Optional[int] = None,
                 also_used: Iterable[str] = ()) -> None:
        self.spec = spec
        self.architecture = str(gguf_file.metadata.get("general.architecture", ""))
        self.vocab_size = spec.vocab_size
        self.max_seq_len = spec.max_seq_len
        self.n_embd = spec.dim
        self.n_threads = n_threads
        self.weights: Optional[ModelWeights] = load_weights(spec, gguf_file.tensors, also_used)
        if repack_enabled():
            self.weights = repack_weights(self.weights, getattr(gguf_file, "release_pages", None))
        self._contexts: "weakref.WeakSet[TransformerContext]" = weakref.WeakSet()
        #: the fused step of each spec the contexts compute with (one, unless the
        #: maths depend on the context size: Phi-3's LongRoPE)
        self._decoders: Dict[TransformerSpec, Any] = {}
        # close() waits for running forward passes; none starts after it.
        self._state = threading.Condition()
        self._running = 0
        self._closed = False

    @property
    def config(self) -> TransformerSpec:
        """The spec (the name the variants' configs had)."""
        return self.spec

    def create_context(self, n_ctx: Optional[int] = None, sampler: Any = None,
                       kv_type: str = "f16") -> "TransformerContext":
        """A context of ``n_ctx`` positions (default: the trained length); KV cache
        in ``kv_type`` "f16" (default) or "f32".  Cache pages are touched as used."""
        if self._closed:
            raise ModelClosedError("the model is closed")
        ctx = TransformerContext(self, self.max_seq_len if n_ctx is None else n_ctx, sampler, kv_type)
        self._contexts.add(ctx)
        return ctx

    def spec_for(self, n_ctx: int) -> TransformerSpec:
        """The spec a context of n_ctx positions computes with: ``spec``, except for
        files whose maths depend on the context size (Phi-3's LongRoPE factors)."""
        return self.spec

    def live_weights(self) -> ModelWeights:
        if self.weights is None:
            raise ModelClosedError("the model is closed")
        return self.weights

    def weight_arrays(self) -> Iterable[Tuple[str, int, NDArray[Any]]]:
        """(name, format, raw data) of every weight, for `infer.state.fingerprint`."""
        w = self.live_weights()
        named: list[Tuple[str, Any]] = [("token_embd", w.token_embd), ("output", w.output),
                                        ("output_norm", w.output_norm), ("per_layer_token_embd", w.ple_embd),
                                        ("per_layer_model_proj", w.ple_model_proj),
                                        ("per_layer_proj_norm", w.ple_proj_norm)]
        for i, layer in enumerate(w.layers):
            named += [(f"blk.{i}.{k}", v) for k, v in vars(layer).items()]
        for name, m in named:
            if m is not None:   # the file's rows, repacked or not
                yield name, int(getattr(m, "file_qtype", 0)), getattr(m, "file_data", m.data)

    @contextmanager
    def running(self) -> Iterator[ModelWeights]:
        """Held around every forward pass: ModelClosedError once close() began, and
        close() waits for the passes that got in (their C calls hold raw pointers
        into the file map)."""
        with self._state:
            if self._closed or self.weights is None:
                raise ModelClosedError("the model is closed")
            self._running += 1
            weights = self.weights
        try:
            yield weights
        finally:
            with self._state:
                self._running -= 1
                self._state.notify_all()

    def fused_step(self, spec: Optional[TransformerSpec] = None) -> Any:
        """The fused decode step (kernels.TransformerDecoder) of spec (default: the
        engine's), built on first use.  Call inside `running`."""
        if any(layer.parallel_mamba2 for layer in (spec or self.spec).layers):
            raise NotImplementedError("the fused decode step has no Mamba2 mixers beside attention (Falcon-H1): "
                                      "this model decodes through the Python blocks")
        spec = spec or self.spec
        if spec.mla is not None:
            raise NotImplementedError("the fused decode step has no multi-head latent attention: this model "
                                      "decodes through the Python blocks")
        if spec.moe is not None and spec.moe.n_groups > 1:
            raise NotImplementedError("the fused decode step has no expert groups: this model "
                                      "decodes through the Python blocks")
        if not _has_attention(spec):
            raise NotImplementedError("the fused decode step needs an attention layer: this model "
                                      "decodes through the Python blocks")
        if not _fused_layers(spec):
            raise NotImplementedError("the fused decode step has no FFN-only layers, layers without an FFN "
                                      "nor experts without a gate: this model decodes through the Python blocks")
        if spec.moe is not None and spec.moe.n_used > K.MAX_EXPERTS_USED:
            raise NotImplementedError(f"the fused decode step routes a token to at most {K.MAX_EXPERTS_USED} "
                                      f"experts, this model to {spec.moe.n_used}: it decodes through the "
                                      "Python blocks")
        with self._state:   # two threads' first steps build it once
            if spec not in self._decoders:
                self._decoders[spec] = _build_decoder(spec, self.live_weights())
            return self._decoders[spec]

    def forward_batch(self, contexts: Sequence[Context], tokens: NDArray[Any],
                      positions: Sequence[int]) -> None:
        """One decode step for several contexts: every weight row is read once for
        the whole batch (csrc/transformer_block.c), attention runs per sequence."""
        ctxs = [c for c in contexts if isinstance(c, TransformerContext)]
        if len(ctxs) != len(contexts) or any(c.spec is not ctxs[0].spec for c in ctxs):
            super().forward_batch(contexts, tokens, positions)
            return
        if not all(c.fused_decode for c in ctxs):
            if any(c.fused_decode for c in ctxs):   # some each way: one at a time
                super().forward_batch(contexts, tokens, positions)
                return
            # the Python blocks with all tokens in one pass: each weight (each routed
            # expert) is read once for the batch, as in a batched prefill
            with self.running():
                _prefill_together([(c, np.array([tokens[i]], dtype=np.int32), int(positions[i]), None)
                                   for i, c in enumerate(ctxs)])
            return
        with self.running():
            by_step: Dict[int, list[int]] = {}   # contexts of one spec share a step
            steps = [c._fused_step() for c in ctxs]
            for i, step in enumerate(steps):
                by_step.setdefault(id(step), []).append(i)
            recurrent = bool(ctxs[0].spec.recurrent_layers)
            for members in by_step.values():
                step = steps[members[0]]
                for g in range(0, len(members), step.max_batch):
                    group = members[g:g + step.max_batch]
                    if recurrent:
                        for i in group:
                            ctxs[i]._begin_recurrent(int(positions[i]))
                    step.step([ctxs[i].k_cache for i in group], [ctxs[i].v_cache for i in group],
                              [int(tokens[i]) for i in group], [int(positions[i]) for i in group],
                              [ctxs[i].logits for i in group],
                              [ctxs[i].conv_cache for i in group] if ctxs[0].spec.conv_layers else None,
                              [ctxs[i].ssm_state for i in group] if recurrent else None,
                              [ctxs[i].ssm_conv for i in group] if recurrent else None)
                    if recurrent:   # checkpoints as after a decode through the Python blocks
                        for i in group:
                            ctxs[i]._end_recurrent(int(positions[i]) + 1, False)

    def prefill_batch(self, contexts: Sequence[Context], batches: Sequence[NDArray[Any]],
                      starts: Sequence[int], rows: Sequence[Optional[RowOutputs]]) -> None:
        """Prefill several contexts in one pass per N_BATCH tokens: the mat-muls take
        every context's rows at once, attention runs per context."""
        ctxs = [c for c in contexts if isinstance(c, TransformerContext)]
        if len(ctxs) != len(contexts) or any(c.spec is not ctxs[0].spec for c in ctxs):
            super().prefill_batch(contexts, batches, starts, rows)
            return
        with self.running():
            _prefill_together(list(zip(ctxs, batches, starts, rows)))

    def close(self) -> None:
        # Wait for running passes, then drop every view into the file map (ours,
        # the decoder's and the contexts' scratch) so it can be unmapped.
        with self._state:
            self._closed = True
            while self._running:
                self._state.wait()
        for decoder in self._decoders.values():
            decoder.release()
        self._decoders.clear()
        for ctx in list(self._contexts):
            ctx._release()
        self.weights = None


def _has_attention(spec: TransformerSpec) -> bool:
    """Whether a layer attends (the fused step's caches need one: a file of recurrent
    layers only, which no released model is, decodes through the Python blocks)."""
    return any(layer.kind == "attention" for layer in spec.layers)


def _fused_layers(spec: TransformerSpec) -> bool:
    """Whether the fused step has every layer's shape: each a mixer and an FFN, and
    experts with a gate; not Falcon-H1's Mamba2 mixers beside attention, nor Mamba2
    mixers without the gated norm."""
    return all(layer.ffn and layer.kind not in ("mlp", "mla") and not layer.parallel_mamba2
               for layer in spec.layers) and \
        (spec.moe is None or spec.activation not in UNGATED) and (spec.mamba2 is None or spec.mamba2.gated_norm)


def _build_decoder(spec: TransformerSpec, w: ModelWeights) -> Any:
    """kernels.TransformerDecoder bound to the weights, with the spec's pieces."""
    ple = None
    if spec.per_layer_dim:
        assert w.ple_embd is not None and w.ple_model_proj is not None and w.ple_proj_norm is not None
        ple = (w.ple_embd.as_tuple(), w.ple_model_proj.as_tuple(), w.ple_proj_norm.data)
    bias = w.output_norm_bias.data if w.output_norm_bias is not None else None
    return K.TransformerDecoder(spec, *decoder_arguments(spec, w), ple=ple, output_norm_bias=bias,
                                output_bias=w.output_bias.data if w.output_bias is not None else None)


def decoder_arguments(spec: TransformerSpec, w: ModelWeights) -> Tuple[Any, Any, Any, Any]:
    """(embd, output, output_norm, layers) as kernels.TransformerDecoder takes them."""
    layers = []
    for li, (L, ls) in enumerate(zip(w.layers, spec.layers)):
        if ls.shortconv:
            layers.append(_shortconv_arguments(L, ls))
            continue
        if ls.kind == "deltanet":
            layers.append(_deltanet_arguments(L, ls))
            continue
        if ls.kind == "mamba2":
            layers.append(_mamba2_arguments(L, ls))
            continue
        assert L.wq is not None and L.wo is not None
        hd = spec.layer_head_dim(li)
        gate, up, down = L.ffn()
        layer: Dict[str, Any] = dict(
            wq=L.wq.as_tuple(), wo=L.wo.as_tuple(), gate=gate.as_tuple(), up=up.as_tuple(),
            down=down.as_tuple(), window=ls.window, rope=None, kv_source=ls.kv_source, v_from_k=ls.v_from_k)
        if ls.xielu is not None:
            layer["xielu"] = ls.xielu
        for name in ("head_dim", "n_kv_heads", "ffn_dim"):   # a layer's own sizes; else the spec's
            if getattr(ls, name) is not None:
                layer[name] = getattr(ls, name)
        for name in ("wk", "wv", "ple_gate", "ple_proj"):
            m = getattr(L, name)
            if m is not None:
                layer[name] = m.as_tuple()
        layer.update(_expert_arguments(L, ls))
        for key, vec in (("sinks", L.attn_sinks), ("o_bias", L.o_bias), ("up_bias", L.ffn_up_bias),
                         ("down_bias", L.ffn_down_bias)):
            if vec is not None:
                layer[key] = vec.data
        for name in ("attn_norm", "ffn_norm", "q_norm", "k_norm", "post_attn_norm", "post_ffn_norm",
                     "q_bias", "k_bias", "v_bias", "ple_post_norm", "attn_norm_bias", "ffn_norm_bias"):
            vec = getattr(L, name)
            if vec is not None:
                layer[name] = vec.data
        if L.out_scale is not None:
            layer["out_scale"] = float(L.out_scale.data[0])
        if ls.rope is not None:
            r = ls.rope
            layer["rope"] = (r.layout, r.base, r.scale, r.factors_array(hd), r.attn_factor, r.rotated(hd))
        layers.append(layer)
    return w.token_embd.as_tuple(), w.output.as_tuple(), w.output_norm.data, layers


def _expert_arguments(L: LayerWeights, ls: LayerSpec) -> Dict[str, Any]:
    """A layer's mixture-of-experts pieces (none in a dense layer) as kernels.TransformerDecoder takes them."""
    pieces: Dict[str, Any] = {}
    if ls.dense_ffn:
        pieces["dense_ffn"] = True
    if L.router is not None:
        pieces["router"] = L.router.as_tuple()
    if L.expert_bias is not None:
        pieces["exp_probs_b"] = L.expert_bias.data
    if L.router_bias is not None:
        pieces["router_bias"] = L.router_bias.data
    for key, table in (("gate_exps_bias", L.gate_exps_bias), ("up_exps_bias", L.up_exps_bias),
                       ("down_exps_bias", L.down_exps_bias)):
        if table is not None:   # expert by expert
            pieces[key] = table.data.reshape(-1)
    if L.shared_gate is not None and L.shared_up is not None and L.shared_down is not None:
        pieces.update(shexp_gate=L.shared_gate.as_tuple(), shexp_up=L.shared_up.as_tuple(),
                      shexp_down=L.shared_down.as_tuple())
        if L.shared_gate_inp is not None:   # none: a shared expert without a gate (Granite 4.0-H)
            pieces["shexp_gate_inp"] = L.shared_gate_inp.data
    return pieces


def _shortconv_arguments(L: LayerWeights, ls: LayerSpec) -> Dict[str, Any]:
    """A shortconv layer as kernels.TransformerDecoder takes it."""
    assert (L.conv_b is not None and L.conv_c is not None and L.conv_u is not None
            and L.conv_out is not None and L.conv_kernel is not None)
    assert L.attn_norm is not None and L.ffn_norm is not None   # the loader requires pre-norms
    gate, up, down = L.ffn()
    layer = dict(attn_norm=L.attn_norm.data, ffn_norm=L.ffn_norm.data, gate=gate.as_tuple(),
                 up=up.as_tuple(), down=down.as_tuple(),
                 conv=(L.conv_kernel, L.conv_b.as_tuple(), L.conv_c.as_tuple(), L.conv_u.as_tuple(),
                       L.conv_out.as_tuple()))
    if ls.ffn_dim is not None:
        layer["ffn_dim"] = ls.ffn_dim
    return {**layer, **_expert_arguments(L, ls)}


def _mamba2_arguments(L: LayerWeights, ls: LayerSpec) -> Dict[str, Any]:
    """A Mamba2 layer as kernels.TransformerDecoder takes it."""
    assert L.ssm_in is not None and L.ssm_out is not None and L.ssm_conv is not None and L.ssm_dt is not None
    assert L.ssm_a is not None and L.ssm_d is not None and L.ssm_norm is not None
    assert L.attn_norm is not None and L.ffn_norm is not None
    conv_bias = L.ssm_conv_bias.data if L.ssm_conv_bias is not None else None
    gate, up, down = L.ffn()
    layer = dict(attn_norm=L.attn_norm.data, ffn_norm=L.ffn_norm.data, gate=gate.as_tuple(),
                 up=up.as_tuple(), down=down.as_tuple(),
                 mamba2=(L.ssm_conv, conv_bias, L.ssm_in.as_tuple(), L.ssm_out.as_tuple(), L.ssm_dt.data,
                         L.ssm_a.data, L.ssm_d.data, L.ssm_norm.data))
    if ls.ffn_dim is not None:
        layer["ffn_dim"] = ls.ffn_dim
    return {**layer, **_expert_arguments(L, ls)}


def _deltanet_arguments(L: LayerWeights, ls: LayerSpec) -> Dict[str, Any]:
    """A gated DeltaNet layer as kernels.TransformerDecoder takes it."""
    assert (L.ssm_qkv is not None and L.ssm_gate is not None and L.ssm_alpha is not None
            and L.ssm_beta is not None and L.ssm_out is not None and L.ssm_conv is not None)
    assert L.ssm_dt is not None and L.ssm_a is not None and L.ssm_norm is not None
    assert L.attn_norm is not None and L.ffn_norm is not None
    gate, up, down = L.ffn()
    layer = dict(attn_norm=L.attn_norm.data, ffn_norm=L.ffn_norm.data, gate=gate.as_tuple(),
                 up=up.as_tuple(), down=down.as_tuple(),
                 deltanet=(L.ssm_conv, L.ssm_qkv.as_tuple(), L.ssm_gate.as_tuple(), L.ssm_alpha.as_tuple(),
                           L.ssm_beta.as_tuple(), L.ssm_out.as_tuple(), L.ssm_dt.data, L.ssm_a.data,
                           L.ssm_norm.data))
    if ls.ffn_dim is not None:
        layer["ffn_dim"] = ls.ffn_dim
    return {**layer, **_expert_arguments(L, ls)}


class TransformerContext(Context):
    """A KV cache of shape (layers, kv_heads, n_ctx, head_dim) and the forward pass."""

    engine: TransformerEngine

    def __init__(self, engine: TransformerEngine, n_ctx: int, sampler: Any, kv_type: str) -> None:
        super().__init__(engine, n_ctx, sampler)
        #: the engine's spec for this context's size (engine.spec_for)
        self.spec = spec = engine.spec_for(self.n_ctx)
        if kv_type not in ("f16", "f32"):
            raise ValueError(f"kv_type: expected 'f16' or 'f32', got {kv_type!r}")
        # F16 is stored as its bits (uint16), the layout kv_store/attention read.
        self.kv_type = kv_type
        kv_dtype = np.uint16 if kv_type == "f16" else np.float32
        shape = _kv_shape(spec, self.n_ctx)
        # np.zeros maps untouched pages lazily: memory grows with the positions used.
        try:
            self.k_cache = np.zeros(shape, dtype=kv_dtype)
            # mla layers attend to their latent rows in the K cache: no V cache
            self.v_cache = np.zeros(shape if _has_v_cache(spec) else shape[:-2] + (0, shape[-1]), dtype=kv_dtype)
        except MemoryError:
            size = 2 * math.prod(shape) * np.dtype(kv_dtype).itemsize
            raise ValueError(f"n_ctx: a KV cache of {self.n_ctx} positions needs {size / 2**30:,.1f} GiB "
                             f"of address space, which cannot be reserved; use a smaller n_ctx") from None
        #: each layer's (kv_heads, n_ctx, head_dim) cache: views of k_cache / v_cache
        #: (a shared-KV layer's are its source layer's)
        self.k_layers = _kv_layout(spec, self.k_cache, self.n_ctx)
        self.v_layers = _kv_layout(spec, self.v_cache, self.n_ctx)
        #: the gated inputs b*u of each shortconv layer at each position (spec.conv_layers
        #: order), kept like K and V so that truncation, copies and saved states are exact
        conv_shape = (len(spec.conv_layers), self.n_ctx, spec.dim)
        try:
            self.conv_cache = np.zeros(conv_shape, dtype=np.float32)
        except MemoryError:
            size = math.prod(conv_shape) * 4
            raise ValueError(f"n_ctx: a shortconv cache of {self.n_ctx} positions needs {size / 2**30:,.1f} GiB "
                             f"of address space, which cannot be reserved; use a smaller n_ctx") from None
        self._scratch: Dict[int, _Scratch] = {}
        #: False: decode through the Python blocks too (for tests comparing the two;
        #: and for a mixture of experts routing more experts than the C step takes)
        self.fused_decode = (spec.moe is None or spec.moe.n_used <= K.MAX_EXPERTS_USED) and _has_attention(spec) \
            and _fused_layers(spec)
        self._step: Any = None
        self._init_recurrent()

    def _fused_step(self) -> Any:
        """The engine's fused step for this context's spec (looked up once)."""
        if self._step is None:
            self._step = self.engine.fused_step(self.spec)
        return self._step

    def _forward(self, tokens: NDArray[Any], start: int) -> None:
        eng = self.engine
        with eng.running():
            if len(tokens) == 1 and self.fused_decode and self.spec.recurrent_layers:
                self._begin_recurrent(start)
                self._fused_step().decode(int(tokens[0]), start, self.k_cache, self.v_cache, self.logits,
                                          None, self.ssm_state, self.ssm_conv)
                self._end_recurrent(start + 1, False)   # checkpoints as after a decode through the blocks
            elif len(tokens) == 1 and self.fused_decode:
                self._fused_step().decode(int(tokens[0]), start, self.k_cache, self.v_cache, self.logits,
                                          self.conv_cache if self.spec.conv_layers else None)
            else:
                self._prefill(tokens, start)

    def _forward_rows(self, tokens: NDArray[Any], start: int, rows: RowOutputs) -> None:
        with self.engine.running():
            self._prefill(tokens, start, rows)

    # ---- the Python forward pass ----------------------------------------------------
    def _prefill(self, tokens: NDArray[Any], start: int, rows: Optional[RowOutputs] = None) -> None:
        """The batch through `_block`; with ``rows``, also every position's outputs."""
        _prefill_together([(self, tokens, start, rows)])

    def _head_rows(self, x: NDArray[Any], c0: int, rows: RowOutputs) -> None:
        """The all-position outputs of a batch's rows x (positions c0... of the call):
        hidden states after the output norm, and the head over the rows at or after
        ``rows.first`` only (that mat-mul is all the all-position logits cost)."""
        n = x.shape[0]
        if rows.hidden is not None:
            w = self.engine.live_weights()
            self._norm(x, w.output_norm.data, rows.hidden[c0:c0 + n], w.output_norm_bias)
        lo = max(rows.first - c0, 0)
        if rows.logits is not None and lo < n:
            self._head(x[lo:n], rows.logits[c0 + lo - rows.first:c0 + n - rows.first])

    def _head(self, x: NDArray[Any], out: NDArray[Any]) -> None:
        """Logits of the residual rows x (n, dim) into out (n, vocab)."""
        w = self.engine.live_weights()
        spec = self.spec
        h = np.empty_like(x)
        self._norm(x, w.output_norm.data, h, w.output_norm_bias)
        _mul(h, w.output, out)
        if w.output_bias is not None:
            out += w.output_bias.data
        if spec.logit_scale != 1.0:
            K.scale(out, spec.logit_scale)
        if spec.final_softcap:
            c = np.float32(spec.final_softcap)
            np.multiply(np.tanh(out / c), c, out=out)

    def _block(self, w: LayerWeights, li: int, s: "_Scratch", segments: Sequence["_Segment"]) -> None:
        """One transformer block over the batch s.x: the rows of each segment are its
        context's positions pos0, pos0+1, ...; attention runs per segment."""
        spec = self.spec
        kind = spec.layers[li].kind
        self._pre_norm(s, w.attn_norm, w.attn_norm_bias)
        if spec.layers[li].shortconv:
            self._shortconv(w, li, s, segments)
        elif kind == "deltanet":
            self._deltanet(w, li, s, segments)
        elif kind == "mamba2":
            self._mamba2(w, li, s, segments)
        elif kind == "mla":
            self._mla_attention(w, li, s, segments)
        elif kind != "mlp":   # an "mlp" layer is its FFN alone, on the attn_norm'd h1
            self._attention(w, li, s, segments)
            if spec.layers[li].parallel_mamba2:   # Falcon-H1: its mixer reads the same h1
                self._mamba2(w, li, s, segments)
        if not spec.layers[li].ffn:   # the mixer alone (Nemotron-H)
            return
        ffn = spec.layer_ffn_dim(li)
        gate, up = s.rows(s.gate, ffn), s.rows(s.up, ffn)   # this layer's width
        if not spec.parallel_blocks and kind != "mlp":   # parallel: the FFN reads the attention's input h1
            self._pre_norm(s, w.ffn_norm, w.ffn_norm_bias)
        if spec.layer_experts(li):
            self._experts(w, s)
        elif spec.activation in UNGATED:   # no gate: act(h Wup [+ b_up]) Wdown [+ b_down]
            _, w_up, w_down = w.ffn()
            s.mul(s.h1, (w_up, up))
            if w.ffn_up_bias is not None:
                up += w.ffn_up_bias.data
            _ungated(spec.activation, spec.layers[li].xielu, up, gate)
            s.mul(gate, (w_down, s.h2))
            if w.ffn_down_bias is not None:
                s.h2 += w.ffn_down_bias.data
        else:
            w_gate, w_up, w_down = w.ffn()
            s.mul(s.h1, (w_gate, gate), (w_up, up))  # one quantized input for gate, up
            self._glu(gate, up)
            s.mul(gate, (w_down, s.h2))
        self._residual(s, w.post_ffn_norm)
        if spec.parallel_blocks:   # x + ffn + attention, in llama.cpp's order
            K.add(s.x, s.attn_out)
        if w.ple_gate is not None and w.ple_proj is not None and w.ple_post_norm is not None:
            self._per_layer_embedding(w, li, s)
        if w.out_scale is not None:
            K.scale(s.x, float(w.out_scale.data[0]))

    def _attention(self, w: LayerWeights, li: int, s: "_Scratch", segments: Sequence["_Segment"]) -> None:
        """The attention half of a block: s.h1 (normed) -> x += attention."""
        spec = self.spec
        layer = spec.layers[li]
        n, hd, eps = s.n, spec.layer_head_dim(li), spec.rms_eps
        n_kv = spec.layer_kv_heads(li)
        # this layer's sizes: contiguous views of the scratch rows
        q = s.rows(s.q, spec.n_heads * hd).reshape(n, spec.n_heads, hd)
        k = s.rows(s.k, n_kv * hd).reshape(n, n_kv, hd)
        v = s.rows(s.v, n_kv * hd).reshape(n, n_kv, hd)
        att = s.rows(s.att, spec.n_heads * hd).reshape(q.shape)
        assert w.wq is not None and w.wo is not None
        own_kv = w.wk is not None
        if w.wk is None:     # a shared-KV layer: queries only
            s.mul(s.h1, (w.wq, q.reshape(n, -1)))
        elif spec.attn_output_gate:   # q and its gate from one projection, per head
            assert w.wv is not None
            q_gate = s.rows(s.q_gate, 2 * spec.n_heads * hd).reshape(n, spec.n_heads, 2, hd)
            s.mul(s.h1, (w.wq, q_gate.reshape(n, -1)), (w.wk, k.reshape(n, -1)), (w.wv, v.reshape(n, -1)))
            np.copyto(q, q_gate[:, :, 0])
        elif w.wv is None:   # V is K's projection, taken before K's norm and RoPE
            s.mul(s.h1, (w.wq, q.reshape(n, -1)), (w.wk, k.reshape(n, -1)))
            np.copyto(v, k)
        else:                # one quantized input for q, k, v
            s.mul(s.h1, (w.wq, q.reshape(n, -1)), (w.wk, k.reshape(n, -1)), (w.wv, v.reshape(n, -1)))
        if w.q_bias is not None and w.k_bias is not None and w.v_bias is not None:
            s.q += w.q_bias.data
            s.k += w.k_bias.data
            s.v += w.v_bias.data
        # the q/k norm weights (k's only where the layer has its own K), applied before
        # RoPE or after it, per head or over each whole row
        q_norm = w.q_norm.data if w.q_norm is not None else None
        k_norm = w.k_norm.data if w.k_norm is not None and own_kv else None
        whole = spec.qk_norm_scope == "all"
        if not spec.qk_norm_after_rope:
            for x, weight in ((q, q_norm), (k, k_norm)):
                if weight is not None:
                    target = x.reshape(n, -1) if whole else x
                    K.rmsnorm(target, weight, target, eps)
        if own_kv and spec.v_norm:
            K.rmsnorm(v, s.ones(hd), v, eps)
        rope = layer.rope
        factors = rope.factors_array(hd) if rope is not None else None
        for ctx, lo, hi, pos0 in segments:
            parts = (q[lo:hi], k[lo:hi]) if own_kv else (q[lo:hi],)
            if rope is not None:
                for x in parts:
                    K.rope(x, pos0, rope.base, neox=rope.neox, rot_dim=rope.rotated(hd),
                           freq_scale=rope.scale, freq_factors=factors, attn_factor=rope.attn_factor)
            if spec.qk_norm_after_rope:   # per head (the spec allows no other)
                for x, weight in ((q[lo:hi], q_norm), (k[lo:hi], k_norm)):
                    if weight is not None:
                        K.rmsnorm(x, weight, x, eps)
            if spec.attn_temp_scale:   # per position, on q only (after RoPE, as llama.cpp's ggml_mul)
                q[lo:hi] *= spec.query_temperature(pos0, hi - lo)[:, None, None]
            k_cache, v_cache = ctx.k_layers[li], ctx.v_layers[li]
            if own_kv:   # a shared-KV layer reads what its source layer stored for these positions
                K.kv_store(k[lo:hi], k_cache, pos0)
                K.kv_store(v[lo:hi], v_cache, pos0)
            K.attention(q[lo:hi], k_cache, v_cache, pos0, att[lo:hi], scale=spec.attn_scale, window=layer.window,
                        softcap=spec.attn_softcap, sinks=w.attn_sinks.data if w.attn_sinks is not None else None)
        if spec.attn_output_gate:
            att *= _sigmoid(s.rows(s.q_gate, 2 * spec.n_heads * hd).reshape(n, spec.n_heads, 2, hd)[:, :, 1])
        if spec.parallel_blocks:   # added after the FFN's output (`_block`)
            s.mul(att.reshape(n, -1), (w.wo, s.attn_out))
            if w.o_bias is not None:
                s.attn_out += w.o_bias.data
            return
        s.mul(att.reshape(n, -1), (w.wo, s.h2))
        if w.o_bias is not None:
            s.h2 += w.o_bias.data
        self._residual(s, w.post_attn_norm)

    def _mla_attention(self, w: LayerWeights, li: int, s: "_Scratch", segments: Sequence["_Segment"]) -> None:
        """The multi-head latent attention half of a DeepSeek block: s.h1 (normed) -> x +=
        attention (spec.py; llama.cpp src/models/deepseek2.cpp with attn_k_b / attn_v_b).
        Each position caches one row [rmsnorm(latent) | rope(k_rope)]; each head's nope
        query is absorbed into the latent's space by its attn_k_b, attends over the rows
        as one shared KV head (V: the rows' latent part) and is decompressed by its attn_v_b."""
        spec, mla = self.spec, self.spec.mla
        assert mla is not None and w.wkv_a is not None and w.kv_a_norm is not None and w.wo is not None
        n, n_heads, eps = s.n, spec.n_heads, spec.rms_eps
        rank, nope, cache_dim = mla.kv_lora_rank, mla.nope_dim, mla.cache_dim
        q_proj = np.empty((n, n_heads * mla.q_head_dim), np.float32)
        kv = np.empty((n, mla.kv_a_dim), np.float32)
        if w.wq_a is not None and w.q_a_norm is not None and w.wq_b is not None:   # low-rank q
            q_a = np.empty((n, mla.q_lora_rank), np.float32)
            s.mul(s.h1, (w.wq_a, q_a), (w.wkv_a, kv))
            K.rmsnorm(q_a, w.q_a_norm.data, q_a, eps)
            _mul(q_a, w.wq_b, q_proj)
        else:
            assert w.wq is not None
            s.mul(s.h1, (w.wq, q_proj), (w.wkv_a, kv))
        heads = q_proj.reshape(n, n_heads, mla.q_head_dim)
        latent = np.ascontiguousarray(kv[:, :rank])
        K.rmsnorm(latent, w.kv_a_norm.data, latent, eps)
        k_rope = np.ascontiguousarray(kv[:, rank:]).reshape(n, 1, mla.rope_dim)
        q_rope = np.ascontiguousarray(heads[:, :, nope:])
        if mla.decompressed:
            self._decompressed_attention(w, li, s, segments, heads, latent, k_rope, q_rope)
            return
        assert w.wk_b is not None and w.wv_b is not None
        rows = np.empty((n, 1, cache_dim), np.float32)   # what the cache stores
        rows[:, 0, :rank] = latent
        # q' = [Wk_b q_nope | q_rope] per head, attending over [latent | k_rope]
        q_full = s.rows(s.q, n_heads * cache_dim).reshape(n, n_heads, cache_dim)
        absorbed = np.empty((n, rank), np.float32)
        for h in range(n_heads):
            _mul(np.ascontiguousarray(heads[:, h, :nope]), w.wk_b.row_slice(h * rank, (h + 1) * rank), absorbed)
            q_full[:, h, :rank] = absorbed
        for ctx, lo, hi, pos0 in segments:
            self._rope_parts(li, (q_rope[lo:hi], k_rope[lo:hi]), pos0)
            q_full[lo:hi, :, rank:] = q_rope[lo:hi]
            rows[lo:hi, :, rank:] = k_rope[lo:hi]
            cache = ctx.k_layers[li]
            K.kv_store(rows[lo:hi], cache, pos0)
            # the latent is the value: the output's first rank values per head
            K.attention(q_full[lo:hi], cache, cache, pos0, q_full[lo:hi], scale=mla.kq_scale)
        values = np.empty((n, n_heads, mla.v_dim), np.float32)
        decompressed = np.empty((n, mla.v_dim), np.float32)
        for h in range(n_heads):
            _mul(np.ascontiguousarray(q_full[:, h, :rank]), w.wv_b.row_slice(h * mla.v_dim, (h + 1) * mla.v_dim),
                 decompressed)
            values[:, h] = decompressed
        s.mul(values.reshape(n, -1), (w.wo, s.h2))
        self._residual(s, None)

    def _rope_parts(self, li: int, parts: Sequence[NDArray[Any]], pos0: int) -> None:
        """RoPE on the rope parts (n, heads, rope_dim) of an mla layer, in place."""
        mla, rope = self.spec.mla, self.spec.layers[li].rope
        assert mla is not None
        if rope is None:
            return
        factors = rope.factors_array(mla.rope_dim)
        for x in parts:
            K.rope(x, pos0, rope.base, neox=rope.neox, rot_dim=rope.rotated(mla.rope_dim),
                   freq_scale=rope.scale, freq_factors=factors, attn_factor=rope.attn_factor)

    def _decompressed_attention(self, w: LayerWeights, li: int, s: "_Scratch", segments: Sequence["_Segment"],
                                heads: NDArray[Any], latent: NDArray[Any], k_rope: NDArray[Any],
                                q_rope: NDArray[Any]) -> None:
        """An mla layer of the older layout (attn_kv_b), as llama.cpp runs it: the latent
        decompressed into per-head keys [k_nope | k_rope] and values, cached as such
        (zero-padded to cache_dim), then multi-head attention."""
        spec, mla = self.spec, self.spec.mla
        assert mla is not None and w.wkv_b is not None and w.wo is not None
        n, n_heads, nope, width = s.n, spec.n_heads, mla.nope_dim, mla.cache_dim
        kv = np.empty((n, n_heads * (nope + mla.v_dim)), np.float32)
        _mul(latent, w.wkv_b, kv)
        kv_heads = kv.reshape(n, n_heads, nope + mla.v_dim)
        q, k, v = (np.zeros((n, n_heads, width), np.float32) for _ in range(3))
        q[:, :, :nope] = heads[:, :, :nope]
        k[:, :, :nope] = kv_heads[:, :, :nope]
        v[:, :, :mla.v_dim] = kv_heads[:, :, nope:]
        for ctx, lo, hi, pos0 in segments:
            self._rope_parts(li, (q_rope[lo:hi], k_rope[lo:hi]), pos0)
            q[lo:hi, :, nope:mla.q_head_dim] = q_rope[lo:hi]
            k[lo:hi, :, nope:mla.q_head_dim] = k_rope[lo:hi]   # one rope key shared by the heads
            k_cache, v_cache = ctx.k_layers[li], ctx.v_layers[li]
            K.kv_store(k[lo:hi], k_cache, pos0)
            K.kv_store(v[lo:hi], v_cache, pos0)
            K.attention(q[lo:hi], k_cache, v_cache, pos0, q[lo:hi], scale=mla.kq_scale)
        s.mul(np.ascontiguousarray(q[:, :, :mla.v_dim]).reshape(n, -1), (w.wo, s.h2))
        self._residual(s, None)

    def _per_layer_embedding(self, w: LayerWeights, li: int, s: "_Scratch") -> None:
        """x += rmsnorm(Wproj (gelu(Wgate x) * ple[li]), post_norm): Gemma 4's PLE."""
        assert w.ple_gate is not None and w.ple_proj is not None and w.ple_post_norm is not None
        assert s.ple is not None and s.ple_gate is not None and s.ple_slice is not None
        s.mul(s.x, (w.ple_gate, s.ple_gate))
        np.copyto(s.ple_slice, s.ple[:, li, :])
        K.gelu_mul(s.ple_gate, s.ple_slice, s.ple_gate)
        s.mul(s.ple_gate, (w.ple_proj, s.h2))
        K.rmsnorm(s.h2, w.ple_post_norm.data, s.h2, self.spec.rms_eps)
        K.add(s.x, s.h2)

    def _shortconv(self, w: LayerWeights, li: int, s: "_Scratch", segments: Sequence["_Segment"]) -> None:
        """The shortconv half of an LFM2 block: s.h1 (normed) -> x += conv mixing.
        The gated inputs b*u are stored per position in the context's conv cache, and
        each position sums the kernel's taps over the last conv_width of them (in
        llama.cpp's order: oldest first), positions before 0 counting as zeros."""
        width = self.spec.layers[li].conv_width
        ci = self.spec.conv_layers.index(li)
        assert (w.conv_b is not None and w.conv_c is not None and w.conv_u is not None
                and w.conv_out is not None and w.conv_kernel is not None)
        b, c, u = s.h2, s.conv_c, s.conv_u
        s.mul(s.h1, (w.conv_b, b), (w.conv_c, c), (w.conv_u, u))
        taps = w.conv_kernel
        y = s.h1   # the normed input is used up
        for ctx, lo, hi, pos0 in segments:
            n = hi - lo
            gated = ctx.conv_cache[ci]
            np.multiply(b[lo:hi], u[lo:hi], out=gated[pos0:pos0 + n])
            first = pos0 - (width - 1)
            history = gated[max(first, 0):pos0 + n]
            if first < 0:   # the positions before the sequence are zeros
                history = np.concatenate([np.zeros((-first, history.shape[1]), np.float32), history])
            out = y[lo:hi]
            np.multiply(history[0:n], taps[:, 0], out=out)
            for k in range(1, width):
                out += history[k:k + n] * taps[:, k]
            out *= c[lo:hi]
        s.mul(y, (w.conv_out, s.h2))
        self._residual(s, None)

    def _deltanet(self, w: LayerWeights, li: int, s: "_Scratch", segments: Sequence["_Segment"]) -> None:
        """The gated DeltaNet half of a Qwen3.5 block: s.h1 (normed) -> x += linear
        attention (spec.py; llama.cpp src/models/qwen35.cpp).  Each context keeps the
        layer's last conv_kernel - 1 conv inputs and its state S, which advance
        through the segment's tokens in order."""
        dn = self.spec.deltanet
        assert dn is not None and w.ssm_qkv is not None and w.ssm_gate is not None and w.ssm_alpha is not None
        assert w.ssm_beta is not None and w.ssm_out is not None and w.ssm_conv is not None
        assert w.ssm_dt is not None and w.ssm_a is not None and w.ssm_norm is not None
        di = self.spec.deltanet_layers.index(li)
        n, d, eps = s.n, dn.d_state, self.spec.rms_eps
        mixed, z = s.rows(s.dn_qkv, dn.conv_dim), s.rows(s.dn_z, dn.value_dim)
        alpha, beta = s.rows(s.dn_alpha, dn.n_v_heads), s.rows(s.dn_beta, dn.n_v_heads)
        s.mul(s.h1, (w.ssm_qkv, mixed), (w.ssm_gate, z), (w.ssm_alpha, alpha), (w.ssm_beta, beta))
        # the decay's log g = softplus(alpha + dt_bias) * ssm_a (ssm_a = -exp(A_log) < 0)
        alpha += w.ssm_dt.data
        np.logaddexp(np.float32(0.0), alpha, out=alpha)
        alpha *= w.ssm_a.data
        beta[:] = _sigmoid(beta)
        out = s.rows(s.dn_out, dn.value_dim).reshape(n, dn.n_v_heads, d)
        taps, width = w.ssm_conv, dn.conv_kernel
        for ctx, lo, hi, _ in segments:
            m = hi - lo
            history = np.concatenate([ctx.ssm_conv[di], mixed[lo:hi]])   # oldest first
            conv = history[0:m] * taps[:, 0]
            for tap in range(1, width):
                conv += history[tap:tap + m] * taps[:, tap]
            ctx.ssm_conv[di] = history[m:]
            conv *= _sigmoid(conv)
            key = dn.key_dim
            q = np.ascontiguousarray(conv[:, :key]).reshape(m, dn.n_k_heads, d)
            k = np.ascontiguousarray(conv[:, key:2 * key]).reshape(m, dn.n_k_heads, d)
            v = np.ascontiguousarray(conv[:, 2 * key:]).reshape(m, dn.n_v_heads, d)
            for x in (q, k):   # x / sqrt(sum x^2 + eps): llama.cpp's build_gdn_l2_norm
                K.rmsnorm(x, s.ones(d), x, eps / d)
                K.scale(x, 1.0 / math.sqrt(d))
            K.gated_delta_net(q, k, v, alpha[lo:hi], beta[lo:hi], ctx.ssm_state[di], out[lo:hi])
        K.rmsnorm(out, w.ssm_norm.data, out, eps)
        out *= (z * _sigmoid(z)).reshape(out.shape)
        s.mul(out.reshape(n, -1), (w.ssm_out, s.h2))
        self._residual(s, None)

    def _mamba2(self, w: LayerWeights, li: int, s: "_Scratch", segments: Sequence["_Segment"]) -> None:
        """The Mamba2 half of a Granite 4.0-H block (or Falcon-H1's, beside its
        attention): s.h1 (normed) -> x += the SSM mixer (spec.py; llama.cpp
        build_mamba2_layer and ggml's ssm_conv / ssm_scan).  Each context keeps the
        layer's last conv_kernel - 1 conv inputs and its state S, which advance through
        the segment's tokens in order."""
        m2 = self.spec.mamba2
        assert m2 is not None and w.ssm_in is not None and w.ssm_conv is not None and w.ssm_dt is not None
        assert w.ssm_a is not None and w.ssm_d is not None and w.ssm_out is not None
        mi = self.spec.mamba2_layers.index(li)
        n, inner, conv_dim = s.n, m2.d_inner, m2.conv_dim
        zxbcdt = s.rows(s.m2_in, m2.in_dim)
        s.mul(s.h1, (w.ssm_in, zxbcdt))
        z, xbc, dt = zxbcdt[:, :inner], zxbcdt[:, inner:inner + conv_dim], zxbcdt[:, inner + conv_dim:]
        dt = dt + w.ssm_dt.data
        np.logaddexp(np.float32(0.0), dt, out=dt)   # softplus
        y = s.rows(s.m2_y, inner)
        taps, width = w.ssm_conv, m2.conv_kernel
        for ctx, lo, hi, _ in segments:
            m = hi - lo
            history = np.concatenate([ctx.ssm_conv[mi], xbc[lo:hi]])   # oldest first
            conv = history[0:m] * taps[:, 0]
            for tap in range(1, width):
                conv += history[tap:tap + m] * taps[:, tap]
            ctx.ssm_conv[mi] = history[m:]
            if w.ssm_conv_bias is not None:
                conv += w.ssm_conv_bias.data
            conv *= _sigmoid(conv)
            K.mamba2_scan(np.ascontiguousarray(conv), np.ascontiguousarray(dt[lo:hi]), w.ssm_a.data, w.ssm_d.data,
                          ctx.ssm_state[mi], y[lo:hi], m2.d_state, m2.n_groups)
        y *= z * _sigmoid(z)
        if w.ssm_norm is not None:   # (Mamba2.gated_norm)
            grouped = y.reshape(n * m2.n_groups, inner // m2.n_groups)
            K.rmsnorm(grouped, s.ones(inner // m2.n_groups), grouped, self.spec.rms_eps)
            y *= w.ssm_norm.data
        s.mul(y, (w.ssm_out, s.h2))
        self._residual(s, None)

    def _glu(self, gate: NDArray[Any], up: NDArray[Any]) -> None:
        """gate = act(gate) * up."""
        if self.spec.activation == "gelu_tanh":
            K.gelu_mul(gate, up, gate)
        elif self.spec.activation == "swiglu_oai":
            K.swiglu_oai_mul(gate, up, gate)
        else:
            K.silu_mul(gate, up, gate)

    def _experts(self, w: LayerWeights, s: "_Scratch") -> None:
        """s.h2 = the mixture of experts of s.h1 (spec.MoE): every row routed, then
        each chosen expert's FFN once over the rows routed to it (gathered), its
        outputs weighted and added back to their rows."""
        moe = self.spec.moe
        assert moe is not None and w.router is not None
        ffn, dim = self.spec.ffn_dim, self.spec.dim
        router_bias = w.router_bias.data if w.router_bias is not None else None
        experts, weights = route(s.h1, w.router, moe, w.expert_bias, router_bias)
        w_gate, w_up, w_down = w.ffn()
        s.h2.fill(0.0)
        # (row, slot) pairs grouped by expert: a stable sort keeps rows in order
        flat = experts.reshape(-1)
        order = np.argsort(flat, kind="stable")
        bounds = np.searchsorted(flat[order], np.arange(moe.n_experts + 1))
        for e in range(moe.n_experts):
            picks = order[bounds[e]:bounds[e + 1]]
            if not len(picks):
                continue
            rows = picks // moe.n_used
            m = len(rows)
            h = s.h1[rows]
            # contiguous (m, ffn) views: a dense layer's FFN may be wider (LFM2-MoE)
            gate, up = (buf.reshape(-1)[:m * ffn].reshape(m, ffn) for buf in (s.gate, s.up))
            out = s.h1_out[:m]
            if self.spec.activation in UNGATED:   # relu(h Wup_e)^2 (Nemotron 3 Nano)
                _mul(h, w_up.row_slice(e * ffn, (e + 1) * ffn), up)
                _ungated(self.spec.activation, None, up, gate)
            else:
                xq = _mul(h, w_gate.row_slice(e * ffn, (e + 1) * ffn), gate)
                _mul(h, w_up.row_slice(e * ffn, (e + 1) * ffn), up, xq)   # the same activation format
                if w.gate_exps_bias is not None and w.up_exps_bias is not None:
                    gate += w.gate_exps_bias.data[e]
                    up += w.up_exps_bias.data[e]
                self._glu(gate, up)
            _mul(gate, w_down.row_slice(e * dim, (e + 1) * dim), out)
            if w.down_exps_bias is not None:
                out += w.down_exps_bias.data[e]
            out *= weights.reshape(-1)[picks, None]
            # a row is routed to an expert at most once, so rows are distinct here
            s.h2[rows] += out
        if w.shared_gate is not None and w.shared_up is not None and w.shared_down is not None:
            # the shared expert on every row, times sigmoid(h . gate_inp) (in double,
            # as the fused C step computes it) unless it has no gate (Granite 4.0-H)
            gate, up, out = s.shared_gate, s.shared_up, s.h1_out
            if self.spec.activation in UNGATED:   # relu(h Wup)^2, no gate
                _mul(s.h1, w.shared_up, up)
                _ungated(self.spec.activation, None, up, gate)
            else:
                xq = _mul(s.h1, w.shared_gate, gate)
                _mul(s.h1, w.shared_up, up, xq)
                self._glu(gate, up)
            _mul(gate, w.shared_down, out)
            if w.shared_gate_inp is not None:
                logit = s.h1.astype(np.float64) @ w.shared_gate_inp.data.astype(np.float64)
                out *= (1.0 / (1.0 + np.exp(-logit))).astype(np.float32)[:, None]
            s.h2 += out

    def _pre_norm(self, s: "_Scratch", norm: Any, bias: Any = None) -> None:
        """h1 = norm(x), the input of a block half; x itself without pre-norms."""
        if norm is not None:
            self._norm(s.x, norm.data, s.h1, bias)
        else:
            np.copyto(s.h1, s.x)

    def _norm(self, x: NDArray[Any], weight: NDArray[Any], out: NDArray[Any], bias: Any = None) -> None:
        """out = the spec's block norm (RMSNorm or LayerNorm, with its bias Vector if any) of the rows x."""
        if self.spec.norm_kind == "layer":
            K.layernorm(x, weight, None if bias is None else bias.data, out, self.spec.rms_eps)
        else:
            K.rmsnorm(x, weight, out, self.spec.rms_eps)

    def _residual(self, s: "_Scratch", post_norm: Any) -> None:
        """x += (post_norm(h2)) * residual_scale: the end of a block half."""
        spec = self.spec
        if post_norm is not None:
            K.rmsnorm(s.h2, post_norm.data, s.h2, spec.rms_eps)
        if spec.residual_scale != 1.0:
            K.scale(s.h2, spec.residual_scale)
        K.add(s.x, s.h2)

    # ---- saved state and copies (infer.state) -------------------------------------------
    _shared_on_copy = frozenset({"engine", "spec", "_scratch", "k_cache", "v_cache", "k_layers", "v_layers",
                                 "_step", "conv_cache"})

    # ---- the deltanet layers' recurrent state -------------------------------------------
    def _init_recurrent(self) -> None:
        """ssm_state (deltanet layers, n_v_heads, d, d) and ssm_conv (deltanet layers,
        conv_kernel - 1, conv_dim): the state after the first ``_recurrent_pos`` tokens
        (-1: a pass failed half-way), and checkpoints (position, state, conv) to go
        back to (and whether a prefill ended there).  Empty arrays without deltanet layers.
        Mamba2 layers keep theirs in the same two arrays (`Mamba2`'s shapes)."""
        spec = self.spec
        dn, n_dn = spec.deltanet, len(spec.deltanet_layers)
        m2, n_m2 = spec.mamba2, len(spec.mamba2_layers)
        if m2 is not None and n_m2:   # Mamba2: S is (heads, head_dim, d_state) per layer, as ggml's ssm_scan
            self.ssm_state = np.zeros((n_m2, m2.n_heads, m2.head_dim, m2.d_state), np.float32)
            self.ssm_conv = np.zeros((n_m2, m2.conv_kernel - 1, m2.conv_dim), np.float32)
        else:
            shape = (n_dn, dn.n_v_heads, dn.d_state, dn.d_state) if dn and n_dn else (0, 0, 0, 0)
            self.ssm_state = np.zeros(shape, np.float32)
            self.ssm_conv = np.zeros((n_dn, dn.conv_kernel - 1, dn.conv_dim) if dn and n_dn else (0, 0, 0),
                                     np.float32)
        self._recurrent_pos = 0
        self._checkpoints: list[Tuple[int, NDArray[Any], NDArray[Any], bool]] = []

    def recurrent_bytes(self) -> Tuple[int, int]:
        """(bytes of the recurrent state, bytes its checkpoints hold now); the
        checkpoints hold at most MAX_CHECKPOINTS times the first."""
        one = self.ssm_state.nbytes + self.ssm_conv.nbytes
        return one, one * len(self._checkpoints)

    def _begin_recurrent(self, start: int) -> None:
        """Before a pass from position start: the state must be the one after start tokens."""
        if self._recurrent_pos != start:
            raise RuntimeError(f"deltanet state is at position {self._recurrent_pos}, the pass starts at {start}")
        self._recurrent_pos = -1   # until the pass ends

    def _end_recurrent(self, pos: int, prefill: bool) -> None:
        self._recurrent_pos = pos
        last = self._checkpoints[-1][0] if self._checkpoints else 0
        if not (prefill or pos - last >= CHECKPOINT_INTERVAL):
            return
        if len(self._checkpoints) < MAX_CHECKPOINTS:
            self._checkpoints.append((pos, self.ssm_state.copy(), self.ssm_conv.copy(), prefill))
            return
        # full: the oldest decoded copy goes (this new one if every other is a
        # prefill's end), else the oldest; its buffers take the new copy, since
        # fresh ones of a large state cost page faults on every write
        decoded = [i for i, c in enumerate(self._checkpoints) if not c[3]]
        if not decoded and not prefill:
            return
        _, state, conv, _ = self._checkpoints.pop(decoded[0] if decoded else 0)
        np.copyto(state, self.ssm_state)
        np.copyto(conv, self.ssm_conv)
        self._checkpoints.append((pos, state, conv, prefill))

    def _truncate_cache(self, n: int) -> None:
        """Attention caches are position-addressed; the recurrent state goes back to the
        latest checkpoint at or before n, and the tokens after it are evaluated again
        by the next call (``_n_cached`` says how far the cache holds)."""
        if not self.spec.recurrent_layers or 0 <= self._recurrent_pos <= n:
            return
        self._checkpoints = [c for c in self._checkpoints if c[0] <= n]
        if self._checkpoints:
            pos, state, conv, _ = self._checkpoints[-1]
            np.copyto(self.ssm_state, state)
            np.copyto(self.ssm_conv, conv)
        else:
            pos = 0
            self.ssm_state.fill(0.0)
            self.ssm_conv.fill(0.0)
        self._recurrent_pos = pos
        self._n_cached = min(self._n_cached, pos)

    def _state_options(self) -> Dict[str, Any]:
        return {"kv_type": self.kv_type}

    def _cached_parts(self) -> list[Tuple[str, NDArray[Any]]]:
        """(name, (kv_heads, n_ctx, head_dim) or (layers, kv_heads, n_ctx, head_dim)
        array) of every cache that holds positions: the whole k and v caches, or
        with `_kv_layout`'s flat rows, each owning layer's view."""
        if self.spec.uniform_kv:   # (mla layers: no V cache)
            return [("k", self.k_cache)] + ([("v", self.v_cache)] if _has_v_cache(self.spec) else [])
        return [(f"{kv}.{li}", caches[li]) for li in self.spec.kv_owners()
                for kv, caches in (("k", self.k_layers), ("v", self.v_layers))]

    def _cache_state(self, n: int) -> Dict[str, NDArray[Any]]:
        arrays = {name: cache[..., :n, :] for name, cache in self._cached_parts()}
        if self.conv_cache.shape[0]:
            arrays["conv"] = self.conv_cache[:, :n]
        if self.spec.recurrent_layers:   # the state after all n tokens (state.py evaluated them)
            if self._recurrent_pos != n:
                raise RuntimeError(f"deltanet state is at position {self._recurrent_pos}, not {n}")
            arrays["ssm_state"], arrays["ssm_conv"] = self.ssm_state, self.ssm_conv
        return arrays

    def _load_cache_state(self, arrays: Dict[str, NDArray[Any]], n: int) -> None:
        parts = self._cached_parts()
        for name, cache in parts:
            saved = arrays.get(name)
            want = cache.shape[:-2] + (n,) + cache.shape[-1:]
            if saved is None or saved.shape != want or saved.dtype != cache.dtype:
                from ..state import StateError

                got = None if saved is None else (saved.shape, str(saved.dtype))
                raise StateError(f"saved context: {name} cache is {got}, expected {want} {cache.dtype}")
        if self.conv_cache.shape[0]:
            saved_conv = arrays.get("conv")
            want_conv = (self.conv_cache.shape[0], n, self.conv_cache.shape[2])
            if saved_conv is None or saved_conv.shape != want_conv or saved_conv.dtype != self.conv_cache.dtype:
                from ..state import StateError

                got = None if saved_conv is None else (saved_conv.shape, str(saved_conv.dtype))
                raise StateError(f"saved context: conv cache is {got}, expected {want_conv} float32")
            self.conv_cache[:, :n] = saved_conv
        if self.spec.recurrent_layers:
            for name, mine in (("ssm_state", self.ssm_state), ("ssm_conv", self.ssm_conv)):
                saved = arrays.get(name)
                if saved is None or saved.shape != mine.shape or saved.dtype != mine.dtype:
                    from ..state import StateError

                    got = None if saved is None else (saved.shape, str(saved.dtype))
                    raise StateError(f"saved context: {name} is {got}, expected {mine.shape} float32")
            self.ssm_state[...] = arrays["ssm_state"]
            self.ssm_conv[...] = arrays["ssm_conv"]
            self._recurrent_pos = n
            self._checkpoints = [(n, self.ssm_state.copy(), self.ssm_conv.copy(), True)]
        for name, cache in parts:
            cache[..., :n, :] = arrays[name]

    def _after_copy(self, twin: Context) -> None:
        # The copy gets its own cache (only the used positions are copied; the rest
        # stays untouched zero pages) and binds its own decoder when it first decodes.
        assert isinstance(twin, TransformerContext)
        n = len(self.tokens)
        twin.k_cache = np.zeros_like(self.k_cache)
        twin.v_cache = np.zeros_like(self.v_cache)
        twin.k_layers = _kv_layout(self.spec, twin.k_cache, self.n_ctx)
        twin.v_layers = _kv_layout(self.spec, twin.v_cache, self.n_ctx)
        for (_, mine), (_, theirs) in zip(self._cached_parts(), twin._cached_parts()):
            theirs[..., :n, :] = mine[..., :n, :]
        twin.conv_cache = np.zeros_like(self.conv_cache)
        twin.conv_cache[:, :n] = self.conv_cache[:, :n]
        twin._scratch = {}
        self.engine._contexts.add(twin)

    # ---- bookkeeping ----------------------------------------------------------------
    def _buffers(self, n: int) -> "_Scratch":
        if n not in self._scratch:
            if len(self._scratch) > 2:
                self._scratch.clear()
            self._scratch[n] = _Scratch(self.spec, n)
        return self._scratch[n]

    def _release(self) -> None:
        self._scratch.clear()
        self._step = None


#: One context's rows in a batched pass: (context, first row, end row, position of the first).
_Segment = Tuple[TransformerContext, int, int, int]
_Job = Tuple[TransformerContext, NDArray[Any], int, Optional[RowOutputs]]


def _prefill_together(jobs: Sequence[_Job]) -> None:
    """Evaluate each job's (context, tokens, start, rows) in passes of up to N_BATCH
    tokens per job: the jobs' rows are stacked, so every weight is read once per pass
    for all of them, and attention runs per context.  The contexts share one spec;
    the first one's scratch holds the pass."""
    owner = jobs[0][0]
    w = owner.engine.live_weights()
    spec = owner.spec
    longest = max(len(tokens) for _, tokens, _, _ in jobs)
    if spec.recurrent_layers:
        for ctx, _, start, _ in jobs:
            ctx._begin_recurrent(start)
    for c0 in range(0, longest, N_BATCH):
        segments: list[_Segment] = []
        chunks = []
        for ctx, tokens, start, _ in jobs:
            chunk = tokens[c0:c0 + N_BATCH]
            if len(chunk):
                lo = segments[-1][2] if segments else 0
                segments.append((ctx, lo, lo + len(chunk), start + c0))
                chunks.append(chunk)
        batch = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        s = owner._buffers(len(batch))
        embd_rows = w.token_embd.data[batch]  # gathers the rows (a small copy)
        K.dequantize(embd_rows.reshape(-1), w.token_embd.qtype, s.x.reshape(-1))
        if spec.embd_scale != 1.0:
            K.scale(s.x, spec.embd_scale)
        if spec.per_layer_dim:
            _per_layer_inputs(spec, w, batch, s)
        for li, layer in enumerate(w.layers):
            owner._block(layer, li, s, segments)
        live = [job for job in jobs if len(job[1]) > c0]
        for (ctx, tokens, _, rows), (_, lo, hi, _) in zip(live, segments):
            if rows is not None:
                ctx._head_rows(s.x[lo:hi], c0, rows)
            if c0 + N_BATCH >= len(tokens):   # the job's last pass: the logits of its last row
                if rows is not None and rows.logits is not None and rows.logits.shape[0]:
                    ctx.logits[:] = rows.logits[-1]
                else:
                    ctx._head(s.x[hi - 1:hi], ctx.logits.reshape(1, -1))
    if spec.recurrent_layers:
        for ctx, tokens, start, _ in jobs:
            ctx._end_recurrent(start + len(tokens), len(tokens) > 1)


def _sigmoid(x: NDArray[Any]) -> NDArray[Any]:
    """1 / (1 + exp(-x)) in float32, by the fused C step's own function (numpy's exp
    rounds differently from C's expf in the last bit, and decode must equal prefill)."""
    out: NDArray[Any] = np.empty(x.shape, np.float32)
    K.sigmoid(np.asarray(x, np.float32), out)
    return out


def _per_layer_inputs(spec: TransformerSpec, w: ModelWeights, batch: NDArray[Any], s: "_Scratch") -> None:
    """s.ple (n, n_layers, per_layer_dim): Gemma 4's per-layer inputs of the batch's
    tokens, from the scaled embeddings s.x (llama.cpp's project_per_layer_inputs)."""
    assert w.ple_embd is not None and w.ple_model_proj is not None and w.ple_proj_norm is not None
    assert s.ple is not None and s.ple_in is not None
    width = spec.per_layer_dim
    K.dequantize(w.ple_embd.data[batch].reshape(-1), w.ple_embd.qtype, s.ple.reshape(-1))
    K.scale(s.ple, math.sqrt(width))
    s.mul(s.x, (w.ple_model_proj, s.ple_in))
    K.scale(s.ple_in, 1.0 / math.sqrt(spec.dim))
    K.rmsnorm(s.ple_in.reshape(s.n, spec.n_layers, width), w.ple_proj_norm.data,
              s.ple_in.reshape(s.n, spec.n_layers, width), spec.rms_eps)
    K.add(s.ple, s.ple_in.reshape(s.ple.shape))
    K.scale(s.ple, 1.0 / math.sqrt(2.0))


def _has_v_cache(spec: TransformerSpec) -> bool:
    """Whether a context caches values: not with latent attention, whose values are the
    cached latent rows (unless the file's layout has it decompress them)."""
    return spec.mla is None or spec.mla.decompressed


def _kv_shape(spec: TransformerSpec, n_ctx: int) -> Tuple[int, ...]:
    """The KV cache's shape: (layers, kv_heads, n_ctx, head_dim) when every layer
    has its own cache of the model's shape, else one flat row per layer that owns a
    cache, as long as the largest of them (`_kv_layout` views them)."""
    if spec.uniform_kv:
        return (spec.n_layers, spec.n_kv_heads, n_ctx, spec.head_dim)
    owners = spec.kv_owners()
    return (len(owners), n_ctx * max((spec.layer_kv_heads(li) * spec.layer_head_dim(li) for li in owners), default=0))


def _kv_layout(spec: TransformerSpec, cache: NDArray[Any], n_ctx: int) -> list[NDArray[Any]]:
    """Each layer's (kv_heads, n_ctx, head_dim) view of a cache of `_kv_shape`; a
    shared-KV layer gets its source layer's view.  A row's unused tail is never
    touched, so it costs no memory."""
    if spec.uniform_kv:
        return [cache[li] for li in range(spec.n_layers)]
    views: list[NDArray[Any]] = []
    row = 0
    for li in range(spec.n_layers):
        src = spec.layers[li].kv_source
        if src is not None:
            views.append(views[src])
            continue
        n_kv, hd = spec.layer_kv_heads(li), spec.layer_head_dim(li)
        if spec.layers[li].kind in CACHELESS_KINDS:   # no cache: an empty view
            views.append(cache[:0, :0].reshape(0, 0, hd))
            continue
        views.append(cache[row, :n_kv * n_ctx * hd].reshape(n_kv, n_ctx, hd))
        row += 1
    return views


def route(h: NDArray[Any], router: Matrix, moe: MoE, bias: Optional[Any] = None,
          logit_bias: Optional[NDArray[Any]] = None) -> Tuple[NDArray[Any], NDArray[Any]]:
    """(experts, weights) of each row of h, each (n, moe.n_used): the experts
    chosen by the router (its logits plus ``logit_bias``, gpt-oss's router bias, if
    given), most probable first (the lower index among equals; with ``bias``, the
    layer's selection biases (a Vector), by probability + bias), and the weights of
    their outputs, the unbiased probabilities (llama.cpp's build_moe_ffn; with
    softmax_weight gating, the softmax of the chosen logits alone).  The
    probabilities are computed in double, as the fused C step does
    (csrc/transformer_block.c, route_token)."""
    n = h.shape[0]
    logits = np.empty((n, moe.n_experts), np.float32)
    _mul(np.ascontiguousarray(h), router, logits)
    if logit_bias is not None:
        logits += logit_bias
    wide = logits.astype(np.float64)
    if moe.gating == "sigmoid":
        probs = 1.0 / (1.0 + np.exp(-wide))
    else:
        wide -= wide.max(axis=1, keepdims=True)
        probs = np.exp(wide)
        probs /= probs.sum(axis=1, keepdims=True)
    # every gating keeps the logits' order, so without a bias the logits choose
    keys = logits if bias is None else probs + bias.data.astype(np.float64)
    if moe.n_groups > 1:
        keys = _grouped_keys(probs if bias is None else keys, moe)
    experts = np.argsort(-keys, axis=1, kind="stable")[:, :moe.n_used]
    if moe.gating == "softmax_weight":
        chosen = np.take_along_axis(wide, experts, axis=1)   # logits less their max
        chosen = np.exp(chosen - chosen.max(axis=1, keepdims=True))
        chosen /= chosen.sum(axis=1, keepdims=True)
    else:
        chosen = np.take_along_axis(probs, experts, axis=1)
    if moe.norm_weights:   # llama.cpp clamps the sum at F16's smallest normal
        chosen /= np.maximum(chosen.sum(axis=1, keepdims=True), 6.103515625e-5)
    weights = chosen.astype(np.float32)
    if moe.weight_scale != 1.0:
        weights *= np.float32(moe.weight_scale)
    return experts, weights


def _grouped_keys(keys: NDArray[Any], moe: MoE) -> NDArray[Any]:
    """The selection keys (n, n_experts) with every expert outside each row's
    n_groups_used best groups set to -inf; a group scores the sum of its two largest
    keys (llama.cpp's build_moe_ffn)."""
    n = keys.shape[0]
    grouped = keys.reshape(n, moe.n_groups, moe.n_experts // moe.n_groups)
    scores = -np.sort(-grouped, axis=2)[:, :, :2].sum(axis=2)
    best = np.argsort(-scores, axis=1, kind="stable")[:, :moe.n_groups_used]
    kept = np.zeros((n, moe.n_groups), bool)
    np.put_along_axis(kept, best, True, axis=1)
    return np.where(kept[:, :, None], grouped, -np.inf).reshape(n, moe.n_experts)


def _ungated(activation: str, xielu: Optional[Tuple[float, float, float, float]], up: NDArray[Any],
             out: NDArray[Any]) -> None:
    """out = act(up) for an FFN without a gate, in float32 as the fused C step computes it:
    relu(u)^2 (Arcee), ggml's xielu with the layer's parameters (Apertus), or GELU's tanh
    approximation (Phi-2, StarCoder2)."""
    if activation == "relu_sqr":
        np.maximum(up, np.float32(0.0), out=out)
        np.multiply(out, out, out=out)
        return
    if activation == "gelu":   # the gated kernel's GELU times ones
        K.gelu_mul(up, np.ones_like(up), out)
        return
    assert xielu is not None
    an, ap, beta, eps = (np.float32(v) for v in xielu)
    negative = (np.expm1(np.minimum(up, eps)) - up) * an + beta * up
    np.copyto(out, np.where(up > 0, ap * up * up + beta * up, negative))


def _mul(x: NDArray[Any], w: Matrix, out: NDArray[Any], xq: Optional[NDArray[Any]] = None) -> NDArray[Any]:
    """out = x W^T for rows x (n, cols); returns the quantized x (reusable for a
    matrix of the same activation format).  One row goes through matvec."""
    n = x.shape[0]
    if xq is None:
        xq = np.zeros(K.activation_bytes(w.qtype, w.cols, n), np.uint8)
        K.quantize_activations(x, w.qtype, xq)
    if n == 1:
        K.matvec_q(w.data, w.qtype, xq, out[0])
    else:
        K.matmul_q(w.data, w.qtype, xq, out)
    return xq


class _Scratch:
    """Activations of a batch of n positions, allocated once per batch size."""

    def __init__(self, spec: TransformerSpec, n: int) -> None:
        f = np.float32
        self.n = n
        self.x = np.zeros((n, spec.dim), f)          # residual stream
        self.h1 = np.zeros((n, spec.dim), f)         # normed input of a block half
        self.h2 = np.zeros((n, spec.dim), f)         # output of a block half
        #: the attention half's output of parallel blocks (added after the FFN's)
        self.attn_out = np.zeros((n, spec.dim), f) if spec.parallel_blocks else self.h2
        # q .. up: room for the largest layer; `rows` views a layer's size
        layers = range(spec.n_layers)
        q_dim = max(spec.n_heads * spec.layer_head_dim(li) for li in layers)
        kv_dim = max(spec.layer_kv_heads(li) * spec.layer_head_dim(li) for li in layers)
        ffn = max(spec.layer_ffn_dim(li) for li in layers)
        self.q = np.zeros((n, q_dim), f)
        self.k = np.zeros((n, kv_dim), f)
        self.v = np.zeros((n, kv_dim), f)
        self.att = np.zeros((n, q_dim), f)
        self.gate = np.zeros((n, ffn), f)
        self.up = np.zeros((n, ffn), f)
        #: per-layer embeddings: every layer's inputs, their projection, one layer's
        #: slice and its gate (None without PLE)
        self.ple: Optional[NDArray[Any]] = None
        self.ple_in: Optional[NDArray[Any]] = None
        self.ple_slice: Optional[NDArray[Any]] = None
        self.ple_gate: Optional[NDArray[Any]] = None
        if spec.per_layer_dim:
            width = spec.per_layer_dim
            self.ple = np.zeros((n, spec.n_layers, width), f)
            self.ple_in = np.zeros((n, spec.n_layers * width), f)
            self.ple_slice = np.zeros((n, width), f)
            self.ple_gate = np.zeros((n, width), f)
        self._ones: Dict[int, NDArray[Any]] = {}
        #: a shortconv layer's c and u parts of in_proj (b uses h2)
        conv_dim = spec.dim if spec.conv_layers else 0
        self.conv_c = np.zeros((n, conv_dim), f)
        self.conv_u = np.zeros((n, conv_dim), f)
        #: q and its output gate (attn_output_gate); a deltanet layer's projections
        self.q_gate = np.zeros((n, 2 * q_dim if spec.attn_output_gate else 0), f)
        dn = spec.deltanet if spec.deltanet_layers else None
        self.dn_qkv = np.zeros((n, dn.conv_dim if dn else 0), f)
        self.dn_z = np.zeros((n, dn.value_dim if dn else 0), f)
        self.dn_out = np.zeros((n, dn.value_dim if dn else 0), f)
        self.dn_alpha = np.zeros((n, dn.n_v_heads if dn else 0), f)
        self.dn_beta = np.zeros((n, dn.n_v_heads if dn else 0), f)
        #: a mamba2 layer's ssm_in projection (z, xBC, dt) and its y
        m2 = spec.mamba2 if spec.mamba2_layers else None
        self.m2_in = np.zeros((n, m2.in_dim if m2 else 0), f)
        self.m2_y = np.zeros((n, m2.d_inner if m2 else 0), f)
        #: one expert's output rows (a mixture of experts sums them into h2)
        self.h1_out = np.zeros((n, spec.dim), f) if spec.moe is not None else self.h2
        shared = spec.moe.shared_ffn_dim if spec.moe is not None else 0
        self.shared_gate = np.zeros((n, shared), f)
        self.shared_up = np.zeros((n, shared), f)
        self._act: Dict[Tuple[int, int], NDArray[Any]] = {}

    def rows(self, buf: NDArray[Any], cols: int) -> NDArray[Any]:
        """The first n * cols values of buf as a contiguous (n, cols) array."""
        return buf.reshape(-1)[:self.n * cols].reshape(self.n, cols)

    def ones(self, n: int) -> NDArray[Any]:
        """A weight of n ones (an RMSNorm without a weight)."""
        if n not in self._ones:
            self._ones[n] = np.ones(n, np.float32)
        return self._ones[n]

    def mul(self, x: NDArray[Any], *pairs: Tuple[Matrix, NDArray[Any]]) -> None:
        """out = x W^T for each (W, out); x is quantized once per activation format."""
        done: Dict[int, NDArray[Any]] = {}
        for w, out in pairs:
            xq = done.get(w.act_type)
            if xq is None:
                key = (w.act_type, w.cols)
                xq = self._act.get(key)
                if xq is None:
                    xq = self._act[key] = np.zeros(K.activation_bytes(w.qtype, w.cols, self.n), np.uint8)
                K.quantize_activations(x, w.qtype, xq)
                done[w.act_type] = xq
            _mul(x, w, out, xq)
