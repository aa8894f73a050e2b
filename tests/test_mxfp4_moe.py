"""A mixture of experts whose experts are MXFP4 (tiny_models.MXFP4: qwen3moe-q4_k's
shapes, 8 experts of width 256, 2 used; the stacked expert tensors quantized by the
gguf package, as llama-quantize's MXFP4_MOE stores gpt-oss's), against:

* the float64 numpy reference of tests/reference/numpy_families.py, following infer's
  choices of experts only at the reference's near-ties (tests/test_moe.py);
* llama.cpp's teacher-forced logits on the same file (tests/data/llama_cpp_mxfp4.npz,
  tests/data/README.md), computed by ggml's own MXFP4 kernels.

Each expert is a row_slice of the stacked tensor: its rows start at odd byte offsets
(17-byte blocks) and are multiplied in place, by prefill and by the fused C step.
"""
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import cosines, recorded_logits, recording, tiny_file
from reference.numpy_families import reference
from scripted import GreedySampler
from test_moe import MAX_FOLLOWED, RoutingRecorder, reference_following

import infer

NAME = "qwen3moe-mxfp4"
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_mxfp4.npz")
#: MXFP4 experts take Q8_0 activations (one scale per 32), which the reference does
#: not round: measured 0.99922 at worst, median 0.99990 (Q4_K's file: 0.9971, 0.99976)
MIN_COS, MEDIAN_COS = 0.999, 0.9998
#: the router-logit gap below which the reference may take infer's choice (as Q8_0's)
FOLLOW_GAP = 0.3
#: llama.cpp's choices cannot be followed: at most this many recorded positions after
#: the reference's first near-tie may be off (test_moe's rule for quantized experts)
LLAMA_CPP_MIN_COS = 0.999


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return tiny_file(NAME, tmp_path_factory.mktemp("tiny_mxfp4"))


def test_file_has_mxfp4_experts(path):
    with infer.load(path) as model:
        layer = model.engine.live_weights().layers[0]
        assert [int(m.file_qtype) for m in (layer.w_gate, layer.w_up, layer.w_down)] == [39] * 3


def test_prefill_matches_reference(path, monkeypatch):
    prompt = tm.prompt(NAME)
    with infer.load(path) as model:
        recorder = RoutingRecorder(monkeypatch, model.engine)
        ours = np.array(model.engine.create_context(n_ctx=tm.ALL[NAME].n_ctx).prefill(prompt, all_logits=True))
    ref, followed, disagreed, _ = reference_following(path, prompt, recorder.follow(), FOLLOW_GAP)
    assert disagreed == 0 and followed <= MAX_FOLLOWED, (disagreed, followed)
    cos = cosines(ours, ref)
    assert cos.min() >= MIN_COS and np.median(cos) >= MEDIAN_COS, (cos.min(), np.median(cos))


def test_fused_decode_matches_prefill(path):
    """One token at a time through the fused C step (moe_ffn on MXFP4 expert rows)."""
    prompt = tm.prompt(NAME)[:40]
    with infer.load(path) as model:
        whole = np.array(model.engine.create_context(n_ctx=64).prefill(prompt, all_logits=True))
        ctx = model.engine.create_context(n_ctx=64, sampler=GreedySampler())
        assert ctx.fused_decode
        ours = np.zeros_like(whole)
        for i, tok in enumerate(prompt):
            ctx.prefill([int(tok)])
            ours[i] = ctx.logits
    np.testing.assert_allclose(ours, whole, rtol=0, atol=1e-4)


def test_agrees_with_llama_cpp(path):
    positions, theirs = recorded_logits(recording(DATA), NAME, path)
    with infer.load(path) as model:
        ours = np.asarray(model.engine.create_context(n_ctx=tm.ALL[NAME].n_ctx).prefill(
            tm.prompt(NAME), all_logits=True))[positions]
    cos = cosines(ours, theirs)
    ref = reference(path)
    ref.forward(tm.prompt(NAME))
    first_tie = int(np.argmax(np.stack(list(ref.gaps.values())).min(0) < 0.05))
    off = positions[cos < LLAMA_CPP_MIN_COS]
    assert all(p >= first_tie for p in off) and len(off) <= 2, (first_tie, off, cos.min())
    assert np.median(cos) >= 0.9999, np.median(cos)


def test_quantize_mxfp4_moe(tmp_path):
    """`infer quantize --type mxfp4_moe` as llama-quantize's MXFP4_MOE (src/llama-quant.cpp):
    the stacked expert tensors MXFP4, the output head and every other matrix Q8_0, the
    router and norms kept; the experts' bytes are the gguf package's MXFP4 of the F16
    source, and the file runs as its float64 reference reads it."""
    import gguf

    from infer.gguf import GGUFFile
    from infer.quantize import quantize_file

    src = tm.write("qwen3moe", str(tmp_path / "f16.gguf"))
    dst = str(tmp_path / "mxfp4.gguf")
    quantize_file(src, dst, "mxfp4_moe")
    with GGUFFile(src) as f, GGUFFile(dst) as g:
        assert g.metadata["general.file_type"] == 38
        for name, t in g.tensors.items():
            s = f.tensors[name]
            want = ("MXFP4" if name.endswith("_exps.weight") else "Q8_0" if s.dtype.name == "F16" else s.dtype.name)
            assert t.dtype.name == want, (name, t.dtype.name)
        experts = f.tensors["blk.1.ffn_down_exps.weight"]
        np.testing.assert_array_equal(
            g.tensors["blk.1.ffn_down_exps.weight"].data,
            gguf.quants.quantize(experts.to_f32(), gguf.GGMLQuantizationType.MXFP4).reshape(-1))
    prompt = tm.prompt("qwen3moe")[:48]
    with infer.load(dst) as model:
        ours = model.engine.create_context(n_ctx=64).prefill(prompt, all_logits=True)
    cos = cosines(ours, reference(dst).forward(prompt))
    assert cos.min() >= 0.99 and np.median(cos) >= 0.9995, (cos.min(), np.median(cos))
