"""Ministral 3 (3B, 8B, 14B; Instruct and Reasoning): GGUF architecture ``mistral3``
(llama.cpp src/models/mistral3.cpp, conversion/mistral3.py's Ministral3Model).

A Llama (NORM RoPE: the converter is LlamaModel's, Q/K rows permuted; tied or
untied head) with two differences in its metadata:

* YaRN with the parameters llama.cpp's mistral3 reads: ``rope.scaling.yarn_beta_fast``,
  ``yarn_beta_slow`` and ``yarn_log_multiplier`` (HF's mscale_all_dim; the real
  files' 1.0 makes the magnitude 1), see rope_scaling.py;
* ``attention.temperature_scale`` (HF's llama_4_scaling_beta): after RoPE, q at
  position p is multiplied by 1 + scale * ln(floor(p / n_orig) + 1), n_orig the
  original YaRN context (``rope.scaling.original_context_length``, else the
  trained one): `TransformerSpec.attn_temp_scale`.

The vision tower is a separate mmproj file; a text file has no tensors of it.
llama.cpp's mistral3 also takes experts and optional biases on attn_output and the
FFN; no Ministral 3 has them, and a file with them is refused.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped
from .rope_scaling import FACTOR_TENSORS, MISTRAL3_YARN_KEYS


def mistral3_spec(gguf_file: Any) -> LlamaShaped:
    shaped = llama_shaped(gguf_file, rope_factors=FACTOR_TENSORS, yarn_keys=MISTRAL3_YARN_KEYS)
    hp, spec = shaped.hparams, shaped.spec
    temp_scale = hp.number("attention.temperature_scale", 0.0)
    if temp_scale == 0.0:
        return shaped
    # n_attn_temp_floor_scale = n_ctx_orig_yarn (mistral3.cpp load_arch_hparams)
    floor = hp.integer("rope.scaling.original_context_length", spec.max_seq_len)
    return shaped.replace(attn_temp_scale=temp_scale, attn_temp_floor=floor)


@register_variant("mistral3")
def _mistral3(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return mistral3_spec(gguf_file).engine(gguf_file, n_threads)
