"""A complete (tiny) infer variant: a byte-level bigram model.

The "model" is one F32 tensor ``bigram.logits`` of shape (vocab, vocab): row t
holds the logits of the token that follows t.  This package's pyproject.toml
declares ``load_bigram`` as the ``infer.variants`` entry point named "bigram"
(the made-up GGUF architecture), so once it is installed everything built on
Context runs it: ``infer.load``, ``generate``, the sampler, ``infer generate``.
docs/variants.md walks through it; tests/test_variant_packages.py installs it.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from infer.runtime import Context, Engine


class BigramEngine(Engine):
    architecture = "bigram"

    def __init__(self, gguf_file: Any) -> None:
        t = gguf_file.tensors["bigram.logits"]
        vocab = int(t.shape[0])
        # A zero-copy view into the memory-mapped file: the weights are never copied.
        self.table = t.data.view(np.float32).reshape(vocab, vocab)
        self.vocab_size = vocab
        self.max_seq_len = int(gguf_file.metadata.get("bigram.context_length", 256))

    def create_context(self, n_ctx: Optional[int] = None, sampler: Any = None) -> "BigramContext":
        return BigramContext(self, self.max_seq_len if n_ctx is None else n_ctx, sampler)

    def close(self) -> None:
        self.table = None  # drop the view so the file map can close


class BigramContext(Context):
    # A bigram model has no KV cache: the next logits depend on the last token only.
    # Context already keeps the token history, checks bounds and drives the sampler.
    def _forward(self, tokens: np.ndarray, start: int) -> None:
        self.logits[:] = self.engine.table[tokens[-1]]


# The entry point (pyproject.toml: [project.entry-points."infer.variants"]).
def load_bigram(gguf_file: Any, n_threads: Optional[int] = None) -> BigramEngine:
    return BigramEngine(gguf_file)


# ---- making a model file --------------------------------------------------------------
def byte_vocabulary() -> list:
    """GPT-2's byte-level alphabet: token i is byte i written as a printable character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_bigram_gguf(path: str, text: str) -> None:
    """Count the byte bigrams of ``text`` and save them as a GGUF model with a
    byte-level BPE vocabulary (256 bytes + "<|endoftext|>", which ends the text)."""
    from infer.gguf import GGUFWriter, ValueType

    data = list(text.encode("utf-8")) + [256]
    vocab = 257
    counts = np.ones((vocab, vocab))                      # add-one smoothing
    np.add.at(counts, (data[:-1], data[1:]), 1.0)
    logits = np.log(counts / counts.sum(axis=1, keepdims=True)).astype(np.float32)

    w = GGUFWriter()
    w.add_metadata("general.architecture", "bigram")
    w.add_metadata("bigram.context_length", 256)
    w.add_metadata("tokenizer.ggml.model", "gpt2")        # byte-level BPE ...
    w.add_metadata("tokenizer.ggml.pre", "default")
    w.add_metadata("tokenizer.ggml.tokens", byte_vocabulary() + ["<|endoftext|>"])
    w.add_metadata("tokenizer.ggml.token_type", [1] * 256 + [3])  # 3 = control token
    w.add_metadata("tokenizer.ggml.merges", [], ValueType.ARRAY, ValueType.STRING)  # ... with no merges
    w.add_metadata("tokenizer.ggml.eos_token_id", 256)
    w.add_metadata("tokenizer.ggml.add_bos_token", False)
    w.add_tensor("bigram.logits", logits)
    w.write(path)


if __name__ == "__main__":
    import sys
    import tempfile

    import infer
    from infer.runtime import register_variant

    register_variant("bigram")(load_bigram)  # in case the package is not installed
    with tempfile.TemporaryDirectory() as tmp:
        path = sys.argv[1] if len(sys.argv) > 1 else f"{tmp}/bigram.gguf"
        write_bigram_gguf(path, "the cat sat on the mat. the dog sat on the log. " * 20)
        with infer.load(path) as model:
            gen = infer.generate(model, "the ", max_tokens=40, temperature=0.7, seed=1)
            for piece in gen:
                sys.stdout.write(piece)
            print(f"\n[{gen.finish_reason}]")
