"""Tiny random-weight encoder files (GGUF ``bert`` and ``nomic-bert``) with a small
real-looking WordPiece vocabulary, written with the `gguf` package's writer in the
layout llama.cpp's converter gives them (conversion/bert.py, src/models/bert.cpp,
src/models/nomic-bert.cpp, src/llama-arch.cpp):

* the vocabulary in the converter's "phantom space" form: ``▁word`` for a word start,
  ``piece`` for BERT's ``##piece``, control tokens ([PAD] [UNK] [CLS] [SEP] [MASK]) as
  they are, at BERT's ids 0, 100, 101, 102, 103; ``tokenizer.ggml.model`` = "bert";
* ``token_embd``, ``token_types`` (type_vocab_size rows; llama.cpp adds row 0),
  ``position_embd`` (bert only: n_ctx_train rows), ``token_embd_norm`` (weight, bias);
* per layer: bert: separate ``attn_q/k/v`` with biases, ``attn_output`` + bias, GELU
  ``ffn_up``/``ffn_down`` with biases; nomic-bert: one fused ``attn_qkv`` and no
  biases, SwiGLU ``ffn_gate``/``ffn_up``/``ffn_down``, NEOX RoPE; both post-norm
  (``attn_output_norm``, ``layer_output_norm``, LayerNorms with biases);
* ``bert-rank``: a classification head (``cls`` dense + tanh, ``cls.output``), pooling 4.

``BERT`` lists the files; ``write(name, path)`` writes one deterministically.
``HF_VOCAB`` is the same vocabulary in BERT's vocab.txt form (``##piece``), for
the `tokenizers` library's BertWordPieceTokenizer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

#: BERT's vocab.txt layout: [PAD] 0, [unusedN] 1..99, [UNK] 100, [CLS] 101, [SEP] 102,
#: [MASK] 103, then characters, words and word pieces
_WORDS = """the of and to a in is was he for it with as his on be at by i this had not are but from or
have an they which one you were her all she there would their we him been has when who will more no if
out so said what up its about into than them can only other new some could time these two may then do
first any my now such like our over man me even most made after also did many before must through back
years where much your way well down should because each just those people mr how too little state good
very make world still own see men work long get here between both life being under never day same
another know while last might us great old year off come since against go came right used take three
cat cats sat mat dog dogs sit sits sitting on stock stocks fell rose market play played playing
un aff able ##able ##ing ##ed ##s ##es ##ly ##er ##est ##ness ##tion ##ion ##al ##ful ##less
##fa ##ble ##ab ##ff ##un ##ck ##st ##ock ##ay ##pl ##ma ##ket ##ar ##re ##et ##ca ##ts ##at
em ##bed ##ding ##dings query document rank ##ed ##ers hello world caf ##e resume naive
""".split()
_CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789") + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + \
    ["中", "文", "日", "本", "語", "£", "€", "°"]


def _hf_vocab() -> List[str]:
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    seen = set(vocab)
    for tok in _CHARS + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"] + _WORDS:
        if tok not in seen:
            seen.add(tok)
            vocab.append(tok)
    return vocab


HF_VOCAB: List[str] = _hf_vocab()
CONTROL = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}


def gguf_vocabulary() -> tuple[List[str], List[int]]:
    """The converter's phantom-space tokens and token types of HF_VOCAB."""
    tokens, types = [], []
    for tok in HF_VOCAB:
        if tok in CONTROL:
            tokens.append(tok)
            types.append(3)
        else:
            tokens.append(tok[2:] if tok.startswith("##") else "\u2581" + tok)
            types.append(1)
    return tokens, types


@dataclass(frozen=True)
class TinyEncoder:
    arch: str
    seed: int
    dim: int = 64
    n_head: int = 4
    n_layer: int = 2
    ffn: int = 128
    n_ctx_train: int = 64
    pooling: Optional[int] = 1
    type_vocab: int = 2
    rope_base: float = 1000.0
    eps: float = 1e-12
    #: a classification head of this many labels (pooling 4, "rank")
    cls_out: int = 0
    extra: Dict[str, Any] = field(default_factory=dict)


BERT: Dict[str, TinyEncoder] = {
    "bert": TinyEncoder("bert", seed=71, pooling=1),
    "bert-cls": TinyEncoder("bert", seed=72, pooling=2, type_vocab=1),
    "nomic-bert": TinyEncoder("nomic-bert", seed=73, pooling=1, eps=1e-12),
    "bert-rank": TinyEncoder("bert", seed=74, pooling=4, cls_out=1),
}

#: texts whose pooled embeddings llama.cpp recorded (tests/data/llama_cpp_bert.npz)
TEXTS = (
    "A cat sits on the mat.",
    "Stocks fell as the market rose; the dog played.",
    "Hello, world! Embeddings of the café résumé (naïve).",
    "中文 and 日本語 are un##able to sit 42 times",
    "",
)
#: tricky texts whose ids (and detokenized text) llama.cpp recorded
#: (tests/data/llama_cpp_bert_tokens.json): accents, punctuation, CJK, digits, long and
#: unknown words, controls, whitespace, special-token texts, Hangul (llama.cpp's NFD keeps
#: only a syllable's first jamo), a word past BERT's 100-character limit (llama.cpp has none)
TOKENIZE_TEXTS = TEXTS + (
    "Ünïcödé ÀÉÎ façade", "supercalifragilisticexpialidocious", "x" * 150, "  tabs\tand\nnewlines  ",
    "it's 3.14 $5 <tag> a|b ~c `d` ^e", "[CLS] hello [SEP] [MASK]", "İstanbul ǅ ß ﬁ", "한국어 zürich",
    "\u0000\ufffd\u200b zero", "cats playing unable", "he 's fine , we 're here . ok ? yes ! a ' b",
    "12345 1,000.5 e-mail@x.org", "…—“quotes”« »", "zzzq qqq",
)
#: texts that the `tokenizers` library's BertWordPieceTokenizer cuts differently (it
#: reads special-token texts always, and makes a word of over 100 characters [UNK])
NOT_LIKE_HF = ("x" * 150, "[CLS] hello [SEP] [MASK]")

def fuzz_texts(n: int = 300, seed: int = 5) -> List[str]:
    """Seeded random texts over the code-point blocks the normalisation treats apart
    (ASCII, Latin-1 and accents, combining marks, Greek/Cyrillic, general punctuation
    and spaces, CJK, Hangul, full-width forms, emoji, C0 controls); llama.cpp's ids of
    them are recorded beside TOKENIZE_TEXTS'."""
    import random

    rng = random.Random(seed)
    blocks = [(0x20, 0x7F), (0xA0, 0x250), (0x300, 0x370), (0x370, 0x530), (0x2000, 0x2070), (0x3000, 0x3100),
              (0x4E00, 0x4F00), (0xAC00, 0xAC40), (0xFF00, 0xFF60), (0x1F600, 0x1F640), (0x0, 0x20)]
    texts = []
    for _ in range(n):
        picks = [rng.choice(blocks) for _ in range(rng.randint(0, 25))]
        texts.append("".join(chr(rng.randrange(lo, hi)) for lo, hi in picks))
    return texts


#: the (query, document) pairs whose rerank scores llama.cpp recorded
RANK_QUERY = "what did the cat do"
RANK_DOCUMENTS = ("the cat sat on the mat.", "stocks fell.", "a dog played with the cats", "")


def write(name: str, path: str, tiny: Optional[TinyEncoder] = None, matrix_type: str = "f16",
          drop: tuple = (), more_tensors: Optional[Dict[str, np.ndarray]] = None) -> str:
    """Write BERT[name] (or ``tiny``) to path with its matrices in ``matrix_type``
    ("f32", "f16" or "q8_0"); ``drop`` leaves tensors out (hostile files)."""
    import gguf

    t = tiny or BERT[name]
    rng = np.random.default_rng(t.seed)
    d, L, ff = t.dim, t.n_layer, t.ffn
    tokens, types = gguf_vocabulary()
    nomic = t.arch == "nomic-bert"
    tensors: Dict[str, Any] = {}

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(n, s=0.2):
        return (s * rng.standard_normal(n)).astype(np.float32)

    tensors["token_embd.weight"] = mat(len(tokens), d, gain=math.sqrt(d))
    tensors["token_types.weight"] = mat(t.type_vocab, d, gain=0.5 * math.sqrt(d))
    if not nomic:
        tensors["position_embd.weight"] = mat(t.n_ctx_train, d, gain=0.5 * math.sqrt(d))
    tensors["token_embd_norm.weight"] = norm(d)
    tensors["token_embd_norm.bias"] = bias(d)
    for i in range(L):
        p = f"blk.{i}."
        if nomic:
            tensors[p + "attn_qkv.weight"] = mat(3 * d, d, gain=2.0)
        else:
            for part in ("q", "k", "v"):
                tensors[p + f"attn_{part}.weight"] = mat(d, d, gain=2.0 if part != "v" else 1.0)
                tensors[p + f"attn_{part}.bias"] = bias(d)
        tensors[p + "attn_output.weight"] = mat(d, d)
        if not nomic:
            tensors[p + "attn_output.bias"] = bias(d)
        tensors[p + "attn_output_norm.weight"] = norm(d)
        tensors[p + "attn_output_norm.bias"] = bias(d)
        if nomic:
            tensors[p + "ffn_gate.weight"] = mat(ff, d, gain=2.0)
        tensors[p + "ffn_up.weight"] = mat(ff, d, gain=2.0)
        tensors[p + "ffn_down.weight"] = mat(d, ff)
        if not nomic:
            tensors[p + "ffn_up.bias"] = bias(ff)
            tensors[p + "ffn_down.bias"] = bias(d)
        tensors[p + "layer_output_norm.weight"] = norm(d)
        tensors[p + "layer_output_norm.bias"] = bias(d)
    if t.cls_out:
        tensors["cls.weight"] = mat(d, d, gain=2.0)
        tensors["cls.bias"] = bias(d)
        tensors["cls.output.weight"] = mat(t.cls_out, d, gain=2.0)
        tensors["cls.output.bias"] = bias(t.cls_out)
    tensors.update(more_tensors or {})

    w = gguf.GGUFWriter(path, t.arch)
    a = t.arch
    w.add_string("general.name", f"tiny-{name}")
    w.add_uint32(f"{a}.context_length", t.n_ctx_train)
    w.add_uint32(f"{a}.embedding_length", d)
    w.add_uint32(f"{a}.feed_forward_length", ff)
    w.add_uint32(f"{a}.block_count", L)
    w.add_uint32(f"{a}.attention.head_count", t.n_head)
    w.add_float32(f"{a}.attention.layer_norm_epsilon", t.eps)
    w.add_bool(f"{a}.attention.causal", False)
    if t.pooling is not None:  # None: no key, as the converter writes a BERT reranker
        w.add_uint32(f"{a}.pooling_type", t.pooling)
    if nomic:
        w.add_float32(f"{a}.rope.freq_base", t.rope_base)
    if t.cls_out:
        w.add_array(f"{a}.classifier.output_labels", [f"LABEL_{i}" for i in range(t.cls_out)])
    w.add_uint32("tokenizer.ggml.token_type_count", t.type_vocab)
    w.add_string("tokenizer.ggml.model", t.extra.get("tokenizer.ggml.model", "bert"))
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_uint32("tokenizer.ggml.unknown_token_id", tokens.index("[UNK]"))
    w.add_uint32("tokenizer.ggml.seperator_token_id", tokens.index("[SEP]"))
    w.add_uint32("tokenizer.ggml.padding_token_id", tokens.index("[PAD]"))
    w.add_uint32("tokenizer.ggml.cls_token_id", tokens.index("[CLS]"))
    w.add_uint32("tokenizer.ggml.mask_token_id", tokens.index("[MASK]"))
    w.add_uint32("tokenizer.ggml.bos_token_id", tokens.index("[CLS]"))
    for k, v in t.extra.items():
        if k != "tokenizer.ggml.model":
            w.add_uint32(k, v) if isinstance(v, int) else w.add_string(k, v)
    for tname, arr in tensors.items():
        if tname in drop:
            continue
        # token_types stays F32 as the converter writes it (llama.cpp adds its row 0 with a plain F32 add)
        is_matrix = arr.ndim == 2 and not tname.endswith(("norm.weight", ".bias")) and tname != "token_types.weight"
        if is_matrix and matrix_type == "q8_0" and arr.shape[-1] % 32 == 0:
            import tiny_models

            w.add_tensor(tname, tiny_models.quantize(arr, "q8_0"), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        elif is_matrix and matrix_type in ("f16", "q8_0"):
            w.add_tensor(tname, arr.astype(np.float16))
        else:
            w.add_tensor(tname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def sha256(path: str) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
