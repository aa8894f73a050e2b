"""Perplexity and KL divergence the way llama-perplexity measures them.

The method (llama.cpp's tools/perplexity, ``perplexity()``), followed exactly:

* the whole text is tokenized once, with BOS in front where the model adds one;
* it is cut into ``len(tokens) // n_ctx`` non-overlapping chunks of ``n_ctx``
  tokens (at least two are needed), each evaluated in a fresh context with its
  first token replaced by BOS where the model adds one;
* only the second half is scored: the logits at positions ``first = n_ctx // 2``
  to ``n_ctx - 2`` predict the tokens after them, ``n_ctx - 1 - first`` per chunk;
* ``nll = logsumexp(logits) - logit[next]``, summed with its square in float64;
  ``PPL = exp(mean nll)``, its uncertainty ``PPL * sqrt(var(nll) / (count - 1))``.

The logits come from batched passes (``prefill_batch(..., all_logits=True,
logits_from=first)``: the output head runs on the scored rows only), several
chunks to a pass as llama-perplexity's ``n_batch / n_ctx`` sequences, each chunk in
its own context.

KL divergence against a base model uses llama-perplexity's logits file, so files
are interchangeable with ``llama-perplexity --kl-divergence-base``: the magic
``_logits_``, n_ctx (u32), n_vocab and n_chunk (i32), the chunks' tokens (i32),
then per scored position ``nv = 2 * ((n_vocab + 1) // 2) + 4`` u16 values: a float32
scale and minimum log-probability, then each token's log-probability quantized
to 16 bits over the 16 nats below the maximum.
"""
from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterator, Optional

import numpy as np
from numpy.typing import NDArray

MAGIC = b"_logits_"


class LogitsFileError(ValueError):
    """A base logits file that is not llama-perplexity's format, or not for this run."""


def tokenize_for_perplexity(model: Any, text: str) -> list[int]:
    """The text's tokens as llama-perplexity takes them (add_special, no special parsing)."""
    return list(model.tokenizer.encode(text, add_special=True, parse_special=False))


def chunk_count(n_tokens: int, n_ctx: int, n_chunks: Optional[int] = None) -> int:
    if n_ctx < 4:
        raise ValueError(f"n_ctx: must be >= 4, got {n_ctx}")
    if n_tokens < 2 * n_ctx:
        raise ValueError(f"the text tokenizes to {n_tokens} tokens; a context of {n_ctx} needs at "
                         f"least {2 * n_ctx}")
    most = n_tokens // n_ctx
    return most if n_chunks is None or n_chunks < 0 else min(n_chunks, most)


def _chunk_input(chunk: NDArray[Any], bos: Optional[int]) -> NDArray[Any]:
    tokens = np.array(chunk[:-1], dtype=np.int32)  # the last token is only a target
    if bos is not None:
        tokens[0] = bos
    return tokens


def chunk_logits(ctx: Any, chunk: NDArray[Any], bos: Optional[int]) -> NDArray[Any]:
    """Logits of positions n_ctx//2 ... n_ctx-2 of one chunk, evaluated from scratch
    (BOS in place of the first token when ``bos`` is given)."""
    ctx.restart()
    logits: NDArray[Any] = ctx.prefill(_chunk_input(chunk, bos), all_logits=True, logits_from=len(chunk) // 2)
    return logits


#: llama-perplexity's default batch (-b): this many tokens of chunks run in one pass
N_BATCH = 2048
#: at most this many bytes of logits held for one pass (Gemma 3's 262,144-token
#: vocabulary takes 256 MiB per chunk of 512)
LOGITS_BUDGET = 512 << 20


def chunks_per_pass(n_ctx: int, n_vocab: int, n_batch: int = N_BATCH) -> int:
    """llama-perplexity's ``n_batch / n_ctx`` chunks in one pass, fewer where their
    scored logits would pass LOGITS_BUDGET; at least one."""
    scored = n_ctx - 1 - n_ctx // 2
    by_memory = LOGITS_BUDGET // max(1, scored * n_vocab * 4)
    return max(1, min(n_batch // n_ctx, by_memory))


def scored_chunks(model: Any, chunks: Iterator[NDArray[Any]], n_ctx: int, bos: Optional[int],
                  n_batch: int = N_BATCH) -> Iterator[NDArray[Any]]:
    """`chunk_logits` of each chunk in order, several chunks evaluated in one batched
    pass (`infer.runtime.prefill_batch`), each in its own fresh context."""
    from .runtime import prefill_batch

    per_pass = chunks_per_pass(n_ctx, model.engine.vocab_size, n_batch)
    contexts = [model.create_context(n_ctx=n_ctx) for _ in range(per_pass)]
    pending: list[NDArray[Any]] = []
    for chunk in chunks:
        pending.append(chunk)
        if len(pending) == per_pass:
            yield from _pass(contexts, pending, bos, prefill_batch)
            pending = []
    if pending:
        yield from _pass(contexts, pending, bos, prefill_batch)


def _pass(contexts: list[Any], chunks: list[NDArray[Any]], bos: Optional[int], prefill_batch: Any) -> Any:
    used = contexts[:len(chunks)]
    for ctx in used:
        ctx.restart()
    first = len(chunks[0]) // 2
    yield from prefill_batch(used, [_chunk_input(c, bos) for c in chunks], all_logits=True, logits_from=first)


def log_softmax_rows(logits: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any]]:
    """Per row: the maximum and log(sum(exp(logit - max))), as llama-perplexity
    (float32 exp, float64 sum)."""
    top = logits.max(axis=1)
    sums = np.empty(logits.shape[0], dtype=np.float64)
    # A row at a time through one buffer that stays in cache: for Gemma's 262,144-token
    # vocabulary the whole-matrix temporaries took twice as long (the same values).
    row = np.empty(logits.shape[1], dtype=np.float32)
    for r in range(logits.shape[0]):
        np.subtract(logits[r], top[r], out=row)
        np.exp(row, out=row)
        sums[r] = row.sum(dtype=np.float64)
    return top, np.log(sums)


def nll_of(logits: NDArray[Any], targets: NDArray[Any]) -> NDArray[Any]:
    """Negative log-likelihood of ``targets[i]`` under row i (float64)."""
    top, lse = log_softmax_rows(logits)
    picked = logits[np.arange(len(targets)), targets].astype(np.float64)
    result: NDArray[Any] = top.astype(np.float64) + lse - picked
    return result


@dataclass
class Estimate:
    """Running sums of the scored tokens' nll."""

    count: int = 0
    nll: float = 0.0
    nll2: float = 0.0

    def add(self, values: NDArray[Any]) -> None:
        self.count += int(values.size)
        self.nll += float(values.sum())
        self.nll2 += float((values * values).sum())

    @property
    def ppl(self) -> float:
        return math.exp(self.nll / self.count) if self.count else float("nan")

    @property
    def uncertainty(self) -> float:
        """llama-perplexity's ``+/-``: PPL * standard error of the mean nll."""
        if self.count < 2:
            return float("nan")
        mean = self.nll / self.count
        var = self.nll2 / self.count - mean * mean
        return math.sqrt(var / (self.count - 1)) * self.ppl if var > 0 else float("nan")


def perplexity(model: Any, text: str, n_ctx: int = 512, n_chunks: Optional[int] = None,
               context: Any = None, n_batch: int = N_BATCH) -> Iterator[tuple[int, int, Estimate]]:
    """Yields (chunk index, chunk count, running Estimate) after each chunk.  The chunks
    run ``n_batch // n_ctx`` to a pass (`scored_chunks`), or one at a time in ``context``."""
    tokens = tokenize_for_perplexity(model, text)
    n = chunk_count(len(tokens), n_ctx, n_chunks)
    vocab = model.tokenizer.vocab
    bos = vocab.bos_token_id if vocab.add_bos else None
    first = n_ctx // 2
    est = Estimate()
    arr = np.asarray(tokens, dtype=np.int64)
    chunks = [arr[i * n_ctx:(i + 1) * n_ctx] for i in range(n)]
    if context is not None:
        scored: Iterator[NDArray[Any]] = (chunk_logits(context, c, bos) for c in chunks)
    else:
        scored = scored_chunks(model, iter(chunks), n_ctx, bos, n_batch)
    for i, (chunk, logits) in enumerate(zip(chunks, scored)):
        est.add(nll_of(logits, chunk[first + 1:]))
        yield i, n, est


# ---- llama-perplexity's logits file --------------------------------------------------

def row_width(n_vocab: int) -> int:
    return 2 * ((n_vocab + 1) // 2) + 4


def quantize_log_probs(logits: NDArray[Any]) -> NDArray[Any]:
    """Rows of ``row_width`` u16: llama-perplexity's ``log_softmax(..., log_prob, tok)``."""
    n_rows, n_vocab = logits.shape
    out = np.zeros((n_rows, row_width(n_vocab)), dtype=np.uint16)
    top = logits.max(axis=1)
    low = np.maximum(logits.min(axis=1), top - np.float32(16))
    _, lse = log_softmax_rows(logits)
    for r in range(n_rows):
        x = logits[r]
        log_sum_exp = np.float32(lse[r])
        min_log_prob = np.float32(low[r] - top[r] - log_sum_exp)
        scale = np.float32((top[r] - low[r]) / np.float32(65535))
        out[r, :4] = np.array([scale, min_log_prob], dtype=np.float32).view(np.uint16)
        if scale:
            q = np.rint(np.float32(1) / scale * (x - low[r])).astype(np.int64)
            out[r, 4:4 + n_vocab] = np.where(x > low[r], q, 0).astype(np.uint16)
    return out


def dequantize_log_probs(rows: NDArray[Any], n_vocab: int) -> NDArray[Any]:
    head = np.ascontiguousarray(rows[:, :4]).view(np.float32)
    scale, min_log_prob = head[:, 0:1], head[:, 1:2]
    result: NDArray[Any] = scale * rows[:, 4:4 + n_vocab].astype(np.float32) + min_log_prob
    return result


class LogitsWriter:
    """Writes a base logits file as llama-perplexity does (atomically: a temporary
    file renamed into place when closed without error)."""

    def __init__(self, path: str, n_ctx: int, n_vocab: int, n_chunk: int, tokens: NDArray[Any]) -> None:
        self.path = path
        self._tmp = f"{path}.tmp{os.getpid()}"
        self._f: BinaryIO = open(self._tmp, "wb")
        self._f.write(MAGIC + struct.pack("<Iii", n_ctx, n_vocab, n_chunk))
        self._f.write(np.asarray(tokens[:n_chunk * n_ctx], dtype="<i4").tobytes())

    def add(self, logits: NDArray[Any]) -> None:
        self._f.write(quantize_log_probs(logits).astype("<u2").tobytes())

    def close(self, ok: bool = True) -> None:
        self._f.close()
        if ok:
            os.replace(self._tmp, self.path)
        else:
            os.unlink(self._tmp)


class LogitsReader:
    """Reads a base logits file; `LogitsFileError` for anything that does not fit."""

    def __init__(self, path: str, n_vocab: int) -> None:
        self._f: BinaryIO = open(path, "rb")
        head = self._f.read(20)
        if len(head) < 20 or head[:8] != MAGIC:
            self._f.close()
            raise LogitsFileError(f"{path}: not a llama-perplexity logits file (no '_logits_' header)")
        self.n_ctx, self.n_vocab, self.n_chunk = struct.unpack("<Iii", head[8:])
        if self.n_vocab != n_vocab or self.n_chunk < 1 or self.n_ctx < 4:
            self._f.close()
            raise LogitsFileError(f"{path}: made for a vocabulary of {self.n_vocab} tokens "
                                  f"(this model has {n_vocab}), n_ctx {self.n_ctx}, {self.n_chunk} chunks")
        raw = self._f.read(4 * self.n_ctx * self.n_chunk)
        if len(raw) != 4 * self.n_ctx * self.n_chunk:
            self._f.close()
            raise LogitsFileError(f"{path}: truncated in its tokens")
        self.tokens = np.frombuffer(raw, dtype="<i4").astype(np.int64)
        self.path = path

    def chunk(self, index: int) -> NDArray[Any]:
        """The base log-probabilities of one chunk's scored positions."""
        n_rows = self.n_ctx - 1 - self.n_ctx // 2
        width = row_width(self.n_vocab)
        raw = self._f.read(2 * n_rows * width)
        if len(raw) != 2 * n_rows * width:
            raise LogitsFileError(f"{self.path}: truncated in chunk {index + 1}")
        return np.frombuffer(raw, dtype="<u2").reshape(n_rows, width)

    def close(self) -> None:
        self._f.close()


@dataclass
class KLDivergence:
    """llama-perplexity's ``kl_divergence_result`` sums."""

    ppl: Estimate = field(default_factory=Estimate)
    base: Estimate = field(default_factory=Estimate)
    sum_nll_nll_base: float = 0.0
    kld: list[NDArray[Any]] = field(default_factory=list)
    p_diff: list[NDArray[Any]] = field(default_factory=list)
    n_same_top: int = 0

    def add(self, logits: NDArray[Any], base_rows: NDArray[Any], targets: NDArray[Any]) -> None:
        n_vocab = logits.shape[1]
        top, lse = log_softmax_rows(logits)
        log_p = logits.astype(np.float64) - (top.astype(np.float64) + lse)[:, None]
        base_log_p = dequantize_log_probs(base_rows, n_vocab).astype(np.float64)
        idx = np.arange(len(targets))
        nll = -log_p[idx, targets]
        nll_base = -base_log_p[idx, targets]
        self.ppl.add(nll)
        self.base.add(nll_base)
        self.sum_nll_nll_base += float((nll * nll_base).sum())
        keep = base_log_p > -16.0
        kld = np.where(keep, np.exp(base_log_p) * (base_log_p - log_p), 0.0).sum(axis=1)
        self.kld.append(kld)
        self.p_diff.append(np.exp(-nll) - np.exp(-nll_base))
        self.n_same_top += int((logits.argmax(axis=1) == base_log_p.argmax(axis=1)).sum())

    def summary(self) -> dict[str, float]:
        kld = np.concatenate(self.kld) if self.kld else np.zeros(0)
        dp = np.concatenate(self.p_diff) if self.p_diff else np.zeros(0)
        n = max(int(kld.size), 1)
        mean_ln_ratio = (self.ppl.nll - self.base.nll) / n
        return {
            "ppl": self.ppl.ppl, "ppl_base": self.base.ppl, "ln_ppl_ratio": mean_ln_ratio,
            "kld_mean": float(kld.mean()) if kld.size else float("nan"),
            "kld_stderr": float(kld.std(ddof=1) / math.sqrt(n)) if kld.size > 1 else float("nan"),
            "kld_max": float(kld.max()) if kld.size else float("nan"),
            "kld_median": float(np.median(kld)) if kld.size else float("nan"),
            "same_top": self.n_same_top / n,
            "rms_dp": float(math.sqrt((dp * dp).mean())) if dp.size else float("nan"),
        }
