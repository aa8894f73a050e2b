"""Arcee (GGUF ``arcee``, AFM-4.5B's architecture): Llama whose FFN has no gate,
relu(h Wup)^2 Wdown.  tests/test_families.py runs the tiny ``arcee`` file through
its checks (decode, fused and Python, and batched prefill against the float64
reference of tests/reference/numpy_families.py; reference and infer against
llama.cpp's logits in tests/data/llama_cpp_lfm2moe.npz); here: that the squared
ReLU is what the data tells apart, and the files infer must refuse."""
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import cosines, recorded_logits, recording, tiny_file
from reference.numpy_families import Arcee

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


def test_the_spec_refuses_relu_sqr_with_experts():
    import dataclasses

    from infer.variants.spec import LayerSpec, MoE, TransformerSpec

    base = TransformerSpec(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, ffn_dim=4, vocab_size=8,
                           max_seq_len=8, rms_eps=1e-5, layers=(LayerSpec(),), activation="relu_sqr")
    with pytest.raises(ValueError, match="relu_sqr"):
        dataclasses.replace(base, moe=MoE(n_experts=2, n_used=1, ffn_dim=4))
    with pytest.raises(ValueError, match="relu_sqr"):
        dataclasses.replace(base, fused_gate_up=True)
