"""Granite 4.0-H (GGUF ``granitehybrid``): Mamba2 layers beside RoPE-less attention,
with Granite's multipliers, on the tiny random-weight file of tests/tiny_models.py
(GRANITE_HYBRID: ``granitehybrid``, Mamba2 at layers 0, 1 and 3, attention at 2; 8
SSM heads of 64 in 2 groups of state 32; ``granitehybrid-moe``, h-tiny's shape: 8
experts, 2 used, and a shared MLP without a gate), against two independent references:

* tests/reference/numpy_mamba2.py, a float64 numpy forward pass written from HF's
  GraniteMoeHybrid modelling (the Mamba2 recurrent step, the gated grouped norm);
* llama.cpp's own teacher-forced logits on the same file
  (tests/data/llama_cpp_mamba2.npz, see tests/data/README.md).

Then what must stay exact although the SSM state is not kept per position: decode =
prefill, the fused C decode step = the Python blocks bit for bit, batched decode and
prefill, truncate_to between checkpoints, copies, saved states; the scan kernel
against a float64 loop; and the files infer must refuse.
"""
import copy
import math
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import assert_agrees, assert_scheduler_batches_like_alone, assert_step_refuses_bad_recurrent_states
from family_checks import recorded_logits, recording, tiny_file
from family_checks import check as check_against
from reference.numpy_mamba2 import GraniteHybridReference
from scripted import GreedySampler

import infer
import infer.kernels as K
from infer import UnsupportedModelError
from infer.gguf import GGUFError
from infer.runtime import Context, decode_batch, prefill_batch

NAME = "granitehybrid"
NAMES = [NAME, "granitehybrid-moe"]
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_mamba2.npz")
#: as tests/test_families.py: infer against the float64 reference
MIN_COS = 0.99999


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("granitehybrid")


_refs = {}


def reference_logits(tiny_dir, name=NAME):
    if name not in _refs:
        _refs[name] = GraniteHybridReference(tiny_file(name, tiny_dir)).forward(tm.prompt(name))
    return _refs[name]


def check(logits, ref, where):
    check_against(logits, ref, where, MIN_COS)


def load(tiny_dir, name=NAME):
    return infer.load(tiny_file(name, tiny_dir))


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max())


def _decode(ctx, tokens):
    for t in tokens:
        ctx.prefill([int(t)])
    return ctx.logits.copy()


def context(model, fused, **options):
    """A context decoding through the fused C step (the default) or the Python blocks."""
    ctx = model.engine.create_context(**options)
    assert ctx.fused_decode
    ctx.fused_decode = fused
    return ctx


# ---- the references and infer's forward passes ---------------------------------------------
@pytest.fixture(scope="module")
def recorded():
    return recording(DATA)


@pytest.mark.parametrize("name", NAMES)
def test_reference_agrees_with_llama_cpp(name, recorded, tiny_dir):
    positions, theirs = recorded_logits(recorded, name, tiny_file(name, tiny_dir))
    ref = reference_logits(tiny_dir, name)[positions]
    assert_agrees(ref, theirs, positions, name, top1_of=ref)


@pytest.mark.parametrize("name", NAMES)
def test_prefill_matches_reference_and_llama_cpp(name, recorded, tiny_dir):
    """One prefill of the whole prompt, every position against the reference, the
    recorded ones against llama.cpp."""
    prompt = tm.prompt(name)
    ref = reference_logits(tiny_dir, name)
    with load(tiny_dir, name) as model:
        rows = model.engine.create_context(n_ctx=512).prefill(prompt, all_logits=True)
    for i in range(len(prompt)):
        check(rows[i], ref[i], f"position {i}")
    positions, theirs = recorded_logits(recorded, name, tiny_file(name, tiny_dir))
    assert_agrees(rows[positions], theirs, positions, name)


def test_moe_decode_equals_prefill(tiny_dir):
    """h-tiny's shape (experts and a shared MLP without a gate) decodes through the
    fused step like the dense files."""
    name = "granitehybrid-moe"
    prompt = tm.prompt(name)[:12]
    with load(tiny_dir, name) as model:
        assert model.engine.spec.moe.shared_ffn_dim == 256 and not model.engine.spec.moe.shared_gated
        rows = model.engine.create_context(n_ctx=64).prefill(prompt, all_logits=True)
        ctx = context(model, True, n_ctx=64)
        for i, tok in enumerate(prompt):
            ctx.prefill([int(tok)])
            close(ctx.logits, rows[i])
            check(ctx.logits, reference_logits(tiny_dir, name)[i], f"position {i}")


def test_decode_one_token_at_a_time_equals_prefill(tiny_dir):
    """Decoding (the fused C step) gives the batched prefill's logits, and prefills in
    pieces that cut the conv's reach (3 earlier inputs) carry it over."""
    prompt = tm.prompt(NAME)[:40]
    ref = reference_logits(tiny_dir)
    with load(tiny_dir) as model:
        ctx = context(model, True, n_ctx=128, sampler=GreedySampler())
        assert model.engine.fused_step().n_mamba2_layers == 3
        rows = model.engine.create_context(n_ctx=128).prefill(prompt, all_logits=True)
        for i, tok in enumerate(prompt):
            ctx.prefill([int(tok)])
            close(ctx.logits, rows[i])
            check(ctx.logits, ref[i], f"position {i}")
        pieces = model.engine.create_context(n_ctx=256)
        for lo, hi in [(0, 2), (2, 4), (4, 60), (60, 61), (61, 200)]:
            pieces.prefill(tm.prompt(NAME)[lo:hi])
            check(pieces.logits, ref[hi - 1], f"position {hi - 1}, batch {lo}..{hi}")


@pytest.mark.parametrize("name", NAMES)
def test_fused_decode_equals_the_python_blocks(name, recorded, tiny_dir):
    """The fused C step computes what the Python blocks compute, in the same float
    operations and kernels: the same logits bit for bit at every position (past the
    16-token checkpoint interval), which agree with llama.cpp's at its recorded
    positions, the same states and checkpoints, and the same greedy continuation,
    which also follows the float64 reference where its top token is clear."""
    prompt = tm.prompt(name)[:34]
    decoded = []
    with load(tiny_dir, name) as model:
        fused, python = (context(model, f, n_ctx=128, sampler=GreedySampler()) for f in (True, False))
        for i, tok in enumerate(prompt):
            fused.prefill([int(tok)])
            python.prefill([int(tok)])
            np.testing.assert_array_equal(fused.logits, python.logits, err_msg=f"position {i}")
            decoded.append(fused.logits.copy())
        positions, theirs = recorded_logits(recorded, name, tiny_file(name, tiny_dir))
        here = positions < len(prompt)
        assert here.sum() == 5
        assert_agrees(np.array(decoded)[positions[here]], theirs[here], positions[here], name)
        np.testing.assert_array_equal(fused.ssm_state, python.ssm_state)
        np.testing.assert_array_equal(fused.ssm_conv, python.ssm_conv)
        assert [c[0] for c in fused._checkpoints] == [c[0] for c in python._checkpoints] == [16, 32]
        ids = []
        for _ in range(6):
            tok = int(np.argmax(fused.logits))
            assert tok == int(np.argmax(python.logits))
            ids.append(tok)
            fused.prefill([tok])
            python.prefill([tok])
            np.testing.assert_array_equal(fused.logits, python.logits)
    ref = GraniteHybridReference(tiny_file(name, tiny_dir)).forward(np.concatenate([prompt, ids]))
    check(fused.logits, ref[-1], "last generated position")
    for k, tok in enumerate(ids):
        row = np.sort(ref[len(prompt) + k - 1])
        if row[-1] - row[-2] > 0.05:
            assert tok == int(np.argmax(ref[len(prompt) + k - 1])), f"generated token {k}"


def test_fused_step_refuses_bad_recurrent_states(tiny_dir):
    """TransformerDecoder.step checks each sequence's Mamba2 ssm_state and ssm_conv
    (Mamba2's shapes, not DeltaNet's) before the C call
    (family_checks.assert_step_refuses_bad_recurrent_states)."""
    with load(tiny_dir) as model:
        eng = model.engine
        a, b = (eng.create_context(n_ctx=64) for _ in range(2))
        a.prefill(tm.prompt(NAME)[:5])
        b.prefill(tm.prompt(NAME)[:5])
        step = a._fused_step()
        assert (step.n_mamba2_layers, step.n_deltanet_layers) == (3, 0)
        assert_step_refuses_bad_recurrent_states(a, b, (3, 8, 64, 32), (3, 3, 640))


def test_a_file_without_attention_decodes_through_the_python_blocks(tmp_path):
    """The fused step keeps its caches for attention layers: a file of Mamba2 layers
    only (no released model is one) decodes through the Python blocks, as its prefill
    and the float64 reference, and fused_step says why."""
    import dataclasses

    t = tm.ALL[NAME]
    t = dataclasses.replace(t, n_layer=2, mamba2=dataclasses.replace(t.mamba2, attention_layers=()))
    path = tm.write_granite_hybrid(t, str(tmp_path / "mamba2-only.gguf"))
    prompt = tm.prompt(NAME)[:6]
    ref = GraniteHybridReference(path).forward(prompt)
    with infer.load(path) as model:
        ctx = model.engine.create_context(n_ctx=32)
        assert not ctx.fused_decode
        with pytest.raises(NotImplementedError, match="needs an attention layer"):
            model.engine.fused_step()
        for i, tok in enumerate(prompt):
            ctx.prefill([int(tok)])
            check(ctx.logits, ref[i], f"position {i}")


def test_fused_step_checks_the_mamba2_pieces(tiny_dir):
    """kernels.TransformerDecoder refuses a Mamba2 layer it cannot run with a message
    naming the piece, before any C call: sizes missing, conv taps, ssm_in and vector
    shapes, a gate for a shared expert that has none."""
    from infer.variants.transformer import decoder_arguments

    class Without:   # the spec without one attribute
        def __init__(self, spec, name):
            self.spec, self.name = spec, name

        def __getattr__(self, key):
            return None if key == self.name else getattr(self.spec, key)

    def build(spec, layers):
        embd, output, norm, _ = decoder_arguments(spec, eng.live_weights())
        return K.TransformerDecoder(spec, embd, output, norm, layers)

    def with_piece(layers, at, value):
        layers = [dict(layer) for layer in layers]
        pieces = list(layers[0]["mamba2"])
        pieces[at] = value
        layers[0]["mamba2"] = tuple(pieces)
        return layers

    with load(tiny_dir) as model:
        eng = model.engine
        spec = eng.spec
        layers = decoder_arguments(spec, eng.live_weights())[3]
        assert build(spec, layers).n_mamba2_layers == 3
        conv, conv_bias, ssm_in, ssm_out, dt = layers[0]["mamba2"][:5]
        with pytest.raises(ValueError, match="config.mamba2: the sizes"):
            build(Without(spec, "mamba2"), layers)
        for at, value, error, message in [
                (0, conv[:, :3], ValueError, r"layers\[0\].mamba2: the conv taps must be float32 of shape \(640, 4\)"),
                (1, conv_bias[:5], ValueError, r"layers\[0\].mamba2 conv_bias"),
                (2, ssm_out, ValueError, r"layers\[0\].mamba2 in: a 256 x 512 matrix where the config needs "
                                         r"1160 x 256"),   # 512 + 640 + 8 rows
                (4, dt[:7], ValueError, r"layers\[0\].mamba2 dt")]:
            with pytest.raises(error, match=message):
                build(spec, with_piece(layers, at, value))
        with pytest.raises(TypeError, match=r"layers\[0\].mamba2: expected \(conv, conv_bias"):
            build(spec, [dict(layers[0], mamba2=(conv,))] + layers[1:])
        # no conv bias is a file without one: accepted
        assert build(spec, with_piece(layers, 1, None)).n_mamba2_layers == 3
    with load(tiny_dir, "granitehybrid-moe") as model:
        eng = model.engine
        spec = eng.spec
        layers = decoder_arguments(spec, eng.live_weights())[3]
        assert "shexp_gate_inp" not in layers[0] and build(spec, layers).n_mamba2_layers == 2
        gated = [dict(layers[0], shexp_gate_inp=np.ones(spec.dim, np.float32))] + layers[1:]
        with pytest.raises(ValueError, match=r"layers\[0\].shexp_gate_inp: a gate of a shared expert without one"):
            build(spec, gated)


def test_batched_prefill_and_decode_equal_one_at_a_time(tiny_dir):
    """infer serve's batched passes: contexts at different positions stacked in one
    pass (prefill), or one fused step for the batch (decode), each advancing its own
    SSM state, give the logits each gets alone."""
    prompt = tm.prompt(NAME)
    ref = reference_logits(tiny_dir)
    with load(tiny_dir) as model:
        eng = model.engine
        lengths = [5, 1, 90]
        together = [eng.create_context(n_ctx=256, sampler=GreedySampler()) for _ in lengths]
        alone = [eng.create_context(n_ctx=256, sampler=GreedySampler()) for _ in lengths]
        together[1].prefill(prompt[:1])
        rows = prefill_batch([together[0], together[2]], [prompt[:5], prompt[:90]], all_logits=True)
        check(rows[1][-1], ref[89], "batched prefill, position 89")
        for a, n in zip(alone, lengths):
            a.prefill(prompt[:n])
        for step in range(4):
            tokens = [int(prompt[n + step]) for n in lengths]
            decode_batch(together, tokens)
            for c, a, t in zip(together, alone, tokens):
                a.prefill([t])
                np.testing.assert_array_equal(c.logits, a.logits)
        for c, a, n in zip(together, alone, lengths):
            check(c.logits, ref[n + 3], f"batched decode, position {n + 3}")
            np.testing.assert_array_equal(c.ssm_state, a.ssm_state)
            np.testing.assert_array_equal(c.ssm_conv, a.ssm_conv)


def test_truncate_to_between_checkpoints_then_redecode(tiny_dir):
    """The state goes back to the latest checkpoint at or before n and the tokens
    after it are evaluated again: re-decoding gives the first time's logits after
    other tokens overwrote those positions."""
    prompt = tm.prompt(NAME)
    other = (prompt[::-1] + 7) % 500
    with load(tiny_dir) as model:
        ctx = model.engine.create_context(n_ctx=256, sampler=GreedySampler())
        ctx.prefill(prompt[:60])                             # checkpoint at 60
        first = _decode(ctx, prompt[60:85])                  # ... at 76
        assert [c[0] for c in ctx._checkpoints] == [60, 76]
        for n in (70, 76, 0):                                # between, on one, before all
            ctx.truncate_to(n)
            _decode(ctx, other[:10])
            ctx.truncate_to(n)
            assert ctx._n_cached <= n and ctx._n_cached in [0] + [c[0] for c in ctx._checkpoints], n
            if n < 60:
                ctx.prefill(prompt[n:60])
            np.testing.assert_array_equal(_decode(ctx, prompt[max(n, 60):85]), first)
        check(ctx.logits, reference_logits(tiny_dir)[84], "position 84")


def test_saved_state_and_copy_continue_exactly(tiny_dir):
    prompt = tm.prompt(NAME)
    with load(tiny_dir) as model:
        ctx = model.engine.create_context(n_ctx=128)
        ctx.prefill(prompt[:30])
        _decode(ctx, prompt[30:33])
        data = ctx.save_state()
        twin = copy.deepcopy(ctx)
        loaded = Context.load_state(model, data)
        _decode(ctx, prompt[33:40])
        for other in (twin, loaded):
            np.testing.assert_array_equal(_decode(other, prompt[33:40]), ctx.logits)
        assert not np.shares_memory(twin.ssm_state, ctx.ssm_state)
        # a KV cache for the attention layer only (2): 2 KV heads of 64
        assert ctx.k_cache.shape == (1, 128 * 2 * 64)
        assert ctx.ssm_state.shape == (3, 8, 64, 32) and ctx.ssm_conv.shape == (3, 3, 512 + 2 * 2 * 32)
        assert sorted(ctx._cache_state(40)) == ["k.2", "ssm_conv", "ssm_state", "v.2"]
        check(ctx.logits, reference_logits(tiny_dir)[39], "position 39")


def test_greedy_generation_and_chat(tiny_dir):
    """generate() follows the reference's argmax where it is clear; a ChatSession
    (the built-in chatml fallback) answers its second turn as a fresh session given
    the same history."""
    from infer.generate import generate

    path = tiny_file(NAME, tiny_dir)
    prompt = [int(t) for t in tm.prompt(NAME)[:20]]
    with infer.load(path) as model:
        gen = generate(model, prompt, max_tokens=8, temperature=0, stop_at_end_of_turn=False)
        "".join(gen)
        ids = list(gen.context.tokens)[len(prompt):]
        with pytest.warns(UserWarning, match="chat template"):
            session = infer.ChatSession(model, temperature=0, max_tokens=8, n_ctx=256)
            session.send("Hello there")
            second = session.send("And then?")
            fresh = infer.ChatSession(model, temperature=0, max_tokens=8, n_ctx=256)
            fresh.history = session.history[:-2]
            assert fresh.send("And then?").text == second.text
    ref = GraniteHybridReference(path).forward(prompt + ids)
    for k, tok in enumerate(ids):
        row = np.sort(ref[len(prompt) + k - 1])
        if row[-1] - row[-2] > 0.05:
            assert tok == int(np.argmax(ref[len(prompt) + k - 1])), f"generated token {k}"


def test_serve_scheduler_gives_each_request_its_own_text(tiny_dir):
    """infer serve's scheduler: requests decoding together (decode_batch: one fused
    step for the batch) get the text each gets alone."""
    prompts = [[int(t) for t in tm.prompt(NAME)[lo:lo + n]] for lo, n in ((0, 7), (50, 30), (200, 3))]
    with load(tiny_dir) as model:
        assert_scheduler_batches_like_alone(model, prompts, n_ctx=128, max_tokens=8)


def test_infer_info_shows_the_mamba2_state(tiny_dir, capsys):
    from infer import cli

    assert cli.main(["info", tiny_file(NAME, tiny_dir)]) in (0, None)
    out = capsys.readouterr().out
    assert "Mamba2          3 layers, 8 heads of 64 in 2 groups, state size 32, conv width 4" in out
    # 3 layers x 4 bytes x (512 x 32 state + 3 x 640 conv inputs) = 214.5 KiB
    assert "recurrent state 214.5 KiB per context" in out
    assert "gated DeltaNet" not in out


def test_quantized_file_runs_close_to_the_reference(tiny_dir, tmp_path):
    """infer quantize to Q8_0 leaves ssm_conv1d, the 2-D ssm_norm and the (n, 1)
    ssm_a / ssm_d as they are (llama-quantize's rules) and the file still follows
    the float64 reference."""
    from infer.gguf import GGUFFile
    from infer.quantize import quantize_file

    out = str(tmp_path / "q8.gguf")
    quantize_file(tiny_file(NAME, tiny_dir), out, "q8_0")
    types = {name: t.dtype.name for name, t in GGUFFile(out).tensors.items()}
    assert types["blk.0.ssm_in.weight"] == "Q8_0"
    assert {types[f"blk.0.{n}"] for n in ("ssm_conv1d.weight", "ssm_norm.weight", "ssm_a", "ssm_d")} == {"F32"}
    with infer.load(out) as model:
        rows = model.engine.create_context(n_ctx=64).prefill(tm.prompt(NAME)[:32], all_logits=True)
    cos = [float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))
           for a, b in zip(rows, reference_logits(tiny_dir)[:32])]
    assert min(cos) > 0.999, min(cos)


# ---- the scan kernel ----------------------------------------------------------------------
def ssm_scan(xbc, dt, a, d_skip, state, n_groups):
    """float64, per head h (group h // (heads / groups)), per token:
    S = S exp(dt a) + (x dt) B^T; y = S C + D x."""
    H, P, N = state.shape
    S = state.astype(np.float64)
    inner = H * P
    y = np.zeros((xbc.shape[0], inner))
    for t in range(xbc.shape[0]):
        x = xbc[t, :inner].reshape(H, P)
        B = xbc[t, inner:inner + n_groups * N].reshape(n_groups, N)
        C = xbc[t, inner + n_groups * N:].reshape(n_groups, N)
        for h in range(H):
            g = h // (H // n_groups)
            S[h] = S[h] * math.exp(dt[t, h] * a[h]) + np.outer(x[h] * dt[t, h], B[g])
            y[t, h * P:(h + 1) * P] = S[h] @ C[g] + d_skip[h] * x[h]
    return y, S


@pytest.mark.parametrize("n,H,P,N,G", [(1, 1, 1, 1, 1), (5, 4, 3, 7, 2), (20, 8, 16, 37, 2), (3, 48, 64, 128, 1)])
def test_mamba2_scan_kernel(n, H, P, N, G, isa):
    """Every kernel set's head loop (scalar; AVX2 for the avx2 and avx512 sets), on
    state sizes with and without a tail of 8, heads on one thread and on the pool."""
    rng = np.random.default_rng(n * 100 + H)
    f = np.float32
    xbc = rng.standard_normal((n, H * P + 2 * G * N)).astype(f)
    dt = rng.uniform(0.01, 1.0, (n, H)).astype(f)
    a, d_skip = -rng.uniform(0.5, 4, H).astype(f), rng.standard_normal(H).astype(f)
    state = rng.standard_normal((H, P, N)).astype(f)
    want_y, want_state = ssm_scan(xbc, dt, a, d_skip, state, G)
    y = np.zeros((n, H * P), f)
    K.mamba2_scan(xbc, dt, a, d_skip, state, y, N, G)
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state, want_state, rtol=1e-4, atol=1e-4)


def test_mamba2_scan_checks_its_arguments():
    f = np.float32
    xbc, dt, a, d = np.zeros((2, 8 + 2 * 2 * 3), f), np.zeros((2, 4), f), np.zeros(4, f), np.zeros(4, f)
    state, y = np.zeros((4, 2, 3), f), np.zeros((2, 8), f)
    K.mamba2_scan(xbc, dt, a, d, state, y, 3, 2)
    cases = [((xbc, dt, a, d, state, y, 3, 3), "n_groups"),
             ((xbc, dt, a, d, state, y, 4, 2), "d_state"),
             ((xbc[:, :-1].copy(), dt, a, d, state, y, 3, 2), "xbc: expected shape"),
             ((xbc, dt[:1], a, d, state, y, 3, 2), "dt: expected shape"),
             ((xbc, dt, a[:3], d, state, y, 3, 2), "a: expected shape"),
             ((xbc, dt, a, d, state, y[:, :7].copy(), 3, 2), "y: expected shape"),
             ((xbc, dt, a, d, state.astype(np.float64), y, 3, 2), "float32"),
             ((xbc, dt, a, d, state, state.reshape(-1)[:16].reshape(2, 8), 3, 2), "shares memory"),
             ((xbc, dt, a, d, np.zeros((4, 3, 2), f).transpose(0, 2, 1), y, 3, 2), "C-contiguous")]
    for args, message in cases:
        with pytest.raises((ValueError, TypeError), match=message):
            K.mamba2_scan(*args)


# ---- files infer must refuse ----------------------------------------------------------------
def hostile(tmp_path, more=None, drop=()):
    return tm.write_granite_hybrid(tm.ALL[NAME], str(tmp_path / "hostile.gguf"), more, drop)


@pytest.mark.parametrize("keys, error, message", [
    ({"ssm.conv_kernel": 1}, GGUFError, r"granitehybrid\.ssm\.conv_kernel"),
    ({"ssm.conv_kernel": 5}, GGUFError, r"blk\.0\.ssm_conv1d\.weight: expected F32 of shape \(640, 5\)"),
    ({"ssm.group_count": 3}, GGUFError, r"8 heads and 3 groups do not divide"),
    ({"ssm.state_size": 4096}, GGUFError, r"ssm\.state_size must be in"),
    ({"ssm.state_size": 16}, GGUFError, r"blk\.0\.ssm_in\.weight: expected shape"),
    ({"ssm.time_step_rank": 16}, GGUFError, r"blk\.0\.ssm_in\.weight: expected shape"),
    ({"attention.head_count_kv": [0, 1, 2, 0]}, UnsupportedModelError, r"different KV head counts"),
    ({"attention.head_count_kv": [0, 0, 2]}, GGUFError, r"head_count_kv has 3 entries for 4 layers"),
    ({"expert_count": 4, "expert_used_count": 2}, GGUFError, r"tensor blk\.0\.ffn_gate_inp\.weight is missing"),
    ({"expert_count": 4, "expert_used_count": 5}, UnsupportedModelError, r"expert_used_count in \[1, "),
    ({"residual_scale": -1.0}, GGUFError, r"residual_scale must be >= 0"),
    ({"ssm.chunk_size": 256}, UnsupportedModelError, r"granitehybrid\.ssm\.chunk_size"),
])
def test_bad_metadata_is_refused(tmp_path, keys, error, message):
    with pytest.raises(error, match=message):
        infer.load(hostile(tmp_path, keys))


@pytest.mark.parametrize("missing", ["blk.0.ssm_a", "blk.1.ssm_d", "blk.3.ssm_conv1d.weight", "blk.0.ssm_dt.bias",
                                     "blk.1.ssm_norm.weight", "blk.3.ssm_in.weight", "blk.2.attn_k.weight"])
def test_missing_tensor_is_named(tmp_path, missing):
    with pytest.raises(GGUFError, match=f"tensor {missing} is missing"):
        infer.load(hostile(tmp_path, drop=(missing,)))


@pytest.mark.parametrize("missing", ["ssm.conv_kernel", "ssm.inner_size", "ssm.group_count"])
def test_missing_key_is_named(tmp_path, missing):
    with pytest.raises(GGUFError, match=f"granitehybrid.{missing} is missing"):
        infer.load(hostile(tmp_path, drop=(missing,)))


def test_moe_file_pieces_are_checked(tmp_path):
    """h-tiny's shape: the shared MLP is there iff expert_shared_feed_forward_length
    says so (llama.cpp), and it has no gate vector."""
    moe = tm.ALL["granitehybrid-moe"]
    with pytest.raises(GGUFError, match=r"tensor blk\.0\.ffn_up_shexp\.weight is missing"):
        infer.load(tm.write_granite_hybrid(moe, str(tmp_path / "a.gguf"), drop=("blk.0.ffn_up_shexp.weight",)))
    with pytest.raises(UnsupportedModelError) as e:
        infer.load(tm.write_granite_hybrid(moe, str(tmp_path / "b.gguf"),
                                           {"blk.0.ffn_gate_inp_shexp.weight": np.zeros(256, np.float32)}))
    assert e.value.names == ["blk.0.ffn_gate_inp_shexp.weight"]
    with pytest.raises(UnsupportedModelError) as e:   # width 0: no shared MLP, so its tensors are strays
        infer.load(tm.write_granite_hybrid(moe, str(tmp_path / "c.gguf"), {"expert_shared_feed_forward_length": 0}))
    assert "blk.0.ffn_gate_shexp.weight" in e.value.names


def test_wrong_shapes_and_stray_tensors_are_refused(tmp_path):
    with pytest.raises(GGUFError, match=r"blk\.0\.ssm_d: expected F32 of 8 values"):
        infer.load(hostile(tmp_path, {"blk.0.ssm_d": np.ones((4, 1), np.float32)}))
    with pytest.raises(UnsupportedModelError) as e:   # SSM tensors on the attention layer
        infer.load(hostile(tmp_path, {"blk.2.ssm_a": np.zeros((8, 1), np.float32)}))
    assert e.value.names == ["blk.2.ssm_a"]
