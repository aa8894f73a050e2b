"""Arcee (GGUF ``arcee``, AFM-4.5B's architecture): Llama whose FFN has no gate,
relu(h Wup)^2 Wdown; and Apertus (``apertus``): per-head q/k norms, NEOX RoPE, and an
FFN without a gate whose activation is xIELU with each layer's parameters.
tests/test_families.py runs the tiny ``arcee`` file through its checks (decode, fused
and Python, and batched prefill against the float64 reference of
tests/reference/numpy_families.py; reference and infer against llama.cpp's logits in
tests/data/llama_cpp_lfm2moe.npz); the same checks of ``apertus`` are here, with
tolerances of its own: on this file the F16 KV cache moves the logits to a cosine of
0.99997 from the reference (infer and llama.cpp alike), while infer with an F32 cache
matches the reference to 1e-13.  Also: that the squared ReLU and the per-layer xIELU
parameters are what the data tells apart, and the files infer must refuse."""
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import assert_agrees, cosines, recorded_logits, recording, tiny_file
from reference.numpy_families import Apertus, Arcee

import infer
from infer import UnsupportedModelError
from infer.gguf import GGUFError

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_lfm2moe.npz")


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return tiny_file("arcee", tmp_path_factory.mktemp("arcee"))


class PlainRelu(Arcee):
    def ffn(self, i, h):
        up = h @ self.t[f"blk.{i}.ffn_up.weight"].T
        return np.maximum(up, 0.0) @ self.t[f"blk.{i}.ffn_down.weight"].T


def test_the_squared_relu_is_what_llama_cpp_computes(path):
    """The reference with a plain ReLU instead of its square is far from llama.cpp; and
    infer's spec says relu_sqr, with the up matrix standing in for the gate."""
    positions, theirs = recorded_logits(recording(DATA), "arcee", path)
    prompt = tm.prompt("arcee")
    assert cosines(Arcee(path).forward(prompt)[positions], theirs).min() > 0.99999
    assert cosines(PlainRelu(path).forward(prompt)[positions], theirs).min() < 0.99
    with infer.load(path) as model:
        assert model.engine.spec.activation == "relu_sqr"
        layer = model.engine.live_weights().layers[0]
        assert layer.w_gate is layer.w_up


def test_a_gate_tensor_is_refused(tmp_path):
    """llama.cpp's arcee reads no ffn_gate: a file with one is not run without it."""
    extra = {"blk.1.ffn_gate.weight": np.zeros((512, 256), np.float16)}
    p = tm.write("arcee", str(tmp_path / "gate.gguf"), None, extra)
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(p)
    assert e.value.names == ["blk.1.ffn_gate.weight"]


@pytest.mark.parametrize("change, match", [("drop", r"tensor blk\.2\.ffn_up\.weight is missing"),
                                           ("cut", r"blk\.2\.ffn_up\.weight: expected shape \(512, 256\)")])
def test_a_missing_or_misshapen_up_is_named(tmp_path, monkeypatch, change, match):
    import gguf

    add_tensor = gguf.GGUFWriter.add_tensor

    def tensor(self, name, array, *a, **k):
        if name == "blk.2.ffn_up.weight":
            if change == "drop":
                return None
            array = array[:256]
        return add_tensor(self, name, array, *a, **k)

    monkeypatch.setattr(gguf.GGUFWriter, "add_tensor", tensor)
    p = tm.write("arcee", str(tmp_path / "up.gguf"))
    monkeypatch.undo()
    with pytest.raises(GGUFError, match=match):
        infer.load(p)


def test_the_spec_refuses_ungated_activations_with_experts_it_does_not_compute():
    """relu² experts exist (Nemotron 3 Nano: tests/test_families3.py), but not with a
    sigmoid-gated shared expert; xIELU experts and a fused gate|up without a gate do not."""
    import dataclasses

    from infer.variants.spec import LayerSpec, MoE, TransformerSpec

    base = TransformerSpec(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, ffn_dim=4, vocab_size=8,
                           max_seq_len=8, rms_eps=1e-5, layers=(LayerSpec(),), activation="relu_sqr")
    dataclasses.replace(base, moe=MoE(n_experts=2, n_used=1, ffn_dim=4, shared_ffn_dim=4, shared_gated=False))
    with pytest.raises(ValueError, match="relu_sqr"):
        dataclasses.replace(base, moe=MoE(n_experts=2, n_used=1, ffn_dim=4, shared_ffn_dim=4))
    with pytest.raises(ValueError, match="xielu"):
        dataclasses.replace(base, activation="xielu", layers=(LayerSpec(xielu=(0.1, 0.2, 0.3, 0.4)),),
                            moe=MoE(n_experts=2, n_used=1, ffn_dim=4))
    with pytest.raises(ValueError, match="relu_sqr"):
        dataclasses.replace(base, fused_gate_up=True)


# ---- apertus ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def apertus_path(tmp_path_factory):
    return tiny_file("apertus", tmp_path_factory.mktemp("apertus"))


class OneXielu(Apertus):
    """The reference with layer 0's xIELU parameters in every layer."""

    def ffn(self, i, h):
        saved = {k: self.md[k] for k in tm.XIELU}
        self.md.update({k: v[0] for k, v in saved.items()})
        try:
            return super().ffn(i, h)
        finally:
            self.md.update(saved)


def test_apertus_per_layer_xielu_is_what_llama_cpp_computes(apertus_path):
    """The reference with one layer's xIELU parameters for all is far from llama.cpp;
    infer's spec holds ggml_xielu's parameters, softplus applied, per layer."""
    positions, theirs = recorded_logits(recording(DATA), "apertus", apertus_path)
    prompt = tm.prompt("apertus")
    assert cosines(Apertus(apertus_path).forward(prompt)[positions], theirs).min() > 0.99995
    assert cosines(OneXielu(apertus_path).forward(prompt)[positions], theirs).min() < 0.99
    with infer.load(apertus_path) as model:
        spec = model.engine.spec
        assert spec.activation == "xielu" and spec.qk_norm and spec.layers[0].rope.layout == "neox"
        for i, layer in enumerate(spec.layers):
            an, ap, beta, eps = (tm.XIELU[k][i] for k in ("xielu.alpha_n", "xielu.alpha_p", "xielu.beta",
                                                          "xielu.eps"))
            want = (beta + np.log1p(np.exp(an)), np.log1p(np.exp(ap)), beta, eps)
            np.testing.assert_allclose(layer.xielu, want, rtol=1e-6, atol=1e-9)


_apertus = {}


def apertus_logits(path, python=False, kv_type="f16"):
    """(reference, infer's decode one token at a time) on the prompt."""
    prompt = tm.prompt("apertus")
    if "ref" not in _apertus:
        _apertus["ref"] = Apertus(path).forward(prompt)
    with infer.load(path) as model:
        ctx = model.engine.create_context(n_ctx=512, kv_type=kv_type)
        assert ctx.fused_decode
        ctx.fused_decode = not python
        ours = np.zeros((len(prompt), model.engine.vocab_size))
        for i, tok in enumerate(prompt):
            ctx.prefill([int(tok)])
            ours[i] = ctx.logits
    return _apertus["ref"], ours


@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
def test_apertus_decode_matches_reference(apertus_path, python):
    """The fused C step (xIELU in its gate/up job with the layer's parameters) and the
    Python blocks: with an F32 KV cache the float64 reference's logits to rounding;
    with the default F16 cache to the cache's rounding."""
    ref, exact = apertus_logits(apertus_path, python, "f32")
    assert cosines(exact, ref).min() > 0.9999999
    _, ours = apertus_logits(apertus_path, python)
    assert cosines(ours, ref).min() > 0.99995


def test_apertus_batched_prefill_and_llama_cpp(apertus_path):
    positions, theirs = recorded_logits(recording(DATA), "apertus", apertus_path)
    prompt = tm.prompt("apertus")
    ref, ours = apertus_logits(apertus_path)
    assert_agrees(ref[positions], theirs, positions, "apertus", top1_of=ref[positions])
    assert_agrees(ours[positions], theirs, positions, "apertus")
    with infer.load(apertus_path) as model:
        rows = model.engine.create_context(n_ctx=512, kv_type="f32").prefill(prompt, all_logits=True)
    assert cosines(rows, ref).min() > 0.9999999


@pytest.mark.parametrize("value, match", [
    (None, r"xielu\.beta is missing"),
    ([0.5, 0.5, 0.5], r"xielu\.beta has 3 entries for 4 layers"),
    ([0.5, float("nan"), 0.5, 0.5], r"xielu\.beta must hold finite numbers"),
])
def test_apertus_bad_xielu_parameters_are_refused(tmp_path, monkeypatch, value, match):
    import gguf

    add_array = gguf.GGUFWriter.add_array

    def array(self, key, values):
        if key != "xielu.beta":
            return add_array(self, key, values)
        if value is not None:
            return add_array(self, key, value)

    monkeypatch.setattr(gguf.GGUFWriter, "add_array", array)
    p = tm.write("apertus", str(tmp_path / "xielu.gguf"))
    monkeypatch.undo()
    with pytest.raises(GGUFError, match=match):
        infer.load(p)


@pytest.mark.parametrize("tensor, shape", [("blk.0.attn_q_norm.bias", (64,)), ("blk.1.attn_output.bias", (256,)),
                                           ("blk.0.ffn_gate.weight", (512, 256))])
def test_apertus_tensors_it_does_not_implement_are_refused(tmp_path, tensor, shape):
    """llama.cpp's optional q/k norm biases and attention output bias, and a gate."""
    p = tm.write("apertus", str(tmp_path / "extra.gguf"), None, {tensor: np.zeros(shape, np.float32)})
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(p)
    assert e.value.names == [tensor]


def test_the_fused_step_checks_the_xielu_parameters(apertus_path):
    import infer.kernels as K
    import infer.variants.transformer as transformer

    with infer.load(apertus_path) as model:
        spec = model.engine.spec
        embd, output, norm, layers = transformer.decoder_arguments(spec, model.engine.live_weights())
        for bad in (None, (1.0, 2.0, 3.0), (1.0, 2.0, float("inf"), 0.0)):
            changed = [dict(layer) for layer in layers]
            changed[2]["xielu"] = bad
            with pytest.raises(ValueError, match=r"layers\[2\]\.xielu"):
                K.TransformerDecoder(spec, embd, output, norm, changed)
