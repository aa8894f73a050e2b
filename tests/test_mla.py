"""DeepSeek's multi-head latent attention (GGUF ``deepseek2``: DeepSeek-V2-Lite, V2, V3,
Moonlight, Kimi-K2) on the tiny random-weight files ``MLA_FILES`` of tests/tiny_models.py
(3 layers: a dense first one, then 8 or 16 experts with shared ones), against two
independent references:

* tests/reference/numpy_mla.py, a float64 numpy forward pass written from HF's
  DeepseekV2 / V3 modelling in its plain multi-head form (keys and values decompressed
  per head), while infer and llama.cpp attend over the cached latent rows;
* llama.cpp's teacher-forced logits on the same files (tests/data/llama_cpp_mla.npz,
  tests/data/README.md).

``deepseek2-lite`` is V2-Lite's shape (plain attn_q, softmax routing), ``deepseek2-yarn``
V2's (a low-rank q, YaRN with its log multiplier), ``deepseek2-v3`` V3's (sigmoid routing
with selection biases in expert groups, weights normalised and scaled), ``deepseek2-kvb``
the older conversions' layout (one attn_kv_b, which llama.cpp decompresses into per-head
keys and values, and caches those).  The prompts
were chosen (of 40 seeds) so that every choice of experts is clear of a tie.
"""
import math
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import (
    assert_agrees,
    assert_batched_equals_alone,
    assert_scheduler_batches_like_alone,
    assert_truncate_copy_and_state_exact,
    clear_top1,
    cosines,
    recorded_logits,
    recording,
    tiny_file,
)
from reference.numpy_mla import MlaReference

import infer
from infer import UnsupportedModelError
from infer.gguf import GGUFError

NAMES = tuple(tm.MLA_FILES)
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_mla.npz")
#: infer (F16 weights, float32 arithmetic, an F16 cache) against the float64 reference
MIN_COS = 0.99999
#: an ablated reference against llama.cpp: at most this (each feature matters)
ABLATED_COS = 0.999


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("mla")


@pytest.fixture(scope="module")
def recorded():
    return recording(DATA)


_refs = {}


def reference(path, name, **switches):
    """The reference's logits on the prompt of ``name`` with its switches (ablations)."""
    key = (name, tuple(sorted(switches.items())))
    if key not in _refs:
        ref = MlaReference(path)
        for k, v in switches.items():
            setattr(ref, k, v)
        _refs[key] = ref.forward(tm.prompt(name))
    return _refs[key]


#: each file's ablations: the reference without that feature is far from llama.cpp
ABLATIONS = {
    "deepseek2-lite": ({"rope_parts": False}, {"kv_norm": False}),
    "deepseek2-yarn": ({"yarn_mscale": False}, {"rope_parts": False}),
    "deepseek2-v3": ({"use_bias": False}, {"groups": False}, {"yarn_mscale": False}),
    "deepseek2-kvb": ({"rope_parts": False}, {"yarn_mscale": False}),
}


@pytest.mark.parametrize("name", NAMES)
def test_reference_agrees_with_llama_cpp_and_each_feature_matters(name, tiny_dir, recorded):
    """Validates both readings of the architecture; without the rope part, the latent's
    norm, YaRN's mscale on the scores, the selection biases or the expert groups the
    reference is far from llama.cpp."""
    path = tiny_file(name, tiny_dir)
    positions, theirs = recorded_logits(recorded, name, path)
    ref = reference(path, name)[positions]
    assert_agrees(ref, theirs, positions, name, top1_of=ref)
    for switches in ABLATIONS[name]:
        ablated = reference(path, name, **switches)[positions]
        assert cosines(ablated, theirs).min() < ABLATED_COS, switches


@pytest.mark.parametrize("name", NAMES)
def test_infer_agrees_with_llama_cpp_and_the_reference(name, tiny_dir, recorded):
    """Prefill's logits at every position, and decoding one token at a time (through
    the Python blocks: the fused step has no MLA layers) gives the prefill's."""
    path = tiny_file(name, tiny_dir)
    positions, theirs = recorded_logits(recorded, name, path)
    prompt = tm.prompt(name)
    with infer.load(path) as model:
        whole = np.array(model.engine.create_context(n_ctx=128).prefill(prompt, all_logits=True), np.float64)
        ctx = model.engine.create_context(n_ctx=128)
        assert not ctx.fused_decode
        steps = []
        for tok in prompt[:24]:
            ctx.prefill([int(tok)])
            steps.append(ctx.logits.copy())
    assert_agrees(whole[positions], theirs, positions, name, top1_of=theirs)
    ref = reference(path, name)
    assert cosines(whole, ref).min() >= MIN_COS
    np.testing.assert_allclose(np.array(steps), whole[:24], rtol=0, atol=2e-3)


def test_the_spec_and_the_cache_of_latent_rows(tiny_dir):
    """What the spec reads (YaRN's scale of q.k computed by hand from llama.cpp's formula)
    and what a context caches: one F16 row of latent + rope key per layer and position,
    no V cache, against a GQA model of the same width (the tiny llama: 2 KV heads of 64)."""
    yarn = tm.MLA_FILES["deepseek2-yarn"]
    with infer.load(tiny_file("deepseek2-yarn", tiny_dir)) as model:
        spec = model.engine.spec
        mla = spec.mla
        assert (mla.kv_lora_rank, mla.nope_dim, mla.rope_dim, mla.v_dim, mla.q_lora_rank) == (64, 32, 16, 48, 96)
        mscale = 1 + 0.1 * (0.0707 / 0.1) * math.log(4.0)
        assert mla.kq_scale == pytest.approx(mscale ** 2 / math.sqrt(48), rel=1e-6)
        assert spec.layers[0].rope.attn_factor == pytest.approx(1.0)
        assert spec.moe.shared_ffn_dim == 2 * yarn.expert_ffn and not spec.moe.shared_gated
        assert [layer.dense_ffn for layer in spec.layers] == [True, False, False]
        ctx = model.engine.create_context(n_ctx=64)
        assert ctx.k_cache.shape == (3, 1, 64, 80) and ctx.k_cache.dtype == np.uint16 and ctx.v_cache.size == 0
        mla_bytes = (ctx.k_cache.nbytes + ctx.v_cache.nbytes) // 64 // 3
    with infer.load(tiny_file("llama", tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=64)
        gqa_bytes = (ctx.k_cache.nbytes + ctx.v_cache.nbytes) // 64 // model.engine.spec.n_layers
    assert (mla_bytes, gqa_bytes) == (2 * 80, 2 * 2 * 2 * 64)   # per layer and position


def test_batched_decode_equals_one_at_a_time(tiny_dir):
    """infer serve's batched step (the Python blocks with every context's row in one
    pass) gives each conversation the logits, bit for bit, of decoding it alone; and
    its scheduler, requests decoded together, the greedy tokens of each alone."""
    prompt = [int(t) for t in tm.prompt("deepseek2-v3")]
    with infer.load(tiny_file("deepseek2-v3", tiny_dir)) as model:
        assert_batched_equals_alone(model.engine, [prompt[:5], prompt[10:19], prompt[30:33]], 4, 64, fused=False)
        assert_scheduler_batches_like_alone(model, [prompt[:5], prompt[10:19], prompt[30:33]], 64, 4)
        with model.engine.running(), pytest.raises(NotImplementedError, match="latent attention"):
            model.engine.fused_step()


@pytest.mark.parametrize("name", ["deepseek2-yarn", "deepseek2-kvb"])
def test_truncate_copy_and_saved_state_continue_exactly(tiny_dir, name):
    path = tiny_file(name, tiny_dir)
    with infer.load(path) as model:
        first = assert_truncate_copy_and_state_exact(model, tm.prompt(name), 20, 6, 64)
    assert cosines(first[None], reference(path, name)[25][None])[0] >= MIN_COS


def test_generate_greedy_and_infer_info(tiny_dir, capsys):
    """`infer generate` greedy prints what the API generates, whose tokens follow the
    reference's argmax wherever it is clear; `infer info` shows what a position caches."""
    from infer import cli
    from infer.generate import generate

    path = tiny_file("deepseek2-lite", tiny_dir)
    text = "The quick brown fox jumps over"
    with infer.load(path) as model:
        gen = generate(model, text, max_tokens=8, temperature=0, stop_at_end_of_turn=False)
        expected = "".join(gen)
        tokens = list(gen.context.tokens)
    prompt, ids = tokens[:-8], tokens[-8:]
    ref = MlaReference(path).forward(prompt + ids)
    for k, tok in enumerate(ids):
        row = ref[len(prompt) + k - 1]
        if clear_top1(row):
            assert tok == int(np.argmax(row)), f"generated token {k}"
    capsys.readouterr()
    assert cli.main(["generate", "-m", path, text, "--temp", "0", "-n", "8"]) in (0, None)
    assert capsys.readouterr().out.rstrip("\n") == expected
    assert cli.main(["info", path]) in (0, None)
    out = capsys.readouterr().out
    assert "MLA             latent 64 + rope key 16 cached (480 B per token in F16), heads of 32 + 16, values 48" in out


# ---- refusals ----------------------------------------------------------------------------------
def _write(tmp_path, name="deepseek2-lite", **kw):
    return tm.write_deepseek2(tm.MLA_FILES[name], str(tmp_path / "f.gguf"), **kw)


def test_the_older_layout_caches_the_decompressed_heads(tiny_dir):
    """attn_kv_b files run as llama.cpp runs them: a K and a V cache of a head per head
    (keys of nope + rope, values of v_dim: both 48 here)."""
    with infer.load(tiny_file("deepseek2-kvb", tiny_dir)) as model:
        assert model.engine.spec.mla.decompressed
        ctx = model.engine.create_context(n_ctx=64)
        assert ctx.k_cache.shape == ctx.v_cache.shape == (3, 4, 64, 48)


def test_attn_kv_b_beside_the_split_tensors_is_refused(tmp_path):
    m = tm.MLA_FILES["deepseek2-lite"].mla
    kv_b = np.zeros((4 * (m.nope + m.v_dim), m.kv_lora), np.float16)
    path = _write(tmp_path, more_tensors={"blk.1.attn_kv_b.weight": kv_b})
    with pytest.raises(UnsupportedModelError, match="attn_kv_b") as e:
        infer.load(path)
    assert "blk.1.attn_kv_b.weight" in e.value.names


@pytest.mark.parametrize("key, value, match", [
    ("nextn_predict_layers", 1, "multi-token prediction"),
    ("attention.temperature_scale", 0.1, "attention temperature"),
    ("expert_gating_func", 3, "expert_gating_func=3"),
    ("rope.scaling.type", "longrope", "longrope"),
    ("expert_group_scale", 1.0, "expert_group_scale"),
])
def test_what_is_not_implemented_is_refused_by_name(tmp_path, key, value, match):
    t = tm.MLA_FILES["deepseek2-lite"]
    path = tm.write_deepseek2(tm.replace(t, extra={**t.extra, key: value}), str(tmp_path / "f.gguf"))
    with pytest.raises(UnsupportedModelError, match=match) as e:
        infer.load(path)
    assert f"deepseek2.{key}" in e.value.names


@pytest.mark.parametrize("drop, error, match", [
    (("attention.kv_lora_rank",), GGUFError, "kv_lora_rank is missing"),
    (("blk.1.attn_k_b.weight",), GGUFError, "blk.1.attn_k_b.weight is missing"),
    (("blk.2.attn_kv_a_norm.weight",), GGUFError, "blk.2.attn_kv_a_norm.weight is missing"),
])
def test_missing_pieces_are_named(tmp_path, drop, error, match):
    with pytest.raises(error, match=match):
        infer.load(_write(tmp_path, drop=drop))


def test_sizes_that_disagree_are_refused(tmp_path):
    t = tm.MLA_FILES["deepseek2-lite"]
    path = tm.write_deepseek2(tm.replace(t, extra={**t.extra, "attention.key_length": 64}), str(tmp_path / "f.gguf"))
    with pytest.raises(GGUFError, match="key_length"):
        infer.load(path)
