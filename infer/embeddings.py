"""Text embeddings from a model's final hidden states (after the output norm, as
llama.cpp's ``llama-embedding`` reads them), pooled over each text's tokens.

* ``"mean"``: the average over every token (BOS included when the model adds one);
* ``"last"``: the last token's state (what decoder-only embedding models train);
* ``"cls"``: the first token's state.

The default pooling is the file's (``<arch>.pooling_type`` of an embedding model such
as a ``bert`` / ``nomic-bert`` encoder), else ``"mean"``; an explicit ``pooling``
overrides it.  A reranking file (pooling "rank") scores (query, document) pairs
through `rerank` instead.

Each text is run on its own, in a fresh pass, so a text's embedding does not depend
on which other texts share the call.  ``normalize=True`` scales each to unit L2 norm.
A text is tokenized as llama.cpp's ``llama-embedding`` and llama-server do it: with
the model's BOS, and special-token texts (``<|im_start|>``) read as those tokens.  An
item may also be a list of token ids, used as it is.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np
from numpy.typing import NDArray

POOLINGS = ("mean", "last", "cls")


def as_token_ids(item: Any) -> Optional[list[int]]:
    """``item`` as a list of token ids if it is a non-string sequence of ints, else None."""
    if isinstance(item, (str, bytes)) or not hasattr(item, "__len__"):
        return None
    ids = list(item)
    if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in ids):
        return None
    return [int(t) for t in ids]


def tokenize_inputs(model: Any, texts: Sequence[Any], name: str = "texts") -> list[list[int]]:
    """The token ids `embed` runs for each item (a str, or a list of token ids);
    errors name the item as ``name[i]``."""
    vocab = int(model.engine.vocab_size)
    encoded = []
    for i, item in enumerate(texts):
        ids = model.tokenizer.encode(item, add_special=True, parse_special=True) if isinstance(item, str) \
            else as_token_ids(item)
        if ids is None:
            raise TypeError(f"{name}[{i}]: expected a str or a list of token ids, got {type(item).__name__}")
        if not ids:
            raise ValueError(f"{name}[{i}]: is empty" + (" and the model adds no BOS token"
                                                          if isinstance(item, str) else ""))
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"{name}[{i}]: token id {bad[0]} is outside the vocabulary [0, {vocab})")
        encoded.append(ids)
    return encoded


def file_pooling(model: Any) -> str:
    """The pooling ``embed`` uses by default: the file's (an encoder's ``pooling_type``),
    else "mean".  ValueError for a file whose pooling is "rank" or "none"."""
    pooling = getattr(model.engine, "pooling", None)
    if pooling is None:
        return "mean"
    if pooling == "rank":
        raise ValueError("this is a reranking model (pooling_type rank): it scores (query, document) pairs "
                         "with model.rerank or /v1/rerank; its embeddings need an explicit pooling")
    if pooling not in POOLINGS:
        raise ValueError(f"the file's pooling type is {pooling!r} (one vector per token); pass pooling="
                         f"{' or '.join(repr(p) for p in POOLINGS)} to get one vector per text")
    return str(pooling)


def check_lengths(model: Any, encoded: Sequence[Sequence[int]], name: str = "texts") -> None:
    """An encoder reads a whole input at once, at most its trained context: llama-server's
    "input is too large" as a ContextOverflowError naming the item."""
    from .runtime import ContextOverflowError

    if not getattr(model.engine, "is_encoder", False):
        return
    limit = int(model.engine.max_seq_len)
    for i, ids in enumerate(encoded):
        if len(ids) > limit:
            raise ContextOverflowError(f"{name}[{i}]: input is too large: {len(ids)} tokens exceed the "
                                       f"model's context of {limit} tokens")


def embed(model: Any, texts: Union[str, Sequence[Any]], pooling: Optional[str] = None,
          normalize: bool = True) -> NDArray[np.float32]:
    """Embeddings of ``texts`` (a str, or a list of str or of token-id lists), shape
    (len(texts), n_embd) (one str: (n_embd,)); ``pooling`` None: the file's."""
    single = isinstance(texts, str)
    batch = [texts] if isinstance(texts, str) else list(texts)
    if pooling is None:
        pooling = file_pooling(model)
    if pooling not in POOLINGS:
        raise ValueError(f"pooling: expected one of {', '.join(POOLINGS)}, got {pooling!r}")
    width = int(getattr(model.engine, "n_embd", 0))
    if not width:
        raise NotImplementedError(f"{type(model.engine).__name__} does not expose hidden states")
    encoded = tokenize_inputs(model, batch)
    check_lengths(model, encoded)
    out = np.zeros((len(batch), width), dtype=np.float32)
    if not batch:
        return out
    n_ctx = max(len(ids) for ids in encoded)
    ctx = model.create_context(n_ctx=n_ctx)
    for i, ids in enumerate(encoded):
        ctx.restart()
        hidden = ctx.prefill(ids, hidden_states=True)
        if pooling == "mean":
            vec = hidden.mean(axis=0, dtype=np.float64)
        elif pooling == "last":
            vec = hidden[-1].astype(np.float64)
        else:
            vec = hidden[0].astype(np.float64)
        if normalize:
            norm = float(np.linalg.norm(vec))
            if norm > 0:
                vec = vec / norm
        out[i] = vec
    return out[0] if single else out


def rerank_tokens(model: Any, query: str, document: str) -> list[int]:
    """A (query, document) pair as llama-server's format_prompt_rerank builds it:
    [BOS] query [EOS if add_eos] [SEP if add_sep] document [EOS if add_eos], with the
    file's EOS, or SEP where it has none ([CLS] query [SEP] document for BERT)."""
    tok = model.tokenizer
    vocab = tok.vocab
    sep = getattr(tok, "sep_token_id", None)
    eos = vocab.eos_token_id if vocab.eos_token_id is not None else sep
    add_sep = bool(getattr(tok, "add_sep", False))
    ids = [vocab.bos_token_id] if vocab.add_bos and vocab.bos_token_id is not None else []
    ids += tok.encode(query, add_special=False)
    if vocab.add_eos and eos is not None:
        ids.append(eos)
    if add_sep and sep is not None:
        ids.append(sep)
    ids += tok.encode(document, add_special=False)
    if vocab.add_eos and eos is not None:
        ids.append(eos)
    return ids


def rerank(model: Any, query: str, documents: Sequence[str]) -> list[float]:
    """The relevance score of each document to ``query``, in the documents' order: the
    first output of the file's classification head on the pair (llama.cpp's rank
    pooling; raw, not squashed through a sigmoid, as llama-server reports it)."""
    engine = model.engine
    if not getattr(engine, "can_rerank", False):
        raise ValueError("this model does not rerank: a reranking file is an encoder with pooling_type rank "
                         "and a classification head (bge-reranker, ms-marco cross-encoders)")
    if not isinstance(query, str):
        raise TypeError(f"query: expected a str, got {type(query).__name__}")
    if isinstance(documents, str) or not all(isinstance(d, str) for d in documents):
        raise TypeError("documents: expected a list of str")
    encoded = [rerank_tokens(model, query, doc) for doc in documents]
    check_lengths(model, encoded, "documents")
    if not encoded:
        return []
    ctx = model.create_context(n_ctx=max(len(ids) for ids in encoded))
    scores = []
    for ids in encoded:
        ctx.restart()
        hidden = ctx.prefill(ids, hidden_states=True)
        scores.append(float(engine.classify(hidden)[0]))
    return scores
