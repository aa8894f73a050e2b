"""The Llama-shaped families on tiny random-weight files (tests/tiny_models.py):
qwen2 (+YaRN), qwen3, phi3 (LongRoPE, partial rotary, fused tensors), gemma2
(soft-capping, windows), llama (llama3 rope_freqs, linear scaling), smollm3
(NoPE layers), granite (multipliers), and the dense families of
``tiny_models.DENSE``: olmo2 (OLMo 2, and OLMo 3's windows), exaone4 (and its
64-layer windows with NoPE), exaone, ernie4_5, gemma, and ``tiny_models.MISTRAL3``
(Ministral 3's YaRN and attention temperature); against two independent
references:

* tests/reference/numpy_families.py, a float64 numpy forward pass per family;
* llama.cpp's own teacher-forced logits on the same files
  (tests/data/llama_cpp_families.npz for ``TINY``, llama_cpp_dense.npz for
  ``DENSE``, llama_cpp_mistral3.npz for ``MISTRAL3``; see tests/data/README.md).

The two references are first checked against each other, which validates both.
Then each variant: its decode (the fused C step where the spec fits it, and the
Python blocks) and its batched prefill against the numpy reference at every
position, and against llama.cpp at the recorded ones.

The weights are F16, whose products infer computes with F32 activations, so the
only rounding infer adds to the float64 reference is float32 arithmetic and the
F16 KV cache: held to cosine >= 0.99999 and the reference's top-1 wherever it
is clear.  llama.cpp also rounds every activation to F16 before its F16
products (and the attention probabilities before P.V), so infer is held to its
logits as the reference is (LLAMA_CPP_MIN_COS).
"""
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import assert_agrees, check, recorded_logits, recording, tiny_file
from reference import numpy_dense2  # noqa: F401  (adds glm4 and cohere2 to the references)
from reference.numpy_families import reference
from scripted import GreedySampler

import infer

#: LFM2's files are tests/test_lfm2.py's (recorded in llama_cpp_lfm2.npz), Gemma 4's
#: test_gemma4.py's, Qwen3.5's test_qwen35.py's, Granite 4.0-H's test_granite_hybrid.py's, Apertus's
#: test_arcee_apertus.py's (its F16 KV cache rounds more), Phi-2's, StarCoder2's and Nemotron-H's
#: test_families3.py's; the mixtures of experts have their own tests (test_moe.py) and llama.cpp data
NAMES = [n for n, t in tm.ALL.items() if not t.n_expert and n not in tm.LFM2 and n not in tm.GEMMA4
         and n != "apertus" and n not in tm.QWEN35 and n not in tm.GRANITE_HYBRID and n not in tm.FAMILIES3]
#: the files whose spec the fused C decode step computes (csrc/transformer_block.c: all)
FUSED = set(NAMES)
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
#: where each file's llama.cpp logits are recorded
DATA = {**{name: os.path.join(DATA_DIR, "llama_cpp_families.npz") for name in tm.TINY},
        **{name: os.path.join(DATA_DIR, "llama_cpp_dense.npz") for name in tm.DENSE},
        **{name: os.path.join(DATA_DIR, "llama_cpp_lfm2moe.npz") for name in tm.ARCEE},
        **{name: os.path.join(DATA_DIR, "llama_cpp_mistral3.npz") for name in tm.MISTRAL3},
        **{name: os.path.join(DATA_DIR, "llama_cpp_dense2.npz") for name in tm.DENSE2}}


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny")


_refs = {}


def reference_logits(name, tiny_dir):
    """(T, vocab) float64 logits of the prompt, computed once per file."""
    if name not in _refs:
        _refs[name] = reference(tiny_file(name, tiny_dir), tm.ALL[name].n_ctx).forward(tm.prompt(name))
    return _refs[name]


@pytest.mark.parametrize("python", [False, True], ids=["default", "python"])
@pytest.mark.parametrize("name", NAMES)
def test_decode_matches_reference_at_every_position(name, python, tiny_dir):
    """One token at a time over the whole prompt: the context's own decode path (the
    fused C step for specs it computes, see FUSED) and the Python blocks."""
    t = tm.ALL[name]
    ref = reference_logits(name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        assert model.engine.architecture == t.arch
        ctx = model.engine.create_context(n_ctx=t.n_ctx, sampler=GreedySampler())
        assert ctx.fused_decode == (name in FUSED)
        if python:
            ctx.fused_decode = False
        for i, tok in enumerate(tm.prompt(name)):
            ctx.prefill([int(tok)])  # one token: the fused C step, or the Python blocks
            check(ctx.logits, ref[i], f"position {i}", 0.99999)


@pytest.mark.parametrize("name", NAMES)
def test_batched_prefill_matches_reference(name, tiny_dir):
    """Prefill through the matrix-matrix kernels: one batch crossing the 512-token
    chunk, then a second batch continuing the first."""
    t = tm.ALL[name]
    prompt = tm.prompt(name)
    ref = reference_logits(name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=t.n_ctx, sampler=GreedySampler())
        for n in sorted({1, 37, min(513, len(prompt)), len(prompt)}):
            ctx.truncate_to(0)
            ctx.prefill(prompt[:n])
            check(ctx.logits, ref[n - 1], f"position {n - 1}", 0.99999)
        ctx.truncate_to(0)
        half = len(prompt) // 2
        ctx.prefill(prompt[:half])
        ctx.prefill(prompt[half:])
        check(ctx.logits, ref[-1], "last position, second batch", 0.99999)


# ---- llama.cpp -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def recorded():
    """name -> the arrays of the npz holding its recording."""
    return lambda name: recording(DATA[name])


def _recorded(recorded_of, name, tiny_dir):
    return recorded_logits(recorded_of(name), name, tiny_file(name, tiny_dir))


@pytest.mark.parametrize("name", NAMES)
def test_reference_agrees_with_llama_cpp(name, recorded, tiny_dir):
    """The numpy reference against llama.cpp: validates both readings of the family."""
    positions, theirs = _recorded(recorded, name, tiny_dir)
    ref = reference_logits(name, tiny_dir)[positions]
    assert_agrees(ref, theirs, positions, name, top1_of=ref)


@pytest.mark.parametrize("name", NAMES)
def test_variant_agrees_with_llama_cpp(name, recorded, tiny_dir):
    """infer's fused decode against llama.cpp at the recorded positions."""
    t = tm.ALL[name]
    positions, theirs = _recorded(recorded, name, tiny_dir)
    prompt = tm.prompt(name)
    ours = np.zeros((len(prompt), theirs.shape[1]))
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=t.n_ctx, sampler=GreedySampler())
        for i, tok in enumerate(prompt):
            ctx.prefill([int(tok)])
            ours[i] = ctx.logits
    assert_agrees(ours[positions], theirs, positions, name)
