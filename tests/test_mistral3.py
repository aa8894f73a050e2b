"""Ministral 3 (GGUF ``mistral3``) and YaRN's keys, beyond what tests/test_families.py
holds every ``tiny_models.MISTRAL3`` file to (the float64 reference and llama.cpp's
logits in tests/data/llama_cpp_mistral3.npz, through the fused C step, the Python
blocks and batched prefill):

* each piece of Ministral 3's maths is visible in llama.cpp's logits: the reference
  with it taken out no longer agrees, nor does infer on the same weights with the
  key dropped from the file;
* infer's frequencies and magnitude are YaRN's as computed by hand;
* the attention temperature holds for contexts decoded together at different
  positions (`infer serve`'s batched step), and through generate, chat and info;
* YaRN keys llama.cpp would not use, and hostile values, are refused by name.
"""
import dataclasses
import math
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import check, clear_top1, cosines, recorded_logits, recording, tiny_file
from reference import numpy_families as nf
from scripted import GreedySampler

import infer
from infer import UnsupportedModelError
from infer.gguf import GGUFError
from infer.runtime import decode_batch, prefill_batch
from infer.variants.spec import TransformerSpec

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_mistral3.npz")
M3 = tm.MISTRAL3["mistral3"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("mistral3")


def _with(t, **keys):
    """The tiny file t with metadata keys set (None: dropped); the weights are the same."""
    extra = {**t.extra, **keys}
    return dataclasses.replace(t, extra={k: v for k, v in extra.items() if v is not None})


def _write(tmp_path, t, name="mistral3"):
    return tm.write(name, str(tmp_path / f"{name}-{abs(hash(tuple(sorted(t.extra.items()))))}.gguf"), t)


# ---- each piece is visible in llama.cpp's logits ---------------------------------------------
class NoTemperature(nf.Mistral3):
    def qkv(self, i, h):
        return nf.Llama.qkv(self, i, h)


class DefaultBetas(nf.Mistral3):
    def _yarn(self, factor, beta_fast=32.0, beta_slow=1.0):
        nf.Llama._yarn(self, factor)


class NoLogMultiplier(nf.Mistral3):
    def rope_setup(self):
        super().rope_setup()
        self.mscale = 0.1 * math.log(float(self.get("rope.scaling.factor"))) + 1.0


@pytest.mark.parametrize("without", [NoTemperature, DefaultBetas, NoLogMultiplier])
def test_each_piece_is_visible_in_llama_cpps_logits(without, tiny_dir):
    """The reference without one piece drops below 0.999 against llama.cpp (the whole
    reference's >= LLAMA_CPP_MIN_COS is test_families' test_reference_agrees_with_llama_cpp)."""
    path = tiny_file("mistral3", tiny_dir)
    positions, theirs = recorded_logits(recording(DATA), "mistral3", path)
    prompt = tm.prompt("mistral3")
    ablated = cosines(without(path, M3.n_ctx).forward(prompt)[positions], theirs).min()
    assert ablated < 0.999, ablated


@pytest.mark.parametrize("dropped", ["attention.temperature_scale", "rope.scaling.yarn_beta_fast",
                                     "rope.scaling.yarn_beta_slow", "rope.scaling.yarn_log_multiplier"])
def test_infer_reads_each_key(dropped, tiny_dir, tmp_path):
    """infer on the same weights without one key (llama.cpp's default in its place)
    no longer gives llama.cpp's logits of the file that has it: the key is used."""
    positions, theirs = recorded_logits(recording(DATA), "mistral3", tiny_file("mistral3", tiny_dir))
    prompt = tm.prompt("mistral3")[:positions[-1] + 1]
    with infer.load(_write(tmp_path, _with(M3, **{dropped: None}))) as model:
        rows = model.create_context(n_ctx=M3.n_ctx).prefill(prompt, all_logits=True)
    assert cosines(rows[positions], theirs).min() < 0.999


# ---- the spec, by hand -------------------------------------------------------------------------
def test_yarn_frequencies_and_magnitude_by_hand(tiny_dir):
    """Pairs 0-2 keep their frequency, 13-31 are divided by 16, a linear ramp between:
    corr_dim(n) = 64 ln(128 / (2 pi n)) / (2 ln 10000) is 3.25 for beta_fast 8 (floor 3)
    and 12.88 for beta_slow 0.5 (ceil 13).  The magnitude: get_mscale(16, 1) /
    get_mscale(16, 1) = 1.  The temperature: every 128 positions."""
    with infer.load(tiny_file("mistral3", tiny_dir)) as model:
        spec = model.engine.spec
    rope = spec.layers[0].rope
    ramp = [1.0 - min(1.0, max(0.0, (i - 3) / 10)) for i in range(32)]
    expected = [1.0 / (mix + (1 - mix) / 16) for mix in ramp]
    assert rope.freq_factors is not None and rope.scale == 1.0 and rope.attn_factor == 1.0
    np.testing.assert_allclose(rope.freq_factors, expected, rtol=1e-12)
    assert rope.freq_factors[:4] == (1.0,) * 4 and rope.freq_factors[13:] == (16.0,) * 19
    assert (spec.attn_temp_scale, spec.attn_temp_floor) == (pytest.approx(0.2), 128)
    np.testing.assert_allclose(spec.query_temperature(126, 4), [1, 1, 1 + 0.2 * math.log(2), 1 + 0.2 * math.log(2)],
                               rtol=1e-6)


def test_without_the_log_multiplier_the_magnitude_is_yarns(tmp_path):
    with infer.load(_write(tmp_path, _with(M3, **{"rope.scaling.yarn_log_multiplier": None}))) as model:
        assert model.engine.spec.layers[0].rope.attn_factor == pytest.approx(1 + 0.1 * math.log(16))


# ---- serving, generation, chat, info ---------------------------------------------------------
@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
def test_batched_decode_at_different_temperatures(python, tiny_dir):
    """Three contexts decoded together (Engine.forward_batch through decode_batch), at
    positions on both sides of 128 and 256 where the temperature steps: each gets the
    reference's logits of its own position."""
    prompt = tm.prompt("mistral3")
    path = tiny_file("mistral3", tiny_dir)
    ref = nf.reference(path, M3.n_ctx).forward(prompt[:270])
    starts = (5, 124, 252)
    with infer.load(path) as model:
        ctxs = [model.engine.create_context(n_ctx=512, sampler=GreedySampler()) for _ in starts]
        for ctx, s in zip(ctxs, starts):
            ctx.fused_decode = not python
            ctx.prefill(prompt[:s])
        for step in range(8):
            decode_batch(ctxs, [int(prompt[s + step]) for s in starts])
            for ctx, s in zip(ctxs, starts):
                check(ctx.logits, ref[s + step], f"position {s + step}", 0.99999)


def test_prefill_batch_of_contexts_past_the_steps(tiny_dir):
    """runtime.prefill_batch: two contexts' prompts in one pass (the Python blocks'
    segments, each from its own position), across the 128 and 256 temperature steps."""
    prompt = tm.prompt("mistral3")
    path = tiny_file("mistral3", tiny_dir)
    ref = nf.reference(path, M3.n_ctx).forward(prompt[:300])
    with infer.load(path) as model:
        a, b = (model.engine.create_context(n_ctx=512, sampler=GreedySampler()) for _ in range(2))
        a.prefill(prompt[:100])
        prefill_batch([a, b], [prompt[100:300], prompt[:140]])
        check(a.logits, ref[299], "position 299", 0.99999)
        check(b.logits, ref[139], "position 139", 0.99999)


def test_generate_and_chat_follow_the_reference(tiny_dir):
    """Greedy tokens past the first temperature step are the reference's argmax
    (where it is clear); infer.generate gives the same text as the context's own
    greedy steps; ChatSession runs."""
    path = tiny_file("mistral3", tiny_dir)
    prompt = [int(t) for t in tm.prompt("mistral3")[:140]]
    with infer.load(path) as model:
        ctx = model.create_context(n_ctx=256, temperature=0)
        ctx.prefill(prompt)
        out = [ctx.next() for _ in range(6)]
        text = "The capital of France is"
        ctx.restart()
        ctx.prefill(model.tokenizer.encode(text))
        steps = [ctx.next() for _ in range(6)]
        gen = infer.generate(model, text, max_tokens=6, temperature=0)
        assert "".join(gen) == model.tokenizer.decode(steps) and gen.finish_reason == "length"
        reply = infer.ChatSession(model, temperature=0).send("Hello", max_tokens=4)
        assert reply.finish_reason in ("stop", "length")
    ref = nf.reference(path, M3.n_ctx).forward(prompt + out)[len(prompt) - 1:-1]
    clear = clear_top1(ref)
    assert clear.sum() >= 4 and (np.array(out)[clear] == np.argmax(ref, -1)[clear]).all()


def test_infer_info(tiny_dir, capsys):
    from infer import cli

    assert cli.main(["info", tiny_file("mistral3", tiny_dir)]) in (0, None)
    out = capsys.readouterr().out
    assert "architecture    mistral3" in out
    assert "rope scaling    yarn, factor 16, original context 128" in out
    assert "attention temp  0.2 (per-position scale of the queries)" in out


# ---- refusals --------------------------------------------------------------------------------
LLAMA = tm.TINY["llama"]
YARN = {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 256}


@pytest.mark.parametrize("key, value, runs", [
    ("yarn_beta_fast", 16.0, "32"), ("yarn_beta_slow", 2.0, "1"), ("yarn_log_multiplier", 1.0, "0"),
    ("yarn_ext_factor", 0.5, "1"), ("yarn_attn_factor", 1.5, "1.13863"),
])
def test_yarn_keys_llama_cpp_ignores_are_refused_unless_they_change_nothing(key, value, runs, tmp_path):
    """llama.cpp's llama reads none of the five: a value other than the one it runs in
    its place would run the file unlike its training, so it is refused by name."""
    path = tm.write("llama", str(tmp_path / "l.gguf"), _with(LLAMA, **YARN, **{f"rope.scaling.{key}": value}))
    with pytest.raises(UnsupportedModelError, match=f"runs {runs}") as e:
        infer.load(path)
    assert e.value.names == [f"llama.rope.scaling.{key}"]


def test_mistral3_yarn_attn_factor_must_be_the_magnitude(tmp_path):
    """mistral3 does not read yarn_attn_factor either: 1.0 (the magnitude with the log
    multiplier 1) changes nothing, another value is refused."""
    with infer.load(_write(tmp_path, _with(M3, **{"rope.scaling.yarn_attn_factor": 1.0}))):
        pass
    with pytest.raises(UnsupportedModelError, match="yarn_attn_factor=1.2"):
        infer.load(_write(tmp_path, _with(M3, **{"rope.scaling.yarn_attn_factor": 1.2})))


@pytest.mark.parametrize("keys, error, message", [
    ({"rope.scaling.yarn_beta_fast": 0.25}, GGUFError, "yarn_beta_fast=0.25 is below"),
    ({"rope.scaling.yarn_beta_fast": float("nan")}, GGUFError, "yarn_beta_fast must be finite"),
    ({"rope.scaling.yarn_beta_slow": 0.0}, GGUFError, "yarn_beta_slow must be > 0"),
    ({"rope.scaling.yarn_beta_slow": -1.0}, GGUFError, "yarn_beta_slow must be > 0"),
    ({"rope.scaling.yarn_log_multiplier": -5.0}, GGUFError, "magnitude"),
    ({"rope.scaling.yarn_log_multiplier": -10 / math.log(16)}, GGUFError, "magnitude"),
    ({"rope.scaling.yarn_log_multiplier": float("inf")}, GGUFError, "must be finite"),
    ({"rope.freq_base": 1.0}, GGUFError, "freq_base=1.0 must be > 1 with YaRN"),
    ({"rope.scaling.factor": 0.0}, UnsupportedModelError, "YaRN needs a factor > 0"),
    ({"rope.scaling.factor": -16.0}, GGUFError, "factor must be >= 0"),
    ({"rope.scaling.original_context_length": 0}, GGUFError, "original_context_length must be in"),
    ({"attention.temperature_scale": float("nan")}, GGUFError, "temperature_scale must be finite"),
    ({"attention.temperature_length": 128}, UnsupportedModelError, "temperature_length"),
])
def test_hostile_values_are_refused(keys, error, message, tmp_path):
    with pytest.raises(error, match=message):
        infer.load(_write(tmp_path, _with(M3, **keys)))


def test_what_llama_cpps_mistral3_allows_and_no_ministral_has_is_refused(tmp_path):
    """Experts and an attn_output bias: llama.cpp's mistral3 would run them, infer's does
    not implement them, so the file is refused rather than run without them."""
    with pytest.raises(UnsupportedModelError, match="mixture of experts") as e:
        infer.load(_write(tmp_path, _with(M3, expert_count=8, expert_used_count=2)))
    assert e.value.names == ["mistral3.expert_count"]
    path = tm.write("mistral3", str(tmp_path / "bias.gguf"), M3,
                    more_tensors={"blk.0.attn_output.bias": np.zeros(256, np.float32)})
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(path)
    assert e.value.names == ["blk.0.attn_output.bias"]


def test_spec_and_decoder_refuse_a_temperature_without_its_floor(tiny_dir):
    from infer import kernels as K
    from infer.variants.transformer import decoder_arguments

    with infer.load(tiny_file("mistral3", tiny_dir)) as model:
        spec = model.engine.spec
        for bad in (dict(attn_temp_floor=0), dict(attn_temp_scale=float("nan"))):
            with pytest.raises(ValueError, match="attn_temp"):
                dataclasses.replace(spec, **bad)
        with model.engine.running() as w:
            args = decoder_arguments(spec, w)

            class NoFloor:
                def __getattr__(self, name):
                    return 0 if name == "attn_temp_floor" else getattr(spec, name)
            with pytest.raises(ValueError, match="attn_temp_floor"):
                K.TransformerDecoder(NoFloor(), *args)
    assert isinstance(spec, TransformerSpec)
