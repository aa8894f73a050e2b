"""Files whose maths a variant does not implement are refused at load, with a typed
error naming what was not understood (never loaded and run without it)."""
import dataclasses

import numpy as np
import pytest
import tiny_models as tm

import infer
from infer import UnsupportedModelError


def tiny(tmp_path, name="llama", more_tensors=None, **extra):
    t = tm.TINY[name]
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
    ("rope.scaling.yarn_log_multiplier", 0.1),     # a YaRN parameter not implemented
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
