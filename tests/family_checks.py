"""What the family tests (test_families, test_gemma4, test_lfm2, test_moe) compare
with: cosines, the positions whose top-1 is clear, and llama.cpp's recorded logits
(tests/data/*.npz, scripts/record_family_logits.py)."""
import os

import numpy as np
import pytest
import tiny_models as tm

#: llama.cpp rounds each activation to F16 before an F16 product, and its rope
#: angles are float32 products; on the tiny files that moves the logits to a cosine
#: of 0.99998 from the float64 references at worst (tests/data/README.md), and the
#: float16 storage of its logits adds ~1e-7.
LLAMA_CPP_MIN_COS = 0.99995

_loaded = {}
_files = {}


def tiny_file(name, tiny_dir):
    """tiny_models' file ``name``, written once a session (into the first tiny_dir asked)."""
    if name not in _files:
        _files[name] = tm.write(name, str(tiny_dir / f"{name}.gguf"))
    return _files[name]


def cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def cosines(a, b):
    """Row by row cosines of two (positions, vocab) arrays."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def clear_top1(ref, margin=0.05):
    """Positions whose reference top-1 leads the runner-up by more than margin
    (a near-tie may flip under any rounding; random weights make a few)."""
    s = np.sort(ref, axis=-1)
    return s[..., -1] - s[..., -2] > margin


def check(logits, ref, where, min_cos):
    """One position's logits against the reference's: cosine, and the top-1 where clear."""
    c = cosine(logits, ref)
    assert c >= min_cos, f"cosine {c:.7f} at {where}"
    if clear_top1(ref):
        assert int(np.argmax(logits)) == int(np.argmax(ref)), f"top-1 differs at {where}"
    return c


def recording(path):
    """The arrays of a recorded .npz (loaded once); the test skips if it is missing."""
    if not os.path.exists(path):
        pytest.skip("no recorded llama.cpp logits (tests/data/README.md says how to make them)")
    if path not in _loaded:
        _loaded[path] = dict(np.load(path))
    return _loaded[path]


def recorded_logits(arrays, name, gguf_path):
    """(positions, float64 logits) that llama.cpp gave on ``name``'s tiny file, after
    checking that the file is the one it read."""
    assert str(arrays[f"{name}/sha256"]) == tm.sha256(gguf_path), (
        f"{name}: the tiny file differs from the one llama.cpp was run on; re-record (tests/data/README.md)")
    return arrays[f"{name}/positions"], arrays[f"{name}/logits"].astype(np.float64)


def assert_agrees(ours, theirs, positions, name, min_cos=LLAMA_CPP_MIN_COS, top1_of=None):
    """Rows of logits against llama.cpp's at the recorded positions: every cosine at
    least min_cos, and (with ``top1_of``, the reference rows) the top-1 equal wherever
    the reference's is clear."""
    cos = cosines(ours, theirs)
    worst = int(np.argmin(cos))
    assert cos.min() >= min_cos, (name, float(cos.min()), int(positions[worst]))
    if top1_of is not None:
        clear = clear_top1(top1_of)
        agree = np.argmax(ours, -1)[clear] == np.argmax(theirs, -1)[clear]
        assert agree.all(), (name, positions[clear][~agree])


def assert_truncate_copy_and_state_exact(model, prompt, n_keep, n_more, n_ctx):
    """A context of ``prompt[:n_keep]``, its deep copy and its saved-and-loaded state each
    continue with ``prompt[n_keep:n_keep + n_more]`` to the same logits, bit for bit, and so
    does the context after going elsewhere and back by truncate_to(n_keep).  Returns those
    logits (for a check against a reference)."""
    import copy

    from infer.runtime import Context

    more = [int(t) for t in prompt[n_keep:n_keep + n_more]]
    other = [int(t) for t in (np.asarray(prompt[::-1]) + 7) % 500][:n_more]
    ctx = model.create_context(n_ctx=n_ctx, temperature=0)
    ctx.prefill(prompt[:n_keep])
    data = ctx.save_state()
    twin = copy.deepcopy(ctx)
    loaded = Context.load_state(model, data)
    for t in more:
        ctx.prefill([t])
    first = ctx.logits.copy()
    for c in (twin, loaded):
        for t in more:
            c.prefill([t])
        np.testing.assert_array_equal(c.logits, first)
    for detour in (other, more):
        ctx.truncate_to(n_keep)
        for t in detour:
            ctx.prefill([t])
    np.testing.assert_array_equal(ctx.logits, first)
    return first


def assert_batched_equals_alone(engine, starts, n_steps, n_ctx, fused=True):
    """Engine.forward_batch (what `infer serve` steps) over conversations that start
    from ``starts`` (token lists of different lengths), through the fused C step or
    (``fused`` False) the Python blocks in one pass: each gets the logits, bit for bit,
    and the greedy tokens of decoding it alone (through the fused step)."""
    from scripted import GreedySampler

    alone = []
    for s in starts:
        ctx = engine.create_context(n_ctx=n_ctx, sampler=GreedySampler())
        ctx.prefill(s)
        rows, toks = [], []
        for _ in range(n_steps):
            toks.append(int(np.argmax(ctx.logits)))
            ctx.prefill([toks[-1]])
            rows.append(ctx.logits.copy())
        alone.append((toks, np.array(rows)))
    ctxs = [engine.create_context(n_ctx=n_ctx, sampler=GreedySampler()) for _ in starts]
    for ctx, s in zip(ctxs, starts):
        ctx.prefill(s)
        ctx.fused_decode = fused
    together = [([], []) for _ in starts]
    for _ in range(n_steps):
        toks = np.array([int(np.argmax(c.logits)) for c in ctxs], np.int32)
        engine.forward_batch(ctxs, toks, [len(c.tokens) for c in ctxs])
        for i, c in enumerate(ctxs):
            c.tokens.append(int(toks[i]))
            together[i][0].append(int(toks[i]))
            together[i][1].append(c.logits.copy())
    for (toks_a, rows_a), (toks_b, rows_b) in zip(alone, together):
        assert toks_a == toks_b
        np.testing.assert_array_equal(rows_a, np.array(rows_b))


def assert_scheduler_batches_like_alone(model, prompts, n_ctx, max_tokens):
    """`infer serve`'s scheduler: the prompts' requests, decoded together (batched
    steps through Engine.forward_batch), give each the greedy tokens it gets alone,
    and some steps ran several of them at once."""
    import threading

    from scripted import GreedySampler

    from infer.generate import generate
    from infer.serve.scheduler import Scheduler

    alone = [list(generate(model, p, context=model.engine.create_context(n_ctx=n_ctx, sampler=GreedySampler()),
                           max_tokens=max_tokens)) for p in prompts]
    sched = Scheduler(model, n_slots=len(prompts), n_ctx=n_ctx)
    try:
        out = [None] * len(prompts)
        handles = [sched.open() for _ in prompts]

        def work(i):
            handles[i].sampler = GreedySampler()
            try:
                out[i] = list(generate(model, prompts[i], context=handles[i], max_tokens=max_tokens))
            finally:
                handles[i].close()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert max(sched.stats.batch_sizes) > 1   # some steps ran several requests at once
    finally:
        sched.close()
    assert out == alone


def assert_step_refuses_bad_recurrent_states(a, b, state_shape, conv_shape):
    """TransformerDecoder.step checks each sequence's ssm_state and ssm_conv before the
    C call (contexts a and b of one recurrent model, both past prefill): missing, of
    the wrong shape (the messages name the right ones, state_shape and conv_shape) or
    dtype, not contiguous, or one array for two sequences; a refused call leaves
    every state and cache as it was."""
    step = a._fused_step()
    before = [x.copy() for x in (a.ssm_state, a.ssm_conv, a.k_cache, a.logits)]

    def call(states, convs, ctxs=(a,)):
        step.step([c.k_cache for c in ctxs], [c.v_cache for c in ctxs], [3] * len(ctxs), [5] * len(ctxs),
                  [c.logits for c in ctxs], None, states, convs)

    def shape(dims):
        return r"\(" + ", ".join(str(n) for n in dims) + r"\)"

    with pytest.raises(ValueError, match="ssm_states, ssm_convs: one of each"):
        call(None, None)
    for states, convs, message in [
            ([a.ssm_state[:1]], [a.ssm_conv], r"ssm_states\[0\]: expected float32 of shape " + shape(state_shape)),
            ([a.ssm_state.astype(np.float64)], [a.ssm_conv], r"ssm_states\[0\]: expected float32"),
            ([a.ssm_state], [a.ssm_conv[:, :2]], r"ssm_convs\[0\]: expected float32 of shape " + shape(conv_shape)),
            ([a.ssm_state], [np.asfortranarray(a.ssm_conv)], r"ssm_convs\[0\]: must be C-contiguous")]:
        with pytest.raises(ValueError, match=message):
            call(states, convs)
    with pytest.raises(ValueError, match="ssm_states"):   # one state for two sequences
        call([a.ssm_state, a.ssm_state], [a.ssm_conv, b.ssm_conv], (a, b))
    for x, y in zip((a.ssm_state, a.ssm_conv, a.k_cache, a.logits), before):
        np.testing.assert_array_equal(x, y)


def assert_cli_generates_the_reference_greedy(path, tokenizer, forward, text, n=6):
    """`infer generate -m path text --temp 0 -n n` prints the n tokens the float64 reference
    (``forward(ids)`` -> logits per position) picks greedily, each pick clear of the
    runner-up; the stream never ends inside a UTF-8 character (an unfinished last one is
    held back)."""
    import subprocess
    import sys

    from under_test import IMPORT_ROOT

    ids = tokenizer.encode(text)
    for _ in range(n):
        logits = forward(ids)[-1]
        assert clear_top1(logits), "a near-tie: choose another prompt"
        ids.append(int(np.argmax(logits)))
    want = tokenizer.decode(ids[-n:])
    out = subprocess.run([sys.executable, "-m", "infer", "generate", "-m", path, text, "--temp", "0", "-n", str(n)],
                         cwd=IMPORT_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = out.stdout.rstrip("\n")
    assert got == want or (want.endswith("\ufffd") and got == want[:-1]), (got, want)


def decoded_one_at_a_time(ctx, prompt):
    """Each position's logits from decoding ``prompt`` one token at a time on ``ctx``."""
    rows = []
    for tok in prompt:
        ctx.prefill([int(tok)])
        rows.append(ctx.logits.copy())
    return np.array(rows)


def assert_runs_agree_with_both_references(runs, ref, positions, theirs, name, min_cos=0.99999):
    """Each run (how -> logits at every position of the prompt) against the float64
    reference ``ref`` at every position (cosine >= min_cos, the top-1 where clear) and
    against llama.cpp's recorded rows ``theirs`` at ``positions``."""
    clear = clear_top1(ref)
    for how, ours in runs.items():
        cos = cosines(ours, ref)
        assert cos.min() >= min_cos, (how, float(cos.min()), int(np.argmin(cos)))
        assert (np.argmax(ours, -1)[clear] == np.argmax(ref, -1)[clear]).all(), how
        assert_agrees(ours[positions], theirs, positions, f"{name} {how}")


def recurrent_state_continues_exactly(model, prompt, n_ctx=64):
    """A context of ``prompt[:21]`` (a prefill of 20, then one token: a recurrent layer's
    checkpoint and a step after it), its deep copy and its saved-and-loaded state each
    continue with ``prompt[21:25]`` to the same logits, bit for bit.  Returns the context
    (its caches, for shape checks) after those tokens."""
    import copy

    from infer.runtime import Context

    prompt = [int(t) for t in prompt]
    ctx = model.engine.create_context(n_ctx=n_ctx)
    ctx.prefill(prompt[:20])
    ctx.prefill(prompt[20:21])
    data = ctx.save_state()
    twin = copy.deepcopy(ctx)
    loaded = Context.load_state(model, data)
    for c in (ctx, twin, loaded):
        for tok in prompt[21:25]:
            c.prefill([tok])
    np.testing.assert_array_equal(twin.logits, ctx.logits)
    np.testing.assert_array_equal(loaded.logits, ctx.logits)
    return ctx
