"""ChatSession at its limits (issues 15.15, 15.17, 16.1, 16.10): trimming by default,
the n_keep context shift, the default reply limit, the base-model warning, unknown
roles, a double BOS, and a reply cut in the middle of a character."""
import warnings

import pytest

from infer.chat import DEFAULT_MAX_TOKENS, BaseModelWarning, ChatSession
from infer.runtime import ContextOverflowError
from scripted import ScriptedTokenizer, scripted_model


def chatml(messages):
    """ChatML by hand: what the scripted template renders."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def ids(tok, text):
    return tok.encode(text, add_special=False, parse_special=True)


def test_trimming_is_the_default():
    script = ["First answer here.", "Second answer here.", "Third answer here."]
    s = ChatSession(scripted_model(script, max_seq_len=64), system="S", max_tokens=20)
    s.send("one")
    s.send("two")  # would not fit with "one" in it (see test_chat's trim test)
    assert [m["content"] for m in s.history] == ["S", "two", "First answer here."]
    assert s.context.tokens == ids(s.tokenizer, chatml(s.history))


def test_n_keep_shifts_the_context_keeping_the_system_prompt():
    tok = ScriptedTokenizer()
    script = ["Hello world"] * 12
    s = ChatSession(scripted_model(script, tokenizer=tok, max_seq_len=64), system="S", max_tokens=8, n_keep=-1)
    kept = ids(tok, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n")
    for i in range(6):
        s.send(f"q{i}")
    # nothing was dropped from the conversation, only from the context
    assert [m["content"] for m in s.history if m["role"] == "user"] == [f"q{i}" for i in range(6)]
    full = ids(tok, chatml(s.history))
    assert len(full) > 64
    held = s.context.tokens
    assert held[:len(kept)] == kept and s.context.n_past <= 64
    # the cache is the kept tokens and the newest tail of the rendered conversation
    tail = held[len(kept):]
    assert full[len(full) - len(tail):] == tail
    # the next turn reuses the kept tokens and the tail it shares with the cache
    reply = s.send("q6")
    assert reply.cached_tokens > len(kept)


def test_n_keep_count_and_validation():
    tok = ScriptedTokenizer()
    s = ChatSession(scripted_model(["Hello world"] * 8, tokenizer=tok, max_seq_len=48), system="S", max_tokens=6,
                    n_keep=5)
    for i in range(5):
        s.send(f"q{i}")
    assert s.context.tokens[:5] == ids(tok, chatml([{"role": "system", "content": "S"}]))[:5]
    for bad in (-2, 1.5, True):
        with pytest.raises(ValueError, match="n_keep"):
            ChatSession(scripted_model([]), n_keep=bad)
    s = ChatSession(scripted_model(["ok"], max_seq_len=32), system="S" * 40, n_keep=-1)
    with pytest.raises(ContextOverflowError, match="n_keep"):
        s.send("hi")


def test_n_keep_shift_in_the_middle_of_a_long_reply():
    tok = ScriptedTokenizer()
    long_reply = "xy" * 60  # 120 byte tokens: longer than the whole context
    s = ChatSession(scripted_model([long_reply], tokenizer=tok, max_seq_len=64), system="S", max_tokens=None,
                    n_keep=-1)
    prompt = ids(tok, chatml([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
                 + "<|im_start|>assistant\n")
    reply = s.send("hi")
    # Without a shift the reply ends when the context is full (64 - prompt - 3 kept for the
    # end of turn); with one it goes on.  (The scripted model then ends it: the shift
    # dropped its turn's opener from the cache.)
    assert reply.completion_tokens > 64 - len(prompt) - 3
    assert s.context.tokens[:len(ids(tok, "<|im_start|>system\nS<|im_end|>\n"))] == \
        ids(tok, "<|im_start|>system\nS<|im_end|>\n")
    assert s.context.n_past <= 64
    unshifted = ChatSession(scripted_model([long_reply], tokenizer=tok, max_seq_len=64), system="S", max_tokens=None)
    cut = unshifted.send("hi")
    assert cut.finish_reason == "length" and cut.completion_tokens == 64 - len(prompt) - 3
    assert s.send("again").finish_reason in ("stop", "length")  # the session goes on


def test_default_reply_limit_stops_a_model_that_never_ends():
    endless = "xy" * 700  # 1400 tokens, no end of turn before them
    s = ChatSession(scripted_model([endless], max_seq_len=4096))
    assert s.max_tokens == DEFAULT_MAX_TOKENS == 1024
    reply = s.send("hi")
    assert (reply.completion_tokens, reply.finish_reason) == (1024, "length")
    assert reply.text == endless[:1024]
    unlimited = ChatSession(scripted_model([endless], max_seq_len=4096), max_tokens=None)
    assert unlimited.send("hi").text == endless


def test_model_without_template_warns_once_naming_the_template_used():
    model = scripted_model(["ok"], template=None)  # a ChatML vocabulary, no template of its own
    with pytest.warns(BaseModelWarning, match=r"base model.*built-in 'chatml' template"):
        ChatSession(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ChatSession(model)
        ChatSession(scripted_model(["ok"]))  # a model with its own template: no warning


def test_unknown_role_in_history_is_a_value_error():
    s = ChatSession(scripted_model(["ok"]))
    with pytest.raises(ValueError, match=r"history\[1\]: role 'narrator' is not one of"):
        s.history = [{"role": "user", "content": "hi"}, {"role": "narrator", "content": "Meanwhile"}]
    assert s.history == []


def test_reply_cut_in_the_middle_of_a_character_stores_no_replacement_character():
    # "🙂" is four byte tokens here: max_tokens=6 ends inside the second one
    s = ChatSession(scripted_model(["🙂🙂🙂"]), max_tokens=6)
    pieces = [p for p in s.stream("hi") if isinstance(p, str)]
    reply = s.last_reply
    assert reply.finish_reason == "length" and reply.text == "🙂"
    assert "".join(pieces) == "🙂"
    assert s.history[-1]["content"] == "🙂" and "\ufffd" not in str(s.history)
    assert s.context.tokens == ids(s.tokenizer, chatml(s.history))


def test_double_bos_warns_with_a_real_tokenizer():
    import _tok_models
    from infer.tokenizer import Tokenizer

    tok = Tokenizer.from_metadata(_tok_models.metadata(_tok_models.installed_path("gemma3")))
    assert tok.vocab.add_bos
    with pytest.warns(UserWarning, match="two BOS tokens"):
        out = tok.encode("<bos>Hello", add_special=True, parse_special=True)
    assert out[:2] == [tok.vocab.bos_token_id] * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tok.encode("<bos>Hello", add_special=False, parse_special=True)[0] == tok.vocab.bos_token_id
        assert tok.encode("Hello", add_special=True, parse_special=True)[0] == tok.vocab.bos_token_id
