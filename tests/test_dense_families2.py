"""The dense families of ``tiny_models.DENSE2`` (glm4: GLM-4-0414; cohere2: Command
R7B; minicpm; internlm2; stablelm: StableLM 2) beyond tests/test_families.py,
which holds each of them to the float64 numpy reference
(tests/reference/numpy_dense2.py) at every position and to llama.cpp's recorded
logits (tests/data/llama_cpp_dense2.npz):

* each feature they added is one the recorded data tells apart: the reference
  with that feature taken out no longer agrees with llama.cpp;
* LayerNorm and parallel blocks in the fused C step equal the Python blocks, and
  a batch of contexts in one fused step equals the reference;
* what llama.cpp would run differently, or not at all, is refused.
"""
import copy
import dataclasses
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import LLAMA_CPP_MIN_COS, cosines
from reference import numpy_dense2 as nd
from reference import numpy_families as nf
from test_unsupported import refused, tiny

import infer
from infer import kernels as K
from infer.variants.spec import LayerSpec, TransformerSpec

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_dense2.npz")


# ---- the reference with one feature taken out ------------------------------------------
class Glm4NoPostNorms(nd.Glm4):
    def block(self, i, x, pos):
        return nf.Transformer.block(self, i, x, pos)


class Glm4NoBias(nd.Glm4):
    qkv_bias = False


class Glm4FullRotary(nd.Glm4):
    def rope_setup(self):
        self.n_rot = self.head_dim
        super().rope_setup()


class Glm4NeoxRope(nd.Glm4):
    neox = True


class Glm4UpThenGate(nd.Glm4):
    def ffn(self, i, h):
        gu = h @ self.t[f"blk.{i}.ffn_up.weight"].T
        n = gu.shape[1] // 2
        u, g = gu[:, :n], gu[:, n:]
        return (g / (1.0 + np.exp(-g)) * u) @ self.t[f"blk.{i}.ffn_down.weight"].T


class Cohere2RmsNorm(nd.Cohere2):
    layernorm = nf.Transformer.rmsnorm


class Cohere2Sequential(nd.Cohere2):
    def block(self, i, x, pos):
        x = x + self.attention(i, self.layernorm(x, self.t[f"blk.{i}.attn_norm.weight"]), pos)
        return x + self.ffn(i, self.layernorm(x, self.t[f"blk.{i}.attn_norm.weight"]))


class Cohere2RopeEverywhere(nd.Cohere2):
    def no_rope(self, layer):
        return False


class Cohere2NoWindow(nd.Cohere2):
    def window(self, layer):
        return 0


class Cohere2Unscaled(nd.Cohere2):
    def logits(self, x):
        return self.layernorm(x, self.t["output_norm.weight"]) @ self.head.T


class MiniCPMNoResidualScale(nd.MiniCPM):
    def block(self, i, x, pos):
        return nf.Transformer.block(self, i, x, pos)


class MiniCPMNoEmbeddingScale(nd.MiniCPM):
    embed = nf.Transformer.embed


class MiniCPMNeoxRope(nd.MiniCPM):
    neox = True


class InternLM2NeoxRope(nd.InternLM2):
    neox = True


class StableLMNoNormBias(nd.StableLM):
    def layernorm(self, x, name):
        return nd.Cohere2.layernorm(self, x, self.t[name + ".weight"])


class StableLMNormRope(nd.StableLM):
    neox = False


class StableLMFullRotary(nd.StableLM):
    def rope_setup(self):
        self.n_rot = self.head_dim
        super().rope_setup()


ABLATIONS = [
    ("glm4", Glm4NoPostNorms), ("glm4", Glm4NoBias), ("glm4", Glm4FullRotary), ("glm4", Glm4NeoxRope),
    ("glm4", Glm4UpThenGate),
    ("cohere2", Cohere2RmsNorm), ("cohere2", Cohere2Sequential), ("cohere2", Cohere2RopeEverywhere),
    ("cohere2", Cohere2NoWindow),
    ("minicpm", MiniCPMNoResidualScale), ("minicpm", MiniCPMNoEmbeddingScale), ("minicpm", MiniCPMNeoxRope),
    ("internlm2", InternLM2NeoxRope),
    ("stablelm", StableLMNoNormBias), ("stablelm", StableLMNormRope), ("stablelm", StableLMFullRotary),
]


def _recorded(name, path):
    if not os.path.exists(DATA):
        pytest.skip("no recorded llama.cpp logits (tests/data/README.md says how to make them)")
    recorded = np.load(DATA)
    assert str(recorded[f"{name}/sha256"]) == tm.sha256(path)
    return recorded, recorded[f"{name}/positions"], recorded[f"{name}/logits"].astype(np.float64)


@pytest.mark.parametrize("name, without", ABLATIONS, ids=[f"{n}-{c.__name__}" for n, c in ABLATIONS])
def test_the_recorded_logits_tell_each_feature_apart(name, without, tmp_path):
    """Against llama.cpp, the reference without the feature falls well under the
    agreement the true reference reaches (test_families)."""
    path = tm.write(name, str(tmp_path / f"{name}.gguf"))
    _, positions, theirs = _recorded(name, path)
    prompt = tm.prompt(name)[:positions.max() + 1]
    true_cos = cosines(nf.reference(path).forward(prompt)[positions], theirs).min()
    ablated = cosines(without(path).forward(prompt)[positions], theirs).min()
    assert true_cos >= LLAMA_CPP_MIN_COS
    assert ablated < 0.999, (name, without.__name__, ablated)


def test_cohere2_logit_scale_is_seen(tmp_path):
    """The logit scale does not move a cosine: the logits' size does."""
    path = tm.write("cohere2", str(tmp_path / "cohere2.gguf"))
    _, positions, theirs = _recorded("cohere2", path)
    prompt = tm.prompt("cohere2")[:positions.max() + 1]
    true = nf.reference(path).forward(prompt)[positions]
    unscaled = Cohere2Unscaled(path).forward(prompt)[positions]
    assert np.abs(true - theirs).max() < 0.05
    assert np.abs(unscaled - theirs).max() > 1.0


def test_minicpm_logit_scale_is_seen(tmp_path):
    path = tm.write("minicpm", str(tmp_path / "minicpm.gguf"))
    _, positions, theirs = _recorded("minicpm", path)
    prompt = tm.prompt("minicpm")[:positions.max() + 1]
    true = nf.reference(path).forward(prompt)[positions]
    assert np.abs(true - theirs).max() < 0.05
    assert np.abs(true * 4.0 - theirs).max() > 1.0


@pytest.mark.parametrize("name", list(tm.DENSE2))
def test_tokenizer_matches_llama_cpp(name, tmp_path):
    """The file's vocabulary under its tokenizer.ggml.pre (glm4, command-r)
    tokenizes like llama.cpp's llama_tokenize."""
    path = tm.write(name, str(tmp_path / f"{name}.gguf"))
    recorded, _, _ = _recorded(name, path)
    with infer.load(path) as model:
        assert model.tokenizer.pre == tm.DENSE2[name].pre
        for i, text in enumerate(tm.TOKENIZE_TEXTS):
            assert model.tokenizer.encode(text, add_special=False) == recorded[f"{name}/tokens/{i}"].tolist(), text


# ---- the spec as read -----------------------------------------------------------------------
def test_specs_as_read(tmp_path):
    with infer.load(tm.write("glm4", str(tmp_path / "glm4.gguf"))) as model:
        s = model.engine.spec
        assert (s.post_attn_norm, s.post_ffn_norm, s.fused_gate_up, s.qkv_bias, s.norm_kind) == \
            (True, True, True, True, "rms")
        assert all(layer.rope.rotated(64) == 32 and not layer.rope.neox for layer in s.layers)
    with infer.load(tm.write("cohere2", str(tmp_path / "cohere2.gguf"))) as model:
        s = model.engine.spec
        assert (s.norm_kind, s.parallel_blocks, s.logit_scale, s.rms_eps) == ("layer", True, 0.5, pytest.approx(1e-5))
        assert [(layer.window, layer.rope is None) for layer in s.layers] == [(128, False)] * 3 + [(0, True)]
    with infer.load(tm.write("minicpm", str(tmp_path / "minicpm.gguf"))) as model:
        s = model.engine.spec
        assert (s.embd_scale, s.residual_scale, s.logit_scale) == (2.0, pytest.approx(0.7), 0.25)
    with infer.load(tm.write("stablelm", str(tmp_path / "stablelm.gguf"))) as model:
        s = model.engine.spec
        assert (s.norm_kind, s.norm_bias, s.qkv_bias, s.parallel_blocks) == ("layer", True, True, False)
        assert all(layer.rope.neox and layer.rope.rotated(64) == 16 for layer in s.layers)


# ---- several conversations in one fused step -----------------------------------------------
@pytest.mark.parametrize("name", list(tm.DENSE2))
def test_batched_decode_matches_the_reference(name, tmp_path):
    """Three contexts at different positions (one past the 128 window) decode one
    token each in one fused C step (engine.forward_batch); each context's logits
    match the float64 reference at its own position, and one context decoding alone."""
    prompt = tm.prompt(name)
    ends = (9, 70, 150)
    path = tm.write(name, str(tmp_path / f"{name}.gguf"))
    ref = nf.reference(path).forward(prompt[:max(ends) + 1])
    with infer.load(path) as model:
        ctxs = [model.engine.create_context(n_ctx=256) for _ in ends]
        for ctx, end in zip(ctxs, ends):
            ctx.prefill(prompt[:end])
        alone = copy.deepcopy(ctxs[2])
        model.engine.forward_batch(ctxs, np.array([prompt[end] for end in ends]), list(ends))
        alone.prefill([int(prompt[ends[2]])])
        np.testing.assert_array_equal(alone.logits, ctxs[2].logits)
        for ctx, end in zip(ctxs, ends):
            c = cosines(ctx.logits.astype(np.float64), ref[end])
            assert c >= 0.99999, (end, c)


# ---- refusals -----------------------------------------------------------------------------
def test_cohere2_separate_sliding_rope_base_is_refused(tmp_path):
    """llama.cpp's cohere2 graph reads rope.freq_base_swa and turns with the global base."""
    e = refused(tiny(tmp_path, "cohere2", **{"rope.freq_base_swa": 1000.0}))
    assert e.names == ["cohere2.rope.freq_base_swa"]


@pytest.mark.parametrize("tensor, shape", [("output.weight", (512, 256)), ("blk.0.ffn_norm.weight", (256,)),
                                           ("blk.1.attn_output.bias", (256,))])
def test_cohere2_tensors_llama_cpp_does_not_load_are_refused(tensor, shape, tmp_path):
    """cohere2 always ties its head, has one norm per block and no output bias."""
    e = refused(tiny(tmp_path, "cohere2", more_tensors={tensor: np.ones(shape, np.float32)}))
    assert e.names == [tensor]


def test_cohere2_needs_its_layernorm_epsilon(tmp_path):
    t = dataclasses.replace(tm.DENSE2["cohere2"], layer_norm=False)
    with pytest.raises(infer.gguf.GGUFError, match="cohere2.attention.layer_norm_epsilon is missing"):
        infer.load(tm.write("cohere2", str(tmp_path / "c.gguf"), t))


@pytest.mark.parametrize("key, value", [("rope.dimension_sections", [8, 8, 0, 0]), ("nextn_predict_layers", 1)])
def test_glm4_multi_axis_rope_and_mtp_are_refused(key, value, tmp_path):
    e = refused(tiny(tmp_path, "glm4", **{key: value}))
    assert e.names == [f"glm4.{key}"]


def test_minicpm_without_logit_scale_is_refused(tmp_path):
    t = tm.DENSE2["minicpm"]
    t = dataclasses.replace(t, extra={k: v for k, v in t.extra.items() if k != "logit_scale"})
    e = refused(tm.write("minicpm", str(tmp_path / "m.gguf"), t))
    assert e.names == ["minicpm.logit_scale"] and "re-convert" in str(e)


@pytest.mark.parametrize("key, value", [("attention.scale", 0.5), ("expert_count", 4)])
def test_minicpm_keys_it_does_not_read_are_refused(key, value, tmp_path):
    e = refused(tiny(tmp_path, "minicpm", **{key: value}))
    assert e.names == [f"minicpm.{key}"]


def test_minicpm_output_bias_is_refused(tmp_path):
    e = refused(tiny(tmp_path, "minicpm", more_tensors={"blk.0.attn_output.bias": np.ones(256, np.float32)}))
    assert e.names == ["blk.0.attn_output.bias"]


def test_internlm2_needs_its_output_matrix(tmp_path):
    t = dataclasses.replace(tm.DENSE2["internlm2"], tied=True)
    with pytest.raises(infer.gguf.GGUFError, match="tensor output.weight is missing"):
        infer.load(tm.write("internlm2", str(tmp_path / "i.gguf"), t))


def test_internlm2_partial_rotary_is_refused(tmp_path):
    t = dataclasses.replace(tm.DENSE2["internlm2"], rope_dims=16)
    e = refused(tm.write("internlm2", str(tmp_path / "i.gguf"), t))
    assert e.names == ["internlm2.rope.dimension_count"]


@pytest.mark.parametrize("drop, add", [("ffn_norm", {}), (None, {"blk.0.attn_q_norm.weight": np.ones((4, 64))})])
def test_stablelm_12b_parallel_blocks_are_refused(drop, add, tmp_path):
    """StableLM 2 12B: no ffn_norm (parallel blocks) and per-head q/k LayerNorms."""
    t = dataclasses.replace(tm.DENSE2["stablelm"], parallel=drop is not None)
    more = {k: v.astype(np.float32) for k, v in add.items()}
    e = refused(tm.write("stablelm", str(tmp_path / "s.gguf"), t, more))
    assert "StableLM 2 12B" in str(e)


def test_stablelm_norm_biases_are_required(tmp_path):
    t = dataclasses.replace(tm.DENSE2["stablelm"], norm_bias=False)
    with pytest.raises(infer.gguf.GGUFError, match="attn_norm.bias is missing"):
        infer.load(tm.write("stablelm", str(tmp_path / "s.gguf"), t))


def test_decoder_checks_norm_biases(tmp_path):
    from infer.variants.transformer import decoder_arguments

    with infer.load(tm.write("stablelm", str(tmp_path / "stablelm.gguf"))) as model:
        spec, w = model.engine.spec, model.engine.live_weights()
        embd, output, output_norm, layers = decoder_arguments(spec, w)
        assert w.output_norm_bias is not None
        bias = w.output_norm_bias.data
        with pytest.raises(ValueError, match="come with output_norm_bias"):
            K.TransformerDecoder(spec, embd, output, output_norm, layers)   # biases in the layers only
        with pytest.raises(ValueError, match="norm_kind 'layer'"):
            K.TransformerDecoder(dataclasses.replace(spec, norm_kind="rms", norm_bias=False), embd, output,
                                 output_norm, layers, output_norm_bias=bias)
        K.TransformerDecoder(spec, embd, output, output_norm, layers, output_norm_bias=bias).release()


def test_glm4_rope_freqs_are_refused(tmp_path):
    e = refused(tiny(tmp_path, "glm4", more_tensors={"rope_freqs.weight": np.ones(16, np.float32)}))
    assert e.names == ["rope_freqs.weight"]


def test_spec_refuses_parallel_blocks_with_post_norms():
    with pytest.raises(ValueError, match="parallel_blocks: only with pre-norms"):
        TransformerSpec(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, ffn_dim=8, vocab_size=4,
                        max_seq_len=8, rms_eps=1e-5, layers=(LayerSpec(),), parallel_blocks=True,
                        post_ffn_norm=True)
    with pytest.raises(ValueError, match="norm_kind: expected one of"):
        TransformerSpec(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, ffn_dim=8, vocab_size=4,
                        max_seq_len=8, rms_eps=1e-5, layers=(LayerSpec(),), norm_kind="batch")


def test_decoder_refuses_parallel_blocks_with_two_norms(tmp_path):
    from infer.variants.transformer import decoder_arguments

    with infer.load(tm.write("cohere2", str(tmp_path / "cohere2.gguf"))) as model:
        spec = model.engine.spec
        embd, output, output_norm, layers = decoder_arguments(spec, model.engine.live_weights())
        two = [dict(layer, ffn_norm=np.ones(spec.dim, np.float32)) for layer in layers]
        with pytest.raises(ValueError, match="parallel blocks have one norm"):
            K.TransformerDecoder(spec, embd, output, output_norm, two)
        with pytest.raises(ValueError, match="norm_kind"):
            K.TransformerDecoder(dataclasses.replace(spec, norm_kind="batch"), embd, output, output_norm, layers)
