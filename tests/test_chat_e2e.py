"""ChatSession end to end on SmolLM2-135M-Instruct (greedy): KV reuse turn by turn."""
import jinja2
import pytest

from infer.chat import ChatSession
from _tok_models import load_installed


@pytest.fixture(scope="module")
def model():
    with load_installed("smollm2") as m:
        yield m


def reference_render(model, messages, add_generation_prompt):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(model.metadata["tokenizer.chat_template"]).render(
        messages=messages, add_generation_prompt=add_generation_prompt)


def encode(model, text):
    return model.tokenizer.encode(text, add_special=False, parse_special=True)


def test_three_turns_each_prefill_only_new_tokens(model):
    # Short replies keep this fast; whether a turn ends on <|im_end|> or on max_tokens,
    # the cache must hold the rendered history after it.
    s = ChatSession(model, temperature=0, max_tokens=8, n_ctx=512)
    ctx = s.context
    prefilled = []
    real_prefill = ctx.prefill

    def counting_prefill(tokens):
        tokens = list(tokens)
        prefilled.append(len(tokens))
        real_prefill(tokens)

    ctx.prefill = counting_prefill
    im_end = model.tokenizer.vocab.token_id("<|im_end|>")
    turns = []
    for question in ["What is the capital of France?", "And of Italy?", "Thank you!"]:
        before = list(ctx.tokens)
        prefilled.clear()
        messages = s.history + [{"role": "user", "content": question}]
        prompt_text = reference_render(model, messages, True)
        assert s.chat.render(messages) == prompt_text
        prompt = encode(model, prompt_text)
        reply = s.send(question)
        assert reply.text.strip() and reply.finish_reason in ("stop", "length")
        assert prompt[:len(before)] == before
        assert reply.cached_tokens == len(before) and reply.prompt_tokens == len(prompt)
        # one prefill of the new user turn and the assistant opener, then what closes
        # the turn: the newline after <|im_end|>, or <|im_end|> and the newline
        assert prefilled[0] == len(prompt) - len(before)
        history = encode(model, reference_render(model, s.history, False))
        assert ctx.tokens == history
        assert sum(prefilled) == len(history) - len(before) - reply.completion_tokens
        assert sum(prefilled[1:]) == (1 if reply.finish_reason == "stop" else 2)
        assert ctx.tokens[-2] == im_end
        turns.append((messages, prompt, ctx.tokens[len(prompt):len(prompt) + reply.completion_tokens]))

    # The reply of turn 2, computed over a reused cache, is the one a fresh context gives.
    messages, prompt, generated = turns[1]
    fresh = model.create_context(n_ctx=512, temperature=0)
    fresh.prefill(prompt)
    assert [fresh.next() for _ in generated] == generated
