"""infer.api: the OpenAI shapes, checked by the official client's own types.

The scripted variant (tests/scripted.py) is the oracle for content: its reply is
its script, so text, tool calls, thinking and token counts are known exactly.
`openai.types` validates every dict and chunk (the shape the official client
parses); the prompt token counts are the hand-rendered ChatML, tokenized here.
"""
import json

import pytest

from infer import api
from infer.api import InvalidRequestError, UnsupportedOptionError
from scripted import ScriptedTokenizer, scripted_model

openai_types = pytest.importorskip("openai.types")
from openai.types import Completion  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
USER = [{"role": "user", "content": "Hi"}]


def chatml_ids(messages, generation_prompt=True):
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    if generation_prompt:
        text += "<|im_start|>assistant\n"
    return ScriptedTokenizer().encode(text, add_special=False, parse_special=True)


def reply_ids(text):
    return ScriptedTokenizer().encode(text, add_special=False, parse_special=True)


def test_chat_completion_shape_content_and_usage():
    model = scripted_model(["Hello world!"])
    out = model.create_chat_completion(USER, temperature=0)
    ChatCompletion.model_validate(out)
    assert json.loads(json.dumps(out)) == out  # plain JSON values only
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    (choice,) = out["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"] == {"role": "assistant", "content": "Hello world!"}
    n_prompt = len(chatml_ids(USER))
    n_reply = len(reply_ids("Hello world!")) + 1  # the end-of-turn token is generated too
    assert out["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": n_reply,
                            "total_tokens": n_prompt + n_reply, "prompt_tokens_details": {"cached_tokens": 0}}


def test_next_turn_reuses_the_cached_prefix():
    model = scripted_model(["Hello world!", "Second."])
    first = model.create_chat_completion(USER, temperature=0)
    history = USER + [first["choices"][0]["message"], {"role": "user", "content": "More"}]
    second = model.create_chat_completion(history, temperature=0)
    assert second["choices"][0]["message"]["content"] == "Second."
    # everything up to the first turn's end was in the cache
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == len(chatml_ids(history[:2], False))
    assert second["usage"]["prompt_tokens"] == len(chatml_ids(history))


def test_streamed_chunks_join_to_the_same_reply():
    model = scripted_model(["Hello world!"] * 2)
    whole = model.create_chat_completion(USER, temperature=0)
    chunks = list(model.create_chat_completion(USER, temperature=0, stream=True,
                                               stream_options={"include_usage": True}))
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
        assert c["object"] == "chat.completion.chunk"
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 2) + ["stop"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == \
        whole["usage"]["completion_tokens"]


def test_tool_call_comes_back_as_openai_tool_calls():
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    model = scripted_model([call, call])
    out = model.create_chat_completion([{"role": "user", "content": "weather?"}], tools=TOOLS, temperature=0)
    ChatCompletion.model_validate(out)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None
    (tc,) = message["tool_calls"]
    assert tc["type"] == "function" and tc["function"]["name"] == "get_weather"
    assert json.loads(tc["function"]["arguments"]) == {"city": "Paris"}
    chunks = list(model.create_chat_completion([{"role": "user", "content": "weather?"}], tools=TOOLS,
                                               temperature=0, stream=True))
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert [(tc["index"], tc["function"]["name"], json.loads(tc["function"]["arguments"])) for tc in calls] == \
        [(0, "get_weather", {"city": "Paris"})]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_choice_none_hides_the_tools_from_the_model():
    model = scripted_model(["Fine."])
    out = model.create_chat_completion(USER, tools=TOOLS, tool_choice="none", temperature=0)
    # the prompt is the plain conversation: no tool description in a system turn
    assert out["usage"]["prompt_tokens"] == len(chatml_ids(USER))


def test_thinking_is_reasoning_content():
    model = scripted_model(["<think>Let me see.</think>Paris.", "<think>Let me see.</think>Paris."])
    out = model.create_chat_completion(USER, temperature=0)
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "Paris.",
                                            "reasoning_content": "Let me see."}
    chunks = list(model.create_chat_completion(USER, temperature=0, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Let me see."
    assert "".join(d.get("content", "") for d in deltas) == "Paris."


@pytest.mark.parametrize("thought, reasoning", [
    ("\nLet me see.\n", "Let me see."),  # Qwen3's and DeepSeek-R1's layout: <think>\n...\n</think>
    ("\n\nA\n\nB\n\n", "A\n\nB"),  # the thought's own blank line stays
    ("\n\n", ""),
])
def test_streamed_reasoning_content_adds_up_to_the_reply_s(thought, reasoning):
    """The newlines that lay out a thinking block are not the thought's: the streamed
    reasoning_content deltas add up to the message's reasoning_content, as content's do
    (llama-server strips the reasoning in both)."""
    reply = f"<think>{thought}</think>\n\nParis."
    model = scripted_model([reply] * 2)
    out = model.create_chat_completion(USER, temperature=0)
    assert out["choices"][0]["message"].get("reasoning_content", "") == reasoning
    deltas = [c["choices"][0]["delta"] for c in model.create_chat_completion(USER, temperature=0, stream=True)]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == reasoning
    assert "".join(d.get("content", "") for d in deltas) == "Paris."


def test_reasoning_cut_off_by_max_tokens_streams_as_it_returns():
    model = scripted_model(["<think>\nLet me see, this is long.\n</think>Paris."] * 2)
    for max_tokens in range(2, 14):
        out = model.create_chat_completion(USER, temperature=0, max_tokens=max_tokens)
        deltas = [c["choices"][0]["delta"] for c in
                  model.create_chat_completion(USER, temperature=0, max_tokens=max_tokens, stream=True)]
        streamed = "".join(d.get("reasoning_content", "") for d in deltas)
        assert streamed == out["choices"][0]["message"].get("reasoning_content", ""), max_tokens
        assert not streamed.startswith("\n") and not streamed.endswith("\n")


def test_completion_shape_echo_and_stop():
    model = scripted_model([])
    tok = model.tokenizer
    # the scripted engine ends every turn at once when no assistant opener is in the prompt
    out = model.create_completion("Hello", max_tokens=4, temperature=0, echo=True)
    Completion.model_validate(out)
    assert out["object"] == "text_completion"
    assert out["choices"][0]["text"] == "Hello" and out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["prompt_tokens"] == len(tok.encode("Hello"))
    opener = "<|im_start|>assistant\n"
    model = scripted_model(["one two three"] * 2)
    ids = tok.encode(opener, add_special=False, parse_special=True)
    out = model.create_completion(ids, max_tokens=20, temperature=0, stop=" two")
    assert out["choices"][0]["text"] == "one" and out["choices"][0]["finish_reason"] == "stop"
    chunks = list(model.create_completion(ids, max_tokens=3, temperature=0, stream=True))
    for c in chunks:  # OpenAI streams null finish reasons, which its (non-stream) type does not allow
        Completion.model_validate(dict(c, choices=[dict(c["choices"][0], finish_reason="stop")]))
        assert c["object"] == "text_completion" and c["choices"][0]["logprobs"] is None
    assert "".join(c["choices"][0]["text"] for c in chunks) == "one"  # 3 byte tokens
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_n_choices_are_indexed():
    model = scripted_model(["A.", "A."])
    out = model.create_chat_completion(USER, temperature=0, n=2)
    ChatCompletion.model_validate(out)
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert [c["message"]["content"] for c in out["choices"]] == ["A.", "A."]
    assert out["usage"]["completion_tokens"] == 2 * (len(reply_ids("A.")) + 1)


def test_logit_bias_bans_a_token():
    model = scripted_model(["Hello world!"])
    banned = reply_ids("Hello world!")[0]
    out = model.create_chat_completion(USER, temperature=0, logit_bias={str(banned): -100}, max_tokens=3)
    assert not out["choices"][0]["message"]["content"].startswith("Hello")


def test_sampler_gets_the_penalties():
    model = scripted_model(["Hi."])
    ctx = model.create_context()
    api.create_chat_completion(model, USER, context=ctx, presence_penalty=0.5, frequency_penalty=0.25,
                               repeat_penalty=1.1, top_k=7, top_p=0.9, min_p=0.1, temperature=0.7, seed=3)
    s = ctx.sampler
    assert (s.presence_penalty, s.frequency_penalty, s.repeat_penalty, s.top_k, s.top_p, s.min_p,
            s.temperature, s.seed) == (0.5, 0.25, 1.1, 7, 0.9, 0.1, 0.7, 3)


def test_llama_cpp_sampling_spellings():
    """seed=-1 is llama.cpp's random seed (a fresh one per request, as seed=None) and
    top_p=0, which OpenAI's API takes, keeps the most likely token."""
    model = scripted_model(["Hi."] * 2)
    ctx = model.create_context()
    model.create_chat_completion(USER, context=ctx, seed=-1, top_p=0)
    assert ctx.sampler._seed_arg is None and ctx.sampler.top_p == 0.0
    with pytest.raises(InvalidRequestError) as info:
        model.create_chat_completion(USER, seed=-2)
    assert info.value.param == "seed"


@pytest.mark.parametrize("options, param", [
    (dict(temperature="hot"), "temperature"),
    (dict(top_k=1.5), "top_k"),
    (dict(top_p=3.0), "top_p"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=10 ** 6), "max_tokens"),
    (dict(n=0), "n"),
    (dict(seed=-2), "seed"),
    (dict(stop=[1]), "stop"),
    (dict(stream="yes"), "stream"),
    (dict(stream_options={"include_usage": True}), "stream_options"),
    (dict(logit_bias={"x": 1}), "logit_bias"),
    (dict(logit_bias={"99999": 1}), "logit_bias"),
    (dict(tools="get_weather"), "tools"),
    (dict(tool_choice=3), "tool_choice"),
    (dict(tool_choice="required"), "tool_choice"),  # no tools to call
    (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
    (dict(tools=TOOLS, tool_choice={"type": "function", "function": "get_weather"}), "tool_choice"),
    (dict(top_logprobs=2), "top_logprobs"),  # without logprobs=True
    (dict(logprobs="yes"), "logprobs"),
    (dict(response_format={"type": "xml"}), "response_format"),
    (dict(response_format={"type": "json_schema", "json_schema": {"schema": {"type": 7}}}), "response_format"),
])
def test_bad_options_name_their_field(options, param):
    model = scripted_model(["Hi."])
    with pytest.raises(InvalidRequestError) as info:
        model.create_chat_completion(USER, **options)
    assert info.value.param == param and not isinstance(info.value, UnsupportedOptionError)


def test_tool_call_ids_are_unique_across_requests():
    """Each tool call gets an id of its own, as OpenAI's and llama-server's do: an agent
    matches a tool result to its call by id over many turns, and every request here is
    a fresh session, whose first call was always 'call_0'."""
    two = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
           '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')
    model = scripted_model([two] * 4)
    weather = [{"role": "user", "content": "weather?"}]
    ids = []
    for stream in (False, False, True):
        out = model.create_chat_completion(weather, tools=TOOLS, temperature=0, stream=stream)
        if stream:
            calls = [tc for c in out for tc in c["choices"][0]["delta"].get("tool_calls", [])]
        else:
            calls = out["choices"][0]["message"]["tool_calls"]
        assert [json.loads(tc["function"]["arguments"])["city"] for tc in calls] == ["Paris", "Rome"]
        ids += [tc["id"] for tc in calls]
    assert len(set(ids)) == len(ids) == 6, ids
    assert all(isinstance(i, str) and i.startswith("call_") for i in ids)


def test_a_forced_tool_with_an_invalid_schema_names_tools():
    """A forced call's grammar comes from the tool's ``parameters``: when that schema does
    not compile, the client's mistake is in ``tools`` (OpenAI's param), not ``messages``."""
    pytest.importorskip("llguidance")
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": 7}}}]
    for choice in ("required", {"type": "function", "function": {"name": "f"}}):
        for stream in (False, True):
            with pytest.raises(api.InvalidRequestError) as info:
                scripted_model(["Hi."]).create_chat_completion(USER, tools=bad, tool_choice=choice, stream=stream)
            assert info.value.param == "tools" and "schema" in str(info.value)


def test_parallel_tool_calls_false_keeps_one_call():
    """``parallel_tool_calls=false`` (llama-server's default, sent by agent frameworks):
    a reply that writes two calls comes back with the first alone; true (OpenAI's
    default) keeps both."""
    two = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
           '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')
    weather = [{"role": "user", "content": "weather?"}]
    for parallel, cities in ((True, ["Paris", "Rome"]), (False, ["Paris"])):
        model = scripted_model([two, two])
        out = model.create_chat_completion(weather, tools=TOOLS, temperature=0, parallel_tool_calls=parallel)
        ChatCompletion.model_validate(out)
        calls = out["choices"][0]["message"]["tool_calls"]
        assert [json.loads(c["function"]["arguments"])["city"] for c in calls] == cities
        assert out["choices"][0]["finish_reason"] == "tool_calls"
        chunks = list(model.create_chat_completion(weather, tools=TOOLS, temperature=0, stream=True,
                                                   parallel_tool_calls=parallel))
        streamed = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
        assert [json.loads(c["function"]["arguments"])["city"] for c in streamed] == cities
    with pytest.raises(InvalidRequestError) as info:
        scripted_model(["Hi."]).create_chat_completion(USER, parallel_tool_calls="no")
    assert info.value.param == "parallel_tool_calls"


def test_bad_messages_and_prompts():
    model = scripted_model(["Hi."], max_seq_len=64)
    for messages in ([], "Hi", [{"role": "wizard", "content": "x"}], [{"role": "user", "content": 3}],
                     [{"role": "user"}],
                     [{"role": "system", "content": None}, {"role": "user", "content": "x"}]):
        with pytest.raises(InvalidRequestError, match="messages"):
            model.create_chat_completion(messages)
    with pytest.raises(InvalidRequestError, match="does not fit in the context of 64") as info:
        model.create_chat_completion([{"role": "user", "content": "x" * 100}])
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(InvalidRequestError) as info:
        model.create_completion("x" * 100)
    assert info.value.code == "context_length_exceeded"
    for prompt in ([10 ** 6], ["a", []], [["a"]], [1, "a"], [], "\ud800 lone surrogate"):
        with pytest.raises(InvalidRequestError, match="prompt") as info:
            model.create_completion(prompt)
        assert info.value.param == "prompt"
    # a streamed call checks before returning its iterator
    with pytest.raises(InvalidRequestError):
        model.create_chat_completion(USER, stream=True, temperature=-1)


def test_unconsumed_stream_does_not_block_other_calls():
    model = scripted_model(["Hi."] * 3)
    stream = model.create_chat_completion(USER, temperature=0, stream=True)
    next(stream)
    out = model.create_chat_completion(USER, temperature=0)  # a fresh context meanwhile
    assert out["choices"][0]["message"]["content"] == "Hi."
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in stream) == "Hi."


def test_a_dropped_stream_is_cleaned_up_before_the_shared_context_is_released():
    """A chat stream closed in the middle (a client gone) ends its turn, which rolls
    the context back to the rendered history; that must happen while the call still
    holds the model's shared context, not after another call may have taken it."""
    import threading

    model = scripted_model(["Hello world and more"])
    ctx = model.create_context()
    seen_at_release = []

    class RecordingLock:
        def __init__(self):
            self.lock = threading.Lock()

        def acquire(self, blocking=True):
            return self.lock.acquire(blocking)

        def release(self):
            seen_at_release.append(list(ctx.tokens))
            self.lock.release()

    api._shared[model] = (ctx, RecordingLock())
    stream = model.create_chat_completion(USER, temperature=0, stream=True)
    assert next(stream)["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert next(stream)["choices"][0]["delta"] == {"content": "Hello"}
    stream.close()
    assert seen_at_release == [ctx.tokens]
    assert ctx.tokens == chatml_ids(USER + [{"role": "assistant", "content": "Hello"}], False)


def test_completion_prompt_reads_special_token_texts():
    """A hand-formatted chat turn sent to /v1/completions: ``<|im_start|>`` and
    ``<|im_end|>`` are those tokens, as llama-server and llama-cpp-python tokenize a
    completion prompt (they were spelt out as text, 33 tokens instead of 16, and the
    model rambled past the turn).  The token count is the `tokenizers` library's with
    the two specials added; the completion of the chat template's rendering is the
    chat completion's reply."""
    from _tok_models import load_installed, metadata, smollm2_path, tokenizers_reference

    if smollm2_path() is None:
        pytest.skip("the default model is not installed")
    ref = tokenizers_reference(metadata(smollm2_path()))
    ref.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    question = "What is the capital of France?"
    prompt = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    with load_installed("smollm2") as model:
        out = model.create_completion(prompt, max_tokens=30, temperature=0)
        Completion.model_validate(out)
        assert out["usage"]["prompt_tokens"] == len(ref.encode(prompt).ids)
        assert out["choices"][0]["finish_reason"] == "stop"  # at <|im_end|>
        messages = [{"role": "user", "content": question}]
        rendered = model.create_completion(model.chat.render(messages), max_tokens=30, temperature=0)
        chat = model.create_chat_completion(messages, max_tokens=30, temperature=0)
    assert rendered["choices"][0]["finish_reason"] == chat["choices"][0]["finish_reason"]
    assert rendered["choices"][0]["text"] == chat["choices"][0]["message"]["content"]
    assert rendered["usage"]["prompt_tokens"] == chat["usage"]["prompt_tokens"]


def test_completion_of_a_list_of_prompts():
    """A list of prompts (strings or token-id lists), as OpenAI takes it and
    lm-evaluation-harness sends it (``[[ids]]``, ``echo``, ``logprobs=1``,
    ``max_tokens=1`` to score a text): prompt i's choice j at index ``i * n + j``, each
    the completion of that prompt alone, usage summed; streamed the same way, under one id."""
    from _tok_models import load_installed, smollm2_path

    if smollm2_path() is None:
        pytest.skip("the default model is not installed")
    prompts = ["The capital of France is", "One, two, three,"]
    with load_installed("smollm2") as model:
        alone = [model.create_completion(p, max_tokens=4, temperature=0.9, seed=4, n=2) for p in prompts]
        out = model.create_completion(prompts, max_tokens=4, temperature=0.9, seed=4, n=2)
        Completion.model_validate(out)
        expected = [(i * 2 + c["index"], c["text"]) for i, a in enumerate(alone) for c in a["choices"]]
        assert [(c["index"], c["text"]) for c in out["choices"]] == expected
        assert out["usage"]["prompt_tokens"] == sum(a["usage"]["prompt_tokens"] for a in alone)
        chunks = list(model.create_completion(prompts, max_tokens=4, temperature=0.9, seed=4, n=2, stream=True,
                                              stream_options={"include_usage": True}))
        for c in chunks:  # OpenAI streams null finish reasons, which its (non-stream) type does not allow
            Completion.model_validate(dict(c, choices=[dict(x, finish_reason="stop") for x in c["choices"]]))
        assert len({c["id"] for c in chunks}) == 1 and chunks[-1]["usage"] == out["usage"]
        texts: dict = {}
        for c in chunks[:-1]:
            for choice in c["choices"]:
                texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
        assert sorted(texts.items()) == expected
        ids = model.tokenizer.encode(prompts[1], add_special=True)
        scored = model.create_completion([ids], echo=True, logprobs=1, max_tokens=1, temperature=0)
        lp = scored["choices"][0]["logprobs"]
        assert len(lp["token_logprobs"]) == len(ids) + 1 and lp["token_logprobs"][0] is None
        assert scored["choices"][0]["text"].startswith(prompts[1])


def test_last_assistant_message_is_continued():
    """llama-server's prefill: a last assistant message is continued and the reply's
    content is what was added; one that cannot be continued is a 400."""
    model = scripted_model(["Paris is the capital of France."])
    out = model.create_chat_completion([{"role": "user", "content": "Capital?"},
                                        {"role": "assistant", "content": "Paris is"}], temperature=0)
    ChatCompletion.model_validate(out)
    assert out["choices"][0]["message"]["content"] == " the capital of France."
    for messages in ([{"role": "assistant", "content": "Paris"}],
                     [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}],
                     [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
                         {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]):
        with pytest.raises(InvalidRequestError) as info:
            model.create_chat_completion(messages)
        assert info.value.param == "messages"


def test_last_assistant_message_of_text_parts_is_continued():
    """OpenAI takes an assistant message's content as a list of text parts too: continued
    like the same text given as a string."""
    model = scripted_model(["Paris is the capital of France."] * 2)
    parts = [{"type": "text", "text": "Paris"}, {"type": "text", "text": " is"}]
    for stream in (False, True):
        out = model.create_chat_completion([{"role": "user", "content": "Capital?"},
                                            {"role": "assistant", "content": parts}], temperature=0, stream=stream)
        text = ("".join(c["choices"][0]["delta"].get("content") or "" for c in out) if stream
                else out["choices"][0]["message"]["content"])
        assert text == " the capital of France."


def test_embedding_of_text_utf8_cannot_encode_names_input():
    model = scripted_model(["Hi."])
    with pytest.raises(InvalidRequestError) as info:
        api.create_embedding(model, ["fine", "\ud800 lone surrogate"])
    assert info.value.param == "input"


@pytest.mark.parametrize("name", ["messages", "add_generation_prompt", "tools", "bos_token", "eos_token"])
def test_chat_template_kwargs_cannot_set_what_the_request_sets(name):
    """The template's messages, tools, generation prompt and special tokens come from the
    request and the model: a chat_template_kwargs key naming one is the client's error,
    named as chat_template_kwargs (it was a 400 about Chat.render's arguments, param
    messages, or for the tokens silently overridden)."""
    with pytest.raises(InvalidRequestError) as info:
        scripted_model(["Hi."]).create_chat_completion(USER, chat_template_kwargs={name: False})
    assert info.value.param == "chat_template_kwargs" and repr(name) in str(info.value)
    out = scripted_model(["Hi."]).create_chat_completion(USER, temperature=0,
                                                         chat_template_kwargs={"enable_thinking": False})
    assert out["choices"][0]["message"]["content"] == "Hi."
