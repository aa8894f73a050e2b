"""Mixtures of experts (qwen3moe, granitemoe, olmoe, qwen2moe) on tiny random-weight files
(tests/tiny_models.py: 8 or 16 experts of width 128 or 256, 2 or 4 used; F16,
Q8_0 and Q4_K experts), against two independent references:

* tests/reference/numpy_families.py, a float64 numpy forward pass (`Experts`);
* llama.cpp's teacher-forced logits on the same files
  (tests/data/llama_cpp_moe.npz, tests/data/README.md).

Routing near-ties.  Where the router logits of the last expert chosen and the
first left out are close, a rounding difference picks the other expert, and
from there the two computations differ (a different expert's output, then the
K/V rows later positions attend to).  The prompts were chosen so that the
reference's smallest such gap is as large as 60 seeds allowed (checked below),
and the comparison with the reference is made exact despite the rest: infer's
choices are recorded, and at a position where they differ from the
reference's the reference takes infer's only if its gap there is below
`FOLLOW_GAP` (a near-tie; both choices are right); any other difference fails
the test, and the number of followed choices is held small.
"""
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import (assert_batched_equals_alone, assert_scheduler_batches_like_alone, cosines, recorded_logits,
                           recording, tiny_file)
from reference.numpy_families import reference
from scripted import GreedySampler

import infer
import infer.variants.transformer as transformer
from infer import UnsupportedModelError
from infer.gguf import GGUFError

NAMES = [n for n, t in tm.TINY.items() if t.n_expert]
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_moe.npz")
#: a router-logit gap below which rounding may decide the choice of experts: F16
#: products round their activations to F16 (and quantized experts theirs to 8
#: bits), which moves the router logits by up to ~0.02 (F16) and ~0.2 (Q4_K)
FOLLOW_GAP = {"f16": 0.05, "q8_0": 0.3, "q4_k": 0.3}
#: cosine of infer's logits to the float64 reference at every position: F16
#: experts add float32 rounding only; quantized ones quantize their inputs
#: (Q8_0 to Q8_0, Q4_K to Q8_K, one scale per 256), which the reference does not
#: (measured: Q8_0 0.99926 at worst, median 0.99991; Q4_K 0.9971, median 0.99976)
MIN_COS = {"f16": 0.99999, "q8_0": 0.999, "q4_k": 0.995}
MEDIAN_COS = 0.9995
#: near-ties the reference may follow infer on: 0-1 on the F16 files, 4 on Q4_K
MAX_FOLLOWED = 6


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny_moe")


class RoutingRecorder:
    """Records the experts infer's `route` chooses, by layer and position, while
    a model runs (prefill: one call per layer with every position; decode: one
    position per call, at ``position``)."""

    def __init__(self, monkeypatch, engine):
        self.routers = [layer.router for layer in engine.live_weights().layers]
        self.choices = {}
        self.position = 0
        real = transformer.route

        def route(h, router, moe, *bias):
            experts, weights = real(h, router, moe, *bias)
            layer = next(i for i, r in enumerate(self.routers) if r is router)
            for row, chosen in enumerate(experts):
                self.choices.setdefault(layer, {})[self.position + row] = tuple(int(e) for e in chosen)
            return experts, weights

        monkeypatch.setattr(transformer, "route", route)

    def follow(self):
        return {layer: (list(by_pos), list(by_pos.values())) for layer, by_pos in self.choices.items()}


def reference_following(path, tokens, follow, gap):
    """The reference's logits, following infer's choices (RoutingRecorder.follow)
    at near-ties only."""
    ref = reference(path)
    ref.follow, ref.follow_gap = follow, gap
    logits = ref.forward(tokens)
    return logits, getattr(ref, "followed", 0), getattr(ref, "disagreed", 0), ref


@pytest.mark.parametrize("name", NAMES)
def test_reference_gaps_are_as_chosen(name, tiny_dir):
    """The prompts keep every choice of experts clear of a tie (the test data's
    premise); and the experts matter: renormalising the weights or not (the
    other choice than the architecture's) moves the logits far from the reference."""
    t = tm.TINY[name]
    ref = reference(tiny_file(name, tiny_dir))
    logits = ref.forward(tm.prompt(name))
    smallest = min(float(g.min()) for g in ref.gaps.values())
    assert smallest > 0.003, smallest
    assert len(ref.gaps) == t.n_layer
    other = reference(tiny_file(name, tiny_dir))
    other.norm_topk = not other.norm_topk
    assert cosines(other.forward(tm.prompt(name)), logits).min() < 0.999


@pytest.mark.parametrize("name", NAMES)
def test_prefill_matches_reference_at_every_position(name, tiny_dir, monkeypatch):
    t = tm.TINY[name]
    prompt = tm.prompt(name)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        assert model.engine.architecture == t.arch
        assert model.engine.spec.moe.n_experts == t.n_expert
        ctx = model.engine.create_context(n_ctx=t.n_ctx, sampler=GreedySampler())
        assert ctx.fused_decode   # decoding goes through the C step; prefill through the Python blocks
        recorder = RoutingRecorder(monkeypatch, model.engine)
        ours = np.array(ctx.prefill(prompt, all_logits=True), np.float64)
    assert sorted(recorder.choices) == list(range(t.n_layer))
    ref, followed, disagreed, _ = reference_following(
        tiny_file(name, tiny_dir), prompt, recorder.follow(), FOLLOW_GAP[t.expert_type])
    assert disagreed == 0
    assert followed <= MAX_FOLLOWED, followed
    cos = cosines(ours, ref)
    assert cos.min() >= MIN_COS[t.expert_type], (cos.min(), int(cos.argmin()))
    assert np.median(cos) >= MEDIAN_COS
    if t.expert_type == "f16":
        assert np.abs(ours - ref).max() < 0.05   # the dense families: 0.027 at worst


@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
@pytest.mark.parametrize("name", ["qwen3moe", "granitemoe", "olmoe", "qwen2moe", "qwen3moe-q4_k"])
def test_decode_matches_prefill_and_reference(name, python, tiny_dir, monkeypatch):
    """One token at a time, through the fused C step (csrc/transformer_block.c,
    moe_ffn) or the Python blocks: the logits of the batched prefill (the same
    bits on this machine's kernels; held to 1e-4, far below any routing gap of
    these prompts, so the choices of experts are the prefill's), and so the
    reference following the prefill's choices at every position."""
    t = tm.TINY[name]
    prompt = tm.prompt(name)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        recorder = RoutingRecorder(monkeypatch, model.engine)
        whole = np.array(model.engine.create_context(n_ctx=t.n_ctx).prefill(prompt, all_logits=True))
        follow = recorder.follow()   # the prefill's choices (decoding in Python records more)
        ctx = model.engine.create_context(n_ctx=t.n_ctx, sampler=GreedySampler())
        ctx.fused_decode = not python
        ours = np.zeros_like(whole)
        for i, tok in enumerate(prompt):
            ctx.prefill([int(tok)])
            ours[i] = ctx.logits
    np.testing.assert_allclose(ours, whole, rtol=0, atol=1e-4)
    ref, followed, disagreed, _ = reference_following(
        tiny_file(name, tiny_dir), prompt, follow, FOLLOW_GAP[t.expert_type])
    assert disagreed == 0 and followed <= MAX_FOLLOWED
    assert cosines(ours, ref).min() >= MIN_COS[t.expert_type]


@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
@pytest.mark.parametrize("name", ["qwen3moe", "granitemoe", "olmoe", "qwen2moe"])
def test_batched_decode_equals_one_at_a_time(name, python, tiny_dir):
    """Engine.forward_batch (what `infer serve` steps) over three conversations
    at different positions, through the fused C step or the Python blocks in one
    pass, gives each the logits (bit for bit) and greedy tokens of decoding it
    alone."""
    t = tm.TINY[name]
    prompt = tm.prompt(name)
    starts = [prompt[:5], prompt[20:61], prompt[100:117]]
    n_steps = 12
    with infer.load(tiny_file(name, tiny_dir)) as model:
        assert_batched_equals_alone(model.engine, starts, n_steps, t.n_ctx, fused=not python)


def test_the_server_scheduler_decodes_them_together(tiny_dir):
    """`infer serve`'s scheduler: four requests decoded together (batched steps
    through Engine.forward_batch) give each the greedy tokens it gets alone."""
    prompt = tm.prompt("qwen3moe")
    prompts = [[int(t) for t in prompt[i * 30:i * 30 + 7 + 5 * i]] for i in range(4)]
    with infer.load(tiny_file("qwen3moe", tiny_dir)) as model:
        assert_scheduler_batches_like_alone(model, prompts, 256, 10)


def test_generate_and_chat_run(tiny_dir):
    """The user paths: infer.generate, a chat session, create_completion."""
    path = tiny_file("qwen3moe", tiny_dir)
    with infer.load(path) as model:
        text = "".join(infer.generate(model, "The quick brown fox", max_tokens=8, temperature=0))
        again = "".join(infer.generate(model, "The quick brown fox", max_tokens=8, temperature=0))
        assert text == again and text
        out = model.create_completion("Hello world", max_tokens=4, temperature=0)
        assert out["choices"][0]["text"] and out["usage"]["completion_tokens"] == 4


# ---- llama.cpp -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def recorded():
    return recording(DATA)


def _recorded(recorded, name, tiny_dir):
    return recorded_logits(recorded, name, tiny_file(name, tiny_dir))


#: llama.cpp rounds activations to F16 before F16 products (and to 8 bits before
#: quantized ones, as infer does), and keeps its logits as float16 here
LLAMA_CPP_MIN_COS = {"f16": 0.99995, "q8_0": 0.9995, "q4_k": 0.999}


@pytest.mark.parametrize("name", [n for n in NAMES if tm.TINY[n].expert_type == "f16"])
def test_reference_agrees_with_llama_cpp(name, recorded, tiny_dir):
    """The float64 reference against llama.cpp on F16 experts: validates both
    readings of the architecture (routing, renormalisation, expert layout)."""
    positions, theirs = _recorded(recorded, name, tiny_dir)
    ref = reference(tiny_file(name, tiny_dir)).forward(tm.prompt(name))[positions]
    cos = cosines(ref, theirs)
    assert cos.min() >= LLAMA_CPP_MIN_COS["f16"], (name, cos.min(), int(positions[int(np.argmin(cos))]))


@pytest.mark.parametrize("name", NAMES)
def test_infer_agrees_with_llama_cpp(name, recorded, tiny_dir):
    """infer's logits against llama.cpp's at the recorded positions.  llama.cpp's
    choices of experts cannot be followed as the reference's are, so on
    quantized experts (whose 8-bit inputs move the router logits by up to ~0.2)
    a position after the reference's first near-tie (gap < 0.05) may have taken
    the other branch: those are counted and must be few; every position before
    it must agree."""
    t = tm.TINY[name]
    positions, theirs = _recorded(recorded, name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ours = model.engine.create_context(n_ctx=t.n_ctx).prefill(tm.prompt(name), all_logits=True)
    cos = cosines(np.asarray(ours)[positions], theirs)
    off = positions[cos < LLAMA_CPP_MIN_COS[t.expert_type]]
    if t.expert_type == "f16":
        assert not len(off), (name, cos.min(), off)
        return
    ref = reference(tiny_file(name, tiny_dir))
    ref.forward(tm.prompt(name))
    first_tie = int(np.argmax(np.stack(list(ref.gaps.values())).min(0) < 0.05))
    assert all(p >= first_tie for p in off) and len(off) <= 2, (name, first_tie, off, cos.min())


# ---- hostile files ---------------------------------------------------------------------
def hostile(tmp_path, name="qwen3moe", more_tensors=None, **extra):
    import dataclasses

    t = tm.TINY[name]
    t = dataclasses.replace(t, extra={**t.extra, **extra})
    return tm.write(name, str(tmp_path / f"{name}.gguf"), t, more_tensors)


@pytest.mark.parametrize("extra", [
    {"expert_count": 0},                              # llama.cpp: "n_expert must be > 0"
    {"expert_used_count": 0},
    {"expert_used_count": 17},                        # more used than there are
])
def test_bad_expert_counts_are_refused(tmp_path, extra):
    with pytest.raises(UnsupportedModelError, match="expert_used_count"):
        infer.load(hostile(tmp_path, **extra))


@pytest.mark.parametrize("extra, tensor", [
    ({"expert_count": 8}, "blk.0.ffn_gate_inp.weight"),                  # 16 in the tensors
    ({"expert_feed_forward_length": 64}, "blk.0.ffn_gate_exps.weight"),  # 128 in the tensors
    ({"expert_count": 2000}, "qwen3moe.expert_count"),                    # over llama.cpp's 1024
])
def test_shapes_that_disagree_with_the_metadata_are_refused(tmp_path, extra, tensor):
    with pytest.raises(GGUFError, match=tensor.replace(".", r"\.")):
        infer.load(hostile(tmp_path, **extra))


def test_a_2d_expert_tensor_is_refused(tmp_path):
    """ffn_down_exps must be (experts, dim, width): a 2-D one of the same size is not."""
    import gguf

    path = hostile(tmp_path)
    r = gguf.GGUFReader(path)
    w = gguf.GGUFWriter(str(tmp_path / "flat.gguf"), "qwen3moe")
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if isinstance(value, list):
            w.add_array(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, bool):
            w.add_bool(key, value)
        else:
            w.add_uint32(key, value)
    for t in r.tensors:
        data = np.array(t.data).reshape([int(s) for s in reversed(t.shape)])
        if t.name == "blk.1.ffn_down_exps.weight":
            data = data.reshape(-1, data.shape[-1])
        w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match=r"blk\.1\.ffn_down_exps\.weight: expected shape \(16, 256, 128\)"):
        infer.load(str(tmp_path / "flat.gguf"))


def test_a_shared_expert_is_refused(tmp_path):
    """Granite 4's shared expert (and qwen2moe's) is not implemented: its key and
    tensors are named, never ignored."""
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(hostile(tmp_path, "granitemoe", expert_shared_feed_forward_length=64))
    assert e.value.names == ["granitemoe.expert_shared_feed_forward_length"]
    shexp = {"blk.0.ffn_gate_shexp.weight": np.zeros((64, 256), np.float16)}
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(hostile(tmp_path, more_tensors=shexp))
    assert e.value.names == ["blk.0.ffn_gate_shexp.weight"]


def test_an_expert_slice_is_bounded(tmp_path):
    """Matrix.row_slice refuses rows outside the matrix, and cuts a repacked one
    only at its 16-row groups."""
    with infer.load(tiny_file_plain(tmp_path)) as model:
        w = model.engine.live_weights().layers[0].w_down   # 8 experts x 256 rows
        assert w.rows == 8 * 256
        for lo, hi in [(-1, 10), (10, 5), (0, 8 * 256 + 1)]:
            with pytest.raises(ValueError, match="row_slice"):
                w.row_slice(lo, hi)
        part = w.row_slice(256, 512)
        assert part.rows == 256 and part.data.shape[0] == 256
        if w.qtype != w.file_qtype:   # repacked: the groups of 16
            with pytest.raises(ValueError, match="16-row groups"):
                w.row_slice(8, 256)


def tiny_file_plain(tmp_path):
    """Q8_0 experts: repacked at load where the kernel set has a repacked Q8_0."""
    return tm.write("qwen3moe-q8_0", str(tmp_path / "plain.gguf"))


def test_the_fused_step_refuses_too_many_experts_used(tiny_dir):
    """The C step routes a token to at most kernels.MAX_EXPERTS_USED experts; a
    spec routing to more is refused there (its contexts decode in Python)."""
    import dataclasses

    import infer.kernels as K

    with infer.load(tiny_file("qwen3moe", tiny_dir)) as model:
        spec = model.engine.spec
        many = dataclasses.replace(spec.moe, n_experts=K.MAX_EXPERTS_USED + 1, n_used=K.MAX_EXPERTS_USED + 1)
        with model.engine.running():
            with pytest.raises(NotImplementedError, match="at most"):
                model.engine.fused_step(dataclasses.replace(spec, moe=many))


def test_a_missing_shared_expert_is_named(tmp_path):
    """qwen2moe's shared expert is part of its maths: a file without it (or with
    a gate vector of the wrong size) is refused, naming the tensor."""
    import dataclasses

    t = dataclasses.replace(tm.TINY["qwen2moe"], extra={**tm.TINY["qwen2moe"].extra,
                                                         "expert_shared_feed_forward_length": 128})
    path = tm.write("qwen2moe", str(tmp_path / "shexp.gguf"), t)
    with pytest.raises(GGUFError, match=r"blk\.0\.ffn_gate_shexp\.weight: expected shape \(128, 256\)"):
        infer.load(path)
