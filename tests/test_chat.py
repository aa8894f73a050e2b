"""ChatSession's state machine, on the scripted variant (tests/scripted.py).

The scripted context computes its output from its own KV "cache", so these tests
check the cache as the model would see it: after every turn it must hold exactly
the tokens of the rendered history, tokenized independently here.
"""
import itertools
import json
import warnings

import pytest

from infer.chat import BaseModelWarning, ChatSession, Reply, ThinkingText, ToolCall, ToolCallError
from infer.runtime import ContextOverflowError
from scripted import CHATML, RaisingSampler, ScriptedTokenizer, scripted_model

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def history_ids(session):
    """The rendered history, tokenized as the model was trained (no session code)."""
    text = session.chat.render(session.history, add_generation_prompt=False, tools=session.tools)
    return session.tokenizer.encode(text, add_special=False, parse_special=True)


def chatml(messages):
    """ChatML by hand: what the scripted template must produce."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def collect(stream):
    items = list(stream)
    assert isinstance(items[-1], Reply) and not any(isinstance(i, Reply) for i in items[:-1])
    return items[:-1], items[-1]


# ---- plain turns and KV reuse --------------------------------------------------------------
def test_three_turns_prefill_only_new_tokens():
    model = scripted_model(["Hello world!", "Second answer.", "Third, ab."])
    s = ChatSession(model, system="Be brief.")
    ctx = s.context
    assert ctx.forwarded == 0
    for question, answer in [("hi", "Hello world!"), ("again", "Second answer."), ("last", "Third, ab.")]:
        before = list(ctx.tokens)
        calls_before = len(ctx.forward_calls)
        reply = s.send(question)
        assert reply.text == answer and reply.finish_reason == "stop"
        prompt_text = chatml(s.history[:-1]) + "<|im_start|>assistant\n"
        prompt = s.tokenizer.encode(prompt_text, add_special=False, parse_special=True)
        assert prompt[:len(before)] == before  # history so far is a prefix of the new prompt
        assert reply.prompt_tokens == len(prompt)
        assert reply.cached_tokens == len(before)
        calls = ctx.forward_calls[calls_before:]
        # one batched prefill of the new tokens, one decode step per generated token,
        # then the template's newline after <|im_end|> closes the turn
        assert calls[0] == (len(before), len(prompt) - len(before))
        answer_ids = s.tokenizer.encode(answer)
        assert reply.completion_tokens == len(answer_ids) + 1  # + <|im_end|>
        assert calls[1:] == [(len(prompt) + j, 1) for j in range(len(answer_ids) + 1)] + \
            [(len(prompt) + len(answer_ids) + 1, 1)]
        assert ctx.tokens == history_ids(s)
        assert s.tokenizer.decode(ctx.tokens) == chatml(s.history)
    assert [m["role"] for m in s.history] == ["system", "user", "assistant"] * 1 + ["user", "assistant"] * 2


def test_history_is_openai_shaped_and_copied():
    s = ChatSession(scripted_model(["Hello world!"]))
    s.send("hi")
    assert s.history == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello world!"}]
    s.history.append({"role": "user", "content": "not added"})
    assert len(s.history) == 2


def test_stream_pieces_join_to_reply_text():
    s = ChatSession(scripted_model(["Hello world! ab ab"]))
    pieces, reply = collect(s.stream("hi"))
    assert all(type(p) is str for p in pieces)
    assert "".join(pieces) == reply.text == "Hello world! ab ab"
    assert s.last_reply is reply


def test_reply_regenerated_from_non_canonical_tokens_is_reprefilled():
    # The model writes "ab" as two byte tokens; the vocabulary's canonical spelling is
    # one token.  History is the truth: the cache must hold the canonical tokens.
    tok = ScriptedTokenizer()
    a, b = tok.encode("a", add_special=False), tok.encode("b", add_special=False)
    assert tok.encode("ab", add_special=False) != a + b
    s = ChatSession(scripted_model([a + b + tok.encode("!")], tokenizer=tok))
    reply = s.send("x")
    assert reply.text == "ab!"
    assert s.context.tokens == history_ids(s)


def test_reset_keeps_system_and_reuses_its_prefix():
    s = ChatSession(scripted_model(["one", "two"]), system="S")
    s.send("q1")
    s.reset()
    assert s.history == [{"role": "system", "content": "S"}]
    reply = s.send("q2")
    system_ids = s.tokenizer.encode(chatml([{"role": "system", "content": "S"}]) + "<|im_start|>user\nq",
                                    add_special=False, parse_special=True)
    assert reply.cached_tokens == len(system_ids)
    assert s.context.tokens == history_ids(s)


# ---- thinking -------------------------------------------------------------------------
def test_thinking_lives_only_during_its_turn():
    tok = ScriptedTokenizer()
    think_id = tok.vocab.special_ids["<think>"]
    s = ChatSession(scripted_model(["<think>Let me see: ab.</think>\n\nHello world", "Sure."], tokenizer=tok))
    seen_in_cache = []
    pieces = []
    for item in s.stream("hi", show_thinking=True):
        seen_in_cache.append(think_id in s.context.tokens)
        pieces.append(item)
    reply = pieces.pop()
    assert reply.text == "Hello world" and reply.thinking == "Let me see: ab."
    assert "".join(p for p in pieces if isinstance(p, ThinkingText)) == reply.thinking
    assert "".join(p for p in pieces if not isinstance(p, ThinkingText)) == reply.text
    assert any(seen_in_cache)  # the answer was generated with the thinking in the cache
    # after the turn: history holds the answer alone, and so does the cache
    assert s.history[-1] == {"role": "assistant", "content": "Hello world"}
    expected = tok.encode(chatml(s.history), add_special=False, parse_special=True)
    assert s.context.n_past == len(expected)
    assert s.context.tokens == expected and think_id not in s.context.tokens
    # the next turn starts from the rolled-back cache
    reply2 = s.send("more")
    assert reply2.text == "Sure." and reply2.cached_tokens == len(expected)


def test_thinking_hidden_by_default():
    s = ChatSession(scripted_model(["<think>secret</think>Hello world"]))
    pieces, reply = collect(s.stream("hi"))
    assert "".join(pieces) == "Hello world" and reply.thinking == "secret"


def test_generation_prompt_that_opens_thinking():
    template = CHATML.replace("'<|im_start|>assistant\n'", "'<|im_start|>assistant\n<think>\n'")
    assert template != CHATML
    model = scripted_model(["plan</think>\n\nHello world"], template=template,
                           opener="<|im_start|>assistant\n<think>\n")
    s = ChatSession(model)
    assert s.chat.assistant_prefix.endswith("<think>\n")
    reply = s.send("hi")
    assert reply.thinking == "plan" and reply.text == "Hello world"
    assert s.context.tokens == history_ids(s)


def test_markers_spelled_in_bytes_are_withheld_while_streaming():
    # Here <think> is not a token: it arrives one byte at a time.  No piece of it may leak.
    tok = ScriptedTokenizer(specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    template = CHATML + "{# this model thinks in <think>...</think> #}"
    s = ChatSession(scripted_model(["<think>hm</think>Hi <thin", "next"], template=template, tokenizer=tok))
    assert s.chat.think_markers == ("<think>", "</think>")
    pieces, reply = collect(s.stream("x"))
    assert reply.thinking == "hm"
    assert pieces and all("<" not in p for p in pieces[:-1])
    # a tail that never became a marker is text after all
    assert "".join(pieces) == reply.text == "Hi <thin"


# ---- tool calls --------------------------------------------------------------------------
def test_tool_call_parsed_then_result_continues():
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    s = ChatSession(scripted_model(["Checking.\n" + call, "It is sunny in Paris."]), tools=TOOLS)
    pieces, reply = collect(s.stream("weather in Paris?"))
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == [ToolCall("get_weather", {"city": "Paris"}, reply.tool_calls[0].id)]
    assert isinstance(reply.tool_calls[0].arguments, dict)
    assert "".join(pieces) == reply.text == "Checking.\n"  # the call itself is not streamed as text
    last = s.history[-1]
    assert last["role"] == "assistant" and last["content"] == "Checking.\n"
    assert json.loads(last["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert s.context.tokens == history_ids(s)
    # the template does not describe tools: the system prompt does
    assert s.history[0]["role"] == "user"
    assert "get_weather" in s.chat.render(s.history, tools=s.tools).split("<|im_start|>user")[0]

    s.add_tool_result(reply.tool_calls[0].id, {"sky": "sunny"})
    assert s.history[-1] == {"role": "tool", "tool_call_id": reply.tool_calls[0].id,
                             "name": "get_weather", "content": '{"sky": "sunny"}'}
    reply2 = s.send()
    assert reply2.text == "It is sunny in Paris." and reply2.finish_reason == "stop"
    assert "<|im_start|>tool\n{\"sky\": \"sunny\"}<|im_end|>" in s.tokenizer.decode(s.context.tokens)
    assert s.context.tokens == history_ids(s)


def test_two_tool_calls_in_one_reply():
    calls = ('<tool_call>{"name": "get_weather", "arguments": {"city": "A"}}</tool_call>\n'
             '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"B\\"}"}</tool_call>')
    s = ChatSession(scripted_model([calls, "done"]), tools=TOOLS)
    reply = s.send("two cities")
    assert [c.arguments for c in reply.tool_calls] == [{"city": "A"}, {"city": "B"}]
    assert len({c.id for c in reply.tool_calls}) == 2
    s.add_tool_result(reply.tool_calls[1].id, "rain")
    s.add_tool_result("get_weather", "sun")  # by name: the first call of that name
    assert [m.get("tool_call_id") for m in s.history[-2:]] == [reply.tool_calls[1].id, reply.tool_calls[0].id]
    assert s.send().text == "done"


@pytest.mark.parametrize("body, words", [
    ('{"name": "get_weather", "arguments": {"city": "Paris"', "not valid JSON"),
    ('["get_weather"]', "JSON object with a string \"name\""),
    ('{"name": "get_weather", "arguments": [1, 2]}', "must be a JSON object"),
    ('{"name": "launch_rockets", "arguments": {}}', "unknown tool 'launch_rockets'"),
])
def test_malformed_tool_call_is_an_error_object(body, words):
    s = ChatSession(scripted_model([f"<tool_call>{body}</tool_call>", "ok"]), tools=TOOLS)
    pieces, reply = collect(s.stream("go"))  # no exception in the middle of the stream
    assert reply.tool_calls == [] and reply.finish_reason == "stop"
    [error] = reply.tool_call_errors
    assert isinstance(error, ToolCallError) and words in error.message and error.raw == body
    assert s.context.tokens == history_ids(s)
    assert s.send("try again").text == "ok"


def test_unclosed_tool_call_at_end_of_turn_is_still_parsed():
    s = ChatSession(scripted_model(['<tool_call>{"name": "get_weather", "arguments": {"city": "X"}}']),
                    tools=TOOLS)
    reply = s.send("go")
    assert reply.tool_calls[0].arguments == {"city": "X"}


def test_plain_json_tool_call_when_template_has_no_markers():
    tok = ScriptedTokenizer(specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    script = ['  {"name": "get_weather", "parameters": {"city": "Oslo"}}', "Cold.", '{"not": "a call"}']
    s = ChatSession(scripted_model(script, tokenizer=tok), tools=TOOLS)
    assert s.chat.tool_call_markers is None
    pieces, reply = collect(s.stream("weather?"))
    assert pieces == [] and reply.tool_calls[0].name == "get_weather"
    assert reply.tool_calls[0].arguments == {"city": "Oslo"}
    system = s.chat.render(s.history, tools=s.tools).split("<|im_start|>user")[0]
    assert "get_weather" in system and '{"name": "<tool name>"' in system
    s.add_tool_result("get_weather", "-5C")
    assert s.send().text == "Cold."
    # JSON that is not a call is the answer, streamed once it is known not to be a call
    pieces, reply = collect(s.stream("json please"))
    assert "".join(pieces) == reply.text == '{"not": "a call"}' and reply.tool_calls == []
    assert s.context.tokens == history_ids(s)


# Granite 3.3's layout, abridged: roles between <|start_of_role|> and <|end_of_role|>, the tools
# as their own turn, the call format stated in the system prompt, and no tool_calls rendering.
GRANITE = (
    "{%- if tools %}{% set sys = 'When a tool is required to answer the query, respond only with "
    "<|tool_call|> followed by a JSON list of tools used.' %}{% else %}{% set sys = 'Hi.' %}{% endif %}"
    "{{- '<|start_of_role|>system<|end_of_role|>' + sys + '<|end_of_text|>\n' }}"
    "{%- if tools %}{{- '<|start_of_role|>available_tools<|end_of_role|>' + tools | tojson(indent=4) "
    "+ '<|end_of_text|>\n' }}{% endif %}"
    "{%- for message in messages %}"
    "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\n' }}"
    "{%- if loop.last and add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{% endif %}"
    "{%- endfor %}")


@pytest.mark.parametrize("n_calls", [1, 2])
def test_granite_tool_call_list_is_parsed_and_kept_as_written(n_calls):
    """Granite 3.x calls tools as <|tool_call|>[{"name": ..., "arguments": ...}, ...]; its
    template renders an assistant message's content only, so the calls go back into the
    history as the model wrote them."""
    specials = ("<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>")
    tok = ScriptedTokenizer(specials=specials, eos="<|end_of_text|>", end_of_turn=())
    written = '<|tool_call|>[' + ', '.join(
        f'{{"name": "get_weather", "arguments": {{"city": "{c}"}}}}' for c in ["Paris", "Rome"][:n_calls]) + ']'
    model = scripted_model([written, "Warm."], template=GRANITE, tokenizer=tok,
                           opener="<|start_of_role|>assistant<|end_of_role|>", end_token="<|end_of_text|>")
    s = ChatSession(model, tools=TOOLS)
    pieces, reply = collect(s.stream("weather?"))
    assert pieces == [] and reply.text == "" and reply.finish_reason == "tool_calls"
    assert [c.arguments["city"] for c in reply.tool_calls] == ["Paris", "Rome"][:n_calls]
    for call in reply.tool_calls:
        s.add_tool_result(call.id, "20C")
    assert s.send().text == "Warm."
    text = tok.decode(s.context.tokens)
    assert "<|start_of_role|>user<|end_of_role|>weather?<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>" \
           + written + "<|end_of_text|>\n<|start_of_role|>tool<|end_of_role|>20C<|end_of_text|>\n" in text


def test_template_that_renders_tools_and_tool_calls_itself():
    template = (
        "{% if tools %}<|im_start|>system\nTOOLS {{ tools | tojson }}<|im_end|>\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "{% for c in m.tool_calls or [] %}<tool_call>{{ {'name': c.function.name, "
        "'arguments': c.function.arguments} | tojson }}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    s = ChatSession(scripted_model([call, "Sunny."], template=template), tools=TOOLS)
    assert s.chat.describes_tools and s.chat.renders_tool_calls
    reply = s.send("weather")
    assert reply.tool_calls[0].arguments == {"city": "Paris"}
    text = s.tokenizer.decode(s.context.tokens)
    assert text.startswith("<|im_start|>system\nTOOLS " + json.dumps(TOOLS))
    assert text.endswith("<|im_start|>assistant\n" + call + "<|im_end|>\n")
    s.add_tool_result("get_weather", "sun")
    assert s.send().text == "Sunny."


# ---- ends of turns --------------------------------------------------------------------------
def test_end_of_turn_injected_after_max_tokens():
    tok = ScriptedTokenizer()
    im_end = tok.vocab.special_ids["<|im_end|>"]
    s = ChatSession(scripted_model(["Hello world and more words", "Fine."], tokenizer=tok), max_tokens=3)
    reply = s.send("talk")
    assert reply.finish_reason == "length" and reply.completion_tokens == 3
    assert reply.text == "Hello world "
    assert s.context.tokens[-2:] == [im_end, tok.encode("\n")[0]]
    assert s.context.tokens == history_ids(s)
    assert s.send("ok", max_tokens=50).text == "Fine."


def test_max_tokens_per_call_and_full_context_end_the_turn():
    s = ChatSession(scripted_model(["Hello world and more words"] * 2, max_seq_len=64))
    assert s.send("a", max_tokens=2).text == "Hello world"
    s2 = ChatSession(scripted_model(["x" * 200]), n_ctx=48)
    reply = s2.send("long")
    assert reply.finish_reason == "length"
    assert s2.context.n_past <= 48 and s2.context.tokens == history_ids(s2)


def test_stop_strings_cut_the_reply_and_are_never_streamed():
    s = ChatSession(scripted_model(["Hello world! and then", "Hello world!"]), stop=["world!"])
    pieces, reply = collect(s.stream("hi"))
    assert reply.text == "Hello " == "".join(pieces) and reply.finish_reason == "stop"
    assert s.context.tokens == history_ids(s)
    assert s.send("again", stop="llo").text == "He"


def test_multibyte_characters_split_across_tokens():
    s = ChatSession(scripted_model(["naïve café ☕ done"]))
    pieces, reply = collect(s.stream("hi"))
    assert reply.text == "naïve café ☕ done" == "".join(pieces)
    assert not any("\ufffd" in p for p in pieces)


def test_closing_the_stream_keeps_the_partial_reply():
    s = ChatSession(scripted_model(["Hello world and more", "next"]))
    stream = s.stream("hi")
    assert next(stream) == "Hello"
    stream.close()
    assert s.last_reply.finish_reason == "interrupted"
    assert s.history[-1] == {"role": "assistant", "content": "Hello"}
    assert s.context.tokens == history_ids(s)
    assert s.send("go on").text == "next"


@pytest.mark.parametrize("then", ["send", "reset", "history"])
def test_a_stream_left_suspended_ends_before_the_session_changes(then):
    """A ``break`` out of a stream that stays referenced: the next turn (or reset, or a
    new history) first ends it as closing would.  Before, it ended whenever it was
    garbage-collected, appending its partial reply to the history of later turns and
    rolling the cache back to that."""
    import gc

    s = ChatSession(scripted_model(["Hello world and more", "next"]))
    stream = s.stream("hi")
    first = []
    for piece in stream:
        first.append(piece)
        break
    assert first == ["Hello"]
    if then == "send":
        assert s.send("go on").text == "next"
        expected = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"},
                    {"role": "user", "content": "go on"}, {"role": "assistant", "content": "next"}]
    elif then == "reset":
        s.reset()
        expected = []
    else:
        expected = [{"role": "user", "content": "other"}]
        s.history = expected
    del stream
    gc.collect()
    assert s.history == expected
    if then == "send":
        assert s.last_reply.text == "next" and s.last_reply.finish_reason == "stop"
        assert s.context.tokens == history_ids(s)


def test_a_dropped_stream_ends_its_turn_at_once():
    """The session keeps no strong reference to its stream: dropping the stream closes
    it on the spot (no cycle left for the garbage collector), so its turn ends before
    anything else uses the context."""
    import gc

    s = ChatSession(scripted_model(["Hello world and more", "next"]))
    gc.disable()
    try:
        stream = s.stream("hi")
        assert next(stream) == "Hello"
        del stream
        assert s.last_reply is not None and s.last_reply.finish_reason == "interrupted"
        assert s.context.tokens == history_ids(s)
    finally:
        gc.enable()


def test_ctrl_c_during_generation_leaves_a_usable_session():
    s = ChatSession(scripted_model(["Hello world and more", "next"]),
                    sampler=RaisingSampler(3, KeyboardInterrupt()))
    got = []
    with pytest.raises(KeyboardInterrupt):
        for piece in s.stream("hi"):
            got.append(piece)
    assert "".join(got) == "Hello world"
    assert s.last_reply.finish_reason == "interrupted" and s.history[-1]["content"] == "Hello world"
    assert s.context.tokens == history_ids(s)
    assert s.send("go on").text == "next"


def test_options_for_a_new_context_are_refused_beside_context():
    """n_ctx beside context= was ignored without a word (the sampling keywords were
    already refused): the session ran in the given context's size."""
    model = scripted_model(["ok"])
    ctx = model.create_context(n_ctx=64)
    for options in (dict(n_ctx=4096), dict(temperature=0), dict(sampler=ctx.sampler)):
        with pytest.raises(ValueError, match="give them to the context"):
            ChatSession(model, context=ctx, **options)
    assert ChatSession(model, context=ctx).context.n_ctx == 64


def test_overflowing_prompt_raises_before_touching_history():
    s = ChatSession(scripted_model(["ok"]), n_ctx=40)
    with pytest.raises(ContextOverflowError, match="does not fit"):
        s.send("y" * 100)
    assert s.history == [] and s.context.n_past == 0
    assert s.send("hi").text == "ok"


# ---- misuse -----------------------------------------------------------------------------------
def test_misuse_gets_clear_errors():
    s = ChatSession(scripted_model(["ok"]))
    with pytest.raises(TypeError, match="text"):
        s.send(42)
    with pytest.raises(ValueError, match="text"):
        s.send()
    with pytest.raises(ValueError, match="call_id_or_name"):
        s.add_tool_result("nothing", "x")
    with pytest.raises(TypeError, match="tools"):
        ChatSession(scripted_model([]), tools={"name": "f"})
    with pytest.raises(ValueError, match=r"tools\[0\]"):
        ChatSession(scripted_model([]), tools=[{"type": "function", "function": {}}])
    with pytest.raises(ValueError, match="max_tokens"):
        ChatSession(scripted_model([]), max_tokens=0)
    with pytest.raises(ValueError, match="stop"):
        ChatSession(scripted_model([]), stop=[""])
    with pytest.raises(TypeError, match="system"):
        ChatSession(scripted_model([]), system=3)


def test_stream_is_invalidated_by_a_history_change():
    s = ChatSession(scripted_model(["a", "b"]))
    stale = s.stream("one")
    s.send("two")
    with pytest.raises(RuntimeError, match="changed"):
        next(stale)
    assert [m["content"] for m in s.history] == ["two", "a"]


def test_gemma_template_folds_system_and_tool_results():
    gemma = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
             "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
             "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
             "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}"
             "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
             "'<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
             "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")
    specials = ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>")
    tok = ScriptedTokenizer(specials=specials, bos="<bos>", eos="<eos>", end_of_turn=("<end_of_turn>",))
    call = '{"name": "get_weather", "arguments": {"city": "Rome"}}'
    model = scripted_model([call, "Warm."], template=gemma, tokenizer=tok,
                           opener="<start_of_turn>model\n", end_token="<end_of_turn>")
    s = ChatSession(model, system="Be kind.", tools=TOOLS)
    reply = s.send("Rome?")
    assert reply.tool_calls[0].arguments == {"city": "Rome"}
    s.add_tool_result("get_weather", "25C")
    s.add_tool_result("get_weather", "sunny")  # two results: still one user turn
    assert s.send().text == "Warm."
    text = s.tokenizer.decode(s.context.tokens)
    assert text.startswith("<bos><start_of_turn>user\nBe kind.\n\nYou can call these tools:")
    assert ("<start_of_turn>user\nResult of get_weather: 25C\nResult of get_weather: sunny<end_of_turn>\n"
            in text)
    assert text.endswith("<start_of_turn>model\nWarm.<end_of_turn>\n")
    assert s.context.tokens == history_ids(s)


def test_closing_after_the_last_piece_still_records_the_whole_reply():
    s = ChatSession(scripted_model(["Hello world", "next"]))
    stream = s.stream("hi")
    assert "".join(itertools.islice(stream, 2)) == "Hello world"
    stream.close()  # before the Reply was taken
    assert s.history[-1] == {"role": "assistant", "content": "Hello world"}
    assert s.context.tokens == history_ids(s)


def test_a_failing_turn_is_dropped_from_history():
    s = ChatSession(scripted_model(["Hello world", "Hello"]),
                    sampler=RaisingSampler(5, MemoryError("simulated failure")))
    assert s.send("first").text == "Hello world"  # samples 1-3: Hello, " world", <|im_end|>
    with pytest.raises(MemoryError):
        s.send("second")  # fails on its second sample
    assert [m["content"] for m in s.history] == ["first", "Hello world"]
    assert s.send("third").text == "Hello"
    assert s.context.tokens == history_ids(s)


# ---- the state machine with the real tokenizers of the test models -----------------------------
def _real(name):
    from infer.tokenizer import Tokenizer
    import _tok_models

    md = _tok_models.metadata(_tok_models.installed_path(name))
    return md, Tokenizer.from_metadata(md)


def test_smollm2_tokenizer_and_template_keep_the_cache_in_step():
    md, tok = _real("smollm2")
    script = ["The capital of France is Paris.", "Rome is the capital of Italy 🇮🇹, I think.", "Bye!"]
    model = scripted_model(script, tokenizer=tok, metadata=md)
    assert model.chat.source == md["tokenizer.chat_template"]
    assert model.chat.think_markers is None and model.chat.tool_call_markers is None
    s = ChatSession(model)
    im_end = tok.vocab.token_id("<|im_end|>")
    assert im_end in s._stop_ids
    for question, answer in zip(["France?", "Italy?", "ok"], script):
        before = len(s.context.tokens)
        pieces, reply = collect(s.stream(question))
        assert reply.text == "".join(pieces) == answer
        assert reply.cached_tokens == before
        # all generated tokens are kept: only the new prompt and the closing newline were prefilled
        assert s.context.forwarded == len(s.context.tokens)
        assert s.context.tokens == history_ids(s)
    text = tok.decode(s.context.tokens)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\nBye!<|im_end|>\n")


def test_gemma3_file_without_template_uses_the_gemma_fallback():
    md, tok = _real("gemma3")
    assert not md.get("tokenizer.chat_template")
    model = scripted_model(["Hello there.", "Sure: 2 + 2 = 4."], tokenizer=tok, metadata=md,
                           opener="<start_of_turn>model\n", end_token="<end_of_turn>")
    assert model.chat.family == "gemma" and model.chat.bos_token == "<bos>"
    with pytest.warns(BaseModelWarning, match="no chat template of its own.*base model.*built-in 'gemma'"):
        s = ChatSession(model, system="Answer briefly.")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ChatSession(model)  # once per model
    assert s.send("Hi").text == "Hello there."
    assert s.send("2+2?").text == "Sure: 2 + 2 = 4."
    bos = tok.vocab.bos_token_id
    assert s.context.tokens[0] == bos and s.context.tokens.count(bos) == 1  # no double BOS
    assert tok.decode(s.context.tokens) == (
        "<bos><start_of_turn>user\nAnswer briefly.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello there."
        "<end_of_turn>\n<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\nSure: 2 + 2 = 4."
        "<end_of_turn>\n")
    assert s.context.tokens == history_ids(s)


def test_real_sampler_at_temperature_zero_follows_the_script():
    from infer.sampler import Sampler

    s = ChatSession(scripted_model(["Hello world!"]), sampler=Sampler(temperature=0))
    assert s.send("hi").text == "Hello world!"


def test_template_kwargs_reach_the_template():
    # Qwen3-style switch: with enable_thinking false the generation prompt closes an
    # empty thinking block, which history does not keep.
    template = CHATML.replace(
        "{{ '<|im_start|>assistant\n' }}",
        "{{ '<|im_start|>assistant\n' }}{% if enable_thinking is defined and not enable_thinking %}"
        "{{ '<think>\n\n</think>\n\n' }}{% endif %}")
    assert template != CHATML
    # the scripted model answers after the whole generation prompt; history keeps no
    # empty block, so every turn looks like its first one to it
    model = scripted_model(["Hello world"], template=template,
                           opener="<|im_start|>assistant\n<think>\n\n</think>\n\n")
    s = ChatSession(model, template_kwargs={"enable_thinking": False})
    pieces, reply = collect(s.stream("hi"))
    assert reply.text == "Hello world" and reply.thinking == ""
    text = s.tokenizer.decode(s.context.tokens)
    assert text.endswith("<|im_start|>assistant\nHello world<|im_end|>\n")  # the empty block is gone
    reply = s.send("more")
    assert reply.text == "Hello world" and reply.cached_tokens == len(history_ids(s)) - len(
        s.tokenizer.encode("<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\nHello world<|im_end|>\n",
                           parse_special=True))
    assert s.tokenizer.decode(s.context.tokens) == chatml(s.history)
    with pytest.raises(TypeError, match="template_kwargs"):
        ChatSession(scripted_model([]), template_kwargs=[("enable_thinking", False)])


def test_trim_history_drops_the_oldest_exchanges_to_fit():
    script = ["First answer here.", "Second answer here.", "Third answer here.", "Fourth."]
    # token counts: system turn 11, user turn 8, opener 3, reply 18 + <|im_end|> + newline
    s = ChatSession(scripted_model(script, max_seq_len=64), system="S", trim_history=True, max_tokens=20)
    s.send("one")
    assert s.context.n_past == 11 + 8 + 3 + 20
    s.send("two")  # 42 + 8 + 3 = 53 prompt tokens leave 11 < 20 + 3 for the reply: drop "one"
    assert [m["content"] for m in s.history] == ["S", "two", "First answer here."]
    # the scripted model saw one assistant opener again: its first reply
    assert s.context.tokens == history_ids(s)
    assert s.context.n_past == 11 + 8 + 3 + 20
    s3 = ChatSession(scripted_model(script, max_seq_len=64), system="S", max_tokens=20, trim_history=False)
    s3.send("one")
    reply = s3.send("two")  # without trimming the reply gets what is left: 64 - 53 - 3 tokens
    assert reply.text == "Second a" and reply.finish_reason == "length"
    assert s3.context.tokens == history_ids(s3) and s3.context.n_past <= 64
    s2 = ChatSession(scripted_model(script, max_seq_len=64), system="S", trim_history=True)
    with pytest.raises(ContextOverflowError, match="does not fit"):
        s2.send("x" * 60)  # nothing older to drop
    assert s2.history == [{"role": "system", "content": "S"}]


def test_history_can_be_replaced_like_a_chat_completions_request():
    s = ChatSession(scripted_model(["Hello world!", "Second.", "Third."]))
    s.send("hi")
    held = len(s.context.tokens)
    # a client resends the conversation with a new user turn: only that turn is new
    s.history = s.history + [{"role": "user", "content": "and?"}]
    reply = s.send()
    assert reply.text == "Second." and reply.cached_tokens == held
    # an edited earlier turn: the cache is kept up to the edit
    edited = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
              {"role": "user", "content": "x"}]
    s.history = edited
    reply = s.send()
    assert reply.text == "Second."
    assert s.history[:3] == edited and s.context.tokens == history_ids(s)
    prefix = s.tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello",
                                parse_special=True)
    assert reply.cached_tokens == len(prefix)
    with pytest.raises(TypeError, match=r"history\[0\]"):
        s.history = [{"content": "no role"}]


def test_template_that_refuses_to_end_on_an_assistant_message():
    template = CHATML.replace("{% for message in messages %}",
                              "{% if messages[-1].role == 'assistant' %}{{ raise_exception('no prefill') }}"
                              "{% endif %}{% for message in messages %}")
    assert template != CHATML
    s = ChatSession(scripted_model(["Hello world", "ab"], template=template))
    assert s.send("hi").text == "Hello world"
    reply = s.send("again")
    assert reply.text == "ab"
    # the turn could not be closed by a render, so the next one matched what it could
    assert reply.cached_tokens == len(s.tokenizer.encode(chatml(s.history[:2]), parse_special=True)) - 1


def test_a_last_assistant_message_is_continued():
    """A history that ends with an assistant message continues it (llama-server's
    prefill): the prompt is the generation prompt followed by its text, the Reply holds
    what was added, history holds the whole message, and the cache is its rendering."""
    s = ChatSession(scripted_model(["Paris is the capital of France."]))
    s.history = [{"role": "user", "content": "Capital?"}, {"role": "assistant", "content": "Paris is"}]
    prompt_text = chatml([{"role": "user", "content": "Capital?"}]) + "<|im_start|>assistant\nParis is"
    r = s.send()
    assert r.text == " the capital of France." and r.finish_reason == "stop"
    assert r.prompt_tokens == len(s.tokenizer.encode(prompt_text, add_special=False, parse_special=True))
    assert s.history[-1] == {"role": "assistant", "content": "Paris is the capital of France."}
    assert s.context.tokens == history_ids(s)
    for last in ({"role": "assistant", "content": ""},
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}):
        s.history = [{"role": "user", "content": "Capital?"}, last]
        with pytest.raises(ValueError, match="cannot be continued"):
            s.stream()
