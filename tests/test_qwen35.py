"""Qwen3.5 (GGUF ``qwen35`` and ``qwen35moe``): gated DeltaNet layers beside gated
full attention, on the tiny random-weight files of tests/tiny_models.py (QWEN35:
``qwen35``, DeltaNet at layers 0 and 2, 4 value heads over 2 key heads; ``qwen35moe``,
its layers marked by attention.recurrent_layers, 8 experts and a shared one), against
two independent references:

* tests/reference/numpy_qwen35.py, a float64 numpy forward pass written from HF's
  Qwen3_5 modelling (the recurrent gated delta rule, interleaved M-RoPE);
* llama.cpp's own teacher-forced logits on the same files
  (tests/data/llama_cpp_qwen35.npz, see tests/data/README.md).

Then what must stay exact although the DeltaNet state is not kept per position:
decode = prefill, batched decode and prefill, truncate_to (to a checkpoint and
between checkpoints), copies, saved states, a chat session's second turn, each
decoding through the fused C step (csrc/transformer_block.c, the default) and
through the Python blocks (FUSED), which must give the same logits bit for bit; the
recurrence kernel against a float64 loop; and the files infer must refuse.
"""
import copy
import dataclasses
import math
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import assert_agrees, assert_scheduler_batches_like_alone, assert_step_refuses_bad_recurrent_states
from family_checks import recorded_logits, recording, tiny_file
from family_checks import check as check_against
from reference.numpy_qwen35 import Qwen35Reference
from scripted import GreedySampler

import infer
import infer.kernels as K
from infer import UnsupportedModelError
from infer.gguf import GGUFError
from infer.runtime import Context, decode_batch, prefill_batch
from infer.variants import transformer as T

NAMES = ["qwen35", "qwen35moe"]
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_qwen35.npz")
#: as tests/test_families.py: infer against the float64 reference
MIN_COS = 0.99999
#: decode through the fused C step (the default) or the Python blocks
FUSED = pytest.mark.parametrize("fused", [True, False], ids=["fused", "python"])


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("qwen35")


_refs = {}


def reference_logits(name, tiny_dir):
    if name not in _refs:
        _refs[name] = Qwen35Reference(tiny_file(name, tiny_dir)).forward(tm.prompt(name))
    return _refs[name]


def check(logits, ref, where, min_cos=MIN_COS):
    check_against(logits, ref, where, min_cos)


def load(tiny_dir, name="qwen35"):
    return infer.load(tiny_file(name, tiny_dir))


def context(model, fused, **options):
    """A context decoding through the fused C step or the Python blocks."""
    ctx = model.engine.create_context(**options)
    assert ctx.fused_decode
    ctx.fused_decode = fused
    return ctx


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max())


# ---- the references and infer's forward passes ---------------------------------------------
@pytest.fixture(scope="module")
def recorded():
    return recording(DATA)


@pytest.mark.parametrize("name", NAMES)
def test_reference_agrees_with_llama_cpp(name, recorded, tiny_dir):
    positions, theirs = recorded_logits(recorded, name, tiny_file(name, tiny_dir))
    ref = reference_logits(name, tiny_dir)[positions]
    assert_agrees(ref, theirs, positions, name, top1_of=ref)


@pytest.mark.parametrize("name", NAMES)
def test_prefill_matches_reference_and_llama_cpp(name, recorded, tiny_dir):
    """One prefill of the whole prompt (qwen35: 640 tokens, crossing the 512-row pass,
    where the state carries over), every position against the reference, the
    recorded ones against llama.cpp."""
    prompt = tm.prompt(name)
    ref = reference_logits(name, tiny_dir)
    with load(tiny_dir, name) as model:
        rows = model.engine.create_context(n_ctx=1024).prefill(prompt, all_logits=True)
    for i in range(len(prompt)):
        check(rows[i], ref[i], f"position {i}")
    positions, theirs = recorded_logits(recorded, name, tiny_file(name, tiny_dir))
    assert_agrees(rows[positions], theirs, positions, name)


@FUSED
@pytest.mark.parametrize("name", NAMES)
def test_decode_one_token_at_a_time_equals_prefill(name, fused, tiny_dir):
    """Decoding one token at a time (the fused C step, or the Python blocks) gives the
    batched prefill's logits and the reference's."""
    prompt = tm.prompt(name)[:70]
    ref = reference_logits(name, tiny_dir)
    with load(tiny_dir, name) as model:
        ctx = context(model, fused, n_ctx=256, sampler=GreedySampler())
        rows = model.engine.create_context(n_ctx=256).prefill(prompt, all_logits=True)
        for i, tok in enumerate(prompt):
            ctx.prefill([int(tok)])
            close(ctx.logits, rows[i])
            check(ctx.logits, ref[i], f"position {i}")


@pytest.mark.parametrize("name", NAMES)
def test_fused_decode_equals_the_python_blocks(name, tiny_dir):
    """The fused C step computes what the Python blocks compute, in the same float
    operations and kernels: the same logits bit for bit at every position (past the
    16-token checkpoint interval), and the same greedy continuation, which also
    follows the float64 reference where its top token is clear."""
    prompt = tm.prompt(name)[:40]
    with load(tiny_dir, name) as model:
        fused, python = (context(model, f, n_ctx=128, sampler=GreedySampler()) for f in (True, False))
        for i, tok in enumerate(prompt):
            fused.prefill([int(tok)])
            python.prefill([int(tok)])
            np.testing.assert_array_equal(fused.logits, python.logits, err_msg=f"position {i}")
        np.testing.assert_array_equal(fused.ssm_state, python.ssm_state)
        np.testing.assert_array_equal(fused.ssm_conv, python.ssm_conv)
        assert [c[0] for c in fused._checkpoints] == [c[0] for c in python._checkpoints] == [16, 32]
        ids = []
        for _ in range(8):
            tok = int(np.argmax(fused.logits))
            assert tok == int(np.argmax(python.logits))
            ids.append(tok)
            fused.prefill([tok])
            python.prefill([tok])
    ref = Qwen35Reference(tiny_file(name, tiny_dir)).forward(np.concatenate([prompt, ids[:-1]]))
    for k, tok in enumerate(ids):
        row = np.sort(ref[len(prompt) + k - 1])
        if row[-1] - row[-2] > 0.05:
            assert tok == int(np.argmax(ref[len(prompt) + k - 1])), f"generated token {k}"


def test_fused_step_refuses_bad_recurrent_states(tiny_dir):
    """TransformerDecoder.step checks each sequence's ssm_state and ssm_conv before
    the C call (family_checks.assert_step_refuses_bad_recurrent_states)."""
    with load(tiny_dir) as model:
        eng = model.engine
        a, b = (eng.create_context(n_ctx=64) for _ in range(2))
        a.prefill(tm.prompt("qwen35")[:5])
        b.prefill(tm.prompt("qwen35")[:5])
        assert a._fused_step().n_deltanet_layers == 2
        assert_step_refuses_bad_recurrent_states(a, b, (2, 4, 32, 32), (2, 3, 256))


def test_prefill_in_pieces_matches_reference(tiny_dir):
    """Batches whose boundaries cut the conv's reach (3 earlier inputs): its history
    and the state S come from the context."""
    name = "qwen35"
    prompt = tm.prompt(name)
    ref = reference_logits(name, tiny_dir)
    with load(tiny_dir) as model:
        ctx = model.engine.create_context(n_ctx=1024, sampler=GreedySampler())
        for lo, hi in [(0, 1), (1, 2), (2, 4), (4, 40), (40, 41), (41, 640)]:
            ctx.prefill(prompt[lo:hi])
            check(ctx.logits, ref[hi - 1], f"position {hi - 1}, batch {lo}..{hi}")


def test_prefill_batch_of_several_contexts(tiny_dir):
    """infer serve's batched prefill: the contexts' rows stacked in one pass, each
    context's DeltaNet layers advancing its own state."""
    name = "qwen35"
    prompt = tm.prompt(name)
    ref = reference_logits(name, tiny_dir)
    with load(tiny_dir) as model:
        ctxs = [model.engine.create_context(n_ctx=1024, sampler=GreedySampler()) for _ in range(3)]
        ctxs[1].prefill(prompt[:3])
        ctxs[2].prefill(prompt[:200])
        rows = prefill_batch(ctxs, [prompt[:150], prompt[3:160], prompt[200:400]], all_logits=True)
        for ctx_rows, start in zip(rows, (0, 3, 200)):
            for i, logits in enumerate(ctx_rows):
                check(logits, ref[start + i], f"position {start + i}")


@FUSED
def test_batched_decode_equals_one_at_a_time(fused, tiny_dir):
    """decode_batch (infer serve's step: the fused step with a batch of sequences, or
    the Python blocks with the tokens stacked) over contexts at different positions
    gives each the logits it gets alone, bit for bit, and the checkpoints it gets alone."""
    name = "qwen35"
    prompt = tm.prompt(name)
    with load(tiny_dir) as model:
        lengths = [5, 1, 130]
        together = [context(model, fused, n_ctx=256, sampler=GreedySampler()) for _ in lengths]
        alone = [context(model, fused, n_ctx=256, sampler=GreedySampler()) for _ in lengths]
        for c, a, n in zip(together, alone, lengths):
            c.prefill(prompt[:n])
            a.prefill(prompt[:n])
        for step in range(18):
            tokens = [int(prompt[n + step]) for n in lengths]
            decode_batch(together, tokens)
            for c, a, t in zip(together, alone, tokens):
                a.prefill([t])
                np.testing.assert_array_equal(c.logits, a.logits)
        ref = reference_logits(name, tiny_dir)
        for c, a, n in zip(together, alone, lengths):
            check(c.logits, ref[n + 17], f"batched decode, position {n + 17}")
            assert [p[0] for p in c._checkpoints] == [p[0] for p in a._checkpoints]
            assert any(not p[3] for p in c._checkpoints)   # one made after a decoded token
            np.testing.assert_array_equal(c.ssm_state, a.ssm_state)


# ---- truncation, copies, saved states ---------------------------------------------------------
def _decode(ctx, tokens):
    for t in tokens:
        ctx.prefill([int(t)])
    return ctx.logits.copy()


@FUSED
def test_truncate_to_a_checkpoint_and_between_checkpoints(fused, tiny_dir):
    """The state goes back to the latest checkpoint at or before n (a prefill's end,
    every CHECKPOINT_INTERVAL decoded positions) and the tokens after it are evaluated
    again: re-decoding then gives the same logits as the first time, after other
    tokens overwrote those positions."""
    name = "qwen35"
    prompt = tm.prompt(name)
    other = (prompt[::-1] + 7) % 500
    with load(tiny_dir) as model:
        ctx = context(model, fused, n_ctx=256, sampler=GreedySampler())
        ctx.prefill(prompt[:100])                            # checkpoint at 100
        first = _decode(ctx, prompt[100:140])                # ... at 116 and 132
        assert [c[0] for c in ctx._checkpoints] == [100, 116, 132]
        for n in (100, 116, 125, 101, 0):                    # on a checkpoint, between, before all
            ctx.truncate_to(n)
            _decode(ctx, other[:20])
            ctx.truncate_to(n)
            expected_start = max([c for c in (0, 100, 116, 132) if c <= n])
            assert ctx._n_cached == expected_start, n
            if n < 100:
                ctx.prefill(prompt[n:100])
            np.testing.assert_array_equal(_decode(ctx, prompt[max(n, 100):140]), first)
        ctx.restart()
        assert not ctx._checkpoints and not ctx.ssm_state.any()
        ctx.prefill(prompt[:140])
        check(ctx.logits, reference_logits(name, tiny_dir)[139], "position 139 after restart")


@FUSED
def test_checkpoints_are_bounded(fused, tiny_dir, monkeypatch):
    """At most MAX_CHECKPOINTS, the prefills' ends kept before decoded positions."""
    monkeypatch.setattr(T, "CHECKPOINT_INTERVAL", 2)
    with load(tiny_dir) as model:
        ctx = context(model, fused, n_ctx=256, sampler=GreedySampler())
        ctx.prefill(tm.prompt("qwen35")[:10])
        _decode(ctx, tm.prompt("qwen35")[10:60])
        assert [c[0] for c in ctx._checkpoints] == [10] + list(range(60 - 2 * (T.MAX_CHECKPOINTS - 2), 61, 2))
        one, held = ctx.recurrent_bytes()
        # 2 DeltaNet layers: 4 heads of 32 x 32, and 3 conv inputs of 2 * 64 + 128 channels
        assert one == 2 * 4 * (4 * 32 * 32 + 3 * 256) and held == one * T.MAX_CHECKPOINTS
        first = ctx.logits.copy()
        ctx.truncate_to(30)   # between the prefill's end and the decoded ones left
        assert ctx._n_cached == 10
        np.testing.assert_array_equal(_decode(ctx, tm.prompt("qwen35")[30:60]), first)
        ctx.truncate_to(5)   # before every checkpoint left: from the start again
        assert ctx._n_cached == 0
        np.testing.assert_array_equal(_decode(ctx, tm.prompt("qwen35")[5:60]), first)


def test_failed_pass_leaves_the_state_as_before(tiny_dir, monkeypatch):
    """A pass that fails half-way (here in the second DeltaNet layer) leaves a state
    that is neither; the context goes back to a checkpoint and evaluates again."""
    prompt = tm.prompt("qwen35")
    with load(tiny_dir) as model:
        ctx = context(model, False, n_ctx=256, sampler=GreedySampler())
        twin = model.engine.create_context(n_ctx=256, sampler=GreedySampler())
        ctx.prefill(prompt[:30])
        twin.prefill(prompt[:31])
        real = T.TransformerContext._deltanet

        def broken(self, w, li, s, segments):
            if li == 2:
                raise KeyboardInterrupt
            real(self, w, li, s, segments)

        monkeypatch.setattr(T.TransformerContext, "_deltanet", broken)
        with pytest.raises(KeyboardInterrupt):
            ctx.prefill([int(prompt[30])])
        monkeypatch.setattr(T.TransformerContext, "_deltanet", real)
        assert len(ctx.tokens) == 30
        ctx.prefill([int(prompt[30])])
        np.testing.assert_array_equal(ctx.logits, twin.logits)


def test_failed_fused_step_leaves_the_state_as_before(tiny_dir):
    """A fused step interrupted (here before its C call) leaves the context to go back
    to a checkpoint and evaluate again, as a failed pass of the Python blocks."""
    prompt = tm.prompt("qwen35")
    with load(tiny_dir) as model:
        ctx = model.engine.create_context(n_ctx=256, sampler=GreedySampler())
        twin = model.engine.create_context(n_ctx=256, sampler=GreedySampler())
        ctx.prefill(prompt[:30])
        _decode(ctx, prompt[30:35])
        twin.prefill(prompt[:36])
        real = ctx._fused_step()

        class Broken:
            def decode(self, *args):
                raise KeyboardInterrupt

        ctx._step = Broken()
        with pytest.raises(KeyboardInterrupt):
            ctx.prefill([int(prompt[35])])
        ctx._step = real
        assert len(ctx.tokens) == 35 and ctx._recurrent_pos <= 30   # back to the prefill's checkpoint
        ctx.prefill([int(prompt[35])])
        np.testing.assert_array_equal(ctx.logits, twin.logits)


@FUSED
def test_saved_state_and_copy_continue_exactly(fused, tiny_dir):
    name = "qwen35"
    prompt = tm.prompt(name)
    with load(tiny_dir) as model:
        ctx = context(model, fused, n_ctx=256)
        ctx.prefill(prompt[:50])
        _decode(ctx, prompt[50:53])
        data = ctx.save_state()
        twin = copy.deepcopy(ctx)
        loaded = Context.load_state(model, data)
        loaded.fused_decode = fused
        _decode(ctx, prompt[53:60])
        for other in (twin, loaded):
            np.testing.assert_array_equal(_decode(other, prompt[53:60]), ctx.logits)
        assert not np.shares_memory(twin.ssm_state, ctx.ssm_state)
        # KV caches for the two attention layers only (1 and 3): 2 KV heads of 64 each
        assert ctx.k_cache.shape == (2, 256 * 2 * 64)
        assert sorted(ctx._cache_state(60)) == ["k.1", "k.3", "ssm_conv", "ssm_state", "v.1", "v.3"]
        check(ctx.logits, reference_logits(name, tiny_dir)[59], "position 59")
        loaded.truncate_to(51)   # before the state it was saved with: evaluated from the start
        np.testing.assert_array_equal(_decode(loaded, prompt[51:60]), ctx.logits)


def test_a_saved_state_without_the_recurrent_state_is_refused(tiny_dir):
    from infer.state import StateError

    with load(tiny_dir) as model:
        ctx = model.engine.create_context(n_ctx=64)
        ctx.prefill(tm.prompt("qwen35")[:10])
        arrays = ctx._cache_state(10)
        fresh = model.engine.create_context(n_ctx=64)
        for bad in ({k: v for k, v in arrays.items() if k != "ssm_state"},
                    {**arrays, "ssm_conv": arrays["ssm_conv"][:, :2]},
                    {**arrays, "ssm_state": arrays["ssm_state"].astype(np.float64)}):
            with pytest.raises(StateError, match="ssm_"):
                fresh._load_cache_state(bad, 10)
        assert not fresh.ssm_state.any() and not fresh.k_cache.any()


@pytest.mark.filterwarnings("ignore:this model has no chat template")
def test_chat_session_second_turn_reuses_the_cache(tiny_dir):
    """The second turn evaluates only what follows the kept prefix (from the latest
    checkpoint before it: at worst the first prompt's end), and answers as a fresh
    session given the same history."""
    with load(tiny_dir) as model:
        session = infer.ChatSession(model, system="Be brief.", temperature=0, max_tokens=24, n_ctx=512)
        session.send("Hello there, how are you?")
        first_prompt = session.context._checkpoints[0][0]
        assert first_prompt > 10
        starts = []
        forward = session.context._forward

        def spy(tokens, start):
            starts.append((start, len(tokens)))
            forward(tokens, start)

        session.context._forward = spy
        second = session.send("And tomorrow?")
        assert starts[0][0] >= first_prompt, (starts[0], first_prompt)
        fresh = infer.ChatSession(model, temperature=0, max_tokens=24, n_ctx=512)
        fresh.history = session.history[:-2]
        again = fresh.send("And tomorrow?")
        assert again.text == second.text


def test_chat_through_qwen35s_own_template(tmp_path):
    """Qwen3.5's chat template (tests/chat_templates/qwen3.5.jinja) and pre-tokenizer on the tiny file:
    two turns of a ChatSession, the second prefilling from the first's cache, give the
    reply a fresh session gives for the same history."""
    template_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_templates", "qwen3.5.jinja")
    with open(template_path, encoding="utf-8") as f:
        template = f.read()
    # and the pre-tokenizer a real Qwen3.5 file names (tokenizer.ggml.pre "qwen35")
    path = tm.write_qwen35(dataclasses.replace(tm.ALL["qwen35"], pre="qwen35"), str(tmp_path / "chat.gguf"),
                           {"tokenizer.chat_template": template})
    with infer.load(path) as model:
        session = infer.ChatSession(model, temperature=0, max_tokens=16, n_ctx=1024)
        session.send("What is the weather like?")
        assert "<|im_start|>assistant" in model.chat.render(session.history, add_generation_prompt=True)
        second = session.send("And tomorrow?")
        fresh = infer.ChatSession(model, temperature=0, max_tokens=16, n_ctx=1024)
        fresh.history = session.history[:-2]
        assert fresh.send("And tomorrow?").text == second.text


def test_greedy_generation_follows_the_reference(tiny_dir):
    from infer.generate import generate

    path = tiny_file("qwen35", tiny_dir)
    prompt = [int(t) for t in tm.prompt("qwen35")[:30]]
    with infer.load(path) as model:
        gen = generate(model, prompt, max_tokens=12, temperature=0, stop_at_end_of_turn=False)
        "".join(gen)
        ids = list(gen.context.tokens)[len(prompt):]
    ref = Qwen35Reference(path).forward(prompt + ids)
    for k, tok in enumerate(ids):
        row = np.sort(ref[len(prompt) + k - 1])
        if row[-1] - row[-2] > 0.05:
            assert tok == int(np.argmax(ref[len(prompt) + k - 1])), f"generated token {k}"


def test_mtp_layers_are_not_run(tiny_dir, tmp_path):
    """nextn_predict_layers: the last blocks are MTP heads, loaded by llama.cpp but
    not run in its main pass; a fifth block so marked leaves the logits as they were
    (the writer draws the first four blocks' weights first)."""
    t = tm.ALL["qwen35"]
    path = tm.write_qwen35(dataclasses.replace(t, n_layer=5, extra={**t.extra, "nextn_predict_layers": 1}),
                           str(tmp_path / "mtp.gguf"))
    prompt = tm.prompt("qwen35")[:20]
    with infer.load(path) as model:
        assert model.engine.spec.n_layers == 4
        ours = model.engine.create_context(n_ctx=64).prefill(prompt, all_logits=True)
    for i in range(20):
        check(ours[i], reference_logits("qwen35", tiny_dir)[i], f"position {i}")


def test_infer_info_shows_the_recurrent_state(tiny_dir, capsys):
    from infer import cli

    assert cli.main(["info", tiny_file("qwen35", tiny_dir)]) in (0, None)
    out = capsys.readouterr().out
    assert "gated DeltaNet  2 layers, 4 value heads over 2 key heads of 32, conv width 4" in out
    assert "recurrent state 38.0 KiB per context" in out


# ---- the recurrence kernel ----------------------------------------------------------------
def test_sigmoid_kernel():
    """kernels.sigmoid (the gates of the fused step and of the Python blocks) against
    float64, in place and into another array, and its argument checks."""
    x = np.concatenate([np.linspace(-100, 100, 2001), [0.0, -np.inf, np.inf]]).astype(np.float32)
    want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    out = K.sigmoid(x, np.empty_like(x))
    np.testing.assert_allclose(out, want, rtol=2e-7, atol=1e-30)
    inplace = x.reshape(4, -1).copy()
    assert K.sigmoid(inplace, inplace) is inplace
    np.testing.assert_array_equal(inplace.reshape(-1), out)
    np.testing.assert_array_equal(K.sigmoid(x[::2], np.empty(x[::2].shape, np.float32)), out[::2])
    with pytest.raises(TypeError, match="float32"):
        K.sigmoid(x.astype(np.float64), np.empty_like(x))
    with pytest.raises(TypeError, match="one shape"):
        K.sigmoid(x, np.empty(3, np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        K.sigmoid(x[::2], np.empty((x.size, 2), np.float32)[:x[::2].size * 2:2, 0].reshape(-1))



def delta_rule(q, k, v, g, beta, state, scale):
    """float64: per value head h (key head h % n_k), per token, S *= exp(g);
    S += k (beta (v - S^T k))^T; o = scale S^T q, S[key, value] = state[h]."""
    n, n_k, d = q.shape
    S = state.astype(np.float64)
    out = np.zeros(v.shape)
    for h in range(v.shape[1]):
        for t in range(n):
            S[h] *= math.exp(g[t, h])
            S[h] += np.outer(k[t, h % n_k], beta[t, h] * (v[t, h] - S[h].T @ k[t, h % n_k]))
            out[t, h] = scale * (S[h].T @ q[t, h % n_k])
    return out, S


@pytest.mark.parametrize("n,n_k,n_v,d", [(1, 1, 1, 1), (3, 1, 2, 5), (17, 2, 6, 33), (2, 4, 4, 128), (40, 2, 4, 64)])
def test_gated_delta_net_kernel(n, n_k, n_v, d, isa):
    """Every kernel set's head loop (scalar; AVX2 for the avx2 and avx512 sets), on
    head sizes with and without a tail of 8, heads on one thread and on the pool."""
    rng = np.random.default_rng(n * 1000 + d)
    f = np.float32
    q, k = (rng.standard_normal((n, n_k, d)).astype(f) / math.sqrt(d) for _ in range(2))
    v = rng.standard_normal((n, n_v, d)).astype(f)
    g = -rng.uniform(0, 2, (n, n_v)).astype(f)
    beta = rng.uniform(0, 1, (n, n_v)).astype(f)
    state = rng.standard_normal((n_v, d, d)).astype(f)
    want_out, want_state = delta_rule(q, k, v, g, beta, state, 0.3)
    out = np.zeros_like(v)
    K.gated_delta_net(q, k, v, g, beta, state, out, 0.3)
    np.testing.assert_allclose(out, want_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state, want_state, rtol=1e-4, atol=1e-4)


def test_gated_delta_net_checks_its_arguments():
    f = np.float32
    q, k = np.zeros((2, 1, 4), f), np.zeros((2, 1, 4), f)
    v, out = np.zeros((2, 2, 4), f), np.zeros((2, 2, 4), f)
    g, beta, state = np.zeros((2, 2), f), np.zeros((2, 2), f), np.zeros((2, 4, 4), f)
    K.gated_delta_net(q, k, v, g, beta, state, out)
    cases = [((q, k, np.zeros((2, 3, 4), f), g, beta, state, out), "out"),
             ((np.zeros((2, 2, 4), f), np.zeros((2, 2, 4), f), np.zeros((2, 3, 4), f), np.zeros((2, 3), f),
               np.zeros((2, 3), f), np.zeros((3, 4, 4), f), np.zeros((2, 3, 4), f)), "not a multiple"),
             ((q, k, v, g[:1], beta, state, out), "g: expected shape"),
             ((q, k, v, g, beta, state[:, :3].copy(), out), "state: expected shape"),
             ((q, np.zeros((2, 1, 3), f), v, g, beta, state, out), "k: shape"),
             ((q, k, v, g, beta, state.astype(np.float64), out), "float32"),
             ((q, k, v, g, beta, state, state.reshape(2, 2, 8)), "out"),
             ((q, k, v, g, beta, state, state.reshape(-1)[:16].reshape(2, 2, 4)), "shares memory"),
             ((q, k, v, g, beta, np.zeros((2, 4, 4), f)[:, :, ::-1], out), "C-contiguous")]
    for args, message in cases:
        with pytest.raises((ValueError, TypeError), match=message):
            K.gated_delta_net(*args)
    with pytest.raises(ValueError, match="d must be"):
        big = np.zeros((1, 1, 1025), f)
        K.gated_delta_net(big, big, big, np.zeros((1, 1), f), np.zeros((1, 1), f), np.zeros((1, 1025, 1025), f), big)


# ---- files infer must refuse ----------------------------------------------------------------
def hostile(tmp_path, more=None, drop=(), name="qwen35"):
    return tm.write_qwen35(tm.ALL[name], str(tmp_path / "hostile.gguf"), more, drop)


@pytest.mark.parametrize("kernel", [0, 1, 65, 2**31])
def test_bad_conv_kernel_is_refused(tmp_path, kernel):
    with pytest.raises(GGUFError, match=r"qwen35\.ssm\.conv_kernel"):
        infer.load(hostile(tmp_path, {"ssm.conv_kernel": kernel}))


def test_conv_kernel_other_than_the_tensors_is_refused(tmp_path):
    with pytest.raises(GGUFError, match=r"blk\.0\.ssm_conv1d\.weight: expected F32 of shape \(256, 5\)"):
        infer.load(hostile(tmp_path, {"ssm.conv_kernel": 5}))


def test_state_size_other_than_the_tensors_is_refused(tmp_path):
    with pytest.raises(GGUFError, match=r"blk\.0\.attn_qkv\.weight: expected shape \(512, 256\)"):
        infer.load(hostile(tmp_path, {"ssm.state_size": 64, "ssm.inner_size": 256}))


@pytest.mark.parametrize("keys, message", [
    ({"ssm.inner_size": 100}, r"ssm\.inner_size=100 is not"),
    ({"ssm.group_count": 3}, r"time_step_rank=4 is not a multiple of .*group_count=3"),
    ({"ssm.state_size": 0}, r"ssm\.state_size must be in"),
    ({"ssm.state_size": 4096}, r"ssm\.state_size must be in"),
])
def test_bad_deltanet_sizes_are_refused(tmp_path, keys, message):
    with pytest.raises(ValueError, match=message):
        infer.load(hostile(tmp_path, keys))


@pytest.mark.parametrize("missing", ["blk.0.ssm_a", "blk.2.ssm_conv1d.weight", "blk.0.attn_gate.weight",
                                     "blk.2.ssm_dt.bias", "blk.0.ssm_norm.weight", "blk.1.post_attention_norm.weight"])
def test_missing_tensor_is_named(tmp_path, missing):
    with pytest.raises(GGUFError, match=f"tensor {missing} is missing"):
        infer.load(hostile(tmp_path, drop=(missing,)))


@pytest.mark.parametrize("missing", ["ssm.conv_kernel", "ssm.time_step_rank", "rope.dimension_sections"])
def test_missing_key_is_named(tmp_path, missing):
    with pytest.raises(GGUFError, match=f"qwen35.{missing} is missing"):
        infer.load(hostile(tmp_path, drop=(missing,)))


def test_rope_sections_with_an_extra_part_are_refused(tmp_path):
    t = tm.ALL["qwen35"]
    sh = dataclasses.replace(t.qwen35, sections=(2, 2, 2, 2))
    path = tm.write_qwen35(dataclasses.replace(t, qwen35=sh), str(tmp_path / "sections.gguf"))
    with pytest.raises(UnsupportedModelError, match="extra"):
        infer.load(path)


def test_deltanet_tensors_on_an_attention_layer_are_refused(tmp_path):
    path = hostile(tmp_path, {"blk.1.ssm_a": np.zeros(4, np.float32)})
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(path)
    assert e.value.names == ["blk.1.ssm_a"]


def test_serve_scheduler_gives_each_request_its_own_text(tiny_dir):
    """infer serve's scheduler: requests decoding together (decode_batch through the
    fused step, tokens decoded ahead and taken back) get the text each gets alone."""
    prompts = [[int(t) for t in tm.prompt("qwen35")[lo:lo + n]] for lo, n in ((0, 7), (50, 30), (300, 3))]
    with load(tiny_dir) as model:
        assert_scheduler_batches_like_alone(model, prompts, n_ctx=256, max_tokens=10)


@pytest.mark.parametrize("flags, error, message", [
    ([True, False, True], GGUFError, r"recurrent_layers has 3 entries for 4 layers"),
    ([1, 0, 1, 0], GGUFError, r"recurrent_layers must be booleans"),
    ([True, False, True, False, True], GGUFError, r"recurrent_layers has 5 entries for 4 layers"),
])
def test_bad_recurrent_layer_flags_are_refused(tmp_path, monkeypatch, flags, error, message):
    """attention.recurrent_layers of another length than block_count, or not booleans
    (written beside the sections by intercepting the writer; the tensors stay those
    of the 4-layer file)."""
    import gguf

    add_array = gguf.GGUFWriter.add_array

    def array(self, key, value):
        add_array(self, key, value)
        if key == "qwen35.rope.dimension_sections":
            add_array(self, "qwen35.attention.recurrent_layers", flags)

    monkeypatch.setattr(gguf.GGUFWriter, "add_array", array)
    path = tm.write_qwen35(tm.ALL["qwen35"], str(tmp_path / "flags.gguf"))
    monkeypatch.undo()
    with pytest.raises(error, match=message):
        infer.load(path)
