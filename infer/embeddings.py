"""Text embeddings from a model's final hidden states (after the output norm, as
llama.cpp's ``llama-embedding`` reads them), pooled over each text's tokens.

* ``"mean"``: the average over every token (BOS included when the model adds one);
* ``"last"``: the last token's state (what decoder-only embedding models train);
* ``"cls"``: the first token's state.

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


def embed(model: Any, texts: Union[str, Sequence[Any]], pooling: str = "mean",
          normalize: bool = True) -> NDArray[np.float32]:
    """Embeddings of ``texts`` (a str, or a list of str or of token-id lists), shape
    (len(texts), n_embd) (one str: (n_embd,))."""
    single = isinstance(texts, str)
    batch = [texts] if isinstance(texts, str) else list(texts)
    if pooling not in POOLINGS:
        raise ValueError(f"pooling: expected one of {', '.join(POOLINGS)}, got {pooling!r}")
    width = int(getattr(model.engine, "n_embd", 0))
    if not width:
        raise NotImplementedError(f"{type(model.engine).__name__} does not expose hidden states")
    encoded = tokenize_inputs(model, batch)
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
