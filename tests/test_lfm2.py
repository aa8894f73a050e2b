"""LFM2 (GGUF ``lfm2``): attention layers and gated short-convolution layers, on the
tiny random-weight files ``lfm2`` (6 layers, conv width 3, tied head) and
``lfm2-swa`` (sliding window 128, conv width 4, untied head) of tests/tiny_models.py,
against two independent references:

* tests/reference/numpy_lfm2.py, a float64 numpy forward pass written from HF's
  Lfm2 modelling code;
* llama.cpp's own teacher-forced logits on the same files
  (tests/data/llama_cpp_lfm2.npz, see tests/data/README.md).

The references are first checked against each other (with the tolerances of
tests/test_families.py), then infer's decode (one token at a time, through the
fused C step and through the Python blocks) and its batched prefill at every
position; then what must stay exact because the conv inputs are kept per position:
batched decode, truncate_to, copies and saved states; and the files infer must refuse.
"""
import copy
import dataclasses
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import assert_agrees, clear_top1, recorded_logits, recording, tiny_file
from family_checks import check as check_against
from reference.numpy_lfm2 import Lfm2Reference
from scripted import GreedySampler

import infer
from infer import UnsupportedModelError
from infer.gguf import GGUFError
from infer.runtime import Context, decode_batch, prefill_batch

NAMES = ["lfm2", "lfm2-swa"]
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_lfm2.npz")
#: as tests/test_families.py: infer against the float64 reference (against llama.cpp:
#: family_checks.LLAMA_CPP_MIN_COS)
MIN_COS = 0.99999


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("lfm2")


_refs, _decoded = {}, {}


def reference_logits(name, tiny_dir):
    if name not in _refs:
        _refs[name] = Lfm2Reference(tiny_file(name, tiny_dir)).forward(tm.prompt(name))
    return _refs[name]


def check(logits, ref, where, min_cos=MIN_COS):
    check_against(logits, ref, where, min_cos)


def decoded_logits(name, tiny_dir, python=False):
    """infer's logits at every position, decoding the prompt one token at a time:
    through the fused C step (the default), or the Python blocks."""
    if (name, python) not in _decoded:
        prompt = tm.prompt(name)
        with infer.load(tiny_file(name, tiny_dir)) as model:
            ctx = model.engine.create_context(n_ctx=tm.ALL[name].n_ctx, sampler=GreedySampler())
            assert ctx.fused_decode
            ctx.fused_decode = not python
            out = np.zeros((len(prompt), model.engine.vocab_size), np.float32)
            for i, tok in enumerate(prompt):
                ctx.prefill([int(tok)])
                out[i] = ctx.logits
        _decoded[name, python] = out
    return _decoded[name, python]


# ---- the references and infer's forward passes -------------------------------------------
@pytest.fixture(scope="module")
def recorded():
    return recording(DATA)


def _recorded(recorded, name, tiny_dir):
    return recorded_logits(recorded, name, tiny_file(name, tiny_dir))


@pytest.mark.parametrize("name", NAMES)
def test_reference_agrees_with_llama_cpp(name, recorded, tiny_dir):
    positions, theirs = _recorded(recorded, name, tiny_dir)
    ref = reference_logits(name, tiny_dir)[positions]
    assert_agrees(ref, theirs, positions, name, top1_of=ref)


@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
@pytest.mark.parametrize("name", NAMES)
def test_decode_matches_reference_at_every_position(name, python, tiny_dir):
    ref = reference_logits(name, tiny_dir)
    for i, logits in enumerate(decoded_logits(name, tiny_dir, python)):
        check(logits, ref[i], f"position {i}")


@pytest.mark.parametrize("name", NAMES)
def test_fused_step_matches_the_python_blocks(name, tiny_dir):
    """The C step's shortconv against TransformerContext._shortconv: float32 both,
    the same order of the taps' sum."""
    fused, python = decoded_logits(name, tiny_dir), decoded_logits(name, tiny_dir, True)
    np.testing.assert_allclose(fused, python, rtol=0, atol=1e-4 * np.abs(python).max())


@pytest.mark.parametrize("name", NAMES)
def test_decode_agrees_with_llama_cpp(name, recorded, tiny_dir):
    positions, theirs = _recorded(recorded, name, tiny_dir)
    ours = decoded_logits(name, tiny_dir)[positions]
    assert_agrees(ours, theirs, positions, name)


@pytest.mark.parametrize("name", NAMES)
def test_batched_prefill_matches_reference(name, tiny_dir):
    """Prefill through the matrix-matrix kernels, in batches whose boundaries cut the
    conv's reach (its history then comes from the cache), crossing the 512-row pass."""
    prompt = tm.prompt(name)
    ref = reference_logits(name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=tm.ALL[name].n_ctx, sampler=GreedySampler())
        rows = ctx.prefill(prompt[:600], all_logits=True)
        for i in range(600):
            check(rows[i], ref[i], f"position {i}, one batch")
        ctx.truncate_to(0)
        for lo, hi in [(0, 1), (1, 2), (2, 40), (40, 41), (41, 640)]:
            ctx.prefill(prompt[lo:hi])
            check(ctx.logits, ref[hi - 1], f"position {hi - 1}, batch {lo}..{hi}")


def test_prefill_batch_of_several_contexts_matches_reference(tiny_dir):
    """infer serve's batched prefill: the contexts' rows stacked in one pass, each
    context's conv reading its own history."""
    name = "lfm2-swa"
    prompt = tm.prompt(name)
    ref = reference_logits(name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctxs = [model.engine.create_context(n_ctx=1024, sampler=GreedySampler()) for _ in range(3)]
        ctxs[1].prefill(prompt[:3])
        ctxs[2].prefill(prompt[:200])
        rows = prefill_batch(ctxs, [prompt[:150], prompt[3:160], prompt[200:400]], all_logits=True)
        for ctx_rows, start in zip(rows, (0, 3, 200)):
            for i, logits in enumerate(ctx_rows):
                check(logits, ref[start + i], f"position {start + i}")


# ---- exactness of the per-position conv inputs -------------------------------------------------
def test_batched_decode_equals_one_at_a_time(tiny_dir):
    """decode_batch (infer serve's step: one fused C call for all the contexts) over
    contexts at different positions gives each the logits it gets alone."""
    name = "lfm2"
    prompt = tm.prompt(name)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        eng = model.engine
        lengths = [5, 1, 130]
        together = [eng.create_context(n_ctx=256, sampler=GreedySampler()) for _ in lengths]
        alone = [eng.create_context(n_ctx=256, sampler=GreedySampler()) for _ in lengths]
        for c, a, n in zip(together, alone, lengths):
            c.prefill(prompt[:n])
            a.prefill(prompt[:n])
        for step in range(6):
            tokens = [int(prompt[n + step]) for n in lengths]
            decode_batch(together, tokens)
            for c, a, t in zip(together, alone, tokens):
                a.prefill([t])
                np.testing.assert_allclose(c.logits, a.logits, rtol=0, atol=2e-4 * np.abs(a.logits).max())
        ref = reference_logits(name, tiny_dir)
        for c, n in zip(together, lengths):
            check(c.logits, ref[n + 5], f"batched decode, position {n + 5}")


def test_fused_step_checks_the_conv_caches(tiny_dir):
    """The C step's entry point refuses a missing or misshapen conv cache before it runs."""
    with infer.load(tiny_file("lfm2", tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=64)
        step = model.engine.fused_step()
        assert step.n_conv_layers == 4
        args = (1, 0, ctx.k_cache, ctx.v_cache, ctx.logits)
        with pytest.raises(ValueError, match="conv_caches: one per sequence"):
            step.decode(*args)
        for bad in (np.zeros((4, 64, 128), np.float32), np.zeros((3, 64, 256), np.float32),
                    np.zeros((4, 64, 256), np.float64), np.zeros((4, 256, 64), np.float32).T):
            with pytest.raises(ValueError, match=r"conv_caches\[0\]"):
                step.decode(*args, bad)
        with pytest.raises(ValueError, match="overlap|share"):
            step.step([ctx.k_cache, np.zeros_like(ctx.k_cache)], [ctx.v_cache, np.zeros_like(ctx.v_cache)],
                      [1, 2], [0, 0], [ctx.logits, np.zeros_like(ctx.logits)], [ctx.conv_cache, ctx.conv_cache])


def test_truncate_then_redecode(tiny_dir):
    """After truncate_to(n) the conv reads the inputs of positions n-2, n-1 as they
    were computed (not the last ones decoded before the truncation)."""
    name = "lfm2"
    prompt = tm.prompt(name)
    other = (prompt[::-1] + 7) % 500
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=256, sampler=GreedySampler())
        ctx.prefill(prompt[:100])
        for t in prompt[100:110]:
            ctx.prefill([int(t)])
        first = ctx.logits.copy()
        ctx.truncate_to(100)
        for t in other[:20]:          # overwrite positions 100.. with other tokens
            ctx.prefill([int(t)])
        ctx.truncate_to(100)
        for t in prompt[100:110]:
            ctx.prefill([int(t)])
        np.testing.assert_array_equal(ctx.logits, first)
        ctx.restart()
        ctx.prefill(prompt[:110])
        check(ctx.logits, reference_logits(name, tiny_dir)[109], "position 109 after restart")


def test_saved_state_and_copy_continue_exactly(tiny_dir, tmp_path):
    name = "lfm2"
    prompt = tm.prompt(name)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=256)
        ctx.prefill(prompt[:50])
        data = ctx.save_state()
        twin = copy.deepcopy(ctx)
        loaded = Context.load_state(model, data)
        for t in prompt[50:60]:
            ctx.prefill([int(t)])
        for other in (twin, loaded):
            for t in prompt[50:60]:
                other.prefill([int(t)])
            np.testing.assert_array_equal(other.logits, ctx.logits)
        check(ctx.logits, reference_logits(name, tiny_dir)[59], "position 59")


def test_a_saved_state_without_its_conv_inputs_is_refused_whole(tiny_dir):
    """A state whose conv cache is missing or misshapen raises StateError before any
    cache of the new context is written."""
    from infer.state import StateError

    with infer.load(tiny_file("lfm2", tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=64)
        ctx.prefill(tm.prompt("lfm2")[:10])
        arrays = ctx._cache_state(10)
        fresh = model.engine.create_context(n_ctx=64)
        for bad in ({k: v for k, v in arrays.items() if k != "conv"}, {**arrays, "conv": arrays["conv"][:, :9]},
                    {**arrays, "conv": arrays["conv"].astype(np.float64)}):
            with pytest.raises(StateError, match="conv cache"):
                fresh._load_cache_state(bad, 10)
        assert not fresh.k_cache.any() and not fresh.v_cache.any() and not fresh.conv_cache.any()


def test_greedy_generation_follows_the_reference(tiny_dir):
    """infer's generate (token ids in, greedy) continues as the reference's argmax."""
    from infer.generate import generate

    name = "lfm2"
    path = tiny_file(name, tiny_dir)
    prompt = [int(t) for t in tm.prompt(name)[:30]]
    with infer.load(path) as model:
        gen = generate(model, prompt, max_tokens=12, temperature=0, stop_at_end_of_turn=False)
        "".join(gen)
        ids = list(gen.context.tokens)[len(prompt):]
    assert len(ids) == 12
    ref = Lfm2Reference(path).forward(prompt + ids)
    for k, tok in enumerate(ids):
        row = ref[len(prompt) + k - 1]
        if clear_top1(row):
            assert tok == int(np.argmax(row)), f"generated token {k}"


# ---- files infer must refuse ----------------------------------------------------------------
def hostile(tmp_path, monkeypatch, name="lfm2", drop=(), replace=None, keys=None, tiny=None):
    """LFM2[name] written with tensors dropped or replaced and uint32 keys changed
    (the writer's own calls intercepted, so everything else is the converter's layout)."""
    import gguf

    add_tensor, add_uint32 = gguf.GGUFWriter.add_tensor, gguf.GGUFWriter.add_uint32

    def tensor(self, tname, array, *a, **k):
        if tname in drop:
            return None
        return add_tensor(self, tname, (replace or {}).get(tname, array), *a, **k)

    def uint32(self, key, value):
        return add_uint32(self, key, (keys or {}).get(key, value))

    with monkeypatch.context() as m:
        m.setattr(gguf.GGUFWriter, "add_tensor", tensor)
        m.setattr(gguf.GGUFWriter, "add_uint32", uint32)
        return tm.write(name, str(tmp_path / "hostile.gguf"), tiny)


@pytest.mark.parametrize("l_cache", [0, 1, 2**20, 2**32 - 1])
def test_bad_l_cache_is_refused(tmp_path, monkeypatch, l_cache):
    with pytest.raises(GGUFError, match=r"lfm2\.shortconv\.l_cache"):
        infer.load(hostile(tmp_path, monkeypatch, keys={"lfm2.shortconv.l_cache": l_cache}))


def test_l_cache_other_than_the_conv_tensor_is_refused(tmp_path, monkeypatch):
    with pytest.raises(GGUFError, match=r"blk\.0\.shortconv\.conv\.weight: expected F32 of shape \(256, 5\)"):
        infer.load(hostile(tmp_path, monkeypatch, keys={"lfm2.shortconv.l_cache": 5}))


@pytest.mark.parametrize("missing", ["blk.3.shortconv.in_proj.weight", "blk.3.shortconv.conv.weight",
                                     "blk.0.shortconv.out_proj.weight", "token_embd_norm.weight"])
def test_missing_tensor_is_named(tmp_path, monkeypatch, missing):
    with pytest.raises(GGUFError, match=f"tensor {missing} is missing"):
        infer.load(hostile(tmp_path, monkeypatch, drop=(missing,)))


def test_in_proj_of_the_wrong_shape(tmp_path, monkeypatch):
    wrong = np.zeros((512, 256), np.float16)   # 2 * dim rows, not 3 * dim
    with pytest.raises(GGUFError, match=r"blk\.1\.shortconv\.in_proj\.weight: expected shape \(768, 256\)"):
        infer.load(hostile(tmp_path, monkeypatch, replace={"blk.1.shortconv.in_proj.weight": wrong}))


def test_conv_weight_not_f32(tmp_path, monkeypatch):
    wrong = np.zeros((256, 3), np.float16)
    with pytest.raises(GGUFError, match=r"blk\.0\.shortconv\.conv\.weight: expected F32"):
        infer.load(hostile(tmp_path, monkeypatch, replace={"blk.0.shortconv.conv.weight": wrong}))


def test_shortconv_tensors_on_an_attention_layer_are_refused(tmp_path):
    extra = {"blk.2.shortconv.conv.weight": np.zeros((256, 3), np.float32)}
    path = tm.write("lfm2", str(tmp_path / "extra.gguf"), None, extra)
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(path)
    assert e.value.names == ["blk.2.shortconv.conv.weight"]


def test_attention_layers_with_different_kv_heads_are_refused(tmp_path, monkeypatch):
    import gguf

    add_array = gguf.GGUFWriter.add_array

    def array(self, key, value):
        return add_array(self, key, [0, 0, 4, 0, 0, 2] if key == "lfm2.attention.head_count_kv" else value)

    monkeypatch.setattr(gguf.GGUFWriter, "add_array", array)
    path = tm.write("lfm2", str(tmp_path / "kv.gguf"))
    monkeypatch.undo()
    with pytest.raises(UnsupportedModelError, match="different KV head counts"):
        infer.load(path)


def test_head_count_kv_per_layer_of_the_wrong_length(tmp_path, monkeypatch):
    import gguf

    add_array = gguf.GGUFWriter.add_array

    def array(self, key, value):
        return add_array(self, key, value[:-1] if key == "lfm2.attention.head_count_kv" else value)

    monkeypatch.setattr(gguf.GGUFWriter, "add_array", array)
    path = tm.write("lfm2", str(tmp_path / "kv.gguf"))
    monkeypatch.undo()
    with pytest.raises(GGUFError, match=r"head_count_kv has 5 entries for 6 layers"):
        infer.load(path)


def test_bidirectional_lfm2_is_refused(tmp_path):
    """The converter writes attention.causal = false for LFM2's embedding models."""
    t = tm.ALL["lfm2"]
    path = tm.write("lfm2", str(tmp_path / "bidir.gguf"),
                    dataclasses.replace(t, extra={**t.extra, "attention.causal": False}))
    with pytest.raises(UnsupportedModelError, match="non-causal"):
        infer.load(path)


def test_pre_tokenizer_splits_as_llama_cpp(recorded, tiny_dir):
    """tokenizer.ggml.pre "lfm2" loads and splits as llama.cpp's (its LLAMA3
    pre-tokenizer): the ids llama.cpp gave the recorded texts
    (scripts/record_lfm2_extras.py).  On the tiny vocabulary these texts tell that
    split from gpt2's and qwen2's, not from the "default" one (no merge crosses the
    places where those two differ)."""
    texts = [str(t) for t in recorded["tokenize/texts"]]
    with infer.load(tiny_file("lfm2", tiny_dir)) as model:
        for k, text in enumerate(texts):
            theirs = recorded[f"tokenize/ids{k}"].tolist()
            assert model.tokenizer.encode(text, add_special=False) == theirs, text


def test_infer_info_shows_the_layer_kinds(tiny_dir, capsys):
    """`infer info`: the per-layer KV heads (0 on the shortconv layers) and the conv width."""
    from infer import cli

    assert cli.main(["info", tiny_file("lfm2", tiny_dir)]) in (0, None)
    out = capsys.readouterr().out
    assert "heads 4 ([0 0 2 0 0 2] kv), shortconv width 3" in out and "pre-tokenizer lfm2" in out


def test_infer_quantize_chooses_llama_quantizes_types(recorded, tiny_dir, tmp_path):
    """`infer quantize` on an LFM2 file: every tensor gets the type llama-quantize gave it
    (scripts/record_lfm2_extras.py), shortconv.conv staying F32, and the file runs."""
    from infer.quantize import quantize_file

    names = [str(n) for n in recorded["quantize/names"]]
    recipes = sorted(k.split("/", 1)[1] for k in recorded if k.startswith("quantize/") and k != "quantize/names")
    assert "q4_k_m" in recipes
    for recipe in recipes:
        quantize_file(tiny_file("lfm2", tiny_dir), tmp_path / f"{recipe}.gguf", recipe)
        with infer.gguf.GGUFFile(tmp_path / f"{recipe}.gguf") as f:
            ours = [f.tensors[n].dtype.name for n in names]
        assert ours == [str(t) for t in recorded[f"quantize/{recipe}"]], recipe
    with infer.load(str(tmp_path / "q4_k_m.gguf")) as model:
        ctx = model.engine.create_context(n_ctx=64)
        ctx.prefill(tm.prompt("lfm2")[:20])
        assert np.isfinite(ctx.logits).all()
