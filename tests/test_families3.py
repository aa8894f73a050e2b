"""Phi-2, StarCoder2, Nemotron-H and Nemotron 3 Nano (``tiny_models.FAMILIES3``) on tiny
random-weight files, against two independent references: the float64 numpy forward passes of
tests/reference/numpy_families3.py and llama.cpp's teacher-forced logits on the same
files (tests/data/llama_cpp_families3.npz; tests/data/README.md).

* the two references agree with each other, which validates both readings;
* infer's prefill, its decode (the fused C step for phi2 and starcoder2, the Python
  blocks for all) agree with the reference at every position and with llama.cpp at
  the recorded ones;
* each feature the families added is one the recorded data tells apart: the reference
  with it taken out no longer agrees with llama.cpp;
* greedy generation runs through ``infer generate`` and ``infer info`` reads the files;
* what llama.cpp would run differently, or not at all, is refused.
"""
import dataclasses
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import (LLAMA_CPP_MIN_COS, assert_agrees, assert_batched_equals_alone,
                           assert_cli_generates_the_reference_greedy, assert_runs_agree_with_both_references, cosines,
                           decoded_one_at_a_time, recorded_logits, recording, recurrent_state_continues_exactly,
                           tiny_file)
from reference import numpy_families3 as n3
from reference.numpy_families import reference
from scripted import GreedySampler
from test_unsupported import refused

import infer
from infer import kernels as K
from infer.variants.spec import LayerSpec, MoE, TransformerSpec

NAMES = list(tm.FAMILIES3)
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_families3.npz")
#: the files the fused C step decodes (nemotron_h's Mamba2 and single-half layers go
#: through the Python blocks)
FUSED = {"phi2", "phi2-qkv", "starcoder2"}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny3")


_refs = {}


def reference_logits(name, tiny_dir):
    """(T, vocab) float64 logits of the prompt, computed once per file."""
    if name not in _refs:
        _refs[name] = reference(tiny_file(name, tiny_dir)).forward(tm.prompt(name))
    return _refs[name]


def llama_cpp(name, tiny_dir):
    return recorded_logits(recording(DATA), name, tiny_file(name, tiny_dir))


@pytest.mark.parametrize("name", NAMES)
def test_reference_agrees_with_llama_cpp(name, tiny_dir):
    positions, theirs = llama_cpp(name, tiny_dir)
    ref = reference_logits(name, tiny_dir)[positions]
    assert_agrees(ref, theirs, positions, name, top1_of=ref)


@pytest.mark.parametrize("name", NAMES)
def test_prefill_and_decode_agree_with_both_references(name, tiny_dir):
    """Prefill (all positions' logits), the context's own decode and the Python blocks'
    decode, one token at a time: each against the float64 reference at every position
    (cosine >= 0.99999, the top-1 where clear) and against llama.cpp where recorded."""
    prompt = tm.prompt(name)
    positions, theirs = llama_cpp(name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        assert model.engine.architecture == tm.FAMILIES3[name].arch
        runs = {"prefill": np.array(model.engine.create_context(n_ctx=256).prefill(prompt, all_logits=True))}
        for python in (False, True):
            ctx = model.engine.create_context(n_ctx=256, sampler=GreedySampler())
            assert ctx.fused_decode == (name in FUSED)
            ctx.fused_decode = ctx.fused_decode and not python
            runs["python" if python else "decode"] = decoded_one_at_a_time(ctx, prompt)
    assert_runs_agree_with_both_references(runs, reference_logits(name, tiny_dir), positions, theirs, name)


# ---- each feature matters ---------------------------------------------------------------
class Phi2Sequential(n3.Phi2):
    def block(self, i, x, pos):
        x = x + self.attention(i, self.layernorm(x, f"blk.{i}.attn_norm"), pos)
        return x + self.ffn(i, self.layernorm(x, f"blk.{i}.attn_norm"))


class Phi2FullRotary(n3.Phi2):
    def rope_setup(self):
        self.n_rot = self.head_dim
        super().rope_setup()


class Phi2NormRope(n3.Phi2):
    neox = False


class Phi2NoOutputBias(n3.Phi2):
    def logits(self, x):
        return self.layernorm(x, "output_norm") @ self.head.T


class Phi2NoFfnBias(n3.Phi2):
    def ffn(self, i, h):
        p = f"blk.{i}."
        return n3.gelu_tanh(h @ self.t[p + "ffn_up.weight"].T) @ self.t[p + "ffn_down.weight"].T


class Phi2NoNormBias(n3.Phi2):
    def layernorm(self, x, name):
        return super().layernorm(x, name) - self.t[name + ".bias"]


class StarCoder2NoQkvBias(n3.StarCoder2):
    def qkv(self, i, h):
        p = f"blk.{i}."
        return tuple(h @ self.t[p + f"attn_{n}.weight"].T for n in "qkv")


class StarCoder2NormRope(n3.StarCoder2):
    neox = False


class StarCoder2NoOutBias(n3.StarCoder2):
    def attention(self, i, h, pos):
        return super().attention(i, h, pos) - self.t[f"blk.{i}.attn_output.bias"]


class StarCoder2ReluFfn(n3.StarCoder2):
    def ffn(self, i, h):
        p = f"blk.{i}."
        u = np.maximum(h @ self.t[p + "ffn_up.weight"].T + self.t[p + "ffn_up.bias"], 0.0)
        return u @ self.t[p + "ffn_down.weight"].T + self.t[p + "ffn_down.bias"]


class NemotronHRelu(n3.NemotronH):
    def mlp(self, i, h):
        p = f"blk.{i}."
        return np.maximum(h @ self.w[p + "ffn_up.weight"].T, 0.0) @ self.w[p + "ffn_down.weight"].T


class NemotronHRope(n3.NemotronH):
    """RoPE (NEOX, base 10000) on the attention layer's q and k, which llama.cpp's nemotron_h has not."""

    def attention(self, i, h):
        p, T, hd = f"blk.{i}.", h.shape[0], self.head_dim
        ang = np.arange(T)[:, None] * 10000.0 ** (-np.arange(0, hd, 2) / hd)[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def turned(w):
            x = (h @ w.T).reshape(T, -1, hd)
            a, b = x[..., :hd // 2], x[..., hd // 2:]
            return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1).reshape(T, -1)

        n_kv = self.kv_heads[i]
        q = turned(self.w[p + "attn_q.weight"]).reshape(T, self.n_head, hd)
        k = turned(self.w[p + "attn_k.weight"]).reshape(T, n_kv, hd)
        v = (h @ self.w[p + "attn_v.weight"].T).reshape(T, n_kv, hd)
        out = np.zeros((T, self.n_head, hd))
        for j in range(self.n_head):
            s = q[:, j] @ k[:, j // (self.n_head // n_kv)].T * self.attention_multiplier
            s[~np.tril(np.ones((T, T), bool))] = -np.inf
            e = np.exp(s - s.max(1, keepdims=True))
            out[:, j] = (e / e.sum(1, keepdims=True)) @ v[:, j // (self.n_head // n_kv)]
        return out.reshape(T, -1) @ self.w[p + "attn_output.weight"].T


class NemotronHMoE(n3.NemotronH):
    """nemotron_h_moe's routing with one piece changed (the class attributes)."""
    softmax = False
    bias = True
    scale = True
    shared = True

    def mlp(self, i, h):
        p = f"blk.{i}."
        logits = h @ self.w[p + "ffn_gate_inp.weight"].T
        if self.softmax:
            scores = np.exp(logits - logits.max(1, keepdims=True))
            scores /= scores.sum(1, keepdims=True)
        else:
            scores = 1.0 / (1.0 + np.exp(-logits))
        bias = self.w[p + "exp_probs_b.bias"] if self.bias else 0.0
        scale = float(self.meta["nemotron_h_moe.expert_weights_scale"]) if self.scale else 1.0
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-(scores[t] + bias), kind="stable")[:2]
            for e, wt in zip(top, scores[t, top] / scores[t, top].sum() * scale):
                out[t] += wt * self.relu2(h[t:t + 1], self.w[p + "ffn_up_exps.weight"][e],
                                          self.w[p + "ffn_down_exps.weight"][e])[0]
        if self.shared:
            out += self.relu2(h, self.w[p + "ffn_up_shexp.weight"], self.w[p + "ffn_down_shexp.weight"])
        return out


class NemotronHMoESoftmax(NemotronHMoE):
    softmax = True


class NemotronHMoENoSelectionBias(NemotronHMoE):
    bias = False


class NemotronHMoEUnscaled(NemotronHMoE):
    scale = False


class NemotronHMoENoSharedExpert(NemotronHMoE):
    shared = False


ABLATIONS = [
    ("phi2", Phi2Sequential), ("phi2", Phi2FullRotary), ("phi2", Phi2NormRope), ("phi2", Phi2NoOutputBias),
    ("phi2", Phi2NoFfnBias), ("phi2", Phi2NoNormBias),
    ("starcoder2", StarCoder2NoQkvBias), ("starcoder2", StarCoder2NormRope), ("starcoder2", StarCoder2NoOutBias),
    ("starcoder2", StarCoder2ReluFfn),
    ("nemotron_h", NemotronHRelu), ("nemotron_h", NemotronHRope),
    ("nemotron_h_moe", NemotronHMoESoftmax), ("nemotron_h_moe", NemotronHMoENoSelectionBias),
    ("nemotron_h_moe", NemotronHMoEUnscaled), ("nemotron_h_moe", NemotronHMoENoSharedExpert),
]


@pytest.mark.parametrize("name, without", ABLATIONS, ids=[f"{n}-{c.__name__}" for n, c in ABLATIONS])
def test_the_recorded_logits_tell_each_feature_apart(name, without, tiny_dir):
    positions, theirs = llama_cpp(name, tiny_dir)
    prompt = tm.prompt(name)[:positions.max() + 1]
    ablated = cosines(without(tiny_file(name, tiny_dir)).forward(prompt)[positions], theirs).min()
    assert ablated < 0.999, (name, without.__name__, ablated)


def test_the_moe_ablations_own_reading_agrees_unchanged(tiny_dir):
    """NemotronHMoE, the routing the Nemotron 3 Nano ablations change one piece of, agrees
    with llama.cpp as it is."""
    positions, theirs = llama_cpp("nemotron_h_moe", tiny_dir)
    prompt = tm.prompt("nemotron_h_moe")[:positions.max() + 1]
    ours = NemotronHMoE(tiny_file("nemotron_h_moe", tiny_dir)).forward(prompt)[positions]
    assert cosines(ours, theirs).min() >= LLAMA_CPP_MIN_COS


def test_phi2_query_scaling_does_not_matter_numerically(tiny_dir):
    """llama.cpp scales Phi-2's q by 1/sqrt(head_dim) before q.k (against F16 overflow
    on GPUs); infer, like the float64 reference, scales the scores.  The reference agrees
    with llama.cpp to a cosine of 1 - 3e-7, below what the F16 rounding of llama.cpp's
    activations costs on the other families' files (LLAMA_CPP_MIN_COS), so where the
    scale is applied does not matter on the CPU."""
    positions, theirs = llama_cpp("phi2", tiny_dir)
    assert 1.0 - cosines(reference_logits("phi2", tiny_dir)[positions], theirs).min() < 1e-6


# ---- the spec as read, batches, state ----------------------------------------------------
def test_specs_as_read(tiny_dir):
    with infer.load(tiny_file("phi2", tiny_dir)) as model:
        s = model.engine.spec
        assert (s.norm_kind, s.norm_bias, s.parallel_blocks, s.qkv_bias, s.out_bias, s.ffn_bias, s.output_bias,
                s.activation, s.fused_qkv) == ("layer", True, True, True, True, True, True, "gelu", False)
        assert all(layer.rope.neox and layer.rope.rotated(64) == 32 for layer in s.layers)
    with infer.load(tiny_file("phi2-qkv", tiny_dir)) as model:
        assert model.engine.spec.fused_qkv and model.engine.spec.qkv_bias
    with infer.load(tiny_file("starcoder2", tiny_dir)) as model:
        s = model.engine.spec
        assert (s.norm_kind, s.norm_bias, s.parallel_blocks, s.qkv_bias, s.out_bias, s.ffn_bias, s.output_bias,
                s.activation, s.n_kv_heads) == ("layer", True, False, True, True, True, False, "gelu", 2)
        assert all(layer.rope.neox and layer.rope.rotated(64) == 64 and layer.rope.base == 100000.0
                   for layer in s.layers)
    with infer.load(tiny_file("nemotron_h", tiny_dir)) as model:
        s = model.engine.spec
        assert [(layer.kind, layer.ffn, layer.rope) for layer in s.layers] == [
            ("mamba2", False, None), ("mlp", True, None), ("mamba2", False, None), ("attention", False, None),
            ("mlp", True, None), ("mamba2", False, None)]
        assert (s.activation, s.mamba2.n_groups, s.attn_scale, s.moe) == ("relu_sqr", 2, 1 / 8, None)
    with infer.load(tiny_file("nemotron_h_moe", tiny_dir)) as model:
        s = model.engine.spec
        assert [layer.kind for layer in s.layers] == ["mamba2", "mlp", "mamba2", "attention", "mlp", "mamba2"]
        assert s.moe == MoE(n_experts=8, n_used=2, ffn_dim=128, gating="sigmoid", norm_weights=True, weight_scale=2.5,
                            shared_ffn_dim=256, selection_bias=True, shared_gated=False)
        assert not model.engine.create_context(n_ctx=16).fused_decode


@pytest.mark.parametrize("name", ["phi2", "starcoder2", "nemotron_h", "nemotron_h_moe"])
def test_batched_decode_equals_decoding_alone(name, tiny_dir):
    """engine.forward_batch (what `infer serve` steps): the fused C step for phi2 and
    starcoder2, the Python blocks in one pass for nemotron_h and nemotron_h_moe."""
    prompt = [int(t) for t in tm.prompt(name)]
    with infer.load(tiny_file(name, tiny_dir)) as model:
        assert_batched_equals_alone(model.engine, [prompt[:5], prompt[:23], prompt[:11]], 4, 64,
                                    fused=name in FUSED)


def test_nemotron_h_truncation_goes_back_exactly(tiny_dir):
    """The Mamba2 states' checkpoints: after truncate_to the next position's logits are
    the reference's, as after a fresh prefill."""
    prompt = tm.prompt("nemotron_h")
    ref = reference_logits("nemotron_h", tiny_dir)
    with infer.load(tiny_file("nemotron_h", tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=128)
        ctx.prefill(prompt[:60])
        for tok in prompt[60:80]:
            ctx.prefill([int(tok)])
        ctx.truncate_to(50)
        ctx.prefill(prompt[50:70])
        assert cosines(ctx.logits[None], ref[69:70])[0] >= 0.99999


def test_nemotron_h_moe_saved_state_and_copy_continue_exactly(tiny_dir):
    """A context's saved state and its copy hold the Mamba2 states and the one attention
    layer's cache (no rows for the MLP layers) and continue as the context does."""
    with infer.load(tiny_file("nemotron_h_moe", tiny_dir)) as model:
        ctx = recurrent_state_continues_exactly(model, tm.prompt("nemotron_h_moe"))
        assert ctx.k_cache.shape == (1, 64 * 2 * 64) and ctx.ssm_state.shape == (3, 8, 64, 32)
        assert cosines(ctx.logits[None], reference_logits("nemotron_h_moe", tiny_dir)[24:25])[0] >= 0.99999


@pytest.mark.parametrize("name", ["phi2", "nemotron_h"])
def test_greedy_generation_runs_through_the_cli(name, tiny_dir):
    """`infer generate` with --temp 0 prints the continuation the float64 reference
    picks greedily (where each pick is clear of the runner-up)."""
    path = tiny_file(name, tiny_dir)
    with infer.load(path) as model:
        assert_cli_generates_the_reference_greedy(path, model.tokenizer, reference(path).forward,
                                                  "A small model reads the text")


@pytest.mark.parametrize("name", NAMES)
def test_info_reads_the_files(name, tiny_dir, capsys):
    from infer.cli import main

    assert main(["info", tiny_file(name, tiny_dir)]) == 0
    out = capsys.readouterr().out
    assert f"architecture    {tm.FAMILIES3[name].arch}\n" in out
    if name == "nemotron_h":   # the Mamba2 layers only: not the MLP layers, which have no KV heads either
        assert "Mamba2          3 layers, 8 heads of 64 in 2 groups" in out


def test_the_new_architectures_are_known():
    assert {"phi2", "starcoder2", "nemotron_h"} <= set(infer.known_architectures())


# ---- refusals -----------------------------------------------------------------------------
MOE_KEYS = tm.FAMILIES3["nemotron_h_moe"].extra


@pytest.mark.parametrize("key, value, names", [
    ("moe_latent_size", 64, ["nemotron_h_moe.moe_latent_size"]),
    ("expert_group_count", 2, ["nemotron_h_moe.expert_group_count"]),
    ("expert_used_count", [0, 2, 0, 0, 4, 0], ["nemotron_h_moe.expert_count", "nemotron_h_moe.expert_used_count",
                                              "nemotron_h_moe.expert_feed_forward_length"]),
    ("expert_shared_count", 2, ["nemotron_h_moe.expert_shared_count"]),
    ("nextn_predict_layers", 1, ["nemotron_h_moe.nextn_predict_layers"]),
])
def test_nemotron_h_moe_pieces_it_does_not_implement_are_refused(key, value, names, tmp_path):
    """Nemotron 3 Super's latent projections, expert groups, Puzzle's per-layer expert
    counts, several shared experts, MTP blocks."""
    e = refused(tm.write_nemotron_h(tm.FAMILIES3["nemotron_h_moe"], str(tmp_path / "m.gguf"), {key: value}))
    assert e.names == names


def test_nemotron_h_moe_gated_experts_are_refused(tmp_path):
    """llama.cpp's nemotron_h_moe reads no expert gate (it would abort on a gated relu²)."""
    e = refused(tm.write_nemotron_h(tm.FAMILIES3["nemotron_h_moe"], str(tmp_path / "m.gguf"),
                                    {"blk.1.ffn_gate_exps.weight": np.zeros((8, 128, 256), np.float16)}))
    assert e.names == ["blk.1.ffn_gate_exps.weight"]


def test_nemotron_h_experts_are_nemotron_h_moe_s(tmp_path):
    t = dataclasses.replace(tm.FAMILIES3["nemotron_h"], extra={"expert_count": 8})
    e = refused(tm.write_nemotron_h(t, str(tmp_path / "n.gguf")))
    assert e.names == ["nemotron_h.expert_count"]


@pytest.mark.parametrize("key, value", [("attention.scale", 0.5), ("embedding_scale", 12.0)])
def test_nemotron_h_keys_its_graph_does_not_read_are_refused(key, value, tmp_path):
    """llama.cpp's nemotron_h reads no attention scale nor Granite's multipliers."""
    e = refused(tm.write_nemotron_h(tm.FAMILIES3["nemotron_h"], str(tmp_path / "n.gguf"), {key: value}))
    assert e.names == [f"nemotron_h.{key}"]


def test_nemotron_h_layer_with_kv_heads_and_an_ffn_is_refused(tmp_path):
    e = refused(tm.write_nemotron_h(tm.FAMILIES3["nemotron_h"], str(tmp_path / "n.gguf"),
                                    {"attention.head_count_kv": [0, 2, 0, 2, 0, 0]}))
    assert "not a Nemotron-H layer" in str(e)


def test_nemotron_h_tensors_of_a_layer_kind_it_is_not_are_refused(tmp_path):
    e = refused(tm.write_nemotron_h(tm.FAMILIES3["nemotron_h"], str(tmp_path / "n.gguf"),
                                    {"blk.0.ffn_norm.weight": np.ones(256, np.float32)}))
    assert e.names == ["blk.0.ffn_norm.weight"]


def test_starcoder2_partial_rotary_is_refused(tmp_path):
    t = dataclasses.replace(tm.FAMILIES3["starcoder2"], rope_dims=32)
    e = refused(tm.write("starcoder2", str(tmp_path / "s.gguf"), t))
    assert e.names == ["starcoder2.rope.dimension_count"]


@pytest.mark.parametrize("field, missing", [("output_bias", "output.bias"), ("ffn_bias", "blk.0.ffn_up.bias"),
                                            ("out_bias", "blk.0.attn_output.bias")])
def test_phi2_biases_are_required(field, missing, tmp_path):
    """llama.cpp's phi2 loads these without TENSOR_NOT_REQUIRED."""
    t = dataclasses.replace(tm.FAMILIES3["phi2"], **{field: False})
    with pytest.raises(infer.gguf.GGUFError, match=f"tensor {missing} is missing"):
        infer.load(tm.write("phi2", str(tmp_path / "p.gguf"), t))


def test_decoder_checks_the_ffn_biases(tiny_dir):
    from infer.variants.transformer import decoder_arguments

    with infer.load(tiny_file("starcoder2", tiny_dir)) as model:
        spec, w = model.engine.spec, model.engine.live_weights()
        embd, output, output_norm, layers = decoder_arguments(spec, w)
        norm_bias = w.output_norm_bias.data
        half = [dict(layer, down_bias=None) for layer in layers]
        with pytest.raises(ValueError, match="up_bias and down_bias come together"):
            K.TransformerDecoder(spec, embd, output, output_norm, half, output_norm_bias=norm_bias)
        gated = dataclasses.replace(spec, activation="silu", ffn_bias=False)
        with pytest.raises(ValueError, match="in an FFN without a gate"):
            K.TransformerDecoder(gated, embd, output, output_norm, layers, output_norm_bias=norm_bias)
        with pytest.raises(ValueError, match="expected 512"):
            K.TransformerDecoder(spec, embd, output, output_norm, layers, output_norm_bias=norm_bias,
                                 output_bias=np.zeros(3, np.float32))


def test_spec_refuses_ffn_biases_with_a_gate_and_single_half_layers_with_parallel_blocks():
    sizes = dict(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, ffn_dim=8, vocab_size=4, max_seq_len=8,
                 rms_eps=1e-5)
    with pytest.raises(ValueError, match="ffn_bias: only with an FFN without a gate"):
        TransformerSpec(**sizes, layers=(LayerSpec(),), ffn_bias=True)
    with pytest.raises(ValueError, match="FFN-only layers and layers without an FFN"):
        TransformerSpec(**sizes, layers=(LayerSpec(kind="mlp"),), parallel_blocks=True, activation="relu_sqr")
    with pytest.raises(ValueError, match="the layer is its FFN"):
        LayerSpec(kind="mlp", ffn=False)
