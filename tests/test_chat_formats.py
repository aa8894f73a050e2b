"""The chat formats of Qwen3.5 / Qwen3-Coder / Nemotron 3 Nano (XML tool calls), gpt-oss
(harmony channels) and Ministral 3 ([THINK] and [TOOL_CALLS]NAME[ARGS]), on their real
templates (tests/chat_templates/, llama.cpp's models/templates copies).  Prompts are
compared with jinja2's own rendering (test_chat_families.hf_render); tool calls with
OpenAI dicts written out by hand from the formats llama.cpp's common/chat.cpp parses;
streams, split at every character, with the whole reply parsed at once."""
import copy
import json

import pytest
from test_chat_families import _as_hf, hf_render, template

from infer.chat import Chat, ChatSession, ToolCallError
from infer.chat.reply_parser import HarmonyParser, ReplyParser
from infer.chat.template import HARMONY, MINISTRAL, QWEN3_CODER
from scripted import ScriptedEngine, ScriptedTokenizer, scripted_model

# One tool whose parameters have every JSON type, so that raw XML values must be typed.
FORECAST = {"type": "function", "function": {
    "name": "forecast", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "hours": {"type": "array", "items": {"type": "number"}}, "opts": {"type": "object"},
        "note": {"type": ["string", "null"]}},
        "required": ["city", "days"]}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def openai_call(name, arguments):
    """What the reply's call must be, as the OpenAI API shapes it (the id aside)."""
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def calls_of(reply):
    return [{"type": c["type"], "function": {"name": c["function"]["name"],
                                             "arguments": json.loads(c["function"]["arguments"])}}
            for c in (call.to_openai() for call in reply.tool_calls)]


# ---- Qwen3.5, Qwen3-Coder, Nemotron 3 Nano: <tool_call><function=...><parameter=...> ----------
QWEN = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>")
XML_FAMILIES = {"qwen3.5": True, "qwen3-coder": False, "nemotron-3-nano": True}  # name: thinks


def qwen_session(name, script, **options):
    tok = ScriptedTokenizer(specials=QWEN, words=("Hello", " world", "Paris"), eos="<|im_end|>", end_of_turn=())
    model = scripted_model(script, template=template(name), tokenizer=tok, max_seq_len=8192)
    return ChatSession(model, **options), tok


def cache_is_rendered_history(s, tok, name, **variables):
    """The KV cache holds exactly jinja2's rendering of the session's history."""
    text = hf_render(template(name), _as_hf(s.history), False, tools=s.tools, bos_token="", eos_token="<|im_end|>",
                     **variables)
    assert s.context.tokens == tok.encode(text, add_special=False, parse_special=True)


TWO_CALLS = ("<tool_call>\n<function=forecast>\n<parameter=city>\nNew York\n</parameter>\n"
             "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
             "<parameter=hours>\n[6, 12.5]\n</parameter>\n<parameter=opts>\n{\"wind\": false}\n</parameter>\n"
             "<parameter=note>\n42\n</parameter>\n</function>\n</tool_call>\n"
             "<tool_call>\n<function=get_weather>\n<parameter=city>\n007\nline two\n</parameter>\n"
             "</function>\n</tool_call>")
TWO_CALLS_OPENAI = [
    openai_call("forecast", {"city": "New York", "days": 3, "metric": True, "hours": [6, 12.5],
                             "opts": {"wind": False}, "note": "42"}),  # a string-or-null stays text
    openai_call("get_weather", {"city": "007\nline two"})]  # a string is never read as JSON


@pytest.mark.parametrize("name", XML_FAMILIES)
def test_xml_templates_are_detected(name):
    chat = Chat(template(name))
    assert chat.call_format == QWEN3_CODER
    assert chat.tool_call_markers == ("<tool_call>", "</tool_call>")
    assert chat.think_markers == (("<think>", "</think>") if XML_FAMILIES[name] else None)


def test_qwen35_thinking_two_typed_calls_results_and_answer():
    reply_text = "<think>\nI need both.\n</think>\n\n" + TWO_CALLS
    s, tok = qwen_session("qwen3.5", [reply_text, "<think>\nDone.\n</think>\n\nSunny."], tools=[FORECAST, WEATHER])
    prompt = s.chat.render([{"role": "user", "content": "Weather?"}], True, s.tools)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")  # the generation prompt opens the thinking
    reply = s.send("Weather?")
    assert (reply.thinking, reply.text, reply.finish_reason) == ("I need both.", "", "tool_calls")
    assert calls_of(reply) == TWO_CALLS_OPENAI
    # Qwen3.5's template keeps the thinking of a tool-calling turn after the last user
    # message: history keeps it, and the cache holds the turn as generated
    assert s.history[-1]["reasoning_content"] == "I need both."
    cache_is_rendered_history(s, tok, "qwen3.5")
    n_cached = len(s.context.tokens)
    for call, result in zip(reply.tool_calls, ("rain", "sun")):
        s.add_tool_result(call.id, result)
    reply = s.send()
    assert (reply.thinking, reply.text, reply.finish_reason) == ("Done.", "Sunny.", "stop")
    assert reply.cached_tokens == n_cached  # the whole first turn was reused
    cache_is_rendered_history(s, tok, "qwen3.5")
    assert "<|im_start|>user\n<tool_response>\nrain\n</tool_response>\n<tool_response>\nsun\n</tool_response>" \
        "<|im_end|>" in tok.decode(s.context.tokens)
    # a new question: the template drops the old thinking, and so does the cache
    s.send("Thanks")
    cache_is_rendered_history(s, tok, "qwen3.5")
    assert "I need both." not in tok.decode(s.context.tokens)


def test_qwen35_enable_thinking_false():
    s, tok = qwen_session("qwen3.5", ["<think>\n\n</think>\n\nHello world", "Paris"],
                          template_kwargs={"enable_thinking": False})
    reply = s.send("hi")
    assert (reply.thinking, reply.text, reply.finish_reason) == ("", "Hello world", "stop")
    cache_is_rendered_history(s, tok, "qwen3.5", enable_thinking=False)


def test_continuing_an_answer_closes_the_thinking_the_prompt_opened():
    """A last assistant message is an answer to continue (llama-server's prefill): after
    Qwen3.5's "<think>\n" the prompt closes the block first, as llama.cpp writes it, or
    the model would read the answer as its thinking."""
    s, tok = qwen_session("qwen3.5", ["<think>\n\n</think>\n\nHello world"])
    s.history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]
    reply = s.send()
    assert (reply.thinking, reply.text) == ("", " world")
    assert s.history[-1] == {"role": "assistant", "content": "Hello world"}
    s, tok = harmony_session(["<|channel|>final<|message|>Hello world"])
    s.history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]
    reply = s.send()
    assert (reply.thinking, reply.text) == ("", " world")
    assert s.history[-1] == {"role": "assistant", "content": "Hello world"}


@pytest.mark.parametrize("name", ["qwen3-coder", "nemotron-3-nano"])
def test_other_xml_templates_read_calls_and_render_them_back(name):
    think = "<think>\nok\n</think>\n" if XML_FAMILIES[name] else ""
    s, tok = qwen_session(name, [think + "Let me look.\n" + TWO_CALLS], tools=[FORECAST, WEATHER])
    reply = s.send("Weather?")
    assert calls_of(reply) == TWO_CALLS_OPENAI and reply.text == "Let me look.\n"
    cache_is_rendered_history(s, tok, name)


def test_a_call_may_end_thinking_unclosed():
    """llama.cpp ends Qwen3.5's reasoning at <tool_call> as well as at </think>."""
    call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
    s, _ = qwen_session("qwen3.5", ["<think>\nhm\n" + call], tools=[WEATHER])
    reply = s.send("Weather?")
    assert (reply.thinking, reply.text) == ("hm", "")
    assert calls_of(reply) == [openai_call("get_weather", {"city": "Paris"})]


def test_qwen3_coder_call_without_its_tool_call_tag():
    """Qwen3-Coder sometimes leaves out <tool_call>: llama.cpp takes "<function=NAME>" of a
    tool it was given as the start of a call (but not on a thinking model's template)."""
    call = "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"
    for tail in ("", "\n</tool_call>"):
        text = "Checking.\n" + call + tail + "\nDone."
        content, _, tools = split_everywhere(lambda: ReplyParser(
            ["<|im_end|>"], tool=("<tool_call>", "</tool_call>"), json_tools=True,
            bare_calls=["<function=get_weather>"]), text)
        assert (content, tools) == ("Checking.\nDone.", [call])
    s, _ = qwen_session("qwen3-coder", [call], tools=[WEATHER])
    assert calls_of(s.send("Weather?")) == [openai_call("get_weather", {"city": "Paris"})]
    s, _ = qwen_session("qwen3.5", ["<think>\n\n</think>\n\n" + call], tools=[WEATHER])
    reply = s.send("Weather?")
    assert (reply.text, reply.tool_calls) == (call, [])


@pytest.mark.parametrize("bad", [
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",       # cut off by max_tokens
    "<tool_call>\n<function=get_weather>\nParis\n</function>\n</tool_call>",   # no parameter tags
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>",  # unclosed
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [1]}\n</tool_call>",
], ids=["truncated", "no-parameters", "unclosed-parameter", "bad-json"])
def test_malformed_xml_calls_are_tool_call_errors(bad):
    s, _ = qwen_session("qwen3.5", ["<think>\n\n</think>\n\n" + bad], tools=[WEATHER])
    reply = s.send("Weather?")
    assert (reply.text, reply.tool_calls, len(reply.tool_call_errors)) == ("", [], 1)
    assert isinstance(reply.tool_call_errors[0], ToolCallError)


def test_a_reply_cut_off_in_a_marker_ends_cleanly():
    # the prompt wrote "<think>\n"; 17 tokens more end in "<tool_", one byte a token
    s, _ = qwen_session("qwen3.5", ["<think>\nplan\n</think>\n\nHello world <tool_x"], tools=[WEATHER])
    pieces = list(s.stream("hi", max_tokens=17))
    reply = pieces.pop()
    assert "".join(pieces) == reply.text == "Hello world <tool_" and reply.finish_reason == "length"
    # and in a call: what was written of it is reported, not raised
    s, _ = qwen_session("qwen3.5", ["<think>\nplan\n</think>\n\nHello world <tool_call>\n<function=get_weather>"],
                        tools=[WEATHER])
    pieces = list(s.stream("hi", max_tokens=17))
    reply = pieces.pop()
    assert ("".join(pieces), reply.text, reply.tool_calls, reply.finish_reason) == \
        ("Hello world ", "Hello world ", [], "length")
    assert [e.raw for e in reply.tool_call_errors] == ["<fun"]


def split_everywhere(make_parser, text):
    """(content, thinking, tool texts) of ``text`` fed whole, and of it fed in two pieces
    split at every character: they must all be the same, and each piece's deltas must
    join to the whole."""
    def run(pieces):
        parser = make_parser()
        out = [d for p in pieces for d in parser.feed(p)] + parser.finish()
        content = "".join(t for k, t in out if k == "content")
        thinking = "".join(t for k, t in out if k != "content")
        assert (content, thinking) == ("".join(parser.content), "".join(parser.thinking))
        return content, thinking, parser.tool_texts

    whole = run([text])
    for at in range(1, len(text)):
        assert run([text[:at], text[at:]]) == whole, at
    return whole


def test_xml_reply_streams_the_same_at_every_split():
    text = "<think>\nplan\n</think>\n\nLet me look.\n\n" + TWO_CALLS
    content, thinking, tools = split_everywhere(lambda: ReplyParser(
        ["<|im_end|>"], think=("<think>", "</think>"), tool=("<tool_call>", "</tool_call>"), json_tools=True,
        tool_ends_thinking=True), text)
    assert (content, thinking, len(tools)) == ("Let me look.\n\n", "plan", 2)


def test_unclosed_thinking_before_a_call_streams_the_same_at_every_split():
    text = "plan\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
    content, thinking, tools = split_everywhere(lambda: ReplyParser(
        ["<|im_end|>"], think=("<think>", "</think>"), tool=("<tool_call>", "</tool_call>"), json_tools=True,
        in_thinking=True, tool_ends_thinking=True), text)
    assert (content, thinking, len(tools)) == ("", "plan", 1)


def test_session_stream_deltas_join_to_the_reply():
    s, _ = qwen_session("qwen3.5", ["<think>\nplan\n</think>\n\nLet me look.\n\n" + TWO_CALLS],
                        tools=[FORECAST, WEATHER])
    pieces = list(s.stream("Weather?", show_thinking=True))
    reply = pieces.pop()
    assert "".join(p for p in pieces if type(p) is str) == reply.text == "Let me look.\n\n"
    assert "".join(p for p in pieces if type(p) is not str) == reply.thinking == "plan"
    assert calls_of(reply) == TWO_CALLS_OPENAI


# ---- gpt-oss: harmony ---------------------------------------------------------------------------
HARMONY_SPECIALS = ("<|return|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>",
                    "<|endoftext|>")


class HarmonyEngine(ScriptedEngine):
    """The scripted model, for harmony: its replies hold "<|start|>assistant" themselves, so
    the k-th reply is the one after the k-th user or tool message, and it starts at the
    first "<|start|>assistant" after that message."""

    def next_token(self, seq):
        seq = [int(t) for t in seq]
        text_at, text = [], ""
        for t in seq:
            text_at.append(len(text))
            text += self.tokenizer.decode([t])
        turns = [i for i in range(len(text)) if text.startswith(("<|start|>user", "<|start|>functions."), i)]
        if not turns or len(turns) > len(self.replies):
            return self.end_id
        opener = text.find("<|start|>assistant", turns[-1])
        if opener < 0:
            return self.end_id
        start = text_at.index(opener + len("<|start|>assistant")) if opener + len("<|start|>assistant") in text_at \
            else len(seq)
        reply, done = self.replies[len(turns) - 1], seq[start:]
        if len(done) < len(reply) and reply[:len(done)] == done:
            return reply[len(done)]
        return self.end_id


def harmony_session(script, **options):
    tok = ScriptedTokenizer(specials=HARMONY_SPECIALS, words=("Hello", " world", "Paris", "assistant"),
                            eos="<|return|>", end_of_turn=("<|return|>", "<|call|>", "<|end|>"))
    model = scripted_model(script, template=template("gpt-oss"), tokenizer=tok, opener="<|start|>assistant",
                           end_token="<|return|>", max_seq_len=8192)
    model.engine.__class__ = HarmonyEngine
    return ChatSession(model, **options), tok


def harmony_render(s, add_generation_prompt=False):
    """jinja2's rendering of the history, with reasoning in "thinking" (the template's field)
    and, without a generation prompt, the final <|return|> as <|end|> (llama.cpp's rule)."""
    history = _as_hf(s.history)
    for m in history:
        if "reasoning_content" in m:
            m["thinking"] = m.pop("reasoning_content")
    text = hf_render(template("gpt-oss"), history, add_generation_prompt, tools=s.tools)
    if not add_generation_prompt and text.endswith("<|return|>"):
        text = text[:-len("<|return|>")] + "<|end|>"
    return text


HARMONY_CALL = ("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
                "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}")
HARMONY_ANSWER = "<|channel|>analysis<|message|>It is sunny.<|end|><|start|>assistant<|channel|>final<|message|>Sunny."


def test_harmony_vocabulary_ends_replies_at_return_and_call_not_at_end():
    """llama.cpp's rule (llama-vocab.cpp): a vocabulary with <|return|> and <|call|> does
    not end generation at <|end|>, after which gpt-oss writes its next message."""
    from infer.tokenizer import Vocabulary

    texts = ["a", "<|end|>", "<|return|>", "<|call|>", "<|start|>"]
    assert Vocabulary(texts, eos_token_id=2).end_of_turn_ids == {2, 3}
    assert Vocabulary(texts[:2], eos_token_id=0).end_of_turn_ids == {0, 1}  # Phi-3's <|end|> still ends


def test_harmony_is_detected():
    chat = Chat(template("gpt-oss"))
    assert (chat.call_format, chat.think_markers, chat.tool_call_markers) == (HARMONY, None, None)
    assert chat.assistant_prefix == "<|start|>assistant" and chat.end_of_turn == "<|return|>"


def test_harmony_call_result_and_answer():
    s, tok = harmony_session([HARMONY_CALL, HARMONY_ANSWER, "<|channel|>final<|message|>Bye."], tools=[WEATHER])
    reply = s.send("Weather in Paris?")
    assert (reply.thinking, reply.text, reply.finish_reason) == ("Need the weather.", "", "tool_calls")
    assert calls_of(reply) == [openai_call("get_weather", {"city": "Paris"})]
    assert s.context.tokens == tok.encode(harmony_render(s), add_special=False, parse_special=True)
    # the template keeps the analysis before a call until an answer follows
    assert "<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant " \
        "to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>" in \
        tok.decode(s.context.tokens)
    n_cached = len(s.context.tokens)
    s.add_tool_result(reply.tool_calls[0].id, "sunny")
    reply = s.send()
    assert (reply.thinking, reply.text, reply.finish_reason) == ("It is sunny.", "Sunny.", "stop")
    assert reply.cached_tokens == n_cached
    assert s.context.tokens == tok.encode(harmony_render(s), add_special=False, parse_special=True)
    assert tok.decode(s.context.tokens).endswith(
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"sunny\"<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Sunny.<|end|>")
    n_cached = len(s.context.tokens)
    reply = s.send("Thanks")
    assert reply.text == "Bye." and reply.cached_tokens <= n_cached
    # an answer followed: the call's analysis is dropped from the prompt now, as the template says
    assert "Need the weather." not in tok.decode(s.context.tokens)
    assert s.context.tokens == tok.encode(harmony_render(s), add_special=False, parse_special=True)


@pytest.mark.parametrize("text, want", [
    (HARMONY_CALL, ("", "Need the weather.", ["get_weather"])),
    (HARMONY_ANSWER, ("Sunny.", "It is sunny.", [])),
    # the recipient in the role header, as the template renders calls back
    (" to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}", ("", "", ["get_weather"])),
    # a preamble on the commentary channel is answer text
    ("<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather"
     " <|constrain|>json<|message|>{}", ("Checking.", "", ["get_weather"])),
    ("Just text, no channels.", ("Just text, no channels.", "", [])),   # not the format: content
    ("<|channel|>final<|message|>Sunny. STOP here", ("Sunny. ", "", [])),  # a stop string ends the answer
    ("<|channel|>final<|mess", ("", "", [])),                            # cut off in a header
    ("<|channel|>analysis<|message|>hmm", ("", "hmm", [])),              # cut off while thinking
], ids=["call", "answer", "recipient-in-role", "preamble", "no-channels", "stop", "cut-header", "cut-thinking"])
def test_harmony_reply_streams_the_same_at_every_split(text, want):
    content, thinking, tools = split_everywhere(lambda: HarmonyParser(["<|return|>", "STOP"]), text)
    assert (content, thinking, [json.loads(t)["name"] for t in tools]) == want


def test_harmony_malformed_call_is_a_tool_call_error():
    s, _ = harmony_session(["<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "],
                           tools=[WEATHER])
    reply = s.send("Weather?")
    assert (reply.text, reply.tool_calls, len(reply.tool_call_errors)) == ("", [], 1)


def test_harmony_calls_of_one_message_are_rendered_one_per_message():
    """gpt-oss's template renders an assistant message's first call only: a client's
    message with two is split, each call followed by its result."""
    chat = Chat(template("gpt-oss"))
    assert not chat.renders_parallel_tool_calls
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": {"city": c}}}
             for i, c in enumerate(("Paris", "Rome"))]
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": "", "reasoning_content": "Both.", "tool_calls": calls},
               {"role": "tool", "tool_call_id": "c0", "content": "sun"},
               {"role": "tool", "tool_call_id": "c1", "content": "rain"}]
    # the reasoning once, before the first call, in the template's "thinking" field
    one_by_one = [history[0], {"role": "assistant", "content": "", "thinking": "Both.", "tool_calls": calls[:1]},
                  history[2], {"role": "assistant", "content": "", "tool_calls": calls[1:]}, history[3]]
    assert chat.render(history, True, [WEATHER]) == hf_render(template("gpt-oss"), one_by_one, True, tools=[WEATHER])


# ---- Ministral 3: [THINK] and [TOOL_CALLS]NAME[ARGS]{...} ------------------------------------------
MINISTRAL_SPECIALS = ("</s>", "<s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[ARGS]", "[AVAILABLE_TOOLS]",
                      "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[THINK]", "[/THINK]",
                      "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]")


def ministral_session(script, **options):
    tok = ScriptedTokenizer(specials=MINISTRAL_SPECIALS, words=("Hello", " world", "Paris"), bos="<s>", eos="</s>",
                            end_of_turn=())
    model = scripted_model(script, template=template("ministral-3-reasoning"), tokenizer=tok, opener="[/INST]",
                           end_token="</s>", max_seq_len=8192)
    return ChatSession(model, **options), tok


def test_ministral_is_detected():
    chat = Chat(template("ministral-3-reasoning"), bos_token="<s>", eos_token="</s>")
    assert (chat.call_format, chat.think_markers) == (MINISTRAL, ("[THINK]", "[/THINK]"))
    assert chat.assistant_prefix == ""  # the model answers right after [/INST]


MINISTRAL_CALLS = '[THINK]Two cities.[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}' \
                  '[TOOL_CALLS]forecast[ARGS]{"city": "Rome", "days": 2}'


def test_ministral_thinking_and_calls():
    s, tok = ministral_session([MINISTRAL_CALLS], tools=[WEATHER, FORECAST])
    reply = s.send("Weather?")
    assert (reply.thinking, reply.text, reply.finish_reason) == ("Two cities.", "", "tool_calls")
    assert calls_of(reply) == [openai_call("get_weather", {"city": "Paris"}),
                               openai_call("forecast", {"city": "Rome", "days": 2})]
    # the thinking is dropped (the template shows what history gives it): the cache holds the calls
    cache = hf_render(template("ministral-3-reasoning"), _as_hf(s.history), False, tools=s.tools, bos_token="<s>",
                      eos_token="</s>")
    assert s.context.tokens == tok.encode(cache, add_special=False, parse_special=True)
    for call in reply.tool_calls:
        s.add_tool_result(call.id, "sun")
    text = hf_render(template("ministral-3-reasoning"), _as_hf(s.history), False, tools=s.tools, bos_token="<s>",
                     eos_token="</s>")
    assert s.chat.render(s.history, False, s.tools) == text
    assert text.endswith('[/INST][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]forecast[ARGS]'
                         '{"city": "Rome", "days": 2}</s>[TOOL_RESULTS]sun[/TOOL_RESULTS][TOOL_RESULTS]sun'
                         '[/TOOL_RESULTS]')


def test_ministral_answer_with_thinking_streams():
    s, tok = ministral_session(["[THINK]Easy.[/THINK]Hello world"])
    pieces = list(s.stream("hi", show_thinking=True))
    reply = pieces.pop()
    assert (reply.thinking, reply.text) == ("Easy.", "Hello world")
    assert "".join(p for p in pieces if type(p) is str) == "Hello world"
    # the thinking is not history: the cache holds the answer alone
    assert tok.decode(s.context.tokens).endswith("[INST]hi[/INST]Hello world</s>")


@pytest.mark.parametrize("text, want", [
    (MINISTRAL_CALLS, ("", "Two cities.", 2)),
    ("Let me check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", ("Let me check.", "", 1)),
], ids=["think-calls", "text-call"])
def test_ministral_reply_streams_the_same_at_every_split(text, want):
    content, thinking, tools = split_everywhere(lambda: ReplyParser(
        ["</s>"], think=("[THINK]", "[/THINK]"), json_tools=True), text)
    assert (content, thinking, len(tools)) == want


def test_ministral_malformed_call_is_a_tool_call_error():
    s, _ = ministral_session(['[TOOL_CALLS]get_weather[ARGS]{"city": "Par'], tools=[WEATHER])
    reply = s.send("Weather?")
    assert (reply.text, reply.tool_calls, len(reply.tool_call_errors)) == ("", [], 1)


@pytest.mark.parametrize("name, kept", [
    ("qwen3", True), ("qwen3.5", True), ("nemotron-3-nano", True), ("gpt-oss", True),
    ("qwen3-coder", False), ("ministral-3-reasoning", False), ("qwen2.5", False)])
def test_which_templates_keep_a_tool_calling_turns_reasoning(name, kept):
    """Read off each template: it shows an assistant message's reasoning_content (gpt-oss's:
    its thinking) when the message has tool calls and follows the last user message."""
    assert Chat(template(name), eos_token="<|im_end|>").renders_tool_call_reasoning is kept


# ---- rendering against jinja2 ---------------------------------------------------------------------
CALL = {"id": "call_0", "type": "function", "function": {"name": "forecast",
                                                         "arguments": {"city": "Paris", "days": 2, "metric": True}}}
CONVERSATIONS = {
    "plain": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
              {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Weather?"}],
    "tool loop": [{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": "", "reasoning_content": "Look it up.", "tool_calls": [CALL]},
                  {"role": "tool", "tool_call_id": "call_0", "content": "sun"}],
}
RENDERED = {"qwen3.5": ("", "<|im_end|>"), "qwen3-coder": ("", "<|im_end|>"), "nemotron-3-nano": ("", "<|im_end|>"),
            "gpt-oss": ("", "<|return|>"), "ministral-3-reasoning": ("<s>", "</s>")}


@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("name", RENDERED)
def test_render_matches_jinja2(name, conversation):
    bos, eos = RENDERED[name]
    messages = CONVERSATIONS[conversation]
    hf_messages = copy.deepcopy(messages)
    if name == "gpt-oss":  # the template's field for reasoning (llama.cpp moves it there too)
        hf_messages[1:2] = [{k if k != "reasoning_content" else "thinking": v for k, v in m.items()}
                            for m in hf_messages[1:2]]
    want = hf_render(template(name), hf_messages, True, tools=[FORECAST], bos_token=bos, eos_token=eos)
    assert Chat(template(name), bos_token=bos, eos_token=eos).render(messages, True, [FORECAST]) == want


# ---- forced calls: the grammar writes each format (SmolLM2 driven through each template) ----------
ADD = {"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 100},
                                     "b": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["a", "b"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("llguidance")
    from _tok_models import load_installed

    with load_installed("smollm2") as m:
        yield m


NAMED_ADD = {"type": "function", "function": {"name": "add"}}


@pytest.mark.parametrize("name, tools, choice", [
    ("qwen3.5", [ADD], "required"), ("qwen3.5", [WEATHER, ADD], NAMED_ADD), ("qwen3-coder", [WEATHER, ADD], NAMED_ADD),
    ("gpt-oss", [WEATHER, ADD], NAMED_ADD), ("ministral-3-reasoning", [ADD], "required")])
def test_forced_call_is_written_in_the_templates_format(smollm2, name, tools, choice):
    """tool_choice="required" or a named tool: the grammar makes even an untrained model
    write the call in the template's format, which comes back as a call whose arguments
    the tool's schema validates (jsonschema)."""
    jsonschema = pytest.importorskip("jsonschema")
    # thinking off: a model that may think first (as llama.cpp lets it) and was never
    # trained on the format would think to the end of max_tokens
    s = ChatSession(smollm2, tools=tools, temperature=0, template_kwargs={"enable_thinking": False})
    s.chat = Chat(template(name), eos_token=smollm2.chat.eos_token)
    if name == "ministral-3-reasoning":  # no switch in its template: the call format alone is under test
        s.chat.think_markers = None
    reply = s.send("What is 2 plus 3?", tool_choice=choice, max_tokens=60)
    assert (reply.finish_reason, reply.tool_call_errors, [c.name for c in reply.tool_calls]) == \
        ("tool_calls", [], ["add"])
    jsonschema.validate(reply.tool_calls[0].arguments, ADD["function"]["parameters"])


def real_qwen_session(name, script, **options):
    """qwen_session with a real byte-level Tokenizer (a forced call's grammar reads a real
    vocabulary): tests/vocab_cases.py's "qwen3" tokens, <think> and <tool_call> control tokens."""
    import tempfile

    import _tok_models
    import vocab_cases

    from infer.tokenizer import Tokenizer

    with tempfile.TemporaryDirectory() as folder:
        tok = Tokenizer.from_metadata(_tok_models.metadata(vocab_cases.write("qwen3", folder + "/qwen3.gguf")))
    model = scripted_model(script, template=template(name), tokenizer=tok, max_seq_len=8192)
    return ChatSession(model, **options)


@pytest.mark.parametrize("choice", ["required", NAMED_ADD])
def test_a_thinking_model_thinks_before_a_forced_call(choice):
    """A forced call's grammar lets the model think first, as llama.cpp's grammar built
    from its chat parser does (optional reasoning, then the calls): the thinking comes
    back as reasoning and the call as a call.  A grammar that started with the call
    masked "<think>" and took the model off its course."""
    one_call = "<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n" \
               "</function>\n</tool_call>"
    for name, thinks in XML_FAMILIES.items():
        script = ("<think>\nTwo and three.\n</think>\n\n" if thinks else "") + one_call
        s = real_qwen_session(name, [script], tools=[WEATHER, ADD], temperature=0)
        reply = s.send("What is 2 plus 3?", tool_choice=choice, max_tokens=300)
        assert (reply.finish_reason, reply.tool_call_errors, [c.name for c in reply.tool_calls]) == \
            ("tool_calls", [], ["add"]), name
        assert reply.tool_calls[0].arguments == {"a": 2, "b": 3}
        assert reply.thinking == ("Two and three." if thinks else ""), name
    # the prompt's own thinking switch still holds: with thinking off the call comes first
    s = real_qwen_session("qwen3.5", [one_call], tools=[ADD], temperature=0, template_kwargs={"enable_thinking": False})
    reply = s.send("What is 2 plus 3?", tool_choice="required", max_tokens=300)
    assert [c.name for c in reply.tool_calls] == ["add"] and reply.thinking == ""


def test_harmony_response_format_answers_on_the_final_channel(smollm2):
    jsonschema = pytest.importorskip("jsonschema")
    person = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}},
              "required": ["name"], "additionalProperties": False}
    s = ChatSession(smollm2, temperature=0)
    s.chat = Chat(template("gpt-oss"), eos_token=smollm2.chat.eos_token)
    reply = s.send("A person?", response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": person}},
                   max_tokens=40)
    jsonschema.validate(json.loads(reply.text), person)
    assert smollm2.tokenizer.decode(s.context.tokens).endswith(
        "<|start|>assistant<|channel|>final<|message|>" + reply.text + "<|end|>")


def test_parallel_tool_calls_false_keeps_the_first_call():
    tok = ScriptedTokenizer(specials=QWEN, words=("Hello", " world", "Paris"), eos="<|im_end|>", end_of_turn=())
    model = scripted_model(["<think>\nhm\n</think>\n\n" + TWO_CALLS], template=template("qwen3.5"), tokenizer=tok,
                           max_seq_len=8192)
    out = model.create_chat_completion([{"role": "user", "content": "Weather?"}], tools=[FORECAST, WEATHER],
                                       parallel_tool_calls=False, temperature=0)
    message = out["choices"][0]["message"]
    assert [{"type": c["type"], "function": {"name": c["function"]["name"],
                                             "arguments": json.loads(c["function"]["arguments"])}}
            for c in message["tool_calls"]] == TWO_CALLS_OPENAI[:1]
    assert message["reasoning_content"] == "hm"


# ---- through `infer serve`, read by the official openai client ------------------------------------
def test_openai_client_reads_xml_calls_and_reasoning_from_serve():
    pytest.importorskip("openai")
    from test_serve import app_server, client

    from infer.serve.app import create_app

    tok = ScriptedTokenizer(specials=QWEN, words=("Hello", " world", "Paris"), eos="<|im_end|>", end_of_turn=())
    reply = "<think>\nI need both.\n</think>\n\n" + TWO_CALLS
    model = scripted_model([reply] * 2, template=template("qwen3.5"), tokenizer=tok, max_seq_len=8192)
    messages = [{"role": "user", "content": "Weather?"}]
    with app_server(create_app(model)) as base:
        out = client(base).chat.completions.create(model="m", messages=messages, tools=[FORECAST, WEATHER],
                                                   temperature=0)
        message = out.choices[0].message
        assert out.choices[0].finish_reason == "tool_calls" and message.content in (None, "")
        assert message.model_extra["reasoning_content"] == "I need both."
        assert [{"type": c.type, "function": {"name": c.function.name, "arguments": json.loads(c.function.arguments)}}
                for c in message.tool_calls] == TWO_CALLS_OPENAI
        chunks = list(client(base).chat.completions.create(model="m", messages=messages, tools=[FORECAST, WEATHER],
                                                           temperature=0, stream=True))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == "I need both."
        streamed = [tc for d in deltas for tc in (d.tool_calls or [])]
        assert [{"type": c.type, "function": {"name": c.function.name, "arguments": json.loads(c.function.arguments)}}
                for c in streamed] == TWO_CALLS_OPENAI


# ---- Nemotron Nano 2 (nemotron_h): <SPECIAL_1x> turns, <think>, <TOOLCALL>[JSON list] ------------
NEMOTRON = ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<think>", "</think>", "<TOOLCALL>", "</TOOLCALL>")


def nemotron_session(script, **options):
    tok = ScriptedTokenizer(specials=NEMOTRON, words=("Hello", " world", "Paris"), eos="<SPECIAL_12>",
                            end_of_turn=())
    model = scripted_model(script, template=template("nemotron-nano-v2"), tokenizer=tok, max_seq_len=8192,
                           opener="<SPECIAL_11>Assistant\n", end_token="<SPECIAL_12>")
    return ChatSession(model, **options), tok


def test_nemotron_nano_v2_is_detected():
    chat = Chat(template("nemotron-nano-v2"))
    assert (chat.call_format, chat.tool_call_markers, chat.think_markers) == \
        (None, ("<TOOLCALL>", "</TOOLCALL>"), ("<think>", "</think>"))


def test_nemotron_nano_v2_thinking_two_calls_results_and_answer():
    """Calls as llama.cpp's Nemotron V2 format parses them: one JSON list between
    <TOOLCALL> and </TOOLCALL>; the history renders as jinja2 renders the template."""
    calls = ('<TOOLCALL>[{"name": "forecast", "arguments": {"city": "Paris", "days": 2}}, '
             '{"name": "get_weather", "arguments": {"city": "Rome"}}]</TOOLCALL>')
    s, tok = nemotron_session(["<think>\nI need both.\n</think>\n\n" + calls, "<think>\nDone.\n</think>\n\nSunny."],
                              tools=[FORECAST, WEATHER])
    prompt = s.chat.render([{"role": "user", "content": "Weather?"}], True, s.tools)
    assert prompt.endswith("<SPECIAL_11>Assistant\n<think>\n")   # the generation prompt opens the thinking
    reply = s.send("Weather?")
    assert (reply.thinking, reply.text, reply.finish_reason) == ("I need both.", "", "tool_calls")
    assert calls_of(reply) == [openai_call("forecast", {"city": "Paris", "days": 2}),
                               openai_call("get_weather", {"city": "Rome"})]
    for call, result in zip(reply.tool_calls, ("rain", "sun")):
        s.add_tool_result(call.id, result)
    reply = s.send()
    assert (reply.thinking, reply.text, reply.finish_reason) == ("Done.", "Sunny.", "stop")
    want = hf_render(template("nemotron-nano-v2"), _as_hf(s.history), False, tools=s.tools, bos_token="",
                     eos_token="<SPECIAL_12>")
    assert s.chat.render(s.history, False, s.tools) == want
    assert "<SPECIAL_11>User\n<TOOL_RESPONSE>[rain, sun]</TOOL_RESPONSE>" in want


def test_nemotron_nano_v2_reply_streams_the_same_at_every_split():
    text = ('plan\n</think>\n\nLet me look.\n'
            '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>')
    content, thinking, tools = split_everywhere(lambda: ReplyParser(
        ["<SPECIAL_12>"], think=("<think>", "</think>"), tool=("<TOOLCALL>", "</TOOLCALL>"), json_tools=True,
        in_thinking=True), text)
    assert (content.strip(), thinking.strip()) == ("Let me look.", "plan")
    assert [json.loads(t) for t in tools] == [{"name": "get_weather", "arguments": {"city": "Paris"}}]


def test_nemotron_nano_v2_malformed_call_list_is_a_tool_call_error():
    s, _ = nemotron_session(['<think>\nx\n</think>\n\n<TOOLCALL>[{"name": "get_weather", "arguments": '
                             '{"city": </TOOLCALL>'], tools=[WEATHER])
    reply = s.send("Weather?")
    assert (reply.text, reply.tool_calls, len(reply.tool_call_errors)) == ("", [], 1)
