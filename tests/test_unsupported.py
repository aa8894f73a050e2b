"""Files whose maths a variant does not implement are refused at load, with a typed
error naming what was not understood (never loaded and run without it)."""
import dataclasses

import numpy as np
import pytest
import tiny_models as tm

import infer
from infer import UnsupportedModelError
from infer.gguf import GGUFError


def tiny(tmp_path, name="llama", more_tensors=None, **extra):
    t = tm.ALL[name]
    t = dataclasses.replace(t, extra={**t.extra, **extra})
    return tm.write(name, str(tmp_path / f"{name}.gguf"), t, more_tensors)


def refused(path):
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(path)
    return e.value


def test_the_plain_file_loads(tmp_path):
    with infer.load(tiny(tmp_path)) as model:
        assert model.engine.architecture == "llama"


def test_unknown_tensor_is_named(tmp_path):
    """llama.cpp allows q/k/v biases on `llama`; infer's llama spec has none, so
    a file with them must not load as if they were not there."""
    e = refused(tiny(tmp_path, more_tensors={"blk.0.attn_q.bias": np.ones(256, np.float32)}))
    assert e.names == ["blk.0.attn_q.bias"] and "blk.0.attn_q.bias" in str(e)


@pytest.mark.parametrize("key, value", [
    ("attention.scale", 0.5),                      # llama.cpp reads it for granite only
    ("attn_logit_softcapping", 30.0),              # a gemma2 key on a llama file
    ("rope.scaling.yarn_log_multiplier", 0.1),     # a YaRN parameter llama.cpp's llama does not read
    ("attention.temperature_scale", 0.1),          # Ministral 3's, read by mistral3 only
    ("residual_scale", 0.2),
])
def test_unknown_metadata_key_is_named(tmp_path, key, value):
    e = refused(tiny(tmp_path, **{key: value}))
    assert e.names == [f"llama.{key}"] and f"llama.{key}" in str(e)


def test_unknown_rope_scaling_type_is_named(tmp_path):
    e = refused(tiny(tmp_path, **{"rope.scaling.type": "dynamic"}))
    assert e.names == ["llama.rope.scaling.type"] and "'dynamic'" in str(e)


def test_longrope_without_its_factors(tmp_path):
    e = refused(tiny(tmp_path, **{"rope.scaling.type": "longrope"}))
    assert e.names == ["rope_factors_long.weight", "rope_factors_short.weight"]


def test_mixture_of_experts_is_refused(tmp_path):
    e = refused(tiny(tmp_path, expert_count=8))
    assert e.names == ["llama.expert_count"]


def test_inert_keys_and_rope_freqs_load(tmp_path):
    """vocab_size and context_length do not change the maths; llama3's rope_freqs
    does and is implemented (its logits are checked in test_families)."""
    with infer.load(tm.write("llama3", str(tmp_path / "llama3.gguf"))) as model:
        assert model.engine.spec.layers[0].rope.freq_factors is not None


def test_partial_rotary_beyond_the_head_is_refused(tmp_path):
    t = dataclasses.replace(tm.TINY["llama"], rope_dims=80)
    e = refused(tm.write("llama", str(tmp_path / "l.gguf"), t))
    assert e.names == ["llama.rope.dimension_count"]


def test_gemma2_output_weight_is_refused(tmp_path):
    """Gemma 2's head is the embedding (llama.cpp never reads output.weight): a file
    with one is refused rather than run with a head it does not use."""
    e = refused(tm.write("gemma2", str(tmp_path / "g.gguf"), more_tensors={
        "output.weight": np.zeros((tm.VOCAB, 256), np.float16)}))
    assert e.names == ["output.weight"]


def rewritten(path, out, tensors):
    """The file at path with the tensors of ``tensors`` replaced (metadata kept)."""
    from infer.gguf import GGUFFile, GGUFWriter

    w = GGUFWriter()
    with GGUFFile(path) as src:
        w.copy_metadata(src)
        for name, t in src.tensors.items():
            w.add_tensor(name, tensors.get(name, t))
        w.write(out)
    return out


@pytest.mark.parametrize("rows", [tm.VOCAB - 412, tm.VOCAB + 88])
def test_vocabulary_and_embedding_rows_must_agree(tmp_path, rows):
    """token_embd with fewer rows than tokens loaded and failed at the first prompt
    holding a high id ("tokens: id 306 outside the vocabulary [0, 100)"); with more,
    it loaded and could sample ids no token stands for.  llama.cpp refuses both."""
    path = rewritten(tiny(tmp_path), str(tmp_path / "v.gguf"),
                     {"token_embd.weight": np.ones((rows, 256), np.float16)})
    with pytest.raises(GGUFError, match=f"holds {tm.VOCAB} tokens but token_embd.weight has {rows} rows"):
        infer.load(path)


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.float16])
def test_norm_of_another_type_is_named(tmp_path, dtype):
    """An I32 or F64 norm weight raised "qtype: unsupported type id 26", naming neither
    the tensor nor its type."""
    path = rewritten(tiny(tmp_path), str(tmp_path / "n.gguf"), {"output_norm.weight": np.ones(256, dtype)})
    with pytest.raises(GGUFError, match=r"^output_norm.weight: expected F32 of 256 values, got (I32|F64|F16)"):
        infer.load(path)
