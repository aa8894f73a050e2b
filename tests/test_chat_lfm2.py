"""LFM2's chat format on its real templates (tests/chat_templates/lfm2.jinja and
lfm2.5.jinja, llama.cpp's models/templates copies): tools listed in the system
prompt, calls written as ``<|tool_call_start|>[name(arg=value, ...)]<|tool_call_end|>``
(a Python-style list whose values may be JSON literals, llama.cpp's
common/parsers/lfm2.cpp), read back as tool calls and rendered back into history.
The prompts are compared with jinja2's own rendering (test_chat_families.hf_render)."""
import pytest
from test_chat_families import WEATHER, _as_hf, hf_render, template

from infer.chat import Chat, ChatSession, ToolCallError
from infer.chat.reply_parser import python_tool_calls
from scripted import ScriptedTokenizer, scripted_model

LFM2 = ("<|im_end|>", "<|im_start|>", "<|startoftext|>", "<|tool_call_start|>", "<|tool_call_end|>",
        "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_response_start|>", "<|tool_response_end|>")
BOS = "<|startoftext|>"
START, END = "<|tool_call_start|>", "<|tool_call_end|>"


def session(name, script, **options):
    tok = ScriptedTokenizer(specials=LFM2, words=("Hello", " world", "Paris"), bos=BOS, eos="<|im_end|>",
                            end_of_turn=())
    model = scripted_model(script, template=template(name), tokenizer=tok, opener="<|im_start|>assistant\n",
                           end_token="<|im_end|>")
    return ChatSession(model, **options), tok


def cache_is_rendered_history(s, tok, name, calls_text):
    """The cache is jinja2's rendering of the history, with the assistant's calls as the
    text the model wrote (the templates render an assistant's content only)."""
    history = [dict({k: v for k, v in m.items() if k != "tool_calls"}, content=calls_text)
               if m.get("tool_calls") else m for m in _as_hf(s.history)]
    text = hf_render(template(name), history, False, tools=s.tools, bos_token=BOS, eos_token="<|im_end|>")
    assert s.context.tokens == tok.encode(text, add_special=False, parse_special=True)


@pytest.mark.parametrize("name", ["lfm2", "lfm2.5"])
def test_the_templates_are_known_as_lfm2s(name):
    assert Chat(template(name)).tool_call_markers == (START, END)


@pytest.mark.parametrize("name", ["lfm2", "lfm2.5"])
def test_parallel_calls_results_and_answer(name):
    calls = f'{START}[get_weather(city="Paris"), get_weather(city="Rome")]{END}'
    s, tok = session(name, [calls, "Both sunny."], tools=[WEATHER])
    reply = s.send("Weather in Paris and Rome?")
    assert reply.finish_reason == "tool_calls" and reply.text == ""
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"}),
                                                                 ("get_weather", {"city": "Rome"})]
    prompt = tok.decode(s.context.tokens)
    marker = "List of tools: <|tool_list_start|>[" if name == "lfm2" else "List of tools: ["
    assert marker + '{"type": "function", "function": {"name": "get_weather"' in prompt
    # the calls go back into history as the model wrote them (the template renders content only)
    assert "<|im_start|>assistant\n" + calls + "<|im_end|>" in prompt
    cache_is_rendered_history(s, tok, name, calls)
    for call in reply.tool_calls:
        s.add_tool_result(call.id, "sunny")
    reply = s.send()
    assert (reply.text, reply.finish_reason) == ("Both sunny.", "stop")
    cache_is_rendered_history(s, tok, name, calls)
    if name == "lfm2":
        assert "<|im_start|>tool\n<|tool_response_start|>sunny<|tool_response_end|><|im_end|>" in \
            tok.decode(s.context.tokens)


def test_text_before_a_call_is_content():
    s, _ = session("lfm2", [f"Let me check.{START}[get_weather(city=\"Paris\")]{END}"], tools=[WEATHER])
    reply = s.send("Weather?")
    assert reply.text == "Let me check." and [c.arguments for c in reply.tool_calls] == [{"city": "Paris"}]


def test_python_style_values():
    """Single quotes, JSON's true/false/null and Python's True/None, numbers, nested values."""
    text = ("[search(q='it\\'s \"x\"', n=-3, exact=true, lang=null, tags=['a', \"b\"], opts={'k': 1.5, \"on\": False}),"
            " stop(now=True)]")
    import json
    assert [json.loads(c) for c in python_tool_calls(text)] == [
        {"name": "search", "arguments": {"q": "it's \"x\"", "n": -3, "exact": True, "lang": None,
                                         "tags": ["a", "b"], "opts": {"k": 1.5, "on": False}}},
        {"name": "stop", "arguments": {"now": True}}]


@pytest.mark.parametrize("bad", ["[get_weather(Paris)]", "[get_weather(city=Paris)]", "[get_weather(city=\"Par",
                                 "[os.system(cmd='x')]", "[get_weather(**kw)]", "[f(x=__import__('os'))]"])
def test_malformed_calls_are_reported(bad):
    s, _ = session("lfm2", [f"{START}{bad}{END}"], tools=[WEATHER])
    reply = s.send("Weather?")
    assert reply.tool_calls == [] and len(reply.tool_call_errors) == 1
    assert isinstance(reply.tool_call_errors[0], ToolCallError)


def test_a_json_call_between_the_markers_is_read_too():
    """What a forced tool_choice's grammar makes the model write (one JSON call)."""
    call = f'{START}\n{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}\n{END}'
    s, _ = session("lfm2", [call], tools=[WEATHER])
    reply = s.send("Weather?")
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"})]
