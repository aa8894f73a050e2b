"""Log-probabilities (Sampler.logprobs, Context.next_with_logprobs, generate(logprobs=k))
against a float64 numpy log-softmax of the logits, penalties applied here by hand."""
import copy
import math

import numpy as np
import pytest

import infer
from infer.sampler import Sampler
from _tok_models import load_installed


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


@pytest.fixture(scope="module")
def model():
    with load_installed("smollm2") as m:
        yield m


def test_sampler_logprobs_are_the_log_softmax_after_bias_and_penalties():
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(1000) * 3).astype(np.float32)
    history = [5, 5, 9, 17, 5]
    s = Sampler(repeat_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.5,
                logit_bias={3: 2.0, 11: -math.inf}, temperature=0.7, top_k=5, seed=1)
    for t in history:
        s.accept(t)
    # by hand: bias, then penalty per seen token (count c)
    x = logits.astype(np.float64)
    x[3] += 2.0
    x[11] = -np.inf
    for tok, c in {5: 3, 9: 1, 17: 1}.items():
        v = x[tok]
        v = v * 1.3 if v <= 0 else v / 1.3
        x[tok] = v - (c * 0.2 + 0.5)
    ref = log_softmax(x)
    token = s.sample(logits)
    rec = s.logprobs(logits, token, top=4)
    assert rec.token == token
    assert rec.logprob == pytest.approx(ref[token], abs=1e-5)
    order = np.argsort(-ref, kind="stable")[:4]
    assert [t for t, _ in rec.top] == order.tolist()
    np.testing.assert_allclose([v for _, v in rec.top], ref[order], atol=1e-5)
    assert 11 not in [t for t, _ in rec.top] and s.logprobs(logits, 11).logprob == -math.inf


def test_next_with_logprobs_matches_the_logits_of_each_step(model):
    tok = model.tokenizer
    ctx = model.create_context(n_ctx=64, temperature=0.0)
    ctx.prefill(tok.encode("The capital of France is"))
    for _ in range(6):
        logits = ctx.logits.copy()
        token, rec = ctx.next_with_logprobs(top=3)
        ref = log_softmax(logits)
        assert token == int(np.argmax(logits))
        assert rec.logprob == pytest.approx(ref[token], abs=1e-5)
        assert rec.top[0][0] == token
        np.testing.assert_allclose([v for _, v in rec.top], np.sort(ref)[::-1][:3], atol=1e-5)


def test_generate_logprobs_in_openai_shape(model):
    prompt = "Once upon a time"
    plain = infer.generate(model, prompt, max_tokens=8, temperature=0.0)
    text = "".join(plain)
    gen = infer.generate(model, prompt, max_tokens=8, temperature=0.0, logprobs=2)
    assert "".join(gen) == text and gen.tokens == plain.tokens  # logprobs change nothing
    assert len(gen.logprobs) == len(gen.tokens)
    for token, entry in zip(gen.tokens, gen.logprobs):
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert bytes(entry["bytes"]) == model.tokenizer.token_to_piece(token)
        assert entry["logprob"] <= 0.0
        assert len(entry["top_logprobs"]) == 2
        assert entry["top_logprobs"][0]["logprob"] == pytest.approx(entry["logprob"])  # greedy: the best
        assert entry["top_logprobs"][0]["logprob"] >= entry["top_logprobs"][1]["logprob"]
        assert set(entry["top_logprobs"][0]) == {"token", "logprob", "bytes"}
    assert b"".join(bytes(e["bytes"]) for e in gen.logprobs).decode() == text


def test_logprobs_argument_is_checked(model):
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError):
            infer.generate(model, "x", logprobs=bad)


def test_a_stream_reports_each_tokens_logprobs_with_the_piece_that_shows_it(model):
    """ChatSession.stream: each TextPiece carries the entries of the tokens since the
    piece before; a stop string's tokens (never shown) come with the Reply alone, so the
    streamed chat chunks hold them in the finishing chunk."""
    from infer.chat import ChatSession, Reply, TextPiece

    question = "Write one sentence about the sea."
    whole = ChatSession(model, temperature=0).send(question, max_tokens=16, logprobs=1)
    assert len(whole.logprobs) > 8
    # a stop string made of tokens 6 and 7 of the greedy reply: both generated, never shown
    stop = whole.logprobs[6]["token"] + whole.logprobs[7]["token"]
    assert stop.strip() and stop not in "".join(e["token"] for e in whole.logprobs[:7])
    pieces, reply = [], None
    for item in ChatSession(model, temperature=0).stream(question, max_tokens=16, logprobs=1, stop=stop):
        if isinstance(item, Reply):
            reply = item
        else:
            assert isinstance(item, TextPiece)
            pieces.append(item)
    shown = [e for p in pieces for e in p.logprobs]
    assert reply.text == "".join(pieces)
    assert reply.logprobs == whole.logprobs[:8]
    assert shown == reply.logprobs[:len(shown)] and len(shown) <= 6
    assert sum(1 for p in pieces if p.logprobs) >= 4  # spread over the pieces

    chunks = list(model.create_chat_completion(
        [{"role": "user", "content": question}], max_tokens=16, temperature=0, stop=stop, logprobs=True,
        top_logprobs=1, stream=True, context=model.create_context()))
    per_chunk = [c["choices"][0]["logprobs"] for c in chunks if c["choices"]]
    assert [e for lp in per_chunk if lp for e in lp["content"]] == reply.logprobs
    assert per_chunk[-1]["content"][-2:] == reply.logprobs[6:8]  # the stop string's, at the end


def test_completion_echo_logprobs_cover_the_prompt(model):
    """``echo=True`` with ``logprobs=k`` (what lm-evaluation-harness sends to score a
    text): OpenAI's logprobs cover the prompt tokens too, the first with none, and
    ``text_offset`` indexes the echoed text.  The prompt's log-probabilities are checked
    against the float64 numpy forward pass (tests/reference/numpy_llama.py) with ggml's
    activation rounding: within 0.25 (the Q4_1 model's logits are within a cosine of
    ~0.998 of it, which moves these by up to 0.17) and the same most likely token."""
    from openai.types import Completion
    from reference.numpy_llama import shared as shared_numpy_llama

    from infer.gguf import default_model_path

    prompt = "The capital of France is"
    ids = model.tokenizer.encode(prompt, add_special=True)
    ref = shared_numpy_llama(default_model_path()).forward(ids, act_quant=True)
    for stream in (False, True):
        out = model.create_completion(prompt, echo=True, logprobs=2, max_tokens=3, temperature=0, stream=stream)
        if stream:
            chunks = list(out)
            parts = [c["choices"][0]["logprobs"] for c in chunks if c["choices"] and c["choices"][0]["logprobs"]]
            text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
            lp = {k: sum((p[k] for p in parts), []) for k in parts[0]}
        else:
            # OpenAI sends null for the first token, which the client's lax parsing keeps
            # but its strict types reject: validate the rest
            rest = copy.deepcopy(out)
            for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
                del rest["choices"][0]["logprobs"][key][0]
            Completion.model_validate(rest)
            text, lp = out["choices"][0]["text"], out["choices"][0]["logprobs"]
        assert text.startswith(prompt)
        n = len(ids)
        assert len(lp["tokens"]) == n + 3 and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        for token, offset in zip(lp["tokens"], lp["text_offset"]):
            assert text[offset:offset + len(token)] == token
        for i in range(1, n):
            expected = log_softmax(ref[i - 1])
            assert lp["token_logprobs"][i] == pytest.approx(expected[ids[i]], abs=0.25), i
            best = max(lp["top_logprobs"][i], key=lp["top_logprobs"][i].get)
            assert model.tokenizer.encode(best, add_special=False) == [int(np.argmax(expected))]
