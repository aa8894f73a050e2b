"""Small vocabularies with the special tokens of real model families, written as
vocab-only GGUF files: the cases of llama.cpp's end-of-generation and
fill-in-the-middle token rules (tests/test_vocab_specials.py), whose ids
scripts/record_vocab_specials.py records from llama.cpp itself.

Each case is the 256 byte-level tokens and one merge ("ab") followed by its special tokens, typed CONTROL
unless listed in ``normal`` (some real files type them so), plus GGUF keys naming
ids (``keys``: key suffix -> token text, or an id past the vocabulary).
"""
import os
from typing import Any, Dict, List

import gguf
import numpy as np

from tiny_models import byte_alphabet

CASES: Dict[str, Dict[str, Any]] = {
    "llama3": dict(specials=["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>",
                             "<|start_header_id|>"],
                   keys={"bos_token_id": "<|begin_of_text|>", "eos_token_id": "<|eot_id|>"}),
    "qwen-coder": dict(specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>",
                                 "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                                 "<|file_sep|>"],
                       keys={"eos_token_id": "<|im_end|>"}),
    "qwen3": dict(specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
                            "</tool_call>"],
                  keys={"eos_token_id": "<|im_end|>"}),
    "qwen-coder-keys": dict(specials=["<|endoftext|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>",
                                      "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<a>",
                                      "<b>", "<c>"],
                            keys={"eos_token_id": "<|endoftext|>", "fim_pre_token_id": "<a>",
                                  "fim_suf_token_id": "<b>", "fim_mid_token_id": "<c>",
                                  "fim_sep_token_id": 100000}),
    "older-keys": dict(specials=["</s>", "<x>", "<y>", "<z>"],
                       keys={"eos_token_id": "</s>", "prefix_token_id": "<x>", "suffix_token_id": "<y>",
                             "middle_token_id": "<z>"}),
    "granite": dict(specials=["<|end_of_text|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>",
                              "<reponame>", "<filename>"],
                    normal=["<fim_pad>"], keys={"eos_token_id": "<|end_of_text|>"}),
    "codellama": dict(specials=["<s>", "</s>", "\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>", "\u2581<EOT>"],
                      normal=["\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>", "\u2581<EOT>"],
                      keys={"bos_token_id": "<s>", "eos_token_id": "</s>"}),
    "deepseek": dict(specials=["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
                               "<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>",
                               "<\uff5cfim\u2581end\uff5c>", "<|EOT|>"],
                     keys={"eos_token_id": "<|EOT|>"}),
    "harmony": dict(specials=["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>",
                              "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>"],
                    keys={"eos_token_id": "<|return|>"}),
    "harmony-no-call": dict(specials=["<|endoftext|>", "<|end|>", "<|return|>"],
                            keys={"eos_token_id": "<|endoftext|>"}),
    "solar-open": dict(specials=["<|endoftext|>", "<|end|>", "<|flush|>", "<|calls|>"],
                       keys={"eos_token_id": "<|endoftext|>"}),
    "gemma4-like": dict(specials=["<pad>", "<eos>", "<bos>", "</s>", "<turn|>", "<|tool_response>"],
                   normal=["</s>"], keys={"eos_token_id": "<eos>", "bos_token_id": "<bos>"}),
    "gemma3-like": dict(specials=["<pad>", "<eos>", "<bos>", "</s>", "<start_of_turn>", "<end_of_turn>"],
                   keys={"eos_token_id": "<eos>", "bos_token_id": "<bos>"}),
    "kimi": dict(specials=["[BOS]", "[EOS]", "[EOT]", "[PAD]", "<|im_end|>"],
                 normal=["[PAD]"], keys={"eos_token_id": "[EOS]"}),
    # one FIM text per role in each: llama.cpp takes the first match in hash order
    "glm": dict(specials=["<|endoftext|>", "<EOT>", "_<EOT>", "<end_of_utterance>", "[e~[", "<|code_prefix|>",
                          "<|code_suffix|>", "<|code_middle|>"],
                keys={"eos_token_id": "<|endoftext|>"}),
    "short-fim": dict(specials=["<|endoftext|>", "<PRE>", "<SUF>", "<MID>", "<PAD>", "<REPO>", "<|flush|>"],
                      keys={"eos_token_id": "<|endoftext|>"}),
}


def tokens_of(case: str) -> List[str]:
    """The case's token texts: the byte alphabet, "ab", then its specials."""
    return byte_alphabet() + ["ab"] + list(CASES[case]["specials"])


def write(case: str, path: str, weights: bool = False) -> str:
    """A llama GGUF of the case at path: vocab-only (llama.cpp loads it with vocab_only),
    or with ``weights``, a runnable one-layer model of random F32 weights (seed 0)."""
    spec = CASES[case]
    tokens = tokens_of(case)
    types = [gguf.TokenType.NORMAL] * 257 + [
        gguf.TokenType.NORMAL if t in spec.get("normal", ()) else gguf.TokenType.CONTROL
        for t in spec["specials"]]
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(4096 if weights else 64)
    w.add_embedding_length(16)
    w.add_block_count(1)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["a b"])  # llama.cpp wants merges
    for key, value in spec.get("keys", {}).items():
        w.add_uint32(f"tokenizer.ggml.{key}", tokens.index(value) if isinstance(value, str) else value)
    w.add_rope_dimension_count(8)
    if weights:
        rng = np.random.default_rng(0)
        n = len(tokens)
        shapes = {"token_embd.weight": (n, 16), "output_norm.weight": (16,), "output.weight": (n, 16),
                  "blk.0.attn_norm.weight": (16,), "blk.0.attn_q.weight": (16, 16), "blk.0.attn_k.weight": (16, 16),
                  "blk.0.attn_v.weight": (16, 16), "blk.0.attn_output.weight": (16, 16),
                  "blk.0.ffn_norm.weight": (16,), "blk.0.ffn_gate.weight": (32, 16), "blk.0.ffn_up.weight": (32, 16),
                  "blk.0.ffn_down.weight": (16, 32)}
        for name, shape in shapes.items():
            value = 1.0 + 0.1 * rng.standard_normal(shape) if len(shape) == 1 else 0.5 * rng.standard_normal(shape)
            w.add_tensor(name, value.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_all(folder: str) -> Dict[str, str]:
    return {case: write(case, os.path.join(folder, f"vocab-{case}.gguf")) for case in CASES}
