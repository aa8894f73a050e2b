"""A tool call cut off by max_tokens (or malformed) is not dropped from the reply.

Before, `create_chat_completion` returned ``content: null`` and no ``tool_calls``
when the call did not parse: with ``tool_choice="required"`` and a small
``max_tokens`` a client got nothing of the tokens it paid for, streamed or not.
The unparsed call's text now comes back as content (as llama-server returns output
it cannot parse), with ``finish_reason="length"``.  The scripted model (its reply
is its script) makes the expected text exact: the first ``max_tokens`` tokens of
the script, without the ``<tool_call>`` marker and the newline after it.
"""
import json

import pytest

from scripted import ScriptedTokenizer, scripted_model

openai_types = pytest.importorskip("openai.types")
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
ASK = [{"role": "user", "content": "weather?"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CUT = 20  # tokens: the marker, the newline and 18 bytes of the JSON


def expected_text():
    tok = ScriptedTokenizer()
    ids = tok.encode(CALL, add_special=False, parse_special=True)[:CUT]
    text = tok.decode(ids)
    assert text.startswith("<tool_call>\n")
    return text[len("<tool_call>\n"):]


def test_cut_off_tool_call_comes_back_as_content():
    model = scripted_model([CALL])
    out = model.create_chat_completion(ASK, tools=TOOLS, temperature=0, max_tokens=CUT)
    ChatCompletion.model_validate(out)
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "length"
    assert "tool_calls" not in choice["message"]
    assert choice["message"]["content"] == expected_text() == '{"name": "get_weat'
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice["message"]["content"])
    assert out["usage"]["completion_tokens"] == CUT


def test_cut_off_tool_call_is_streamed_as_content():
    model = scripted_model([CALL])
    chunks = list(model.create_chat_completion(ASK, tools=TOOLS, temperature=0, max_tokens=CUT, stream=True))
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == expected_text()
    assert not any(c["choices"][0]["delta"].get("tool_calls") for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_whole_tool_call_still_has_no_content():
    model = scripted_model([CALL])
    out = model.create_chat_completion(ASK, tools=TOOLS, temperature=0)
    message = out["choices"][0]["message"]
    assert message["content"] is None and out["choices"][0]["finish_reason"] == "tool_calls"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
