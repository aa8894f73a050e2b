"""The dense families of ``tiny_models.DENSE`` (olmo2, exaone4, exaone, ernie4_5,
gemma, hunyuan-dense) beyond tests/test_families.py, which holds each of them to the float64
numpy reference and to llama.cpp's recorded logits:

* each feature they added is one the recorded data tells apart: the numpy
  reference with that feature taken out (or done the way another family does
  it) no longer agrees with llama.cpp;
* what llama.cpp would run differently, or not at all, is refused with
  UnsupportedModelError; bad decoder arguments with ValueError.
"""
import dataclasses
import math
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import cosines
from reference import numpy_families as nf
from test_unsupported import refused, tiny

import infer
from infer import kernels as K
from infer.variants.spec import TransformerSpec

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_dense.npz")
#: test_families.LLAMA_CPP_MIN_COS: what the true reference reaches on every file
LLAMA_CPP_MIN_COS = 0.99995


# ---- the reference with one feature taken out ------------------------------------------
class PreNormed:
    """Unit-weight RMSNorms before both block halves, as every pre-norm family has."""

    def block(self, i, x, pos):
        p = f"blk.{i}."
        a = self.attention(i, self.rmsnorm(x, 1.0), pos)
        x = x + self.rmsnorm(a, self.t[p + "post_attention_norm.weight"])
        f = self.ffn(i, self.rmsnorm(x, 1.0))
        return x + self.rmsnorm(f, self.t[p + "post_ffw_norm.weight"])


class Olmo2PerHeadNorm(nf.Olmo2):
    """q/k norms per head (Qwen 3's way), the weights cut into head-sized pieces."""

    def qkv(self, i, h):
        q, k, v = nf.Llama.qkv(self, i, h)
        p, hd = f"blk.{i}.", self.head_dim

        def per_head(x, w):
            x = x.reshape(len(x), -1, hd)
            return self.rmsnorm(x, w.reshape(-1, hd)).reshape(len(x), -1)
        return per_head(q, self.t[p + "attn_q_norm.weight"]), per_head(k, self.t[p + "attn_k_norm.weight"]), v


class Olmo2PreNormed(PreNormed, nf.Olmo2):
    pass


class Olmo3ScaledEverywhere(nf.Olmo2):
    """YaRN on the sliding layers too."""

    def sliding(self, layer):
        return False

    def window(self, layer):
        return int(self.get("attention.sliding_window")) if layer % 4 != 3 else 0


class Olmo3NoWindow(nf.Olmo2):
    def window(self, layer):
        return 0


class Olmo3PatternZeroGlobal(nf.Olmo2):
    """A sliding_window_pattern of 0 read as "no layer slides" (infer's reading before)."""

    def sliding(self, layer):
        return False


class Exaone4PreNormed(PreNormed, nf.Exaone4):
    pass


class Exaone4RopeEverywhere(nf.Exaone4):
    def no_rope(self, layer):
        return False


class Exaone4NoWindow(nf.Exaone4):
    def window(self, layer):
        return 0


class ExaoneNormRope(nf.Exaone):
    neox = False


class ExaoneNoFactors(nf.Exaone):
    def rope_setup(self):
        nf.Transformer.rope_setup(self)


class ErnieNeoxRope(nf.Ernie4_5):
    neox = True


class GemmaUnscaled(nf.Gemma):
    def embed(self, tokens):
        return nf.Transformer.embed(self, tokens)


class GemmaSilu(nf.Gemma):
    ffn = nf.Transformer.ffn


class HunyuanNoAlpha(nf.HunyuanDense):
    """The file's rope.freq_base as it is, without the NTK alpha."""

    def rope_setup(self):
        nf.Llama.rope_setup(self)


class HunyuanNormBeforeRope(nf.HunyuanDense):
    qk_norm_after_rope = False


ABLATIONS = [
    ("olmo2", Olmo2PerHeadNorm), ("olmo2", Olmo2PreNormed),
    ("olmo3", Olmo3ScaledEverywhere), ("olmo3", Olmo3NoWindow), ("olmo3-all-sliding", Olmo3PatternZeroGlobal),
    ("exaone4", Exaone4PreNormed), ("exaone4-swa", Exaone4RopeEverywhere), ("exaone4-swa", Exaone4NoWindow),
    ("exaone", ExaoneNormRope), ("exaone", ExaoneNoFactors),
    ("ernie4_5", ErnieNeoxRope),
    ("gemma", GemmaUnscaled), ("gemma", GemmaSilu),
    ("hunyuan-dense", HunyuanNoAlpha), ("hunyuan-dense", HunyuanNormBeforeRope),
]


_TRUE_COS: dict = {}


@pytest.mark.parametrize("name, without", ABLATIONS, ids=[f"{n}-{c.__name__}" for n, c in ABLATIONS])
def test_the_recorded_logits_tell_each_feature_apart(name, without, tmp_path):
    """Against llama.cpp, the reference without the feature falls well under the
    agreement the true reference reaches (test_families), so each feature is
    held by the data, not only by the reference's reading of it."""
    if not os.path.exists(DATA):
        pytest.skip("no recorded llama.cpp logits (tests/data/README.md says how to make them)")
    recorded = np.load(DATA)
    path = tm.write(name, str(tmp_path / f"{name}.gguf"))
    assert str(recorded[f"{name}/sha256"]) == tm.sha256(path)
    positions = recorded[f"{name}/positions"]
    theirs = recorded[f"{name}/logits"].astype(np.float64)
    prompt = tm.prompt(name)[:positions.max() + 1]
    if name not in _TRUE_COS:  # the same file (its sha256 checked above) for each of its ablations
        _TRUE_COS[name] = cosines(nf.reference(path, tm.ALL[name].n_ctx).forward(prompt)[positions], theirs).min()
    true_cos = _TRUE_COS[name]
    ablated = cosines(without(path, tm.ALL[name].n_ctx).forward(prompt)[positions], theirs).min()
    assert true_cos >= LLAMA_CPP_MIN_COS
    assert ablated < 0.999, (name, without.__name__, ablated)


# ---- refusals (test_unsupported's helpers: a tiny file with extra keys or tensors) ------
@pytest.mark.parametrize("name", ["olmo3", "exaone4-swa"])
def test_a_separate_sliding_rope_base_is_refused(name, tmp_path):
    """llama.cpp's olmo2 and exaone4 graphs ignore rope.freq_base_swa."""
    e = refused(tiny(tmp_path, name, **{"rope.freq_base_swa": 1000.0}))
    assert e.names == [f"{tm.DENSE[name].arch}.rope.freq_base_swa"]


@pytest.mark.parametrize("name", ["olmo3", "exaone4-swa"])
def test_the_same_sliding_rope_base_loads(name, tmp_path):
    with infer.load(tiny(tmp_path, name, **{"rope.freq_base_swa": tm.DENSE[name].rope_base})) as model:
        assert any(layer.window for layer in model.engine.spec.layers)


def test_exaone4_windows_only_with_64_layers(tmp_path):
    """llama.cpp turns EXAONE 4's windows on for the 64-layer model alone; the
    1.2B shape reads the key and attends globally with RoPE everywhere."""
    with infer.load(tiny(tmp_path, "exaone4", **{"attention.sliding_window": 128})) as model:
        assert all(layer.window == 0 and layer.rope is not None for layer in model.engine.spec.layers)
    with infer.load(tiny(tmp_path, "exaone4-swa")) as model:
        layers = model.engine.spec.layers
        assert [(layer.window, layer.rope is None) for layer in layers[:4]] == [(128, False)] * 3 + [(0, True)]


def test_ernie_attention_output_bias_is_refused(tmp_path):
    """llama.cpp loads ERNIE 4.5's optional attn_output.bias and never adds it."""
    e = refused(tiny(tmp_path, "ernie4_5", more_tensors={"blk.0.attn_output.bias": np.ones(256, np.float32)}))
    assert e.names == ["blk.0.attn_output.bias"]


@pytest.mark.parametrize("name, tensor", [("olmo2", "blk.0.attn_norm.weight"), ("exaone4", "blk.1.ffn_norm.weight")])
def test_a_pre_norm_in_a_post_norm_family_is_refused(name, tensor, tmp_path):
    e = refused(tiny(tmp_path, name, more_tensors={tensor: np.ones(256, np.float32)}))
    assert e.names == [tensor]


def test_olmo2_head_sized_qk_norms_are_refused(tmp_path):
    """OLMo 2's q/k norms span the whole projection; per-head weights are another model."""
    t = dataclasses.replace(tm.DENSE["olmo2"], qk_norm_all=False)
    with pytest.raises(infer.gguf.GGUFError, match="attn_q_norm.weight: expected F32 of 256 values"):
        infer.load(tm.write("olmo2", str(tmp_path / "olmo2.gguf"), t))


def test_hunyuan_rope_freqs_are_refused(tmp_path):
    """llama.cpp's hunyuan-dense loader creates no rope_freqs tensor (such a file
    does not load there)."""
    e = refused(tiny(tmp_path, "hunyuan-dense", more_tensors={"rope_freqs.weight": np.ones(32, np.float32)}))
    assert e.names == ["rope_freqs.weight"]


def test_hunyuan_alpha_with_yarn_is_refused(tmp_path):
    e = refused(tiny(tmp_path, "hunyuan-dense", **{"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0}))
    assert e.names == ["hunyuan-dense.rope.scaling.alpha"]


def test_gemma_output_weight_is_refused(tmp_path):
    e = refused(tiny(tmp_path, "gemma", more_tensors={"output.weight": np.ones((512, 256), np.float16)}))
    assert e.names == ["output.weight"]


# ---- the spec and the decoder's checks --------------------------------------------------
def test_spec_refuses_an_unknown_qk_norm_scope():
    with pytest.raises(ValueError, match="qk_norm_scope: expected one of"):
        TransformerSpec(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, ffn_dim=8, vocab_size=4,
                        max_seq_len=8, rms_eps=1e-5, layers=(infer.variants.spec.LayerSpec(),),
                        qk_norm_scope="row")


@pytest.fixture(scope="module")
def olmo2_decoder_parts(tmp_path_factory):
    from infer.variants.transformer import decoder_arguments

    path = tm.write("olmo2", str(tmp_path_factory.mktemp("olmo2") / "olmo2.gguf"))
    model = infer.load(path)
    yield model.engine.spec, decoder_arguments(model.engine.spec, model.engine.live_weights())
    model.close()


def test_decoder_refuses_pre_norms_the_config_does_not_have(olmo2_decoder_parts):
    spec, (embd, output, output_norm, layers) = olmo2_decoder_parts
    bad = [dict(layer, attn_norm=np.ones(spec.dim, np.float32), ffn_norm=np.ones(spec.dim, np.float32))
           for layer in layers]
    with pytest.raises(ValueError, match="pre_norms is False"):
        K.TransformerDecoder(spec, embd, output, output_norm, bad)


def test_decoder_needs_pre_norms_when_the_config_has_them(olmo2_decoder_parts):
    spec, (embd, output, output_norm, layers) = olmo2_decoder_parts
    with pytest.raises(KeyError, match="attn_norm"):
        K.TransformerDecoder(dataclasses.replace(spec, pre_norms=True), embd, output, output_norm, layers)


def test_spec_refuses_norms_after_rope_over_the_whole_projection():
    with pytest.raises(ValueError, match="qk_norm_after_rope: only with per-head"):
        TransformerSpec(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, ffn_dim=8, vocab_size=4,
                        max_seq_len=8, rms_eps=1e-5, layers=(infer.variants.spec.LayerSpec(),),
                        qk_norm_scope="all", qk_norm_after_rope=True)


def test_decoder_refuses_norms_after_rope_over_the_whole_projection(olmo2_decoder_parts):
    spec, (embd, output, output_norm, layers) = olmo2_decoder_parts

    class Config:   # a config the spec's own check would not let through
        def __getattr__(self, name):
            return True if name == "qk_norm_after_rope" else getattr(spec, name)
    with pytest.raises(ValueError, match="qk_norm_after_rope"):
        K.TransformerDecoder(Config(), embd, output, output_norm, layers)


def test_decoder_checks_qk_norm_lengths_against_the_scope(olmo2_decoder_parts):
    spec, (embd, output, output_norm, layers) = olmo2_decoder_parts
    with pytest.raises(ValueError, match="q_norm"):
        K.TransformerDecoder(dataclasses.replace(spec, qk_norm_scope="head"), embd, output, output_norm, layers)
    with pytest.raises(ValueError, match="qk_norm_scope"):
        K.TransformerDecoder(dataclasses.replace(spec, qk_norm_scope="rows"), embd, output, output_norm, layers)


def test_gemma_embedding_scale_is_sqrt_dim(tmp_path):
    with infer.load(tm.write("gemma", str(tmp_path / "gemma.gguf"))) as model:
        spec = model.engine.spec
        assert spec.embd_scale == pytest.approx(math.sqrt(256)) and spec.activation == "gelu_tanh"
        assert spec.q_dim == 512 and spec.tied_head


# ---- tokenizers -------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(tm.DENSE))
def test_tokenizer_matches_llama_cpp(name, tmp_path):
    """The file's vocabulary under its tokenizer.ggml.pre (dbrx, exaone4, exaone,
    hunyuan-dense, default) tokenizes like llama.cpp's llama_tokenize.  On the tiny
    vocabulary some names split alike (hunyuan-dense, dbrx, llama3 and default
    give the same ids here), so this holds the names to llama.cpp, not apart."""
    if not os.path.exists(DATA):
        pytest.skip("no recorded llama.cpp logits (tests/data/README.md says how to make them)")
    recorded = np.load(DATA)
    with infer.load(tm.write(name, str(tmp_path / f"{name}.gguf"))) as model:
        assert model.tokenizer.pre == tm.DENSE[name].pre
        for i, text in enumerate(tm.TOKENIZE_TEXTS):
            assert model.tokenizer.encode(text, add_special=False) == recorded[f"{name}/tokens/{i}"].tolist(), text


# ---- several conversations in one fused step -----------------------------------------------
@pytest.mark.parametrize("name", list(tm.DENSE))
def test_batched_decode_matches_the_reference(name, tmp_path):
    """Three contexts at different positions (one past the 128 window) decode one
    token each in one fused C step (engine.forward_batch); each context's logits
    match the float64 reference at its own position."""
    prompt = tm.prompt(name)
    ends = (9, 70, 150)
    path = tm.write(name, str(tmp_path / f"{name}.gguf"))
    ref = nf.reference(path, tm.ALL[name].n_ctx).forward(prompt[:max(ends) + 1])
    with infer.load(path) as model:
        ctxs = [model.engine.create_context(n_ctx=256) for _ in ends]
        for ctx, end in zip(ctxs, ends):
            ctx.prefill(prompt[:end])
        model.engine.forward_batch(ctxs, np.array([prompt[end] for end in ends]), list(ends))
        for ctx, end in zip(ctxs, ends):
            c = cosines(ctx.logits.astype(np.float64), ref[end])
            assert c >= 0.99999, (end, c)
            assert np.abs(ctx.logits - ref[end]).max() < 0.05
