"""Tiny random-weight GGUF files, one per architecture family, as llama.cpp's
converter names and shapes them.

They are written with the `gguf` package's writer (not infer's), from facts of
llama.cpp's src/llama-arch.cpp, src/models/<arch>.cpp and gguf-py:

* A weight of shape (rows=out, cols=in) is stored with GGUF dims (in, out); the
  numpy array handed to the writer is (out, in).
* `llama`, `smollm3`, `granite` use NORM RoPE (pairs 2i, 2i+1): the converter
  permutes the rows of Q and K from HF's half-split layout.  Random weights are
  drawn directly in the GGUF layout, so no permutation is written here.
  `qwen2`, `qwen3`, `phi3`, `gemma2` use NEOX RoPE (pairs i, i + n_rot/2) and
  are stored unpermuted.
* Tied heads: no `output.weight`, the head is `token_embd.weight` (gemma2 always).
* Norm weights and biases are F32; matrices are F16.

Each file is small (d=256, 2-4 layers; exaone4-swa d=64, 64 layers; vocab 512, a byte-level BPE vocabulary
that infer's tokenizer and llama.cpp both load) and uses small rope contexts and
windows so that a 640-token prompt crosses them.  ``TINY`` lists them, and
``DENSE`` the dense families added later (olmo2, exaone4, exaone, ernie4_5,
gemma, hunyuan-dense: no pre-norms, q/k norms over the whole projection or after
RoPE), recorded into a data file of their own; ``GEMMA4`` the Gemma 4 files
(`write_gemma4`: PLE, shared-KV layers, per-layer head sizes; tests/test_gemma4.py,
llama_cpp_gemma4.npz); ``MISTRAL3`` Ministral 3 with YaRN and its attention
temperature (tests/test_mistral3.py, llama_cpp_mistral3.npz); ``DENSE2`` glm4, cohere2,
minicpm, internlm2 and stablelm (LayerNorms, parallel blocks, sandwich norms;
llama_cpp_dense2.npz); ``FAMILIES3`` phi2, starcoder2, nemotron_h and nemotron_h_moe
(`write_nemotron_h`; tests/test_families3.py, llama_cpp_families3.npz); ``FALCON_H1`` Falcon-H1
(`write_falcon_h1` from an HF-shaped checkpoint with its muP multipliers folded as the converter
does; tests/test_falcon_h1.py, llama_cpp_falconh1.npz); ``ALL`` is all of them.
``write(name, path)`` writes one, deterministically (the seeds are fixed; the
sha256 of each file is recorded beside llama.cpp's logits so a change shows).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

VOCAB = 512
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: the teacher-forced prompt of the llama.cpp recordings: past 512 tokens, past the
#: gemma2 window (128), past every rope "original context" (256)
PROMPT_LEN = 640
#: the mixtures of experts' prompt length and router logit std (a shorter prompt
#: has fewer near-ties in its choices of experts: tests/test_moe.py)
MOE_PROMPT_LEN = 200
MOE_ROUTER_GAIN = 4.0


@dataclass(frozen=True)
class Gemma4Shape:
    """What a tiny gemma4 file has beyond `Tiny` (llama.cpp src/models/gemma4.cpp and
    conversion/gemma.py's Gemma4Model): per layer whether it slides a window, its KV
    heads and FFN width; the full layers' head size and proportional RoPE (the
    converter's rope_freqs: 1 on the turning pairs, 1e30 on the others)."""

    sliding: tuple
    kv_heads: tuple
    ffn: tuple
    head_dim_full: int = 128
    #: pairs of a full layer's head that turn (partial_rotary_factor * head_dim / 2)
    turning_pairs: int = 16
    shared_kv_layers: int = 0
    #: per-layer embedding width (0: no PLE, the 31B's shape)
    per_layer: int = 0
    #: full-attention layers without attn_v (V = K: the 31B's attention_k_eq_v)
    v_from_k: bool = False
    window: int = 128
    softcap: float = 8.0
    swa_base: float = 10000.0


@dataclass(frozen=True)
class Qwen35Shape:
    """What a tiny qwen35 / qwen35moe file has beyond `Tiny` (llama.cpp
    src/models/qwen35.cpp and conversion/qwen.py's Qwen3_5TextModel): the gated
    DeltaNet layers' sizes (ssm.*), which layers are recurrent (by
    full_attention_interval, or the attention.recurrent_layers flags if given),
    the partial rotary width and the IMROPE sections."""

    conv_kernel: int = 4
    d_state: int = 32
    n_k_heads: int = 2
    n_v_heads: int = 4
    full_attention_interval: int = 2
    recurrent_layers: Optional[tuple] = None
    rope_dims: int = 16
    sections: tuple = (3, 3, 2, 0)


@dataclass(frozen=True)
class Mamba2Shape:
    """What a tiny granitehybrid file has beyond `Tiny` (llama.cpp
    src/models/granite-hybrid.cpp, conversion/granite.py's GraniteHybridModel): the
    Mamba2 layers' sizes (ssm.*; llama.cpp wants d_inner = 2 * dim), which layers are
    attention (the others have head_count_kv 0), and Granite's multipliers."""

    conv_kernel: int = 4
    d_state: int = 32
    n_heads: int = 8
    n_groups: int = 2
    attention_layers: tuple = (2,)
    embedding_scale: float = 12.0
    residual_scale: float = 0.22
    attention_scale: float = 0.015625
    logit_scale: float = 8.0
    #: nemotron_h: the MLP-only layers (feed_forward_length > 0 there, 0 elsewhere)
    mlp_layers: tuple = ()


@dataclass(frozen=True)
class FalconH1Shape:
    """What a tiny falcon-h1 file has beyond `Tiny` (HF's FalconH1Config): the Mamba2
    mixer's sizes (mamba_d_ssm need not be 2 * dim), whether it has the gated norm
    (mamba_rms_norm), and the muP multipliers conversion/falcon_h1.py folds into the
    weights (values of the released configs' magnitudes)."""

    conv_kernel: int = 4
    d_state: int = 16
    d_inner: int = 384
    mamba_head_dim: int = 64
    n_groups: int = 2
    rms_norm: bool = True
    embedding_multiplier: float = 5.66
    lm_head_multiplier: float = 0.039
    attention_in_multiplier: float = 1.5
    attention_out_multiplier: float = 0.94
    key_multiplier: float = 0.39
    ssm_in_multiplier: float = 1.25
    ssm_out_multiplier: float = 0.24
    mlp_multipliers: tuple = (0.88, 0.59)
    #: z, x, B, C and dt rows of in_proj
    ssm_multipliers: tuple = (0.35, 0.25, 0.35, 0.5, 0.35)


@dataclass(frozen=True)
class Tiny:
    arch: str
    seed: int
    n_layer: int = 4
    dim: int = 256
    n_head: int = 4
    n_kv_head: int = 2
    head_dim: int = 64
    ffn: int = 512
    tied: bool = True
    n_ctx_train: int = 1024
    rope_base: float = 10000.0
    eps: float = 1e-5
    #: extra metadata (key without the "<arch>." prefix -> value)
    extra: Dict[str, Any] = field(default_factory=dict)
    qkv_bias: bool = False
    qk_norm: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    post_norms: bool = False
    llama3_rope: bool = False
    longrope: bool = False
    rope_dims: Optional[int] = None
    pre: str = "default"
    #: std of the logits before any final scaling (granite divides by logit_scale)
    head_gain: float = 3.0
    #: n_ctx for the llama.cpp recording (phi3's LongRoPE picks factors by it)
    n_ctx: int = 1024
    prompt_len: int = PROMPT_LEN
    #: attn_norm / ffn_norm before each block half (OLMo 2, EXAONE 4: none)
    pre_norms: bool = True
    #: q/k norms over the whole projection (q_dim / kv_dim weights; OLMo 2), not per head
    qk_norm_all: bool = False
    #: LFM2: the layers that are gated short convolutions (head_count_kv 0 there),
    #: of width ``conv_width`` (``shortconv.l_cache``)
    conv_layers: Tuple[int, ...] = ()
    conv_width: int = 3
    #: a mixture of experts in every layer: n_expert experts of width ffn (the
    #: arch's metadata keys are the caller's, in extra), n_expert_used used
    n_expert: int = 0
    #: std of the router logits (a large one keeps the top-k clear of near-ties)
    router_gain: float = 1.0
    #: the experts' tensor type: "f16", "q8_0" (gguf.quants.quantize) or "q4_k"
    #: (infer's quantizer: the gguf package has none for it)
    expert_type: str = "f16"
    #: a shared expert of this width (qwen2moe's ffn_*_shexp and its gate vector)
    shared_ffn: int = 0
    #: the prompt's seed (None: 1000 + seed); chosen for the mixtures of experts so
    #: that every position's choice of experts is clear (tests/test_moe.py)
    prompt_seed: Optional[int] = None
    gemma4: Optional[Gemma4Shape] = None
    qwen35: Optional[Qwen35Shape] = None
    #: lfm2moe: the leading layers with the dense FFN of width ffn, the experts'
    #: width, and the std of the experts' selection biases (exp_probs_b)
    dense_leading: int = 0
    expert_ffn: int = 0
    expert_bias: float = 0.0
    #: LayerNorm (weight, no bias) with attention.layer_norm_epsilon (Cohere), not RMSNorm
    layer_norm: bool = False
    #: parallel blocks: no ffn_norm (Cohere 2)
    parallel: bool = False
    #: the LayerNorms' biases: attn_norm.bias, ffn_norm.bias, output_norm.bias (StableLM)
    norm_bias: bool = False
    mamba2: Optional[Mamba2Shape] = None
    #: attn_output.bias, ffn_up.bias and ffn_down.bias, output.bias (Phi-2, StarCoder2)
    out_bias: bool = False
    ffn_bias: bool = False
    output_bias: bool = False
    #: deepseek2's multi-head latent attention (`write_deepseek2`)
    mla: Optional["MlaShape"] = None
    falcon_h1: Optional[FalconH1Shape] = None


@dataclass(frozen=True)
class MlaShape:
    """A tiny deepseek2's attention and experts (conversion/deepseek.py's keys): the
    latent's rank, each head's nope / rope / value sizes, a low-rank q (0: attn_q),
    the leading dense layers, experts of width ``Tiny.expert_ffn`` (``Tiny.n_expert``
    of them, ``n_used`` used) with ``n_shared`` shared experts, the gating function
    (None: the key left out, as in V2 files), expert groups (0: none) and whether the
    file has exp_probs_b selection biases of std ``Tiny.expert_bias``."""

    kv_lora: int = 64
    nope: int = 32
    rope: int = 16
    v_dim: int = 48
    q_lora: int = 0
    n_dense: int = 1
    n_used: int = 2
    n_shared: int = 1
    gating: Optional[int] = None
    weights_norm: bool = False
    weights_scale: Optional[float] = None
    groups: int = 0
    groups_used: int = 0
    selection_bias: bool = False
    #: the older conversions' layout: HF's kv_b_proj as one attn_kv_b, key_length and
    #: value_length a decompressed head's, a KV head per head, no _mla lengths
    legacy: bool = False


TINY: Dict[str, Tiny] = {t.arch if not n else n: t for n, t in [
    # Plain Llama (SmolLM2's shape): the baseline of bench/families.py.
    ("llama", Tiny("llama", 100, pre="smollm")),
    ("llama3", Tiny("llama", 101, tied=False, llama3_rope=True, pre="llama-bpe",
                    extra={"rope.freq_base": 500000.0, "vocab_size": VOCAB})),
    ("llama-linear", Tiny("llama", 102, n_layer=2, n_kv_head=4,
                          extra={"rope.scaling.type": "linear", "rope.scaling.factor": 4.0})),
    ("qwen2", Tiny("qwen2", 103, qkv_bias=True, eps=1e-6, pre="qwen2",
                   extra={"rope.freq_base": 1000000.0})),
    ("qwen2-yarn", Tiny("qwen2", 104, n_layer=3, qkv_bias=True, tied=False, pre="qwen2",
                        extra={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                               "rope.scaling.original_context_length": 256})),
    # Qwen3: 8 heads of 64 = 512 != d (key_length given), per-head q/k RMSNorm.
    ("qwen3", Tiny("qwen3", 105, n_head=8, qk_norm=True, eps=1e-6, pre="qwen2",
                   extra={"attention.key_length": 64, "attention.value_length": 64,
                          "rope.freq_base": 1000000.0})),
    # Phi-3/4-mini: fused qkv and gate|up, partial rotary (Phi-4-mini: 3/4 of the
    # head), LongRoPE factors chosen by n_ctx against the original context.
    ("phi3", Tiny("phi3", 106, tied=False, fused_qkv=True, fused_gate_up=True, longrope=True,
                  rope_dims=48, n_ctx=1024,
                  extra={"rope.scaling.original_context_length": 256,
                         "attention.sliding_window": 0})),
    ("phi3-short", Tiny("phi3", 106, tied=False, fused_qkv=True, fused_gate_up=True,
                        longrope=True, rope_dims=48, n_ctx=256, prompt_len=250,
                        extra={"rope.scaling.original_context_length": 256,
                               "attention.sliding_window": 0})),
    # Gemma 2: window 128 on even layers, soft-capping small enough to bite.
    ("gemma2", Tiny("gemma2", 107, post_norms=True, eps=1e-6,
                    extra={"attention.key_length": 64, "attention.value_length": 64,
                           "attention.sliding_window": 128,
                           "attn_logit_softcapping": 3.0, "final_logit_softcapping": 8.0})),
    # SmolLM3: NoPE on every 4th layer (llama.cpp: n_no_rope_layer_step = 4).
    ("smollm3", Tiny("smollm3", 108, extra={"rope.freq_base": 2000000.0})),
    ("granite", Tiny("granite", 109, tied=True, head_gain=24.0,
                     extra={"embedding_scale": 12.0, "residual_scale": 0.22,
                            "attention.scale": 0.03125, "logit_scale": 8.0})),
    # Mixtures of experts (tests/test_moe.py): 16 experts of width 128, 4 used.
    # The prompts (prompt_seed) are those of 60 seeds whose reference routing has
    # the largest smallest gap between the last expert chosen and the next.
    ("qwen3moe", Tiny("qwen3moe", 110, n_head=8, qk_norm=True, eps=1e-6, pre="qwen2", ffn=128,
                      n_expert=16, router_gain=MOE_ROUTER_GAIN, prompt_len=MOE_PROMPT_LEN, prompt_seed=34,
                      extra={"attention.key_length": 64, "attention.value_length": 64,
                             "rope.freq_base": 1000000.0, "expert_count": 16, "expert_used_count": 4,
                             "expert_feed_forward_length": 128})),
    # Quantized experts: Q8_0 (width 128) and Q4_K (width 256: whole 256-blocks
    # along the down rows), 8 experts, 2 used.
    ("qwen3moe-q8_0", Tiny("qwen3moe", 111, n_layer=2, n_head=8, qk_norm=True, eps=1e-6, pre="qwen2",
                           ffn=128, n_expert=8, router_gain=MOE_ROUTER_GAIN, expert_type="q8_0",
                           prompt_len=MOE_PROMPT_LEN, prompt_seed=4,
                           extra={"attention.key_length": 64, "attention.value_length": 64,
                                  "expert_count": 8, "expert_used_count": 2,
                                  "expert_feed_forward_length": 128})),
    ("qwen3moe-q4_k", Tiny("qwen3moe", 112, n_layer=2, n_head=8, qk_norm=True, eps=1e-6, pre="qwen2",
                           ffn=256, n_expert=8, router_gain=MOE_ROUTER_GAIN, expert_type="q4_k",
                           prompt_len=MOE_PROMPT_LEN, prompt_seed=23,
                           extra={"attention.key_length": 64, "attention.value_length": 64,
                                  "expert_count": 8, "expert_used_count": 2,
                                  "expert_feed_forward_length": 256})),
    ("granitemoe", Tiny("granitemoe", 113, tied=True, head_gain=24.0, ffn=128, n_expert=8,
                        router_gain=MOE_ROUTER_GAIN, prompt_len=MOE_PROMPT_LEN, prompt_seed=31,
                        extra={"embedding_scale": 0.25, "residual_scale": 0.8,
                               "attention.scale": 0.03125, "logit_scale": 8.0,
                               "expert_count": 8, "expert_used_count": 2})),
    # OLMoE: q/k norms over all heads, weights not renormalised; 16 experts, 4 used.
    ("olmoe", Tiny("olmoe", 114, n_kv_head=4, qk_norm=True, qk_norm_all=True, tied=False, ffn=128,
                   n_expert=16, router_gain=MOE_ROUTER_GAIN, prompt_len=MOE_PROMPT_LEN, prompt_seed=52,
                   extra={"expert_count": 16, "expert_used_count": 4})),
    # Qwen 2 MoE: q/k/v biases, weights not renormalised, a sigmoid-gated shared
    # expert of width 256 beside 8 experts of width 128, 2 used.
    ("qwen2moe", Tiny("qwen2moe", 115, qkv_bias=True, eps=1e-6, pre="qwen2", tied=False, ffn=128,
                      n_expert=8, shared_ffn=256, router_gain=MOE_ROUTER_GAIN, prompt_len=MOE_PROMPT_LEN,
                      prompt_seed=50,
                      extra={"rope.freq_base": 1000000.0, "expert_count": 8, "expert_used_count": 2,
                             "expert_feed_forward_length": 128, "expert_shared_feed_forward_length": 256})),
]}

#: The dense families of tests/test_dense_families.py, recorded into
#: tests/data/llama_cpp_dense.npz (kept apart from TINY's llama_cpp_families.npz).
DENSE: Dict[str, Tiny] = {n: t for n, t in [
    # OLMo 2: no pre-norms, post norms, q/k RMSNorm over all heads at once.
    ("olmo2", Tiny("olmo2", 110, tied=False, pre_norms=False, qk_norm=True, qk_norm_all=True,
                   post_norms=True, eps=1e-6, pre="dbrx")),
    # OLMo 3 (same GGUF architecture): layers 0-2 slide a 128 window with unscaled
    # RoPE, layer 3 attends globally with YaRN.
    ("olmo3", Tiny("olmo2", 111, tied=False, pre_norms=False, qk_norm=True, qk_norm_all=True,
                   post_norms=True, eps=1e-6, pre="dbrx",
                   extra={"attention.sliding_window": 128, "rope.scaling.type": "yarn",
                          "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 256})),
    # attention.sliding_window_pattern 0: every layer slides (llama.cpp's set_swa_pattern).
    ("olmo3-all-sliding", Tiny("olmo2", 118, n_layer=2, tied=False, pre_norms=False, qk_norm=True,
                               qk_norm_all=True, post_norms=True, eps=1e-6, pre="dbrx",
                               extra={"attention.sliding_window": 128, "attention.sliding_window_pattern": 0})),
    # EXAONE 4.0 1.2B's shape: no pre-norms, post norms, per-head q/k norms, tied.
    ("exaone4", Tiny("exaone4", 112, pre_norms=False, qk_norm=True, post_norms=True, pre="exaone4")),
    # EXAONE 4.0 32B's 64 layers (llama.cpp turns windows on for that count only), tiny:
    # windows of 128 on 3 layers of 4, NoPE on the 4th; llama3 rope_freqs.
    ("exaone4-swa", Tiny("exaone4", 113, n_layer=64, dim=64, n_head=2, n_kv_head=1, head_dim=32, ffn=128,
                         pre_norms=False, qk_norm=True, post_norms=True, llama3_rope=True, pre="exaone4",
                         extra={"attention.sliding_window": 128})),
    # EXAONE 3.5: Llama with NEOX RoPE and llama3 rope_freqs, untied.
    ("exaone", Tiny("exaone", 114, tied=False, llama3_rope=True, pre="exaone",
                    extra={"rope.freq_base": 1000000.0})),
    # ERNIE 4.5 0.3B: Llama (NORM RoPE), tied.
    ("ernie4_5", Tiny("ernie4_5", 115, eps=1e-6, extra={"rope.freq_base": 500000.0})),
    # Gemma 1: sqrt(d) embedding scale, GeGLU, one KV head, 8 heads of 64 = 512 != d.
    ("gemma", Tiny("gemma", 116, n_head=8, n_kv_head=1, eps=1e-6,
                   extra={"attention.key_length": 64, "attention.value_length": 64})),
    # Hunyuan dense: per-head q/k norms after RoPE; NTK alpha on the base.
    ("hunyuan-dense", Tiny("hunyuan-dense", 117, qk_norm=True, pre="hunyuan-dense",
                           extra={"rope.scaling.alpha": 4.0})),
]}
#: texts llama.cpp tokenized with each DENSE file's vocabulary (its pre-tokenizer
#: name), recorded beside its logits: words, digits, punctuation runs, line breaks,
#: CJK, kana, hangul, accents, emoji
TOKENIZE_TEXTS = (
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "Numbers 1234567 and 3.14159, x=42; y+=7 -- done?!",
    "I'm sure they'll say it's 'fine' -- won't they?\n\n  indented\tline\r\nCRLF",
    "汉字和かなカナ、한국어 mixed with English 한글123",
    "Ünïcödé naïve café — “quotes” … ¿qué? ¡sí! 🙂👍🏽",
    "def f(x):\n    return [a_b, c-d] # ok   \n\n\n",
    "   leading and trailing spaces   ",
    "6789 12345 6789012 345,345 the1234 abc12 12.345 why?how? A,B;C",
    "word.The quick,brown(fox) THE'S the's   \n   the  \n\nthe",
)
#: LFM2's files (tests/test_lfm2.py), recorded into tests/data/llama_cpp_lfm2.npz
LFM2: Dict[str, Tiny] = {n: t for n, t in [
    # 6 layers, shortconv (width 3) but for attention at 2 and 5 as in LFM2-1.2B's
    # pattern; q/k norms, NEOX RoPE, token_embd_norm as the final norm.
    ("lfm2", Tiny("lfm2", 110, n_layer=6, qk_norm=True, conv_layers=(0, 1, 3, 4), pre="lfm2",
                  extra={"rope.freq_base": 1000000.0, "vocab_size": VOCAB})),
    # ... and with a sliding window (llama.cpp: every attention layer), an untied head
    # and a conv of width 4.
    ("lfm2-swa", Tiny("lfm2", 111, n_layer=4, qk_norm=True, conv_layers=(0, 2), conv_width=4, tied=False,
                      pre="lfm2", extra={"attention.sliding_window": 128})),
]}


#: Gemma 4 (tests/test_gemma4.py; recorded into llama_cpp_gemma4.npz): E2B's shape
#: (PLE, sliding layers of head size 64 and full ones of 128 with one KV head,
#: the last two layers reading layers 1 and 2's caches with double-wide FFNs) and
#: the 31B's (no PLE, no shared KV, V = K on the full layers).
GEMMA4: Dict[str, Tiny] = {
    "gemma4-e2b": Tiny("gemma4", 110, n_layer=5, head_dim=64, eps=1e-6, rope_base=1000000.0,
                       gemma4=Gemma4Shape(sliding=(True, True, False, True, False), kv_heads=(2, 2, 1, 2, 1),
                                          ffn=(512, 512, 512, 1024, 1024), shared_kv_layers=2,
                                          per_layer=32)),
    "gemma4-31b": Tiny("gemma4", 111, n_layer=4, head_dim=64, eps=1e-6, rope_base=1000000.0,
                       gemma4=Gemma4Shape(sliding=(True, False, True, False), kv_heads=(2, 1, 2, 1),
                                          ffn=(512,) * 4, v_from_k=True)),
}
#: LFM2-MoE (tests/test_lfm2moe.py; recorded into llama_cpp_lfm2moe.npz): LFM2-8B-A1B's
#: shape in small: shortconv layers but for attention at 2, the first layer's FFN
#: dense (of 512), then 8 experts of 128 with 2 used, sigmoid-gated, chosen with
#: selection biases that change many choices; an untied head.  The prompt's seed
#: keeps every choice of experts 0.002 from a tie in sigmoid + bias (the best of 60).
LFM2MOE: Dict[str, Tiny] = {
    "lfm2moe": Tiny("lfm2moe", 120, n_layer=4, qk_norm=True, conv_layers=(0, 1, 3), pre="lfm2", tied=False,
                    n_expert=8, dense_leading=1, expert_ffn=128, expert_bias=0.3, router_gain=2.0,
                    prompt_len=128, prompt_seed=46, extra={"rope.freq_base": 1000000.0, "vocab_size": VOCAB}),
}
#: Arcee (AFM-4.5B's shape in small: Llama with a ReLU² FFN without a gate, llama3 RoPE
#: factors, an untied head) and Apertus (below); tests/test_families.py's, recorded into
#: llama_cpp_lfm2moe.npz
ARCEE: Dict[str, Tiny] = {
    "arcee": Tiny("arcee", 121, tied=False, llama3_rope=True, prompt_len=256,
                  extra={"rope.freq_base": 500000.0}),
}
#: Apertus (tests/test_arcee_apertus.py): xIELU FFNs without a gate, their parameters
#: different in every layer (HF initialises alpha_p = alpha_n = 0.8, beta = 0.5, eps =
#: -1e-6; these are trained-looking raw values, before the softplus), per-head q/k norms,
#: NEOX RoPE, untied head
XIELU = {"xielu.alpha_n": [0.1, 0.9, -0.4, 1.6], "xielu.alpha_p": [0.3, -0.5, 1.2, 0.0],
         "xielu.beta": [0.5, 0.4, 0.6, 0.5], "xielu.eps": [-1e-6, -1e-6, -0.5, -1e-6]}
ARCEE["apertus"] = Tiny("apertus", 122, tied=False, qk_norm=True, prompt_len=256,
                        extra={"rope.freq_base": 500000.0})
#: Ministral 3 (tests/test_mistral3.py, llama_cpp_mistral3.npz) and a file of another
#: family carrying every YaRN key (OLMo 3's converter output).
MISTRAL3: Dict[str, Tiny] = {n: t for n, t in [
    # Ministral-3-3B's shape (NORM RoPE, tied) with YaRN over an original context of
    # 128 (factor 16, as the real 16384 -> 262144) and the attention temperature
    # stepping every 128 positions; beta_fast 8 / beta_slow 0.5 put the ramp on
    # pairs 3..13 of 32 (the defaults 32 / 1: 0..11), the log multiplier 1.0 (the
    # real files') makes the magnitude 1 (without it: 1 + 0.1 ln 16).
    ("mistral3", Tiny("mistral3", 120, n_layer=3, n_ctx_train=2048, pre="tekken",
                      extra={"rope.freq_base": 10000.0, "rope.scaling.type": "yarn",
                             "rope.scaling.factor": 16.0, "rope.scaling.original_context_length": 128,
                             "rope.scaling.yarn_beta_fast": 8.0, "rope.scaling.yarn_beta_slow": 0.5,
                             "rope.scaling.yarn_log_multiplier": 1.0,
                             "attention.temperature_scale": 0.2})),
    # the converter's five YaRN keys at the values llama.cpp's olmo2 uses in their
    # place (it reads none of them): OLMo-3's attention_factor is 0.1 ln(factor) + 1
    ("olmo3-yarn-keys", Tiny("olmo2", 111, tied=False, pre_norms=False, qk_norm=True, qk_norm_all=True,
                             post_norms=True, eps=1e-6, pre="dbrx",
                             extra={"attention.sliding_window": 128, "rope.scaling.type": "yarn",
                                    "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 256,
                                    "rope.scaling.yarn_ext_factor": 1.0,
                                    "rope.scaling.yarn_attn_factor": 0.1 * math.log(4.0) + 1.0,
                                    "rope.scaling.yarn_beta_fast": 32.0, "rope.scaling.yarn_beta_slow": 1.0,
                                    "rope.scaling.yarn_log_multiplier": 0.0})),
]}
#: Qwen3.5's files (tests/test_qwen35.py, `write_qwen35`), recorded into
#: tests/data/llama_cpp_qwen35.npz: DeltaNet layers at 0 and 2 (full_attention_interval
#: 2), attention at 1 and 3; 4 value heads over 2 key heads of 32; the MoE file marks
#: its layers with attention.recurrent_layers and has a sigmoid-gated shared expert
QWEN35: Dict[str, Tiny] = {n: t for n, t in [
    ("qwen35", Tiny("qwen35", 120, n_layer=4, qk_norm=True, eps=1e-6, pre="qwen2",
                    extra={"attention.key_length": 64, "attention.value_length": 64,
                           "rope.freq_base": 1000000.0}, qwen35=Qwen35Shape())),
    ("qwen35moe", Tiny("qwen35moe", 121, n_layer=3, qk_norm=True, eps=1e-6, pre="qwen2", tied=False, ffn=128,
                       n_expert=8, shared_ffn=256, router_gain=MOE_ROUTER_GAIN, prompt_len=MOE_PROMPT_LEN,
                       extra={"attention.key_length": 64, "attention.value_length": 64,
                              "rope.freq_base": 1000000.0, "expert_count": 8, "expert_used_count": 2,
                              "expert_feed_forward_length": 128, "expert_shared_feed_forward_length": 256},
                       qwen35=Qwen35Shape(recurrent_layers=(True, False, True)))),
]}

#: gpt-oss (tests/test_gptoss.py, llama_cpp_gptoss.npz; `write_gptoss`): q_dim 256 != dim 192
#: (head_dim 64 as the real ones), a window of 32 on the even layers, YaRN, 8 experts of
#: width 512 (so that the fused step splits long attention spans), 2 used
GPTOSS_WINDOW = 32
#: a short prompt and a strong router keep every choice of experts clear of a near-tie
GPTOSS_PROMPT_LEN = 96
GPTOSS_ROUTER_GAIN = 8.0
GPTOSS: Dict[str, Tiny] = {n: t for n, t in [
    ("gpt-oss", Tiny("gpt-oss", 120, dim=192, n_head=4, n_kv_head=2, head_dim=64, ffn=512, tied=False,
                     rope_base=150000.0, n_expert=8, router_gain=GPTOSS_ROUTER_GAIN, prompt_len=GPTOSS_PROMPT_LEN,
                     prompt_seed=19,
                     extra={"expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 512,
                            "attention.key_length": 64, "attention.value_length": 64,
                            "attention.sliding_window": GPTOSS_WINDOW, "rope.scaling.type": "yarn",
                            "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 256})),
    ("gpt-oss-q8_0", Tiny("gpt-oss", 121, n_layer=2, dim=192, n_head=4, n_kv_head=2, head_dim=64, ffn=512,
                          tied=False, rope_base=150000.0, n_expert=8, router_gain=GPTOSS_ROUTER_GAIN,
                          expert_type="q8_0", prompt_len=GPTOSS_PROMPT_LEN, prompt_seed=25,
                          extra={"expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 512,
                                 "attention.key_length": 64, "attention.value_length": 64,
                                 "attention.sliding_window": GPTOSS_WINDOW, "rope.scaling.type": "yarn",
                                 "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 256})),
]}
#: the released files' expert format (the gguf package quantizes it)
GPTOSS["gpt-oss-mxfp4"] = replace(GPTOSS["gpt-oss-q8_0"], seed=122, expert_type="mxfp4", prompt_seed=0)
#: Granite 4.0-H's files (tests/test_granite_hybrid.py, `write_granite_hybrid`), recorded
#: into tests/data/llama_cpp_mamba2.npz: Mamba2 layers at 0, 1 and 3, attention (no
#: RoPE) at 2; 8 SSM heads of 64 in 2 groups of state 32; a dense SwiGLU FFN
GRANITE_HYBRID: Dict[str, Tiny] = {
    "granitehybrid": Tiny("granitehybrid", 130, n_layer=4, pre="qwen2", prompt_len=256, head_gain=24.0, tied=False,
                          mamba2=Mamba2Shape()),
    # h-tiny's shape: every FFN 8 experts of 128 (2 used) and a shared MLP of 256 without a gate
    "granitehybrid-moe": Tiny("granitehybrid", 131, n_layer=3, pre="qwen2", prompt_len=MOE_PROMPT_LEN,
                              head_gain=24.0, tied=False, ffn=128, n_expert=8, shared_ffn=256,
                              router_gain=MOE_ROUTER_GAIN, extra={"expert_count": 8, "expert_used_count": 2},
                              mamba2=Mamba2Shape(attention_layers=(1,))),
}

#: qwen3moe-q4_k's file with its experts in MXFP4 (quantized by the gguf package), as
#: llama-quantize's MXFP4_MOE writes them (tests/test_mxfp4_moe.py, llama_cpp_mxfp4.npz)
MXFP4: Dict[str, Tiny] = {"qwen3moe-mxfp4": replace(TINY["qwen3moe-q4_k"], expert_type="mxfp4")}

#: The dense families of tests/test_dense_families2.py (tests/test_families.py runs them
#: too), recorded into tests/data/llama_cpp_dense2.npz.  Shorter prompts (300: past
#: every window) keep the tests lean.
DENSE2: Dict[str, Tiny] = {n: t for n, t in [
    # GLM-4-0414: sandwich norms, fused gate|up, q/k/v biases, RoPE on adjacent pairs of
    # half of each head, an output matrix.
    ("glm4", Tiny("glm4", 120, tied=False, qkv_bias=True, fused_gate_up=True, post_norms=True,
                  rope_dims=32, pre="glm4", prompt_len=300, extra={"rope.freq_base": 500000.0})),
    # Command R7B: LayerNorms, parallel blocks, windows of 128 with RoPE on layers 0-2,
    # layer 3 global without RoPE, logits times 0.5, tied head.
    ("cohere2", Tiny("cohere2", 121, layer_norm=True, parallel=True, pre="command-r", prompt_len=300,
                     head_gain=6.0, extra={"attention.sliding_window": 128, "logit_scale": 0.5})),
    # MiniCPM: Granite's multipliers (scale_emb 2, smaller than the 2B's 12 so that the blocks
    # still move the tiny model's residual stream; scale_depth 1.4 over 4 layers,
    # hidden 256 / dim_model_base 64), untied.
    ("minicpm", Tiny("minicpm", 122, tied=False, head_gain=12.0, prompt_len=300,
                     extra={"embedding_scale": 2.0, "residual_scale": 0.7, "logit_scale": 4.0})),
    # InternLM2: Llama with an output matrix, 8 heads over 2 KV heads, base 1e6.
    ("internlm2", Tiny("internlm2", 123, tied=False, n_head=8, n_kv_head=2, head_dim=32, prompt_len=300,
                       extra={"rope.freq_base": 1000000.0})),
    # StableLM 2 1.6B: LayerNorms with biases, q/k/v biases, NEOX RoPE over a quarter
    # of each head, untied; the converter's use_parallel_residual (false).
    ("stablelm", Tiny("stablelm", 124, tied=False, layer_norm=True, norm_bias=True, qkv_bias=True,
                      rope_dims=16, prompt_len=300, extra={"use_parallel_residual": False})),
]}
#: The families of tests/test_families3.py, recorded into tests/data/llama_cpp_families3.npz:
#: Phi-2 and StarCoder2 (LayerNorms with biases, GELU FFNs without a gate, biases on every
#: projection), Nemotron-H and Nemotron 3 Nano (single-half layers, relu² experts).  Short
#: prompts (no file has a window) keep the tests lean.
FAMILIES3: Dict[str, Tiny] = {n: t for n, t in [
    # Phi-2: parallel blocks, one LayerNorm, NEOX RoPE over 32 of 64 (2.7B: 32 of 80), 4 heads
    # of 64 without GQA, q/k/v/o and FFN biases, an output matrix and bias.
    ("phi2", Tiny("phi2", 140, n_kv_head=4, tied=False, layer_norm=True, norm_bias=True, parallel=True,
                  qkv_bias=True, rope_dims=32, out_bias=True, ffn_bias=True, output_bias=True, prompt_len=96)),
    # the older conversions' fused attn_qkv and its one bias
    ("phi2-qkv", Tiny("phi2", 141, n_layer=2, n_kv_head=4, tied=False, layer_norm=True, norm_bias=True,
                      parallel=True, qkv_bias=True, fused_qkv=True, rope_dims=32, out_bias=True, ffn_bias=True,
                      output_bias=True, prompt_len=96)),
    # StarCoder2-3B's shape: GQA, LayerNorms with biases, q/k/v/o and FFN biases, NEOX RoPE
    # over the whole head, tied head.
    ("starcoder2", Tiny("starcoder2", 142, layer_norm=True, norm_bias=True, qkv_bias=True, out_bias=True,
                        ffn_bias=True, prompt_len=96, extra={"rope.freq_base": 100000.0})),
    # Nemotron-H (`write_nemotron_h`): the pattern "M-M*-M" (Mamba2, MLP, Mamba2, attention,
    # MLP, Mamba2), 8 SSM heads of 64 in 2 groups of state 32, relu² MLPs of 512, an output matrix.
    ("nemotron_h", Tiny("nemotron_h", 143, n_layer=6, tied=False, pre="qwen2", prompt_len=96,
                        mamba2=Mamba2Shape(attention_layers=(3,), mlp_layers=(1, 4)))),
    # Nemotron 3 Nano (nemotron_h_moe): the same pattern with 8 relu² experts of 128 (2 used;
    # sigmoid routing with selection biases, weights renormalised and scaled by 2.5) and a
    # shared expert of 256 in each MLP layer.
    ("nemotron_h_moe", Tiny("nemotron_h_moe", 144, n_layer=6, tied=False, pre="qwen2", prompt_len=96,
                            ffn=128, n_expert=8, shared_ffn=256, router_gain=MOE_ROUTER_GAIN, expert_bias=0.05,
                            mamba2=Mamba2Shape(attention_layers=(3,), mlp_layers=(1, 4)),
                            extra={"expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 128,
                                   "expert_shared_feed_forward_length": 256, "expert_shared_count": 1,
                                   "expert_weights_norm": True, "expert_weights_scale": 2.5,
                                   "expert_group_count": 1, "expert_group_used_count": 1})),
]}
#: deepseek2 (`write_deepseek2`, tests/test_mla.py, llama_cpp_mla.npz): MLA with a latent of
#: 64 and a rope key of 16, 4 heads of nope 32 + rope 16 and values of 48, a dense first layer
#: then 8 experts of 64 with shared experts.  The prompts (prompt_seed) are those of 40 seeds
#: whose reference routing has the largest smallest gap between the last expert chosen and the next.
MLA_FILES: Dict[str, Tiny] = {n: t for n, t in [
    # V2-Lite's shape: plain attn_q, softmax routing (no gating key), unnormalised weights
    ("deepseek2-lite", Tiny("deepseek2", 150, n_layer=3, tied=False, pre="qwen2", ffn=256, n_expert=8,
                            expert_ffn=64, router_gain=MOE_ROUTER_GAIN, prompt_len=96, prompt_seed=22,
                            mla=MlaShape(weights_scale=1.0))),
    # V2's: a low-rank q, YaRN with its log multiplier (0.1 mscale_all_dim), two shared experts
    ("deepseek2-yarn", Tiny("deepseek2", 151, n_layer=3, tied=False, pre="qwen2", ffn=256, n_expert=8,
                            expert_ffn=64, router_gain=MOE_ROUTER_GAIN, prompt_len=96, prompt_seed=30,
                            mla=MlaShape(q_lora=96, n_shared=2, gating=1, weights_scale=1.0),
                            extra={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                                   "rope.scaling.original_context_length": 256,
                                   "rope.scaling.yarn_log_multiplier": 0.0707})),
    # V3's: sigmoid routing with selection biases in 4 groups of 4 experts (2 groups used),
    # weights normalised and scaled by 2.5
    ("deepseek2-v3", Tiny("deepseek2", 152, n_layer=3, tied=False, pre="qwen2", ffn=256, n_expert=16,
                          expert_ffn=64, router_gain=MOE_ROUTER_GAIN, expert_bias=0.05, prompt_len=96, prompt_seed=37,
                          mla=MlaShape(q_lora=96, gating=2, weights_norm=True, weights_scale=2.5, groups=4,
                                       groups_used=2, selection_bias=True, n_used=3),
                          extra={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                                 "rope.scaling.original_context_length": 256,
                                 "rope.scaling.yarn_log_multiplier": 0.1})),
    # the older conversions of V2-Lite: attn_kv_b, decompressed heads (llama.cpp's plain MHA path)
    ("deepseek2-kvb", Tiny("deepseek2", 153, n_layer=3, tied=False, pre="qwen2", ffn=256, n_expert=8,
                           expert_ffn=64, router_gain=MOE_ROUTER_GAIN, prompt_len=96, prompt_seed=7,
                           mla=MlaShape(legacy=True, weights_scale=1.0),
                           extra={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                                  "rope.scaling.original_context_length": 256,
                                  "rope.scaling.yarn_log_multiplier": 0.0707})),
]}
#: the text models of Qwen2-VL / Qwen3-VL (tests/test_vltext.py, llama_cpp_vltext.npz):
#: qwen2 / qwen3 / qwen3moe files with M-RoPE sections (rope.dimension_sections; for
#: text the pairs of the extra section do not turn, infer/variants/qwen_vl.py)
VLTEXT: Dict[str, Tiny] = {n: t for n, t in [
    # Qwen2.5-VL's sections halved ([16, 24, 24, 0] over 64 pairs): every pair turns
    ("qwen2vl", Tiny("qwen2vl", 150, n_layer=3, qkv_bias=True, eps=1e-6, pre="qwen2", prompt_len=96,
                     extra={"rope.freq_base": 1000000.0, "rope.dimension_sections": [8, 12, 12, 0]})),
    # sections of 8 pairs repeated 4 times; pairs 6, 7, 14, 15, ... fall to the extra section
    ("qwen2vl-extra", Tiny("qwen2vl", 151, n_layer=2, qkv_bias=True, eps=1e-6, pre="qwen2", tied=False,
                           prompt_len=96, extra={"rope.dimension_sections": [2, 2, 2, 2]})),
    # Qwen3-VL's sections halved ([24, 20, 20, 0] over 64 pairs leaves 61 and 62 still;
    # here pair 31), deepstack layers (image-only), 8 heads of 64
    ("qwen3vl", Tiny("qwen3vl", 152, n_layer=3, n_head=8, qk_norm=True, eps=1e-6, pre="qwen2", prompt_len=96,
                     extra={"attention.key_length": 64, "attention.value_length": 64,
                            "rope.dimension_sections": [12, 10, 10, 0], "n_deepstack_layers": 2})),
    # interleaved sections of 8 pairs: pairs 7, 15, 23, 31 still; 8 experts of 128, 2 used
    ("qwen3vlmoe", Tiny("qwen3vlmoe", 153, n_layer=2, n_head=8, qk_norm=True, eps=1e-6, pre="qwen2", ffn=128,
                        n_expert=8, router_gain=MOE_ROUTER_GAIN, prompt_len=96, tied=False,
                        extra={"attention.key_length": 64, "attention.value_length": 64,
                               "rope.dimension_sections": [3, 2, 2, 1], "n_deepstack_layers": 2,
                               "expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 128})),
]}
#: Falcon-H1 (`write_falcon_h1`; tests/test_falcon_h1.py, llama_cpp_falconh1.npz): 4 heads of 32
#: (q_dim 128 != dim, key_length given), GQA, RoPE base 1e11 as the released files; each layer
#: attention beside a Mamba2 mixer of 6 heads of 64 in 2 groups of state 16 (d_inner 384), with
#: the gated norm, and without it (mamba_rms_norm false)
FALCON_H1: Dict[str, Tiny] = {
    "falcon-h1": Tiny("falcon-h1", 150, n_layer=3, n_head=4, n_kv_head=2, head_dim=32, tied=False, pre="falcon-h1",
                      rope_base=1e11, prompt_len=64, falcon_h1=FalconH1Shape()),
    "falcon-h1-nonorm": Tiny("falcon-h1", 151, n_layer=2, n_head=4, n_kv_head=2, head_dim=32, tied=False,
                             pre="falcon-h1", rope_base=1e11, prompt_len=64, falcon_h1=FalconH1Shape(rms_norm=False)),
}
#: every tiny file (names are unique across the tables)
ALL: Dict[str, Tiny] = {**TINY, **DENSE, **LFM2, **GEMMA4, **LFM2MOE, **ARCEE, **MISTRAL3, **QWEN35, **MXFP4,
                        **GPTOSS, **GRANITE_HYBRID, **DENSE2, **FAMILIES3, **MLA_FILES, **VLTEXT, **FALCON_H1}


# ---- vocabulary ---------------------------------------------------------------------
_CORPUS = (
    "The quick brown fox jumps over the lazy dog. A small model reads the text, "
    "the tokens and the weights; then it writes the next word of the sentence. "
    "Inference on a CPU is fast when the weights are small and the kernels are good. "
    "Hello world! Numbers like 12, 345 and 6789 appear too, with questions: why? how? "
) * 4


def byte_alphabet() -> List[str]:
    """GPT-2's printable stand-in for each byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def bpe_vocabulary():
    """(tokens, merges): 256 bytes, merges learnt greedily on a fixed text, specials."""
    alpha = byte_alphabet()
    words = Counter(tuple(alpha[b] for b in w.encode()) for w in re.findall(r" ?\w+| ?[^\w\s]+|\s+", _CORPUS))
    tokens = list(alpha)
    merges: List[str] = []
    n_merges = VOCAB - 256 - len(SPECIALS)
    while len(merges) < n_merges:
        pairs: Counter = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(f"{best[0]} {best[1]}")
        tokens.append(best[0] + best[1])
        merged: Counter = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    while len(tokens) < VOCAB - len(SPECIALS):  # the corpus ran out of pairs
        tokens.append(f"<|unused{len(tokens)}|>")
    return tokens + SPECIALS, merges


#: Gemma 4's vocabulary layout (conversion/gemma.py Gemma4Model.set_vocab): control
#: tokens first, byte tokens <0xNN>, then SentencePiece-style pieces with ``▁`` for a
#: space, merged by rank over raw UTF-8 (tokenizer.ggml.model "gemma4")
GEMMA4_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]


def gemma4_vocabulary():
    """(tokens, token types, merges) of VOCAB entries: specials, 256 byte tokens, two
    newline runs, the corpus's characters, then merges learnt greedily on its words
    (cut before each ``▁``)."""
    text = _CORPUS.replace(" ", "\u2581")
    tokens = GEMMA4_SPECIALS + [f"<0x{b:02X}>" for b in range(256)] + ["\n", "\n\n"]
    types = [3, 3, 3, 2] + [6] * 256 + [1, 1]
    chars = sorted(set(text))
    tokens += chars
    types += [1] * len(chars)
    words = Counter(tuple(w) for w in re.findall("\u2581?[^\u2581]+", text))
    merges: List[str] = []
    while len(tokens) < VOCAB:
        pairs: Counter = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(f"{best[0]} {best[1]}")
        if best[0] + best[1] not in tokens:
            tokens.append(best[0] + best[1])
            types.append(1)
        merged: Counter = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    while len(tokens) < VOCAB:
        tokens.append(f"<unused{len(tokens)}>")
        types.append(5)
    return tokens, types, merges


def prompt(name: str) -> np.ndarray:
    """The teacher-forced token ids of a tiny model's recording (no specials)."""
    t = ALL[name]
    seed = 1000 + t.seed if t.prompt_seed is None else t.prompt_seed
    return np.random.default_rng(seed).integers(0, VOCAB - len(SPECIALS), t.prompt_len)


# ---- weights ------------------------------------------------------------------------
def llama3_rope_factors(head_dim: int, base: float, factor=8.0, low=1.0, high=4.0, orig=256):
    """HF's llama3 rope_scaling as the converter stores it: per-pair divisors of the
    frequency (1 for short wavelengths, ``factor`` for long ones, smooth between)."""
    inv = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / inv
    lo_wl, hi_wl = orig / low, orig / high
    smooth = (orig / wavelen - low) / (high - low)
    f = np.where(wavelen < hi_wl, 1.0, np.where(wavelen > lo_wl, factor, 1.0 / ((1 - smooth) / factor + smooth)))
    return f.astype(np.float32)


def _finish(w: Any, path: str) -> str:
    """Write a GGUFWriter's header, metadata and tensors to its file and close it."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write(name: str, path: str, tiny: Optional[Tiny] = None,
          more_tensors: Optional[Dict[str, np.ndarray]] = None) -> str:
    """Write TINY[name] (or ``tiny``) to path, with ``more_tensors`` added."""
    import gguf

    t = tiny or ALL[name]
    if t.gemma4 is not None:
        return write_gemma4(t, path, more_tensors)
    if t.arch == "lfm2moe":
        return write_lfm2moe(t, path, more_tensors)
    if t.mla is not None:
        return write_deepseek2(t, path, more_tensors)
    if t.qwen35 is not None:
        return write_qwen35(t, path, more_tensors)
    if t.arch == "gpt-oss":
        return write_gptoss(t, path, more_tensors)
    if t.arch in ("nemotron_h", "nemotron_h_moe"):
        return write_nemotron_h(t, path, more_tensors)
    if t.falcon_h1 is not None:
        return write_falcon_h1(t, path, more_tensors)
    if t.mamba2 is not None:
        return write_granite_hybrid(t, path, more_tensors)
    rng = np.random.default_rng(t.seed)
    d, hd, L = t.dim, t.head_dim, t.n_layer
    q_dim, kv_dim = t.n_head * hd, t.n_kv_head * hd

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(n, s=0.3):
        return (s * rng.standard_normal(n)).astype(np.float32)

    w = gguf.GGUFWriter(path, t.arch)
    a = t.arch
    w.add_uint32(f"{a}.context_length", t.n_ctx_train)
    w.add_uint32(f"{a}.embedding_length", d)
    w.add_uint32(f"{a}.block_count", L)
    w.add_uint32(f"{a}.feed_forward_length", t.ffn)
    w.add_uint32(f"{a}.attention.head_count", t.n_head)
    if t.conv_layers:   # per layer, 0 on the shortconv layers (the LFM2 converter's list)
        w.add_array(f"{a}.attention.head_count_kv", [0 if i in t.conv_layers else t.n_kv_head for i in range(L)])
        w.add_uint32(f"{a}.shortconv.l_cache", t.conv_width)
    else:
        w.add_uint32(f"{a}.attention.head_count_kv", t.n_kv_head)
    w.add_float32(f"{a}.attention.layer_norm_epsilon" if t.layer_norm else f"{a}.attention.layer_norm_rms_epsilon",
                  t.eps)
    if t.rope_dims is not None:
        w.add_uint32(f"{a}.rope.dimension_count", t.rope_dims)
    extra = dict(t.extra)
    extra.setdefault("rope.freq_base", t.rope_base)
    _add_metadata(w, a, extra)
    if t.arch == "apertus":   # the converter's global per-layer arrays of xIELU's trained parameters
        for key, values in XIELU.items():
            w.add_array(key, [values[i % len(values)] for i in range(L)])
    if t.longrope:
        scale = t.n_ctx_train / extra["rope.scaling.original_context_length"]
        w.add_float32(f"{a}.rope.scaling.attn_factor",
                      math.sqrt(1 + math.log(scale) / math.log(extra["rope.scaling.original_context_length"])))
    tokens, merges = bpe_vocabulary()
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", t.pre)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * (VOCAB - len(SPECIALS)) + [3] * len(SPECIALS))
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", tokens.index("<|endoftext|>"))
    w.add_uint32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)

    # Logits std of a few units: unit-RMS normed hidden states times a head of
    # std 3/sqrt(d).  An untied embedding is unit-variance.
    w.add_tensor("token_embd.weight", mat(VOCAB, d, t.head_gain if t.tied else math.sqrt(d)))
    w.add_tensor("token_embd_norm.weight" if t.arch == "lfm2" else "output_norm.weight", norm(d))
    if t.norm_bias:
        w.add_tensor("output_norm.bias", bias(d, 0.1))
    if not t.tied:
        w.add_tensor("output.weight", mat(VOCAB, d, t.head_gain))
    if t.output_bias:
        w.add_tensor("output.bias", bias(VOCAB, 0.5))
    if t.llama3_rope:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(hd, extra["rope.freq_base"]))
    if t.longrope:
        n = (t.rope_dims or hd) // 2
        w.add_tensor("rope_factors_long.weight", (1.0 + 7.0 * np.linspace(0, 1, n) ** 2).astype(np.float32))
        w.add_tensor("rope_factors_short.weight", (1.0 + 0.5 * np.linspace(0, 1, n)).astype(np.float32))
    for i in range(L):
        p = f"blk.{i}."
        if t.pre_norms:
            w.add_tensor(p + "attn_norm.weight", norm(d))
            if t.norm_bias:
                w.add_tensor(p + "attn_norm.bias", bias(d, 0.1))
        if i in t.conv_layers:
            _add_shortconv(w, p, d, t.conv_width, mat, rng)
            w.add_tensor(p + "ffn_norm.weight", norm(d))
            w.add_tensor(p + "ffn_gate.weight", mat(t.ffn, d))
            w.add_tensor(p + "ffn_up.weight", mat(t.ffn, d))
            w.add_tensor(p + "ffn_down.weight", mat(d, t.ffn))
            continue
        if t.fused_qkv:
            w.add_tensor(p + "attn_qkv.weight", np.concatenate(
                [mat(q_dim, d, 1.5), mat(kv_dim, d, 1.5), mat(kv_dim, d)]))
        else:
            w.add_tensor(p + "attn_q.weight", mat(q_dim, d, 1.5))
            w.add_tensor(p + "attn_k.weight", mat(kv_dim, d, 1.5))
            w.add_tensor(p + "attn_v.weight", mat(kv_dim, d))
        if t.qkv_bias and t.fused_qkv:   # (Phi-2's older conversions: one bias)
            w.add_tensor(p + "attn_qkv.bias", np.concatenate([bias(q_dim), bias(kv_dim, 1.0), bias(kv_dim)]))
        elif t.qkv_bias:
            w.add_tensor(p + "attn_q.bias", bias(q_dim))
            w.add_tensor(p + "attn_k.bias", bias(kv_dim, 1.0))
            w.add_tensor(p + "attn_v.bias", bias(kv_dim))
        if t.qk_norm:
            w.add_tensor(p + "attn_q_norm.weight", norm(q_dim if t.qk_norm_all else hd))
            w.add_tensor(p + "attn_k_norm.weight", norm(kv_dim if t.qk_norm_all else hd))
        w.add_tensor(p + "attn_output.weight", mat(d, q_dim))
        if t.out_bias:
            w.add_tensor(p + "attn_output.bias", bias(d, 0.1))
        if t.post_norms:
            w.add_tensor(p + "post_attention_norm.weight", norm(d))
        if t.pre_norms and not t.parallel:
            w.add_tensor(p + "ffn_norm.weight", norm(d))
            if t.norm_bias:
                w.add_tensor(p + "ffn_norm.bias", bias(d, 0.1))
        if t.n_expert:
            # GGUF dims (d, ffn, n_expert) for gate/up and (ffn, d, n_expert) for
            # down: the numpy arrays are (n_expert, out, in)
            w.add_tensor(p + "ffn_gate_inp.weight", (mat(t.n_expert, d, t.router_gain)).astype(np.float32))
            for part, rows, cols in (("gate", t.ffn, d), ("up", t.ffn, d), ("down", d, t.ffn)):
                stacked = np.stack([mat(rows, cols) for _ in range(t.n_expert)])
                if t.expert_type == "f16":
                    w.add_tensor(p + f"ffn_{part}_exps.weight", stacked)
                else:
                    qtype = gguf.GGMLQuantizationType[t.expert_type.upper()]
                    w.add_tensor(p + f"ffn_{part}_exps.weight", quantize(stacked, t.expert_type), raw_dtype=qtype)
            if t.shared_ffn:
                shexp_gate = (rng.standard_normal(d) / math.sqrt(d)).astype(np.float32)
                w.add_tensor(p + "ffn_gate_inp_shexp.weight", shexp_gate)
                w.add_tensor(p + "ffn_gate_shexp.weight", mat(t.shared_ffn, d))
                w.add_tensor(p + "ffn_up_shexp.weight", mat(t.shared_ffn, d))
                w.add_tensor(p + "ffn_down_shexp.weight", mat(d, t.shared_ffn))
        elif t.fused_gate_up:
            w.add_tensor(p + "ffn_up.weight", np.concatenate([mat(t.ffn, d), mat(t.ffn, d)]))
        elif t.arch in ("arcee", "apertus", "phi2", "starcoder2"):   # no gate: act(h Wup) Wdown
            w.add_tensor(p + "ffn_up.weight", mat(t.ffn, d))
        else:
            w.add_tensor(p + "ffn_gate.weight", mat(t.ffn, d))
            w.add_tensor(p + "ffn_up.weight", mat(t.ffn, d))
        if not t.n_expert:
            w.add_tensor(p + "ffn_down.weight", mat(d, t.ffn))
        if t.ffn_bias:
            w.add_tensor(p + "ffn_up.bias", bias(t.ffn, 0.5))
            w.add_tensor(p + "ffn_down.bias", bias(d, 0.1))
        if t.post_norms:
            w.add_tensor(p + "post_ffw_norm.weight", norm(d))
    for k, v in (more_tensors or {}).items():
        w.add_tensor(k, v)
    return _finish(w, path)


def _add_metadata(w, arch: str, values: Dict[str, Any]) -> None:
    """``<arch>.<key>`` = value for each item, typed by its Python type (lists as
    arrays, floats as F32, ints as U32); None leaves a key out."""
    for k, v in values.items():
        key = f"{arch}.{k}"
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            w.add_array(key, list(v))
        elif isinstance(v, bool):
            w.add_bool(key, v)
        elif isinstance(v, float):
            w.add_float32(key, v)
        elif isinstance(v, str):
            w.add_string(key, v)
        else:
            w.add_uint32(key, v)


def _write_vocabulary(w, pre: str = "default") -> None:
    tokens, merges = bpe_vocabulary()
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * (VOCAB - len(SPECIALS)) + [3] * len(SPECIALS))
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", tokens.index("<|endoftext|>"))
    w.add_uint32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)


def write_gemma4(t: Tiny, path: str, more_tensors: Optional[Dict[str, np.ndarray]] = None) -> str:
    """A gemma4 file in the converter's layout: the keys Gemma4Model.set_gguf_parameters
    writes, norm weights as they are (no +1), one rope_freqs for the full layers, the
    shared-KV layers without attn_k / attn_v / attn_k_norm."""
    import gguf

    g = t.gemma4
    assert g is not None and len(g.sliding) == len(g.kv_heads) == len(g.ffn) == t.n_layer
    rng = np.random.default_rng(t.seed)
    d, L, P = t.dim, t.n_layer, g.per_layer
    n_own = L - g.shared_kv_layers

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float16)

    def norm(n, centre=1.0):
        return (centre * (1.0 + 0.1 * rng.standard_normal(n))).astype(np.float32)

    keys: Dict[str, Any] = {
        "context_length": t.n_ctx_train, "embedding_length": d, "block_count": L,
        "feed_forward_length": list(g.ffn), "attention.head_count": t.n_head,
        "attention.head_count_kv": list(g.kv_heads), "attention.layer_norm_rms_epsilon": t.eps,
        "attention.key_length": g.head_dim_full, "attention.value_length": g.head_dim_full,
        "attention.key_length_swa": t.head_dim, "attention.value_length_swa": t.head_dim,
        "rope.freq_base": t.rope_base, "rope.freq_base_swa": g.swa_base,
        "rope.dimension_count": g.head_dim_full, "rope.dimension_count_swa": t.head_dim,
        "final_logit_softcapping": g.softcap, "attention.sliding_window": g.window,
        "attention.sliding_window_pattern": [bool(x) for x in g.sliding],
        "attention.shared_kv_layers": g.shared_kv_layers, "embedding_length_per_layer_input": P,
    }
    keys.update({k: v for k, v in t.extra.items() if k != "vocabulary"})   # a test's changes (None: leave out)
    w = gguf.GGUFWriter(path, "gemma4")
    _add_metadata(w, "gemma4", keys)
    if t.extra.get("vocabulary") == "gemma4":
        tokens, types, merges = gemma4_vocabulary()
        w.add_string("tokenizer.ggml.model", "gemma4")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.scores", [0.0] * len(tokens))
        w.add_array("tokenizer.ggml.token_type", types)
        w.add_array("tokenizer.ggml.merges", merges)
        w.add_uint32("tokenizer.ggml.bos_token_id", 2)
        w.add_uint32("tokenizer.ggml.eos_token_id", 1)
        w.add_uint32("tokenizer.ggml.unknown_token_id", 3)
        w.add_uint32("tokenizer.ggml.padding_token_id", 0)
        w.add_bool("tokenizer.ggml.add_space_prefix", False)
        w.add_bool("tokenizer.ggml.add_bos_token", True)
    else:
        _write_vocabulary(w)

    w.add_tensor("token_embd.weight", mat(VOCAB, d, t.head_gain))
    w.add_tensor("output_norm.weight", norm(d))
    half = g.head_dim_full // 2
    w.add_tensor("rope_freqs.weight", np.array([1.0] * g.turning_pairs + [1e30] * (half - g.turning_pairs),
                                               np.float32))
    if P:
        w.add_tensor("per_layer_token_embd.weight", mat(VOCAB, L * P))
        w.add_tensor("per_layer_model_proj.weight", mat(L * P, d))
        w.add_tensor("per_layer_proj_norm.weight", norm(P))
    for i in range(L):
        p = f"blk.{i}."
        hd = t.head_dim if g.sliding[i] else g.head_dim_full
        q_dim, kv_dim = t.n_head * hd, g.kv_heads[i] * hd
        # q and k norms of about hd**-0.25 keep the scores (scale 1.0) of order one
        qk_centre = hd ** -0.25
        w.add_tensor(p + "attn_norm.weight", norm(d))
        w.add_tensor(p + "attn_q.weight", mat(q_dim, d))
        w.add_tensor(p + "attn_q_norm.weight", norm(hd, 2 * qk_centre))
        if i < n_own:
            w.add_tensor(p + "attn_k.weight", mat(kv_dim, d))
            if not (g.v_from_k and not g.sliding[i]):
                w.add_tensor(p + "attn_v.weight", mat(kv_dim, d))
            w.add_tensor(p + "attn_k_norm.weight", norm(hd, 2 * qk_centre))
        w.add_tensor(p + "attn_output.weight", mat(d, q_dim))
        w.add_tensor(p + "post_attention_norm.weight", norm(d))
        w.add_tensor(p + "ffn_norm.weight", norm(d))
        w.add_tensor(p + "ffn_gate.weight", mat(g.ffn[i], d))
        w.add_tensor(p + "ffn_up.weight", mat(g.ffn[i], d))
        w.add_tensor(p + "ffn_down.weight", mat(d, g.ffn[i]))
        w.add_tensor(p + "post_ffw_norm.weight", norm(d))
        if P:
            w.add_tensor(p + "inp_gate.weight", mat(P, d))
            w.add_tensor(p + "proj.weight", mat(d, P))
            w.add_tensor(p + "post_norm.weight", norm(d))
        w.add_tensor(p + "layer_output_scale.weight", np.array([0.6 + 0.4 * rng.random()], np.float32))
    for k, v in (more_tensors or {}).items():
        w.add_tensor(k, v)
    return _finish(w, path)


def write_qwen35(t: Tiny, path: str, more_tensors: Optional[Dict[str, Any]] = None,
                 drop: Tuple[str, ...] = ()) -> str:
    """A tiny qwen35 / qwen35moe file as the converter writes one: norm weights as
    they are (the converter added HF's +1), ssm_a = -exp(A_log), ssm_dt.bias, the
    conv squeezed to (channels, K) F32, attn_q (2 * q_dim, d) with each head's q rows
    then its gate's, the FFN's norm named post_attention_norm.  ``more_tensors``
    adds tensors (names "blk.*" or "*.weight"), string keys "tokenizer.*" and metadata keys
    (without the arch prefix);
    ``drop`` leaves tensors or keys out (for the refusal tests)."""
    import gguf

    sh = t.qwen35
    assert sh is not None
    more = dict(more_tensors or {})
    rng = np.random.default_rng(t.seed)
    d, hd, L = t.dim, t.head_dim, t.n_layer
    q_dim, kv_dim = t.n_head * hd, t.n_kv_head * hd
    key_dim, value_dim = sh.n_k_heads * sh.d_state, sh.n_v_heads * sh.d_state
    conv_dim = 2 * key_dim + value_dim
    if sh.recurrent_layers is not None:
        recurrent = list(sh.recurrent_layers)
    else:
        recurrent = [(i + 1) % sh.full_attention_interval != 0 for i in range(L)]

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = gguf.GGUFWriter(path, t.arch)
    a = t.arch
    keys: Dict[str, Any] = {
        "context_length": t.n_ctx_train, "embedding_length": d, "block_count": L, "feed_forward_length": t.ffn,
        "attention.head_count": t.n_head, "attention.head_count_kv": t.n_kv_head,
        "attention.layer_norm_rms_epsilon": float(t.eps), "rope.dimension_count": sh.rope_dims,
        "ssm.conv_kernel": sh.conv_kernel, "ssm.state_size": sh.d_state, "ssm.group_count": sh.n_k_heads,
        "ssm.time_step_rank": sh.n_v_heads, "ssm.inner_size": value_dim,
        "full_attention_interval": sh.full_attention_interval, **t.extra}
    strings = {k: more.pop(k) for k in [k for k in more if k.startswith("tokenizer.")]}
    for k in [k for k in more if not (k.startswith("blk.") or k.endswith(".weight"))]:
        keys[k[len(a) + 1:] if k.startswith(a + ".") else k] = more.pop(k)
    for k, v in keys.items():
        if k in drop:
            continue
        key = f"{a}.{k}"
        if isinstance(v, float):
            w.add_float32(key, v)
        else:
            w.add_uint32(key, v)
    if "rope.dimension_sections" not in drop:
        w.add_array(f"{a}.rope.dimension_sections", list(sh.sections))
    if sh.recurrent_layers is not None:
        w.add_array(f"{a}.attention.recurrent_layers", [bool(r) for r in sh.recurrent_layers])
    tokens, merges = bpe_vocabulary()
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", t.pre)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * (VOCAB - len(SPECIALS)) + [3] * len(SPECIALS))
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", tokens.index("<|im_end|>"))
    w.add_uint32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    for k, v in strings.items():
        w.add_string(k, v)

    tensors: Dict[str, np.ndarray] = {}
    tensors["token_embd.weight"] = mat(VOCAB, d, t.head_gain if t.tied else math.sqrt(d))
    tensors["output_norm.weight"] = norm(d)
    if not t.tied:
        tensors["output.weight"] = mat(VOCAB, d, t.head_gain)
    for i in range(L):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = norm(d)
        if recurrent[i]:
            tensors[p + "attn_qkv.weight"] = mat(conv_dim, d, 1.5)
            tensors[p + "attn_gate.weight"] = mat(value_dim, d)
            tensors[p + "ssm_conv1d.weight"] = (rng.standard_normal((conv_dim, sh.conv_kernel))
                                                / math.sqrt(sh.conv_kernel)).astype(np.float32)
            tensors[p + "ssm_dt.bias"] = (0.5 * rng.standard_normal(sh.n_v_heads)).astype(np.float32)
            tensors[p + "ssm_a"] = (-np.exp(rng.uniform(-1.0, 1.0, sh.n_v_heads))).astype(np.float32)
            tensors[p + "ssm_beta.weight"] = mat(sh.n_v_heads, d)
            tensors[p + "ssm_alpha.weight"] = mat(sh.n_v_heads, d, 0.5)
            tensors[p + "ssm_norm.weight"] = norm(sh.d_state)
            tensors[p + "ssm_out.weight"] = mat(d, value_dim)
        else:
            tensors[p + "attn_q.weight"] = mat(2 * q_dim, d, 1.5)
            tensors[p + "attn_k.weight"] = mat(kv_dim, d, 1.5)
            tensors[p + "attn_v.weight"] = mat(kv_dim, d)
            tensors[p + "attn_q_norm.weight"] = norm(hd)
            tensors[p + "attn_k_norm.weight"] = norm(hd)
            tensors[p + "attn_output.weight"] = mat(d, q_dim)
        tensors[p + "post_attention_norm.weight"] = norm(d)
        if t.n_expert:
            tensors[p + "ffn_gate_inp.weight"] = mat(t.n_expert, d, t.router_gain).astype(np.float32)
            for part, rows, cols in (("gate", t.ffn, d), ("up", t.ffn, d), ("down", d, t.ffn)):
                tensors[p + f"ffn_{part}_exps.weight"] = np.stack([mat(rows, cols) for _ in range(t.n_expert)])
            tensors[p + "ffn_gate_inp_shexp.weight"] = (rng.standard_normal(d) / math.sqrt(d)).astype(np.float32)
            tensors[p + "ffn_gate_shexp.weight"] = mat(t.shared_ffn, d)
            tensors[p + "ffn_up_shexp.weight"] = mat(t.shared_ffn, d)
            tensors[p + "ffn_down_shexp.weight"] = mat(d, t.shared_ffn)
        else:
            tensors[p + "ffn_gate.weight"] = mat(t.ffn, d)
            tensors[p + "ffn_up.weight"] = mat(t.ffn, d)
            tensors[p + "ffn_down.weight"] = mat(d, t.ffn)
    tensors.update(more)
    for name, value in tensors.items():
        if name not in drop:
            w.add_tensor(name, value)
    return _finish(w, path)


def _hybrid_attention_tensors(p: str, d: int, q_dim: int, kv_dim: int, mat: Any) -> Dict[str, np.ndarray]:
    """A hybrid's attention layer (no RoPE, no biases), drawn in this order."""
    return {p + "attn_q.weight": mat(q_dim, d, 3.0), p + "attn_k.weight": mat(kv_dim, d, 3.0),
            p + "attn_v.weight": mat(kv_dim, d), p + "attn_output.weight": mat(d, q_dim, 2.0)}


def _mamba2_tensors(p: str, d: int, sh: Mamba2Shape, mat: Any, norm: Any, rng: Any) -> Dict[str, np.ndarray]:
    """A Mamba2 mixer as the converters write it (d_inner = 2 * dim), drawn in this order:
    ssm_in (z, xBC, dt rows), ssm_conv1d (channels, K) F32 and its bias, ssm_dt.bias,
    ssm_a = -exp(A_log) and ssm_d as (n_heads, 1), ssm_norm as (n_groups, d_inner / n_groups)."""
    inner, H, G = 2 * d, sh.n_heads, sh.n_groups
    conv_dim = inner + 2 * G * sh.d_state
    out = {p + "ssm_in.weight": mat(inner + conv_dim + H, d, 1.5)}
    out[p + "ssm_conv1d.weight"] = (rng.standard_normal((conv_dim, sh.conv_kernel))
                                    / math.sqrt(sh.conv_kernel)).astype(np.float32)
    out[p + "ssm_conv1d.bias"] = (0.1 * rng.standard_normal(conv_dim)).astype(np.float32)
    out[p + "ssm_dt.bias"] = (-1.5 + 0.5 * rng.standard_normal(H)).astype(np.float32)
    out[p + "ssm_a"] = (-np.exp(rng.uniform(-1.0, 1.0, (H, 1)))).astype(np.float32)
    out[p + "ssm_d"] = rng.uniform(0.5, 1.5, (H, 1)).astype(np.float32)
    out[p + "ssm_norm.weight"] = norm(inner).reshape(G, inner // G)
    out[p + "ssm_out.weight"] = mat(d, inner, 2.0)
    return out


def write_granite_hybrid(t: Tiny, path: str, more_tensors: Optional[Dict[str, Any]] = None,
                         drop: Tuple[str, ...] = ()) -> str:
    """A tiny granitehybrid file as the converter writes one: head_count_kv per layer
    (0 on the Mamba2 layers), rope.scaling.finetuned false (no RoPE) and
    context_length 2**20, ssm_in (z, xBC, dt rows), ssm_conv1d (channels, K) F32
    with its bias, ssm_a = -exp(A_log) and ssm_d as (n_heads, 1), ssm_norm as
    (n_groups, d_inner / n_groups), the dense FFN as ffn_gate/up/down.
    ``more_tensors`` adds tensors (names "blk.*" or "*.weight") and metadata keys
    (without the arch prefix; a None value removes one); ``drop`` leaves tensors or
    keys out (for the refusal tests)."""
    import gguf

    sh = t.mamba2
    assert sh is not None
    more = dict(more_tensors or {})
    rng = np.random.default_rng(t.seed)
    d, hd, L = t.dim, t.head_dim, t.n_layer
    inner, N, H, G = 2 * d, sh.d_state, sh.n_heads, sh.n_groups
    q_dim, kv_dim = t.n_head * hd, t.n_kv_head * hd

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = gguf.GGUFWriter(path, t.arch)
    a = t.arch
    keys: Dict[str, Any] = {
        "context_length": 2**20, "embedding_length": d, "block_count": L, "feed_forward_length": t.ffn,
        "attention.head_count": t.n_head, "attention.layer_norm_rms_epsilon": float(t.eps),
        "rope.freq_base": float(t.rope_base), "rope.dimension_count": hd,
        "attention.scale": sh.attention_scale, "embedding_scale": sh.embedding_scale,
        "residual_scale": sh.residual_scale, "logit_scale": sh.logit_scale,
        "expert_shared_feed_forward_length": t.shared_ffn or t.ffn,
        "ssm.conv_kernel": sh.conv_kernel, "ssm.state_size": N, "ssm.group_count": G,
        "ssm.inner_size": inner, "ssm.time_step_rank": H, **t.extra}
    for k in [k for k in more if not (k.startswith("blk.") or k.endswith(".weight"))]:
        keys[k[len(a) + 1:] if k.startswith(a + ".") else k] = more.pop(k)
    for k, v in keys.items():
        if k in drop or v is None:
            continue
        key = f"{a}.{k}"
        if isinstance(v, float):
            w.add_float32(key, v)
        elif isinstance(v, (list, tuple)):
            w.add_array(key, list(v))
        else:
            w.add_uint32(key, v)
    if "attention.head_count_kv" not in keys and "attention.head_count_kv" not in drop:
        w.add_array(f"{a}.attention.head_count_kv",
                    [t.n_kv_head if i in sh.attention_layers else 0 for i in range(L)])
    if "rope.scaling.finetuned" not in drop:
        w.add_bool(f"{a}.rope.scaling.finetuned", False)
    tokens, merges = bpe_vocabulary()
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", t.pre)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * (VOCAB - len(SPECIALS)) + [3] * len(SPECIALS))
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", tokens.index("<|im_end|>"))
    w.add_uint32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)

    tensors: Dict[str, np.ndarray] = {}
    tensors["token_embd.weight"] = mat(VOCAB, d, math.sqrt(d) / sh.embedding_scale)
    tensors["output_norm.weight"] = norm(d)
    if not t.tied:
        tensors["output.weight"] = mat(VOCAB, d, t.head_gain)
    for i in range(L):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = norm(d)
        if i in sh.attention_layers:
            tensors.update(_hybrid_attention_tensors(p, d, q_dim, kv_dim, mat))
        else:
            tensors.update(_mamba2_tensors(p, d, sh, mat, norm, rng))
        tensors[p + "ffn_norm.weight"] = norm(d)
        if t.n_expert:   # the converter splits input_linear into gate and up, shared_mlp likewise
            tensors[p + "ffn_gate_inp.weight"] = mat(t.n_expert, d, t.router_gain).astype(np.float32)
            for part, rows, cols in (("gate", t.ffn, d), ("up", t.ffn, d), ("down", d, t.ffn)):
                tensors[p + f"ffn_{part}_exps.weight"] = np.stack([mat(rows, cols) for _ in range(t.n_expert)])
            tensors[p + "ffn_gate_shexp.weight"] = mat(t.shared_ffn, d)
            tensors[p + "ffn_up_shexp.weight"] = mat(t.shared_ffn, d)
            tensors[p + "ffn_down_shexp.weight"] = mat(d, t.shared_ffn, 2.0)
        else:
            tensors[p + "ffn_gate.weight"] = mat(t.ffn, d)
            tensors[p + "ffn_up.weight"] = mat(t.ffn, d)
            tensors[p + "ffn_down.weight"] = mat(d, t.ffn, 2.0)
    tensors.update(more)
    for name, value in tensors.items():
        if name not in drop:
            w.add_tensor(name, value)
    return _finish(w, path)


def falcon_h1_checkpoint(t: Tiny) -> Dict[str, np.ndarray]:
    """A tiny Falcon-H1 checkpoint as HF's FalconH1ForCausalLM holds it (float64, HF's
    names and shapes, nothing folded), drawn from t.seed: what `write_falcon_h1`
    converts and tests/reference/numpy_falcon_h1.py runs with the multipliers."""
    sh = t.falcon_h1
    assert sh is not None
    rng = np.random.default_rng(t.seed)
    d, hd, inner, G, N = t.dim, t.head_dim, sh.d_inner, sh.n_groups, sh.d_state
    H = inner // sh.mamba_head_dim
    conv_dim = inner + 2 * G * N

    def mat(rows, cols, gain=1.0):   # F16-representable once folded is not needed: the file rounds
        return rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)

    def norm(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    ck: Dict[str, np.ndarray] = {
        # unit-variance rows once the embedding multiplier is applied; logits of std
        # ~head_gain once the lm_head multiplier is
        "model.embed_tokens.weight": rng.standard_normal((VOCAB, d)) / sh.embedding_multiplier,
        "model.final_layernorm.weight": norm(d),
        "lm_head.weight": mat(VOCAB, d, t.head_gain / sh.lm_head_multiplier)}
    for i in range(t.n_layer):
        p = f"model.layers.{i}."
        ck[p + "input_layernorm.weight"] = norm(d)
        ck[p + "self_attn.q_proj.weight"] = mat(t.n_head * hd, d)
        ck[p + "self_attn.k_proj.weight"] = mat(t.n_kv_head * hd, d, 1.0 / sh.key_multiplier)
        ck[p + "self_attn.v_proj.weight"] = mat(t.n_kv_head * hd, d)
        ck[p + "self_attn.o_proj.weight"] = mat(d, t.n_head * hd, 2.0)
        ck[p + "mamba.in_proj.weight"] = mat(inner + conv_dim + H, d, 2.0)
        ck[p + "mamba.conv1d.weight"] = rng.standard_normal((conv_dim, 1, sh.conv_kernel)) / math.sqrt(sh.conv_kernel)
        ck[p + "mamba.conv1d.bias"] = 0.1 * rng.standard_normal(conv_dim)
        ck[p + "mamba.dt_bias"] = -1.0 + 0.5 * rng.standard_normal(H)
        ck[p + "mamba.A_log"] = rng.uniform(-1.0, 1.0, H)
        ck[p + "mamba.D"] = rng.uniform(0.5, 1.5, H)
        if sh.rms_norm:
            ck[p + "mamba.norm.weight"] = norm(inner)
        ck[p + "mamba.out_proj.weight"] = mat(d, inner, 6.0)
        ck[p + "pre_ff_layernorm.weight"] = norm(d)
        ck[p + "feed_forward.gate_proj.weight"] = mat(t.ffn, d, 2.0)
        ck[p + "feed_forward.up_proj.weight"] = mat(t.ffn, d)
        ck[p + "feed_forward.down_proj.weight"] = mat(d, t.ffn, 2.0)
    return ck


def write_falcon_h1(t: Tiny, path: str, more_tensors: Optional[Dict[str, Any]] = None,
                    drop: Tuple[str, ...] = ()) -> str:
    """A tiny falcon-h1 file as conversion/falcon_h1.py writes one from
    `falcon_h1_checkpoint`: every muP multiplier folded into its weights (embedding,
    lm_head, q/k/v by attention_in (k also by key_multiplier), o_proj, in_proj by
    ssm_in and its z, x, B, C, dt rows by ssm_multipliers, out_proj, gate_proj and
    down_proj), A = -exp(A_log) and D as (n_heads, 1), the conv squeezed to (channels,
    K), the norm as (n_groups, d_inner / n_groups), pre_ff_layernorm as
    ``blk.N.ffn_norm`` (no ".weight"), F16 matrices and F32 vectors; the keys of
    Mamba2Model's and FalconH1Model's set_gguf_parameters (the later value of a key
    written twice).  ``more_tensors`` adds tensors ("blk.*" or "*.weight") and
    metadata keys (without the arch prefix); ``drop`` leaves tensors or keys out."""
    import gguf

    sh = t.falcon_h1
    assert sh is not None
    ck = falcon_h1_checkpoint(t)
    more = dict(more_tensors or {})
    d, inner, G, N = t.dim, sh.d_inner, sh.n_groups, sh.d_state
    w = gguf.GGUFWriter(path, t.arch)
    a = t.arch
    keys: Dict[str, Any] = {
        "embedding_length": d, "feed_forward_length": t.ffn, "attention.head_count": t.n_head, "block_count": t.n_layer,
        "ssm.conv_kernel": sh.conv_kernel, "ssm.inner_size": inner, "ssm.state_size": N,
        "ssm.time_step_rank": inner // sh.mamba_head_dim, "ssm.group_count": G,
        "attention.layer_norm_rms_epsilon": float(t.eps), "vocab_size": VOCAB, "context_length": t.n_ctx_train,
        "attention.head_count_kv": t.n_kv_head, "attention.key_length": t.head_dim,
        "attention.value_length": t.head_dim, "rope.freq_base": float(t.rope_base), **t.extra}
    for k in [k for k in more if not (k.startswith("blk.") or k.endswith(".weight"))]:
        keys[k[len(a) + 1:] if k.startswith(a + ".") else k] = more.pop(k)
    for k, v in keys.items():
        if k in drop or v is None:
            continue
        key = f"{a}.{k}"
        if isinstance(v, bool):
            w.add_bool(key, v)
        elif isinstance(v, float):
            w.add_float32(key, v)
        else:
            w.add_uint32(key, v)
    tokens, merges = bpe_vocabulary()
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", t.pre)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * (VOCAB - len(SPECIALS)) + [3] * len(SPECIALS))
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", tokens.index("<|im_end|>"))
    w.add_uint32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)

    def f16(x):
        return np.asarray(x, np.float64).astype(np.float16)

    def f32(x):
        return np.asarray(x, np.float64).astype(np.float32)

    tensors: Dict[str, np.ndarray] = {
        "token_embd.weight": f16(ck["model.embed_tokens.weight"] * sh.embedding_multiplier),
        "output_norm.weight": f32(ck["model.final_layernorm.weight"]),
        "output.weight": f16(ck["lm_head.weight"] * sh.lm_head_multiplier)}
    z, x, b, c, dt = sh.ssm_multipliers
    gn = G * N
    rows = np.concatenate([np.full(inner, z), np.full(inner, x), np.full(gn, b), np.full(gn, c),
                           np.full(inner // sh.mamba_head_dim, dt)])
    for i in range(t.n_layer):
        p, h = f"blk.{i}.", f"model.layers.{i}."
        ain = sh.attention_in_multiplier
        tensors[p + "attn_norm.weight"] = f32(ck[h + "input_layernorm.weight"])
        tensors[p + "attn_q.weight"] = f16(ck[h + "self_attn.q_proj.weight"] * ain)
        tensors[p + "attn_k.weight"] = f16(ck[h + "self_attn.k_proj.weight"] * sh.key_multiplier * ain)
        tensors[p + "attn_v.weight"] = f16(ck[h + "self_attn.v_proj.weight"] * ain)
        tensors[p + "attn_output.weight"] = f16(ck[h + "self_attn.o_proj.weight"] * sh.attention_out_multiplier)
        tensors[p + "ssm_in.weight"] = f16(ck[h + "mamba.in_proj.weight"] * sh.ssm_in_multiplier * rows[:, None])
        tensors[p + "ssm_conv1d.weight"] = f32(ck[h + "mamba.conv1d.weight"][:, 0, :])
        tensors[p + "ssm_conv1d.bias"] = f32(ck[h + "mamba.conv1d.bias"])
        tensors[p + "ssm_dt.bias"] = f32(ck[h + "mamba.dt_bias"])
        tensors[p + "ssm_a"] = f32(-np.exp(ck[h + "mamba.A_log"]).reshape(-1, 1))
        tensors[p + "ssm_d"] = f32(ck[h + "mamba.D"].reshape(-1, 1))
        if sh.rms_norm:
            tensors[p + "ssm_norm.weight"] = f32(ck[h + "mamba.norm.weight"].reshape(G, inner // G))
        tensors[p + "ssm_out.weight"] = f16(ck[h + "mamba.out_proj.weight"] * sh.ssm_out_multiplier)
        tensors[p + "ffn_norm"] = f32(ck[h + "pre_ff_layernorm.weight"])
        tensors[p + "ffn_gate.weight"] = f16(ck[h + "feed_forward.gate_proj.weight"] * sh.mlp_multipliers[0])
        tensors[p + "ffn_up.weight"] = f16(ck[h + "feed_forward.up_proj.weight"])
        tensors[p + "ffn_down.weight"] = f16(ck[h + "feed_forward.down_proj.weight"] * sh.mlp_multipliers[1])
    tensors.update(more)
    for name, value in tensors.items():
        if name not in drop:
            w.add_tensor(name, value)
    return _finish(w, path)


def write_nemotron_h(t: Tiny, path: str, more_tensors: Optional[Dict[str, Any]] = None,
                     drop: Tuple[str, ...] = ()) -> str:
    """A tiny nemotron_h file as conversion/nemotron.py writes one (its GraniteHybridModel
    parent's keys without Granite's multipliers): head_count_kv and feed_forward_length
    per layer (both 0 on the Mamba2 layers), key/value lengths, rope.scaling.finetuned
    false and context_length 2**20, both norm epsilons; each layer one of a Mamba2 mixer
    (granitehybrid's tensors), attention without RoPE, or an MLP ffn_up / ffn_down (relu²).
    ``more_tensors`` adds tensors ("blk.*" or "*.weight"/"*.bias") and metadata keys
    (without the arch prefix; None removes one); ``drop`` leaves tensors or keys out."""
    import gguf

    sh = t.mamba2
    assert sh is not None
    more = dict(more_tensors or {})
    rng = np.random.default_rng(t.seed)
    d, hd, L = t.dim, t.head_dim, t.n_layer
    inner, N, H, G = 2 * d, sh.d_state, sh.n_heads, sh.n_groups
    q_dim, kv_dim = t.n_head * hd, t.n_kv_head * hd

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = gguf.GGUFWriter(path, t.arch)
    a = t.arch
    keys: Dict[str, Any] = {
        "context_length": 2**20, "embedding_length": d, "block_count": L,
        "feed_forward_length": [t.ffn if i in sh.mlp_layers else 0 for i in range(L)],
        "attention.head_count": t.n_head,
        "attention.head_count_kv": [t.n_kv_head if i in sh.attention_layers else 0 for i in range(L)],
        "attention.key_length": hd, "attention.value_length": hd,
        "attention.layer_norm_epsilon": float(t.eps), "attention.layer_norm_rms_epsilon": float(t.eps),
        "rope.freq_base": float(t.rope_base), "rope.scaling.finetuned": False,
        "ssm.conv_kernel": sh.conv_kernel, "ssm.state_size": N, "ssm.group_count": G,
        "ssm.inner_size": inner, "ssm.time_step_rank": H, **t.extra}
    for k in [k for k in more if not (k.startswith("blk.") or k.endswith((".weight", ".bias")))]:
        keys[k[len(a) + 1:] if k.startswith(a + ".") else k] = more.pop(k)
    _add_metadata(w, a, {k: v for k, v in keys.items() if k not in drop})
    _write_vocabulary(w, t.pre)

    tensors: Dict[str, np.ndarray] = {}
    tensors["token_embd.weight"] = mat(VOCAB, d, math.sqrt(d))
    tensors["output_norm.weight"] = norm(d)
    if not t.tied:
        tensors["output.weight"] = mat(VOCAB, d, t.head_gain)
    for i in range(L):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = norm(d)
        if i in sh.attention_layers:
            tensors.update(_hybrid_attention_tensors(p, d, q_dim, kv_dim, mat))
        elif i in sh.mlp_layers and t.n_expert:   # nemotron_h_moe: relu² experts and shared expert, no gates
            tensors[p + "ffn_gate_inp.weight"] = mat(t.n_expert, d, t.router_gain).astype(np.float32)
            tensors[p + "exp_probs_b.bias"] = (t.expert_bias * rng.standard_normal(t.n_expert)).astype(np.float32)
            tensors[p + "ffn_up_exps.weight"] = np.stack([mat(t.ffn, d, 1.5) for _ in range(t.n_expert)])
            tensors[p + "ffn_down_exps.weight"] = np.stack([mat(d, t.ffn, 0.5) for _ in range(t.n_expert)])
            tensors[p + "ffn_up_shexp.weight"] = mat(t.shared_ffn, d, 1.5)
            tensors[p + "ffn_down_shexp.weight"] = mat(d, t.shared_ffn, 0.5)
        elif i in sh.mlp_layers:
            tensors[p + "ffn_up.weight"] = mat(t.ffn, d, 1.5)
            tensors[p + "ffn_down.weight"] = mat(d, t.ffn, 0.5)
        else:
            tensors.update(_mamba2_tensors(p, d, sh, mat, norm, rng))
    tensors.update(more)
    for name, value in tensors.items():
        if name not in drop:
            w.add_tensor(name, value)
    return _finish(w, path)


def write_lfm2moe(t: Tiny, path: str, more_tensors: Optional[Dict[str, np.ndarray]] = None) -> str:
    """An lfm2moe file as conversion/lfm2.py's LFM2MoeModel writes it: lfm2's keys and
    layers, expert_feed_forward_length, leading_dense_block_count and
    expert_gating_func (2, sigmoid); the dense layers' ffn_{gate,up,down}, the
    others' ffn_gate_inp, stacked ffn_*_exps and exp_probs_b.bias (HF's expert_bias)."""
    import gguf

    rng = np.random.default_rng(t.seed)
    d, hd, L, a = t.dim, t.head_dim, t.n_layer, t.arch

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = gguf.GGUFWriter(path, a)
    for key, value in (("context_length", t.n_ctx_train), ("embedding_length", d), ("block_count", L),
                       ("feed_forward_length", t.ffn), ("attention.head_count", t.n_head),
                       ("expert_count", t.n_expert), ("expert_used_count", 2),
                       ("expert_feed_forward_length", t.expert_ffn), ("leading_dense_block_count", t.dense_leading),
                       ("expert_gating_func", 2), ("shortconv.l_cache", t.conv_width)):
        w.add_uint32(f"{a}.{key}", value)
    w.add_array(f"{a}.attention.head_count_kv", [0 if i in t.conv_layers else t.n_kv_head for i in range(L)])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", t.eps)
    for k, v in t.extra.items():
        if isinstance(v, float):
            w.add_float32(f"{a}.{k}", v)
        else:
            w.add_uint32(f"{a}.{k}", v)
    _write_vocabulary(w, t.pre)
    w.add_tensor("token_embd.weight", mat(VOCAB, d, t.head_gain if t.tied else math.sqrt(d)))
    w.add_tensor("token_embd_norm.weight", norm(d))
    if not t.tied:
        w.add_tensor("output.weight", mat(VOCAB, d, t.head_gain))
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(d))
        if i in t.conv_layers:
            _add_shortconv(w, p, d, t.conv_width, mat, rng)
        else:
            w.add_tensor(p + "attn_q.weight", mat(t.n_head * hd, d, 1.5))
            w.add_tensor(p + "attn_k.weight", mat(t.n_kv_head * hd, d, 1.5))
            w.add_tensor(p + "attn_v.weight", mat(t.n_kv_head * hd, d))
            w.add_tensor(p + "attn_q_norm.weight", norm(hd))
            w.add_tensor(p + "attn_k_norm.weight", norm(hd))
            w.add_tensor(p + "attn_output.weight", mat(d, t.n_head * hd))
        w.add_tensor(p + "ffn_norm.weight", norm(d))
        if i < t.dense_leading:
            w.add_tensor(p + "ffn_gate.weight", mat(t.ffn, d))
            w.add_tensor(p + "ffn_up.weight", mat(t.ffn, d))
            w.add_tensor(p + "ffn_down.weight", mat(d, t.ffn))
            continue
        w.add_tensor(p + "ffn_gate_inp.weight", mat(t.n_expert, d, t.router_gain).astype(np.float32))
        for part, rows, cols in (("gate", t.expert_ffn, d), ("up", t.expert_ffn, d), ("down", d, t.expert_ffn)):
            w.add_tensor(p + f"ffn_{part}_exps.weight", np.stack([mat(rows, cols) for _ in range(t.n_expert)]))
        w.add_tensor(p + "exp_probs_b.bias", (t.expert_bias * rng.standard_normal(t.n_expert)).astype(np.float32))
    for k, v in (more_tensors or {}).items():
        w.add_tensor(k, v)
    return _finish(w, path)


def write_deepseek2(t: Tiny, path: str, more_tensors: Optional[Dict[str, np.ndarray]] = None,
                    drop: Tuple[str, ...] = ()) -> str:
    """A deepseek2 file as conversion/deepseek.py writes it: one KV head of key_length
    kv_lora + rope and value_length kv_lora, the _mla lengths of a head, q_lora_rank
    (written as 0 without a low-rank q: llama.cpp reads the key of any file but the
    "lite" layer counts), HF's kv_b_proj split into attn_k_b (per head (kv_lora, nope):
    k_b transposed) and attn_v_b (per head (v_dim, kv_lora)); the dense layers'
    ffn_{gate,up,down}, the others' router, stacked experts and ffn_*_shexp.
    ``drop``: tensors and keys left out (the refusal tests)."""
    import gguf

    m = t.mla
    assert m is not None
    rng = np.random.default_rng(t.seed)
    d, L, a, H = t.dim, t.n_layer, t.arch, t.n_head

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = gguf.GGUFWriter(path, a)
    values: Dict[str, Any] = {
        "context_length": t.n_ctx_train, "embedding_length": d, "block_count": L, "feed_forward_length": t.ffn,
        "attention.head_count": H, "attention.head_count_kv": 1, "attention.layer_norm_rms_epsilon": 1e-6,
        "leading_dense_block_count": m.n_dense, "vocab_size": VOCAB, "attention.q_lora_rank": m.q_lora,
        "attention.kv_lora_rank": m.kv_lora, "attention.key_length": m.kv_lora + m.rope,
        "attention.value_length": m.kv_lora, "attention.key_length_mla": m.nope + m.rope,
        "attention.value_length_mla": m.v_dim, "expert_feed_forward_length": t.expert_ffn,
        **({"attention.head_count_kv": H, "attention.key_length": m.nope + m.rope, "attention.value_length": m.v_dim,
            "attention.key_length_mla": None, "attention.value_length_mla": None} if m.legacy else {}),
        "expert_count": t.n_expert, "expert_shared_count": m.n_shared, "expert_used_count": m.n_used,
        "expert_weights_scale": m.weights_scale, "expert_weights_norm": m.weights_norm or None,
        "expert_gating_func": m.gating, "expert_group_count": m.groups or None,
        "expert_group_used_count": m.groups_used or None, "rope.dimension_count": m.rope,
        "rope.freq_base": t.rope_base, **t.extra}
    _add_metadata(w, a, {k: v for k, v in values.items() if k not in drop})
    _write_vocabulary(w, t.pre)
    tensors: Dict[str, np.ndarray] = {"token_embd.weight": mat(VOCAB, d, math.sqrt(d)),
                                      "output_norm.weight": norm(d), "output.weight": mat(VOCAB, d, t.head_gain)}
    for i in range(L):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = norm(d)
        if m.q_lora:
            tensors[p + "attn_q_a.weight"] = mat(m.q_lora, d)
            tensors[p + "attn_q_a_norm.weight"] = norm(m.q_lora)
            tensors[p + "attn_q_b.weight"] = mat(H * (m.nope + m.rope), m.q_lora, 2.0)
        else:
            tensors[p + "attn_q.weight"] = mat(H * (m.nope + m.rope), d, 2.0)
        tensors[p + "attn_kv_a_mqa.weight"] = mat(m.kv_lora + m.rope, d, 2.0)
        tensors[p + "attn_kv_a_norm.weight"] = norm(m.kv_lora)
        kv_b = mat(H * (m.nope + m.v_dim), m.kv_lora, 1.5)
        if m.legacy:
            tensors[p + "attn_kv_b.weight"] = kv_b
        else:
            kv_b = kv_b.reshape(H, m.nope + m.v_dim, m.kv_lora)
            tensors[p + "attn_k_b.weight"] = np.ascontiguousarray(kv_b[:, :m.nope].transpose(0, 2, 1))
            tensors[p + "attn_v_b.weight"] = np.ascontiguousarray(kv_b[:, m.nope:])
        tensors[p + "attn_output.weight"] = mat(d, H * m.v_dim)
        tensors[p + "ffn_norm.weight"] = norm(d)
        if i < m.n_dense:
            for part, rows, cols in (("gate", t.ffn, d), ("up", t.ffn, d), ("down", d, t.ffn)):
                tensors[p + f"ffn_{part}.weight"] = mat(rows, cols)
            continue
        tensors[p + "ffn_gate_inp.weight"] = mat(t.n_expert, d, t.router_gain).astype(np.float32)
        for part, rows, cols in (("gate", t.expert_ffn, d), ("up", t.expert_ffn, d), ("down", d, t.expert_ffn)):
            tensors[p + f"ffn_{part}_exps.weight"] = np.stack([mat(rows, cols) for _ in range(t.n_expert)])
        if m.selection_bias:
            tensors[p + "exp_probs_b.bias"] = (t.expert_bias * rng.standard_normal(t.n_expert)).astype(np.float32)
        sh = t.expert_ffn * m.n_shared
        for part, rows, cols in (("gate", sh, d), ("up", sh, d), ("down", d, sh)):
            tensors[p + f"ffn_{part}_shexp.weight"] = mat(rows, cols)
    for k, v in {**tensors, **(more_tensors or {})}.items():
        if k not in drop:
            w.add_tensor(k, v)
    return _finish(w, path)


def write_gptoss(t: Tiny, path: str, more_tensors: Optional[Dict[str, np.ndarray]] = None,
                 drop: Tuple[str, ...] = ()) -> str:
    """A gpt-oss file as conversion/gpt_oss.py (GptOssModel) writes it: the keys of
    TextModel plus sliding_window and expert_feed_forward_length (``t.extra``);
    q/k/v/output biases, attn_sinks (F32, one per head), post_attention_norm as the
    FFN's pre-norm, the router and every expert with biases (gate and up split from
    HF's interleaved gate_up_proj: the writer stores them apart).  Sinks, biases and
    expert gains are large enough that each piece moves the logits, and the experts'
    gate and up reach the SwiGLU's clamp at 7.  ``drop``: tensor names left out (the
    tests' incomplete files)."""
    import gguf

    rng = np.random.default_rng(t.seed)
    d, hd, L, E = t.dim, t.head_dim, t.n_layer, t.n_expert
    q_dim, kv_dim = t.n_head * hd, t.n_kv_head * hd

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float16)

    def vec(n, centre=0.0, s=0.3):
        return (centre + s * rng.standard_normal(n)).astype(np.float32)

    w = gguf.GGUFWriter(path, t.arch)
    harmony = t.extra.get("vocabulary") == "harmony"
    _add_metadata(w, t.arch, {
        "context_length": t.n_ctx_train, "embedding_length": d, "block_count": L, "feed_forward_length": t.ffn,
        "attention.head_count": t.n_head, "attention.head_count_kv": t.n_kv_head, "rope.freq_base": t.rope_base,
        "attention.layer_norm_rms_epsilon": t.eps, **{k: v for k, v in t.extra.items() if k != "vocabulary"}})
    if harmony:
        n_vocab = _write_harmony_vocabulary(w)
    else:
        _write_vocabulary(w)
        n_vocab = VOCAB
    tensors: Dict[str, np.ndarray] = {}
    tensors["token_embd.weight"] = mat(n_vocab, d, math.sqrt(d))
    tensors["output_norm.weight"] = vec(d, 1.0, 0.1)
    tensors["output.weight"] = mat(n_vocab, d, t.head_gain)
    for i in range(L):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = vec(d, 1.0, 0.1)
        tensors[p + "attn_q.weight"] = mat(q_dim, d, 1.5)
        tensors[p + "attn_q.bias"] = vec(q_dim)
        tensors[p + "attn_k.weight"] = mat(kv_dim, d, 1.5)
        tensors[p + "attn_k.bias"] = vec(kv_dim, s=1.0)
        tensors[p + "attn_v.weight"] = mat(kv_dim, d)
        tensors[p + "attn_v.bias"] = vec(kv_dim)
        tensors[p + "attn_output.weight"] = mat(d, q_dim)
        tensors[p + "attn_output.bias"] = vec(d)
        # sinks around e^3: about as heavy as the 32 window positions together
        tensors[p + "attn_sinks.weight"] = vec(t.n_head, 3.0, 1.0)
        tensors[p + "post_attention_norm.weight"] = vec(d, 1.0, 0.1)
        tensors[p + "ffn_gate_inp.weight"] = mat(E, d, t.router_gain).astype(np.float32)
        tensors[p + "ffn_gate_inp.bias"] = vec(E, s=1.0)
        for part, rows, cols, gain in (("gate", t.ffn, d, 3.0), ("up", t.ffn, d, 3.0), ("down", d, t.ffn, 1.0)):
            stacked = np.stack([mat(rows, cols, gain) for _ in range(E)])
            if t.expert_type != "f16":
                stacked = quantize(stacked, t.expert_type)
            tensors[p + f"ffn_{part}_exps.weight"] = stacked
            tensors[p + f"ffn_{part}_exps.bias"] = (0.5 * rng.standard_normal((E, rows))).astype(np.float32)
    tensors.update(more_tensors or {})
    for name, value in tensors.items():
        if name in drop:
            continue
        if name.endswith("_exps.weight") and t.expert_type != "f16":
            w.add_tensor(name, value, raw_dtype=gguf.GGMLQuantizationType[t.expert_type.upper()])
        else:
            w.add_tensor(name, value)
    return _finish(w, path)


#: gpt-oss's harmony control tokens (o200k_harmony's, at the end of the tiny vocabulary)
HARMONY_SPECIALS = ["<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                    "<|return|>", "<|call|>"]
#: harmony texts whose ids llama.cpp gave on `gptoss_harmony_file` (tests/data/llama_cpp_gptoss_tokens.json)
HARMONY_TEXTS = (
    "<|start|>system<|message|>You are a helpful assistant.\nReasoning: low<|end|>"
    "<|start|>user<|message|>What is 17 x 23?<|end|><|start|>assistant",
    "<|channel|>analysis<|message|>Multiply: 17*23 = 391.<|end|><|start|>assistant<|channel|>final<|message|>391"
    "<|return|>",
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Paris"}<|call|>',
    "It's 1234567 o'clock  in\n\nParis, isn't it?  Ünïcode 東京 🦊",
)


def _write_harmony_vocabulary(w) -> int:
    """gpt-oss's tokenizer metadata on the tiny BPE: pre-tokenizer "gpt-4o", the harmony
    control tokens (type 3), <|return|> as EOS, the real chat template
    (tests/chat_templates/gpt-oss.jinja).  Returns the vocabulary's size."""
    import os

    base, merges = bpe_vocabulary()
    tokens = base[:-len(SPECIALS)] + HARMONY_SPECIALS
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "gpt-4o")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * (len(tokens) - len(HARMONY_SPECIALS)) + [3] * len(HARMONY_SPECIALS))
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", tokens.index("<|return|>"))
    w.add_uint32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_templates", "gpt-oss.jinja"),
              encoding="utf-8") as f:
        w.add_string("tokenizer.chat_template", f.read())
    return len(tokens)


def gptoss_harmony_file(path: str) -> str:
    """The tiny gpt-oss file with gpt-oss's tokenizer metadata (`_write_harmony_vocabulary`)."""
    t = GPTOSS["gpt-oss"]
    return write_gptoss(replace(t, extra={**t.extra, "vocabulary": "harmony"}), path)


def _add_shortconv(w, p, d, width, mat, rng):
    """An LFM2 shortconv layer as the converter writes it: in_proj (3d, d) whose row
    blocks are b, c, x; the depthwise conv squeezed from HF's (d, 1, L) to (d, L),
    F32 (GGUF dims {L, d}), tap L-1 on the current position; out_proj (d, d)."""
    w.add_tensor(p + "shortconv.in_proj.weight", mat(3 * d, d, 1.5))
    w.add_tensor(p + "shortconv.conv.weight", (rng.standard_normal((d, width)) / math.sqrt(width)).astype(np.float32))
    w.add_tensor(p + "shortconv.out_proj.weight", mat(d, d))


def quantize(a: np.ndarray, kind: str) -> np.ndarray:
    """a in "q8_0" or "mxfp4" (the gguf package's quantizers) or "q4_k" (infer's: the
    gguf package has none); bytes shaped (..., row bytes) as the gguf writer takes them."""
    import gguf

    x = np.ascontiguousarray(a, dtype=np.float32)
    if kind in ("q8_0", "mxfp4"):
        return gguf.quants.quantize(x, gguf.GGMLQuantizationType[kind.upper()])
    import infer.kernels as K

    rows, cols = x.size // x.shape[-1], x.shape[-1]
    out = np.empty(rows * K.row_bytes(kind, cols), np.uint8)
    K.quantize(x.reshape(-1), kind, out)
    return out.reshape(x.shape[:-1] + (-1,))


def gemma4_vocab_file(path: str) -> str:
    """The tiny E2B-shaped Gemma 4 file with a "gemma4" tokenizer vocabulary (the ids
    llama.cpp gave on it are tests/data/llama_cpp_gemma4_tokens.json)."""
    return write("gemma4-e2b", path, tiny=replace(GEMMA4["gemma4-e2b"], extra={"vocabulary": "gemma4"}))


def recorded_positions(n: int) -> np.ndarray:
    """The positions whose llama.cpp logits are kept as test data: every 8th, the
    last, and both sides of the 128-token window, the 256-token rope context and
    the 512-token batch."""
    edges = [127, 128, 255, 256, 511, 512, n - 1]
    return np.array(sorted(set(range(0, n, 8)) | {p for p in edges if p < n}), dtype=np.int64)


def sha256(path: str) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


if __name__ == "__main__":
    import sys

    out = sys.argv[1] if len(sys.argv) > 1 else "."
    for name in TINY:
        p = write(name, f"{out}/{name}.gguf")
        print(name, sha256(p), p)
