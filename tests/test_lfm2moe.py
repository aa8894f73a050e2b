"""LFM2-MoE (GGUF ``lfm2moe``, LFM2-8B-A1B's architecture): LFM2's shortconv and
attention layers, the first ``leading_dense_block_count`` with the dense FFN and the
others a mixture of sigmoid-gated experts chosen with per-expert selection biases
(``exp_probs_b``), on the tiny random-weight file ``lfm2moe`` of tests/tiny_models.py
(4 layers, the first dense, 8 experts of 128 with 2 used), against two independent
references:

* tests/reference/numpy_lfm2.py, a float64 numpy forward pass written from HF's
  Lfm2Moe modelling code (Lfm2MoeSparseMoeBlock.route_tokens_to_experts);
* llama.cpp's teacher-forced logits on the same file (tests/data/llama_cpp_lfm2moe.npz,
  tests/data/README.md), and the types llama-quantize gives its tensors.

Routing near-ties are handled as in tests/test_moe.py: the prompt was chosen (of 60
seeds) so that the reference's smallest gap between the last expert chosen and the
first left out (in sigmoid + bias) is as large as it gets, and infer's choices are
recorded and given to the reference only where its gap is below `FOLLOW_GAP`.
"""
import dataclasses
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import LLAMA_CPP_MIN_COS, assert_agrees, clear_top1, cosines, recorded_logits, recording
from family_checks import assert_truncate_copy_and_state_exact
from family_checks import check as check_against
from family_checks import tiny_file
from reference.numpy_lfm2 import Lfm2Reference
from scripted import GreedySampler

import infer
import infer.variants.transformer as transformer
from infer import UnsupportedModelError
from infer.chat.session import BaseModelWarning
from infer.gguf import GGUFError

NAME = "lfm2moe"
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_lfm2moe.npz")
#: infer against the float64 reference (F16 weights, float32 arithmetic)
MIN_COS = 0.99999
#: a gap in sigmoid + bias below which rounding may decide the choice: F16 products
#: move the router logits by ~1e-3 here, the sigmoid's slope is at most 1/4
FOLLOW_GAP = 0.001


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("lfm2moe")


@pytest.fixture(scope="module")
def path(tiny_dir):
    return tiny_file(NAME, tiny_dir)


@pytest.fixture(scope="module")
def recorded():
    return recording(DATA)


_refs = {}


def reference(path, use_bias=True):
    """The reference's logits on the prompt, and the reference (its gaps)."""
    if use_bias not in _refs:
        ref = Lfm2Reference(path)
        ref.use_bias = use_bias
        _refs[use_bias] = ref.forward(tm.prompt(NAME)), ref
    return _refs[use_bias]


class RoutingRecorder:
    """The experts infer's `transformer.route` chooses, by layer and position (prefill)."""

    def __init__(self, monkeypatch, engine):
        self.routers = [layer.router for layer in engine.live_weights().layers]
        self.choices = {}
        real = transformer.route

        def route(h, router, moe, *bias):
            experts, weights = real(h, router, moe, *bias)
            layer = next(i for i, r in enumerate(self.routers) if r is router)
            for row, chosen in enumerate(experts):
                self.choices.setdefault(layer, {})[row] = tuple(int(e) for e in chosen)
            return experts, weights

        monkeypatch.setattr(transformer, "route", route)

    def follow(self):
        return {layer: (list(by_pos), list(by_pos.values())) for layer, by_pos in self.choices.items()}


# ---- the references ---------------------------------------------------------------------------
def test_the_prompt_keeps_clear_of_ties_and_the_bias_matters(path):
    """The test data's premise: every choice of experts clear of a tie; and the selection
    biases change many choices, so that the logits without them are far off."""
    logits, ref = reference(path)
    assert sorted(ref.gaps) == [1, 2, 3]   # layer 0 is dense
    assert min(float(g.min()) for g in ref.gaps.values()) > 0.002
    unbiased, _ = reference(path, use_bias=False)
    assert cosines(unbiased, logits).min() < 0.99


def test_reference_agrees_with_llama_cpp(path, recorded):
    """Validates both readings of the architecture (sigmoid, bias, dense leading layer);
    without the selection biases the reference is far from llama.cpp."""
    positions, theirs = recorded_logits(recorded, NAME, path)
    ref = reference(path)[0][positions]
    assert_agrees(ref, theirs, positions, NAME, top1_of=ref)
    unbiased = reference(path, use_bias=False)[0][positions]
    assert cosines(unbiased, theirs).min() < 0.99


# ---- infer --------------------------------------------------------------------------------------
def test_the_spec(path):
    with infer.load(path) as model:
        spec = model.engine.spec
        assert model.engine.architecture == NAME
        assert (spec.moe.n_experts, spec.moe.n_used, spec.moe.ffn_dim) == (8, 2, 128)
        assert (spec.moe.gating, spec.moe.norm_weights, spec.moe.selection_bias) == ("sigmoid", True, True)
        assert [layer.dense_ffn for layer in spec.layers] == [True, False, False, False]
        assert [spec.layer_ffn_dim(i) for i in range(4)] == [512, 128, 128, 128]
        assert [layer.kind for layer in spec.layers] == ["shortconv", "shortconv", "attention", "shortconv"]


def test_prefill_matches_reference_at_every_position(path, monkeypatch):
    prompt = tm.prompt(NAME)
    with infer.load(path) as model:
        ctx = model.engine.create_context(n_ctx=256)
        assert ctx.fused_decode
        recorder = RoutingRecorder(monkeypatch, model.engine)
        ours = np.array(ctx.prefill(prompt, all_logits=True), np.float64)
    assert sorted(recorder.choices) == [1, 2, 3]
    ref = Lfm2Reference(path)
    ref.follow, ref.follow_gap = recorder.follow(), FOLLOW_GAP
    theirs = ref.forward(prompt)
    assert ref.disagreed == 0 and ref.followed <= 2, (ref.disagreed, ref.followed)
    for i in range(len(prompt)):
        check_against(ours[i], theirs[i], f"position {i}", MIN_COS)


@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
def test_decode_matches_prefill_and_reference(path, python):
    """One token at a time through the fused C step (route_token with the biases, the
    dense layer's wider FFN) or the Python blocks: the prefill's logits."""
    prompt = tm.prompt(NAME)
    with infer.load(path) as model:
        whole = np.array(model.engine.create_context(n_ctx=256).prefill(prompt, all_logits=True))
        ctx = model.engine.create_context(n_ctx=256, sampler=GreedySampler())
        ctx.fused_decode = not python
        ours = np.zeros_like(whole)
        for i, tok in enumerate(prompt):
            ctx.prefill([int(tok)])
            ours[i] = ctx.logits
    np.testing.assert_allclose(ours, whole, rtol=0, atol=1e-4)
    assert cosines(ours, reference(path)[0]).min() >= MIN_COS


def test_infer_agrees_with_llama_cpp(path, recorded):
    positions, theirs = recorded_logits(recorded, NAME, path)
    with infer.load(path) as model:
        ctx = model.engine.create_context(n_ctx=256)
        ours = np.zeros((len(tm.prompt(NAME)), model.engine.vocab_size), np.float32)
        for i, tok in enumerate(tm.prompt(NAME)):
            ctx.prefill([int(tok)])
            ours[i] = ctx.logits
    assert_agrees(ours[positions], theirs, positions, NAME, LLAMA_CPP_MIN_COS, top1_of=reference(path)[0][positions])


def test_without_the_biases_infer_would_disagree(path):
    """The biases are read and used: zeroing them in the loaded weights (what a reader
    that ignored exp_probs_b would compute) moves infer's logits far from the reference."""
    prompt = tm.prompt(NAME)
    with infer.load(path) as model:
        for layer in model.engine.live_weights().layers[1:]:
            layer.expert_bias.data = np.zeros(8, np.float32)   # (the file's map is read-only)
        ours = model.engine.create_context(n_ctx=256).prefill(prompt, all_logits=True)
    assert cosines(ours, reference(path)[0]).min() < 0.99
    np.testing.assert_allclose(cosines(ours, reference(path, use_bias=False)[0]).min(), 1.0, atol=1e-5)


@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
def test_batched_decode_equals_one_at_a_time(path, python):
    """Engine.forward_batch (infer serve's step) over three contexts at different
    positions: each gets the logits and greedy tokens it gets alone, bit for bit."""
    prompt = tm.prompt(NAME)
    starts = [prompt[:5], prompt[10:31], prompt[40:47]]
    with infer.load(path) as model:
        alone = []
        for s in starts:
            ctx = model.engine.create_context(n_ctx=128, sampler=GreedySampler())
            ctx.prefill(s)
            rows = []
            for _ in range(8):
                ctx.prefill([int(np.argmax(ctx.logits))])
                rows.append(ctx.logits.copy())
            alone.append(np.array(rows))
        ctxs = [model.engine.create_context(n_ctx=128, sampler=GreedySampler()) for _ in starts]
        for ctx, s in zip(ctxs, starts):
            ctx.prefill(s)
            ctx.fused_decode = not python
        together = [[] for _ in starts]
        for _ in range(8):
            toks = np.array([int(np.argmax(c.logits)) for c in ctxs], np.int32)
            model.engine.forward_batch(ctxs, toks, [len(c.tokens) for c in ctxs])
            for i, c in enumerate(ctxs):
                c.tokens.append(int(toks[i]))
                together[i].append(c.logits.copy())
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, np.array(b))


def test_truncate_copy_and_saved_state_continue_exactly(path):
    with infer.load(path) as model:
        first = assert_truncate_copy_and_state_exact(model, tm.prompt(NAME), 30, 10, 128)
    check_against(first, reference(path)[0][39], "position 39", MIN_COS)


def test_generate_chat_and_the_server_scheduler(path):
    """The user paths: greedy generate follows the reference's argmax; a chat session
    and infer serve's scheduler (requests decoded together) give what generate gives."""
    import threading

    from infer.generate import generate
    from infer.serve.scheduler import Scheduler

    prompt = [int(t) for t in tm.prompt(NAME)[:20]]
    with infer.load(path) as model:
        gen = generate(model, prompt, max_tokens=10, temperature=0, stop_at_end_of_turn=False)
        "".join(gen)
        ids = list(gen.context.tokens)[len(prompt):]
        assert len(ids) == 10
        with pytest.warns(BaseModelWarning):   # the tiny file has no chat template
            replies = [infer.ChatSession(model, temperature=0).send("Hello there", max_tokens=6) for _ in range(2)]
        assert replies[0].text == replies[1].text and replies[0].finish_reason in ("stop", "length")
        prompts = [prompt[i * 3:i * 3 + 6 + i] for i in range(3)]
        alone = [list(generate(model, p, context=model.engine.create_context(n_ctx=128, sampler=GreedySampler()),
                               max_tokens=6)) for p in prompts]
        sched = Scheduler(model, n_slots=3, n_ctx=128)
        try:
            out = [None] * 3
            handles = [sched.open() for _ in prompts]

            def work(i):
                handles[i].sampler = GreedySampler()
                try:
                    out[i] = list(generate(model, prompts[i], context=handles[i], max_tokens=6))
                finally:
                    handles[i].close()

            threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
        finally:
            sched.close()
    assert out == alone
    ref = Lfm2Reference(path).forward(prompt + ids)
    for k, tok in enumerate(ids):
        row = ref[len(prompt) + k - 1]
        if clear_top1(row):
            assert tok == int(np.argmax(row)), f"generated token {k}"


def test_infer_info_counts_the_active_parameters(path, capsys):
    """`infer info`: what one token reads is every tensor but the stacked experts, of
    which 2 of 8 (counted here from the file with the gguf package's reader)."""
    from gguf import GGUFReader

    from infer import cli

    total = active = 0
    for t in GGUFReader(path).tensors:
        n = int(np.prod([int(s) for s in t.shape]))
        total += n
        active += n * 2 // 8 if "_exps." in t.name else n
    assert cli.main(["info", path]) in (0, None)
    out = capsys.readouterr().out
    assert f"({total:,})" in out and "per token (2 of 8 experts)" in out
    assert "8 experts of 128, 2 used" in out
    from infer.cli.info import describe_model

    with infer.gguf.GGUFFile(path) as f:
        assert describe_model(f)["active_parameters"] == active


def test_infer_quantize_chooses_llama_quantizes_types(path, recorded, tmp_path):
    """`infer quantize`: every tensor gets the type llama-quantize gave it (the router and
    the selection biases staying F32), and the quantized file runs close to the F16 one."""
    from infer.quantize import quantize_file

    names = [str(n) for n in recorded["quantize/names"]]
    recipes = sorted(k.split("/", 1)[1] for k in recorded if k.startswith("quantize/") and k != "quantize/names")
    assert "q4_k_m" in recipes and "blk.1.exp_probs_b.bias" in names
    for recipe in recipes:
        quantize_file(path, tmp_path / f"{recipe}.gguf", recipe)
        with infer.gguf.GGUFFile(tmp_path / f"{recipe}.gguf") as f:
            ours = [f.tensors[n].dtype.name for n in names]
        assert ours == [str(t) for t in recorded[f"quantize/{recipe}"]], recipe
    with infer.load(str(tmp_path / "q8_0.gguf")) as model:
        rows = model.engine.create_context(n_ctx=128).prefill(tm.prompt(NAME)[:32], all_logits=True)
    cos = cosines(rows, reference(path)[0][:32])   # Q8_0 moves the router logits: a near-tie may flip
    assert np.median(cos) > 0.998 and cos.min() > 0.99, cos


# ---- the fused step's own checks ----------------------------------------------------------------
def test_the_fused_step_checks_the_expert_pieces(path):
    """kernels.TransformerDecoder refuses, before anything runs, selection biases of
    the wrong length, a dense layer in a model without experts and an unknown gating."""
    import infer.kernels as K

    with infer.load(path) as model:
        spec = model.engine.spec
        embd, output, norm, layers = transformer.decoder_arguments(spec, model.engine.live_weights())
        bad = [dict(layer) for layer in layers]
        bad[1]["exp_probs_b"] = np.zeros(7, np.float32)
        with pytest.raises(ValueError, match=r"layers\[1\]\.exp_probs_b"):
            K.TransformerDecoder(spec, embd, output, norm, bad)
        bad = [dict(layer) for layer in layers]
        bad[0]["exp_probs_b"] = np.zeros(8, np.float32)
        with pytest.raises(ValueError, match="without experts"):
            K.TransformerDecoder(spec, embd, output, norm, bad)
        with pytest.raises(ValueError, match="gating"):
            K.TransformerDecoder(_with_gating(spec, "softplus"), embd, output, norm, layers)
        dense = dataclasses.replace(spec, moe=None, layers=tuple(dataclasses.replace(la, dense_ffn=False)
                                                                 for la in spec.layers))
        with pytest.raises(ValueError, match="dense_ffn"):
            K.TransformerDecoder(dense, embd, output, norm, layers)


def _with_gating(spec, gating):
    """spec as the fused step reads it (attributes), with another moe.gating (spec.MoE
    itself refuses one it does not know)."""
    from types import SimpleNamespace

    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    return SimpleNamespace(**{**fields, "attn_scale": spec.attn_scale,
                              "moe": SimpleNamespace(**{**vars(spec.moe), "gating": gating})})


# ---- files infer must refuse ---------------------------------------------------------------------
def hostile(tmp_path, monkeypatch, drop=(), replace=None, keys=None, extra=None):
    """The lfm2moe file with tensors dropped or replaced, uint32 keys changed or added."""
    import gguf

    add_tensor, add_uint32 = gguf.GGUFWriter.add_tensor, gguf.GGUFWriter.add_uint32

    def tensor(self, tname, array, *a, **k):
        if tname in drop:
            return None
        return add_tensor(self, tname, (replace or {}).get(tname, array), *a, **k)

    def uint32(self, key, value):
        if key in drop:
            return None
        return add_uint32(self, key, (keys or {}).get(key, value))

    t = tm.ALL[NAME]
    t = dataclasses.replace(t, extra={**t.extra, **(extra or {})})
    with monkeypatch.context() as m:
        m.setattr(gguf.GGUFWriter, "add_tensor", tensor)
        m.setattr(gguf.GGUFWriter, "add_uint32", uint32)
        return tm.write(NAME, str(tmp_path / "hostile.gguf"), t)


@pytest.mark.parametrize("missing", ["blk.2.exp_probs_b.bias", "blk.1.ffn_gate_inp.weight",
                                     "blk.0.ffn_gate.weight", "blk.3.ffn_down_exps.weight"])
def test_a_missing_tensor_is_named(tmp_path, monkeypatch, missing):
    with pytest.raises(GGUFError, match=f"tensor {missing} is missing"):
        infer.load(hostile(tmp_path, monkeypatch, drop=(missing,)))


@pytest.mark.parametrize("key", ["lfm2moe.expert_gating_func", "lfm2moe.expert_count",
                                 "lfm2moe.expert_used_count", "lfm2moe.expert_feed_forward_length"])
def test_a_missing_key_is_named(tmp_path, monkeypatch, key):
    with pytest.raises(GGUFError, match=key.replace(".", r"\.")):
        infer.load(hostile(tmp_path, monkeypatch, drop=(key,)))


@pytest.mark.parametrize("value", [0, 3, 4, 99])
def test_other_gating_functions_are_refused(tmp_path, monkeypatch, value):
    """llama.cpp's gating functions besides softmax (1) and sigmoid (2): none (0),
    softmax of the chosen logits (3), sqrt(softplus) (4), and garbage."""
    with pytest.raises(UnsupportedModelError, match="expert_gating_func"):
        infer.load(hostile(tmp_path, monkeypatch, keys={"lfm2moe.expert_gating_func": value}))


def test_softmax_gating_is_read_as_softmax(tmp_path, monkeypatch):
    path = hostile(tmp_path, monkeypatch, keys={"lfm2moe.expert_gating_func": 1})
    with infer.load(path) as model:
        assert model.engine.spec.moe.gating == "softmax"


@pytest.mark.parametrize("keys, match", [
    ({"lfm2moe.leading_dense_block_count": 5}, r"lfm2moe\.leading_dense_block_count"),   # of 4 layers
    ({"lfm2moe.expert_used_count": 9}, r"lfm2moe\.expert_used_count"),                   # of 8 experts
    ({"lfm2moe.expert_count": 16}, r"blk\.1\.ffn_gate_inp\.weight: expected shape"),
    ({"lfm2moe.expert_feed_forward_length": 64}, r"blk\.1\.ffn_gate_exps\.weight: expected shape"),
    ({"lfm2moe.leading_dense_block_count": 2}, r"tensor blk\.1\.ffn_gate\.weight is missing"),
    ({"lfm2moe.feed_forward_length": 256}, r"blk\.0\.ffn_gate\.weight: expected shape"),
])
def test_metadata_that_disagrees_with_the_tensors_is_refused(tmp_path, monkeypatch, keys, match):
    with pytest.raises(GGUFError, match=match):
        infer.load(hostile(tmp_path, monkeypatch, keys=keys))


def test_experts_tensors_in_a_dense_layer_are_refused(tmp_path, monkeypatch):
    """leading_dense_block_count 0 where the file's first layer is dense: its expert
    tensors are missing; with the key at 1 and stray experts in layer 0, they are named."""
    with pytest.raises(GGUFError, match=r"tensor blk\.0\.ffn_gate_inp\.weight is missing"):
        infer.load(hostile(tmp_path, monkeypatch, keys={"lfm2moe.leading_dense_block_count": 0}))
    stray = {"blk.0.exp_probs_b.bias": np.zeros(8, np.float32)}
    path = tm.write(NAME, str(tmp_path / "stray.gguf"), None, stray)
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(path)
    assert e.value.names == ["blk.0.exp_probs_b.bias"]


@pytest.mark.parametrize("bad", [np.zeros(7, np.float32), np.full(8, np.nan, np.float32),
                                 np.zeros(8, np.float16)])
def test_bad_selection_biases_are_refused(tmp_path, monkeypatch, bad):
    with pytest.raises(GGUFError, match=r"blk\.2\.exp_probs_b\.bias"):
        infer.load(hostile(tmp_path, monkeypatch, replace={"blk.2.exp_probs_b.bias": bad}))


def test_a_sliding_window_is_refused(tmp_path, monkeypatch):
    """llama.cpp's lfm2moe reads no sliding window; a file with one is not run without it."""
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(hostile(tmp_path, monkeypatch, extra={"attention.sliding_window": 16}))
    assert e.value.names == ["lfm2moe.attention.sliding_window"]
