"""TII's Falcon-H1 (0.5B, 1.5B, 1.5B-Deep, 3B, 7B, 34B; Falcon-H1R): GGUF architecture
``falcon-h1`` (llama.cpp src/models/falcon-h1.cpp; converter conversion/falcon_h1.py).

Every layer has attention and a Mamba2 mixer side by side on the same normed input,
their outputs summed, then a SwiGLU MLP:

    x = embed(token)
    for each layer:
        h = rmsnorm(x, attn_norm)
        x += attention(h) + mamba2(h)          (NEOX RoPE; Granite 4.0-H's Mamba2 mixer)
        x += ffn(rmsnorm(x, ffn_norm))
    logits = rmsnorm(x, output_norm) Wout

Falcon-H1's muP multipliers are all folded into the weights by the converter:
embedding_multiplier into token_embd, lm_head_multiplier into output, attention_in
into q/k/v (key_multiplier into k too), attention_out into attn_output, ssm_in into
ssm_in and the five ssm_multipliers into its z, x, B, C and dt rows, ssm_out into
ssm_out, mlp_multipliers into ffn_gate and ffn_down.  None stays a GGUF key that
llama.cpp reads, so none is applied here; a file carrying such keys (the
pre-upstream fork's, whose weights were not folded) is refused by name.  q.k is
scaled by 1/sqrt(head_dim) (llama.cpp's falcon-h1 reads no attention.scale).  The
gated Mamba2 norm is there iff the file has ssm_norm (mamba_rms_norm), and the FFN's
norm tensor is ``blk.N.ffn_norm`` without ".weight", as the converter names it.

Each layer has a KV cache and a Mamba2 state (with Granite 4.0-H's checkpoints, so
truncate_to, copies and saved states stay exact).  Decoding runs through the Python
blocks: the fused C step has no Mamba2 mixer beside attention.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from ..runtime import UnsupportedModelError, register_variant
from .granite_hybrid import attention_shape, mamba2_sizes
from .hparams import HParams, vocab_size
from .rope_scaling import read_rope
from .spec import LayerSpec, TransformerSpec
from .transformer import TransformerEngine


def falcon_h1_spec(gguf_file: Any) -> Tuple[TransformerSpec, HParams, Tuple[str, ...]]:
    """(spec, hparams read, tensors read) of a ``falcon-h1`` file."""
    tensors = gguf_file.tensors
    hp = HParams(gguf_file.metadata)
    n_layers = hp.block_count(tensors)
    dim = hp.integer("embedding_length")
    n_heads = hp.integer("attention.head_count")
    n_kv_heads, head_dim = attention_shape(hp, dim, n_heads, [hp.integer("attention.head_count_kv", n_heads)])
    m2 = mamba2_sizes(hp, gated_norm="blk.0.ssm_norm.weight" in tensors)
    max_seq_len = hp.integer("context_length")
    rope, used = read_rope(hp, tensors, head_dim, "neox", max_seq_len, ())
    if rope.long is not None:
        raise UnsupportedModelError(f"{hp.arch} file: LongRoPE is not implemented", [hp.key("rope.scaling.type")])
    if "blk.0.attn_qkv.weight" in tensors:
        raise UnsupportedModelError(f"{hp.arch} file: a fused attn_qkv is not what the Falcon-H1 converter writes "
                                    "and is not implemented", ["blk.0.attn_qkv.weight"])
    layer = LayerSpec(rope=rope.rope, parallel_mamba2=True)
    spec = TransformerSpec(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        ffn_dim=hp.integer("feed_forward_length"), vocab_size=vocab_size(tensors), max_seq_len=max_seq_len,
        rms_eps=hp.number("attention.layer_norm_rms_epsilon", positive=True),
        layers=(layer,) * n_layers, mamba2=m2, qkv_bias="blk.0.attn_q.bias" in tensors, ffn_norm_bare=True)
    return spec, hp, tuple(used)


class FalconH1Engine(TransformerEngine):
    """A ``falcon-h1`` file's engine."""

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        spec, hp, used = falcon_h1_spec(gguf_file)
        hp.refuse_unread()
        super().__init__(spec, gguf_file, n_threads, also_used=used)


@register_variant("falcon-h1")
def _falcon_h1(gguf_file: Any, n_threads: Optional[int] = None) -> FalconH1Engine:
    return FalconH1Engine(gguf_file, n_threads)
