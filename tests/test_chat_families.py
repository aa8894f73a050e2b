"""The chat templates of the families people run (tests/chat_templates/), as the
models ship them: rendered exactly as jinja2 renders them with Hugging Face's
settings (tools included), and driven through ChatSession with the formats these
models emit (thinking blocks, <tool_call> JSON, Llama 3 JSON calls, <|end|>...)."""
import copy
import datetime
import json
import re
from pathlib import Path

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from infer.chat import Chat, ChatSession, ChatTemplateError
from scripted import ScriptedTokenizer, scripted_model

TEMPLATES = Path(__file__).parent / "chat_templates"


def template(name):
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


def hf_render(source, messages, add_generation_prompt, **variables):
    """What transformers' apply_chat_template renders: its environment, filters and
    globals, written here independently of infer."""
    def raise_exception(message):
        raise jinja2.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(source).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                          **variables)


# name: (bos, eos) as the model's tokenizer spells them
FAMILIES = {
    "qwen2.5": ("", "<|im_end|>"),
    "qwen3": ("", "<|im_end|>"),
    "deepseek-r1-distill-qwen": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "phi-3-mini": ("<s>", "<|endoftext|>"),
    "phi-3.5-mini": ("<s>", "<|endoftext|>"),
    "phi-4-mini": ("<|endoftext|>", "<|endoftext|>"),
    "llama-3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "gemma-2": ("<bos>", "<eos>"),
    "gemma-3": ("<bos>", "<eos>"),
    "smollm3": ("", "<|im_end|>"),
    "mistral-nemo": ("<s>", "</s>"),
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}
SYSTEM = {"role": "system", "content": "You are terse. Ünïcode ☕ stays as it is."}
TURNS = [
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "  Hello!\nHow can I help?  "},
    {"role": "user", "content": "Quote: \"x\" <b>&</b>"},
]
CALL = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
TOOL_TURNS = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": "{\"sky\": \"sunny\"}"},
    {"role": "assistant", "content": "Sunny."},
]
CONVERSATIONS = {
    "system+turns": ([SYSTEM] + TURNS, None),
    "turns": (TURNS, None),
    "one user turn": (TURNS[:1], None),
    "tools offered": ([SYSTEM] + TURNS[:1], [WEATHER]),
    "tool call and result": ([SYSTEM] + TOOL_TURNS, [WEATHER]),
}
KWARGS = [{}, {"enable_thinking": False}]


def _outcome(render):
    try:
        return render()
    except (ChatTemplateError, jinja2.TemplateError, TypeError) as exc:
        return ("raised", type(exc).__name__ if not isinstance(exc, ChatTemplateError) else "raised")


@pytest.mark.parametrize("kwargs", KWARGS, ids=["default", "no-thinking"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_render_raw_matches_hf_jinja2(family, conversation, add_generation_prompt, kwargs):
    source = template(family)
    bos, eos = FAMILIES[family]
    messages, tools = CONVERSATIONS[conversation]
    chat = Chat(source, bos_token=bos, eos_token=eos)
    try:
        want = hf_render(source, copy.deepcopy(messages), add_generation_prompt, tools=tools,
                         bos_token=bos, eos_token=eos, **kwargs)
    except (jinja2.TemplateError, TypeError):  # the template refuses it (Gemma's alternation, ...)
        with pytest.raises(ChatTemplateError):
            chat.render_raw(messages, add_generation_prompt, tools=tools, **kwargs)
        return
    assert chat.render_raw(messages, add_generation_prompt, tools=tools, **kwargs) == want


# What a session learns by probing each template, written out by hand.
PROBES = {
    #                 assistant_prefix, end_of_turn, think, tool markers, tools placement, system, tool role
    "qwen2.5": ("<|im_start|>assistant\n", "<|im_end|>\n", False, True, "template", True, True),
    "qwen3": ("<|im_start|>assistant\n", "<|im_end|>\n", True, True, "template", True, True),
    "deepseek-r1-distill-qwen": ("<｜Assistant｜><think>\n", "<｜end▁of▁sentence｜>", True, False,
                                 "instructions", True, True),
    "phi-3-mini": ("", "<|end|>\n", False, False, "instructions", False, False),
    "phi-3.5-mini": ("<|assistant|>\n", "<|end|>\n", False, False, "instructions", True, False),
    "phi-4-mini": ("<|assistant|>", "<|end|>", False, False, "system_message", True, True),
    "llama-3.1": ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", False, False, "template",
                  True, True),
    "llama-3.2": ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", False, False, "template",
                  True, True),
    "gemma-2": ("<start_of_turn>model\n", "<end_of_turn>\n", False, False, "instructions", False, False),
    "gemma-3": ("<start_of_turn>model\n", "<end_of_turn>\n", False, False, "instructions", True, False),
    "smollm3": ("<|im_start|>assistant\n", "<|im_end|>\n", True, False, "instructions", True, True),
    # no generation prompt: the model answers right after [/INST] or [/TOOL_RESULTS]
    "mistral-nemo": ("", "</s>", False, False, "template", True, True),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_probes_of_each_family(family):
    bos, eos = FAMILIES[family]
    chat = Chat(template(family), bos_token=bos, eos_token=eos)
    prefix, end, think, tool, placement, system, tool_role = PROBES[family]
    assert chat.assistant_prefix == prefix
    assert chat.end_of_turn == end
    assert chat.think_markers == (("<think>", "</think>") if think else None)
    assert chat.tool_call_markers == (("<tool_call>", "</tool_call>") if tool else None)
    assert chat.tools_placement == placement
    assert chat.supports_system_role == system
    assert chat.supports_tool_role == tool_role


def _as_hf(messages):
    """History as HF templates take it: tool-call arguments as dicts."""
    out = copy.deepcopy(messages)
    for m in out:
        for c in m.get("tool_calls") or ():
            if isinstance(c["function"]["arguments"], str):
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return out


@pytest.mark.parametrize("family", ["qwen2.5", "qwen3", "llama-3.1", "llama-3.2"])
def test_render_with_openai_tool_calls_matches_hf(family):
    # OpenAI clients send arguments as a JSON string; the templates want a dict.
    bos, eos = FAMILIES[family]
    source = template(family)
    messages, tools = CONVERSATIONS["tool call and result"]
    openai = copy.deepcopy(messages)
    openai[2]["tool_calls"][0]["function"]["arguments"] = json.dumps({"city": "Paris"})
    got = Chat(source, bos_token=bos, eos_token=eos).render(openai, True, tools)
    assert got == hf_render(source, _as_hf(openai), True, tools=tools, bos_token=bos, eos_token=eos)
    assert '"city": "Paris"' in got and "get_weather" in got


def test_phi4_mini_tools_ride_on_the_system_message():
    source = template("phi-4-mini")
    got = Chat(source, eos_token="<|endoftext|>").render([SYSTEM] + TURNS[:1], True, [WEATHER])
    listing = json.dumps([WEATHER["function"]], ensure_ascii=False)
    want = hf_render(source, [dict(SYSTEM, tools=listing)] + TURNS[:1], True, eos_token="<|endoftext|>")
    assert got == want
    assert got.startswith("<|system|>You are terse.") and "<|tool|>[{\"name\": \"get_weather\"" in got


def test_gemma3_describes_tools_it_has_no_slot_for_in_the_first_user_turn():
    chat = Chat(template("gemma-3"), bos_token="<bos>")
    got = chat.render(TURNS[:1], True, [WEATHER])
    assert got.startswith("<bos><start_of_turn>user\nYou can call these tools:\n{\"name\": \"get_weather\"")
    assert got.endswith("Hi there<end_of_turn>\n<start_of_turn>model\n")


def test_unknown_role_is_a_value_error():
    chat = Chat(template("qwen2.5"))
    with pytest.raises(ValueError, match="role 'narrator' is not one of system, user, assistant, tool"):
        chat.render([{"role": "narrator", "content": "Once"}])


# ---- sessions on the real templates -----------------------------------------------------
def _session(family, script, specials, bos=None, eos=None, end_token=None, opener=None, **options):
    tok = ScriptedTokenizer(specials=specials, words=("Hello", " world", "Paris"), bos=bos,
                            eos=eos or specials[0], end_of_turn=())
    model = scripted_model(script, template=template(family), tokenizer=tok,
                           opener=opener or PROBES[family][0], end_token=end_token or eos or specials[0])
    return ChatSession(model, **options), tok


def _cache_is_rendered_history(session, tok, family, **variables):
    bos, eos = FAMILIES[family]
    text = hf_render(template(family), _as_hf(session.history), False, tools=session.tools,
                     bos_token=bos, eos_token=eos, **variables)
    assert session.context.tokens == tok.encode(text, add_special=False, parse_special=True)


QWEN = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>")


def test_qwen25_tool_call_result_and_answer():
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    s, tok = _session("qwen2.5", [call, "Sunny in Paris."], QWEN, tools=[WEATHER])
    reply = s.send("Weather in Paris?")
    assert reply.finish_reason == "tool_calls" and reply.text == ""
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"})]
    _cache_is_rendered_history(s, tok, "qwen2.5")
    s.add_tool_result("get_weather", {"sky": "sunny"})
    reply = s.send()
    assert reply.text == "Sunny in Paris." and reply.finish_reason == "stop"
    _cache_is_rendered_history(s, tok, "qwen2.5")
    assert "<tool_response>\n{\"sky\": \"sunny\"}\n</tool_response>" in tok.decode(s.context.tokens)


def test_qwen3_thinking_is_ephemeral_on_the_real_template():
    s, tok = _session("qwen3", ["<think>\nplan ab\n</think>\n\nHello world", "<think>\nmore\n</think>\n\nParis"],
                      QWEN)
    reply = s.send("hi")
    assert (reply.thinking, reply.text) == ("plan ab", "Hello world")
    assert s.history[-1] == {"role": "assistant", "content": "Hello world"}
    _cache_is_rendered_history(s, tok, "qwen3")  # the template's empty think block, not the thinking
    assert "plan" not in tok.decode(s.context.tokens)
    reply = s.send("more")
    assert (reply.thinking, reply.text) == ("more", "Paris")
    _cache_is_rendered_history(s, tok, "qwen3")


def test_qwen3_enable_thinking_false():
    s, tok = _session("qwen3", ["<think>\n\n</think>\n\nHello world"], QWEN,
                      template_kwargs={"enable_thinking": False})
    reply = s.send("hi")
    assert (reply.thinking, reply.text, reply.finish_reason) == ("", "Hello world", "stop")
    _cache_is_rendered_history(s, tok, "qwen3", enable_thinking=False)


R1 = ("<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>")


def test_deepseek_r1_generation_prompt_opens_thinking():
    s, tok = _session("deepseek-r1-distill-qwen",
                      ["<think>\nplan\n</think>\n\nHello world", "<think>\nok</think>Paris"], R1,
                      bos="<｜begin▁of▁sentence｜>", eos="<｜end▁of▁sentence｜>", opener="<｜Assistant｜>",
                      system="Be brief.")
    reply = s.send("hi")
    assert (reply.thinking, reply.text, reply.finish_reason) == ("plan", "Hello world", "stop")
    _cache_is_rendered_history(s, tok, "deepseek-r1-distill-qwen")
    assert tok.decode(s.context.tokens) == ("<｜begin▁of▁sentence｜>Be brief.<｜User｜>hi<｜Assistant｜>Hello world"
                                            "<｜end▁of▁sentence｜>")
    assert s.send("and?").text == "Paris"
    _cache_is_rendered_history(s, tok, "deepseek-r1-distill-qwen")


PHI = ("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")


@pytest.mark.parametrize("family", ["phi-3.5-mini", "phi-4-mini"])
def test_phi_end_token_is_learnt_from_the_template(family):
    # The vocabulary declares no end-of-turn token here: <|end|> comes from the template.
    s, tok = _session(family, ["Hello world", "Paris"], PHI, eos="<|endoftext|>", end_token="<|end|>",
                      system="Be brief.")
    reply = s.send("hi")
    assert (reply.text, reply.finish_reason) == ("Hello world", "stop")
    _cache_is_rendered_history(s, tok, family)
    assert s.send("and?").text == "Paris"
    _cache_is_rendered_history(s, tok, family)


LLAMA = ("<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
         "<|python_tag|>")


@pytest.mark.parametrize("call", [
    '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}',
], ids=["json", "python-tag", "typed"])
@pytest.mark.parametrize("family", ["llama-3.1", "llama-3.2"])
def test_llama3_json_tool_call(family, call):
    s, tok = _session(family, [call, "Sunny."], LLAMA, bos="<|begin_of_text|>", eos="<|eot_id|>", tools=[WEATHER])
    reply = s.send("Weather in Paris?")
    assert reply.finish_reason == "tool_calls" and reply.text == ""
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"})]
    _cache_is_rendered_history(s, tok, family)
    s.add_tool_result("get_weather", "sunny")
    assert s.send().text == "Sunny."
    _cache_is_rendered_history(s, tok, family)
    assert "<|start_header_id|>ipython<|end_header_id|>" in tok.decode(s.context.tokens)


@pytest.mark.parametrize("family", ["llama-3.1", "llama-3.2"])
def test_llama3_parallel_calls_are_rendered_one_call_per_turn(family):
    """Llama 3.x templates raise on an assistant message with more than one tool call
    ("This model only supports single tool-calls at once!"): two calls in one reply, or
    in a history a client sends, become call, result, call, result."""
    two = '[{"name": "get_weather", "parameters": {"city": "Paris"}}, ' \
          '{"name": "get_weather", "parameters": {"city": "Rome"}}]'
    s, tok = _session(family, [two, "", "Sunny, then rainy."], LLAMA, bos="<|begin_of_text|>", eos="<|eot_id|>",
                      tools=[WEATHER])
    reply = s.send("Weather in Paris and Rome?")
    assert [c.arguments["city"] for c in reply.tool_calls] == ["Paris", "Rome"]
    paris, rome = reply.tool_calls
    s.add_tool_result(rome.id, "rainy")  # results in any order: matched by id
    s.add_tool_result(paris.id, "sunny")
    assert s.send().text == "Sunny, then rainy."
    user = {"role": "user", "content": "Weather in Paris and Rome?"}

    def call(city, call_id):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}]}
    one_at_a_time = [user, call("Paris", paris.id), {"role": "tool", "tool_call_id": paris.id, "content": "sunny"},
                     call("Rome", rome.id), {"role": "tool", "tool_call_id": rome.id, "content": "rainy"},
                     {"role": "assistant", "content": "Sunny, then rainy."}]
    bos, eos = FAMILIES[family]
    want = hf_render(template(family), one_at_a_time, False, tools=[WEATHER], bos_token=bos, eos_token=eos)
    assert s.context.tokens == tok.encode(want, add_special=False, parse_special=True)


@pytest.mark.parametrize("answer", ["[1, 2] are the ids", "{x} is a placeholder"])
def test_llama3_answer_that_opens_like_json_streams_once_it_cannot_be_a_call(answer):
    """With tools offered, a reply opening with [ or { was held back whole, in case it was
    a call, until the model ended: a list must open with an object, an object with a key."""
    s, tok = _session("llama-3.2", [answer], LLAMA, bos="<|begin_of_text|>", eos="<|eot_id|>", tools=[WEATHER])
    pieces = list(s.stream("ids?"))
    reply = pieces.pop()
    assert "".join(pieces) == reply.text == answer and reply.tool_calls == []
    assert len(pieces) > 1 and len(pieces[0]) <= 3  # streamed from the third character on


def test_llama3_plain_answer_with_tools_offered_is_text():
    s, tok = _session("llama-3.2", ["Hello world"], LLAMA, bos="<|begin_of_text|>", eos="<|eot_id|>",
                      tools=[WEATHER])
    reply = s.send("hi")
    assert (reply.text, reply.tool_calls, reply.finish_reason) == ("Hello world", [], "stop")


GEMMA = ("<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>")


@pytest.mark.parametrize("family", ["gemma-2", "gemma-3"])
def test_gemma_end_of_turn_and_system_prompt(family):
    s, tok = _session(family, ["Hello world", "Paris"], GEMMA, bos="<bos>", eos="<eos>", end_token="<end_of_turn>",
                      system="Be brief.")
    reply = s.send("hi")
    assert (reply.text, reply.finish_reason) == ("Hello world", "stop")
    want_start = "<bos><start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\nHello world"
    assert tok.decode(s.context.tokens).startswith(want_start)
    assert s.send("and?").text == "Paris"
    if family == "gemma-3":  # Gemma 2 refuses a system message: the session folds it, HF would raise
        _cache_is_rendered_history(s, tok, family)


def test_smollm3_thinks_by_default_and_not_with_enable_thinking_false():
    s, tok = _session("smollm3", ["<think>\nplan\n</think>\nHello world"], QWEN)
    reply = s.send("hi")
    assert (reply.thinking, reply.text) == ("plan", "Hello world")
    _cache_is_rendered_history(s, tok, "smollm3")
    s, tok = _session("smollm3", ["<think>\n\n</think>\nHello world"], QWEN,
                      template_kwargs={"enable_thinking": False})
    reply = s.send("hi")
    assert (reply.thinking, reply.text) == ("", "Hello world")
    _cache_is_rendered_history(s, tok, "smollm3", enable_thinking=False)


def test_phi4_mini_functools_calls():
    calls = 'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, ' \
            '{"name": "get_weather", "arguments": {"city": "Rome"}}]'
    s, tok = _session("phi-4-mini", [calls, "Both sunny."], PHI, eos="<|endoftext|>", end_token="<|end|>",
                      tools=[WEATHER])
    reply = s.send("Weather in Paris and Rome?")
    assert reply.finish_reason == "tool_calls" and reply.text == ""
    assert [c.arguments["city"] for c in reply.tool_calls] == ["Paris", "Rome"]
    # the tools reached the model the way Phi-4-mini's template takes them
    assert '<|system|><|tool|>[{"name": "get_weather"' in tok.decode(s.context.tokens)
    # and its calls stay in the history as it wrote them (its template renders content only)
    assert "<|assistant|>" + calls + "<|end|>" in tok.decode(s.context.tokens)
    s.add_tool_result(reply.tool_calls[0].id, "sunny")
    s.add_tool_result(reply.tool_calls[1].id, "sunny")
    assert s.send().text == "Both sunny."


MISTRAL = ("</s>", "<s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
           "[TOOL_RESULTS]", "[/TOOL_RESULTS]")


def test_mistral_nemo_tool_calls_and_results():
    """Mistral Nemo writes its calls as [TOOL_CALLS][{...}, ...] (llama.cpp's MISTRAL_NEMO
    format), and its template raises unless every tool call id is 9 letters or digits."""
    calls = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}, ' \
            '{"name": "get_weather", "arguments": {"city": "Rome"}, "id": "f5g6h7i8j"}]'
    s, tok = _session("mistral-nemo", [calls], MISTRAL, bos="<s>", eos="</s>", opener="[/INST]", tools=[WEATHER])
    reply = s.send("Weather in Paris and Rome?")
    assert (reply.text, reply.finish_reason, reply.tool_call_errors) == ("", "tool_calls", [])
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"}),
                                                                  ("get_weather", {"city": "Rome"})]
    s.add_tool_result(reply.tool_calls[0].id, "sunny")
    s.add_tool_result(reply.tool_calls[1].id, "rainy")
    prompt = s.chat.render(s.history, True, s.tools)
    ids = re.findall(r'"id": "([^"]*)"', prompt)
    assert len(set(ids)) == 2 and all(re.fullmatch("[A-Za-z0-9]{9}", i) for i in ids), ids
    assert re.findall(r'"call_id": "([^"]*)"', prompt) == ids  # each result names its call
    history = _as_hf(s.history)
    history[1]["tool_calls"][0]["id"], history[1]["tool_calls"][1]["id"] = ids
    history[2]["tool_call_id"], history[3]["tool_call_id"] = ids
    assert prompt == hf_render(template("mistral-nemo"), history, True, tools=[WEATHER],
                               bos_token="<s>", eos_token="</s>")
    assert prompt.endswith('[TOOL_RESULTS]{"content": rainy, "call_id": "' + ids[1] + '"}[/TOOL_RESULTS]')
    s.send()  # the next turn renders (the scripted model has nothing more to say)


@pytest.mark.parametrize("reply", [
    '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Par',  # cut off by max_tokens
    '[TOOL_CALLS]{"name": "get_weather", "arguments": []}',
], ids=["truncated", "bad-arguments"])
def test_mistral_nemo_malformed_call_is_a_tool_call_error(reply):
    s, tok = _session("mistral-nemo", [reply], MISTRAL, bos="<s>", eos="</s>", opener="[/INST]", tools=[WEATHER])
    out = s.send("Weather in Paris?")
    assert (out.text, out.tool_calls, len(out.tool_call_errors)) == ("", [], 1)


def test_deepseek_r1_gets_tool_calls_as_llama_cpp_gives_them():
    """DeepSeek-R1's template renders an assistant's calls only when its content is None
    and joins ``arguments`` to strings with ``+``: given "" and a dict, as other templates
    want them, the call vanished from the history (an empty assistant turn)."""
    bos, eos = FAMILIES["deepseek-r1-distill-qwen"]
    source = template("deepseek-r1-distill-qwen")
    messages, _ = CONVERSATIONS["tool call and result"]
    got = Chat(source, bos_token=bos, eos_token=eos).render(messages, True)
    openai = copy.deepcopy(messages)  # as an OpenAI client sends them back
    openai[2]["content"] = None
    openai[2]["tool_calls"][0]["function"]["arguments"] = '{"city":"Paris"}'
    assert Chat(source, bos_token=bos, eos_token=eos).render(openai, True) == \
        got.replace('{"city": "Paris"}', '{"city":"Paris"}')
    assert got == hf_render(source, openai, True, bos_token=bos, eos_token=eos).replace(
        '{"city":"Paris"}', '{"city": "Paris"}')
    assert ("<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
            '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>') in got


@pytest.mark.parametrize("family, text", [
    ("mistral-nemo", 'Let me check.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
    ("llama-3.1", 'Let me check.<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'),
], ids=["mistral", "llama-3.1"])
def test_calls_after_some_text(family, text):
    """A call marker that is a special token may follow some text: llama.cpp returns the
    text as content and the calls as tool_calls (it came back as all text)."""
    if family == "mistral-nemo":
        s, tok = _session(family, [text], MISTRAL, bos="<s>", eos="</s>", opener="[/INST]", tools=[WEATHER])
    else:
        s, tok = _session(family, [text], LLAMA, bos="<|begin_of_text|>", eos="<|eot_id|>", tools=[WEATHER])
    pieces = list(s.stream("Weather in Paris?"))
    reply = pieces.pop()
    assert "".join(pieces) == reply.text == "Let me check."
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert reply.finish_reason == "tool_calls"


def test_gemma3_parallel_calls_go_back_into_history_as_a_json_list():
    """Gemma's template renders content only: two calls went back as two JSON objects run
    together, which is neither what the model wrote nor readable as calls."""
    two = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, ' \
          '{"name": "get_weather", "arguments": {"city": "Rome"}}]'
    s, tok = _session("gemma-3", [two], GEMMA, bos="<bos>", eos="<eos>", end_token="<end_of_turn>", tools=[WEATHER])
    reply = s.send("Weather in Paris and Rome?")
    assert [c.arguments["city"] for c in reply.tool_calls] == ["Paris", "Rome"]
    assert "<start_of_turn>model\n" + two + "<end_of_turn>" in tok.decode(s.context.tokens)


R1_CALLS = R1 + ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
                 "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
                 "<｜tool▁output▁end｜>")


def test_deepseek_r1_native_tool_calls():
    """DeepSeek-R1's own call layout (llama.cpp's DEEPSEEK_R1 format), which its template
    shows it in history, is read as calls, after the thinking."""
    native = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
              '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
    s, tok = _session("deepseek-r1-distill-qwen", ["<think>\nplan\n</think>\n\n" + native], R1_CALLS,
                      bos="<｜begin▁of▁sentence｜>", eos="<｜end▁of▁sentence｜>", opener="<｜Assistant｜>",
                      tools=[WEATHER])
    reply = s.send("Weather in Paris?")
    assert (reply.thinking, reply.text, reply.finish_reason) == ("plan", "", "tool_calls")
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert tok.decode(s.context.tokens).endswith(
        "<｜User｜>Weather in Paris?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
        'get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>')
