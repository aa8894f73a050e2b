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


def test_token_id_lists_are_pooled_as_given(model):
    # Reference: the context's own hidden states over those ids, pooled with numpy.
    ids = model.tokenizer.encode(TEXTS[2], add_special=False)[1:]  # no BOS, and not a text's tokens
    hidden = model.create_context(n_ctx=len(ids)).prefill(ids, hidden_states=True).astype(np.float64)
    got = model.embed([ids, np.array(ids, dtype=np.int32), TEXTS[0]])
    want = hidden.mean(0) / np.linalg.norm(hidden.mean(0))
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[1], got[0])
    np.testing.assert_array_equal(got[2], model.embed(TEXTS[0]))


def test_special_token_texts_are_those_tokens():
    # as llama-embedding and llama-server tokenize (parse_special): "<|im_start|>" is one token
    with load_installed("smollm2") as m:
        vocab = m.tokenizer.vocab
        start = vocab.token_to_id["<|im_start|>"] if hasattr(vocab, "token_to_id") else None
        if start is None:
            start = [i for i in range(m.engine.vocab_size)
                     if m.tokenizer.decode([i], skip_special=False) == "<|im_start|>"][0]
        body = m.tokenizer.encode("user\nhi", add_special=False)
        bos = m.tokenizer.encode("", add_special=True)
        np.testing.assert_array_equal(m.embed("<|im_start|>user\nhi"), m.embed([bos + [start] + body])[0])


def test_misuse(model):
    with pytest.raises(ValueError):
        model.embed(TEXTS, pooling="max")
    with pytest.raises(TypeError):
        model.embed([1, 2])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.embed([[1, model.engine.vocab_size]])
    with pytest.raises(ValueError, match="empty"):
        model.embed([[]])
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
