"""Gemma 4 (dense) on tiny random-weight files (tests/tiny_models.py GEMMA4: an
E2B-shaped file with per-layer embeddings, sliding layers of another head size
than the full ones, proportional RoPE factors, two shared-KV layers and
double-wide FFNs there; a 31B-shaped one without PLE, with V = K on the full
layers), against two independent references:

* tests/reference/numpy_gemma4.py, a float64 numpy forward pass;
* llama.cpp's own teacher-forced logits on the same files
  (tests/data/llama_cpp_gemma4.npz, see tests/data/README.md).

Tolerances as tests/test_families.py's: cosine >= 0.99999 and the reference's
clear top-1 against the numpy reference, LLAMA_CPP_MIN_COS against llama.cpp.
Decoding runs through the fused C step (csrc/transformer_block.c) by default;
the Python blocks are checked too.
"""
import copy
import json
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import tiny_models as tm
from family_checks import assert_agrees, check, clear_top1, cosine, recorded_logits, recording, tiny_file
from reference.numpy_gemma4 import Gemma4Reference
from scripted import GreedySampler

import infer
from infer import kernels as K
from infer.gguf import GGUFError
from infer.runtime import decode_batch

NAMES = list(tm.GEMMA4)
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_gemma4.npz")
_refs = {}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gemma4")


def reference_logits(name, tiny_dir):
    if name not in _refs:
        _refs[name] = Gemma4Reference(tiny_file(name, tiny_dir)).forward(tm.prompt(name))
    return _refs[name]


@pytest.fixture(scope="module")
def recorded():
    return recording(DATA)


def _recorded(recorded, name, tiny_dir):
    return recorded_logits(recorded, name, tiny_file(name, tiny_dir))


def test_files_have_the_pieces_under_test(tiny_dir):
    """The spec infer reads has what the tests claim to cover (a file that lost one
    would still pass the agreement tests without exercising it)."""
    with infer.load(tiny_file("gemma4-e2b", tiny_dir)) as model:
        spec = model.engine.spec
        assert spec.per_layer_dim == 32 and spec.final_softcap == 8.0 and spec.v_norm
        assert [layer.kv_source for layer in spec.layers] == [None, None, None, 1, 2]
        assert [spec.layer_head_dim(i) for i in range(5)] == [64, 64, 128, 64, 128]
        assert [spec.layer_ffn_dim(i) for i in range(5)] == [512, 512, 512, 1024, 1024]
        assert [layer.window for layer in spec.layers] == [128, 128, 0, 128, 0]
        assert spec.layers[2].rope.freq_factors[:16] == (1.0,) * 16 and spec.layers[2].rope.freq_factors[16] > 1e29
        assert all(layer.out_scale for layer in spec.layers)
    with infer.load(tiny_file("gemma4-31b", tiny_dir)) as model:
        spec = model.engine.spec
        assert spec.per_layer_dim == 0
        assert [layer.v_from_k for layer in spec.layers] == [False, True, False, True]
        assert [spec.layer_kv_heads(i) for i in range(4)] == [2, 1, 2, 1]


@pytest.mark.parametrize("name", NAMES)
def test_reference_agrees_with_llama_cpp(name, recorded, tiny_dir):
    positions, theirs = _recorded(recorded, name, tiny_dir)
    ref = reference_logits(name, tiny_dir)[positions]
    assert_agrees(ref, theirs, positions, name, top1_of=ref)


@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
@pytest.mark.parametrize("name", NAMES)
def test_decode_matches_reference_at_every_position(name, python, tiny_dir):
    """One token at a time: the fused C step (the default) and the Python blocks."""
    ref = reference_logits(name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=1024, sampler=GreedySampler())
        assert ctx.fused_decode
        ctx.fused_decode = not python
        for i, tok in enumerate(tm.prompt(name)):
            ctx.prefill([int(tok)])
            check(ctx.logits, ref[i], f"position {i}", 0.99999)


@pytest.mark.parametrize("name", NAMES)
def test_batched_prefill_matches_reference(name, tiny_dir):
    prompt = tm.prompt(name)
    ref = reference_logits(name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=1024, sampler=GreedySampler())
        rows = ctx.prefill(prompt, all_logits=True)
        for i in range(len(prompt)):
            check(rows[i], ref[i], f"position {i}", 0.99999)
        for n in (1, 37, 513):
            ctx.truncate_to(0)
            ctx.prefill(prompt[:n])
            check(ctx.logits, ref[n - 1], f"position {n - 1}", 0.99999)
        ctx.truncate_to(0)
        ctx.prefill(prompt[:320])
        ctx.prefill(prompt[320:])
        check(ctx.logits, ref[-1], "last position, second batch", 0.99999)


@pytest.mark.parametrize("prefill", [False, True], ids=["decode", "prefill"])
@pytest.mark.parametrize("name", NAMES)
def test_variant_agrees_with_llama_cpp(name, prefill, recorded, tiny_dir):
    """infer's fused decode (one token at a time) and its all-position prefill against
    llama.cpp at the recorded positions."""
    positions, theirs = _recorded(recorded, name, tiny_dir)
    prompt = tm.prompt(name)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=1024, sampler=GreedySampler())
        if prefill:
            ours = ctx.prefill(prompt, all_logits=True)[positions].astype(np.float64)
        else:
            rows = np.zeros((len(prompt), theirs.shape[1]))
            for i, tok in enumerate(prompt):
                ctx.prefill([int(tok)])
                rows[i] = ctx.logits
            ours = rows[positions]
    assert_agrees(ours, theirs, positions, name)


@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
@pytest.mark.parametrize("name", NAMES)
def test_batched_decode_equals_one_at_a_time(name, python, tiny_dir):
    """runtime.decode_batch (one pass over the weights for three contexts at different
    positions, across the 128-token window: the fused C step's batch, or the Python
    blocks' rows) against each context decoded alone and against the reference."""
    prompt = tm.prompt(name)
    ref = reference_logits(name, tiny_dir)
    starts = (3, 60, 120)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        together = [model.engine.create_context(n_ctx=1024, sampler=GreedySampler()) for _ in starts]
        alone = [model.engine.create_context(n_ctx=1024, sampler=GreedySampler()) for _ in starts]
        for ctx in together + alone:
            ctx.fused_decode = not python
        for ctx_t, ctx_a, s in zip(together, alone, starts):
            ctx_t.prefill(prompt[:s])
            ctx_a.prefill(prompt[:s])
        for step in range(16):
            decode_batch(together, [int(prompt[s + step]) for s in starts])
            for ctx_t, ctx_a, s in zip(together, alone, starts):
                ctx_a.prefill([int(prompt[s + step])])
                assert cosine(ctx_t.logits, ctx_a.logits) > 0.9999999
                np.testing.assert_allclose(ctx_t.logits, ctx_a.logits, atol=2e-3)
                check(ctx_t.logits, ref[s + step], f"position {s + step}", 0.99999)


@pytest.mark.parametrize("name", NAMES)
def test_truncate_then_redecode(name, tiny_dir):
    """Drop positions (past the window; the shared layers' source caches hold them),
    decode other tokens there, drop them again and decode the prompt's: the logits
    are the reference's, and the first run's."""
    prompt = tm.prompt(name)
    ref = reference_logits(name, tiny_dir)
    other = np.random.default_rng(7).integers(0, 500, 60)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=1024, sampler=GreedySampler())
        ctx.prefill(prompt[:220])
        first = ctx.logits.copy()
        ctx.truncate_to(150)
        ctx.prefill(other)
        assert cosine(ctx.logits, first) < 0.999
        ctx.truncate_to(150)
        for tok in prompt[150:220]:
            ctx.prefill([int(tok)])
        np.testing.assert_allclose(ctx.logits, first, atol=2e-3)
        check(ctx.logits, ref[219], "position 219 after truncation", 0.99999)
        ctx.restart()
        ctx.prefill(prompt[:40])
        check(ctx.logits, ref[39], "position 39 after restart", 0.99999)


@pytest.mark.parametrize("name", NAMES)
def test_saved_and_copied_contexts_continue_exactly(name, tiny_dir):
    prompt = tm.prompt(name)
    ref = reference_logits(name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        ctx = model.create_context(n_ctx=512, temperature=0)
        ctx.prefill(prompt[:140])
        data = ctx.save_state()
        twin = copy.deepcopy(ctx)
        again = infer.Context.load_state(model, data)
        for c in (ctx, twin, again):
            c.prefill(prompt[140:150])
        np.testing.assert_array_equal(twin.logits, ctx.logits)
        np.testing.assert_array_equal(again.logits, ctx.logits)
        check(ctx.logits, ref[149], "position 149", 0.99999)


def test_generate_follows_the_reference(tiny_dir):
    """Greedy generation: each token is the reference's argmax of the text so far."""
    path = tiny_file("gemma4-e2b", tiny_dir)
    prompt = [int(t) for t in tm.prompt("gemma4-e2b")[:30]]
    with infer.load(path) as model:
        ctx = model.create_context(n_ctx=256, temperature=0)
        ctx.prefill(prompt)
        out = [ctx.next() for _ in range(8)]
    ref = Gemma4Reference(path).forward(prompt + out)
    for i, tok in enumerate(out):
        row = ref[len(prompt) + i - 1]
        if clear_top1(row):
            assert tok == int(np.argmax(row)), i


def test_fused_step_refuses_bad_layouts(tiny_dir):
    """kernels.TransformerDecoder checks Gemma 4's layer layout and its caches before
    any C runs: a shared-KV source that is not earlier or not of the same shape, PLE
    tensors without their width, caches of another layout, a position past n_ctx."""
    from infer.variants.transformer import decoder_arguments

    with infer.load(tiny_file("gemma4-e2b", tiny_dir)) as model:
        spec, w = model.engine.spec, model.engine.live_weights()
        embd, output, norm, layers = decoder_arguments(spec, w)
        ple = (w.ple_embd.as_tuple(), w.ple_model_proj.as_tuple(), w.ple_proj_norm.data)
        later = [dict(layer) for layer in layers]
        later[3]["kv_source"] = 4
        with pytest.raises(ValueError, match="not an earlier layer"):
            K.TransformerDecoder(spec, embd, output, norm, later, ple=ple)
        other_kind = [dict(layer) for layer in layers]
        other_kind[4]["kv_source"] = 1   # a full layer (head size 128) reading a sliding one's (64)
        with pytest.raises(ValueError, match="differ"):
            K.TransformerDecoder(spec, embd, output, norm, other_kind, ple=ple)
        with pytest.raises(ValueError, match="per_layer_dim"):
            K.TransformerDecoder(spec, embd, output, norm, layers)
        step = K.TransformerDecoder(spec, embd, output, norm, layers, ple=ple)
        ctx = model.engine.create_context(n_ctx=64)
        assert ctx.k_cache.shape == (3, 64 * 128)   # three layers own a cache; the widest is 2 x 64
        logits = np.zeros(spec.vocab_size, np.float32)
        with pytest.raises(ValueError, match="expected shape"):
            step.decode(1, 0, ctx.k_cache[:2], ctx.v_cache[:2], logits)
        with pytest.raises(ValueError, match="outside the context"):
            step.decode(1, 64, ctx.k_cache, ctx.v_cache, logits)


def test_cli_info_and_generate(tiny_dir):
    path = tiny_file("gemma4-e2b", tiny_dir)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = [sys.executable, "-m", "infer"]
    info = subprocess.run(run + ["info", path], capture_output=True, text=True, cwd=root, timeout=120)
    assert info.returncode == 0, info.stderr
    assert "gemma4" in info.stdout
    gen = subprocess.run(run + ["generate", "The quick brown fox", "-m", path, "-n", "8", "--temp", "0"],
                         capture_output=True, text=True, cwd=root, timeout=120)
    assert gen.returncode == 0, gen.stderr


# ---- hostile files ---------------------------------------------------------------------
E2B = tm.GEMMA4["gemma4-e2b"]


def _with(tiny, **keys):
    return replace(tiny, extra={**tiny.extra, **keys})


def test_dense_file_saying_zero_experts_loads(tmp_path):
    path = tm.write("gemma4-e2b", str(tmp_path / "zero.gguf"), tiny=_with(E2B, expert_count=0, expert_used_count=0))
    with infer.load(path) as model:
        assert model.engine.spec.per_layer_dim == 32


@pytest.mark.parametrize("tiny, more, error, message", [
    (_with(E2B, **{"attention.sliding_window_pattern": [True, False]}), None, GGUFError,
     "sliding_window_pattern has 2 entries for 5 layers"),
    (_with(E2B, **{"attention.sliding_window_pattern": None}), None, GGUFError,
     "sliding_window_pattern is missing"),
    (_with(E2B, **{"attention.sliding_window_pattern": [3, 1, 0, 1, 0]}), None, GGUFError, "not a bool"),
    (_with(E2B, **{"attention.shared_kv_layers": 5}), None, GGUFError, "leaves 0 of 5 layers"),
    (_with(E2B, **{"attention.shared_kv_layers": 9}), None, GGUFError, "leaves -4 of 5 layers"),
    (_with(E2B, **{"attention.shared_kv_layers": 1}), None, GGUFError, "must slide"),
    (_with(E2B, **{"attention.head_count_kv": [2, 2, 1]}), None, GGUFError, "head_count_kv has 3 entries"),
    (_with(E2B, **{"attention.head_count_kv": [2, 2, 3, 2, 3]}), None, GGUFError, "does not divide"),
    (_with(E2B, **{"feed_forward_length": [512] * 4}), None, GGUFError, "feed_forward_length has 4 entries"),
    (_with(E2B, **{"attention.head_count": [4, 4, 2, 4, 4]}), None, infer.UnsupportedModelError,
     "differs between layers"),
    (_with(E2B, **{"attention.value_length_swa": 32}), None, GGUFError, "value_length_swa differs"),
    (_with(E2B, **{"rope.dimension_count_swa": 96}), None, GGUFError, "at most the head size 64"),
    (_with(E2B, **{"attention.sliding_window": None}), None, GGUFError, "sliding_window is missing"),
    (_with(E2B, **{"expert_count": 8}), None, infer.UnsupportedModelError, "mixture-of-experts"),
    (E2B, {"blk.0.ffn_gate_inp.weight": np.zeros((8, 256), np.float32)}, infer.UnsupportedModelError,
     "mixture-of-experts"),
    (_with(E2B, **{"rope.scaling.type": "yarn"}), None, infer.UnsupportedModelError, "not implemented"),
    (_with(E2B, **{"attention.bidirectional": True}), None, infer.UnsupportedModelError, "not understood"),
    (E2B, {"blk.1.extra.weight": np.zeros(4, np.float32)}, infer.UnsupportedModelError,
     "not part of the model"),
], ids=["pattern-length", "pattern-missing", "pattern-not-bool", "shared-all", "shared-too-many",
        "shared-wrong-kind", "kv-heads-length", "kv-heads-not-dividing", "ffn-length", "heads-varying",
        "v-size", "rope-dims", "window-missing", "moe-key", "moe-tensor", "rope-scaling", "unknown-key",
        "unknown-tensor"])
def test_hostile_metadata_is_refused(tiny, more, error, message, tmp_path):
    path = tm.write("gemma4-e2b", str(tmp_path / "bad.gguf"), tiny=tiny, more_tensors=more)
    with pytest.raises(error, match=message):
        infer.load(path)


# ---- the tokenizer ---------------------------------------------------------------------
TOKENS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_gemma4_tokens.json")


def test_tokenizer_matches_llama_cpp(tmp_path):
    """tokenizer.ggml.model "gemma4" (BPE by rank over raw UTF-8, spaces as ▁, cut at
    newline runs, <0xNN> byte fallback, BOS always) against llama.cpp's ids on the
    same vocabulary (scripts/record_gemma4_tokens.py)."""
    with open(TOKENS, encoding="utf-8") as f:
        recorded = json.load(f)
    path = tm.gemma4_vocab_file(str(tmp_path / "vocab.gguf"))
    assert tm.sha256(path) == recorded["sha256"], "the vocabulary file changed; re-record"
    with infer.load(path) as model:
        tok = model.tokenizer
        assert type(tok).__name__ == "Gemma4Tokenizer"
        for text, ids in recorded["cases"]:
            assert tok.encode(text) == ids, text
            # BOS first; a literal ▁ decodes as a space, as llama.cpp unescapes it
            assert tok.decode(ids[1:]) == text.replace("\u2581", " "), text


def test_spec_refuses_inconsistent_shared_kv():
    """TransformerSpec checks the KV sharing it is given (any variant's, not only gemma4's)."""
    from infer.variants.spec import LayerSpec, TransformerSpec

    def spec(*layers):
        return TransformerSpec(dim=64, n_layers=len(layers), n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=32,
                               vocab_size=8, max_seq_len=16, rms_eps=1e-6, layers=tuple(layers))

    assert not spec(LayerSpec(), LayerSpec(kv_source=0)).uniform_kv
    with pytest.raises(ValueError, match="not an earlier layer"):
        spec(LayerSpec(kv_source=1), LayerSpec())
    with pytest.raises(ValueError, match="no KV cache of its own"):
        spec(LayerSpec(), LayerSpec(kv_source=0), LayerSpec(kv_source=1))
    with pytest.raises(ValueError, match="differ"):
        spec(LayerSpec(), LayerSpec(kv_source=0, head_dim=32))
    with pytest.raises(ValueError, match="not a multiple"):
        spec(LayerSpec(n_kv_heads=3))
    with pytest.raises(ValueError, match="odd"):
        LayerSpec(head_dim=15)
    assert spec(LayerSpec(head_dim=16), LayerSpec()).uniform_kv   # the model's own size, said again


def test_real_attention_shapes(tmp_path):
    """E2B's and 31B's attention shapes: 8 query heads of 512 on one KV head in the
    full layers (the fused step's attention scratch holds 7 query copies at a time
    there), 256 in the sliding ones; fused decode, batched and alone, against the
    reference."""
    shape = replace(E2B.gemma4, head_dim_full=512, kv_heads=(1,) * 5, turning_pairs=64)
    tiny = replace(E2B, n_head=8, head_dim=256, gemma4=shape)
    path = tm.write("gemma4-e2b", str(tmp_path / "wide.gguf"), tiny=tiny)
    prompt = [int(t) for t in tm.prompt("gemma4-e2b")[:24]]
    ref = Gemma4Reference(path).forward(prompt)
    with infer.load(path) as model:
        assert model.engine.spec.layer_head_dim(2) == 512 and model.engine.spec.n_heads == 8
        ctxs = [model.engine.create_context(n_ctx=64, sampler=GreedySampler()) for _ in range(3)]
        for i, ctx in enumerate(ctxs):
            ctx.prefill(prompt[:4 + i])
        for step in range(8):
            decode_batch(ctxs, [prompt[4 + i + step] for i in range(3)])
            for i, ctx in enumerate(ctxs):
                check(ctx.logits, ref[4 + i + step], f"sequence {i}, position {4 + i + step}", 0.99999)
        alone = model.engine.create_context(n_ctx=64, sampler=GreedySampler())
        for i, tok in enumerate(prompt):
            alone.prefill([tok])
            check(alone.logits, ref[i], f"position {i}", 0.99999)


def test_quantized_file_decodes_like_its_python_blocks(tiny_dir, tmp_path):
    """`infer quantize` of the E2B-shaped file to Q8_0 as llama-quantize does it
    (per_layer_token_embd follows the token embedding, per_layer_model_proj is kept):
    the fused step on the quantized (and, where the CPU has it, repacked) PLE matrices
    gives the Python blocks' logits and stays near the F16 file's reference."""
    from infer.quantize import quantize_file

    out = str(tmp_path / "q8.gguf")
    quantize_file(tiny_file("gemma4-e2b", tiny_dir), out, "q8_0")
    ref = reference_logits("gemma4-e2b", tiny_dir)
    with infer.load(out) as model:
        w = model.engine.live_weights()
        assert w.ple_embd.file_qtype == K.type_id("q8_0") and w.ple_model_proj.file_qtype == K.type_id("f16")
        fused = model.engine.create_context(n_ctx=256, sampler=GreedySampler())
        python = model.engine.create_context(n_ctx=256, sampler=GreedySampler())
        python.fused_decode = False
        for i, tok in enumerate(tm.prompt("gemma4-e2b")[:150]):
            fused.prefill([int(tok)])
            python.prefill([int(tok)])
            assert cosine(fused.logits, python.logits) > 0.999999, i
            assert cosine(fused.logits, ref[i]) > 0.98, i
