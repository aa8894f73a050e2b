"""BERT-family encoders: GGUF ``bert`` (all-MiniLM, bge, e5, mxbai-embed, BERT
cross-encoder rerankers) and ``nomic-bert`` (nomic-embed-text v1/v1.5).

An encoder reads its whole input at once (attention is not causal) and gives
hidden states, not logits: it embeds texts (`infer.embeddings`) or scores a
query/document pair (`rerank`), and cannot generate.  The forward pass follows
llama.cpp's src/models/bert.cpp:

    x = token_embd[t] + token_types[0] (+ position_embd[pos], bert) ; LayerNorm
    per layer: q, k, v (one fused attn_qkv or three, with biases if present);
        nomic-bert turns q and k by NEOX RoPE; softmax(q k^T / sqrt(head_dim)) v
        over every position; attn_output; x = LayerNorm(x + attention)
        FFN: bert GELU(up) -> down (with biases), nomic-bert SiLU(gate) * up -> down
        x = LayerNorm(x + FFN)

It runs in Python on infer's kernels (mat-muls in the file's formats, LayerNorm,
RoPE, GELU); the inputs are short (at most the trained context, 512 or 2048).
A file with a classification head (``cls`` dense + tanh, then ``cls.output``: a
cross-encoder reranker) turns the first token's state (or the mean of all, with
``classifier.pooling_type`` 1) into scores, as llama.cpp's build_pooling does for
pooling "rank".  The converter does not write ``pooling_type`` 4 for BERT rerankers
(llama-server is started with ``--reranking``), so a file with such a head and no
``pooling_type`` is taken as a reranker.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np
from numpy.typing import NDArray

from .. import kernels as K
from ..runtime import Context, ContextOverflowError, Engine, RowOutputs, UnsupportedModelError, register_variant
from .hparams import HParams, vocab_size
from .transformer import _mul as multiply
from .weights import Matrix, Vector

#: llama.cpp's ``<arch>.pooling_type`` values (enum llama_pooling_type)
POOLING_TYPES = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


class EncoderOnlyError(ValueError):
    """An embedding (encoder) model was asked to generate text."""


_Bias = Optional[NDArray[Any]]


@dataclass
class _Layer:
    """One encoder block's weights (views of the file); a bias is None where the file has none."""

    q: Matrix
    k: Matrix
    v: Matrix
    q_b: _Bias
    k_b: _Bias
    v_b: _Bias
    o: Matrix
    o_b: _Bias
    attn_norm: NDArray[Any]
    attn_norm_b: NDArray[Any]
    gate: Optional[Matrix]
    up: Matrix
    up_b: _Bias
    down: Matrix
    down_b: _Bias
    out_norm: NDArray[Any]
    out_norm_b: NDArray[Any]


class EncoderEngine(Engine):
    """A loaded BERT-family encoder: its weights (views of the file) and forward pass."""

    #: an embedding model: `infer generate` and chat refuse it
    is_encoder = True

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        md = gguf_file.metadata
        tensors: Dict[str, Any] = gguf_file.tensors
        arch = str(md.get("general.architecture"))
        hp = HParams(md, arch)
        self.architecture = arch
        self.nomic = arch == "nomic-bert"
        dim, n_heads, n_kv_heads, head_dim = hp.attention_shape()
        if n_kv_heads != n_heads or head_dim * n_heads != dim:
            raise UnsupportedModelError(f"{arch} file: {n_heads} heads of {head_dim} with {n_kv_heads} KV heads "
                                        f"over a width of {dim}: infer's encoder has one KV head per head "
                                        f"and heads that split the width", ["attention.head_count_kv"])
        self.dim, self.n_heads, self.head_dim = dim, n_heads, head_dim
        self.n_embd = dim
        self.n_layers = hp.integer("block_count")
        self.ffn_dim = hp.integer("feed_forward_length")
        self.max_seq_len = hp.integer("context_length")
        self.eps = hp.number("attention.layer_norm_epsilon", positive=True)
        if hp.boolean("attention.causal", False):
            raise UnsupportedModelError(f"{arch} file: attention.causal is true; infer's encoder is "
                                        f"bidirectional, as llama.cpp's bert graph is", ["attention.causal"])
        has_head = "cls.weight" in gguf_file.tensors or "cls.output.weight" in gguf_file.tensors
        pooling = hp.integer("pooling_type", 4 if has_head else 0, lo=0, hi=4)
        #: the file's pooling ("none", "mean", "cls", "last" or "rank")
        self.pooling = POOLING_TYPES[pooling]
        #: what the classification head reads: the first token's state ("cls") or the mean of all
        self.head_pooling = POOLING_TYPES[hp.integer("classifier.pooling_type", 2, lo=1, hi=2)]
        self.rope_base = hp.number("rope.freq_base", 10000.0, positive=True) if self.nomic else 0.0
        labels = hp.raw("classifier.output_labels", None)
        self.class_labels: list[str] = [str(x) for x in labels] if isinstance(labels, (list, tuple)) else []
        hp.read.add("classifier.output_labels")
        hp.refuse_unread()
        self.vocab_size = vocab_size(tensors)
        self._load(tensors)

    # ---- weights -------------------------------------------------------------------
    def _load(self, tensors: Dict[str, Any]) -> None:
        used: set[str] = set()
        arch = self.architecture

        def need(name: str) -> Any:
            if name not in tensors:
                raise UnsupportedModelError(f"{arch} file: tensor {name} is missing", [name])
            used.add(name)
            return tensors[name]

        def maybe(name: str) -> Optional[Any]:
            return need(name) if name in tensors else None

        def matrix(name: str, rows: int, cols: int) -> Matrix:
            return Matrix(need(name), rows, cols, name)

        def vector(name: str, n: int) -> NDArray[Any]:
            data: NDArray[Any] = Vector(need(name), n, name).data
            return data

        def maybe_vector(name: str, n: int) -> _Bias:
            return vector(name, n) if name in tensors else None

        d, ff = self.dim, self.ffn_dim
        self.token_embd = matrix("token_embd.weight", self.vocab_size, d)
        types = maybe("token_types.weight")
        self.type_row0 = None if types is None else self._rows(Matrix(types, int(types.shape[0]), d,
                                                                      "token_types.weight"), np.array([0]))[0]
        self.position_embd = None if self.nomic else matrix("position_embd.weight", self.max_seq_len, d)
        self.embd_norm = vector("token_embd_norm.weight", d)
        self.embd_norm_b = vector("token_embd_norm.bias", d)
        self.layers: list[_Layer] = []
        for i in range(self.n_layers):
            p = f"blk.{i}."
            biases: list[_Bias]
            if f"{p}attn_qkv.weight" in tensors:
                qkv = matrix(f"{p}attn_qkv.weight", 3 * d, d)
                q, k, v = qkv.row_slice(0, d), qkv.row_slice(d, 2 * d), qkv.row_slice(2 * d, 3 * d)
                fused_b = maybe_vector(f"{p}attn_qkv.bias", 3 * d)
                if fused_b is not None:
                    biases = [fused_b[:d], fused_b[d:2 * d], fused_b[2 * d:]]
                else:
                    biases = [maybe_vector(f"{p}attn_{x}.bias", d) for x in "qkv"]
            else:
                q, k, v = (matrix(f"{p}attn_{x}.weight", d, d) for x in "qkv")
                biases = [maybe_vector(f"{p}attn_{x}.bias", d) for x in "qkv"]
            self.layers.append(_Layer(
                q=q, k=k, v=v, q_b=biases[0], k_b=biases[1], v_b=biases[2],
                o=matrix(f"{p}attn_output.weight", d, d), o_b=maybe_vector(f"{p}attn_output.bias", d),
                attn_norm=vector(f"{p}attn_output_norm.weight", d),
                attn_norm_b=vector(f"{p}attn_output_norm.bias", d),
                gate=matrix(f"{p}ffn_gate.weight", ff, d) if self.nomic else None,
                up=matrix(f"{p}ffn_up.weight", ff, d), up_b=maybe_vector(f"{p}ffn_up.bias", ff),
                down=matrix(f"{p}ffn_down.weight", d, ff), down_b=maybe_vector(f"{p}ffn_down.bias", d),
                out_norm=vector(f"{p}layer_output_norm.weight", d),
                out_norm_b=vector(f"{p}layer_output_norm.bias", d)))
        self.cls: Optional[Matrix] = None
        self.cls_out: Optional[Matrix] = None
        self.cls_b: _Bias = None
        self.cls_out_b: _Bias = None
        if "cls.weight" in tensors:
            self.cls = matrix("cls.weight", d, d)
            self.cls_b = maybe_vector("cls.bias", d)
        n_out = max(len(self.class_labels), 1)
        if "cls.output.weight" in tensors:
            self.cls_out = matrix("cls.output.weight", n_out, d)
            self.cls_out_b = maybe_vector("cls.output.bias", n_out)
        #: scores a rank file gives a pair (llama.cpp's n_cls_out)
        self.n_scores = n_out if self.cls_out is not None else d
        unused = sorted(set(tensors) - used)
        if unused:
            raise UnsupportedModelError(f"{arch} file: tensors {', '.join(unused[:6])}"
                                        f"{' ...' if len(unused) > 6 else ''} are not part of infer's "
                                        f"{arch} encoder; they may change the maths, so the file is refused", unused)
        #: whether the file has a classification head to score (query, document) pairs with
        self.can_rerank = self.cls is not None or self.cls_out is not None
        if self.pooling == "rank" and not self.can_rerank:
            raise UnsupportedModelError(f"{arch} file: pooling_type 4 (rank) without a classification head "
                                        f"(cls.weight / cls.output.weight)", ["cls.output.weight"])

    @staticmethod
    def _rows(m: Matrix, ids: NDArray[Any]) -> NDArray[Any]:
        """Rows ``ids`` of a table in any kernel format, as float32 (n, cols)."""
        out = np.empty((len(ids), m.cols), np.float32)
        if len(ids):
            K.dequantize(np.ascontiguousarray(m.data[ids]).reshape(-1), m.qtype, out.reshape(-1))
        return out

    # ---- the forward pass ----------------------------------------------------------
    def encode(self, tokens: NDArray[Any]) -> NDArray[Any]:
        """Final hidden states (n, dim) of ``tokens`` (int32 ids, the whole input)."""
        n = len(tokens)
        if n > self.max_seq_len:
            raise ContextOverflowError(f"input is too large: {n} tokens exceed the model's context of "
                                       f"{self.max_seq_len} tokens")
        self._check_open()
        x = self._rows(self.token_embd, np.asarray(tokens, np.int64))
        if self.type_row0 is not None:
            x += self.type_row0
        if self.position_embd is not None:
            x += self._rows(self.position_embd, np.arange(n))
        K.layernorm(x, self.embd_norm, self.embd_norm_b, x, self.eps)
        h, hd = self.n_heads, self.head_dim
        d = self.dim
        q, k, v = (np.empty((n, d), np.float32) for _ in range(3))
        att = np.empty((n, d), np.float32)
        cur = np.empty((n, d), np.float32)
        up = np.empty((n, self.ffn_dim), np.float32)
        gate = np.empty((n, self.ffn_dim), np.float32)
        ones = np.ones((n, self.ffn_dim), np.float32)  # gelu_mul's other factor: plain GELU
        scale = np.float32(1.0 / math.sqrt(hd))
        scores = np.empty((n, n), np.float32)
        for L in self.layers:
            _mul(x, (L.q, q), (L.k, k), (L.v, v))
            for out, b in ((q, L.q_b), (k, L.k_b), (v, L.v_b)):
                if b is not None:
                    out += b
            if self.nomic:
                K.rope(q.reshape(n, h, hd), 0, self.rope_base, neox=True)
                K.rope(k.reshape(n, h, hd), 0, self.rope_base, neox=True)
            # one head at a time: (n, n) scores, 16 MB at nomic's 2048 positions, not h times that
            for head in range(h):
                cols = slice(head * hd, (head + 1) * hd)
                np.matmul(q[:, cols], k[:, cols].T, out=scores)   # every position sees every other
                scores *= scale
                scores -= scores.max(axis=-1, keepdims=True)
                np.exp(scores, out=scores)
                scores /= scores.sum(axis=-1, keepdims=True)
                att[:, cols] = scores @ v[:, cols]
            _mul(att, (L.o, cur))
            if L.o_b is not None:
                cur += L.o_b
            cur += x
            K.layernorm(cur, L.attn_norm, L.attn_norm_b, cur, self.eps)
            if L.gate is not None:
                _mul(cur, (L.gate, gate), (L.up, up))
                K.silu_mul(gate, up, up)
            else:
                _mul(cur, (L.up, up))
                if L.up_b is not None:
                    up += L.up_b
                K.gelu_mul(up, ones, up)
            _mul(up, (L.down, x))
            if L.down_b is not None:
                x += L.down_b
            x += cur
            K.layernorm(x, L.out_norm, L.out_norm_b, x, self.eps)
        return x

    def classify(self, hidden: NDArray[Any]) -> NDArray[Any]:
        """The classification head on the first token's state (or the mean of all, as
        ``classifier.pooling_type`` says): the scores of a pair (llama.cpp's rank
        pooling: cls + tanh, then cls.output)."""
        self._check_open()
        pooled = hidden.mean(axis=0, keepdims=True) if self.head_pooling == "mean" else hidden[:1]
        cur = np.ascontiguousarray(pooled, dtype=np.float32)
        if self.cls is not None:
            out = np.empty((1, self.dim), np.float32)
            _mul(cur, (self.cls, out))
            if self.cls_b is not None:
                out += self.cls_b
            cur = np.tanh(out)
        if self.cls_out is not None:
            scores = np.empty((1, self.cls_out.rows), np.float32)
            _mul(cur, (self.cls_out, scores))
            if self.cls_out_b is not None:
                scores += self.cls_out_b
            cur = scores
        first: NDArray[Any] = cur[0]
        return first

    def _check_open(self) -> None:
        if not self.layers:
            from ..runtime import ModelClosedError

            raise ModelClosedError("the model is closed")

    def create_context(self, n_ctx: Optional[int] = None, sampler: Any = None) -> "EncoderContext":
        n = self.max_seq_len if n_ctx is None else n_ctx
        return EncoderContext(self, n, sampler)

    def close(self) -> None:
        """Drop the views of the file (encode and classify then raise ModelClosedError)."""
        self.layers = []
        self.cls = self.cls_out = None


def _mul(x: NDArray[Any], *pairs: tuple[Matrix, NDArray[Any]]) -> None:
    """out = x W^T for each (W, out), x quantized once per activation format."""
    done: Dict[int, NDArray[Any]] = {}
    for w, out in pairs:
        done[w.act_type] = multiply(x, w, out, done.get(w.act_type))


class EncoderContext(Context):
    """A context of an encoder: ``prefill(tokens, hidden_states=True)`` of a whole input
    from an empty history gives its hidden states; there are no logits to sample."""

    def _forward(self, tokens: NDArray[Any], start: int) -> None:
        raise EncoderOnlyError(f"this is an embedding model ({self.engine.architecture}, an encoder): it has no "
                               f"logits to generate text from; use embeddings (model.embed, infer embed, "
                               f"/v1/embeddings) instead")

    def _forward_rows(self, tokens: NDArray[Any], start: int, rows: RowOutputs) -> None:
        if rows.logits is not None:
            self._forward(tokens, start)
        if start != 0:
            raise ValueError("an encoder reads its whole input at once: restart() the context before "
                             "each prefill")
        assert rows.hidden is not None
        engine: EncoderEngine = self.engine  # type: ignore[assignment]
        rows.hidden[:] = engine.encode(tokens)


@register_variant("bert", "nomic-bert")
def _bert(gguf_file: Any, n_threads: Optional[int] = None) -> EncoderEngine:
    return EncoderEngine(gguf_file, n_threads)
