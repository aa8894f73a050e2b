"""The Llama-shaped families on tiny random-weight files (tests/tiny_models.py):
qwen2 (+YaRN), qwen3, phi3 (LongRoPE, partial rotary, fused tensors), gemma2
(soft-capping, windows), llama (llama3 rope_freqs, linear scaling), smollm3
(NoPE layers), granite (multipliers), and the dense families of
``tiny_models.DENSE``: olmo2 (OLMo 2, and OLMo 3's windows), exaone4 (and its
64-layer windows with NoPE), exaone, ernie4_5, gemma; against two independent
references:

* tests/reference/numpy_families.py, a float64 numpy forward pass per family;
* llama.cpp's own teacher-forced logits on the same files
  (tests/data/llama_cpp_families.npz for ``TINY``, llama_cpp_dense.npz for
  ``DENSE``; see tests/data/README.md).

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
from reference.numpy_families import reference

import infer
from scripted import GreedySampler


#: LFM2's files are tests/test_lfm2.py's (recorded in llama_cpp_lfm2.npz), Gemma 4's
#: test_gemma4.py's; the mixtures of experts have their own tests (test_moe.py) and llama.cpp data
NAMES = [n for n, t in tm.ALL.items() if not t.n_expert and n not in tm.LFM2 and n not in tm.GEMMA4]
#: the files whose spec the fused C decode step computes (csrc/transformer_block.c: all)
FUSED = set(NAMES)
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
#: where each file's llama.cpp logits are recorded
DATA = {**{name: os.path.join(DATA_DIR, "llama_cpp_families.npz") for name in tm.TINY},
        **{name: os.path.join(DATA_DIR, "llama_cpp_dense.npz") for name in tm.DENSE}}


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny")


_files, _refs = {}, {}


def tiny_file(name, tiny_dir):
    if name not in _files:
        _files[name] = tm.write(name, str(tiny_dir / f"{name}.gguf"))
    return _files[name]


def reference_logits(name, tiny_dir):
    """(T, vocab) float64 logits of the prompt, computed once per file."""
    if name not in _refs:
        _refs[name] = reference(tiny_file(name, tiny_dir), tm.ALL[name].n_ctx).forward(tm.prompt(name))
    return _refs[name]


def cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def clear_top1(ref, margin=0.05):
    """Positions whose reference top-1 leads the runner-up by more than margin
    (a near-tie may flip under any rounding; random weights make a few)."""
    s = np.sort(ref, axis=-1)
    return s[..., -1] - s[..., -2] > margin


def check(logits, ref, where, min_cos):
    c = cosine(logits, ref)
    assert c >= min_cos, f"cosine {c:.7f} at {where}"
    if clear_top1(ref):
        assert int(np.argmax(logits)) == int(np.argmax(ref)), f"top-1 differs at {where}"
    return c


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
_loaded = {}


@pytest.fixture(scope="module")
def recorded():
    """name -> the npz holding its recording (loaded once per file)."""
    def of(name):
        path = DATA[name]
        if not os.path.exists(path):
            pytest.skip("no recorded llama.cpp logits (tests/data/README.md says how to make them)")
        if path not in _loaded:
            _loaded[path] = dict(np.load(path))
        return _loaded[path]
    return of


def _recorded(recorded_of, name, tiny_dir):
    recorded = recorded_of(name)
    path = tiny_file(name, tiny_dir)
    assert str(recorded[f"{name}/sha256"]) == tm.sha256(path), (
        f"{name}: the tiny file differs from the one llama.cpp was run on; re-record "
        "(tests/data/README.md)")
    return recorded[f"{name}/positions"], recorded[f"{name}/logits"].astype(np.float64)


#: llama.cpp rounds each activation to F16 before an F16 product, and its rope
#: angles are float32 products; on these files that moves the logits to a cosine
#: of 0.99998 from the float64 reference at worst (tests/data/README.md), and the
#: float16 storage of its logits adds ~1e-7.
LLAMA_CPP_MIN_COS = 0.99995


@pytest.mark.parametrize("name", NAMES)
def test_reference_agrees_with_llama_cpp(name, recorded, tiny_dir):
    """The numpy reference against llama.cpp: validates both readings of the family."""
    positions, theirs = _recorded(recorded, name, tiny_dir)
    ref = reference_logits(name, tiny_dir)[positions]
    cos = [cosine(a, b) for a, b in zip(ref, theirs)]
    assert min(cos) >= LLAMA_CPP_MIN_COS, (name, min(cos), int(positions[int(np.argmin(cos))]))
    clear = clear_top1(ref)
    agree = np.argmax(ref, -1)[clear] == np.argmax(theirs, -1)[clear]
    assert agree.all(), (name, positions[clear][~agree])


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
    cos = [cosine(a, b) for a, b in zip(ours[positions], theirs)]
    assert min(cos) >= LLAMA_CPP_MIN_COS, (name, min(cos), int(positions[int(np.argmin(cos))]))
