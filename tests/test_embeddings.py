"""model.embed and `infer embed`: pooled final hidden states.

References: the variant's hidden states are checked against the float64 numpy
forward pass (its output-norm input, recomputed here from the reference's final
layer); pooling and normalisation are recomputed with numpy."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import infer
from _tok_models import installed_path, load_installed

TEXTS = ["The cat sits on the mat.", "A cat is sitting on the mat.", "Stock markets fell sharply today."]


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    with load_installed(request.param) as m:
        yield m


def test_identical_across_batch_sizes(model):
    alone = model.embed(TEXTS[2])
    together = model.embed(TEXTS + ["one more text to make the batch larger"])
    assert alone.shape == (model.engine.n_embd,)
    np.testing.assert_array_equal(together[2], alone)
    np.testing.assert_array_equal(model.embed(TEXTS[:1])[0], together[0])


def test_paraphrase_ranks_above_unrelated(model):
    for pooling in ("mean", "last"):
        e = model.embed(TEXTS, pooling=pooling)
        assert e[0] @ e[1] > e[0] @ e[2], pooling


def test_pooling_and_normalize_from_the_hidden_states(model):
    ids = model.tokenizer.encode(TEXTS[0])
    hidden = model.create_context(n_ctx=len(ids)).prefill(ids, hidden_states=True).astype(np.float64)
    for pooling, vec in (("mean", hidden.mean(0)), ("last", hidden[-1]), ("cls", hidden[0])):
        raw = model.embed(TEXTS[0], pooling=pooling, normalize=False)
        np.testing.assert_allclose(raw, vec, rtol=1e-5, atol=1e-5)
        unit = model.embed(TEXTS[0], pooling=pooling)
        np.testing.assert_allclose(unit, vec / np.linalg.norm(vec), rtol=1e-5, atol=1e-6)


def test_hidden_states_match_the_reference():
    """The final hidden state (after the output norm) times the head is the logits:
    check it against the numpy reference's logits through the file's head matrix."""
    path = installed_path("smollm2")
    from reference.numpy_llama import shared

    ref = shared(path)
    with infer.load(path) as m:
        ids = m.tokenizer.encode(TEXTS[1])
        hidden = m.create_context(n_ctx=32).prefill(ids, hidden_states=True).astype(np.float64)
    logits = ref.forward(ids)
    via_hidden = hidden @ ref.head.T
    for i in range(len(ids)):
        c = via_hidden[i] @ logits[i] / np.linalg.norm(via_hidden[i]) / np.linalg.norm(logits[i])
        assert c > 0.99, i


def test_misuse(model):
    with pytest.raises(ValueError):
        model.embed(TEXTS, pooling="max")
    with pytest.raises(TypeError):
        model.embed([1, 2])
    assert model.embed([]).shape == (0, model.engine.n_embd)


def test_cli_embed():
    installed_path("smollm2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-m", "infer", "embed", TEXTS[0], TEXTS[2]],
                         capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == 2 and abs(np.linalg.norm(rows[0]) - 1) < 1e-5
    with infer.load() as m:
        np.testing.assert_allclose(rows[1], m.embed(TEXTS[2]), atol=1e-6)
