"""gpt-oss (gpt-oss-20b, gpt-oss-120b): GGUF architecture ``gpt-oss``.

llama.cpp's src/models/openai-moe.cpp, as data in the transformer spec:

    x = embed(token)
    for each layer l:
        h = rmsnorm(x, attn_norm) ; q, k, v = h Wq + bq, h Wk + bk, h Wv + bv
        rope(q, k)                        (NEOX pairs, YaRN on every layer)
        a = attention(q, K, V)            (grouped-query; even layers see the last
                                           sliding_window positions; head h's learned
                                           sink logit joins its softmax's denominator)
        x += a Wo + bo
        h = rmsnorm(x, post_attention_norm)
        logits_r = h Wrouter + brouter    (32 or 128 experts)
        the expert_used_count experts e with the largest logits_r, weighted by the
        softmax of those logits alone ("softmax_weight"):
        x += sum_e w_e (swiglu_oai(h Wgate_e + bgate_e, h Wup_e + bup_e) Wdown_e + bdown_e)
    logits = rmsnorm(x, output_norm) Wout

swiglu_oai(g, u) = min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1), ggml's
with llama.cpp's constants.  YaRN is llama.cpp's (rope_scaling.py): its correction
dimensions are floored and ceiled although the HF config says ``"truncate": false``
(gpt-oss-20b: pairs 8 to 18 ramp instead of 8.09 to 17.4), so the logits are
llama.cpp's, not exactly transformers'.  Layers slide a window where llama.cpp's
``set_swa_pattern(2)`` says (layer l when l % 2 == 0) unless the file lists its own
``attention.sliding_window_pattern``.  The released files store the experts in
MXFP4, which the kernels multiply as they are.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from ..runtime import UnsupportedModelError, register_variant
from .gemma3 import sliding_layers
from .llama import Experts, LlamaShaped, llama_shaped

#: llama.cpp's load_swa_pattern(ml, 2): every other layer slides, the first one included
SWA_PERIOD = 2


def gpt_oss_spec(gguf_file: Any) -> LlamaShaped:
    shaped = llama_shaped(gguf_file, layout="neox", default_ctx=131072, experts=Experts(norm_weights=False))
    hp, spec = shaped.hparams, shaped.spec
    assert spec.moe is not None
    window = hp.integer("attention.sliding_window")
    is_global = sliding_layers(hp, spec.n_layers, SWA_PERIOD)
    # the sliding layers' RoPE base, if the file gives one (llama.cpp: rope.freq_base_swa,
    # the same YaRN otherwise); a different base would change YaRN's ramp too
    base = hp.number("rope.freq_base", 10000.0, positive=True)
    if hp.has("rope.freq_base_swa") and hp.number("rope.freq_base_swa", positive=True) != base:
        raise UnsupportedModelError(f"{hp.arch} file: a RoPE base of the sliding layers "
                                    f"({hp.key('rope.freq_base_swa')}) other than {hp.key('rope.freq_base')} "
                                    "is not implemented", [hp.key("rope.freq_base_swa")])
    moe = dataclasses.replace(spec.moe, gating="softmax_weight", router_bias=True, expert_biases=True)
    return shaped.replace(
        moe=moe, qkv_bias=True, out_bias=True, attn_sinks=True, activation="swiglu_oai",
        ffn_norm_tensor="post_attention_norm",
    ).with_layers(lambda i, layer: layer if is_global[i] else dataclasses.replace(layer, window=window))


@register_variant("gpt-oss")
def _gpt_oss(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return gpt_oss_spec(gguf_file).engine(gguf_file, n_threads)
