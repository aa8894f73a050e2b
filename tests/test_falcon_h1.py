"""Falcon-H1 (GGUF ``falcon-h1``, ``tiny_models.FALCON_H1``) on tiny random-weight files,
against two independent references: the float64 numpy forward pass of
tests/reference/numpy_falcon_h1.py (HF's FalconH1 modelling) and llama.cpp's
teacher-forced logits on the same files (tests/data/llama_cpp_falconh1.npz;
tests/data/README.md).

The files are written from an HF-shaped checkpoint with its muP multipliers folded into
the weights as conversion/falcon_h1.py does.  The reference runs both that unfolded
checkpoint with the multipliers applied where HF applies them, and the file's own
(folded) tensors with none:

* both readings agree with llama.cpp, which validates the folding and the reference;
* infer's prefill and decode agree with the reference at every position and with
  llama.cpp at the recorded ones;
* each multiplier, the Mamba2 mixer beside attention and the attention beside it are
  features the recorded data tells apart: the reference without one no longer agrees;
* truncate_to, saved states and copies are exact; batched decode and `infer serve`'s
  scheduler give what decoding alone gives, and a chat whose history was edited what a
  fresh chat gives; `infer generate` and `infer info` run;
* what llama.cpp would run differently, or the fork's unfolded files, are refused.
"""
import dataclasses
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import (assert_agrees, assert_batched_equals_alone, assert_cli_generates_the_reference_greedy,
                           assert_runs_agree_with_both_references, assert_scheduler_batches_like_alone, cosines,
                           decoded_one_at_a_time, recorded_logits, recording, recurrent_state_continues_exactly,
                           tiny_file)
from reference import gguf_file
from reference.numpy_falcon_h1 import FalconH1, Multipliers
from scripted import GreedySampler
from test_unsupported import refused

import infer
from infer.chat import BaseModelWarning
from infer.gguf import GGUFError

NAMES = list(tm.FALCON_H1)
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_falconh1.npz")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("falcon_h1")


def multipliers(name):
    """The config's multipliers of a tiny file (what its weights were folded with)."""
    sh = tm.FALCON_H1[name].falcon_h1
    return Multipliers(embedding=sh.embedding_multiplier, lm_head=sh.lm_head_multiplier,
                       attention_in=sh.attention_in_multiplier, attention_out=sh.attention_out_multiplier,
                       key=sh.key_multiplier, ssm_in=sh.ssm_in_multiplier, ssm_out=sh.ssm_out_multiplier,
                       mlp=sh.mlp_multipliers, ssm=sh.ssm_multipliers)


_checkpoints = {}


def from_checkpoint(name, tiny_dir, mult=None):
    """The reference on the unfolded checkpoint (drawn once per file) with ``mult``."""
    if name not in _checkpoints:
        meta, _ = gguf_file.read(tiny_file(name, tiny_dir))
        _checkpoints[name] = meta, tm.falcon_h1_checkpoint(tm.FALCON_H1[name])
    meta, checkpoint = _checkpoints[name]
    return FalconH1(meta, checkpoint, mult or multipliers(name))


_refs = {}


def reference_logits(name, tiny_dir):
    """(T, vocab) float64 logits of the prompt on the file's tensors, computed once per file."""
    if name not in _refs:
        _refs[name] = FalconH1.from_gguf(tiny_file(name, tiny_dir)).forward(tm.prompt(name))
    return _refs[name]


def llama_cpp(name, tiny_dir):
    return recorded_logits(recording(DATA), name, tiny_file(name, tiny_dir))


#: the recorded positions the "each feature matters" tests compare (a short prefix keeps
#: the float64 reference quick)
MATTERS_UP_TO = 16


def early(name, tiny_dir):
    """(positions, llama.cpp's logits) at the recorded positions up to MATTERS_UP_TO."""
    positions, theirs = llama_cpp(name, tiny_dir)
    keep = positions <= MATTERS_UP_TO
    return positions[keep], theirs[keep]


def relative_error(ours, theirs):
    return float(np.linalg.norm(ours - theirs) / np.linalg.norm(theirs))


@pytest.mark.parametrize("name", NAMES)
def test_references_agree_with_llama_cpp(name, tiny_dir):
    """The file's tensors, and the unfolded checkpoint with HF's multipliers (whose F16
    rounding differs: a relative error of 0.5% at most)."""
    positions, theirs = llama_cpp(name, tiny_dir)
    ref = reference_logits(name, tiny_dir)[positions]
    assert_agrees(ref, theirs, positions, name, top1_of=ref)
    hf = from_checkpoint(name, tiny_dir).forward(tm.prompt(name)[:positions.max() + 1])[positions]
    assert_agrees(hf, theirs, positions, f"{name} checkpoint", top1_of=ref)
    assert relative_error(hf, theirs) < 0.005


@pytest.mark.parametrize("name", NAMES)
def test_prefill_and_decode_agree_with_both_references(name, tiny_dir):
    """Prefill (all positions' logits) and decode one token at a time (the Python
    blocks: the fused step has no Mamba2 beside attention): each against the float64
    reference at every position (cosine >= 0.99999, the top-1 where clear) and against
    llama.cpp where recorded."""
    prompt = tm.prompt(name)
    positions, theirs = llama_cpp(name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        assert model.engine.architecture == "falcon-h1"
        runs = {"prefill": np.array(model.engine.create_context(n_ctx=128).prefill(prompt, all_logits=True))}
        ctx = model.engine.create_context(n_ctx=128, sampler=GreedySampler())
        assert not ctx.fused_decode
        runs["decode"] = decoded_one_at_a_time(ctx, prompt)
    assert_runs_agree_with_both_references(runs, reference_logits(name, tiny_dir), positions, theirs, name)


# ---- each feature matters ---------------------------------------------------------------
class WithoutMamba(FalconH1):
    with_mamba = False


class WithoutAttention(FalconH1):
    with_attention = False


@pytest.mark.parametrize("piece", [f.name for f in dataclasses.fields(Multipliers)])
def test_each_multiplier_matters(piece, tiny_dir):
    """The checkpoint's reference with one multiplier left out (set to 1) no longer agrees
    with llama.cpp on the folded file: by cosine, or (lm_head, which scales every logit
    alike) by the relative error."""
    name = "falcon-h1"
    positions, theirs = early(name, tiny_dir)
    mult = multipliers(name)
    value = getattr(mult, piece)
    one = tuple(1.0 for _ in value) if isinstance(value, tuple) else 1.0
    out = from_checkpoint(name, tiny_dir, dataclasses.replace(mult, **{piece: one}))
    ours = out.forward(tm.prompt(name)[:positions.max() + 1])[positions]
    if piece == "lm_head":
        assert relative_error(ours, theirs) > 1.0
    else:
        assert cosines(ours, theirs).min() < 0.999, piece


@pytest.mark.parametrize("without", [WithoutMamba, WithoutAttention])
@pytest.mark.parametrize("name", NAMES)
def test_both_mixers_matter(without, name, tiny_dir):
    positions, theirs = early(name, tiny_dir)
    ours = without.from_gguf(tiny_file(name, tiny_dir)).forward(tm.prompt(name)[:positions.max() + 1])[positions]
    assert cosines(ours, theirs).min() < 0.99


def test_the_spec_reads_the_file(tiny_dir):
    with infer.load(tiny_file("falcon-h1", tiny_dir)) as model:
        s = model.engine.spec
        assert all(layer.kind == "attention" and layer.parallel_mamba2 and layer.rope.neox
                   and layer.rope.base == pytest.approx(1e11) for layer in s.layers)
        assert (s.n_heads, s.n_kv_heads, s.head_dim, s.ffn_norm_bare, s.qkv_bias) == (4, 2, 32, True, False)
        assert (s.mamba2.d_inner, s.mamba2.n_heads, s.mamba2.n_groups, s.mamba2.d_state, s.mamba2.gated_norm) == \
            (384, 6, 2, 16, True)
        assert (s.embd_scale, s.logit_scale, s.residual_scale, s.query_scale) == (1.0, 1.0, 1.0, None)
        with pytest.raises(NotImplementedError, match="Falcon-H1"):
            with model.engine.running():
                model.engine.fused_step()
    with infer.load(tiny_file("falcon-h1-nonorm", tiny_dir)) as model:
        assert not model.engine.spec.mamba2.gated_norm


# ---- state: truncation, checkpoints, copies, batches -------------------------------------
def test_truncation_goes_back_to_a_checkpoint_exactly(tiny_dir):
    """Checkpoints at a prefill's end and every 16 decoded tokens: truncate_to(41) goes
    back to the one at 40 and evaluates token 40 again, giving bit for bit what a
    context that never went further gives; truncate_to(20), before any checkpoint,
    evaluates from the start and gives a fresh prefill's logits bit for bit."""
    prompt = [int(t) for t in tm.prompt("falcon-h1")]
    with infer.load(tiny_file("falcon-h1", tiny_dir)) as model:
        ctx = model.engine.create_context(n_ctx=128)
        ctx.prefill(prompt[:24])
        for tok in prompt[24:56]:
            ctx.prefill([tok])
        plain = model.engine.create_context(n_ctx=128)
        plain.prefill(prompt[:24])
        for tok in prompt[24:40]:
            plain.prefill([tok])
        plain.prefill(prompt[40:50])
        ctx.truncate_to(41)
        ctx.prefill(prompt[41:50])
        np.testing.assert_array_equal(ctx.logits, plain.logits)
        ctx.truncate_to(20)
        ctx.prefill(prompt[20:50])
        fresh = model.engine.create_context(n_ctx=128)
        fresh.prefill(prompt[:50])
        np.testing.assert_array_equal(ctx.logits, fresh.logits)
        assert cosines(ctx.logits[None], reference_logits("falcon-h1", tiny_dir)[49:50])[0] >= 0.99999


def test_saved_state_and_copy_continue_exactly(tiny_dir):
    """A saved state and a copy hold every layer's KV cache and Mamba2 state."""
    with infer.load(tiny_file("falcon-h1", tiny_dir)) as model:
        ctx = recurrent_state_continues_exactly(model, tm.prompt("falcon-h1"))
        assert ctx.k_cache.shape == (3, 64 * 2 * 32) and ctx.ssm_state.shape == (3, 6, 64, 16)
        assert cosines(ctx.logits[None], reference_logits("falcon-h1", tiny_dir)[24:25])[0] >= 0.99999


def test_batched_decode_equals_decoding_alone(tiny_dir):
    prompt = [int(t) for t in tm.prompt("falcon-h1")]
    with infer.load(tiny_file("falcon-h1", tiny_dir)) as model:
        assert_batched_equals_alone(model.engine, [prompt[:5], prompt[:23], prompt[:11]], 4, 64, fused=False)


def test_the_scheduler_batches_like_alone(tiny_dir):
    prompts = [[int(t) for t in tm.prompt("falcon-h1")[lo:lo + n]] for lo, n in ((0, 7), (20, 30), (40, 3))]
    with infer.load(tiny_file("falcon-h1", tiny_dir)) as model:
        assert_scheduler_batches_like_alone(model, prompts, n_ctx=64, max_tokens=6)


# ---- the command line ------------------------------------------------------------------
def test_greedy_generation_runs_through_the_cli(tiny_dir):
    """`infer generate` with --temp 0 prints the continuation the float64 reference picks
    greedily (where each pick is clear of the runner-up)."""
    path = tiny_file("falcon-h1", tiny_dir)
    with infer.load(path) as model:
        assert_cli_generates_the_reference_greedy(path, model.tokenizer, FalconH1.from_gguf(path).forward,
                                                  "Inference on a CPU is fast")


def test_info_shows_the_mamba2_state(tiny_dir, capsys):
    from infer.cli import main

    assert main(["info", tiny_file("falcon-h1", tiny_dir)]) == 0
    out = capsys.readouterr().out
    assert "architecture    falcon-h1\n" in out
    assert "Mamba2          3 layers, 6 heads of 64 in 2 groups, state size 16, conv width 4\n" in out
    # 3 layers of S (6 x 64 x 16) and 3 conv inputs of 384 + 2 * 2 * 16 channels, float32
    assert f"recurrent state {3 * 4 * (384 * 16 + 3 * 448) / 1024:.1f} KiB per context" in out
    assert "gated DeltaNet" not in out
    assert "falcon-h1" in infer.known_architectures()


# ---- refusals -----------------------------------------------------------------------------
@pytest.mark.parametrize("key, value", [("key_multiplier", 0.39), ("mlp_gate_multiplier", 0.88),
                                        ("ssm.has_mup", True), ("attention.scale", 0.125)])
def test_keys_llama_cpp_does_not_read_are_refused(key, value, tmp_path):
    """The pre-upstream fork's files kept the multipliers as keys (their weights were not
    folded), and llama.cpp's falcon-h1 reads no attention scale: such a file would run
    with different maths, so it is refused by name."""
    e = refused(tm.write_falcon_h1(tm.FALCON_H1["falcon-h1"], str(tmp_path / "f.gguf"), {key: value}))
    assert e.names == [f"falcon-h1.{key}"]


def test_tensors_it_does_not_run_are_refused(tmp_path):
    """llama.cpp loads an attn_output.bias but its falcon-h1 graph never adds it; FFN
    biases are not implemented."""
    for name, n in (("blk.1.attn_output.bias", 256), ("blk.0.ffn_up.bias", 512)):
        e = refused(tm.write_falcon_h1(tm.FALCON_H1["falcon-h1"], str(tmp_path / "f.gguf"),
                                       {name: np.zeros(n, np.float32)}))
        assert e.names == [name]


def test_the_ffn_norm_is_read_by_the_converters_name(tmp_path):
    """blk.N.ffn_norm (no ".weight"), as llama.cpp reads it: a file with ffn_norm.weight
    instead is not the converter's and fails to load, naming the tensor."""
    t = tm.FALCON_H1["falcon-h1-nonorm"]
    more = {f"blk.{i}.ffn_norm.weight": np.ones(256, np.float32) for i in range(t.n_layer)}
    path = tm.write_falcon_h1(t, str(tmp_path / "f.gguf"), more, drop=tuple(f"blk.{i}.ffn_norm"
                                                                          for i in range(t.n_layer)))
    with pytest.raises(GGUFError, match="blk.0.ffn_norm"):
        infer.load(path)


def test_a_chat_with_an_edited_history_gives_what_a_fresh_chat_gives(tiny_dir):
    """Chat reuses the cached prefix of an edited history: the Mamba2 state goes back to
    the checkpoint at the first turn's prompt (19 tokens) and the rest is evaluated
    again.  The reply, with each token's log-probability, is a fresh session's on the
    same history.  (The tiny file has no template, so chat renders ChatML; llama.cpp's
    models/templates has no Falcon-H1 one.)"""
    with infer.load(tiny_file("falcon-h1", tiny_dir)) as model:
        with pytest.warns(BaseModelWarning, match="built-in 'chatml'"):
            chat = infer.ChatSession(model, temperature=0, max_tokens=6, n_ctx=256)
        chat.send("Hello world!")
        chat.send("Numbers like 12")
        edited = chat.history[:2]
        edited[1] = {"role": "assistant", "content": "Hello."}
        chat.history = edited
        again = chat.send("Inference on a CPU is fast", logprobs=1)
        assert again.cached_tokens == 19
        fresh = infer.ChatSession(model, temperature=0, max_tokens=6, n_ctx=256)   # (warned once a model)
        fresh.history = edited
        alone = fresh.send("Inference on a CPU is fast", logprobs=1)
        assert alone.cached_tokens == 0 and alone.text == again.text and alone.completion_tokens == 6
        np.testing.assert_allclose([p["logprob"] for p in again.logprobs], [p["logprob"] for p in alone.logprobs],
                                   atol=1e-5)
