"""RoPE factor tensors load only in the families whose llama.cpp graph applies them.

llama.cpp creates ``rope_freqs.weight`` (llama3 scaling) for llama and granite, and
``rope_factors_long/short.weight`` (LongRoPE) for llama, granite and phi3
(src/models/<arch>.cpp); qwen2, qwen3, gemma2 and smollm3 have neither, so llama.cpp
refuses such a file ("wrong number of tensors").  infer read the factors for every
family and ran, e.g., a gemma2 file with rope_freqs.weight with its frequencies
divided, a model llama.cpp would not run.  Now the family's reader leaves them
unread and the loader refuses the file naming the tensor; where they belong they
still load and change the logits (checked against the float64 reference, which
applies every factor tensor the file has)."""
import numpy as np
import pytest
import tiny_models as tm
from reference.numpy_families import reference

import infer
from infer.runtime import UnsupportedModelError

LLAMA3 = {"rope_freqs.weight": tm.llama3_rope_factors(64, 10000.0)}
LONGROPE = {"rope_factors_long.weight": np.linspace(1, 4, 32, dtype=np.float32),
            "rope_factors_short.weight": np.linspace(1, 2, 32, dtype=np.float32)}


@pytest.mark.parametrize("arch,factors", [
    ("qwen2", LLAMA3), ("qwen3", LLAMA3), ("gemma2", LLAMA3), ("smollm3", LLAMA3),
    ("qwen2", LONGROPE), ("gemma2", LONGROPE), ("smollm3", LONGROPE),
    ("phi3", {"rope_freqs.weight": np.ones(24, np.float32)}),
])
def test_factors_the_family_does_not_read_are_refused_by_name(tmp_path, arch, factors):
    path = tm.write(arch, str(tmp_path / f"{arch}.gguf"), more_tensors=factors)
    with pytest.raises(UnsupportedModelError) as err:
        infer.load(path)
    for name in factors:
        assert name in str(err.value)


@pytest.mark.parametrize("arch,factors", [("llama", LLAMA3), ("granite", LLAMA3)])
def test_factors_the_family_reads_still_apply(tmp_path, arch, factors):
    plain = tm.write(arch, str(tmp_path / "plain.gguf"))
    scaled = tm.write(arch, str(tmp_path / "scaled.gguf"), more_tensors=factors)
    tokens = tm.prompt(arch)[:300]  # past the 256-token region where the factors matter
    want = reference(scaled, 512).forward(tokens)[-1]
    with infer.load(scaled) as m, infer.load(plain) as p:
        ctx, base = m.create_context(n_ctx=512), p.create_context(n_ctx=512)
        ctx.prefill(tokens)
        base.prefill(tokens)
        got, unscaled = np.asarray(ctx.logits, np.float64), np.asarray(base.logits, np.float64)
    cos = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos > 0.99999, cos
    assert np.abs(got - unscaled).max() > 1e-3  # the factors did change the maths
