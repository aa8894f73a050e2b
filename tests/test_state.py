"""Saved contexts (infer.state) and copy.deepcopy(ctx).

The reference is the original context itself: after a save and a load (or a copy)
both must produce the same tokens and bit-identical logits, step after step."""
import copy
import os
import struct

import numpy as np
import pytest

import infer
from infer.sampler import Sampler
from infer.state import MAGIC, StateError
from _tok_models import load_installed

SAMPLING = dict(temperature=0.9, top_k=50, top_p=0.95, min_p=0.02, repeat_penalty=1.15,
                frequency_penalty=0.1, logit_bias={13: -1.5}, seed=1234)


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    with load_installed(request.param) as m:
        yield m


@pytest.fixture(scope="module")
def smollm2():
    with load_installed("smollm2") as m:
        yield m


def started(model, n_ctx=96, kv_type="f16", steps=4):
    ctx = model.engine.create_context(n_ctx=n_ctx, sampler=Sampler(**SAMPLING), kv_type=kv_type)
    ctx.prefill(model.tokenizer.encode("Once upon a time, in a small village,"))
    for _ in range(steps):
        ctx.next()
    return ctx


def continue_both(a, b, n=8):
    for _ in range(n):
        ta, tb = a.next(), b.next()
        assert ta == tb
        np.testing.assert_array_equal(a.logits, b.logits)
    assert a.tokens == b.tokens


@pytest.mark.parametrize("kv_type", ["f16", "f32"])
def test_restored_context_continues_bit_identically(model, kv_type):
    ctx = started(model, kv_type=kv_type)
    restored = infer.Context.load_state(model, ctx.save_state())
    assert restored.tokens == ctx.tokens and restored.n_ctx == ctx.n_ctx
    assert restored.kv_type == kv_type
    continue_both(ctx, restored)


def test_stale_logits_are_restored_stale(smollm2):
    ctx = started(smollm2)
    ctx.truncate_to(ctx.n_past - 2)  # logits no longer belong to the last token
    restored = infer.Context.load_state(smollm2, ctx.save_state())
    continue_both(ctx, restored, 4)


def test_save_and_load_context_file(smollm2, tmp_path):
    ctx = started(smollm2)
    path = tmp_path / "chat.ctx"
    ctx.save(path)
    assert os.listdir(tmp_path) == ["chat.ctx"]  # no temporary file left behind
    continue_both(ctx, smollm2.load_context(path))


def test_writes_are_atomic(smollm2, tmp_path, monkeypatch):
    path = tmp_path / "chat.ctx"
    path.write_bytes(b"previous contents")

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        started(smollm2, steps=1).save(path)
    assert path.read_bytes() == b"previous contents"
    assert os.listdir(tmp_path) == ["chat.ctx"]


def test_another_model_is_refused(smollm2):
    with load_installed("gemma3") as gemma:
        data = started(gemma, steps=1).save_state()
    with pytest.raises(StateError, match="another model"):
        infer.Context.load_state(smollm2, data)


def test_truncated_altered_or_foreign_data_is_a_typed_error(smollm2):
    data = started(smollm2, steps=1).save_state()
    for cut in sorted({0, 3, 8, 12, 20, 100, len(data) // 2, len(data) - 33, len(data) - 1}):
        with pytest.raises(StateError):
            infer.Context.load_state(smollm2, data[:cut])
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x40
    with pytest.raises(StateError, match="checksum"):
        infer.Context.load_state(smollm2, bytes(flipped))
    wrong_version = MAGIC + struct.pack("<I", 99) + data[len(MAGIC) + 4:]
    with pytest.raises(StateError, match="version 99"):
        infer.Context.load_state(smollm2, wrong_version)
    with pytest.raises(StateError):
        infer.Context.load_state(smollm2, b"GGUF" + bytes(100))
    with pytest.raises(TypeError):
        infer.Context.load_state(smollm2, "not bytes")


def test_a_constrained_generation_in_progress_is_not_saved(smollm2):
    pytest.importorskip("llguidance")
    from infer.structured import Constraint, Grammar

    ctx = started(smollm2, steps=1)
    ctx.sampler.grammar = Constraint(Grammar.regex("[a-z]+"), smollm2.tokenizer, smollm2.engine.vocab_size)
    with pytest.raises(ValueError, match="grammar"):
        ctx.save_state()


def test_deepcopy(model):
    ctx = started(model)
    twin = copy.deepcopy(ctx)
    assert twin.engine is ctx.engine and twin.k_cache is not ctx.k_cache
    continue_both(ctx, twin)
    before = list(ctx.tokens)
    twin.next()  # the copy moves on alone
    assert ctx.tokens == before


def test_deepcopy_with_a_grammar(smollm2):
    pytest.importorskip("llguidance")
    from infer.structured import Constraint, Grammar

    ctx = smollm2.create_context(n_ctx=64, temperature=0.8, seed=3)
    ctx.prefill(smollm2.tokenizer.encode("Digits:"))
    ctx.sampler.grammar = Constraint(Grammar.regex("[0-9]{6}"), smollm2.tokenizer, smollm2.engine.vocab_size)
    ctx.next()
    twin = copy.deepcopy(ctx)
    a = [ctx.next() for _ in range(3)]
    b = [twin.next() for _ in range(3)]
    assert a == b


TRUNCATED_SCRIPT = """
import os, shutil, sys
import infer
from infer.gguf import FileChangedError
from infer.runtime import Context
src, a, b = sys.argv[1:4]
shutil.copyfile(src, a)
shutil.copyfile(src, b)
ma, mb = infer.load(a), infer.load(b)
ctx = ma.create_context(n_ctx=32)
ctx.prefill([1, 2, 3])
data = ctx.save_state()            # ma's fingerprint is now cached; mb's is not
for path, call in ((a, lambda: ctx.save_state()), (b, lambda: Context.load_state(mb, data))):
    fresh = infer.load(path) if path == a else None
    if fresh is not None:           # a fresh model of a: its fingerprint not yet computed
        ctx = fresh.create_context(n_ctx=32)
        ctx.prefill([1, 2, 3])
    os.truncate(path, 4096)
    try:
        call()
    except FileChangedError as e:
        print("raised:", e)
print("done")
"""


def test_state_of_a_truncated_model_file_is_refused(tmp_path):
    """save_state and load_state fingerprint the weights (views of the map) without
    checking the file first: after the file was truncated under the loaded model,
    both killed the process with SIGBUS instead of FileChangedError."""
    import subprocess
    import sys

    import tiny_models as tm
    from under_test import IMPORT_ROOT

    src = tm.write("llama", str(tmp_path / "src.gguf"))
    r = subprocess.run([sys.executable, "-c", TRUNCATED_SCRIPT, src, str(tmp_path / "a.gguf"),
                        str(tmp_path / "b.gguf")], capture_output=True, text=True, timeout=300, cwd=IMPORT_ROOT)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.count("raised:") == 2 and "truncated or overwritten" in r.stdout and "done" in r.stdout, r.stdout
