"""MiniCPM (MiniCPM-1B, MiniCPM-2B): GGUF architecture ``minicpm``
(llama.cpp src/models/minicpm.cpp, which runs Granite's graph).

Llama (RoPE on adjacent pairs: the converter permutes Q/K) with Granite's three
multipliers, which the converter computes from the checkpoint's muP settings:

    x = embed(token) * embedding_scale                        (scale_emb)
    for each layer:
        x += attention(rmsnorm(x)) * residual_scale           (scale_depth / sqrt(n_layers))
        x += SwiGLU(rmsnorm(x)) * residual_scale
    logits = rmsnorm(x) Wout / logit_scale                    (hidden_size / dim_model_base)

Older files without the keys get llama.cpp's defaults for the first two (12 and
1.4 / sqrt(n_layers)).  A file without ``logit_scale`` is refused: llama.cpp's
default for it (256 / n_embd, divided by) inverts the scaling its older graph
applied, so such a file's logits depend on the llama.cpp version.  RoPE runs on
every layer (``rope.scaling.finetuned`` is no switch here, unlike Granite);
LongRoPE's factors (``rope_factors_long`` / ``_short``) are read as for Phi-3.
The optional attention-output and FFN biases llama.cpp allows are refused as
unknown tensors, and a mixture of experts as an unread key.
"""
from __future__ import annotations

import math
from typing import Any, Optional

from ..runtime import UnsupportedModelError, register_variant
from .llama import LlamaShaped, llama_shaped
from .rope_scaling import FACTOR_TENSORS

DEFAULT_EMBEDDING_SCALE = 12.0
DEFAULT_SCALE_DEPTH = 1.4


def minicpm_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, default_ctx=4096, rope_factors=FACTOR_TENSORS)
    hp = base.hparams
    hp.raw("rope.scaling.finetuned", None)   # read and left off, as llama.cpp does
    if not hp.has("logit_scale"):
        raise UnsupportedModelError(
            f"minicpm file without {hp.key('logit_scale')}: llama.cpp's default for it differs between "
            "its versions; re-convert the model (the converter writes hidden_size / dim_model_base)",
            [hp.key("logit_scale")])
    residual = hp.number("residual_scale", DEFAULT_SCALE_DEPTH / math.sqrt(base.spec.n_layers))
    return base.replace(
        embd_scale=hp.number("embedding_scale", DEFAULT_EMBEDDING_SCALE),
        residual_scale=residual if residual else 1.0,   # llama.cpp: 0 means none
        logit_scale=1.0 / hp.number("logit_scale", positive=True))


@register_variant("minicpm")
def _minicpm(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return minicpm_spec(gguf_file).engine(gguf_file, n_threads)
