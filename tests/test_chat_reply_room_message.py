"""A conversation refused for lack of room for the reply says so.

A ChatSession keeps room for the reply (a quarter of the context, or max_tokens if
smaller, plus the end of turn).  A prompt that itself fits but leaves less than
that was refused with "the conversation (126 tokens) does not fit in the context of
128 tokens", which reads as wrong (infer serve answered a chat request so).  The
message now names the room.  Token counts are hand-rendered ChatML on the scripted
tokenizer (bytes, with <|im_start|> / <|im_end|> single tokens)."""
import pytest

from infer import ContextOverflowError
from infer.chat import ChatSession
from scripted import ScriptedTokenizer, scripted_model

N_CTX = 64


def chatml_len(text):
    rendered = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    return len(ScriptedTokenizer().encode(rendered, add_special=False, parse_special=True))


def test_prompt_that_fits_but_leaves_no_room_names_the_room():
    text = "y" * 44
    n = chatml_len(text)
    assert n <= N_CTX  # the prompt alone fits
    # the end of turn ("<|im_end|>\n") and one more token, and a quarter of the context
    end_of_turn = len(ScriptedTokenizer().encode("<|im_end|>\n", add_special=False, parse_special=True))
    room = end_of_turn + 1 + N_CTX // 4
    assert n + room > N_CTX
    s = ChatSession(scripted_model(["ok"]), n_ctx=N_CTX)
    with pytest.raises(ContextOverflowError) as err:
        s.send(text)
    assert str(err.value).startswith(
        f"the conversation ({n} tokens) does not fit in the context of {N_CTX} tokens "
        f"with {room} tokens of room for the reply;")


def test_prompt_longer_than_the_context_says_only_that():
    text = "y" * 100
    s = ChatSession(scripted_model(["ok"]), n_ctx=N_CTX)
    with pytest.raises(ContextOverflowError) as err:
        s.send(text)
    assert str(err.value).startswith(
        f"the conversation ({chatml_len(text)} tokens) does not fit in the context of {N_CTX} tokens;")
