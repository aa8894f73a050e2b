"""Text embeddings from a model's final hidden states (after the output norm, as
llama.cpp's ``llama-embedding`` reads them), pooled over each text's tokens.

* ``"mean"``: the average over every token (BOS included when the model adds one);
* ``"last"``: the last token's state (what decoder-only embedding models train);
* ``"cls"``: the first token's state.

Each text is run on its own, in a fresh pass, so a text's embedding does not depend
on which other texts share the call.  ``normalize=True`` scales each to unit L2 norm.
"""
from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np
from numpy.typing import NDArray

POOLINGS = ("mean", "last", "cls")


def embed(model: Any, texts: Union[str, Sequence[str]], pooling: str = "mean",
          normalize: bool = True) -> NDArray[np.float32]:
    """Embeddings of ``texts``, shape (len(texts), n_embd) (one text: (n_embd,))."""
    single = isinstance(texts, str)
    batch = [texts] if isinstance(texts, str) else list(texts)
    if not all(isinstance(t, str) for t in batch):
        raise TypeError("texts: expected a str or a list of str")
    if pooling not in POOLINGS:
        raise ValueError(f"pooling: expected one of {', '.join(POOLINGS)}, got {pooling!r}")
    width = int(getattr(model.engine, "n_embd", 0))
    if not width:
        raise NotImplementedError(f"{type(model.engine).__name__} does not expose hidden states")
    encoded = [model.tokenizer.encode(t, add_special=True) for t in batch]
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"texts[{i}]: is empty and the model adds no BOS token")
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
