"""create_context(n_ctx=...) refuses what it cannot honour with a typed error.

Before, n_ctx=1.5 and n_ctx=True made a context of 1 position (the float was
truncated, the bool read as 1), and an n_ctx whose KV cache cannot even be reserved
as address space escaped as numpy's raw "Unable to allocate 22.5 TiB for an array
with shape ..." MemoryError.  The expected sizes are hand-computed from the tiny
Llama's shape (2 layers x 2 KV heads x 64 dims, K and V, F16)."""
import numpy as np
import pytest

import infer
import tiny_models as tm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    t = tm.TINY["llama-linear"]  # 2 layers, 4 KV heads of 64
    path = tm.write("llama-linear", str(tmp_path_factory.mktemp("ctx") / "tiny.gguf"))
    with infer.load(path) as m:
        yield m, t


@pytest.mark.parametrize("n_ctx", [1.5, True, "64", np.float32(8)])
def test_a_non_integer_n_ctx_is_a_type_error(tiny, n_ctx):
    model, _ = tiny
    with pytest.raises(TypeError, match="n_ctx: expected an int"):
        model.create_context(n_ctx=n_ctx)


def test_numpy_integer_n_ctx_is_accepted(tiny):
    model, _ = tiny
    assert model.create_context(n_ctx=np.int64(48)).n_ctx == 48


def test_an_unreservable_kv_cache_names_n_ctx_and_its_size(tiny):
    model, t = tiny
    n = 2**44
    gib = 2 * t.n_layer * t.n_kv_head * t.head_dim * 2 * n / 2**30  # K and V, 2 bytes each
    with pytest.raises(ValueError, match=r"n_ctx: a KV cache of 17592186044416 positions needs "
                                         + f"{gib:,.1f}".replace(",", ",") + " GiB"):
        model.create_context(n_ctx=n)
    # the model is still usable
    ctx = model.create_context(n_ctx=16)
    ctx.prefill([1, 2, 3])
    assert ctx.n_past == 3
